#pragma once
// torch.utils.data: a Dataset yields (input, target) examples; a TensorDataset wraps two CPU tensors
// whose first dimension indexes the examples. Batches are assembled by gather(), which copies whole
// rows at once instead of building per-example tensors (that per-example work is what makes
// PyTorch's DataLoader slow for small models).
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace gpulab::data {

struct Example {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  // Shapes of one example's input and target (without the batch dimension) and their dtypes.
  virtual Shape inputShape() const = 0;
  virtual Shape targetShape() const = 0;
  virtual DType targetDType() const = 0;
  // Copies examples `indices` into rows of `inputs` (B, inputShape...) and `targets` (B, targetShape...),
  // both contiguous CPU tensors.
  virtual void gather(const std::vector<std::int64_t>& indices, const Tensor& inputs, const Tensor& targets) const = 0;
  Example get(std::int64_t index) const;  // dataset[index]
};

class TensorDataset final : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);  // CPU tensors with the same first dimension
  std::int64_t size() const override { return inputs_.size(0); }
  Shape inputShape() const override;
  Shape targetShape() const override;
  DType targetDType() const override { return targets_.dtype(); }
  void gather(const std::vector<std::int64_t>& indices, const Tensor& inputs, const Tensor& targets) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
};

// The seed lessons' regression task: `samples` x `features` standard-normal inputs and one target per
// row from a fixed random linear teacher, y = x.w + b + noise * N(0, 1), so there is something to
// learn (the seed texts use pure noise, which no model can fit). Same seed, same data.
std::shared_ptr<TensorDataset> makeRegressionDataset(std::int64_t samples, std::int64_t features, double noise,
                                                     std::uint64_t seed, std::uint64_t teacherSeed = 1234);

// Fashion-MNIST from the IDX files installed by Debian's dataset-fashion-mnist (gzip or plain): images
// as (N, 1, 28, 28) float32 normalised with the training set's mean 0.2860 and std 0.3530, labels
// as int64 in [0, 10). Throws IOError naming the package when the files are missing.
std::shared_ptr<TensorDataset> loadFashionMnist(bool train, const std::string& root = "");
// Where the files are looked for: $GPULAB_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist.
std::string fashionMnistDirectory();
extern const char* const kFashionMnistClasses[10];

}  // namespace gpulab::data
