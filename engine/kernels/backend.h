#pragma once
// The kernels one device type provides. The op layer (engine/ops) does shapes, broadcasting,
// dtype promotion, device checks and autograd; a Backend only computes. The CPU backend is the
// reference for every CUDA kernel: tests run each primitive on both and compare.
//
// The implementations live by op family, the CPU reference beside the CUDA kernels:
//   engine/kernels/<family>/cpu.cpp   engine/kernels/<family>/cuda.cu
// (elementwise, index, reduce, softmax, loss, gemm, random, optim, amp, conv, norm), each dispatching
// dtypes through engine/core/dispatch.h. A new dtype touches the families that compute in it. A new
// kernel touches this interface, its family's two files and the emulated GPU's queueing of the CPU's
// kernels (engine/runtime/emulated_backend.cpp); an op also needs its function, and a differentiable
// one its backward, in engine/ops.
//
// Conventions: `out` tensors are freshly allocated and contiguous; inputs are contiguous unless a
// primitive says it takes strided views; all tensors passed to one call live on this backend's
// device and, unless a primitive says otherwise, have one dtype: any floating dtype (float32,
// float64, float16, bfloat16), computed in float for the 16-bit ones and rounded once on store.
#include <cstdint>
#include <vector>

#include "engine/kernels/functors.h"
#include "engine/core/tensor.h"

