#include "app/notebook/python_environment.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>

namespace gpulab::notebook {

QByteArray pythonExecutable() {
  return qEnvironmentVariableIsSet("GPULAB_PYTHON") ? qgetenv("GPULAB_PYTHON") : QByteArray("/usr/bin/python3");
}

QString buildTreePackageDir() {
  const QString dir = QDir(QCoreApplication::applicationDirPath() + "/../python").canonicalPath();
  return !dir.isEmpty() && QFileInfo::exists(dir + "/gpulab/__init__.py") ? dir : QString();
}

QByteArray pythonPathWithPackage(const QByteArray& existing) {
  const QString dir = buildTreePackageDir();
  if (dir.isEmpty()) return existing;
  return existing.isEmpty() ? dir.toLocal8Bit() : dir.toLocal8Bit() + ":" + existing;
}

QProcessEnvironment pythonEnvironment(const Machine& machine) {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  const QByteArray path = pythonPathWithPackage(env.value("PYTHONPATH").toLocal8Bit());
  if (!path.isEmpty()) env.insert("PYTHONPATH", QString::fromLocal8Bit(path));
  machine.applyTo(env);
  return env;
}

QProcessEnvironment pythonEnvironment(bool emulatedGpu) { return pythonEnvironment(Machine::thisMachine(emulatedGpu)); }

}  // namespace gpulab::notebook
