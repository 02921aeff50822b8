#pragma once
// Pieces the training labs share: the MLP the lessons use, the optimizer by name, the loss for the
// task, and one optimizer step over one or more micro-batches (gradient accumulation).
#include <memory>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/data/dataloader.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"

namespace gpulab::labs {

// "256,128,100" -> {256, 128, 100}; throws ValueError naming the parameter.
std::vector<std::int64_t> parseWidths(const std::string& text);
// "auto" -> the default device; otherwise a device that must be usable.
Device resolveDevice(const std::string& text);

// [Flatten,] Linear, ReLU, ..., Linear: from the data set's input shape to `outputs` values.
std::shared_ptr<nn::Sequential> makeMlp(const data::Dataset& data, const std::vector<std::int64_t>& hidden,
                                        std::int64_t outputs, Generator& gen);
std::unique_ptr<optim::Optimizer> makeOptimizer(const std::string& name, const std::vector<Tensor>& params, double lr,
                                                double momentum, double weightDecay);
Tensor taskLoss(bool classification, const Tensor& output, const Tensor& target, Reduction reduction = Reduction::Mean);

// Forward and backward of one micro-batch, with its share 1/accumulate of the step's loss: the
// gradients of `accumulate` such calls add up to those of one batch `accumulate` times larger.
// Returns the micro-batch's (unscaled) loss, detached. Batches are moved to `device` here.
Tensor accumulateGradients(nn::Module& model, bool classification, const data::Batch& batch, Device device,
                           int accumulate, bool nonBlocking);

}  // namespace gpulab::labs
