#include "engine/runtime/blas_kernels.h"

#include <cblas.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string_view>

namespace gpulab {

namespace {

// Set in the environment of the re-executed program: the core OpenBLAS had first chosen, for the
// summary line (and a guard: a program started with it never re-executes).
constexpr const char* kChosenFrom = "GPULAB_BLAS_CORE_WAS";

bool isGenericCore(std::string_view name) {
  constexpr std::array<std::string_view, 15> kGeneric{"Prescott", "Core2",    "Penryn",   "Dunnington", "Nehalem",
                                                     "Atom",     "Katmai",   "Coppermine", "Northwood", "Banias",
                                                     "Athlon",   "Opteron",  "Opteron_SSE3", "Barcelona", "Nano"};
  for (std::string_view g : kGeneric)
    if (name == g) return true;
  return false;
}

}  // namespace

std::string blasCoreName() {
  const char* name = openblas_get_corename();
  return name ? std::string(name) : std::string();
}

std::string betterBlasCore(const std::string& corename, const CpuFeatures& f) {
  if (!isGenericCore(corename)) return {};
  if (f.avx512 && f.avx2Fma()) return "SkylakeX";
  if (f.avx2Fma()) return "Haswell";
  if (f.avx) return "Sandybridge";
  return {};
}

void ensureBestBlasKernels(char** argv) {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if ((set && *set) || std::getenv(kChosenFrom) || !argv || !argv[0]) return;
  // GPULAB_BLAS_PRETEND_CORE: the tests' way to play a CPU that OpenBLAS does not know (the re-exec is
  // then real; only OpenBLAS's first choice is pretended). Cleared for the second run.
  const char* pretend = std::getenv("GPULAB_BLAS_PRETEND_CORE");
  const std::string current = pretend ? std::string(pretend) : blasCoreName();
  const std::string better = betterBlasCore(current, cpuFeatures());
  if (better.empty()) return;
  const std::string pretended = pretend ? pretend : "";
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv(kChosenFrom, current.c_str(), 1);
  unsetenv("GPULAB_BLAS_PRETEND_CORE");
  execv("/proc/self/exe", argv);
  // Still here: the exec failed. Go on with the kernels this process has, and leave the environment
  // as it was for the programs it starts.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChosenFrom);
  if (!pretended.empty()) setenv("GPULAB_BLAS_PRETEND_CORE", pretended.c_str(), 1);
}

std::string blasKernelsSummary() {
  const char* config = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  std::string version = config ? std::string(config) : std::string("OpenBLAS");
  if (const auto space = version.find(' ', version.find(' ') + 1); space != std::string::npos) version.resize(space);
  std::string line = version + " kernels: " + blasCoreName();
  if (const char* was = std::getenv(kChosenFrom)) {
    line += std::string(" (chosen by GPU Lab: OpenBLAS took ") + was + " for this CPU)";
  } else if (std::getenv("OPENBLAS_CORETYPE")) {
    line += " (OPENBLAS_CORETYPE is set)";
  }
  return line;
}

}  // namespace gpulab
