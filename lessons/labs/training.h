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

// "256,128,100" -> {256, 128, 100}; throws ValueError naming the parameter. At most 64 widths from 1
// to 65536, and no more parameters between them than this machine's memory can train.
std::vector<std::int64_t> parseWidths(const std::string& text);
// "auto" -> the default device; otherwise a device that must be usable.
Device resolveDevice(const std::string& text);

// The validators of the labs' text parameters (lab::TextValidator): they run where a value is set --
// a lesson file at load, the command line, the player's form -- with the code the run uses.
// The hidden widths, as parseWidths reads them.
void checkHiddenWidths(const std::string& text);
// "auto", "cpu", "cuda", "cuda:N": the syntax only. Whether this machine has that GPU is the run's
// business (a lesson that says cuda must still load on a machine without one).
void checkDeviceString(const std::string& text);

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
