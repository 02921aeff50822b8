#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/autograd/grad.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/gradient_ops.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/memory/memory_events.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/run_record.h"
#include "engine/kernels/backend.h"

namespace gpulab {
namespace {
thread_local bool gGradEnabled = true;
}

bool isGradEnabled() { return gGradEnabled; }
void setGradEnabled(bool enabled) { gGradEnabled = enabled; }

namespace autograd {

namespace {
GradientOps installedGradientOps;
}  // namespace

void installGradientOps(const GradientOps& ops) { installedGradientOps = ops; }

const GradientOps& gradientOps() {
  if (!installedGradientOps.add) throw Error("autograd: no gradient ops are installed (the engine's ops layer installs them when it loads)");
  return installedGradientOps;
}

Node::~Node() {
  // By the time this runs a FunctionNode has already destroyed its saved tensors, while `next` still
  // held their grad_fns, so none of those cascaded. Now take over the edges: a node whose last owner
  // is the stack below is emptied (saved tensors first, then its edges move onto the stack) before it
  // is destroyed, so every destructor that runs here has nothing left to free recursively. A node
  // reached twice is kept alive by its other edge until that one is popped too.
  std::vector<std::shared_ptr<Node>> stack;
  for (auto& edge : next)
    if (edge) stack.push_back(std::move(edge));
  next.clear();
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    if (node.use_count() != 1) continue;  // someone else (a tensor, another edge) still owns it
    node->release();
    for (auto& edge : node->next)
      if (edge) stack.push_back(std::move(edge));
    node->next.clear();
  }  // `node` is destroyed at the end of each iteration, with no edges and no saved tensors left
}

namespace {

// "torch.FloatTensor", "torch.cuda.HalfTensor": the legacy type name PyTorch's errors print.
std::string legacyTypeName(const TensorImpl& t) {
  std::string name;
  switch (t.dtype) {
    case DType::Float32: name = "FloatTensor"; break;
    case DType::Float64: name = "DoubleTensor"; break;
    case DType::Float16: name = "HalfTensor"; break;
    case DType::BFloat16: name = "BFloat16Tensor"; break;
    case DType::Int64: name = "LongTensor"; break;
    case DType::Bool: name = "BoolTensor"; break;
  }
  return (t.storage && t.storage->device().isCuda() ? "torch.cuda." : "torch.") + name;
}

}  // namespace

void FunctionNode::checkSavedVersions() const {
  for (const SavedTensor& s : saved_) {
    const std::uint32_t now = s.impl->version->value.load(std::memory_order_relaxed);
    if (now == s.version) continue;
    std::string producer;
    if (s.source == SavedTensor::kOutput) {
      producer = name_;
    } else if (auto original = s.original.lock()) {
      if (const auto& fn = Tensor(original).grad_fn()) producer = fn->name();  // as it is now, as PyTorch names it
    } else if (s.originalWasView) {
      producer = "AsStridedBackward0";  // what a written view's grad_fn has become (Note [In-place ops on views])
    } else if (s.source >= 0 && static_cast<std::size_t>(s.source) < next.size() && next[s.source] &&
               !dynamic_cast<const AccumulateGrad*>(next[s.source].get())) {
      producer = next[s.source]->name();
    }
    throw Error("one of the variables needed for gradient computation has been modified by an inplace operation: [" +
                legacyTypeName(*s.impl) + " " + shapeStr(s.impl->sizes) + "]" + (producer.empty() ? "" : ", which is output 0 of " + producer + ",") +
                " is at version " + std::to_string(now) + "; expected version " + std::to_string(s.version) +
                " instead. Hint: enable anomaly detection to find the operation that failed to compute its gradient, with "
                "torch.autograd.set_detect_anomaly(True).");
  }
}

const char* releasedGraphMessage() {
  return "Trying to backward through the graph a second time (or directly access saved tensors after they have already been "
         "freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify "
         "retain_graph=True if you need to backward through the graph a second time or if you need to access saved tensors "
         "after calling backward.";
}

std::vector<Tensor> FunctionNode::apply(const Tensor& gradOutput) {
  if (!backward_) throw Error(releasedGraphMessage());
  if (!gradOutput.defined()) return {};
  checkSavedVersions();
  // PyTorch names a backward node's event after the node (built only while a profile records).
  // Its input (the incoming gradient) places it on a device, where the profiler times it too.
  const profiler::RecordScope record(profiler::isObserving() ? "autograd::engine::evaluate_function: " + name_ : std::string(),
                                     {&gradOutput});
  std::vector<bool> needs(next.size());
  for (std::size_t i = 0; i < next.size(); ++i) needs[i] = next[i] != nullptr;
  return backward_(gradOutput, needs);
}

namespace {
// The run's record: what this leaf's .grad held as the backward reached it (reading it is the record's
// own work, not the run's: no op, copy or wait of it is noted).
void noteLeafForTheRecord(const TensorImpl& leaf, const GradientOps& ops) {
  if (!leaf.grad) return run_record::noteLeaf(run_record::GradBefore::None);
  // Inside a CUDA graph's capture its values cannot be read (that would wait for the device): unknown.
  if (const Device d = leaf.grad->storage->device(); d.isCuda() && cuda::isCapturing(d)) return run_record::noteLeaf(run_record::GradBefore::Unknown);
  const run_record::Pause notTheRuns;
  const bool nonzero = ops.anyNonzero(Tensor(leaf.grad));
  run_record::noteLeaf(nonzero ? run_record::GradBefore::Nonzero : run_record::GradBefore::Zero);
}
}  // namespace

std::vector<Tensor> AccumulateGrad::apply(const Tensor& gradOutput) {
  const profiler::RecordScope record("torch::autograd::AccumulateGrad", {&gradOutput});
  auto leaf = leaf_.lock();
  if (!leaf || !gradOutput.defined()) return {};
  NoGradGuard noGrad;
  // .grad has the leaf's dtype, whatever dtype the gradient was computed in.
  const GradientOps& ops = gradientOps();
  if (run_record::recording()) noteLeafForTheRecord(*leaf, ops);
  const Tensor g = gradOutput.dtype() == leaf->dtype ? gradOutput : ops.cast(gradOutput, leaf->dtype);
  if (!leaf->grad) {
    // PyTorch's AccumulateGrad steals the incoming gradient when nothing else can see it: only the
    // engine and `g` above hold it (not another branch of the graph, not the caller's
    // backward(gradient)), no view shares its storage, and it has the leaf's plain layout. Otherwise
    // .grad gets a private copy.
    // A gradient that arrives as a view (ViewBackward0's reshape) of a buffer that only that view holds
    // is as private: its base's handle on the storage does not count, and is dropped when .grad takes it.
    TensorImpl& in = gradOutput.impl();
    const bool privateBase = in.viewBase && in.viewBase.use_count() == 1 && in.viewBase->storage == in.storage;
    const long storageUses = in.storage.use_count() - (privateBase ? 1 : 0);
    const bool stealable = gradOutput.implPtr().use_count() == 2 && storageUses == 1 && (!in.viewBase || privateBase) &&
                           in.offset == 0 && in.grad_fn == nullptr && !in.requires_grad && in.sizes == leaf->sizes &&
                           gradOutput.is_contiguous() &&
                           in.storage->bytes() == static_cast<std::size_t>(gradOutput.numel()) * elementSize(gradOutput.dtype());
    if (!g.sameAs(gradOutput)) {
      leaf->grad = g.detach().implPtr();  // converted to the leaf's dtype: already private
    } else if (stealable) {
      in.viewBase.reset();  // .grad is no view of anything, as PyTorch's
      leaf->grad = gradOutput.implPtr();
    } else {
      leaf->grad = ops.clone(gradOutput.detach()).implPtr();
    }
  } else {
    Tensor existing(leaf->grad);
    ops.copyInto(existing, ops.add(existing, g));  // gradients accumulate across backward calls
  }
  return {};
}

std::shared_ptr<Node> gradientEdge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;  // requires_grad() brings a view's history up to date
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return impl.grad_fn;
  auto acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.implPtr());
    impl.grad_accumulator = acc;
  }
  return acc;
}

