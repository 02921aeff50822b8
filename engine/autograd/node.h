#pragma once
// The autograd graph. Each recorded op result owns a Node (its grad_fn) whose edges lead to the
// nodes of its inputs; a leaf that requires grad is reached through an AccumulateGrad node that
// adds the incoming gradient into leaf.grad. backward() walks the graph once in dependency order and
// then releases what the nodes saved (as PyTorch does without retain_graph).
//
// Saved tensors and in-place writes: an op's node keeps what its backward reads as detach()es, which
// share the tensor's version counter (engine/core/tensor.h). record() is told which ones (`saved`) and
// notes each counter's value; a backward that finds one changed -- an in-place write since the op ran --
// raises PyTorch's "one of the variables needed for gradient computation has been modified by an
// inplace operation" instead of computing with the new values.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace gpulab::autograd {

class Node {
 public:
  // Frees the part of the graph only this node keeps alive without recursion, as PyTorch's
  // deleteNode does: a graph of 200,000 ops would otherwise overflow the stack, each node's
  // destructor releasing the next through its shared_ptr edges.
  virtual ~Node();
  // Gradients for each edge, given the gradient of this node's output (undefined = no gradient).
  virtual std::vector<Tensor> apply(const Tensor& gradOutput) = 0;
  virtual std::string name() const = 0;
  // Drops what the node saved for backward (after backward, and before the graph is freed).
  virtual void release() {}

  std::vector<std::shared_ptr<Node>> next;  // one per input; nullptr when that input needs no grad
  // The dtype of each input when the op ran: a gradient flowing back along edge i is cast to it, as
  // PyTorch's engine does (a float32 gradient never reaches a float16 op's backward, or vice versa).
  std::vector<DType> nextDtypes;
};

// A tensor an op saved for backward (PyTorch's SavedVariable, for its version check): the node's own
// handle on it (the detach() its backward reads) and the version counter's value when it was saved.
struct SavedTensor {
  std::shared_ptr<TensorImpl> impl;
  std::uint32_t version = 0;
  // For the error's "which is output 0 of MulBackward0": what it was saved from -- the node's own
  // output (kOutput), input i of the node (i >= 0; `original` is that tensor, whose grad_fn is named
  // as it is at backward time, as PyTorch does), or neither (kOther: an index, a target). Weak: an
  // in-place write can make the node part of the input's own history.
  static constexpr int kOutput = -1, kOther = -2;
  int source = kOther;
  std::weak_ptr<TensorImpl> original;
  bool originalWasView = false;
};

// The gradient function of one op: a lambda that captures what the op saved for backward.
class FunctionNode final : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(const Tensor& grad, const std::vector<bool>& needsGrad)>;
  FunctionNode(std::string name, Backward backward) : name_(std::move(name)), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(const Tensor& gradOutput) override;
  std::string name() const override { return name_; }
  void release() override {
    backward_ = nullptr;
    saved_.clear();
  }
  // What the backward reads, with the versions it expects (record() fills it). An in-place op that
  // copies its out-of-place result into its input (x.mul_(y) is x.copy_(x * y)) gives the out-of-place
  // node a copy of what it saved of x before x is overwritten (PyTorch's in-place ops save a clone of
  // self where their backward needs it): see Note [In-place ops on views] in engine/ops/tensor_methods.cpp.
  std::vector<SavedTensor>& saved() { return saved_; }

 private:
  // Throws PyTorch's error when a saved tensor was modified in place since the op ran.
  void checkSavedVersions() const;

  std::string name_;
  Backward backward_;
  std::vector<SavedTensor> saved_;
};

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  std::vector<Tensor> apply(const Tensor& gradOutput) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// PyTorch's error for a second backward through a node whose saved state was released.
const char* releasedGraphMessage();

// The node a gradient for `t` flows into: its grad_fn, its AccumulateGrad if it is a leaf that
// requires grad, or nullptr.
std::shared_ptr<Node> gradientEdge(const Tensor& t);

// Records `result` as the output of op `name` applied to `inputs`, if grad mode is on and any input
// requires grad. Returns result (now with requires_grad and grad_fn set when recorded). `saved`: the
// tensors `backward` reads (the detach()es it captured), whose versions backward checks.
Tensor record(Tensor result, const char* name, const std::vector<Tensor>& inputs, FunctionNode::Backward backward,
              const std::vector<Tensor>& saved = {});

// True when an op on these inputs will be recorded. Throws PyTorch's error for a view created in
// no_grad mode whose base has been modified in place since, used with grad mode on.
bool anyRequiresGrad(const std::vector<Tensor>& inputs);

// Runs backward from `root` with initial gradient `grad`. Without retain_graph, what the graph's nodes
// saved is released as they run (a second backward through them raises, as in PyTorch).
void runBackward(const Tensor& root, const Tensor& grad, bool retainGraph = false);

// torch.autograd.backward: one walk from all the roots at once (a graph they share is walked once),
// each with its gradient -- an undefined one is ones for a one-element root, an error otherwise.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retainGraph);

}  // namespace gpulab::autograd
