// Synchronised batch normalisation (PyTorch's SyncBatchNorm): in training, the batch statistics are
// those of the global batch of every rank, not of this rank's share. nn knows nothing of how ranks talk:
// a BatchStatisticsReducer sums a tensor over them (dist::convert_sync_batch_norm installs one over a
// dist::Communicator). The layer is composed from differentiable ops around one collective op,
// all_reduce_sum, whose backward all-reduces the incoming gradient, so autograd gives every rank the
// gradient of the global loss with respect to its own input.
//
//   nn::set_batch_norm_reducer(model, reducer);   // every BatchNorm2d of the tree
//   model.forward(x);   // training: one all-reduce of [2C + 1] values per BatchNorm2d, one more in backward
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/core/tensor.h"

namespace opsnn::nn {

class Module;

class BatchStatisticsReducer {
 public:
  virtual ~BatchStatisticsReducer() = default;
  // How many ranks the sums run over (1: all_reduce_sum leaves its tensor as it is).
  virtual int world_size() const = 0;
  // In place: `tensor` (contiguous, 1-d, f32 or f64, on the device the layer computes on) becomes the sum
  // of every rank's `tensor`. Every rank makes the same calls in the same order with the same sizes;
  // `what` names the call for timeout and error messages.
  virtual void all_reduce_sum(const Tensor& tensor, const std::string& what) = 0;
};

// Differentiable: the parts (one dtype and device, any shapes) flattened and concatenated into one 1-d
// tensor that `reducer` sums over the ranks in one call. The backward sums the incoming gradient over the
// ranks the same way (one call, named "gradient of <what>") and hands each part its piece: the gradient
// of the sum of every rank's loss with respect to this rank's parts.
Tensor all_reduce_sum(const std::vector<Tensor>& parts, const std::shared_ptr<BatchStatisticsReducer>& reducer,
                      const std::string& what);

// Training-mode ops::batch_norm (or, with relu, batch_norm_relu) with the statistics of every rank's batch:
// per channel, this rank's sum, sum of squares and count are summed over the ranks by one all_reduce_sum
// of 2C + 1 values; the mean and the biased variance normalise, and running_var is updated with the
// unbiased variance of the global count, as PyTorch does. Same arguments and layouts as ops::batch_norm
// (undefined gamma / beta / running statistics allowed; f16/bf16 inputs computed in f32 and returned in
// their dtype); each rank's input must hold more than one value per channel when the reducer's world
// size is 1. The variance is E[x^2] - E[x]^2 in the statistics' dtype (clamped at 0): a channel whose
// mean is thousands of times its spread loses digits there that ops::batch_norm's kernels keep.
Tensor sync_batch_norm(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                       Tensor& running_var, double momentum, double eps, bool channels_last, bool relu,
                       const std::shared_ptr<BatchStatisticsReducer>& reducer, const std::string& what);

// Gives every BatchNorm2d in root's tree (root included) `reducer`, or with nullptr takes it away again
// (per-rank statistics); each layer names its calls after its dotted name in the tree. Returns how many
// layers it set.
int64_t set_batch_norm_reducer(Module& root, const std::shared_ptr<BatchStatisticsReducer>& reducer);

}  // namespace opsnn::nn
