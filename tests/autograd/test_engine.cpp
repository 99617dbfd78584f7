// Tests of src/autograd/engine.cpp: topological order, gradient accumulation (a tensor used twice,
// two backward calls, in place into arena views, into a first gradient only when nothing else holds
// it, a node adding its gradient into the engine's in place when offered), NoGradGuard, and the errors
// for misuse. The first cases use tiny test-local nodes so the engine is checked on its own; the last
// ones use ops.h.
#include <memory>
#include <vector>

#include "opsnn/autograd/node.h"
#include "opsnn/core/tensor.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using autograd::Node;

namespace {

// Elementwise f32 helpers on CPU tensors of one shape, outside the op library.
Tensor zip(const Tensor& a, const Tensor& b, float (*combine)(float, float)) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) x[i] = combine(x[i], y[i]);
  return Tensor::from_vector(x, a.shape());
}
Tensor times(const Tensor& a, const Tensor& b) {
  return zip(a, b, [](float x, float y) { return x * y; });
}
Tensor plus(const Tensor& a, const Tensor& b) {
  return zip(a, b, [](float x, float y) { return x + y; });
}

// c = a * b, counting its backward calls and recording whether release() ran.
struct MulNode final : Node {
  Tensor saved_a, saved_b;
  int* backward_calls = nullptr;
  std::string name() const override { return "MulNode"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    if (backward_calls) ++*backward_calls;
    return {needs_grad(0) ? times(grad_output, saved_b) : Tensor(),
            needs_grad(1) ? times(grad_output, saved_a) : Tensor()};
  }
  void release() override {
    saved_a = Tensor();
    saved_b = Tensor();
  }
};

// c = a + b; its backward hands the same gradient tensor to both inputs (as real add does), which the
// engine must not accumulate into in place.
struct AddNode final : Node {
  std::string name() const override { return "AddNode"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override { return {grad_output, grad_output}; }
};

// s = sum(x) as a one-element [1] tensor.
struct SumNode final : Node {
  Shape input_shape;
  std::string name() const override { return "SumNode"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {Tensor::full(input_shape, grad_output.item())};
  }
};

// y = x; its backward hands out a gradient buffer the node keeps (as a node returning a saved tensor
// would), which the engine must neither write into nor give to a leaf as its .grad.
struct KeepNode final : Node {
  Tensor kept;
  std::string name() const override { return "KeepNode"; }
  std::vector<Tensor> backward(const Tensor&) override { return {kept}; }
};

// c = a * b for a constant b, whose backward accepts the engine's offer of a gradient to add a's into
// (Node::backward_into): it records whether one was offered, and takes it unless told to decline.
struct AccumulatingMulNode final : Node {
  Tensor saved_b;
  bool take = true;
  bool offered = false;
  std::string name() const override { return "AccumulatingMulNode"; }
  bool accepts_accumulator(size_t input) const override { return input == 0; }
  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }
  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor>& accumulators) override {
    offered = !accumulators.empty() && accumulators[0].defined();
    std::vector<Tensor> grads(inputs.size());  // a gradient for input 0 only
    grads[0] = times(grad_output, saved_b);
    if (offered && take) {
      Tensor into = accumulators[0];
      into.copy_(plus(into, grads[0]));
      grads[0] = into;
    }
    return grads;
  }
};

Tensor mul(const Tensor& a, const Tensor& b, int* calls = nullptr) {
  auto node = std::make_shared<MulNode>();
  node->saved_a = a.detach();
  node->saved_b = b.detach();
  node->backward_calls = calls;
  return autograd::record(times(a, b), node, {a, b});
}

// a * b through an AccumulatingMulNode (b a constant); the node is reachable as result.grad_fn().
Tensor accumulating_mul(const Tensor& a, const Tensor& b, bool take = true) {
  auto node = std::make_shared<AccumulatingMulNode>();
  node->saved_b = b.detach();
  node->take = take;
  return autograd::record(times(a, b), node, {a});
}

