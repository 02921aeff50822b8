#pragma once
// What this CPU can run, from CPUID and from what the operating system saves on a context switch
// (XGETBV): an instruction set counts only when both say yes. On other architectures, all false.
namespace gpulab {

struct CpuFeatures {
  bool avx = false, fma = false, f16c = false, avx2 = false;
  bool avx512 = false;  // AVX-512 F, DQ, BW and VL: what OpenBLAS's SkylakeX kernels need
  // AVX2 with FMA: what the CPU kernels' target("avx2,fma") loops and OpenBLAS's Haswell kernels need.
  bool avx2Fma() const { return avx2 && fma; }
};

// Detected once, on first use.
const CpuFeatures& cpuFeatures();

}  // namespace gpulab
