#pragma once
// nn.Module: named parameters, buffers and children, train()/eval(), to(device), state dicts. Parameters
// and buffers are Tensor handles; to(device) moves their storage *in place* (as PyTorch's module.to does
// with param.data), so layers, optimizers and anything else holding the handle see the move.
// Buffers (register_buffer) are state that is not trained: BatchNorm's running_mean, running_var and
// num_batches_tracked. Like PyTorch's, they are in the state dict (after the module's own parameters,
// before its children's entries), move with to(device), are cast by to(dtype) when floating, and are
// not parameters (no gradient, not seen by optimizers).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/ops.h"

namespace gpulab::nn {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module : public Describable {
 public:
  ~Module() override = default;

  // Runs forward() with this module named in any device-mismatch error.
  Tensor operator()(const Tensor& input);
  virtual Tensor forward(const Tensor& input) = 0;

  virtual std::string name() const = 0;                  // "Linear"
  virtual std::string extraRepr() const { return ""; }   // "in_features=16, out_features=64, bias=True"
  std::string describe() const override;                 // "Linear(in_features=16, ...)"
  std::string repr() const;                              // print(model), multi-line like PyTorch

  StateDict named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  StateDict named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  std::int64_t parameter_count() const;

  Module& train(bool mode = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  Module& to(Device device);
  // Casts every floating parameter (and its gradient) to `dtype` under the same handle, as
  // module.to(dtype) / module.half() do; int64 parameters are left alone.
  Module& to(DType dtype);
  Module& half() { return to(kFloat16); }
  Module& bfloat16() { return to(kBFloat16); }
  // The device of the first parameter, else of the first buffer (CPU for a module with neither).
  Device device() const;
  void zero_grad();

  StateDict state_dict() const;
  // Copies values into the existing parameters. strict: keys must match exactly. Throws with the
  // list of missing/unexpected keys and size mismatches, and changes nothing if anything is wrong.
  void load_state_dict(const StateDict& state, bool strict = true);

 protected:
  Tensor& register_parameter(std::string name, Tensor value);
  // A buffer: in the state dict and moved by to(), never requires grad.
  Tensor& register_buffer(std::string name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }

 private:
  void collectParameters(const std::string& prefix, bool recurse, StateDict& out) const;
  void collectBuffers(const std::string& prefix, bool recurse, StateDict& out) const;
  void collectState(const std::string& prefix, StateDict& out) const;  // PyTorch's state_dict order
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Saves a state dict to `path` in format v2 (CRC-32C checksummed; engine/nn/state_dict.h): written to
// "<path>.tmp", fsync'ed, renamed over `path`, directory fsync'ed, so never half-written.
void save(const StateDict& state, const std::string& path);
// Reads a state dict saved by save() (format v1 or v2); throws IOError naming the file and what is
// wrong with it ("... is corrupt: checksum mismatch (expected ..., found ...)") and returns nothing
// partial, so a model is never loaded from a damaged file.
StateDict load(const std::string& path);

}  // namespace gpulab::nn
