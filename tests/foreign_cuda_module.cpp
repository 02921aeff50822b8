// A CUDA module from another build of GPU Lab, for test_device_runtime (issue 48, 1.4). It is compiled
// from copies of the engine's headers with one line added to engine/kernels/backend.h, as a build whose
// Backend differs would be, and has the build id those copies derive (tests/cuda_module_build_id_test.cmake,
// MODE=foreign): the loader must refuse it and name both builds. Its entry points are the real module's
// (engine/runtime/cuda_runtime_gpu.cpp); it needs no CUDA, so the refusal is tested in every configuration.
#include <cstring>

#include "engine/runtime/cuda_module.h"

#if GPULAB_MODULE_NAMES_NO_BUILD
// Built so (gpulab_old_cuda_module), it is a module from before the id was derived: no build id entry
// point, and the hand-written id that guarded its table then.
namespace {
constexpr const char* kBuildId = GPULAB_VERSION_STRING "/abi9";
}
#else
#include "gpulab/cuda_module_build_id.h"  // the foreign copies' id
namespace {
constexpr const char* kBuildId = gpulab::cuda::kModuleBuildId;
}
extern "C" const char* gpulab_cuda_module_build_id() { return kBuildId; }
#endif

// As the real module does: a table only for an engine of its own build. There is nothing behind it
// (every entry null), as there is nothing right behind a real module's from another build; an engine
// that accepts it fails at its first call.
extern "C" const gpulab::cuda::ModuleApi* gpulab_cuda_module_api(int abiVersion, const char* buildId) {
  using namespace gpulab::cuda;
  if (abiVersion != kModuleAbiVersion || std::strcmp(buildId, kBuildId) != 0) return nullptr;
  static const ModuleApi api{kModuleAbiVersion};
  return &api;
}