namespace {

// A view made under no_grad is not part of its base's history. Once the base (or another view of it)
// has been written in place, which history it would have is ambiguous: PyTorch refuses to use it with
// grad mode on, and so does this engine, rather than give it one.
void checkNoGradView(const TensorImpl& t) {
  if (!t.viewCreatedInNoGrad || !detail::viewHistoryIsStale(t) || !t.viewBase->requires_grad) return;
  throw Error("A view was created in no_grad mode and its base or another view of its base has been modified inplace with "
              "grad mode enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify "
              "your code by moving both the view and the inplace either both inside the no_grad block (if you don't want "
              "the inplace to be tracked) or both outside (if you want the inplace to be tracked).");
}

bool sameGeometry(const TensorImpl& a, const TensorImpl& b) {
  return a.version == b.version && a.offset == b.offset && a.sizes == b.sizes && a.strides == b.strides;
}

}  // namespace

bool anyRequiresGrad(const std::vector<Tensor>& inputs) {
  if (!isGradEnabled()) return false;
  bool any = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    checkNoGradView(t.impl());
    any = any || t.requires_grad();
  }
  return any;
}

Tensor record(Tensor result, const char* name, const std::vector<Tensor>& inputs, FunctionNode::Backward backward,
              const std::vector<Tensor>& saved) {
  if (!anyRequiresGrad(inputs)) return result;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next.reserve(inputs.size());
  node->nextDtypes.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next.push_back(gradientEdge(t));
    node->nextDtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  if (!saved.empty()) {
    std::vector<SavedTensor>& versions = node->saved();
    versions.reserve(saved.size());
    for (const Tensor& t : saved) {
      if (!t.defined()) continue;
      SavedTensor entry{t.implPtr(), t._version()};
      // Which tensor it was saved from: the one with its counter and geometry (a detach() of it).
      if (sameGeometry(t.impl(), result.impl())) {
        entry.source = SavedTensor::kOutput;
      } else {
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          if (inputs[i].defined() && sameGeometry(t.impl(), inputs[i].impl())) {
            entry.source = static_cast<int>(i);
            entry.original = inputs[i].implPtr();
            entry.originalWasView = inputs[i].is_view() && inputs[i].requires_grad();
            break;
          }
        }
      }
      versions.push_back(std::move(entry));
    }
  }
  result.impl().requires_grad = true;
  result.impl().grad_fn = std::move(node);
  return result;
}

