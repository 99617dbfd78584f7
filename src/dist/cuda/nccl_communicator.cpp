// The NCCL backend of the Communicator (communicator.h) for GPU tensors. Collectives run on a
// communication stream of their own (non-blocking, so it overlaps the legacy compute stream every kernel
// runs on): each call makes that stream wait for the work already queued on the compute stream, and
// Work::wait() makes the compute stream wait for the collective - the host does not block, so it keeps
// queueing work ahead of the GPU as in a single-process run. A watchdog thread (as PyTorch's NCCL
// process group has) polls every collective in flight and ncclCommGetAsyncError against the deadline, so
// a dead or stuck peer ends the job (ncclCommAbort, then exit 1 naming the operation) instead of leaving
// a kernel spinning and the host blocked forever; it also adds each collective's time on the
// communication stream to the stats. NCCL is bootstrapped through MPI under mpirun, else through the TCP
// rendezvous (rendezvous.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "dist/cuda/pair_scatter_cuda.h"
#include "dist/cuda/register.h"
#include "dist/mpi_support.h"
#include "dist/pair_scatter.h"
#include "dist/rendezvous.h"
#include "opsnn/core/error.h"

namespace opsnn::dist {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype, std::string_view what) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
      return ncclUint8;
    default:
      throw TypeError(detail::concat("distributed ", what, ": the nccl backend has no ", dtype_name(dtype), " type"));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
    default:
      return ncclSum;
  }
}

class NcclCommunicator;

