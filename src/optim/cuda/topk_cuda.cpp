// Registers the CUDA top-k sparsification kernels (topk.cu) in topk.h's device table.
#include "opsnn/optim/topk.h"
#include "optim/cuda/sparse_rows.h"
#include "optim/cuda/topk_kernels.h"

namespace opsnn::optim {

void register_cuda_topk_kernels() {
  TopKKernels kernels;
  kernels.accumulate = cuda::launch_topk_accumulate;
  kernels.sample_scores = cuda::topk_sample_scores;
  kernels.count_blocks = cuda::topk_count_blocks;
  kernels.kth_largest = cuda::topk_kth_largest;
  kernels.tie_position = cuda::topk_tie_position;
  kernels.write_selected = cuda::launch_topk_write_selected;
  kernels.send_everything = cuda::launch_topk_send_everything;
  register_topk_kernels(DeviceType::cuda, kernels);
}

}  // namespace opsnn::optim
