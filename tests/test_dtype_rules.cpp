// The rules that keep dtypes consistent where several meet, each found broken once by a review of the
// float16/bfloat16/float64 work: gradients arrive in their input's dtype (autograd casts them, as
// PyTorch's engine does), optimizer state follows its parameter's dtype, set_grad and linear refuse
// mismatched dtypes, GradScaler scales in float32, fill_ refuses values a dtype cannot hold, an int64
// tensor with a fractional scalar computes in float32. The PyTorch behaviour each test asserts was
// checked with Debian's PyTorch 1.13 (/usr/bin/python3), as the comments say.
#include "engine/ops/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/core/errors.h"
#include "engine/core/half.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "test_util.h"

using namespace gpulab;

class TestDtypeRules : public QObject {
  Q_OBJECT

 private slots:
  // torch: x = ones(3, dtype=half, requires_grad=True); (x * 2).backward(ones(3)) -> x.grad.dtype is
  // float16 (the engine's validate_outputs casts every gradient to its input's dtype). Here MulBackward0
  // returns mul(g, 2) in g's float32, and AccumulateGrad stores it as is: a float32 .grad on a float16
  // parameter, which the optimizer then reads as float16 (half the bytes, garbage values).
  void rootGradientOfAnotherDtypeReachesHalfLeafAsHalf() {
    Tensor x = ones({3}, {.dtype = kFloat16, .requires_grad = true});
    (x * 2.0).backward(ones({3}));
    QVERIFY(x.grad().defined());
    QCOMPARE(dtypeName(x.grad().dtype()), std::string("float16"));
    GPULAB_COMPARE_TENSORS(x.grad(), full({3}, 2.0), 0.0, 0.0);
  }

  // torch: x = ones(3, requires_grad=True); (x * 2).backward(ones(3, dtype=half)) -> x.grad float32.
  // Here x.grad is float16; an SGD step then reads 12 bytes of float32 out of a 6-byte buffer.
  void halfRootGradientReachesFloatLeafAsFloat() {
    Tensor x = ones({3}, {.requires_grad = true});
    (x * 2.0).backward(ones({3}, {.dtype = kFloat16}));
    QVERIFY(x.grad().defined());
    QCOMPARE(dtypeName(x.grad().dtype()), std::string("float32"));
    GPULAB_COMPARE_TENSORS(x.grad(), full({3}, 2.0), 0.0, 0.0);
  }

  // torch: x = randn(3, 4, dtype=half, requires_grad=True); x.max(1).values.sum().backward() ->
  // x.grad.dtype float16. Here MaxBackward0 multiplies a float32 one-hot (reduction.cpp:114) with the
  // float16 gradient: the gradient comes back float32.
  void maxDimBackwardKeepsHalfDtype() {
    Tensor x = tensor({1, 5, 2, 7, 3, 0}, {2, 3}, {.dtype = kFloat16, .requires_grad = true});
    max(x, 1).first.sum().backward();
    QVERIFY(x.grad().defined());
    QCOMPARE(dtypeName(x.grad().dtype()), std::string("float16"));
    GPULAB_COMPARE_TENSORS(x.grad(), tensor({0, 1, 0, 1, 0, 0}, {2, 3}), 0.0, 0.0);
  }

  // The same float32 gradient one op further up: ReluBackward's kernel is instantiated for the saved
  // input's dtype (bfloat16) and reads the float32 gradient's bytes as bfloat16 -- wrong values, no
  // error. torch: x = tensor([[1,5,2],[7,3,0.5]], dtype=bfloat16, requires_grad=True);
  // x.relu().max(1).values.sum().backward() -> x.grad = [[0,1,0],[1,0,0]] (bfloat16).
  void reluThenMaxDimBackwardBFloat16Values() {
    Tensor x = tensor({1, 5, 2, 7, 3, 0.5}, {2, 3}, {.dtype = kBFloat16, .requires_grad = true});
    max(relu(x), 1).first.sum().backward();
    QVERIFY(x.grad().defined());
    QCOMPARE(dtypeName(x.grad().dtype()), std::string("bfloat16"));
    GPULAB_COMPARE_TENSORS(x.grad(), tensor({0, 1, 0, 1, 0, 0}, {2, 3}), 0.0, 0.0);
  }

