#include "app/notebook/machine.h"

#include <QRegularExpression>

namespace gpulab::notebook {

std::optional<Machine> Machine::fromName(const QString& name) {
  if (name == "no-gpu") return Machine{Kind::NoGpu, false, 0};
  static const QRegularExpression sized("^gpu-([1-9][0-9]{0,3})gib$");
  const QRegularExpressionMatch m = sized.match(name);
  if (!m.hasMatch()) return std::nullopt;
  const int gib = m.captured(1).toInt();
  if (gib > 1024) return std::nullopt;
  return Machine{Kind::EmulatedGpu, true, std::int64_t{gib} << 30};
}

QString Machine::name() const {
  switch (kind) {
    case Kind::NoGpu: return "no-gpu";
    case Kind::EmulatedGpu: return QString("gpu-%1gib").arg(gpuMemoryBytes >> 30);
    case Kind::ThisMachine: break;
  }
  return {};
}

QString Machine::description() const {
  switch (kind) {
    case Kind::NoGpu: return "a machine without a GPU";
    case Kind::EmulatedGpu: return QString("a %1 GiB GPU (emulated)").arg(gpuMemoryBytes >> 30);
    case Kind::ThisMachine: break;
  }
  return "this machine";
}

void Machine::applyTo(QProcessEnvironment& env) const {
  env.remove("GPULAB_EMULATED_GPU_MEMORY");
  if (kind == Kind::ThisMachine) {
    env.insert("GPULAB_EMULATED_GPU", emulatedGpu ? "1" : "0");
    return;
  }
  env.insert("CUDA_VISIBLE_DEVICES", "");  // no real GPU: cuda:0 is what this machine says, or nothing
  env.insert("GPULAB_EMULATED_GPU", kind == Kind::EmulatedGpu ? "1" : "0");
  if (kind == Kind::EmulatedGpu) env.insert("GPULAB_EMULATED_GPU_MEMORY", QString::number(gpuMemoryBytes));
}

}  // namespace gpulab::notebook