const AccumulatingMulNode& accumulating(const Tensor& result) {
  return static_cast<const AccumulatingMulNode&>(*result.grad_fn());
}

Tensor add(const Tensor& a, const Tensor& b) {
  return autograd::record(plus(a, b), std::make_shared<AddNode>(), {a, b});
}

// x passed through a KeepNode that will hand back `gradient`; the node is reachable as result.grad_fn().
Tensor keep(const Tensor& x, Tensor gradient) {
  auto node = std::make_shared<KeepNode>();
  node->kept = std::move(gradient);
  return autograd::record(x.detach().clone(), node, {x});
}

const Tensor& kept_by(const Tensor& result) { return static_cast<KeepNode&>(*result.grad_fn()).kept; }

Tensor sum(const Tensor& x) {
  double total = 0;
  for (float v : x.to_vector<float>()) total += v;
  auto node = std::make_shared<SumNode>();
  node->input_shape = x.shape();
  return autograd::record(Tensor::full({1}, total), node, {x});
}

Tensor leaf(std::vector<float> values) {
  Shape shape{static_cast<int64_t>(values.size())};
  Tensor t = Tensor::from_vector(values, shape);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

TEST_CASE("a tensor used twice receives the sum of both gradients", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  sum(mul(x, x)).backward();  // d/dx sum(x^2) = 2x
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});

  Tensor y = leaf({1, 2, 3});
  sum(add(y, y)).backward();  // both edges of one node point at y
  CHECK(y.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("gradients accumulate across backward calls and into existing (arena) buffers", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor w = leaf({3, 4});
  sum(mul(x, w)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 4});
  sum(mul(x, w)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 8});
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 4});

  // A gradient that is a view of an arena is accumulated in place: same handle, same memory.
  auto arena = std::make_shared<Storage>(8 * sizeof(float), kCPU);
  Tensor arena_view = Tensor::view_of(arena, 4, {2}, DType::f32);
  arena_view.fill_(10.0);
  w.set_grad(arena_view);
  sum(mul(x, w)).backward();
  CHECK(w.grad().same(arena_view));
  CHECK(Tensor::view_of(arena, 4, {2}, DType::f32).to_vector<float>() == std::vector<float>{11, 12});
}

TEST_CASE("the engine runs each node once, after all of its consumers", "[autograd]") {
  // x -> a = x*x -> b = a*x -> c = a*b: a feeds b and c, so a's backward must wait for both.
  Tensor x = leaf({2});
  int a_calls = 0, b_calls = 0, c_calls = 0;
  Tensor a = mul(x, x, &a_calls);
  Tensor b = mul(a, x, &b_calls);
  Tensor c = mul(a, b, &c_calls);
  sum(c).backward();  // c = x^5, dc/dx = 5 x^4 = 80
  CHECK(x.grad().to_vector<float>() == std::vector<float>{80});
  CHECK(a_calls == 1);
  CHECK(b_calls == 1);
  CHECK(c_calls == 1);
  CHECK(c.grad_fn()->released);
  CHECK(a.grad_fn()->released);
  // Intermediate results get no .grad; only leaves do.
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("gradients reach only the inputs that require them", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor constant = Tensor::from_vector<float>({5, 6}, {2});
  Tensor y = mul(x, constant);
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  sum(y).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 6});
  CHECK_FALSE(constant.grad().defined());
  // Nothing requires grad: no node is recorded.
  Tensor plain = mul(constant, constant);
  CHECK_FALSE(plain.requires_grad());
  CHECK(plain.grad_fn() == nullptr);
}

