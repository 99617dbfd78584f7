// The NCCL backend of the Communicator (communicator.h) for GPU tensors. Collectives run on a
// communication stream of their own (non-blocking, so it overlaps the legacy compute stream every kernel
// runs on): each call makes that stream wait for the work already queued on the compute stream, and
// Work::wait() makes the compute stream wait for the collective. wait() also polls the collective's
// completion and ncclCommGetAsyncError on the host against the deadline, so a dead or stuck peer ends
// the job (ncclCommAbort, then exit 1 naming the operation) instead of leaving a kernel spinning forever.
// NCCL is bootstrapped through MPI under mpirun, else through the TCP rendezvous (rendezvous.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

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

class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& communicator, std::string what, cudaEvent_t done)
      : communicator_(communicator), what_(std::move(what)), done_event_(done) {}
  ~NcclWork() override;
  void wait() override;

 private:
  NcclCommunicator& communicator_;
  std::string what_;
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
  }

  ~NcclCommunicator() override {
    cuda::DeviceGuard guard(device_index_);
    for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
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

  // Host side of Work::wait: the compute stream waits for `done`; the host polls it against the deadline.
  void wait_event(cudaEvent_t done, const std::string& what) {
    cuda::DeviceGuard guard(device_index_);
    const Clock::time_point start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_seconds());
    for (int polls = 0;; ++polls) {
      cudaError_t status = cudaEventQuery(done);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady)
        abort(detail::concat(what, ": CUDA error '", cudaGetErrorString(status), "' while waiting for it"));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        abort(detail::concat(what, ": NCCL reported '", ncclGetErrorString(async), "' (", ncclGetLastError(comm_),
                             "); ending the job"));
      if (Clock::now() > deadline)
        abort(detail::concat(what, " did not complete within distributed.timeout_s = ", timeout_seconds(),
                             " s: another rank is dead, stuck or running something else; ending the job"));
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 500 : 20));
    }
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(nullptr, done, 0));
    add_wait(std::chrono::duration<double>(Clock::now() - start).count());
    free_events_.push_back(done);
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
  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      cudaEvent_t event = free_events_.back();
      free_events_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    OPSNN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }
  // The communication stream waits for what the compute stream has queued so far.
  void begin() {
    cudaEvent_t ready = take_event();
    OPSNN_CUDA_CHECK(cudaEventRecord(ready, nullptr));
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    free_events_.push_back(ready);  // reusable once recorded again: the wait above captured this record
  }
  std::unique_ptr<Work> finish(std::string_view what) {
    cudaEvent_t done = take_event();
    OPSNN_CUDA_CHECK(cudaEventRecord(done, stream_));
    return std::make_unique<NcclWork>(*this, std::string(what), done);
  }

  int device_index_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> free_events_;
};

NcclWork::~NcclWork() {
  if (!waited_) wait();
}

void NcclWork::wait() {
  if (waited_) return;
  waited_ = true;
  communicator_.wait_event(done_event_, what_);
}

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
