// CUDA batch-norm passes over [rows, channels] data with the channel innermost (channels-last
// activations viewed as [N * H * W, C], or a plain [N, C] batch); declared in norm_rows.h, run by
// norm.cu's launchers when inner == 1, with its finalize kernels in between.
//
// Every pass uses 2-D blocks: threadIdx.x picks a unit (a vector of V consecutive channels, 16 bytes at
// most, V dividing the channel count so rows start on unit boundaries; V = 1 for an odd count) and
// threadIdx.y a row, so a warp reads whole stretches of consecutive rows, coalesced, and each thread
// keeps its V channels' sums or coefficients in registers while it walks down the rows.
//   reductions: blockIdx.y is the split (rows [split * chunk, (split + 1) * chunk)), blockIdx.x the unit
//     block; each thread sums its rows, the block adds its threads' sums over threadIdx.y in a fixed
//     tree in shared memory and writes one partial per (split, channel);
//   maps: a grid-stride walk over rows.
// Precision and determinism follow norm.cu: float sums of at most 8 terms added in double, forward terms
// shifted by a value taken from the data (the split's first row, so the block's sum of squares does not
// cancel), each block's shifted sums turned into (count, mean, M2) for norm.cu's pairwise merge; the
// split count depends only on the shape and the device, so equal inputs give bit-identical results.
#include <algorithm>

#include "core/cuda/current_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/norm_rows.h"

