// SyncBatchNorm for data-parallel training: the batch statistics of every BatchNorm2d of a model taken
// over the global batch of all ranks (nn/sync_batch_norm.h) through a Communicator's all-reduce.
//
//   opsnn::dist::DataParallel ddp(*model, *optimizer, comm);   // broadcasts rank 0's running statistics
//   opsnn::dist::convert_sync_batch_norm(*model, comm);         // then every rank trains on global statistics
#pragma once

#include <cstdint>
#include <memory>

#include "opsnn/dist/communicator.h"
#include "opsnn/nn/sync_batch_norm.h"

namespace opsnn::nn {
class Module;
}

namespace opsnn::dist {

// A reducer whose sums are all-reduces (sum) over `communicator`, named by the layer's call ("SyncBatchNorm
// statistics of layer1.0.bn1", "gradient of SyncBatchNorm statistics of ..."), under its timeout.
std::shared_ptr<nn::BatchStatisticsReducer> make_batch_statistics_reducer(std::shared_ptr<Communicator> communicator);

// Gives every BatchNorm2d of `model` such a reducer: in training each one costs one all-reduce of 2C + 1
// values in forward and one in backward (C: its channels); eval keeps using the running statistics without
// communicating. Every rank must convert the same model. Returns the number of layers converted.
int64_t convert_sync_batch_norm(nn::Module& model, std::shared_ptr<Communicator> communicator);

}  // namespace opsnn::dist
