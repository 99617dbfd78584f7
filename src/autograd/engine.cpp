// The backward engine: orders the graph reachable from the root topologically (dependency counts),
// runs each node once with the sum of the gradients flowing into it, and accumulates leaf gradients.
// Tensor::backward is defined here, with the engine it runs, so that core never calls up into autograd.
#include <unordered_map>
#include <vector>

#include "opsnn/autograd/node.h"

namespace opsnn::autograd {
namespace {

thread_local bool grad_enabled = true;
thread_local GradientReadyCallback gradient_ready;
// Flag in a leaf's remaining-edge count: some edge delivered a gradient to it in this pass.
constexpr int kDelivered = 1 << 30;

// True when `gradient` is the only handle to its values: no other Tensor shares its TensorImpl and no
// other view shares its storage (a node's saved tensor, another pending gradient, the caller's seed).
// The engine may then keep the buffer or write into it where it would otherwise copy it first.
bool exclusively_owned(const Tensor& gradient) {
  return gradient.impl_ptr().use_count() == 1 && gradient.storage().use_count() == 1 && gradient.is_contiguous();
}

// Adds gradient into the leaf's .grad: in place when one exists (arena views stay views), converting it on
// the way (a cast hands a parameter its low-precision gradient). Otherwise the leaf takes over a gradient
// nothing else holds (when it spans its whole storage, so .grad does not pin a larger buffer), else gets a
// copy in its dtype.
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& gradient) {
  Tensor leaf_view(std::shared_ptr<TensorImpl>(&leaf, [](TensorImpl*) {}));
  check_same_shape(leaf_view, gradient, "gradient accumulation");
  if (leaf.grad) {
    Tensor existing(leaf.grad);
    existing.add_converted_(gradient);
  } else if (gradient.dtype() == leaf.dtype && exclusively_owned(gradient) &&
             gradient.nbytes() == gradient.storage()->bytes()) {
    leaf.grad = gradient.detach().impl_ptr();  // a fresh TensorImpl: no autograd fields carried over
  } else {
    leaf.grad = gradient.dtype() == leaf.dtype ? gradient.clone().impl_ptr() : gradient.to(leaf.dtype).impl_ptr();
  }
}

// The gradients node may sum into in place (Node::backward_into), for each input i the node accepts one
// for and that no other input of the node shares (both slots would add into one tensor): a pending
// gradient of the input's producer that nothing else holds, taken out of pending; or a leaf's existing
// .grad (a parameter's gradient in the optimizer's arena), which then needs no accumulation pass. Empty
// when none.
std::vector<Tensor> accumulator_offers(const Node& node, std::unordered_map<Node*, Tensor>& pending) {
  std::vector<Tensor> offers;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const Edge& edge = node.inputs[i];
    if (!node.accepts_accumulator(i)) continue;
    if (!edge.function && edge.leaf) {
      bool shared = false;
      for (size_t j = 0; j < node.inputs.size(); ++j) shared |= j != i && node.inputs[j].leaf == edge.leaf;
      if (shared || !edge.leaf->grad) continue;
      Tensor grad(edge.leaf->grad);
      if (!grad.is_contiguous() || grad.dtype() != edge.leaf->dtype) continue;
      offers.resize(node.inputs.size());
      offers[i] = std::move(grad);
      continue;
    }
    Node* next = edge.function.get();
    if (!next) continue;
    bool shared = false;
    for (size_t j = 0; j < node.inputs.size(); ++j) shared |= j != i && node.inputs[j].function.get() == next;
    auto it = pending.find(next);
    if (shared || it == pending.end() || !it->second.defined() || !exclusively_owned(it->second)) continue;
    offers.resize(node.inputs.size());
    offers[i] = std::move(it->second);
    it->second = Tensor();
  }
  return offers;
}

}  // namespace

bool grad_mode_enabled() { return grad_enabled; }

GradientReadyHook::GradientReadyHook(GradientReadyCallback callback) : previous_(std::move(gradient_ready)) {
  gradient_ready = std::move(callback);
}
GradientReadyHook::~GradientReadyHook() { gradient_ready = std::move(previous_); }

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled) return false;
  for (const Tensor& input : inputs)
    if (input.defined() && input.requires_grad()) return true;
  return false;
}

Tensor record(Tensor result, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  if (!any_requires_grad(inputs)) return result;
  node->inputs.clear();
  for (const Tensor& input : inputs) {
    Edge edge;
    if (input.defined() && input.requires_grad()) {
      if (input.grad_fn())
        edge.function = input.grad_fn();
      else
        edge.leaf = input.impl_ptr();
    }
    node->inputs.push_back(std::move(edge));
  }
  node->output_shape = result.shape();
  node->output_dtype = result.dtype();
  result.impl()->requires_grad = true;
  result.impl()->grad_fn = std::move(node);
  return result;
}