namespace opsnn::cuda::norm {
namespace {

constexpr int kRowThreads = 256;
// The reductions aim at this many blocks per SM (the two that are resident at once: more only add partials
// for the finalize kernels to merge), with at least kMinElementsPerBlock values each. ResNet-50 bf16 on an
// H200: 8 per SM 6742 images/s, 3 6795, 2 6917-6976, 1 6734.
constexpr int64_t kRowBlocksPerSm = 2;
constexpr int64_t kMinElementsPerBlock = 16384;
constexpr int64_t kMapBlocksPerSm = 8;
// Rows each thread of row_normalize_kernel loads per loop iteration (loads in flight, as floats).
template <int V>
constexpr int kRowUnroll = V > 4 ? 4 : 8;
// Rows each thread of a pass that loads raw bits (the reductions, grad_input) loads per loop iteration,
// over its `streams` input tensors: about 256 bytes in flight, 128 for 8-value units (16-bit data), whose
// 16 double sums leave fewer registers (more spills them with two blocks per SM); at most 8, the float
// group size.
template <typename T, int V, int streams>
constexpr int kRawRows =
    std::clamp(static_cast<int>(ceil_div(V > 4 ? 128 : 256, static_cast<int64_t>(sizeof(T)) * V * streams)), 1, 8);
// The gradient sums group as many rows per float sum masked or not (the count for three streams), so a
// fused relu's sums equal relu's backward followed by the plain sums bit for bit.
template <typename T, int V>
constexpr int kGradientSumRows = kRawRows<T, V, 3>;

// The blocks' shape for `units` units per row: up to 32 threads across the units, the rest down the rows.
struct RowBlock {
  int64_t units;  // units per row (channels / V)
  unsigned across, down;
  unsigned unit_blocks;  // blocks side by side to cover a row
};

RowBlock row_block(int64_t channels, int vector_width) {
  const int64_t units = channels / vector_width;
  const unsigned across = static_cast<unsigned>(std::min<int64_t>(units, 32));
  return {units, across, static_cast<unsigned>(kRowThreads) / across, static_cast<unsigned>(ceil_div(units, across))};
}

__device__ __forceinline__ double2 add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

// Adds values[threadIdx.y * blockDim.x + threadIdx.x] over threadIdx.y into row 0 in a fixed tree (every
// thread calls it; contains __syncthreads). Returns the total in the threads of row 0.
template <typename S>
__device__ S sum_down(S value, S* scratch) {
  const unsigned slot = threadIdx.y * blockDim.x + threadIdx.x;
  scratch[slot] = value;
  __syncthreads();
  unsigned half = 1;
  while (half < blockDim.y) half <<= 1;
  for (half >>= 1; half > 0; half >>= 1) {
    if (threadIdx.y < half && threadIdx.y + half < blockDim.y) {
      S& mine = scratch[slot];
      const S other = scratch[slot + half * blockDim.x];
      mine = add(mine, other);
    }
    __syncthreads();
  }
  const S total = scratch[threadIdx.x];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

// The rows of the split blockIdx.y (rows [begin, end)) and the unit of this thread.
struct SplitRows {
  int64_t unit, begin, end;
  bool active;  // the unit exists (the last unit block may stick out of the row)
};

__device__ SplitRows split_rows(int64_t rows, int64_t units, int64_t chunk) {
  SplitRows s;
  s.unit = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  s.active = s.unit < units;
  s.begin = blockIdx.y * chunk;
  s.end = std::min(rows, s.begin + chunk);
  return s;
}

// The reductions' walk: two terms per value, summed per channel of the thread's unit over its rows of
// the split (begin + threadIdx.y, then every blockDim.y rows), then over the block's rows in sum_down's
// fixed tree. load(offset) returns the raw bits of the unit (or units: the gradient sums load two or
// three) at unit offset `offset`; terms(raw, offset, a, b) writes its V values' two terms. The walk issues U
// loads before it turns the first into floats, so U units per thread are in flight while it holds only
// their bits; it adds each value's terms in float, in row order, over the U rows, then adds those sums
// of at most 8 terms in double. totals (x: the a sums, y: the b sums) are valid in row 0's threads.
// Every thread must call it (it contains __syncthreads).
template <int V, int U, typename Load, typename Terms>
__device__ void sum_split_terms(const SplitRows& s, int64_t units, Load load, Terms terms, double2 (&totals)[V]) {
  static_assert(U <= 8, "float groups hold at most 8 terms");
  __shared__ double2 scratch[kRowThreads];
  double first[V], second[V];
#pragma unroll
  for (int k = 0; k < V; ++k) first[k] = second[k] = 0.0;
  if (s.active) {
    const int64_t step = static_cast<int64_t>(blockDim.y) * units;  // units between a thread's rows
    for (int64_t row = s.begin + threadIdx.y; row < s.end; row += U * static_cast<int64_t>(blockDim.y)) {
      const int64_t at = row * units + s.unit;
      const int present = static_cast<int>(std::min<int64_t>(U, (s.end - row + blockDim.y - 1) / blockDim.y));
      decltype(load(at)) raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (u < present) raw[u] = load(at + u * step);
      float group_a[V], group_b[V];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float a[V], b[V];
        if (u < present) {
          terms(raw[u], at + u * step, a, b);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) a[k] = b[k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) {
          group_a[k] = u == 0 ? a[k] : group_a[k] + a[k];
          group_b[k] = u == 0 ? b[k] : group_b[k] + b[k];
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        first[k] += static_cast<double>(group_a[k]);
        second[k] += static_cast<double>(group_b[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) totals[k] = sum_down(make_double2(first[k], second[k]), scratch);
}

// Moments of each (split, channel) into partials, from the sums of deviations from the split's first row.
template <typename T, int V>
__global__ void __launch_bounds__(kRowThreads, 2)
    row_moments_kernel(const T* x, int64_t rows, int64_t units, int64_t chunk, Moments* partials) {
  const SplitRows s = split_rows(rows, units, chunk);
  float shift[V];
#pragma unroll
  for (int k = 0; k < V; ++k) shift[k] = 0.0f;
  if (s.active && s.begin < s.end) load_unit<T, V>(x, s.begin * units + s.unit, shift);
  double2 totals[V];
  sum_split_terms<V, kRawRows<T, V, 1>>(
      s, units, [&](int64_t offset) { return load_raw<T, V>(x, offset); },
      [&](const RawUnit<T, V>& raw, int64_t, float* deviations, float* squares) {
        unpack<T, V>(raw, deviations);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          deviations[k] -= shift[k];
          squares[k] = deviations[k] * deviations[k];
        }
      },
      totals);
  if (threadIdx.y != 0 || !s.active) return;
  const double count = static_cast<double>(std::max<int64_t>(s.end - s.begin, 0));
  const int64_t channels = units * V;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    Moments m{0.0, 0.0, 0.0};
    if (count > 0.0) {
      const double shifted_mean = totals[k].x / count;
      m = {count, static_cast<double>(shift[k]) + shifted_mean,
           std::max(totals[k].y - totals[k].x * shifted_mean, 0.0)};
    }
    partials[blockIdx.y * channels + s.unit * V + k] = m;
  }
}

// Sums of g and g * (x - mean) of each (split, channel) into partials (g masked as M says; with kStore the
// masked g also stored into masked_out: the splits cover each row once).
template <typename T, int V, Mask M, bool kStore>
__global__ void __launch_bounds__(kRowThreads, 2)
    row_gradient_sums_kernel(const T* grad_out, const T* relu_output, const T* x, NormalizeInputs forward, int64_t rows,
                             int64_t units, int64_t chunk, double2* partials, T* masked_out) {
  static_assert(M == Mask::stored || !kStore, "only a read mask is stored");
  const SplitRows s = split_rows(rows, units, chunk);
  // The mean, and with Mask::recomputed the forward's scale and shift: its coefficients {mean, scale, shift}.
  float mean[V], scale[V], shift[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    mean[k] = s.active ? forward.mean[s.unit * V + k] : 0.0f;
    scale[k] = shift[k] = 0.0f;
    if constexpr (M == Mask::recomputed) {
      if (s.active) {
        const float4 coefficients = normalize_coefficients(forward, s.unit * V + k);
        scale[k] = coefficients.y;
        shift[k] = coefficients.z;
      }
    }
  }
  using Raw = RawGradientUnit<T, V, M>;
  double2 totals[V];
  sum_split_terms<V, kGradientSumRows<T, V>>(
      s, units, [&](int64_t offset) { return load_raw_gradient<T, V, M>(grad_out, relu_output, x, offset); },
      [&](const Raw& raw, int64_t offset, float* grads, float* centered) {
        unpack_gradient(raw, grads, centered, [&](int k) { return make_float4(mean[k], scale[k], shift[k], 0.0f); });
        if constexpr (kStore) store_unit<T, V>(masked_out, offset, grads);
#pragma unroll
        for (int k = 0; k < V; ++k) centered[k] = grads[k] * (centered[k] - mean[k]);
      },
      totals);
  if (threadIdx.y != 0 || !s.active) return;
  const int64_t channels = units * V;
#pragma unroll
  for (int k = 0; k < V; ++k) partials[blockIdx.y * channels + s.unit * V + k] = totals[k];
}

// out = (x - center) * scale + shift with each value's channel's coefficients, which a thread loads once,
// finished by finish_normalized (relu with kRelu; relu of that plus the residual, as R says, with a
// residual: normalized first by residual_coefficients): its rows are blockIdx.y * blockDim.y + threadIdx.y
// and every grid's worth of rows on. U rows of x (and of the residual) are loaded as raw bits before any
// becomes floats: with the residual's loads too, floats would take the registers that keep those loads in
// flight.
template <typename T, int V, bool kRelu, Residual R>
__global__ void __launch_bounds__(kRowThreads)
    row_normalize_kernel(const T* x, const T* residual, T* out, const float4* coefficients,
                         const float4* residual_coefficients, int64_t rows, int64_t units) {
  constexpr int U = kRowUnroll<V>;
  constexpr bool kResidual = R != Residual::none;
  const int64_t unit = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (unit >= units) return;
  float4 k[V], residual_k[V];
#pragma unroll
  for (int c = 0; c < V; ++c) {
    k[c] = coefficients[unit * V + c];
    if constexpr (R == Residual::normalized) residual_k[c] = residual_coefficients[unit * V + c];
  }
  const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows; row += U * stride) {
    RawUnit<T, V> raw[U], raw_added[kResidual ? U : 1];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (row + u * stride < rows) {
        raw[u] = load_raw<T, V>(x, (row + u * stride) * units + unit);
        if constexpr (kResidual) raw_added[u] = load_raw<T, V>(residual, (row + u * stride) * units + unit);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (row + u * stride >= rows) continue;
      float v[V], added[V];
      unpack<T, V>(raw[u], v);
      if constexpr (kResidual) unpack<T, V>(raw_added[u], added);
#pragma unroll
      for (int c = 0; c < V; ++c)
        v[c] = finish_normalized<T, kRelu, kResidual>(normalize_value(v[c], k[c]),
                                                      kResidual ? residual_value<T, R>(added[c], residual_k[c]) : 0.0f);
      store_unit<T, V>(out, (row + u * stride) * units + unit, v);
    }
  }
}

// grad_input = k * (g - mean_grad) - slope * (x - mean), the rows walked as in row_normalize_kernel; U
// rows' units of g (and the relu output) and x loaded as raw bits before any becomes floats; g masked as
// M says (Mask::recomputed: with the forward's coefficients, mask_coefficients).
template <typename T, int V, Mask M>
__global__ void __launch_bounds__(kRowThreads, 2)
    row_grad_input_kernel(const T* grad_out, const T* relu_output, const T* x, T* grad_input,
                          const float4* coefficients, const float4* mask_coefficients, int64_t rows, int64_t units) {
  using Raw = RawGradientUnit<T, V, M>;
  constexpr int U = kRawRows<T, V, Raw::kStreams>;
  const int64_t unit = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (unit >= units) return;
  float4 k[V], mask_k[V];
#pragma unroll
  for (int c = 0; c < V; ++c) {
    k[c] = coefficients[unit * V + c];
    if constexpr (M == Mask::recomputed) mask_k[c] = mask_coefficients[unit * V + c];
  }
  const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows; row += U * stride) {
    Raw raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (row + u * stride < rows)
        raw[u] = load_raw_gradient<T, V, M>(grad_out, relu_output, x, (row + u * stride) * units + unit);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (row + u * stride >= rows) continue;
      float g[V], xu[V];
      unpack_gradient(raw[u], g, xu, [&](int c) { return mask_k[c]; });
#pragma unroll
      for (int c = 0; c < V; ++c) g[c] = grad_input_value(g[c], xu[c], k[c]);
      store_unit<T, V>(grad_input, (row + u * stride) * units + unit, g);
    }
  }
}

// Values per unit: the widest vector (16 bytes at most) that divides the channel count and to whose
// size every pointer is aligned (a null one is).
template <typename T>
int row_width(int64_t channels, std::initializer_list<const void*> pointers) {
  for (int width = kVectorWidth<T>; width > 1; width /= 2)
    if (channels % width == 0 && aligned(pointers, width * static_cast<int64_t>(sizeof(T)))) return width;
  return 1;
}

dim3 reduce_grid(const RowBlock& block, int64_t splits) {
  return dim3(block.unit_blocks, static_cast<unsigned>(splits));
}

// Enough blocks down the rows for a resident wave or so (the threads stride over the rest).
dim3 map_grid(const RowBlock& block, int64_t rows) {
  const int64_t wanted = ceil_div(rows, static_cast<int64_t>(block.down) * 4);
  const int64_t most = std::max<int64_t>(1, multiprocessor_count() * kMapBlocksPerSm / block.unit_blocks);
  return dim3(block.unit_blocks, static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(most, 65535))));
}

}  // namespace

