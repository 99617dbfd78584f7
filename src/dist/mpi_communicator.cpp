// The MPI backend of the Communicator (communicator.h), on the distribution's OpenMPI. Every collective is
// the non-blocking MPI call (MPI_Iallreduce, MPI_Ireduce_scatter_block, ...) followed by a polling wait
// with the communicator's deadline, so a dead or stuck peer ends the job with a message naming the
// operation instead of hanging it. GPU tensors are staged through pinned host memory (this OpenMPI is
// not CUDA-aware): copied down before the call and back up once it completes.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "dist/mpi_support.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"

namespace opsnn::dist {
namespace {

using Clock = std::chrono::steady_clock;

bool mpi_initialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

void finalize_at_exit() {
  if (mpi_initialized()) MPI_Finalize();
}

// MPI_Init once per process (collectives come from one thread at a time: the training thread).
void ensure_mpi() {
  static const bool started = [] {
    if (!mpi_initialized()) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw RuntimeFailure("MPI_Init_thread failed (is this process started by mpirun?)");
      std::atexit(finalize_at_exit);
    }
    return true;
  }();
  (void)started;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

MPI_Datatype mpi_type(DType dtype, std::string_view what) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i64:
      return MPI_INT64_T;
    case DType::i32:
      return MPI_INT32_T;
    default:
      throw TypeError(detail::concat(
          "distributed ", what, ": the mpi backend reduces f32, f64, i64 and i32 tensors, not ", dtype_name(dtype)));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
    default:
      return MPI_SUM;  // avg: the sum, divided afterwards
  }
}

// Divides a host buffer of `count` values by `divisor` (the avg of a sum).
void divide(void* data, DType dtype, int64_t count, int divisor) {
  if (dtype == DType::f32) {
    float* values = static_cast<float*>(data);
    const float factor = 1.0f / static_cast<float>(divisor);
    for (int64_t i = 0; i < count; ++i) values[i] *= factor;
  } else if (dtype == DType::f64) {
    double* values = static_cast<double*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= divisor;
  } else if (dtype == DType::i64) {
    int64_t* values = static_cast<int64_t*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= divisor;
  } else {
    int32_t* values = static_cast<int32_t*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= divisor;
  }
}

// A host tensor with `source`'s values: source itself on the CPU, else a pinned (when possible) copy.
Tensor host_copy(const Tensor& source) {
  if (source.device().is_cpu()) return source;
  auto storage = std::make_shared<Storage>(static_cast<size_t>(source.nbytes()), kCPU,
                                           pinned_memory_available() ? HostMemory::pinned : HostMemory::pageable);
  Tensor host = Tensor::view_of(storage, 0, source.shape(), source.dtype());
  host.copy_(source);
  return host;
}

int checked_count(const Tensor& tensor, std::string_view what) {
  OPSNN_CHECK_AS(UsageError, tensor.defined() && tensor.is_contiguous(), "distributed ", what,
                 ": the tensor must be defined and contiguous");
  OPSNN_CHECK_AS(UsageError, tensor.numel() <= INT32_MAX, "distributed ", what, ": ", tensor.numel(),
                 " elements in one MPI call (at most 2^31 - 1; split it)");
  return static_cast<int>(tensor.numel());
}

class MpiCommunicator;

class MpiWork final : public Work {
 public:
  MpiWork(MpiCommunicator& communicator, std::string what) : communicator_(communicator), what_(std::move(what)) {}
  ~MpiWork() override {
    if (!done_) wait();
  }
  void wait() override;

  MPI_Request request = MPI_REQUEST_NULL;
  Tensor host;    // the buffer MPI works on
  Tensor target;  // where the result goes when it is not `host` (a staged GPU tensor)
  int average_over = 0;