TEST_CASE("NoGradGuard stops recording and restores the previous mode", "[autograd]") {
  Tensor x = leaf({1, 2});
  CHECK(autograd::grad_mode_enabled());
  {
    autograd::NoGradGuard guard;
    CHECK_FALSE(autograd::grad_mode_enabled());
    Tensor y = mul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(autograd::any_requires_grad({x}));
    {
      autograd::NoGradGuard nested;
      CHECK_FALSE(autograd::grad_mode_enabled());
    }
    CHECK_FALSE(autograd::grad_mode_enabled());  // the nested guard restores "off", not "on"
    CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("does not require grad"));
  }
  CHECK(autograd::grad_mode_enabled());
  CHECK(mul(x, x).requires_grad());
}

TEST_CASE("backward misuse gives clear errors", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad(true);
  Tensor y = mul(x, x);
  // A non-scalar without a gradient: the message names the shape.
  CHECK_THROWS_AS(y.backward(), ShapeError);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("[2, 3]") && Catch::Contains("gradient"));
  // A gradient of the wrong shape: both shapes named.
  CHECK_THROWS_WITH(y.backward(Tensor::ones({3, 2})), Catch::Contains("[2, 3]") && Catch::Contains("[3, 2]"));
  // With a gradient of the right shape it works.
  y.backward(Tensor::ones({2, 3}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
  // A second backward through the freed graph.
  CHECK_THROWS_WITH(y.backward(Tensor::ones({2, 3})), Catch::Contains("second time") && Catch::Contains("MulNode"));
  // A tensor that does not require grad.
  Tensor plain = Tensor::ones({1});
  CHECK_THROWS_WITH(plain.backward(), Catch::Contains("does not require grad") && Catch::Contains("f32[1]"));
}

TEST_CASE("backward on a leaf seeds its own gradient", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  x.backward(Tensor::full({3}, 2.0));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  Tensor scalar = Tensor::scalar(4.0).set_requires_grad(true);
  scalar.backward();
  CHECK(scalar.grad().item() == 1.0);
}

TEST_CASE("summing two gradients writes neither the caller's seed nor a buffer a node keeps", "[autograd]") {
  // The seed reaches y through both edges of one AddNode: the sum must go to a new buffer.
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, Tensor::from_vector<float>({1, 1, 1}, {3}));
  Tensor seed = Tensor::from_vector<float>({1, 2, 3}, {3});
  add(y, y).backward(seed);
  CHECK(seed.to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});

  // h has two consumers: one hands back a buffer it keeps, the other a fresh one (which the engine may
  // sum into). The engine runs the second input of an add first, so both arrival orders are covered.
  for (bool kept_first : {true, false}) {
    INFO("kept gradient arrives " << (kept_first ? "first" : "second"));
    Tensor w = leaf({1, 2, 3});
    Tensor h = mul(w, Tensor::from_vector<float>({1, 1, 1}, {3}));
    Tensor via_keep = keep(h, Tensor::from_vector<float>({10, 20, 30}, {3}));
    Tensor via_mul = mul(h, Tensor::from_vector<float>({2, 2, 2}, {3}));
    Tensor total = kept_first ? add(via_mul, via_keep) : add(via_keep, via_mul);
    total.backward(Tensor::ones({3}));
    CHECK(kept_by(via_keep).to_vector<float>() == std::vector<float>{10, 20, 30});
    CHECK(w.grad().to_vector<float>() == std::vector<float>{12, 22, 32});
  }
}

TEST_CASE("a leaf's first gradient is its own buffer: kept, shared and seed gradients are copied", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  Tensor via_keep = keep(x, Tensor::from_vector<float>({4, 5, 6}, {3}));
  sum(via_keep).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(x.grad().storage() != kept_by(via_keep).storage());
  // The next backward accumulates into x.grad in place; the buffer the first node keeps is untouched.
  sum(keep(x, Tensor::from_vector<float>({1, 1, 1}, {3}))).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 6, 7});
  CHECK(kept_by(via_keep).to_vector<float>() == std::vector<float>{4, 5, 6});

  // One gradient tensor handed to a leaf through both edges of an AddNode, then accumulated again.
  Tensor z = leaf({1, 2, 3});
  Tensor seed = Tensor::from_vector<float>({1, 2, 3}, {3});
  add(z, z).backward(seed);
  CHECK(z.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(seed.to_vector<float>() == std::vector<float>{1, 2, 3});

  // The seed of a backward on a leaf stays the caller's.
  Tensor root = leaf({1, 2});
  Tensor root_seed = Tensor::from_vector<float>({3, 4}, {2});
  root.backward(root_seed);
  CHECK(root.grad().storage() != root_seed.storage());
  root.backward(root_seed);
  CHECK(root.grad().to_vector<float>() == std::vector<float>{6, 8});
  CHECK(root_seed.to_vector<float>() == std::vector<float>{3, 4});
}