int64_t row_split_count(int64_t rows, int64_t channels) {
  // The unit blocks side by side, estimated for the widest (16-bit, 8-value) units; the count must not
  // depend on the vector width, which the pointers' alignment decides at launch.
  const int64_t unit_blocks = ceil_div(channels, 8 * 32);
  const int64_t wanted = ceil_div(multiprocessor_count() * kRowBlocksPerSm, unit_blocks);
  const int64_t most = std::max<int64_t>(1, rows * channels / kMinElementsPerBlock);
  return std::clamp<int64_t>(std::min(wanted, most), 1, std::max<int64_t>(1, std::min<int64_t>(rows, 65535)));
}

template <typename T>
void launch_row_moments(const T* x, int64_t rows, int64_t channels, int64_t splits, Moments* partials) {
  with_width<kVectorWidth<T>>(row_width<T>(channels, {x}), [&](auto width) {
    constexpr int V = decltype(width)::value;
    const RowBlock block = row_block(channels, V);
    row_moments_kernel<T, V><<<reduce_grid(block, splits), dim3(block.across, block.down), 0, current_stream()>>>(
        x, rows, block.units, ceil_div(rows, splits), partials);
  });
}

template <typename T>
void launch_row_gradient_sums(const T* grad_out, const T* relu_output, const T* x, const NormalizeInputs& forward,
                              int64_t rows, int64_t channels, int64_t splits, double2* partials, T* masked_out) {
  with_width<kVectorWidth<T>>(row_width<T>(channels, {grad_out, relu_output, x, masked_out}), [&](auto width) {
    constexpr int V = decltype(width)::value;
    const RowBlock block = row_block(channels, V);
    const dim3 grid = reduce_grid(block, splits), threads(block.across, block.down);
    const int64_t chunk = ceil_div(rows, splits);
    if (relu_output != nullptr && masked_out != nullptr)
      row_gradient_sums_kernel<T, V, Mask::stored, true><<<grid, threads, 0, current_stream()>>>(
          grad_out, relu_output, x, forward, rows, block.units, chunk, partials, masked_out);
    else if (relu_output != nullptr)
      row_gradient_sums_kernel<T, V, Mask::stored, false><<<grid, threads, 0, current_stream()>>>(
          grad_out, relu_output, x, forward, rows, block.units, chunk, partials, nullptr);
    else if (forward.beta != nullptr)
      row_gradient_sums_kernel<T, V, Mask::recomputed, false><<<grid, threads, 0, current_stream()>>>(
          grad_out, nullptr, x, forward, rows, block.units, chunk, partials, nullptr);
    else
      row_gradient_sums_kernel<T, V, Mask::none, false><<<grid, threads, 0, current_stream()>>>(
          grad_out, nullptr, x, forward, rows, block.units, chunk, partials, nullptr);
  });
}