  // A float32 gradient arriving at a bfloat16 loss: NllLossBackward allocates its result in g's dtype,
  // LogSoftmaxBackward's kernel then reads that float32 buffer as bfloat16 (softmax/cpu.cpp dispatches
  // on the output's dtype). torch: logits = tensor([[0.5,-1,2],[1,0,-0.5]], dtype=bfloat16,
  // requires_grad=True); F.cross_entropy(logits, tensor([0,2])).backward(torch.tensor(1.0)) ->
  // logits.grad bfloat16 [[-0.4121, 0.0194, 0.3926], [0.3145, 0.1152, -0.4297]], as .backward().
  void float32SeedThroughBFloat16CrossEntropy() {
    Tensor t = tensor(std::vector<std::int64_t>{0, 2}, {2});
    Tensor a = tensor({0.5, -1, 2, 1, 0, -0.5}, {2, 3}, {.dtype = kBFloat16, .requires_grad = true});
    Tensor b = tensor({0.5, -1, 2, 1, 0, -0.5}, {2, 3}, {.dtype = kBFloat16, .requires_grad = true});
    cross_entropy(a, t).backward();
    cross_entropy(b, t).backward(scalar_tensor(1.0));  // float32 seed
    QVERIFY(b.grad().defined());
    QCOMPARE(dtypeName(b.grad().dtype()), std::string("bfloat16"));
    GPULAB_COMPARE_TENSORS(b.grad(), a.grad(), 0.0, 0.0);
    GPULAB_COMPARE_TENSORS(b.grad(), tensor({-0.4121, 0.0194, 0.3926, 0.3145, 0.1152, -0.4297}, {2, 3}), 2e-3, 0.0);
  }

  // torch: p = ones(3, requires_grad=True); p.grad = zeros(3, dtype=half) -> RuntimeError "assigned
  // grad has data of a different type". Here set_grad accepts it and SGD then reads the 6-byte float16
  // buffer as 3 floats (out of bounds). Either refusal (set_grad, or the optimizer's checkGrad) fixes it.
  void gradOfAnotherDtypeIsRefused() {
    Tensor p = ones({3}, {.requires_grad = true});
    bool refused = false;
    try {
      p.set_grad(zeros({3}, {.dtype = kFloat16}));
      optim::SGD sgd({p}, {.lr = 0.1});
      sgd.step();
    } catch (const std::exception&) {
      refused = true;
    }
    QVERIFY2(refused, "a float16 gradient on a float32 parameter was accepted and stepped with");
  }

  // The optimizer state keeps the dtype it was created in while Module::to(dtype) changes the
  // parameter's: the fused kernels read the float32 exp_avg/exp_avg_sq (and SGD's momentum buffer)
  // as the parameter's new dtype -- float64 reads 8 bytes per 4-byte element (out of bounds), float16
  // reads garbage. PyTorch's steps keep working (state stays float32, in-place ops promote):
  //   w = Parameter([0.5,-1,2,0.25]); opt = Adam([w], lr=0.1); step on (w*w).sum(); w.data = w.data.double();
  //   step again -> w = [0.3012, -0.8004, 1.8002, 0.0543]
  void adamStepAfterModuleToFloat64() {
    nn::Linear lin(4, 1, /*bias=*/false);
    {
      NoGradGuard ng;
      lin.weight.copy_(tensor({0.5, -1, 2, 0.25}, {1, 4}));
    }
    optim::Adam adam(lin.parameters(), {.lr = 0.1});
    (lin.weight * lin.weight).sum().backward();
    adam.step();
    adam.zero_grad();
    lin.to(kFloat64);
    (lin.weight * lin.weight).sum().backward();
    adam.step();
    GPULAB_COMPARE_TENSORS(lin.weight, tensor({0.3012, -0.8004, 1.8002, 0.0543}, {1, 4}, {.dtype = kFloat64}), 1e-4, 0.0);
  }

  //   w = Parameter([0.5,-1,2,0.25]); opt = SGD([w], lr=0.1, momentum=0.9); step; w.data = w.data.half();
  //   step again -> w = [0.2300, -0.4600, 0.9200, 0.1150] (float16 rounding aside)
  void sgdMomentumStepAfterModuleToHalf() {
    nn::Linear lin(4, 1, /*bias=*/false);
    {
      NoGradGuard ng;
      lin.weight.copy_(tensor({0.5, -1, 2, 0.25}, {1, 4}));
    }
    optim::SGD sgd(lin.parameters(), {.lr = 0.1, .momentum = 0.9});
    (lin.weight * lin.weight).sum().backward();
    sgd.step();
    sgd.zero_grad();
    lin.to(kFloat16);
    (lin.weight * lin.weight).sum().backward();
    sgd.step();
    GPULAB_COMPARE_TENSORS(lin.weight, tensor({0.23, -0.46, 0.92, 0.115}, {1, 4}), 2e-3, 0.0);
  }

