#include "engine/nn/module.h"

#include <map>
#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/memory/memory_events.h"

namespace gpulab::nn {

Tensor Module::operator()(const Tensor& input) {
  ModuleContext context(*this);
  // What a forward pass allocates is activations (unless a caller tagged it otherwise).
  const MemoryCategory category = MemoryCategoryScope::current();
  MemoryCategoryScope tag(category == MemoryCategory::Other ? MemoryCategory::Activation : category);
  return forward(input);
}

std::string Module::describe() const { return name() + "(" + extraRepr() + ")"; }

std::string Module::repr() const {
  if (children_.empty()) return describe();
  std::string s = name() + "(\n";
  for (const auto& [childName, child] : children_) {
    std::string inner = child->repr();
    std::string indented;
    for (char c : inner) indented += c == '\n' ? std::string("\n  ") : std::string(1, c);
    s += "  (" + childName + "): " + indented + "\n";
  }
  return s + ")";
}

Tensor& Module::register_parameter(std::string name, Tensor value) {
  // (Parameters are created before they are registered: layers tag them with MemoryCategory::Parameter.)
  value.requires_grad_(true);
  params_.emplace_back(std::move(name), std::move(value));
  return params_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  value.requires_grad_(false);
  buffers_.emplace_back(std::move(name), std::move(value));
  return buffers_.back().second;
}

void Module::collectBuffers(const std::string& prefix, bool recurse, StateDict& out) const {
  for (const auto& [n, b] : buffers_) out.emplace_back(prefix + n, b);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collectBuffers(prefix + n + ".", true, out);
}

void Module::collectState(const std::string& prefix, StateDict& out) const {
  for (const auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  for (const auto& [n, b] : buffers_) out.emplace_back(prefix + n, b);
  for (const auto& [n, child] : children_) child->collectState(prefix + n + ".", out);
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  collectBuffers("", recurse, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, b] : named_buffers(recurse)) out.push_back(b);
  return out;
}

void Module::collectParameters(const std::string& prefix, bool recurse, StateDict& out) const {
  for (const auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collectParameters(prefix + n + ".", true, out);
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  collectParameters("", recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters(recurse)) out.push_back(p);
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

Module& Module::train(bool mode) {
  training_ = mode;
  for (auto& [n, child] : children_) child->train(mode);
  return *this;
}

Module& Module::to(DType dtype) {
  NoGradGuard noGrad;
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  std::vector<Tensor> tensors = parameters();
  for (const Tensor& b : buffers()) tensors.push_back(b);
  for (Tensor& p : tensors) {
    if (p.dtype() == dtype || !isFloatingPoint(p.dtype())) continue;
    Tensor cast = p.detach().to(dtype).contiguous();
    TensorImpl& impl = p.impl();
    impl.storage = cast.impl().storage;
    impl.strides = cast.impl().strides;
    impl.offset = cast.impl().offset;
    impl.dtype = dtype;
    if (impl.grad) impl.grad = Tensor(impl.grad).to(dtype).implPtr();
  }
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard noGrad;
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  std::vector<Tensor> tensors = parameters();
  for (const Tensor& b : buffers()) tensors.push_back(b);
  for (Tensor& p : tensors) {
    if (p.device() == device) continue;
    // Move the storage under the same handle, like param.data = param.data.to(device).
    Tensor moved = p.detach().to(device);
    TensorImpl& impl = p.impl();
    impl.storage = moved.impl().storage;
    impl.strides = moved.impl().strides;
    impl.offset = moved.impl().offset;
    if (impl.grad) impl.grad = Tensor(impl.grad).to(device).implPtr();
  }
  return *this;
}

Device Module::device() const {
  auto ps = parameters();
  if (!ps.empty()) return ps.front().device();
  auto bs = buffers();
  return bs.empty() ? kCPU : bs.front().device();
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  StateDict out;
  StateDict all;
  collectState("", all);
  for (auto& [n, p] : all) out.emplace_back(n, p.detach());
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::map<std::string, Tensor> incoming(state.begin(), state.end());
  std::vector<std::string> missing, sizeErrors;
  std::set<std::string> used;
  StateDict mine;
  collectState("", mine);
  for (const auto& [n, p] : mine) {
    auto it = incoming.find(n);
    if (it == incoming.end()) {
      missing.push_back(n);
      continue;
    }
    used.insert(n);
    if (it->second.sizes() != p.sizes()) {
      sizeErrors.push_back("size mismatch for " + n + ": copying a param with shape " + shapeStr(it->second.sizes()) +
                           " from checkpoint, the shape in current model is " + shapeStr(p.sizes()) + ".");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [n, t] : incoming)
    if (!used.count(n)) unexpected.push_back(n);
  const bool keyErrors = strict && (!missing.empty() || !unexpected.empty());
  if (keyErrors || !sizeErrors.empty()) {
    auto quoteList = [](const std::vector<std::string>& names) {
      std::string s;
      for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
      return s;
    };
    std::string msg = "Error(s) in loading state_dict for " + name() + ":";
    if (strict && !missing.empty()) msg += "\n\tMissing key(s) in state_dict: " + quoteList(missing) + ".";
    if (strict && !unexpected.empty()) msg += "\n\tUnexpected key(s) in state_dict: " + quoteList(unexpected) + ".";
    for (const auto& e : sizeErrors) msg += "\n\t" + e;
    throw Error(msg);
  }
  NoGradGuard noGrad;  // all checks passed: now copy, so a failed load changes nothing
  for (auto& [n, p] : mine) {
    auto it = incoming.find(n);
    if (it != incoming.end()) p.copy_(it->second);
  }
}

}  // namespace gpulab::nn
