#include "app/gui/main_window.h"

#include <QLabel>
#include <QStatusBar>
#include <QTextBrowser>
#include <QThread>
#include <QVBoxLayout>

#include "engine/memory/memory.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::app {

namespace {

QString versionStr(int v) { return v ? QString("%1.%2").arg(v / 1000).arg((v % 1000) / 10) : QString("none"); }
QString bytes(std::size_t b) { return QString::fromStdString(formatBytes(static_cast<std::int64_t>(b))); }

QString statusText(const cuda::Availability& a) {
  if (!a.usable) return QString("CPU — no usable GPU: %1").arg(QString::fromStdString(a.reason));
  const auto& d = a.devices.front();
  return QString("GPU cuda:0 — %1, %2").arg(QString::fromStdString(d.name), bytes(d.total_memory));
}

// What the engine found, as the first lesson will explain it: the devices, and why not a GPU.
QString devicesHtml(const cuda::Availability& a) {
  QString html = "<h2>Devices</h2><table cellpadding='4'>";
  html += QString("<tr><td><b>cpu</b></td><td>%1 cores — always available</td></tr>").arg(QThread::idealThreadCount());
  for (const auto& d : a.devices) {
    html += QString("<tr><td><b>cuda:%1</b></td><td>%2 — compute capability %3.%4, %5 SMs, %6 memory (%7 free)</td></tr>")
                .arg(d.index).arg(QString::fromStdString(d.name).toHtmlEscaped()).arg(d.major).arg(d.minor)
                .arg(d.multiprocessor_count).arg(bytes(d.total_memory), bytes(d.free_memory));
  }
  html += "</table>";
  if (a.compiled) {
    html += QString("<p>CUDA driver %1, runtime %2, cuBLAS %3, cuDNN %4; CUDA_VISIBLE_DEVICES %5</p>")
                .arg(versionStr(a.driver_version), versionStr(a.runtime_version)).arg(a.cublas_version).arg(a.cudnn_version)
                .arg(QString::fromStdString(a.cuda_visible_devices).toHtmlEscaped());
  }
  if (!a.usable) {
    html += QString("<p><b>No usable GPU:</b> %1.<br>Every lesson runs on the CPU backend instead, and says so.</p>")
                .arg(QString::fromStdString(a.reason).toHtmlEscaped());
  }
  html += QString("<p>Default device: <code>%1</code> — what <code>torch.device('cuda' if torch.cuda.is_available() else 'cpu')</code> "
                  "would pick.</p>").arg(QString::fromStdString(defaultDevice().str()));
  return html;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("GPU Lab");
  const cuda::Availability a = cuda::availability();
  auto* page = new QWidget(this);
  auto* layout = new QVBoxLayout(page);
  auto* title = new QLabel("<h1>GPU Lab</h1><p>Guided lessons on GPU acceleration for deep learning, run for real on "
                           "GPU Lab's own CUDA engine — or on its CPU backend when there is no GPU.</p>", page);
  title->setWordWrap(true);
  layout->addWidget(title);
  auto* devices = new QTextBrowser(page);
  devices->setHtml(devicesHtml(a));
  layout->addWidget(devices, 1);
  setCentralWidget(page);
  statusBar()->showMessage(statusText(a));
  resize(1280, 800);
}

}  // namespace gpulab::app
