// Launchers of the CUDA top-k sparsification kernels (src/optim/cuda/topk.cu), with the signatures of
// topk.h's TopKKernels table: n-sized arrays on the device, small results in host arrays. Legacy default
// stream; the launchers that return host values synchronize.
#pragma once

#include <cstdint>

#include "opsnn/optim/topk_rules.h"

namespace opsnn::optim::cuda {

void launch_topk_accumulate(const float* gradient, float* accumulator, float* variance, float* velocity, int64_t n,
                            const TopKAccumulateScalars& scalars);
void topk_sample_scores(uint64_t seed, int64_t step, int64_t n, int64_t sample_size, const float* accumulator,
                        const float* variance, double* scores);
void topk_count_blocks(const float* accumulator, const float* variance, int64_t n, double threshold,
                       int64_t* block_greater, int64_t* block_ties);
void topk_kth_largest(const float* accumulator, const float* variance, int64_t n, int64_t k, double* kth, double* next);
int64_t topk_tie_position(const float* accumulator, const float* variance, int64_t begin, int64_t end, double threshold,
                          int64_t rank);
void launch_topk_write_selected(float* gradient, float* accumulator, const float* variance, float* velocity, int64_t n,
                                double threshold, int64_t tie_cutoff, const int64_t* block_first,
                                int64_t* selected_indices, float* selected_values);
void launch_topk_send_everything(float* gradient, float* accumulator, float* velocity, int64_t n,
                                 int64_t* selected_indices, float* selected_values);

}  // namespace opsnn::optim::cuda