 private:
  MpiCommunicator& communicator_;
  std::string what_;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const WorldInfo& world, double timeout_seconds) : Communicator(world, timeout_seconds) {
    ensure_mpi();
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    OPSNN_CHECK_AS(RuntimeFailure, size == world.size && rank == world.rank, "MPI reports rank ", rank, " of ", size,
                   " but the environment said rank ", world.rank, " of ", world.size);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiCommunicator() override {
    if (mpi_initialized()) MPI_Comm_free(&comm_);
  }

  Backend backend() const override { return Backend::mpi; }
  Device device() const override { return kCPU; }

  std::unique_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op, std::string_view what) override {
    const int count = checked_count(tensor, what);
    auto work = std::make_unique<MpiWork>(*this, std::string(what));
    work->host = host_copy(tensor);
    if (!tensor.device().is_cpu()) work->target = tensor;
    if (op == ReduceOp::avg) work->average_over = size();
    check(MPI_Iallreduce(MPI_IN_PLACE, work->host.data_ptr(), count, mpi_type(tensor.dtype(), what), mpi_op(op), comm_,
                         &work->request),
          what);
    count_bytes(tensor.nbytes());
    return work;
  }

  std::unique_ptr<Work> reduce_async(const Tensor& tensor, int root, ReduceOp op, std::string_view what) override {
    const int count = checked_count(tensor, what);
    check_root(root, what);
    auto work = std::make_unique<MpiWork>(*this, std::string(what));
    work->host = host_copy(tensor);
    // Only the root receives: the others' tensors stay as they were.
    if (rank() == root) {
      if (!tensor.device().is_cpu()) work->target = tensor;
      if (op == ReduceOp::avg) work->average_over = size();
    }
    void* data = work->host.data_ptr();
    check(MPI_Ireduce(rank() == root ? MPI_IN_PLACE : data, rank() == root ? data : nullptr, count,
                      mpi_type(tensor.dtype(), what), mpi_op(op), root, comm_, &work->request),
          what);
    count_bytes(tensor.nbytes());
    return work;
  }

  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, std::string_view what) override {
    const int count = checked_count(output, what);
    OPSNN_CHECK_AS(ShapeError, input.numel() == static_cast<int64_t>(count) * size() && input.dtype() == output.dtype(),
                   "distributed ", what, ": reduce_scatter of ", input.numel(), " elements into ", count,
                   " per rank of ", size(), " ranks (and the same dtype)");
    checked_count(input, what);
    Tensor host_input = host_copy(input);
    Tensor result = Tensor::empty(output.shape(), output.dtype(), kCPU);
    MpiWork work(*this, std::string(what));
    check(MPI_Ireduce_scatter_block(host_input.data_ptr(), result.data_ptr(), count, mpi_type(output.dtype(), what),
                                    mpi_op(op), comm_, &work.request),
          what);
    count_bytes(input.nbytes());
    work.host = result;
    if (op == ReduceOp::avg) work.average_over = size();
    work.wait();
    Tensor destination = output;
    destination.copy_(result);
  }

  void all_gather(const Tensor& input, const Tensor& output, std::string_view what) override {
    const int count = checked_count(input, what);
    checked_count(output, what);
    OPSNN_CHECK_AS(ShapeError,
                   output.numel() == static_cast<int64_t>(count) * size() && input.dtype() == output.dtype(),
                   "distributed ", what, ": all_gather of ", count, " elements per rank into ", output.numel(),
                   " (expected ", static_cast<int64_t>(count) * size(), " of the same dtype)");
    const int bytes = static_cast<int>(input.nbytes());
    OPSNN_CHECK_AS(UsageError, input.nbytes() <= INT32_MAX, "distributed ", what, ": ", input.nbytes(),
                   " bytes per rank in one MPI call");
    Tensor host_input = host_copy(input);
    Tensor gathered = Tensor::empty(output.shape(), output.dtype(), kCPU);
    MpiWork work(*this, std::string(what));
    check(MPI_Iallgather(host_input.data_ptr(), bytes, MPI_BYTE, gathered.data_ptr(), bytes, MPI_BYTE, comm_,
                         &work.request),
          what);
    count_bytes(input.nbytes());
    work.wait();
    Tensor destination = output;
    destination.copy_(gathered);
  }

  void broadcast(const Tensor& tensor, int root, std::string_view what) override {
    checked_count(tensor, what);
    check_root(root, what);
    OPSNN_CHECK_AS(UsageError, tensor.nbytes() <= INT32_MAX, "distributed ", what, ": ", tensor.nbytes(),
                   " bytes in one MPI call");
    Tensor host = host_copy(tensor);
    MpiWork work(*this, std::string(what));
    check(MPI_Ibcast(host.data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, root, comm_, &work.request), what);
    count_bytes(rank() == root ? tensor.nbytes() : 0);
    work.wait();
    if (!tensor.device().is_cpu() && rank() != root) {
      Tensor destination = tensor;
      destination.copy_(host);
    }
  }

  void barrier(std::string_view what) override {
    MpiWork work(*this, std::string(what));
    check(MPI_Ibarrier(comm_, &work.request), what);
    count_bytes(0);
    work.wait();
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "opsnn distributed: rank %d of %d: %s\n", rank(), size(), message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; this is for the compiler
  }

  // Polls `request` until it completes or the deadline passes (then ends the job naming `what`).
  void wait_request(MPI_Request& request, const std::string& what) {
    const Clock::time_point start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_seconds());
    int flag = 0;
    for (int polls = 0;; ++polls) {
      MPI_Status status;
      check(MPI_Test(&request, &flag, &status), what);
      if (flag) break;
      if (Clock::now() > deadline)
        abort(detail::concat(what, " did not complete within distributed.timeout_s = ", timeout_seconds(),
                             " s: another rank is dead, stuck or running something else; ending the job"));
      // MPI progresses a non-blocking collective only inside MPI calls, so keep testing: spin, then yield
      // the core between tests (a rank waiting for a slow peer must not starve that peer of a shared
      // core), and only after a second of waiting sleep between tests.
      if (polls > 1000) {
        if (Clock::now() - start < std::chrono::seconds(1))
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    add_wait(std::chrono::duration<double>(Clock::now() - start).count());
  }

 private:
  void check(int code, std::string_view what) {
    if (code != MPI_SUCCESS) abort(detail::concat(what, ": MPI error: ", mpi_error_text(code)));
  }
  void check_root(int root, std::string_view what) const {
    OPSNN_CHECK_AS(UsageError, root >= 0 && root < size(), "distributed ", what, ": root rank ", root, " outside [0, ",
                   size(), ")");
  }
  void count_bytes(int64_t bytes) { count(bytes); }

  MPI_Comm comm_ = MPI_COMM_NULL;
};

void MpiWork::wait() {
  if (done_) return;
  done_ = true;
  communicator_.wait_request(request, what_);
  if (average_over > 1) divide(host.data_ptr(), host.dtype(), host.numel(), average_over);
  if (target.defined()) target.copy_(host);
}

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator(const WorldInfo& world, const InitOptions& options,
                                                    int device_index) {
  (void)device_index;
  return std::make_shared<MpiCommunicator>(world, options.timeout_seconds);
}

bool mpi_active() { return mpi_initialized(); }

void mpi_broadcast_bytes(void* data, size_t bytes, int root, double timeout_seconds, const char* what) {
  ensure_mpi();
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request) != MPI_SUCCESS) {
    std::fprintf(stderr, "opsnn distributed: %s: MPI_Ibcast failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds);
  int flag = 0;
  while (!flag) {
    MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (!flag && Clock::now() > deadline) {
      std::fprintf(stderr, "opsnn distributed: %s did not complete within %g s; ending the job\n", what,
                   timeout_seconds);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!flag) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void mpi_abort_world(int exit_code) {
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace opsnn::dist