namespace {

// The walk behind backward() and grad(): from each root with its gradient, every node once all its
// consumers have delivered theirs. With `kept` (grad()), a gradient reaching one of its nodes is
// stored there as it goes on, and no AccumulateGrad runs: grad() leaves every .grad as it was.
// Without `retainGraph`, each node releases what it saved once it has run.
void walk(const std::vector<std::shared_ptr<Node>>& roots, std::vector<Tensor> rootGrads, std::unordered_map<Node*, Tensor>* kept,
          bool retainGraph) {
  // A backward (not grad(), whose walk runs no AccumulateGrad) is an entry of the run's record.
  std::optional<run_record::BackwardScope> recorded;
  if (!kept && run_record::recording()) recorded.emplace();
  // The walk's bookkeeping lives in an arena on this stack frame (spilling to the heap for a large
  // graph): a training step's backward then makes no heap allocation of its own besides the gradients.
  alignas(std::max_align_t) std::byte scratch[16384];
  std::pmr::monotonic_buffer_resource arena(scratch, sizeof scratch);
  // Count, for every reachable node, how many edges lead into it.
  std::pmr::unordered_map<Node*, int> dependencies(&arena);
  dependencies.reserve(64);
  std::pmr::vector<Node*> stack(&arena);
  for (const auto& root : roots)
    if (dependencies.try_emplace(root.get(), 0).second) stack.push_back(root.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& child : n->next) {
      if (!child) continue;
      auto [it, inserted] = dependencies.try_emplace(child.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(child.get());
    }
  }
  // Process nodes whose every consumer has delivered its gradient.
  std::pmr::unordered_map<Node*, Tensor> pending(&arena);
  pending.reserve(dependencies.size());
  std::pmr::vector<std::shared_ptr<Node>> ready(&arena);
  for (std::size_t r = 0; r < roots.size(); ++r) {
    Tensor& slot = pending[roots[r].get()];
    slot = slot.defined() ? gradientOps().add(slot, rootGrads[r]) : std::move(rootGrads[r]);
    if (dependencies[roots[r].get()] == 0 && std::find(ready.begin(), ready.end(), roots[r]) == ready.end()) ready.push_back(roots[r]);
  }
  NoGradGuard noGrad;  // backward itself records nothing (no double backward yet)
  MemoryCategoryScope tag(MemoryCategory::Gradient);
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    // The gradient leaves `pending` before apply(): this `g` is the engine's only handle on it, which
    // AccumulateGrad relies on to tell an unshared gradient (that .grad may take) from a shared one.
    Tensor g = std::move(pending[node.get()]);
    pending.erase(node.get());
    if (kept)
      if (auto it = kept->find(node.get()); it != kept->end()) it->second = g;
    const bool leavesGradAlone = kept && dynamic_cast<AccumulateGrad*>(node.get());
    std::vector<Tensor> grads = leavesGradAlone ? std::vector<Tensor>() : node->apply(g);
    for (std::size_t i = 0; i < node->next.size(); ++i) {
      const auto& child = node->next[i];
      if (!child) continue;
      if (i < grads.size() && grads[i].defined()) {
        Tensor gi = std::move(grads[i]);
        if (i < node->nextDtypes.size() && gi.dtype() != node->nextDtypes[i]) gi = gradientOps().cast(gi, node->nextDtypes[i]);
        Tensor& slot = pending[child.get()];
        slot = slot.defined() ? gradientOps().add(slot, gi) : gi;
      }
      if (--dependencies[child.get()] == 0) ready.push_back(child);
    }
    if (!retainGraph) node->release();
  }
}

