// CPU sum over a set of dimensions (keepdim layout). Sums accumulate in double, and every output's
// terms are added in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

// x's dimensions with size-1 ones dropped and neighbours of the same kind (reduced or kept) merged;
// x is contiguous, so each merged block is one arithmetic progression.
struct ReduceBlock {
  int64_t extent;
  int64_t stride;  // in x, elements
  bool reduced;
};

std::vector<ReduceBlock> reduce_blocks(const Shape& shape, const std::vector<bool>& reduced) {
  std::vector<ReduceBlock> blocks;
  Shape strides = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!blocks.empty() && blocks.back().reduced == reduced[d]) {
      blocks.back().extent *= shape[d];
      blocks.back().stride = strides[d];
    } else {
      blocks.push_back({shape[d], strides[d], reduced[d]});
    }
  }
  return blocks;
}

// Offsets in x of every index combination of the chosen blocks, the last block varying fastest.
std::vector<int64_t> block_offsets(const std::vector<ReduceBlock>& blocks) {
  std::vector<int64_t> offsets{0};
  for (const ReduceBlock& block : blocks) {
    std::vector<int64_t> expanded;
    expanded.reserve(offsets.size() * static_cast<size_t>(block.extent));
    for (int64_t base : offsets)
      for (int64_t i = 0; i < block.extent; ++i) expanded.push_back(base + i * block.stride);
    offsets = std::move(expanded);
  }
  return offsets;
}

template <typename T>
double sum_run(const T* values, int64_t count) {
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < count; ++i) total += static_cast<double>(values[i]);
  return total;
}

// All of a contiguous run into one value: fixed-size chunks in parallel, partials added in order.
template <typename T>
double sum_all(const T* values, int64_t count) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<double> partials(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (count >= cpu::kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c)
    partials[static_cast<size_t>(c)] = sum_run(values + c * kChunk, std::min(kChunk, count - c * kChunk));
  double total = 0.0;
  for (double partial : partials) total += partial;
  return total;
}

template <typename T>
void sum_typed(const Tensor& x, const std::vector<bool>& reduced, Tensor& out) {
  const T* in = x.data<T>();
  T* result = out.data<T>();
  const int64_t out_count = out.numel();
  if (out_count == 0) return;
  if (x.numel() == 0) {
    std::fill(result, result + out_count, T(0));
    return;
  }
  std::vector<ReduceBlock> blocks = reduce_blocks(x.shape(), reduced);
  std::vector<ReduceBlock> kept_blocks, reduced_blocks;
  for (const ReduceBlock& block : blocks) (block.reduced ? reduced_blocks : kept_blocks).push_back(block);
  if (reduced_blocks.empty()) {  // nothing of extent > 1 to reduce: a copy
    std::copy(in, in + out_count, result);
    return;
  }
  if (kept_blocks.empty()) {
    result[0] = static_cast<T>(sum_all(in, x.numel()));
    return;
  }
  // x offset of output element o: decompose o over the kept blocks (out is their contiguous layout).
  auto kept_offset = [&](int64_t o, size_t block_count) {
    int64_t offset = 0;
    for (size_t k = block_count; k-- > 0;) {
      offset += (o % kept_blocks[k].extent) * kept_blocks[k].stride;
      o /= kept_blocks[k].extent;
    }
    return offset;
  };
  if (blocks.back().reduced) {
    // Innermost block reduced: each output sums contiguous runs of that block's length.
    const int64_t run = blocks.back().extent;
    std::vector<ReduceBlock> outer_reduced(reduced_blocks.begin(), reduced_blocks.end() - 1);
    const std::vector<int64_t> run_offsets = block_offsets(outer_reduced);
    const int64_t run_count = static_cast<int64_t>(run_offsets.size());
#pragma omp parallel for schedule(static) if (x.numel() >= cpu::kParallelMinElements)
    for (int64_t o = 0; o < out_count; ++o) {
      const T* base = in + kept_offset(o, kept_blocks.size());
      double total = 0.0;
      for (int64_t r = 0; r < run_count; ++r) total += sum_run(base + run_offsets[static_cast<size_t>(r)], run);
      result[o] = static_cast<T>(total);
    }
    return;
  }
  // Innermost block kept (contiguous in x and out): add whole rows of it, in chunks across threads.
  const int64_t row = blocks.back().extent;
  const int64_t out_rows = out_count / row;
  const std::vector<int64_t> row_offsets = block_offsets(reduced_blocks);
  constexpr int64_t kChunk = 1024;
  const int64_t chunks_per_row = (row + kChunk - 1) / kChunk;
  const int64_t tasks = out_rows * chunks_per_row;
#pragma omp parallel for schedule(static) if (x.numel() >= cpu::kParallelMinElements && tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t out_row = task / chunks_per_row;
    const int64_t start = (task % chunks_per_row) * kChunk;
    const int64_t count = std::min(kChunk, row - start);
    double accumulator[kChunk];
    std::fill(accumulator, accumulator + count, 0.0);
    const T* base = in + kept_offset(out_row, kept_blocks.size() - 1) + start;
    for (int64_t offset : row_offsets) {
      const T* source = base + offset;
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) accumulator[i] += static_cast<double>(source[i]);
    }
    T* destination = result + out_row * row + start;
    for (int64_t i = 0; i < count; ++i) destination[i] = static_cast<T>(accumulator[i]);
  }
}

}  // namespace

void CpuBackend::sum(const Tensor& x, const std::vector<int64_t>& reduce_dims, Tensor& out) {
  check_same_dtype(x, out, "CPU sum");
  OPSNN_CHECK(x.is_contiguous() && out.is_contiguous(), "CPU sum: operands must be contiguous");
  std::vector<bool> reduced(x.shape().size(), false);
  for (int64_t d : reduce_dims) {
    OPSNN_CHECK_AS(ShapeError, d >= 0 && d < x.dim(), "CPU sum: dimension ", d, " out of range for ",
                   shape_str(x.shape()));
    reduced[static_cast<size_t>(d)] = true;
  }
  Shape expected = x.shape();
  for (size_t d = 0; d < expected.size(); ++d)
    if (reduced[d]) expected[d] = 1;
  OPSNN_CHECK_AS(ShapeError, out.shape() == expected, "CPU sum: output ", shape_str(out.shape()),
                 " does not match the keepdim shape ", shape_str(expected), " of ", shape_str(x.shape()));
  cpu::visit_floating(x.dtype(), "sum", [&](auto tag) { sum_typed<decltype(tag)>(x, reduced, out); });
}

}  // namespace opsnn::ops
