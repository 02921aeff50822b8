#include <QApplication>

#include "app/gui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("GPU Lab");
  QApplication::setOrganizationName("GPU Lab");
  gpulab::app::MainWindow window;
  window.show();
  return QApplication::exec();
}
