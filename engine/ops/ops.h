#pragma once
// The functional API: PyTorch's torch.* and torch.nn.functional.* names. Every op checks that its
// tensors share one device (throwing DeviceMismatchError otherwise), computes through the device's
// Backend, and records its backward for autograd.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/generator.h"
#include "engine/core/tensor.h"

namespace gpulab {

struct Options {
  DType dtype = kFloat32;
  Device device = kCPU;
  bool requires_grad = false;
};

// Factories.
Tensor zeros(const Shape& shape, const Options& options = {});
Tensor ones(const Shape& shape, const Options& options = {});
Tensor full(const Shape& shape, double value, const Options& options = {});
Tensor arange(double end, const Options& options = {});
Tensor arange(double start, double end, double step = 1.0, const Options& options = {});
// The same with int64 values taken exactly: a double holds every integer only up to 2^53, so
// torch.full((2,), 2**53 + 1) and torch.arange(2**53, 2**53 + 3) come here (the double forms would
// round 2**53 + 1 to 2**53, and give that arange four elements). Into an int64 tensor every value is
// exact; a floating dtype takes the double forms' arithmetic, as PyTorch's does.
Tensor full_int64(const Shape& shape, std::int64_t value, const Options& options = {.dtype = kInt64});
Tensor arange_int64(std::int64_t start, std::int64_t end, std::int64_t step = 1, const Options& options = {.dtype = kInt64});
// torch.linspace / torch.logspace: `steps` values from start to end (base ** those for logspace), each
// computed as PyTorch's CUDA kernel computes it -- start + i * step for the first half, end - (steps - 1
// - i) * step for the second, in the dtype's own arithmetic (float32 in float; an integer dtype in
// double, truncated) -- so the last value is end exactly. PyTorch's vectorised CPU kernel steps from the
// first element of each vector instead, which puts some float32 elements one ulp away from these.
Tensor linspace(double start, double end, std::int64_t steps, const Options& options = {});
Tensor logspace(double start, double end, std::int64_t steps, double base = 10.0, const Options& options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor randn(const Shape& shape, Generator& gen = defaultGenerator(), const Options& options = {});
Tensor rand(const Shape& shape, Generator& gen = defaultGenerator(), const Options& options = {});
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& gen = defaultGenerator(),
               const Options& options = {.dtype = kInt64});
// From host values (copied), with the given shape (numel must match).
Tensor tensor(const std::vector<float>& values, const Shape& shape, const Options& options = {});
Tensor tensor(std::initializer_list<float> values, const Shape& shape, const Options& options = {});  // tensor({1, 2}, {2})
Tensor tensor(const std::vector<std::int64_t>& values, const Shape& shape, const Options& options = {.dtype = kInt64});
Tensor scalar_tensor(double value, const Options& options = {});

// Elementwise (broadcasting as in PyTorch).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN wins, whichever side it is on
Tensor minimum(const Tensor& a, const Tensor& b);
// Comparisons give bool tensors and carry no gradient; a number compares in the dtype PyTorch would
// (an int64 tensor against 0.5 compares as float).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// Logical ops of any dtype (non-zero is true), giving bool.
Tensor logical_not(const Tensor& a);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
// torch.where: a where cond (bool) holds, b elsewhere, the three broadcast together; the result has
// the promoted dtype of a and b, and each side's gradient flows where it was chosen. A number side is
// a 0-dim tensor, of the other side's dtype where it fits (where(mask, x, 0.0) keeps x's float16).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// a with `value` where mask (bool) holds (Tensor.masked_fill); the two broadcast together.
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);
// torch.clamp: each bound optional (at least one given); the gradient passes where min <= a <= max.
Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);  // a - b
Tensor div(const Tensor& a, double b);  // a / b (float32 for an int64 `a`, as in PyTorch)
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor rdiv(const Tensor& a, double b);  // b / a (float32 even for an int64 `a`, as in PyTorch)
Tensor pow(const Tensor& a, double exponent);
// a ** b elementwise, broadcast (torch.pow(tensor, tensor); a number base comes as a 0-dim tensor):
// floating dtypes (integer ** integer tensors raise NotImplementedError: a float kernel would round
// large integers), PyTorch's PowBackward1 gradients -- zero for a where b == 0, zero for b where a == 0
// and b >= 0.
Tensor pow(const Tensor& a, const Tensor& exponent);
// Python's a // b and a % b (torch.floor_divide, torch.remainder): the quotient rounded toward -inf
// and the remainder with the sign of the divisor (engine/kernels/functors.h), in the operands'
// promoted dtype; bool with bool is refused, as PyTorch's kernels refuse it. An integer division by
// zero raises "ZeroDivisionError" on the CPU (a GPU checks nothing, as PyTorch's CUDA kernels).
// remainder's gradient is the incoming one for `a` and -grad * floor(a / b) for `b`; floor_divide has
// none: backward through it raises, as PyTorch's "derivative for aten::floor_divide is not implemented".
// A number joins as a 0-dim tensor of the tensor's dtype where it fits its category, else int64 or
// float32 (as where's numbers), rounded to that dtype as PyTorch's CPU kernels round it; the
// number-first remainder has no gradient, as in PyTorch.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, double b);
Tensor floor_divide(double a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
Tensor remainder(double a, const Tensor& b);
// torch.result_type(a, b): the dtype an op of a and b computes in (float16 with float32 gives
// float32; a 0-dim tensor only decides when it is of a higher category, see elementwise.cpp).
DType result_type(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
// exp, log, sqrt, sin, cos, abs, relu, sigmoid, tanh, floor, ... and their in-place forms (exp_, ...):
// the unary ops of engine/ops/native_ops.toml, declared in the header generated from it.
// approximate: "none" (the exact erf form) or "tanh", as F.gelu; anything else raises.
Tensor gelu(const Tensor& a, const std::string& approximate = "none");

// Reductions. sum of a bool tensor counts its true values, as int64 ((pred == y).sum()).
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, std::int64_t dim, bool keepdim = false);
// Over a set of dims (empty: all of them), one node as PyTorch's x.sum((0, 2)) / x.mean((0, 2)).
Tensor sum(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor max(const Tensor& a);
Tensor min(const Tensor& a);
// Whether any (all) element is non-zero: a 0-dim bool tensor, or one per slice along `dim`.
Tensor any(const Tensor& a);
Tensor all(const Tensor& a);
Tensor any(const Tensor& a, std::int64_t dim, bool keepdim = false);
Tensor all(const Tensor& a, std::int64_t dim, bool keepdim = false);
// The indices of the non-zero elements, (count, a.dim()) int64, in row-major order. The count decides
// the result's shape, so this waits for the device, as PyTorch's nonzero does.
Tensor nonzero(const Tensor& a);
std::pair<Tensor, Tensor> max(const Tensor& a, std::int64_t dim, bool keepdim = false);  // values, indices
Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, std::int64_t dim, bool keepdim = false);
// Over all elements: a 0-dim int64 tensor holding the flat index of the first maximum (minimum);
// NaN counts as both the maximum and the minimum, as in PyTorch.
Tensor argmax(const Tensor& a);
Tensor argmin(const Tensor& a);
// torch.linalg.vector_norm: (sum |x|^ord)^(1/ord) over `dims` (none: all), ord 0 (the count of
// non-zeros), +-inf (max / min |x|) or any other; `dtype` converts the input first. Floating inputs.
Tensor vector_norm(const Tensor& input, double ord = 2, const std::vector<std::int64_t>& dims = {}, bool keepdim = false,
                   std::optional<DType> dtype = std::nullopt);
// torch.var / torch.std over `dims` (none: all), dividing by max(0, n - correction) (1: Bessel's).
Tensor var(const Tensor& input, const std::vector<std::int64_t>& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& input, const std::vector<std::int64_t>& dims = {}, double correction = 1, bool keepdim = false);
// Sums `a` down to `shape` (the inverse of broadcasting), as autograd needs.
Tensor sum_to_size(const Tensor& a, const Shape& shape);

// torch.cat: the tensors joined along an existing dim (same sizes elsewhere); torch.stack: along a
// new dim (same sizes everywhere). One device, as every op; the result has the promoted dtype.
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
// torch.index_select: the slices of `a` along `dim` at `index` (int64, 0-d or 1-d), in its order,
// repeats allowed; the gradient sums back into each slice taken. An index outside the dim throws
// IndexError (checked on the host: a CUDA index is read back, a synchronisation).
Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);

