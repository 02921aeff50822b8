#pragma once
// The main window. For now it shows what the engine found (devices, or why there is no usable GPU)
// in its status bar and a welcome page; the lesson player arrives with issue #4.
#include <QMainWindow>

namespace gpulab::app {

class MainWindow final : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
};

}  // namespace gpulab::app
