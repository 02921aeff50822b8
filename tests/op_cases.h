#pragma once
// The table of differentiable ops that both the finite-difference gradient check and the CPU/CUDA
// parity test walk through. Each case builds its inputs (CPU, seeded) and computes one output.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/ops/ops.h"

#include <QtTest>

namespace gpulab::test {

struct OpCase {
  std::string name;
  std::vector<Shape> inputShapes;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  // Input domain: inputs are drawn as N(0,1), then mapped so the op is smooth there.
  // Unit: inside (-0.9, 0.9); AwayFromSteps: a quarter past a whole number, where floor, round and frac
  // are smooth; AboveMinusOne: > -0.5 (log1p).
  enum Domain { Any, Positive, AwayFromZero, Unit, AwayFromSteps, AboveMinusOne } domain = Any;
  std::vector<Tensor> extra = {};  // non-differentiable inputs (labels), device-moved by the runner
};

inline Tensor labels(std::vector<std::int64_t> v) { return tensor(v, {static_cast<std::int64_t>(v.size())}); }

inline std::vector<OpCase> opCases() {
  using V = const std::vector<Tensor>&;
  return {
      {"add", {{3, 4}, {3, 4}}, [](V x) { return x[0] + x[1]; }},
      {"add_broadcast_row", {{3, 4}, {4}}, [](V x) { return x[0] + x[1]; }},
      {"add_broadcast_col", {{3, 1}, {1, 4}}, [](V x) { return x[0] + x[1]; }},
      {"sub_broadcast", {{2, 3, 4}, {3, 1}}, [](V x) { return x[0] - x[1]; }},
      {"mul_broadcast", {{3, 4}, {4}}, [](V x) { return x[0] * x[1]; }},
      {"div", {{3, 4}, {3, 4}}, [](V x) { return x[0] / x[1]; }, OpCase::AwayFromZero},
      {"maximum", {{3, 4}, {3, 4}}, [](V x) { return maximum(x[0], x[1]); }},
      {"minimum_broadcast", {{3, 4}, {4}}, [](V x) { return minimum(x[0], x[1]); }},
      {"add_scalar", {{5}}, [](V x) { return x[0] + 2.5; }},
      {"mul_scalar", {{5}}, [](V x) { return x[0] * -3.0; }},
      {"rsub_scalar", {{5}}, [](V x) { return 1.0 - x[0]; }},
      {"pow2", {{5}}, [](V x) { return x[0].pow(2.0); }},
      {"pow3", {{5}}, [](V x) { return x[0].pow(3.0); }},
      {"pow_tensor_broadcast", {{3, 4}, {4}}, [](V x) { return pow(x[0], x[1]); }, OpCase::Positive},
      {"neg", {{5}}, [](V x) { return -x[0]; }},
// The unary ops of engine/ops/native_ops.toml, a row each (generated: engine/ops/generate_ops.py).
#include "gpulab/ops/unary_op_cases.inc"
      {"gelu", {{6}}, [](V x) { return gelu(x[0]); }},
      {"gelu_tanh", {{6}}, [](V x) { return gelu(x[0], "tanh"); }},
      {"sum", {{3, 4}}, [](V x) { return x[0].sum(); }},
      {"sum_dim0", {{3, 4}}, [](V x) { return x[0].sum(0); }},
      {"sum_dim1_keepdim", {{3, 4}}, [](V x) { return x[0].sum(1, true); }},
      {"sum_middle_dim", {{2, 3, 4}}, [](V x) { return x[0].sum(1); }},
      {"mean", {{3, 4}}, [](V x) { return x[0].mean(); }},
      {"mean_dim", {{3, 4}}, [](V x) { return x[0].mean(-1); }},
      {"vector_norm", {{3, 4}}, [](V x) { return vector_norm(x[0]); }},
      {"vector_norm_two_dims_keepdim", {{2, 3, 4}}, [](V x) { return vector_norm(x[0], 2, {0, 2}, true); }},
      {"vector_norm_ord1_dim", {{3, 4}}, [](V x) { return vector_norm(x[0], 1, {1}); }, OpCase::AwayFromZero},
      {"vector_norm_ord3", {{3, 4}}, [](V x) { return vector_norm(x[0], 3, {-1}); }, OpCase::AwayFromZero},
      {"vector_norm_ord_half", {{3, 4}}, [](V x) { return vector_norm(x[0], 0.5); }, OpCase::AwayFromZero},
      {"vector_norm_inf_dim", {{3, 4}}, [](V x) { return vector_norm(x[0], std::numeric_limits<double>::infinity(), {0}); }},
      {"vector_norm_minus_inf", {{3, 4}}, [](V x) { return vector_norm(x[0], -std::numeric_limits<double>::infinity()); }},
      {"var", {{3, 4}}, [](V x) { return var(x[0]); }},
      {"var_dims_population", {{2, 3, 4}}, [](V x) { return var(x[0], {2, 0}, 0); }},
      {"std_dim_keepdim", {{3, 4}}, [](V x) { return gpulab::std(x[0], {1}, 1, true); }},
      {"std_all_corrected_by_two", {{2, 5}}, [](V x) { return gpulab::std(x[0], {}, 2); }},
      {"max_all", {{3, 4}}, [](V x) { return x[0].max(); }},
      {"max_dim", {{3, 4}}, [](V x) { return max(x[0], 1).first; }},
      {"max_dim0_keepdim", {{3, 4}}, [](V x) { return max(x[0], 0, true).first; }},
      {"min_all", {{3, 4}}, [](V x) { return min(x[0]); }},
      {"clamp", {{8}}, [](V x) { return clamp(x[0], -0.3, 0.4); }},
      {"clamp_min", {{8}}, [](V x) { return clamp(x[0], 0.1, std::nullopt); }},
      {"where", {{3, 4}, {3, 4}}, [](V x) { return where(gt(x[0], 0.0), x[0], x[1]); }, OpCase::AwayFromZero},
      {"where_broadcast", {{3, 1}, {4}}, [](V x) { return where(gt(x[0], 0.0), x[0], x[1].exp()); }, OpCase::AwayFromZero},
      {"masked_fill", {{3, 4}}, [](V x) { return masked_fill(x[0], lt(x[0], 0.0), 0.5) * x[0]; }, OpCase::AwayFromZero},
      {"index_select_repeats", {{4, 3}}, [](V x) { return index_select(x[0], 0, x[1]); }, OpCase::Any, {labels({2, 0, 2, 3})}},
      {"embedding", {{5, 3}}, [](V x) { return embedding(x[0], x[1]); }, OpCase::Any, {tensor(std::vector<std::int64_t>{0, 4, 4, 2, 0, 1}, {2, 3})}},
      {"index_select_middle_dim", {{2, 4, 3}}, [](V x) { return index_select(x[0], 1, x[1]); }, OpCase::Any, {labels({3, 3, 1})}},
      {"matmul", {{3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_transposed", {{4, 3}, {5, 4}}, [](V x) { return matmul(x[0].t(), x[1].t()); }},
      {"matmul_batched", {{2, 3, 4}, {2, 4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_3d_2d", {{2, 3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec", {{4}, {4, 3}}, [](V x) { return matmul(x[0], x[1]); }},
      {"dot", {{4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"linear", {{5, 4}, {3, 4}, {3}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear_no_bias", {{5, 4}, {3, 4}}, [](V x) { return linear(x[0], x[1]); }},
      {"linear_3d_input", {{2, 5, 4}, {3, 4}, {3}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"softmax", {{3, 5}}, [](V x) { return x[0].softmax(1); }},
      {"softmax_dim0", {{3, 5}}, [](V x) { return x[0].softmax(0); }},
      {"log_softmax", {{3, 5}}, [](V x) { return x[0].log_softmax(-1); }},
      {"mse_loss", {{4, 3}, {4, 3}}, [](V x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss_sum", {{4, 3}, {4, 3}}, [](V x) { return mse_loss(x[0], x[1], Reduction::Sum); }},
      {"l1_loss", {{4, 3}, {4, 3}}, [](V x) { return l1_loss(x[0], x[1]); }},
      {"cross_entropy", {{4, 5}}, [](V x) { return cross_entropy(x[0], x[1]); }, OpCase::Any, {labels({0, 4, 2, 2})}},
      {"nll_loss_sum", {{4, 5}}, [](V x) { return nll_loss(x[0].log_softmax(1), x[1], Reduction::Sum); }, OpCase::Any, {labels({1, 3, 0, 4})}},
      {"mse_loss_none", {{4, 3}, {4, 3}}, [](V x) { return mse_loss(x[0], x[1], Reduction::None); }},
      {"l1_loss_none", {{4, 3}, {4, 3}}, [](V x) { return l1_loss(x[0], x[1], Reduction::None); }},
      {"cross_entropy_none", {{4, 5}}, [](V x) { return cross_entropy(x[0], x[1], Reduction::None); }, OpCase::Any, {labels({3, 0, 0, 4})}},
      {"nll_loss_none", {{4, 5}}, [](V x) { return nll_loss(x[0].log_softmax(1), x[1], Reduction::None); }, OpCase::Any, {labels({1, 1, 2, 4})}},
      {"rdiv_scalar", {{5}}, [](V x) { return -2.0 / x[0]; }, OpCase::AwayFromZero},
      // Python's % (torch.remainder): d/da = 1, d/db = -floor(a / b); smooth away from the steps, which
      // N(0,1) inputs miss by far more than the finite difference's step. (floor_divide has no gradient.)
      {"remainder", {{3, 4}, {3, 4}}, [](V x) { return remainder(x[0], x[1]); }, OpCase::AwayFromZero},
      {"remainder_broadcast", {{3, 1}, {4}}, [](V x) { return remainder(x[0], x[1]); }, OpCase::AwayFromZero},
      {"remainder_scalar", {{6}}, [](V x) { return remainder(x[0] * 3.0, 0.7); }},
      {"remainder_negative_scalar", {{6}}, [](V x) { return remainder(x[0], -0.45); }},
      {"transpose", {{3, 4}}, [](V x) { return x[0].t() * 1.0; }},
      {"slice_step", {{6, 3}}, [](V x) { return x[0].slice(0, 1, 6, 2) * 1.0; }},
      {"sub_scalar", {{3, 4}}, [](V x) { return x[0] - 0.75; }},
      {"div_scalar", {{3, 4}}, [](V x) { return x[0] / 3.0; }},
      {"cat", {{2, 3}, {4, 3}, {1, 3}}, [](V x) { return cat({x[0], x[1], x[2]}, 0); }},
      {"cat_last_dim", {{2, 3, 2}, {2, 3, 1}}, [](V x) { return cat({x[0], x[1]}, -1); }},
      {"stack", {{2, 3}, {2, 3}}, [](V x) { return stack({x[0], x[1]}, 1); }},
      {"select", {{3, 4}}, [](V x) { return x[0].select(1, 2) * 1.0; }},
      {"select_negative_of_a_transposed_view", {{2, 3, 4}}, [](V x) { return x[0].transpose(0, 2).select(1, -1) * 1.0; }},
      {"reshape", {{3, 4}}, [](V x) { return x[0].reshape({2, -1}) * 1.0; }},
      {"reshape_of_transpose", {{3, 4}}, [](V x) { return x[0].t().reshape({12}) * 1.0; }},
      {"unsqueeze_expand", {{3}}, [](V x) { return x[0].unsqueeze(0).expand({4, 3}) * 1.0; }},
      {"flatten", {{2, 3, 4}}, [](V x) { return x[0].flatten(1) * 1.0; }},
      {"clone", {{5}}, [](V x) { return x[0].clone(); }},
      // In-place writes through views (Note [In-place ops on views], engine/ops/tensor_methods.cpp): the
      // base's rebased history (CopySlices), a view made before the write (regenerated as
      // AsStridedBackward0), and the base written under a view.
      {"inplace_mul_through_slice", {{4, 3}, {2, 3}}, [](V x) { Tensor y = x[0] * 1.0; y.slice(0, 1, 3).mul_(x[1]); return y; }},
      {"inplace_add_through_transpose", {{3, 4}, {3}},
       [](V x) { Tensor y = x[0] * x[0]; y.t().select(0, 1).add_(x[1].tanh()); return y; }},
      {"inplace_copy_seen_by_an_earlier_view", {{3, 3}, {3}},
       [](V x) {
         Tensor y = x[0] * 2.0;
         Tensor u = y.slice(1, 0, 2);
         y.select(1, 1).copy_(sin(x[1]));
         return u * y.slice(1, 1, 3);
       }},
      {"inplace_base_written_under_a_view", {{3, 3}, {3}},
       [](V x) {
         Tensor y = x[0] * x[0];
         Tensor v = y.slice(0, 0, 2);
         y.mul_(x[1]);
         return v * 3.0;
       }},
      {"inplace_fill_and_zero_through_views", {{3, 4}},
       [](V x) {
         Tensor y = x[0] * 3.0;  // not exp(): it saves its result, which the writes would overwrite
         y.slice(0, 0, 1).fill_(0.5);
         y.select(1, 2).zero_();
         return y * x[0];
       }},
      {"dropout", {{40}}, [](V x) { Generator g(7); return dropout(x[0], 0.3, true, g); }},
      // Convolution and pooling (engine/ops/conv.cpp). Inputs N(0,1): no two values of a pooling window
      // tie (max_pool2d's gradient is defined only without ties).
      {"conv2d", {{2, 3, 6, 6}, {4, 3, 3, 3}}, [](V x) { return conv2d(x[0], x[1]); }},
      {"conv2d_bias", {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2]); }},
      {"conv2d_stride2", {{2, 3, 7, 7}, {4, 3, 3, 3}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2], 2); }},
      {"conv2d_padding1", {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv2d_dilation2", {{1, 2, 7, 7}, {3, 2, 3, 3}, {3}}, [](V x) { return conv2d(x[0], x[1], x[2], 1, 0, 2); }},
      {"conv2d_groups2", {{2, 4, 5, 5}, {6, 2, 3, 3}, {6}}, [](V x) { return conv2d(x[0], x[1], x[2], 1, 0, 1, 2); }},
      {"conv2d_depthwise", {{2, 3, 5, 5}, {3, 1, 3, 3}, {3}}, [](V x) { return conv2d(x[0], x[1], x[2], 1, 1, 1, 3); }},
      {"conv2d_unbatched", {{3, 5, 5}, {4, 3, 3, 3}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2]); }},
      {"conv2d_nonsquare", {{2, 3, 6, 7}, {4, 3, 2, 3}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 0}); }},
      {"conv2d_all_options", {{2, 4, 7, 8}, {6, 2, 3, 2}, {6}},
       [](V x) { return conv2d(x[0], x[1], x[2], {2, 3}, {1, 2}, {2, 1}, 2); }},
      {"conv2d_1x1", {{2, 5, 3, 4}, {2, 5, 1, 1}}, [](V x) { return conv2d(x[0], x[1]); }},
      {"max_pool2d", {{2, 3, 6, 6}}, [](V x) { return max_pool2d(x[0], 2); }},
      {"max_pool2d_padding", {{2, 2, 7, 7}}, [](V x) { return max_pool2d(x[0], 3, 2, 1); }},
      {"max_pool2d_ceil_mode", {{1, 2, 7, 7}}, [](V x) { return max_pool2d(x[0], 2, 2, 0, 1, true); }},
      {"max_pool2d_ceil_mode_padding", {{1, 2, 6, 6}}, [](V x) { return max_pool2d(x[0], 3, 2, 1, 1, true); }},
      {"max_pool2d_overlapping", {{1, 2, 5, 5}}, [](V x) { return max_pool2d(x[0], 3, 1); }},
      {"max_pool2d_dilation", {{1, 2, 7, 6}}, [](V x) { return max_pool2d(x[0], {2, 3}, {1, 2}, {1, 0}, 2); }},
      {"max_pool2d_unbatched", {{2, 5, 5}}, [](V x) { return max_pool2d(x[0], 2); }},
      {"avg_pool2d", {{2, 3, 6, 6}}, [](V x) { return avg_pool2d(x[0], 2); }},
      {"avg_pool2d_count_include_pad", {{1, 2, 6, 6}}, [](V x) { return avg_pool2d(x[0], 3, 2, 1); }},
      {"avg_pool2d_count_exclude_pad", {{1, 2, 6, 6}}, [](V x) { return avg_pool2d(x[0], 3, 2, 1, false, false); }},
      {"avg_pool2d_ceil_mode", {{1, 2, 5, 5}}, [](V x) { return avg_pool2d(x[0], 2, 2, 0, true); }},
      {"avg_pool2d_ceil_mode_exclude_pad", {{1, 2, 6, 7}}, [](V x) { return avg_pool2d(x[0], {3, 2}, 2, 1, true, false); }},
      {"adaptive_avg_pool2d", {{2, 3, 6, 8}}, [](V x) { return adaptive_avg_pool2d(x[0], {3, 4}); }},
      {"adaptive_avg_pool2d_uneven", {{2, 3, 5, 7}}, [](V x) { return adaptive_avg_pool2d(x[0], {3, 4}); }},
      {"adaptive_avg_pool2d_global", {{2, 3, 5, 4}}, [](V x) { return adaptive_avg_pool2d(x[0], 1); }},
      {"adaptive_avg_pool2d_upsample", {{1, 2, 3, 2}}, [](V x) { return adaptive_avg_pool2d(x[0], {5, 3}); }},
      // Batch normalisation (engine/ops/normalization.cpp). Running statistics are made inside the case
      // (in the input's dtype and on its device), fresh per call: training updates them in place.
      {"batch_norm_train", {{4, 3, 2, 2}, {3}, {3}},
       [](V x) {
         const Options o{x[0].dtype(), x[0].device()};
         return batch_norm(x[0], zeros({3}, o), ones({3}, o), x[1], x[2], true);
       }},
      {"batch_norm_train_no_affine", {{4, 3, 2, 2}}, [](V x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); }},
      {"batch_norm_train_2d_input", {{5, 3}, {3}, {3}},
       [](V x) {
         const Options o{x[0].dtype(), x[0].device()};
         return batch_norm(x[0], zeros({3}, o), ones({3}, o), x[1], x[2], true, 0.3, 1e-3);
       }},
      {"batch_norm_eval", {{4, 3, 2, 2}, {3}, {3}},
       [](V x) {
         const Options o{x[0].dtype(), x[0].device()};
         return batch_norm(x[0], full({3}, 0.3, o), full({3}, 1.7, o), x[1], x[2], false);
       }},
      {"batch_norm_eval_2d_no_affine", {{5, 3}},
       [](V x) {
         const Options o{x[0].dtype(), x[0].device()};
         return batch_norm(x[0], full({3}, -0.2, o), full({3}, 0.6, o), Tensor(), Tensor(), false);
       }},
      {"cnn", {{2, 1, 8, 8}, {4, 1, 3, 3}, {4}, {3, 36}, {3}},
       [](V x) { return linear(max_pool2d(conv2d(x[0], x[1], x[2]).relu(), 2).flatten(1), x[3], x[4]).log_softmax(1); }},
      {"mlp", {{8, 4}, {6, 4}, {6}, {2, 6}, {2}},
       [](V x) { return linear(linear(x[0], x[1], x[2]).tanh(), x[3], x[4]).log_softmax(1); }},
  };
}

// One data row per case (column "index"), for the suites that walk the table.
inline void addOpCaseRows() {
  QTest::addColumn<int>("index");
  const auto cases = opCases();
  for (int i = 0; i < static_cast<int>(cases.size()); ++i) QTest::newRow(cases[static_cast<std::size_t>(i)].name.c_str()) << i;
}

// The case's inputs on the CPU, deterministic for the case.
inline std::vector<Tensor> makeInputs(const OpCase& c, std::uint64_t seed = 42) {
  Generator gen(seed);
  std::vector<Tensor> xs;
  for (const Shape& s : c.inputShapes) {
    Tensor t = randn(s, gen);
    if (c.domain == OpCase::Positive) t = t.abs() + 0.5;
    if (c.domain == OpCase::AwayFromZero) t = t + (t / t.abs()) * 0.3;  // |t| >= 0.3: no kink within reach
    if (c.domain == OpCase::Unit) t = t.tanh() * 0.9;
    // A whole number plus 0.2 to 0.3: at least 0.2 from every integer and half-integer (where the steps are).
    if (c.domain == OpCase::AwayFromSteps) t = floor(t * 2.0) + 0.2 + (t * 2.0 - floor(t * 2.0)) * 0.1;
    if (c.domain == OpCase::AboveMinusOne) t = t.abs() - 0.5;
    xs.push_back(t.detach());
  }
  return xs;
}

}  // namespace gpulab::test
