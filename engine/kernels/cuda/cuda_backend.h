#pragma once
// The CUDA backend: one class, its methods defined by op family next to the CPU reference
// (engine/kernels/<family>/cuda.cu beside engine/kernels/<family>/cpu.cpp), every family dispatching
// dtypes through engine/core/dispatch.h and launching through engine/kernels/cuda/launch.cuh. Kernels
// load elements, compute in OpMath<T> (float for float16/bfloat16) and round once on store, and run
// on the device's compute stream. Internal to the CUDA module: ops reach it through
// backendFor(device), the module through cudaBackend(device) (engine/kernels/cuda/cuda_backend.cu).
#include <cstdint>
#include <vector>

#include "engine/kernels/backend.h"
#include "engine/kernels/cuda/cuda_context.h"

namespace gpulab {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  // elementwise/cuda.cu
  void fill(const Tensor& out, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void indexSelect(const Tensor& out, const Tensor& in, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                   std::int64_t inner) override;
  void indexAdd(const Tensor& gradIn, const Tensor& gradOut, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                std::int64_t inner) override;
  // reduce/cuda.cu
  void reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer,
              std::int64_t k, std::int64_t inner) override;
  // gemm/cuda.cu
  void gemm(DType dtype, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
            const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta, void* c, std::int64_t ldc,
            std::int64_t batch, std::int64_t strideA, std::int64_t strideB, std::int64_t strideC) override;
  // softmax/cuda.cu
  void softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) override;
  void softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows,
                       std::int64_t cols, bool log) override;
  // loss/cuda.cu
  void nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows, std::int64_t cols,
               double scale) override;
  void nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target, std::int64_t rows,
                       std::int64_t cols, double scale) override;
  void pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, double scale) override;
  void pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a, const Tensor& b,
                         double scale) override;
  // random/cuda.cu
  void uniform(const Tensor& out, double low, double high, fn::RandomCounters counters) override;
  void normal(const Tensor& out, double mean, double stddev, fn::RandomCounters counters) override;
  void randint(const Tensor& out, std::int64_t low, std::int64_t high, fn::RandomCounters counters) override;
  void dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, fn::RandomCounters counters) override;
  // optim/cuda.cu
  void sgdStep(const Tensor& param, const Tensor& grad, const Tensor* momentumBuffer, const SgdHyper& h) override;
  void adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq,
                const Tensor* maxExpAvgSq, const AdamHyper& h) override;
  void adamSteps(const std::vector<AdamTensors>& items) override;  // multi-tensor: many small tensors a launch
  // amp/cuda.cu
  void nonFiniteCheckAndUnscale(const std::vector<Tensor>& grads, const Tensor& counts, double invScale) override;
  // conv/cuda.cu: convolutions through cuDNN, pooling as plain kernels
  void conv2d(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
              const Conv2dShape& shape) override;
  void conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                           const Conv2dShape& shape) override;
  void conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                            const Conv2dShape& shape) override;
  void maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& shape) override;
  void maxPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Tensor& indices,
                         const Pool2dShape& shape) override;
  void avgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& shape) override;
  void avgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& shape) override;
  void adaptiveAvgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& shape) override;
  void adaptiveAvgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& shape) override;
  // norm/cuda.cu: batch normalisation through cuDNN (SPATIAL mode; (N, C) runs as (N, C, 1, 1))
  void batchNorm(const Tensor& out, const Tensor& input, const Tensor* weight, const Tensor* bias,
                 const Tensor* runningMean, const Tensor* runningVar, const Tensor* saveMean, const Tensor* saveInvStd,
                 bool training, const BatchNormShape& shape) override;
  void batchNormBackward(const Tensor& gradInput, const Tensor* gradWeight, const Tensor* gradBias,
                         const Tensor& gradOut, const Tensor& input, const Tensor* weight, const Tensor& saveMean,
                         const Tensor& saveInvStd, const BatchNormShape& shape) override;

  int device() const { return device_; }

 private:
  // This backend's device context (its compute stream, cuBLAS and cuDNN handles); also makes the device current.
  cuda::DeviceContext& ctx() const { return cuda::context(device_); }

  int device_;
};

// The backend of the engine's cuda:device (created on first use, alive until the process ends).
Backend& cudaBackend(int device);

}  // namespace gpulab