template <typename T>
void launch_row_normalize(const T* x, const T* residual, const float4* residual_coefficients, T* out,
                          const float4* coefficients, int64_t rows, int64_t channels, bool relu) {
  with_width<kVectorWidth<T>>(row_width<T>(channels, {x, residual, out}), [&](auto width) {
    constexpr int V = decltype(width)::value;
    const RowBlock block = row_block(channels, V);
    const dim3 grid = map_grid(block, rows), threads(block.across, block.down);
    if (residual != nullptr && residual_coefficients != nullptr)
      row_normalize_kernel<T, V, true, Residual::normalized><<<grid, threads, 0, current_stream()>>>(
          x, residual, out, coefficients, residual_coefficients, rows, block.units);
    else if (residual != nullptr)
      row_normalize_kernel<T, V, true, Residual::given>
          <<<grid, threads, 0, current_stream()>>>(x, residual, out, coefficients, nullptr, rows, block.units);
    else if (relu)
      row_normalize_kernel<T, V, true, Residual::none>
          <<<grid, threads, 0, current_stream()>>>(x, residual, out, coefficients, nullptr, rows, block.units);
    else
      row_normalize_kernel<T, V, false, Residual::none>
          <<<grid, threads, 0, current_stream()>>>(x, residual, out, coefficients, nullptr, rows, block.units);
  });
}

