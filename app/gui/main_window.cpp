#include "app/gui/main_window.h"

#include <QLabel>
#include <QStatusBar>
#include <QVBoxLayout>

#include "engine/core/allocator.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::app {

namespace {
QString deviceSummary() {
  const cuda::Availability a = cuda::availability();
  if (!a.usable) return QString("CPU — no usable GPU: %1").arg(QString::fromStdString(a.reason));
  const auto& d = a.devices.front();
  return QString("GPU cuda:0 — %1, %2").arg(QString::fromStdString(d.name), QString::fromStdString(formatBytes(static_cast<std::int64_t>(d.total_memory))));
}
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("GPU Lab");
  auto* page = new QWidget(this);
  auto* layout = new QVBoxLayout(page);
  auto* title = new QLabel("<h1>GPU Lab</h1><p>Guided lessons on GPU acceleration for deep learning, run for real on "
                           "GPU Lab's own CUDA engine — or on its CPU backend when there is no GPU.</p>", page);
  title->setWordWrap(true);
  layout->addWidget(title);
  layout->addStretch();
  setCentralWidget(page);
  statusBar()->showMessage(deviceSummary());
  resize(1280, 800);
}

}  // namespace gpulab::app