// Linear algebra.
Tensor matmul(const Tensor& a, const Tensor& b);  // (n,k)@(k,m), (b,n,k)@(b,k,m), and 1-D operands
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());  // x W^T + b

// Activations and losses (torch.nn.functional).
Tensor softmax(const Tensor& a, std::int64_t dim);
Tensor log_softmax(const Tensor& a, std::int64_t dim);
// Reduction::None keeps one loss per element (mse_loss, l1_loss: the input's shape) or per sample
// (nll_loss, cross_entropy: shape (N)).
enum class Reduction { Mean, Sum, None };
// PyTorch's names: "mean", "sum", "none"; anything else throws ValueError("<name> is not a valid value
// for reduction").
Reduction parseReduction(const std::string& name);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean);
// The same with PyTorch's reduction strings: mse_loss(x, y, "none").
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction);
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction);
Tensor nll_loss(const Tensor& logp, const Tensor& target, const std::string& reduction);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const std::string& reduction);
Tensor dropout(const Tensor& a, double p, bool training, Generator& gen = defaultGenerator());
// F.embedding: the rows of `weight` (num_embeddings, dim) at `indices` (int64, any shape), shaped
// indices.shape + (dim,); EmbeddingBackward0 sums each row's gradients back into it, none into row
// `padding_idx` (negative: counted from the end; nullopt: none), as PyTorch's does.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx = std::nullopt);