  // linear() checks input against weight but never the bias's dtype (linalg.cpp:117-119). torch:
  // F.linear(ones(2,3,dtype=float64), ones(4,3,dtype=float64), ones(4)) -> RuntimeError "self and mat2
  // must have the same dtype" (bfloat16 input/weight with a float32 bias: the same). Here the float64
  // forward runs, and AddmmBackward returns sum(g, 0) -- a float64 gradient -- for the float32 bias
  // leaf (an optimizer step then reads 8 bytes per 4-byte element).
  void linearRefusesBiasOfAnotherDtype() {
    Tensor x = ones({2, 3}, {.dtype = kFloat64});
    Tensor w = ones({4, 3}, {.dtype = kFloat64, .requires_grad = true});
    Tensor b = ones({4}, {.requires_grad = true});
    bool refused = false;
    try {
      linear(x, w, b).sum().backward();
    } catch (const std::exception&) {
      refused = true;
    }
    if (!refused) QCOMPARE(dtypeName(b.grad().dtype()), std::string("float32"));
    QVERIFY2(refused, "linear accepted a float32 bias beside float64 input and weight");
  }

  // torch: torch.zeros(2, dtype=half).fill_(1e6) and torch.full((2,), 1e6, dtype=half) raise
  // RuntimeError "value cannot be converted to type at::Half without overflow" (bfloat16: 1e39, the
  // same); fill_(inf) is allowed. Here both silently store inf (elementwise/cpu.cpp fill: static_cast).
  void fillOverflowingHalfIsRefused() {
    QVERIFY_THROWS_EXCEPTION(std::exception, zeros({2}, {.dtype = kFloat16}).fill_(1e6));
    QVERIFY_THROWS_EXCEPTION(std::exception, full({2}, 1e6, {.dtype = kFloat16}));
    QVERIFY_THROWS_EXCEPTION(std::exception, zeros({2}, {.dtype = kBFloat16}).fill_(1e39));
    Tensor inf = zeros({2}, {.dtype = kFloat16});
    inf.fill_(INFINITY);  // allowed, as in PyTorch
    QVERIFY(std::isinf(inf.toVector<double>()[0]));
  }

  // Type promotion of a Python scalar with an int64 tensor (older than these commits, but it is
  // result_type's job): torch.tensor([1, 2]) * 0.5 -> tensor([0.5, 1.0]) (float32), + 0.5 ->
  // [1.5, 2.5]. Here binaryScalar runs in int64 and truncates the scalar to 0: [0, 0] and [1, 2].
  // (A fix that keeps integral scalars in int64 -- PyTorch's rule for Python ints -- passes this.)
  void int64TensorTimesFractionalScalarPromotes() {
    Tensor i = tensor(std::vector<std::int64_t>{1, 2}, {2});
    Tensor m = i * 0.5, a = i + 0.5;
    QCOMPARE(dtypeName(m.dtype()), std::string("float32"));
    GPULAB_COMPARE_TENSORS(m, tensor({0.5, 1.0}, {2}), 0.0, 0.0);
    GPULAB_COMPARE_TENSORS(a, tensor({1.5, 2.5}, {2}), 0.0, 0.0);
  }

  // torch.cuda.amp.GradScaler keeps its scale as torch.full((1,), 65536., dtype=float32)
  // (torch/cuda/amp/grad_scaler.py:146) and scale() returns outputs * _scale (line 168): a
  // 1-dimensional float32 tensor, so a float16 output of any shape is promoted to float32:
  //   (torch.full((3,), 2., dtype=half) * torch.full((1,), 65536.)).dtype -> float32, values 131072.
  // Here the scale is a 0-dim tensor, which loses to a dimensioned float16 tensor in type promotion:
  // the product is float16 and every value >= 1 overflows to inf (65536 > 65504).
  void gradScalerScaleOfHalfTensorDoesNotOverflow() {
    amp::GradScaler scaler;
    Tensor out = scaler.scale(full({3}, 2.0, {.dtype = kFloat16}));
    QCOMPARE(dtypeName(out.dtype()), std::string("float32"));
    GPULAB_COMPARE_TENSORS(out.reshape({-1}), full({3}, 131072.0), 0.0, 0.0);
  }

  // torch/cuda/amp/grad_scaler.py:339: step() on an optimizer none of whose parameters has a gradient
  // raises AssertionError "No inf checks were recorded for this optimizer." Here it steps silently and
  // records a clean step (the scale then grows on update() as if the step had been checked).
  void gradScalerStepWithoutGradientsRaises() {
    Tensor p = ones({3}, {.requires_grad = true});
    optim::SGD sgd({p}, {.lr = 0.1});
    amp::GradScaler scaler;
    QVERIFY_THROWS_EXCEPTION(std::exception, scaler.step(sgd));
  }
};

QTEST_GUILESS_MAIN(TestDtypeRules)
#include "test_dtype_rules.moc"
