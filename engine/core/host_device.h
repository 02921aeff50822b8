#pragma once
// GPULAB_HD marks code compiled for both the host and the GPU: __host__ __device__ under nvcc, plain
// inline C++ elsewhere. The math and the element types are written once with it, so the CPU tests
// cover the math and the GPU tests cover the launches.
#if defined(__CUDACC__)
#define GPULAB_HD __host__ __device__ __forceinline__
#else
#define GPULAB_HD inline
#endif