namespace gpulab {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual void fill(const Tensor& out, double value) = 0;  // any dtype, bool included
  virtual void arange(const Tensor& out, double start, double step) = 0;
  // dst and src have the same shape and any strides; converts between any two dtypes (to bool: x != 0).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;

  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& in) = 0;
  // a and b are strided views already expanded to out's shape (stride 0 on broadcast dims);
  // any dtype (all three the same).
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out = op(a, s) or, with scalarFirst, op(s, a).
  virtual void binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) = 0;
  // torch.where: out[i] = cond[i] ? a[i] : b[i], all four contiguous with out's numel; cond bool, a, b
  // and out of one dtype (bool included). The value not chosen is never read into the result, so an
  // inf or NaN there does not leak (a * mask + b * (1 - mask) would).
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;

  // ---- index family (engine/kernels/index/): `in` (contiguous) viewed as (outer, dimSize, inner),
  // `index` int64 (n) with every value in [0, dimSize) (the op checks), out (outer, n, inner):
  // out[o, j, :] = in[o, index[j], :] (index_select; any dtype, bool included).
  virtual void indexSelect(const Tensor& out, const Tensor& in, const Tensor& index, std::int64_t outer,
                           std::int64_t dimSize, std::int64_t inner) = 0;
  // Its backward: gradIn[o, index[j], :] += gradOut[o, j, :] (index_add_; repeated indices sum), into
  // gradIn zeroed by the caller. float32 and float64 on every backend; the CPU takes any floating dtype.
  virtual void indexAdd(const Tensor& gradIn, const Tensor& gradOut, const Tensor& index, std::int64_t outer,
                        std::int64_t dimSize, std::int64_t inner) = 0;

  // Reduces the middle axis of `in` viewed as (outer, k, inner) into `out` (outer, inner); for Max,
  // `indices` (int64, optional) receives the argmax. Any dtype; sums of 16-bit types accumulate in float.
  virtual void reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in,
                      std::int64_t outer, std::int64_t k, std::int64_t inner) = 0;

  // Row-major C = alpha * op(A) @ op(B) + beta * C, `batch` times with the given element strides;
  // A, B and C of `dtype`. float16/bfloat16 multiply with float32 accumulation (tensor cores on a
  // GPU); float32 on a GPU uses TF32 tensor cores only when allowTf32() says so (off, as PyTorch;
  // convolutions follow cudnnAllowTf32() instead, on by default, also as PyTorch).
  virtual void gemm(DType dtype, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k,
                    double alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta,
                    void* c, std::int64_t ldc, std::int64_t batch = 1, std::int64_t strideA = 0,
                    std::int64_t strideB = 0, std::int64_t strideC = 0) = 0;

  // Row-wise (log-)softmax of a (rows, cols) matrix and its backward given the forward output.
  virtual void softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) = 0;
  virtual void softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows,
                               std::int64_t cols, bool log) = 0;

  // out[0] = scale * sum_i -logp[i, target[i]] (target int64). Throws IndexError for a target outside [0, cols).
  virtual void nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows,
                       std::int64_t cols, double scale) = 0;
  // gradLogp = 0 except gradLogp[i, target[i]] = -scale * gradOut[0].
  virtual void nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target, std::int64_t rows,
                               std::int64_t cols, double scale) = 0;

  // out[0] = scale * sum_i loss(a_i - b_i); gradA_i = scale * gradOut[0] * loss'(a_i - b_i).
  virtual void pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, double scale) = 0;
  virtual void pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a,
                                 const Tensor& b, double scale) = 0;

  // Random fills from the counter-based generator (element i uses counter offset + i; the counters
  // are resolved when the kernel runs, fn::RandomCounters).
  virtual void uniform(const Tensor& out, double low, double high, fn::RandomCounters counters) = 0;
  virtual void normal(const Tensor& out, double mean, double stddev, fn::RandomCounters counters) = 0;
  virtual void randint(const Tensor& out, std::int64_t low, std::int64_t high, fn::RandomCounters counters) = 0;  // int64 or floating
  // mask = keep ? 1/(1-p) : 0; out = in * mask.
  virtual void dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, fn::RandomCounters counters) = 0;

  // Fused optimizer updates, in place (state in the parameter's dtype, math in OpMath): one parameter
  // tensor...
  virtual void sgdStep(const Tensor& param, const Tensor& grad, const Tensor* momentumBuffer, const SgdHyper& h) = 0;
  // maxExpAvgSq: amsgrad's max_exp_avg_sq, null without amsgrad.
  virtual void adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq,
                        const Tensor* maxExpAvgSq, const AdamHyper& h) = 0;
  // ... or all of a model's at once (PyTorch's foreach/fused optimizers): the CUDA backend updates many
  // small tensors in one launch, where launch overhead would otherwise dominate. By default, one by one.
  struct AdamTensors {
    const Tensor* param;
    const Tensor* grad;
    const Tensor* expAvg;
    const Tensor* expAvgSq;
    const Tensor* maxExpAvgSq;  // null without amsgrad
    AdamHyper hyper;
  };
  virtual void adamSteps(const std::vector<AdamTensors>& items) {
    for (const AdamTensors& t : items) adamStep(*t.param, *t.grad, *t.expAvg, *t.expAvgSq, t.maxExpAvgSq, t.hyper);
  }

  // GradScaler's fused check, torch._amp_foreach_non_finite_check_and_unscale_ plus what a lesson
  // plots: for every gradient (any floating dtype, contiguous), counts[0] += its inf/NaN values and
  // counts[1] += its values that are exactly zero (both counted before scaling), then g *= invScale
  // in place. `counts` is int64 with 2 elements on this device; nothing is synchronised.
  virtual void nonFiniteCheckAndUnscale(const std::vector<Tensor>& grads, const Tensor& counts, double invScale) = 0;

  // ---- conv family (engine/kernels/conv/): 2-D convolution and pooling, NCHW, contiguous tensors of
  // one floating dtype. The CPU computes convolutions as im2col + GEMM (OpenBLAS); CUDA through cuDNN.
  struct Conv2dShape {
    std::int64_t batch, inChannels, inH, inW;      // input (N, C, H, W)
    std::int64_t outChannels, kernelH, kernelW;    // weight (K, C / groups, R, S)
    std::int64_t outH, outW;                       // output (N, K, OH, OW)
    std::int64_t strideH, strideW, padH, padW, dilationH, dilationW, groups;
  };
  // out = conv2d(input, weight) + bias (bias: (K) or null).
  virtual void conv2d(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
                      const Conv2dShape& shape) = 0;
  // gradInput = d loss / d input (cuDNN's backward data); overwritten, not accumulated.
  virtual void conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                                   const Conv2dShape& shape) = 0;
  // gradWeight = d loss / d weight (cuDNN's backward filter); overwritten.
  virtual void conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                                    const Conv2dShape& shape) = 0;

  struct Pool2dShape {
    std::int64_t batch, channels, inH, inW, outH, outW;
    std::int64_t kernelH, kernelW, strideH, strideW, padH, padW, dilationH, dilationW;
    bool countIncludePad = true;  // avg_pool2d's count_include_pad (PyTorch's default: true)
  };
  // max_pool2d: out (N, C, OH, OW) and indices (int64, the argmax's flat index h * W + w within its
  // input plane, as PyTorch's return_indices); padding counts as -inf. Backward scatters gradOut into
  // gradInput (zeroed first) at the indices.
  virtual void maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& shape) = 0;
  virtual void maxPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Tensor& indices,
                                 const Pool2dShape& shape) = 0;
  // avg_pool2d; the divisor is the window's size, or with !countIncludePad the part of it inside the input.
  virtual void avgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& shape) = 0;
  virtual void avgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& shape) = 0;
  // adaptive_avg_pool2d: output cell (i, j) averages input rows [floor(i H / OH), ceil((i + 1) H / OH))
  // and the columns likewise, PyTorch's windows (only inH/inW/outH/outW/batch/channels of `shape` are used).
  virtual void adaptiveAvgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& shape) = 0;
  virtual void adaptiveAvgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& shape) = 0;

  // ---- norm family (engine/kernels/norm/): batch normalisation over (N, C, H, W) or (N, C), per channel.
  // Training: batch statistics -- saveMean[c] and saveInvStd[c] = 1 / sqrt(biased var + eps) are
  // written for backward, and runningMean/runningVar (when given) move by `momentum` towards the batch
  // mean and the unbiased variance, as PyTorch's. Eval: the running statistics normalise. weight/bias
  // (gamma/beta) may be null (affine=false). Statistics (saveMean, saveInvStd, running stats, weight,
  // bias) are float32 for a 16-bit input (cuDNN's and PyTorch's rule), the input's dtype otherwise.
  struct BatchNormShape {
    std::int64_t batch, channels, spatial;  // spatial = H * W (1 for 2-D input)
    double eps = 1e-5, momentum = 0.1;
  };
  virtual void batchNorm(const Tensor& out, const Tensor& input, const Tensor* weight, const Tensor* bias,
                         const Tensor* runningMean, const Tensor* runningVar, const Tensor* saveMean,
                         const Tensor* saveInvStd, bool training, const BatchNormShape& shape) = 0;
  // Gradients of a training-mode batch norm (gradWeight/gradBias may be null when not needed).
  virtual void batchNormBackward(const Tensor& gradInput, const Tensor* gradWeight, const Tensor* gradBias,
                                 const Tensor& gradOut, const Tensor& input, const Tensor* weight,
                                 const Tensor& saveMean, const Tensor& saveInvStd, const BatchNormShape& shape) = 0;
};

Backend& cpuBackend();
// backendFor(device), which maps a device to its runtime's backend, is the runtime's
// (engine/runtime/device_runtime.h).

}  // namespace gpulab