// Convolution and pooling (torch.nn.functional; engine/ops/conv.cpp). NCHW input (N, C, H, W), or
// unbatched (C, H, W) as in PyTorch (the result is then unbatched too). A Size2 is PyTorch's "int or
// (h, w) tuple": 2 means (2, 2), {2, 1} means (h=2, w=1).
//   conv2d(x, w, b, /*stride*/ 2, /*padding*/ 1);          // F.conv2d(x, w, b, 2, 1)
//   max_pool2d(x, 2);                                       // F.max_pool2d(x, 2): stride = kernel
//   avg_pool2d(x, {3, 3}, 2, 1, /*ceil_mode*/ true, /*count_include_pad*/ false);
// Shape errors carry PyTorch's messages ("Given groups=1, weight of size [8, 3, 3, 3], expected
// input[2, 4, 8, 8] to have 3 channels, but got 4 channels instead").
struct Size2 {
  std::int64_t h, w;
  bool tuple = false;  // given as (h, w): modules print it as a tuple, as PyTorch prints what it was given
  Size2(std::int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor): PyTorch's int form
  Size2(std::int64_t h_, std::int64_t w_) : h(h_), w(w_), tuple(true) {}
  bool operator==(const Size2& o) const { return h == o.h && w == o.w; }
  std::string str() const;  // "2" or "(2, 3)", as Python prints an int or a tuple
};
// A Size2 or nothing (PyTorch's stride=None): std::optional<Size2> cannot take {h, w}, this can.
struct OptionalSize2 {
  std::optional<Size2> value;
  OptionalSize2() = default;
  OptionalSize2(std::nullopt_t) {}                                           // NOLINT(google-explicit-constructor)
  OptionalSize2(std::int64_t both) : value(Size2(both)) {}                   // NOLINT(google-explicit-constructor)
  OptionalSize2(std::int64_t h, std::int64_t w) : value(Size2(h, w)) {}
  OptionalSize2(Size2 s) : value(s) {}                                       // NOLINT(google-explicit-constructor)
  OptionalSize2(std::optional<Size2> s) : value(s) {}                        // NOLINT(google-explicit-constructor)
  Size2 value_or(Size2 fallback) const { return value.value_or(fallback); }
};
// weight (out_channels, in_channels / groups, kH, kW); bias (out_channels) or undefined. Under autocast,
// conv2d runs in the region's lower precision, as linear.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), Size2 stride = 1,
              Size2 padding = 0, Size2 dilation = 1, std::int64_t groups = 1);