void run_backward(const Tensor& root, const Tensor& seed) {
  OPSNN_CHECK(root.requires_grad(), "backward() on a tensor that does not require grad (", root.str(),
              "): no parameter or input was marked requires_grad, or it was computed under NoGradGuard");
  check_same_shape(root, seed, "backward seed gradient");
  check_same_device(root, seed, "backward seed gradient");
  if (!root.grad_fn()) {  // backward on a leaf: its gradient is the seed
    accumulate_into_leaf(*root.impl(), seed);
    if (gradient_ready) gradient_ready(*root.impl());
    return;
  }
  // Count, for every node, how many edges from other reachable nodes point at it.
  // With a gradient-ready callback: also how many edges point at every leaf (a shared weight is final
  // only after its last use has delivered).
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<const TensorImpl*, int> leaf_edges;
  std::vector<Node*> stack{root.grad_fn().get()};
  dependencies[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->inputs) {
      if (gradient_ready && edge.leaf) ++leaf_edges[edge.leaf.get()];
      if (!edge.function) continue;
      auto [it, inserted] = dependencies.try_emplace(edge.function.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(edge.function.get());
    }
  }
  std::unordered_map<Node*, Tensor> pending;  // summed incoming gradient of each node
  pending[root.grad_fn().get()] = seed;
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    OPSNN_CHECK(!node->released, "backward through the graph a second time (", node->name(),
                "): its saved tensors were freed by the first backward; run the forward pass again");
    Tensor grad_output = std::move(pending[node.get()]);
    pending.erase(node.get());
    std::vector<Tensor> grad_inputs;
    std::vector<bool> added_in_place;  // input i's leaf gradient was summed into in place
    if (!grad_output.defined()) {
      grad_inputs.resize(node->inputs.size());
    } else if (std::vector<Tensor> offers = accumulator_offers(*node, pending); offers.empty()) {
      grad_inputs = node->backward(grad_output);
    } else {
      grad_inputs = node->backward_into(grad_output, offers);
      // Each offer goes back to pending (a leaf's stays its .grad), summed into in place when the node
      // returned it (that gradient is then already delivered: its slot is cleared so the loop below adds
      // nothing more).
      added_in_place.assign(node->inputs.size(), false);
      for (size_t i = 0; i < offers.size(); ++i) {
        if (!offers[i].defined()) continue;
        const bool in_place = i < grad_inputs.size() && grad_inputs[i].impl_ptr() == offers[i].impl_ptr();
        if (in_place) grad_inputs[i] = Tensor();
        if (node->inputs[i].function)
          pending[node->inputs[i].function.get()] = std::move(offers[i]);
        else
          added_in_place[i] = in_place;
      }
    }
    OPSNN_CHECK(grad_inputs.size() == node->inputs.size(), node->name(), " backward returned ", grad_inputs.size(),
                " gradients for ", node->inputs.size(), " inputs");
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const Edge& edge = node->inputs[i];
      const Tensor& gradient = grad_inputs[i];
      if (edge.function) {
        Node* next = edge.function.get();
        if (gradient.defined()) {
          auto it = pending.find(next);
          if (it == pending.end() || !it->second.defined()) {
            pending[next] = gradient;
          } else {
            // Sum into the first gradient when nothing else holds it, else into a fresh buffer: it may
            // alias a saved tensor of another node, another pending gradient or the caller's seed.
            Tensor& sum = it->second;
            if (!exclusively_owned(sum)) sum = sum.contiguous().clone();
            sum.add_(gradient.to(sum.dtype()));
          }
        }
        if (--dependencies[next] == 0) ready.push_back(edge.function);
      } else if (edge.leaf) {
        if (gradient.defined()) accumulate_into_leaf(*edge.leaf, gradient);
        const bool delivered = gradient.defined() || (i < added_in_place.size() && added_in_place[i]);
        // Reported when its last edge is done, if any of them delivered (a leaf that got nothing has no
        // new gradient to report).
        if (gradient_ready) {
          int& remaining = leaf_edges[edge.leaf.get()];
          if (delivered) remaining |= kDelivered;
          if (--remaining == kDelivered) gradient_ready(*edge.leaf);
        }
      }
    }
    node->release();
    node->released = true;
  }
}

}  // namespace opsnn::autograd

namespace opsnn {

void Tensor::backward(const Tensor& gradient) const {
  Tensor seed = gradient;
  if (!seed.defined()) {
    OPSNN_CHECK_AS(ShapeError, numel() == 1, "backward() without a gradient needs a one-element tensor, got ",
                   shape_str(shape()), "; pass a gradient of that shape");
    seed = Tensor::ones(shape(), dtype(), device());
  }
  autograd::run_backward(*this, seed);
}

}  // namespace opsnn
