// The CPU backend's one instance; its kernels are in engine/kernels/<family>/cpu.cpp.
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

Backend& cpuBackend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace gpulab
