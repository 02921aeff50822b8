#pragma once
// The autograd graph. Each recorded op result owns a Node (its grad_fn) whose edges lead to the
// nodes of its inputs; a leaf that requires grad is reached through an AccumulateGrad node that
// adds the incoming gradient into leaf.grad. backward() walks the graph once in dependency order and
// then releases what the nodes saved (as PyTorch does without retain_graph).
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

// The gradient function of one op: a lambda that captures what the op saved for backward.
class FunctionNode final : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(const Tensor& grad, const std::vector<bool>& needsGrad)>;
  FunctionNode(std::string name, Backward backward) : name_(std::move(name)), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(const Tensor& gradOutput) override;
  std::string name() const override { return name_; }
  void release() override { backward_ = nullptr; }

 private:
  std::string name_;
  Backward backward_;
};

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  std::vector<Tensor> apply(const Tensor& gradOutput) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The node a gradient for `t` flows into: its grad_fn, its AccumulateGrad if it is a leaf that
// requires grad, or nullptr.
std::shared_ptr<Node> gradientEdge(const Tensor& t);

// Records `result` as the output of op `name` applied to `inputs`, if grad mode is on and any input
// requires grad. Returns result (now with requires_grad and grad_fn set when recorded).
Tensor record(Tensor result, const char* name, const std::vector<Tensor>& inputs, FunctionNode::Backward backward);

// True when an op on these inputs will be recorded.
bool anyRequiresGrad(const std::vector<Tensor>& inputs);

// Runs backward from `root` with initial gradient `grad`.
void runBackward(const Tensor& root, const Tensor& grad);

}  // namespace gpulab::autograd
