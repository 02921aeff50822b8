// The emulated GPU's kernels: the CPU backend's, queued on the current stream of the emulated device
// (engine/runtime/emulated_streams.h) instead of run at once -- as a CUDA kernel launch queues work
// and returns.
//
// A queued kernel holds its tensors borrowed (Storage::borrow), not owned: the host may drop a tensor
// right after the op that used it, and its block goes back to the caching allocator at once, as on
// CUDA. That is safe by the allocator's stream rule -- the block is handed out again only for work on
// the same stream, which runs after this kernel -- and memory_allocated() reads the same numbers it
// would on a GPU, not numbers inflated by kernels still waiting in the queue. Scalars and
// hyper-parameters are copied into the task.
#include <optional>
#include <utility>

#include "engine/kernels/backend.h"
#include "engine/core/storage.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/emulated_streams.h"
#include "engine/runtime/stream.h"

namespace gpulab::cuda {
namespace {

// A view of `t` over the same bytes that frees nothing, seen as a CPU tensor by the CPU kernels (see
// Storage::borrow: their scratch memory comes from the CPU's allocator).
Tensor borrow(const Tensor& t) {
  if (!t.defined()) return t;
  auto impl = std::make_shared<TensorImpl>();
  if (t.implPtr()->storage) impl->storage = Storage::borrow(*t.implPtr()->storage, kCPU);
  impl->sizes = t.sizes();
  impl->strides = t.strides();
  impl->offset = t.implPtr()->offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}
std::optional<Tensor> borrow(const Tensor* t) { return t ? std::optional<Tensor>(borrow(*t)) : std::nullopt; }
const Tensor* ptr(const std::optional<Tensor>& t) { return t ? &*t : nullptr; }
std::vector<Tensor> borrow(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(borrow(t));
  return out;
}

class EmulatedGpuBackend final : public Backend {
 public:
  void fill(const Tensor& out, double value) override {
    submit([o = borrow(out), value] { cpu().fill(o, value); });
  }
  void arange(const Tensor& out, double start, double step) override {
    submit([o = borrow(out), start, step] { cpu().arange(o, start, step); });
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    submit([d = borrow(dst), s = borrow(src)] { cpu().copy(d, s); });
  }
  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override {
    submit([op, o = borrow(out), i = borrow(in)] { cpu().unary(op, o, i); });
  }
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    submit([op, o = borrow(out), x = borrow(a), y = borrow(b)] { cpu().binary(op, o, x, y); });
  }
  void binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) override {
    submit([op, o = borrow(out), x = borrow(a), s, scalarFirst] { cpu().binaryScalar(op, o, x, s, scalarFirst); });
  }
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    submit([o = borrow(out), c = borrow(cond), x = borrow(a), y = borrow(b)] { cpu().where(o, c, x, y); });
  }
  void indexSelect(const Tensor& out, const Tensor& in, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                   std::int64_t inner) override {
    submit([=, o = borrow(out), i = borrow(in), idx = borrow(index)] { cpu().indexSelect(o, i, idx, outer, dimSize, inner); });
  }
  void indexAdd(const Tensor& gradIn, const Tensor& gradOut, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                std::int64_t inner) override {
    submit([=, g = borrow(gradIn), go = borrow(gradOut), idx = borrow(index)] { cpu().indexAdd(g, go, idx, outer, dimSize, inner); });
  }
  void reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer,
              std::int64_t k, std::int64_t inner) override {
    submit([=, o = borrow(out), idx = borrow(indices), i = borrow(in)] { cpu().reduce(op, o, ptr(idx), i, outer, k, inner); });
  }
  void gemm(DType dtype, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
            const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta, void* c, std::int64_t ldc,
            std::int64_t batch, std::int64_t strideA, std::int64_t strideB, std::int64_t strideC) override {
    // Raw pointers into blocks of this device: the stream rule keeps them valid until the product runs.
    submit([=] {
      cpu().gemm(dtype, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, strideA, strideB, strideC);
    });
  }
  void softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) override {
    submit([=, o = borrow(out), i = borrow(in)] { cpu().softmax(o, i, rows, cols, log); });
  }
  void softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows,
                       std::int64_t cols, bool log) override {
    submit([=, gi = borrow(gradIn), go = borrow(gradOut), o = borrow(out)] { cpu().softmaxBackward(gi, go, o, rows, cols, log); });
  }
  void nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows, std::int64_t cols,
               double scale) override {
    // An out-of-range label throws on the stream's thread and is reported at the next synchronisation,
    // as CUDA reports a device-side assert.
    submit([=, o = borrow(out), l = borrow(logp), t = borrow(target)] { cpu().nllLoss(o, l, t, rows, cols, scale); });
  }
  void nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target, std::int64_t rows,
                       std::int64_t cols, double scale) override {
    submit([=, g = borrow(gradLogp), go = borrow(gradOut), t = borrow(target)] {
      cpu().nllLossBackward(g, go, t, rows, cols, scale);
    });
  }
  void pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, double scale) override {
    submit([=, o = borrow(out), x = borrow(a), y = borrow(b)] { cpu().pointLoss(kind, o, x, y, scale); });
  }
  void pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a, const Tensor& b,
                         double scale) override {
    submit([=, g = borrow(gradA), go = borrow(gradOut), x = borrow(a), y = borrow(b)] {
      cpu().pointLossBackward(kind, g, go, x, y, scale);
    });
  }
  void uniform(const Tensor& out, double low, double high, fn::RandomCounters counters) override {
    submit([=, o = borrow(out)] { cpu().uniform(o, low, high, counters); });
  }
  void normal(const Tensor& out, double mean, double stddev, fn::RandomCounters counters) override {
    submit([=, o = borrow(out)] { cpu().normal(o, mean, stddev, counters); });
  }
  void randint(const Tensor& out, std::int64_t low, std::int64_t high, fn::RandomCounters counters) override {
    submit([=, o = borrow(out)] { cpu().randint(o, low, high, counters); });
  }
  void dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, fn::RandomCounters counters) override {
    submit([=, o = borrow(out), m = borrow(mask), i = borrow(in)] { cpu().dropout(o, m, i, p, counters); });
  }
  void sgdStep(const Tensor& param, const Tensor& grad, const Tensor* momentumBuffer, const SgdHyper& h) override {
    submit([h, p = borrow(param), g = borrow(grad), m = borrow(momentumBuffer)] { cpu().sgdStep(p, g, ptr(m), h); });
  }
  void adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq,
                const Tensor* maxExpAvgSq, const AdamHyper& h) override {
    submit([h, p = borrow(param), g = borrow(grad), m = borrow(expAvg), v = borrow(expAvgSq), mx = borrow(maxExpAvgSq)] {
      cpu().adamStep(p, g, m, v, ptr(mx), h);
    });
  }
  void adamSteps(const std::vector<AdamTensors>& items) override {
    // One task for the whole model, as the CUDA backend updates every parameter in one launch.
    struct Item {
      Tensor param, grad, expAvg, expAvgSq;
      std::optional<Tensor> maxExpAvgSq;
      AdamHyper hyper;
    };
    std::vector<Item> held;
    held.reserve(items.size());
    for (const AdamTensors& t : items) {
      held.push_back({borrow(*t.param), borrow(*t.grad), borrow(*t.expAvg), borrow(*t.expAvgSq), borrow(t.maxExpAvgSq), t.hyper});
    }
    if (held.empty()) return;
    submit([held = std::move(held)] {
      for (const Item& t : held) cpu().adamStep(t.param, t.grad, t.expAvg, t.expAvgSq, ptr(t.maxExpAvgSq), t.hyper);
    });
  }
  void nonFiniteCheckAndUnscale(const std::vector<Tensor>& grads, const Tensor& counts, double invScale) override {
    submit([gs = borrow(grads), c = borrow(counts), invScale] { cpu().nonFiniteCheckAndUnscale(gs, c, invScale); });
  }
  void conv2d(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
              const Conv2dShape& shape) override {
    submit([shape, o = borrow(out), i = borrow(input), w = borrow(weight), b = borrow(bias)] { cpu().conv2d(o, i, w, ptr(b), shape); });
  }
  void conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                           const Conv2dShape& shape) override {
    submit([shape, gi = borrow(gradInput), go = borrow(gradOut), w = borrow(weight)] {
      cpu().conv2dBackwardInput(gi, go, w, shape);
    });
  }
  void conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                            const Conv2dShape& shape) override {
    submit([shape, gw = borrow(gradWeight), go = borrow(gradOut), i = borrow(input)] {
      cpu().conv2dBackwardWeight(gw, go, i, shape);
    });
  }
  void maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& shape) override {
    submit([shape, o = borrow(out), idx = borrow(indices), i = borrow(input)] { cpu().maxPool2d(o, idx, i, shape); });
  }
  void maxPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Tensor& indices,
                         const Pool2dShape& shape) override {
    submit([shape, gi = borrow(gradInput), go = borrow(gradOut), idx = borrow(indices)] {
      cpu().maxPool2dBackward(gi, go, idx, shape);
    });
  }
  void avgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& shape) override {
    submit([shape, o = borrow(out), i = borrow(input)] { cpu().avgPool2d(o, i, shape); });
  }
  void avgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& shape) override {
    submit([shape, gi = borrow(gradInput), go = borrow(gradOut)] { cpu().avgPool2dBackward(gi, go, shape); });
  }
  void adaptiveAvgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& shape) override {
    submit([shape, o = borrow(out), i = borrow(input)] { cpu().adaptiveAvgPool2d(o, i, shape); });
  }
  void adaptiveAvgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& shape) override {
    submit([shape, gi = borrow(gradInput), go = borrow(gradOut)] { cpu().adaptiveAvgPool2dBackward(gi, go, shape); });
  }
  void batchNorm(const Tensor& out, const Tensor& input, const Tensor* weight, const Tensor* bias,
                 const Tensor* runningMean, const Tensor* runningVar, const Tensor* saveMean, const Tensor* saveInvStd,
                 bool training, const BatchNormShape& shape) override {
    submit([=, o = borrow(out), i = borrow(input), w = borrow(weight), b = borrow(bias), rm = borrow(runningMean),
                 rv = borrow(runningVar), sm = borrow(saveMean), si = borrow(saveInvStd)] {
      cpu().batchNorm(o, i, ptr(w), ptr(b), ptr(rm), ptr(rv), ptr(sm), ptr(si), training, shape);
    });
  }
  void batchNormBackward(const Tensor& gradInput, const Tensor* gradWeight, const Tensor* gradBias,
                         const Tensor& gradOut, const Tensor& input, const Tensor* weight, const Tensor& saveMean,
                         const Tensor& saveInvStd, const BatchNormShape& shape) override {
    submit([shape, gi = borrow(gradInput), gw = borrow(gradWeight), gb = borrow(gradBias), go = borrow(gradOut),
                       i = borrow(input), w = borrow(weight), sm = borrow(saveMean), si = borrow(saveInvStd)] {
      cpu().batchNormBackward(gi, ptr(gw), ptr(gb), go, i, ptr(w), sm, si, shape);
    });
  }

 private:
  static Backend& cpu() { return cpuBackend(); }
  // Queued on this thread's current stream of the emulated GPU.
  template <class F>
  static void submit(F&& task) {
    emulated::enqueue(currentStreamId(*emulatedDevice()), std::forward<F>(task));
  }
};

}  // namespace

Backend& emulatedGpuBackend() {
  static EmulatedGpuBackend backend;
  return backend;
}

}  // namespace gpulab::cuda
