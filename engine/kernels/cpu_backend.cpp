// The CPU backend's one instance; its kernels are in engine/kernels/<family>/cpu.cpp.
#include "engine/kernels/cpu_backend.h"

#include <cblas.h>

namespace gpulab {

Backend& cpuBackend() {
  static CpuBackend& backend = []() -> CpuBackend& {
    // The kernels split their GEMMs over the engine's threads (engine/core/parallel.h): OpenBLAS's own
    // would only spin beside them.
    openblas_set_num_threads(1);
    static CpuBackend b;
    return b;
  }();
  return backend;
}

}  // namespace gpulab