// padding='valid' (none) or 'same' (the output as large as the input; stride 1 only, as in PyTorch):
// F.conv2d(x, w, b, 1, "same") is conv2d(x, w, b, 1, ConvPadding::Same), as libtorch's torch::kSame.
// When the total padding dilation * (k - 1) is odd, the extra row/column goes on the bottom/right.
enum class ConvPadding { Valid, Same };
// "valid" / "same"; anything else throws PyTorch's "Invalid padding string: 'foo'".
ConvPadding parseConvPadding(const std::string& text);
std::string toString(ConvPadding padding);  // "valid", "same"
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride, ConvPadding padding,
              Size2 dilation = 1, std::int64_t groups = 1);
// stride: the kernel size when not given (PyTorch's stride=None). ceil_mode: the output size rounds up,
// except that the last window must start inside the input or its left padding.
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride = std::nullopt,
                  Size2 padding = 0, Size2 dilation = 1, bool ceil_mode = false);
// The same, plus the argmax of each window (int64, flat h * W + w within its plane: return_indices=True).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Size2 kernel_size,
                                                  OptionalSize2 stride = std::nullopt, Size2 padding = 0,
                                                  Size2 dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride = std::nullopt,
                  Size2 padding = 0, bool ceil_mode = false, bool count_include_pad = true);
// Output cell (i, j) averages input rows [floor(i H / OH), ceil((i + 1) H / OH)) and the columns likewise.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

// Normalization (torch.nn.functional; engine/ops/normalization.cpp). F.batch_norm with PyTorch's
// argument order: input (N, C) or (N, C, H, W) (any (N, C, *)); running_mean/running_var (C) or
// undefined; weight/bias (C) or undefined. training: batch statistics, and the running statistics
// (when given) are updated in place with `momentum`; otherwise the running statistics normalise.
// For a float16/bfloat16 input the statistics and parameters are float32. Not in autocast's lists.
//   batch_norm(x, rm, rv, w, b, /*training*/ true);      // F.batch_norm(x, rm, rv, w, b, True)
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// Device and dtype moves (recorded by autograd: the gradient goes back to the source device).
Tensor to_device(const Tensor& a, Device device, bool non_blocking = false);
// Between any two dtypes (rounding to nearest even into float16/bfloat16); the gradient is cast back
// to the source dtype.
Tensor to_dtype(const Tensor& a, DType dtype);

// The same-device rule. Throws DeviceMismatchError naming the op and where each argument lives, unless
// all defined tensors share one device -- except that a 0-dim CPU tensor may join a CUDA op, as in
// PyTorch. Modules add their own name to the message through ModuleScope (engine/nn/module.h).
struct NamedTensor {
  const char* name;
  const Tensor& tensor;
};
void checkSameDevice(const char* op, std::initializer_list<NamedTensor> args);
// The rule itself, on placements only (so its message can be tested without a GPU): the error text,
// or nothing when the placements are allowed.
struct DevicePlacement {
  std::string name;
  Device device;
  bool zeroDim = false;
};
std::optional<std::string> deviceMismatchMessage(const char* op, const std::vector<DevicePlacement>& args);

// Something that can describe itself in an error message (a Module does).
class Describable {
 public:
  virtual ~Describable() = default;
  virtual std::string describe() const = 0;
};

// Marks, for this thread, the module whose forward is running, so a device-mismatch error can say
// which module it happened in. Cheap: the description is built only when an error is raised.
class ModuleContext {
 public:
  explicit ModuleContext(const Describable& module);
  ~ModuleContext();
  ModuleContext(const ModuleContext&) = delete;
  ModuleContext& operator=(const ModuleContext&) = delete;
  // "Linear(in_features=16, out_features=64, bias=True) inside Sequential", or "" outside any module.
  static std::string currentPath();

 private:
  const Describable& module_;
  const ModuleContext* previous_;
};

}  // namespace gpulab

#include "gpulab/ops/unary_ops.h"  // generated from engine/ops/native_ops.toml (engine/ops/README.md)