TEST_CASE("a node may add its gradient into the one the engine holds for its input, in place", "[autograd]") {
  const Tensor twos = Tensor::from_vector<float>({2, 2, 2}, {3}), threes = Tensor::from_vector<float>({3, 3, 3}, {3});
  // h feeds a MulNode (times 2) and an AccumulatingMulNode (times 3). The engine runs the second input of
  // an add first, so with add(via_accumulating, via_mul) the MulNode's fresh gradient is pending when the
  // accumulating node runs: it is offered, and taken or declined; the other order offers nothing.
  for (bool mul_first : {true, false}) {
    for (bool take : {true, false}) {
      INFO((mul_first ? "plain node first" : "accumulating node first") << (take ? ", takes" : ", declines"));
      Tensor w = leaf({1, 2, 3});
      Tensor h = mul(w, Tensor::from_vector<float>({1, 1, 1}, {3}));
      Tensor via_mul = mul(h, twos);
      Tensor via_accumulating = accumulating_mul(h, threes, take);
      Tensor total = mul_first ? add(via_accumulating, via_mul) : add(via_mul, via_accumulating);
      total.backward(Tensor::from_vector<float>({1, 10, 100}, {3}));
      CHECK(accumulating(via_accumulating).offered == mul_first);
      CHECK(w.grad().to_vector<float>() == std::vector<float>{5, 50, 500});
    }
  }

  // A pending gradient something else holds (a buffer a node keeps) is never offered, nor written.
  {
    Tensor w = leaf({1, 2, 3});
    Tensor h = mul(w, Tensor::from_vector<float>({1, 1, 1}, {3}));
    Tensor via_keep = keep(h, Tensor::from_vector<float>({10, 20, 30}, {3}));
    Tensor via_accumulating = accumulating_mul(h, threes);
    add(via_accumulating, via_keep).backward(Tensor::ones({3}));
    CHECK_FALSE(accumulating(via_accumulating).offered);
    CHECK(kept_by(via_keep).to_vector<float>() == std::vector<float>{10, 20, 30});
    CHECK(w.grad().to_vector<float>() == std::vector<float>{13, 23, 33});
  }

  // Nor one for a producer that another input of the same node also has (both slots would add into it).
  {
    Tensor w = leaf({1, 2, 3});
    Tensor h = mul(w, Tensor::from_vector<float>({1, 1, 1}, {3}));
    auto node = std::make_shared<AccumulatingMulNode>();
    node->saved_b = twos;
    Tensor both = autograd::record(times(h, twos), node, {h, h});
    Tensor via_mul = mul(h, twos);
    add(both, via_mul).backward(Tensor::ones({3}));
    CHECK_FALSE(node->offered);
    CHECK(w.grad().to_vector<float>() == std::vector<float>{4, 4, 4});
  }
}

