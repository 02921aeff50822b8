#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/errors.h"
#include "engine/core/parallel.h"
#include "engine/data/dataset.h"
#include "engine/ops/ops.h"

namespace gpulab::data {

Example Dataset::get(std::int64_t index) const {
  if (index < 0 || index >= size()) {
    throw IndexError("index " + std::to_string(index) + " is out of range for a dataset of size " + std::to_string(size()));
  }
  Shape in = inputShape(), tg = targetShape();
  in.insert(in.begin(), 1);
  tg.insert(tg.begin(), 1);
  Example e{Tensor::empty(in, kFloat32), Tensor::empty(tg, targetDType())};
  gather({index}, e.input, e.target);
  return {e.input.squeeze(0), e.target.squeeze(0)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(inputs.contiguous()), targets_(targets.contiguous()) {
  if (inputs_.is_cuda() || targets_.is_cuda()) throw ValueError("TensorDataset keeps its data on the CPU; move batches to the GPU instead");
  if (inputs_.dim() == 0 || targets_.dim() == 0 || inputs_.size(0) != targets_.size(0)) {
    throw ValueError("Size mismatch between tensors: inputs " + shapeStr(inputs_.sizes()) + ", targets " + shapeStr(targets_.sizes()));
  }
  if (inputs_.dtype() != kFloat32) throw ValueError("TensorDataset inputs must be float32");
}

Shape TensorDataset::inputShape() const { return Shape(inputs_.sizes().begin() + 1, inputs_.sizes().end()); }
Shape TensorDataset::targetShape() const { return Shape(targets_.sizes().begin() + 1, targets_.sizes().end()); }

void TensorDataset::gather(const std::vector<std::int64_t>& indices, const Tensor& inputs, const Tensor& targets) const {
  const std::size_t inRow = inputs_.nbytes() / static_cast<std::size_t>(std::max<std::int64_t>(size(), 1));
  const std::size_t tgRow = targets_.nbytes() / static_cast<std::size_t>(std::max<std::int64_t>(size(), 1));
  const char* inSrc = static_cast<const char*>(inputs_.data_ptr());
  const char* tgSrc = static_cast<const char*>(targets_.data_ptr());
  char* inDst = static_cast<char*>(inputs.data_ptr());
  char* tgDst = static_cast<char*>(targets.data_ptr());
  for (const std::int64_t i : indices) {
    if (i < 0 || i >= size()) throw IndexError("index " + std::to_string(i) + " is out of range");
  }
  // The rows over the threads, as index_select copies them (engine/kernels/index/cpu.cpp).
  const auto rows = static_cast<std::int64_t>(indices.size());
  parallelRanges(rows, copyGrain(static_cast<std::int64_t>(inRow + tgRow)), [&](std::int64_t begin, std::int64_t end) {
    for (auto r = static_cast<std::size_t>(begin); r < static_cast<std::size_t>(end); ++r) {
      const auto i = static_cast<std::size_t>(indices[r]);
      std::memcpy(inDst + r * inRow, inSrc + i * inRow, inRow);
      std::memcpy(tgDst + r * tgRow, tgSrc + i * tgRow, tgRow);
    }
  });
}

std::shared_ptr<TensorDataset> makeRegressionDataset(std::int64_t samples, std::int64_t features, double noise,
                                                     std::uint64_t seed, std::uint64_t teacherSeed) {
  if (samples <= 0 || features <= 0) throw ValueError("regression dataset needs positive samples and features");
  Generator teacher(teacherSeed), gen(seed);
  Tensor w = randn({features, 1}, teacher) * (1.0 / std::sqrt(static_cast<double>(features)));
  Tensor b = randn({1}, teacher) * 0.5;
  Tensor x = randn({samples, features}, gen);
  Tensor y = matmul(x, w) + b + randn({samples, 1}, gen) * noise;
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace gpulab::data