// The compute stream waits for the collective's end event (the watchdog owns the event until the
// collective is done, so it is never re-recorded while this wait may still refer to it).
class NcclWork final : public Work {
 public:
  NcclWork(int device_index, cudaEvent_t done) : device_index_(device_index), done_event_(done) {}
  ~NcclWork() override {
    if (!waited_) wait();
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    cuda::DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(nullptr, done_event_, 0));
  }

 private:
  int device_index_;
  cudaEvent_t done_event_;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const WorldInfo& world, double timeout_seconds, int device_index)
      : Communicator(world, timeout_seconds), device_index_(device_index) {
    cuda::DeviceGuard guard(device_index_);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (world.rank == 0) check_result(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (world.launcher == "mpirun") {
      mpi_broadcast_bytes(&id, sizeof id, 0, timeout_seconds, "broadcast of the NCCL unique id");
    } else if (world.size > 1) {
      const char* address = std::getenv("MASTER_ADDR");
      const char* port = std::getenv("MASTER_PORT");
      OPSNN_CHECK_AS(
          ConfigError, address != nullptr && port != nullptr,
          "distributed backend nccl from RANK/WORLD_SIZE needs MASTER_ADDR and MASTER_PORT (rank 0's address "
          "and a free TCP port), as torchrun sets them");
      std::vector<uint8_t> payload(sizeof id);
      std::memcpy(payload.data(), &id, sizeof id);
      char* end = nullptr;
      long port_number = std::strtol(port, &end, 10);
      OPSNN_CHECK_AS(ConfigError, end != port && *end == '\0' && port_number >= 1 && port_number <= 65535,
                     "environment variable MASTER_PORT='", port, "': expected a TCP port in [1, 65535]");
      payload = rendezvous_broadcast(world.rank, world.size, address, static_cast<int>(port_number), payload,
                                     timeout_seconds);
      OPSNN_CHECK_AS(RuntimeFailure, payload.size() == sizeof id, "distributed rendezvous: rank 0 sent ",
                     payload.size(), " bytes, not an NCCL id of ", sizeof id);
      std::memcpy(&id, payload.data(), sizeof id);
    }
    check_result(ncclCommInitRank(&comm_, world.size, id, world.rank), "ncclCommInitRank");
    OPSNN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();  // after every collective in flight completed (or the job was ended)
    cuda::DeviceGuard guard(device_index_);
    for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Backend backend() const override { return Backend::nccl; }
  Device device() const override { return Device(DeviceType::cuda, device_index_); }

  std::unique_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op, std::string_view what) override {
    check_tensor(tensor, what);
    cuda::DeviceGuard guard(device_index_);
    begin();
    check_result(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                               nccl_type(tensor.dtype(), what), nccl_op(op), comm_, stream_),
                 what);
    count(tensor.nbytes());
    return finish(what);
  }

  std::unique_ptr<Work> reduce_async(const Tensor& tensor, int root, ReduceOp op, std::string_view what) override {
    check_tensor(tensor, what);
    OPSNN_CHECK_AS(UsageError, root >= 0 && root < size(), "distributed ", what, ": root rank ", root, " outside [0, ",
                   size(), ")");
    cuda::DeviceGuard guard(device_index_);
    begin();
    check_result(ncclReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                            nccl_type(tensor.dtype(), what), nccl_op(op), root, comm_, stream_),
                 what);
    count(tensor.nbytes());
    return finish(what);
  }

  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, std::string_view what) override {
    check_tensor(input, what);
    check_tensor(output, what);
    OPSNN_CHECK_AS(ShapeError, input.numel() == output.numel() * size() && input.dtype() == output.dtype(),
                   "distributed ", what, ": reduce_scatter of ", input.numel(), " elements into ", output.numel(),
                   " per rank of ", size(), " ranks (and the same dtype)");
    cuda::DeviceGuard guard(device_index_);
    begin();
    check_result(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                   nccl_type(output.dtype(), what), nccl_op(op), comm_, stream_),
                 what);
    count(input.nbytes());
    finish(what)->wait();
  }

  void all_gather(const Tensor& input, const Tensor& output, std::string_view what) override {
    check_tensor(input, what);
    check_tensor(output, what);
    OPSNN_CHECK_AS(ShapeError, output.numel() == input.numel() * size() && input.dtype() == output.dtype(),
                   "distributed ", what, ": all_gather of ", input.numel(), " elements per rank into ", output.numel(),
                   " (expected ", input.numel() * size(), " of the same dtype)");
    cuda::DeviceGuard guard(device_index_);
    begin();
    check_result(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                               nccl_type(input.dtype(), what), comm_, stream_),
                 what);
    count(input.nbytes());
    finish(what)->wait();
  }

  void broadcast(const Tensor& tensor, int root, std::string_view what) override {
    check_tensor(tensor, what);
    cuda::DeviceGuard guard(device_index_);
    begin();
    check_result(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                               nccl_type(tensor.dtype(), what), root, comm_, stream_),
                 what);
    count(rank() == root ? tensor.nbytes() : 0);
    finish(what)->wait();
  }

  void barrier(std::string_view what) override {
    Tensor token = Tensor::zeros({1}, DType::i32, device());
    all_reduce(token, ReduceOp::sum, what);
    cuda::DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "opsnn distributed: rank %d of %d: %s\n", rank(), size(), message.c_str());
    std::fflush(stderr);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    mpi_abort_world(1);
    std::_Exit(1);
  }

  // The watchdog: completes the collectives in flight in order (their events back to the free list,
  // their time into the stats), and ends the job when one outlives the deadline or NCCL reports an
  // asynchronous error. Exits once stopping and nothing is in flight.
  void watch() {
    cudaSetDevice(device_index_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      while (!pending_.empty()) {
        Pending& oldest = pending_.front();
        const cudaError_t status = cudaEventQuery(oldest.done);
        if (status == cudaErrorNotReady) break;
        if (status != cudaSuccess)
          abort(detail::concat(oldest.what, ": CUDA error '", cudaGetErrorString(status), "' while waiting for it"));
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, oldest.started, oldest.done) == cudaSuccess) busy_seconds_ += 1e-3 * ms;
        free_events_.push_back(oldest.started);
        free_events_.push_back(oldest.done);
        pending_.pop_front();
      }
      if (!pending_.empty()) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess && async != ncclInProgress)
          abort(detail::concat(pending_.front().what, ": NCCL reported '", ncclGetErrorString(async), "' (",
                               ncclGetLastError(comm_), "); ending the job"));
        const double waited = std::chrono::duration<double>(Clock::now() - pending_.front().queued).count();
        if (waited > timeout_seconds())
          abort(detail::concat(pending_.front().what,
                               " did not complete within distributed.timeout_s = ", timeout_seconds(),
                               " s: another rank is dead, stuck or running something else; ending "
                               "the job"));
      } else if (stopping_) {
        return;
      }
      // Collectives in flight are checked every 2 ms; an idle watchdog sleeps until one is queued.
      if (pending_.empty())
        wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      else
        wake_.wait_for(lock, std::chrono::milliseconds(2));
    }
  }

  // Seconds collectives spent on the communication stream so far (completed ones), hidden or not.
  double communication_seconds() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return busy_seconds_;
  }

 private:
  void check_tensor(const Tensor& tensor, std::string_view what) const {
    OPSNN_CHECK_AS(UsageError, tensor.defined() && tensor.is_contiguous(), "distributed ", what,
                   ": the tensor must be defined and contiguous");
    OPSNN_CHECK_AS(DeviceError, tensor.device() == device(), "distributed ", what, ": the nccl backend of rank ",
                   rank(), " communicates tensors on ", device().str(), ", not ", tensor.device().str());
  }
  void check_result(ncclResult_t result, std::string_view what) {
    if (result != ncclSuccess && result != ncclInProgress)
      throw RuntimeFailure(detail::concat("distributed ", what, ": NCCL error '", ncclGetErrorString(result), "'",
                                          comm_ != nullptr ? detail::concat(" (", ncclGetLastError(comm_), ")") : ""));
  }
  cudaEvent_t take_event() {  // with mutex_ held
    if (!free_events_.empty()) {
      cudaEvent_t event = free_events_.back();
      free_events_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    OPSNN_CUDA_CHECK(cudaEventCreate(&event));  // with timing: the collectives' time for the stats
    return event;
  }
  // The communication stream waits for what the compute stream has queued so far; `started_` marks where
  // the collective begins on it.
  void begin() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ready_ == nullptr) ready_ = take_event();
    OPSNN_CUDA_CHECK(cudaEventRecord(ready_, nullptr));  // reused: each wait captures the record it follows
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    started_ = take_event();
    OPSNN_CUDA_CHECK(cudaEventRecord(started_, stream_));
  }
  // Hands the collective just queued to the watchdog.
  std::unique_ptr<Work> finish(std::string_view what) {
    cudaEvent_t done = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done = take_event();
      OPSNN_CUDA_CHECK(cudaEventRecord(done, stream_));
      pending_.push_back({started_, done, std::string(what), Clock::now()});
    }
    wake_.notify_all();
    return std::make_unique<NcclWork>(device_index_, done);
  }

  int device_index_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  struct Pending {
    cudaEvent_t started, done;
    std::string what;
    Clock::time_point queued;
  };
  std::mutex mutex_;  // guards everything below (the watchdog and the calling thread)
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  cudaEvent_t ready_ = nullptr, started_ = nullptr;
  double busy_seconds_ = 0.0;
  bool stopping_ = false;
  std::thread watchdog_;
};

std::shared_ptr<Communicator> make_nccl_communicator(const WorldInfo& world, const InitOptions& options,
                                                     int device_index) {
  return std::make_shared<NcclCommunicator>(world, options.timeout_seconds, device_index);
}

}  // namespace

void register_nccl_backend() {
  register_communicator_backend(Backend::nccl, &make_nccl_communicator);
  register_pair_scatter_add(DeviceType::cuda, &cuda_pair_scatter_add);
}

}  // namespace opsnn::dist