TEST_CASE("a node may add its gradient into a leaf's existing gradient in place, which is then reported ready",
          "[autograd]") {
  const Tensor threes = Tensor::from_vector<float>({3, 3, 3}, {3});
  // w already has a gradient (as a parameter's view of the optimizer's arena): the node is offered it, and
  // either adds into it (no accumulation pass after) or returns a fresh gradient the engine adds. Either
  // way w's gradient is the sum, in the same buffer, and the gradient-ready hook reports w once.
  for (bool take : {true, false}) {
    INFO((take ? "takes" : "declines"));
    Tensor w = leaf({1, 2, 3});
    w.set_grad(Tensor::from_vector<float>({1, 1, 1}, {3}));
    const TensorImpl* buffer = w.grad().impl();
    int reported = 0;
    autograd::GradientReadyHook hook([&](const TensorImpl& ready) { reported += &ready == w.impl() ? 1 : 0; });
    Tensor y = accumulating_mul(w, threes, take);
    y.backward(Tensor::from_vector<float>({1, 10, 100}, {3}));
    CHECK(accumulating(y).offered);
    CHECK(w.grad().to_vector<float>() == std::vector<float>{4, 31, 301});
    CHECK(w.grad().impl() == buffer);
    CHECK(reported == 1);
  }
  // A leaf without a gradient yet gets the node's fresh one; a leaf that is two inputs of the node is
  // offered nothing (both slots would add into it).
  {
    Tensor w = leaf({1, 2, 3});
    Tensor y = accumulating_mul(w, threes);
    y.backward(Tensor::ones({3}));
    CHECK_FALSE(accumulating(y).offered);
    CHECK(w.grad().to_vector<float>() == std::vector<float>{3, 3, 3});
  }
  {
    Tensor w = leaf({1, 2, 3});
    w.set_grad(Tensor::zeros({3}));
    auto node = std::make_shared<AccumulatingMulNode>();
    node->saved_b = threes;
    Tensor both = autograd::record(times(w, threes), node, {w, w});
    both.backward(Tensor::ones({3}));
    CHECK_FALSE(node->offered);
    CHECK(w.grad().to_vector<float>() == std::vector<float>{3, 3, 3});
  }
}

// ---- the same behaviour through the real differentiable ops ----

TEST_CASE("ops: accumulation for a tensor used twice and across backward calls", "[autograd]") {
  Tensor x = Tensor::from_vector<float>({1, -2, 3}, {3}).set_requires_grad(true);
  ops::sum(ops::add(ops::mul(x, x), x)).backward();  // d/dx (x^2 + x) = 2x + 1
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, -3, 7});
  ops::sum(ops::mul(x, x)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, -7, 13});
  Tensor y = ops::mul(x, x);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("[3]"));
  Tensor total = ops::sum(y);
  total.backward();
  CHECK_THROWS_WITH(total.backward(), Catch::Contains("second time"));
  {
    autograd::NoGradGuard guard;
    CHECK_FALSE(ops::add(x, x).requires_grad());
  }
}

TEST_CASE("ops: a residual block's input gets the sum of its branch and shortcut gradients", "[autograd]") {
  // input = relu(2x) feeds the branch (times w) and the shortcut; out = relu(input * w + input).
  Tensor x = Tensor::from_vector<float>({1, -2, 3, 0.5f}, {4}).set_requires_grad(true);
  Tensor w = Tensor::from_vector<float>({0.5f, 2, -1, 3}, {4}).set_requires_grad(true);
  const Tensor seed = Tensor::ones({4});
  for (float times : {1.0f, 2.0f}) {               // a second backward accumulates into the gradients of the first
    Tensor input = ops::relu(ops::scale(x, 2.0));  // [2, 0, 6, 1]
    Tensor out = ops::relu(ops::add(ops::mul(input, w), input));  // relu([3, 0, 0, 4])
    out.backward(seed);
    // d out / d input = relu'(s) (w + 1) = [1.5, 0, 0, 4]; d input / d x = 2 relu'(2x).
    CHECK(x.grad().to_vector<float>() == std::vector<float>{3 * times, 0, 0, 8 * times});
    CHECK(w.grad().to_vector<float>() == std::vector<float>{2 * times, 0, 0, 1 * times});
  }
  CHECK(seed.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
}