template <typename T>
void launch_row_grad_input(const T* grad_out, const T* relu_output, const T* x, T* grad_input,
                           const float4* coefficients, const float4* mask_coefficients, int64_t rows,
                           int64_t channels) {
  with_width<kVectorWidth<T>>(row_width<T>(channels, {grad_out, relu_output, x, grad_input}), [&](auto width) {
    constexpr int V = decltype(width)::value;
    const RowBlock block = row_block(channels, V);
    const dim3 grid = map_grid(block, rows), threads(block.across, block.down);
    if (relu_output != nullptr)
      row_grad_input_kernel<T, V, Mask::stored><<<grid, threads, 0, current_stream()>>>(
          grad_out, relu_output, x, grad_input, coefficients, nullptr, rows, block.units);
    else if (mask_coefficients != nullptr)
      row_grad_input_kernel<T, V, Mask::recomputed><<<grid, threads, 0, current_stream()>>>(
          grad_out, nullptr, x, grad_input, coefficients, mask_coefficients, rows, block.units);
    else
      row_grad_input_kernel<T, V, Mask::none><<<grid, threads, 0, current_stream()>>>(
          grad_out, nullptr, x, grad_input, coefficients, nullptr, rows, block.units);
  });
}

#define OPSNN_INSTANTIATE_ROW_BATCH_NORM(T)                                                                            \
  template void launch_row_moments<T>(const T*, int64_t, int64_t, int64_t, Moments*);                                  \
  template void launch_row_gradient_sums<T>(const T*, const T*, const T*, const NormalizeInputs&, int64_t, int64_t,    \
                                            int64_t, double2*, T*);                                                    \
  template void launch_row_normalize<T>(const T*, const T*, const float4*, T*, const float4*, int64_t, int64_t, bool); \
  template void launch_row_grad_input<T>(const T*, const T*, const T*, T*, const float4*, const float4*, int64_t,      \
                                         int64_t);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_ROW_BATCH_NORM)

}  // namespace opsnn::cuda::norm
