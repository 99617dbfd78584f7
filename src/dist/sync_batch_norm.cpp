// The Communicator behind SyncBatchNorm (opsnn/dist/sync_batch_norm.h): nn's batch-statistics reducer as
// an all-reduce (sum) of the world.
#include "opsnn/dist/sync_batch_norm.h"

#include <string>
#include <utility>

#include "opsnn/core/error.h"
#include "opsnn/nn/module.h"

namespace opsnn::dist {
namespace {

class CommunicatorReducer final : public nn::BatchStatisticsReducer {
 public:
  explicit CommunicatorReducer(std::shared_ptr<Communicator> communicator) : communicator_(std::move(communicator)) {}
  int world_size() const override { return communicator_->size(); }
  void all_reduce_sum(const Tensor& tensor, const std::string& what) override {
    communicator_->all_reduce(tensor, ReduceOp::sum, what);
  }

 private:
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace

std::shared_ptr<nn::BatchStatisticsReducer> make_batch_statistics_reducer(std::shared_ptr<Communicator> communicator) {
  OPSNN_CHECK_AS(UsageError, communicator != nullptr, "make_batch_statistics_reducer: no communicator");
  return std::make_shared<CommunicatorReducer>(std::move(communicator));
}

int64_t convert_sync_batch_norm(nn::Module& model, std::shared_ptr<Communicator> communicator) {
  return nn::set_batch_norm_reducer(model, make_batch_statistics_reducer(std::move(communicator)));
}

}  // namespace opsnn::dist