Tensor rootGradient(const Tensor& root, const Tensor& grad) {
  return grad.defined() && grad.dtype() != root.dtype() ? gradientOps().cast(grad, root.dtype()) : grad;
}

// The roots' nodes and their starting gradients (ones for an undefined one of a one-element output),
// checked as PyTorch checks them.
void rootsOf(const std::vector<Tensor>& outputs, const std::vector<Tensor>& gradOutputs, std::vector<std::shared_ptr<Node>>& roots,
             std::vector<Tensor>& rootGrads) {
  if (gradOutputs.size() != outputs.size()) {
    throw Error("grad requires one grad_output per output: got " + std::to_string(gradOutputs.size()) + " for " +
                std::to_string(outputs.size()) + " outputs");
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    auto node = gradientEdge(outputs[i]);
    if (!node) throw Error("element " + std::to_string(i) + " of tensors does not require grad and does not have a grad_fn");
    Tensor g = gradOutputs[i];
    if (!g.defined()) {
      if (outputs[i].numel() != 1) throw Error("grad can be implicitly created only for scalar outputs");
      g = Tensor::empty(outputs[i].sizes(), outputs[i].dtype(), outputs[i].device());
      backendFor(g.device()).fill(g, 1.0);
    } else if (g.sizes() != outputs[i].sizes()) {
      throw Error("Mismatch in shape: grad_output[" + std::to_string(i) + "] has a shape of torch.Size(" + shapeStr(g.sizes()) +
                  ") and output[" + std::to_string(i) + "] has a shape of torch.Size(" + shapeStr(outputs[i].sizes()) + ").");
    }
    roots.push_back(std::move(node));
    rootGrads.push_back(rootGradient(outputs[i], g));
  }
}

}  // namespace

void runBackward(const Tensor& root, const Tensor& grad, bool retainGraph) {
  auto rootNode = gradientEdge(root);
  if (!rootNode) {
    throw Error("element 0 of tensors does not require grad and does not have a grad_fn");
  }
  walk({rootNode}, {rootGradient(root, grad)}, nullptr, retainGraph);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retainGraph) {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<Tensor> rootGrads;
  rootsOf(roots, grads, nodes, rootGrads);
  walk(nodes, std::move(rootGrads), nullptr, retainGraph);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& gradOutputs, const std::vector<Tensor>& inputs,
                         bool allowUnused, bool retainGraph) {
  std::vector<std::shared_ptr<Node>> roots;
  std::vector<Tensor> rootGrads;
  rootsOf(outputs, gradOutputs, roots, rootGrads);
  // The node each input's gradient flows into: its grad_fn, or its AccumulateGrad (the one the graph
  // holds, found through the leaf's weak handle; a new one, never reached, when the graph has none).
  std::vector<std::shared_ptr<Node>> targets;
  std::unordered_map<Node*, Tensor> kept;
  for (const Tensor& input : inputs) {
    auto node = gradientEdge(input);
    if (!node) throw Error("One of the differentiated Tensors does not require grad");
    kept.emplace(node.get(), Tensor());
    targets.push_back(std::move(node));
  }
  walk(roots, std::move(rootGrads), &kept, retainGraph);
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = kept.at(targets[i].get());
    if (!g.defined() && !allowUnused) {
      throw Error("One of the differentiated Tensors appears to not have been used in the graph. Set allow_unused=True if this is "
                  "the desired behavior.");
    }
    // A gradient in another dtype than its input (a float16 op's) is given in the input's, as .grad is.
    if (g.defined() && g.dtype() != inputs[i].dtype()) g = gradientOps().cast(g, inputs[i].dtype());
    out.push_back(g.defined() ? g.detach() : g);
  }
  return out;
}

}  // namespace autograd
}  // namespace gpulab
