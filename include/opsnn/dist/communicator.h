// Collective communication between the processes (ranks) of a distributed run, one device per rank. Two
// backends implement it with the field's engines: NCCL for GPU tensors (on a side stream, ordered after
// the work already queued on the compute stream and before what is queued after the call), and MPI for
// CPU tensors (GPU tensors are staged through pinned host memory: the distribution's OpenMPI is not
// CUDA-aware). Every call names what it is for; a call that does not complete within the communicator's
// timeout means another rank is dead or stuck: the rank prints the operation and the time allowed,
// aborts the communicator and exits 1, so no rank is left hanging (src/dist/README.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opsnn/core/tensor.h"

namespace opsnn::dist {

enum class Backend { mpi, nccl };
std::string_view backend_name(Backend backend);

enum class ReduceOp { sum, avg, max, min };

// Where this process stands in the run, from the launcher's environment (world.cpp).
struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the ranks of this host: picks the GPU
  int local_size = 1;
  std::string launcher = "none";  // "mpirun", "env" (RANK/WORLD_SIZE, as torchrun sets them) or "none"
};

// Volume and time of the collectives so far (for the metrics' communication time per step).
struct CommStats {
  int64_t calls = 0;
  int64_t bytes = 0;          // payload bytes this rank contributed (an all-gather: its own part)
  double wait_seconds = 0.0;  // host time spent waiting for collectives to complete (MPI)
};

// One collective in flight. wait() returns once its result may be used by later work on this rank: on
// the host (CPU tensors; wait() enforces the timeout) or on the compute stream (GPU tensors: the host does
// not block, a watchdog enforces the timeout). A Work destroyed without wait() waits in its destructor.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual Backend backend() const = 0;
  const WorldInfo& world() const { return world_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  // The device whose tensors the collectives take directly (a GPU for NCCL; the CPU for MPI, which also
  // takes GPU tensors through host staging).
  virtual Device device() const = 0;
  double timeout_seconds() const { return timeout_seconds_; }
  const CommStats& stats() const { return stats_; }
  // Time spent communicating so far: NCCL, the collectives' time on the communication stream (measured
  // by events, whether backward hid it or not); MPI, the time the host waited for them.
  virtual double communication_seconds() { return stats_.wait_seconds; }

  // In place: every rank's `tensor` (contiguous; f32, f64, i64 or i32) becomes the reduction over ranks.
  // avg is the sum divided by the world size, in the tensor's dtype.
  virtual std::unique_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op, std::string_view what) = 0;
  void all_reduce(const Tensor& tensor, ReduceOp op, std::string_view what) {
    all_reduce_async(tensor, op, what)->wait();
  }
  // output (n elements) = the reduction of the ranks' input[rank * n, (rank + 1) * n) (input: size * n).
  // output may be that part of input itself (in place).
  virtual void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, std::string_view what) = 0;
  // output (size * n elements) = the ranks' inputs (n each) in rank order; input may be output's part.
  virtual void all_gather(const Tensor& input, const Tensor& output, std::string_view what) = 0;
  // Every rank's `value`, in rank order (one small all-gather on device()): counts, hashes, digests.
  std::vector<int64_t> all_gather_values(int64_t value, std::string_view what) {
    Tensor all = Tensor::zeros({size()}, DType::i64, device());
    all_gather(Tensor::from_vector<int64_t>({value}, {1}).to(device()), all, what);
    return all.to_vector<int64_t>();
  }
  virtual void broadcast(const Tensor& tensor, int root, std::string_view what) = 0;
  // Collectives over a buffer cut into consecutive pieces, counts[r] elements for rank r (one count per
  // rank, summing to buffer.numel(); empty pieces are skipped): ZeRO-1's uneven shards. NCCL's
  // reduce-scatter and all-gather take equal pieces only, so these are one reduce per piece (to its rank)
  // and one broadcast per piece (from its rank), the same volume.
  // In place: rank r's piece becomes the reduction of every rank's piece r; the other pieces stay as they were.
  std::unique_ptr<Work> reduce_scatter_v_async(const Tensor& buffer, const std::vector<int64_t>& counts, ReduceOp op,
                                               std::string_view what);
  // In place: every rank's piece r becomes rank r's (any dtype).
  void all_gather_v(const Tensor& buffer, const std::vector<int64_t>& counts, std::string_view what);
  virtual void barrier(std::string_view what) = 0;
  // Reduces each rank's `tensor` into rank `root`'s (the others' tensors are left as they were).
  virtual std::unique_ptr<Work> reduce_async(const Tensor& tensor, int root, ReduceOp op, std::string_view what) = 0;

  // Ends the job because of `message` (a timeout, a failed collective): printed with the rank, then the
  // communicator is aborted and every rank of the job ends with exit code 1.
  [[noreturn]] virtual void abort(const std::string& message) = 0;

 protected:
  Communicator(WorldInfo world, double timeout_seconds) : world_(std::move(world)), timeout_seconds_(timeout_seconds) {}
  void count(int64_t bytes) {
    stats_.calls += 1;
    stats_.bytes += bytes;
  }
  void add_wait(double seconds) { stats_.wait_seconds += seconds; }

  WorldInfo world_;
  double timeout_seconds_;
  CommStats stats_;
};

}  // namespace opsnn::dist
