// Tests of the vectorized CUDA elementwise kernels (src/ops/cuda/elementwise.cu): relu, relu backward,
// the dense binary ops (the residual add), the fused add + relu and affine, through the Backend on views at every
// alignment (equal and different misalignments of the operands), at sizes around the vector width, in f32, f16 and
// bf16. The CPU twin (f32 math on the values the low dtype holds, rounded once) must agree bit for bit, special values
// included, and the elements next to each output view must stay untouched. Tagged [cuda]: skipped without a GPU.
#include <array>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"
#include "opsnn/ops/ops.h"
#include "support/bit_patterns.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"
#include "support/guarded_views.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA elementwise kernel tests"); }

const std::vector<int64_t> kSizes = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};
const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// Uniform values in [-2, 2) in `dtype` (CPU) with special values spread over them: signed zeros,
// infinities, NaN, a value past the f16 range, f16 and f32 subnormals.
Tensor sample(int64_t count, DType dtype, Generator& generator) {
  std::vector<float> values = Tensor::uniform({count}, -2.0, 2.0, generator, DType::f32).to_vector<float>();
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 70000.0f, -3e-6f, 1e-40f, -1e-40f, 1.0f};
  for (size_t i = 0; i < std::size(specials) && !values.empty(); ++i) values[(i * 7919) % values.size()] = specials[i];
  return Tensor::from_vector(values, {count}).to(dtype);
}

GuardedView place(const Tensor& values, int64_t shift) { return guarded_view(values, shift, kGpu); }

GuardedView place_output(int64_t count, DType dtype, int64_t shift) {
  return place(Tensor::full({count}, -7.0, dtype), shift);
}

std::string describe(const char* op, DType dtype, int64_t count, const std::array<int64_t, 3>& shifts) {
  return std::string(op) + " " + std::string(dtype_name(dtype)) + " count " + std::to_string(count) + " shifts " +
         std::to_string(shifts[0]) + "/" + std::to_string(shifts[1]) + "/" + std::to_string(shifts[2]);
}

}  // namespace

TEST_CASE(
    "CUDA relu, relu backward, binary ops, add_relu and affine match the CPU bit for bit at any size and alignment",
    "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(31);
  ops::Backend& gpu = ops::backend_for(kGpu);
  ops::Backend& cpu = ops::backend_for(kCPU);
  // Misalignment in elements of the first input, the second input and the output: all aligned, equally
  // misaligned (scalar head, then vector steps), and mismatched (no vector steps).
  const std::vector<std::array<int64_t, 3>> shift_cases = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {1, 0, 0}, {0, 2, 1}};
  for (DType dtype : kDtypes) {
    for (int64_t count : kSizes) {
      for (const std::array<int64_t, 3>& shifts : shift_cases) {
        const Tensor a = sample(count, dtype, generator), b = sample(count, dtype, generator);
        const GuardedView placed_a = place(a, shifts[0]), placed_b = place(b, shifts[1]);
        const Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);

        std::string what = describe("relu", dtype, count, shifts);
        GuardedView out = place_output(count, dtype, shifts[2]);
        gpu.relu(placed_a.view, out.view);
        Tensor expected = Tensor::empty({count});
        cpu.relu(a32, expected);
        require_same_bits(out.view, expected.to(dtype), what);
        require_guards_intact(out, what);

        what = describe("relu_backward", dtype, count, shifts);
        out = place_output(count, dtype, shifts[2]);
        gpu.relu_backward(placed_b.view, placed_a.view, out.view);  // upstream b, input a
        cpu.relu_backward(b32, a32, expected);
        require_same_bits(out.view, expected.to(dtype), what);
        require_guards_intact(out, what);

        what = describe("add_relu", dtype, count, shifts);
        out = place_output(count, dtype, shifts[2]);
        gpu.add_relu(placed_a.view, placed_b.view, out.view);
        cpu.add_relu(a32, b32, expected);
        require_same_bits(out.view, expected.to(dtype), what);
        require_guards_intact(out, what);

        what = describe("affine", dtype, count, shifts);
        out = place_output(count, dtype, shifts[2]);
        gpu.affine(placed_a.view, -2.5, 0.375, out.view);
        cpu.affine(a32, -2.5, 0.375, expected);
        require_same_bits(out.view, expected.to(dtype), what);
        require_guards_intact(out, what);

        for (ops::BinaryOp op : {ops::BinaryOp::add, ops::BinaryOp::sub, ops::BinaryOp::mul, ops::BinaryOp::div}) {
          what = describe("binary", dtype, count, shifts) + " op " + std::to_string(static_cast<int>(op));
          out = place_output(count, dtype, shifts[2]);
          gpu.binary(op, placed_a.view, placed_b.view, out.view);
          cpu.binary(op, a32, b32, expected);
          require_same_bits(out.view, expected.to(dtype), what);
          require_guards_intact(out, what);
        }
      }
    }
  }
}

TEST_CASE("CUDA relu and the residual add through ops.h: forward and gradients match the CPU bit for bit",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  Generator generator(32);
  for (DType dtype : kDtypes) {
    for (int64_t count : kSizes) {
      for (bool fused : {false, true}) {
        // The views start one element into their buffers, as a slice does.
        const Tensor x_values = sample(count + 1, dtype, generator), y_values = sample(count + 1, dtype, generator);
        const Tensor upstream = sample(count, dtype, generator);
        std::vector<Tensor> outputs, x_grads, y_grads;
        for (Device device : {kCPU, kGpu}) {
          // The CPU has no f16/bf16 kernels: it computes in f32 on the same values and rounds at the end.
          const DType compute = device.is_cpu() ? DType::f32 : dtype;
          Tensor x = x_values.to(compute).to(device).slice(0, 1, count + 1).detach().set_requires_grad(true);
          Tensor y = y_values.to(compute).to(device).slice(0, 1, count + 1).detach().set_requires_grad(true);
          // fused: add_relu on a contiguous view one element into its buffer (scalar head, then vectors).
          Tensor out = fused ? ops::add_relu(ops::relu(x), y) : ops::relu(ops::add(ops::relu(x), y));
          out.backward(upstream.to(compute).to(device));
          outputs.push_back(out.to(dtype));
          x_grads.push_back(x.grad().to(dtype));
          y_grads.push_back(y.grad().to(dtype));
        }
        const std::string what =
            std::string(dtype_name(dtype)) + " count " + std::to_string(count) + (fused ? " add_relu" : "");
        require_same_bits(outputs[1], outputs[0], "relu(relu(x) + y) " + what);
        require_same_bits(x_grads[1], x_grads[0], "grad x " + what);
        require_same_bits(y_grads[1], y_grads[0], "grad y " + what);
      }
    }
  }
}
