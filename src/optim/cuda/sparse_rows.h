// Registration of the CUDA kernels for sparse gradients: row-sparse embedding updates (sparse_update.h's
// SparseRowKernels) and top-k sparsification (topk.h's TopKKernels).
#pragma once

namespace opsnn::optim {
void register_cuda_sparse_gradient_kernels();
void register_cuda_topk_kernels();  // src/optim/cuda/topk_cuda.cpp
}  // namespace opsnn::optim
