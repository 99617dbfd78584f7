// Autograd graph nodes: each differentiable op's result points at the Node that knows its backward.
// A Node holds one edge per input (the producing Node, or the leaf tensor that accumulates a gradient)
// and returns one gradient per input, an undefined Tensor where none flows.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/core/tensor.h"

namespace opsnn::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> function;    // set when the input came from another op
  std::shared_ptr<TensorImpl> leaf;  // set when the input is a leaf that requires grad
  bool active() const { return function != nullptr || leaf != nullptr; }
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grad_output has the output's shape; returns one gradient per input edge, each with that input's
  // shape (or undefined when the input needs none).
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // In-place accumulation. When the engine already holds a gradient for input i from another consumer of
  // that input (held by nothing else, contiguous), and accepts_accumulator(i) is true, it calls
  // backward_into with that tensor as accumulators[i] (other slots undefined). The node may add its
  // gradient for input i into it in place and return that very tensor in slot i, saving a temporary and
  // the engine's add pass (a ResNet block's input gradient: the branch's added to the shortcut's); or it
  // may return a fresh gradient as backward does, which the engine then adds as usual.
  virtual bool accepts_accumulator(size_t input) const {
    (void)input;
    return false;
  }
  virtual std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor>& accumulators) {
    (void)accumulators;
    return backward(grad_output);
  }
  // Frees saved tensors after a backward pass; a second backward through the node is then an error.
  virtual void release() {}

  std::vector<Edge> inputs;
  Shape output_shape;
  DType output_dtype = DType::f32;
  bool released = false;
  // Asks whether input i needs a gradient, so backward can skip work.
  bool needs_grad(size_t i) const { return i < inputs.size() && inputs[i].active(); }
};

// True unless a NoGradGuard is alive on this thread.
bool grad_mode_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True if grad mode is on and any input requires grad: the op must then record a node.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Attaches node to result: fills node->inputs from `inputs`, sets result's grad_fn and requires_grad.
// Does nothing (and returns result unchanged) when no input requires grad or grad mode is off.
Tensor record(Tensor result, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);

// Runs backward from root with the given seed gradient (root's shape). Gradients accumulate into the
// .grad of leaves that require grad (in place when .grad exists, so arena views stay arena views).
void run_backward(const Tensor& root, const Tensor& seed);

// Called during backward once a leaf's gradient is final for this pass (every edge into the leaf has
// delivered), on the thread running backward: what data parallelism needs to start reducing gradients
// while the rest of backward computes. Leaves that receive no gradient in a pass are never reported.
using GradientReadyCallback = std::function<void(const TensorImpl& leaf)>;

// Installs a callback for the backward passes run on this thread while it lives (the previous one is
// restored afterwards; one at a time per thread).
class GradientReadyHook {
 public:
  explicit GradientReadyHook(GradientReadyCallback callback);
  ~GradientReadyHook();
  GradientReadyHook(const GradientReadyHook&) = delete;
  GradientReadyHook& operator=(const GradientReadyHook&) = delete;

 private:
  GradientReadyCallback previous_;
};

}  // namespace opsnn::autograd
