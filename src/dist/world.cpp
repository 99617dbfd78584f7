// Which process this is, from the launcher's environment, and the choice and creation of the world
// communicator (dist.h). The backends register themselves by name: MPI here (it is always built), NCCL
// from the composition root when the build has CUDA.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "dist/mpi_support.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/dist/dist.h"

namespace opsnn::dist {
namespace {

std::map<Backend, CommunicatorFactory>& backends() {  // MPI is always built; NCCL registers itself
  static std::map<Backend, CommunicatorFactory> registry{{Backend::mpi, &make_mpi_communicator}};
  return registry;
}
std::mutex& backends_mutex() {
  static std::mutex mutex;
  return mutex;
}

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// An integer environment variable in [low, high]; nullopt when unset.
std::optional<int> integer_variable(const char* name, int low, int high) {
  const char* text = variable(name);
  if (text == nullptr) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  OPSNN_CHECK_AS(ConfigError, errno == 0 && end != text && *end == '\0' && value >= low && value <= high,
                 "environment variable ", name, "='", text, "': expected an integer in [", low, ", ", high, "]");
  return static_cast<int>(value);
}

}  // namespace

std::string_view backend_name(Backend backend) { return backend == Backend::nccl ? "nccl" : "mpi"; }

namespace {

// Several collectives in flight as one.
class WorkGroup final : public Work {
 public:
  explicit WorkGroup(std::vector<std::unique_ptr<Work>> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& work : works_) work->wait();
    works_.clear();
  }

 private:
  std::vector<std::unique_ptr<Work>> works_;
};

// The piece views of `buffer` by `counts` (checked), with the piece numbers.
std::vector<std::pair<int, Tensor>> pieces(const Tensor& buffer, const std::vector<int64_t>& counts, int world,
                                           std::string_view what) {
  OPSNN_CHECK_AS(UsageError, buffer.defined() && buffer.is_contiguous(), "distributed ", what,
                 ": the buffer must be defined and contiguous");
  OPSNN_CHECK_AS(ShapeError, counts.size() == static_cast<size_t>(world), "distributed ", what, ": ", counts.size(),
                 " piece counts for ", world, " ranks");
  std::vector<std::pair<int, Tensor>> result;
  int64_t offset = 0;
  for (int r = 0; r < world; ++r) {
    const int64_t count = counts[static_cast<size_t>(r)];
    OPSNN_CHECK_AS(ShapeError, count >= 0 && offset + count <= buffer.numel(), "distributed ", what, ": piece ", r,
                   " of ", count, " elements at ", offset, " outside the buffer of ", buffer.numel());
    if (count > 0)
      result.emplace_back(r, Tensor::view_of(buffer.storage(), buffer.offset() + offset, {count}, buffer.dtype()));
    offset += count;
  }
  OPSNN_CHECK_AS(ShapeError, offset == buffer.numel(), "distributed ", what, ": the pieces cover ", offset, " of ",
                 buffer.numel(), " elements");
  return result;
}

}  // namespace

std::unique_ptr<Work> Communicator::reduce_scatter_v_async(const Tensor& buffer, const std::vector<int64_t>& counts,
                                                           ReduceOp op, std::string_view what) {
  std::vector<std::unique_ptr<Work>> works;
  for (auto& [r, piece] : pieces(buffer, counts, size(), what)) works.push_back(reduce_async(piece, r, op, what));
  return std::make_unique<WorkGroup>(std::move(works));
}

void Communicator::all_gather_v(const Tensor& buffer, const std::vector<int64_t>& counts, std::string_view what) {
  for (auto& [r, piece] : pieces(buffer, counts, size(), what)) broadcast(piece, r, what);
}

bool launched_distributed() { return variable("OMPI_COMM_WORLD_SIZE") != nullptr || variable("WORLD_SIZE") != nullptr; }

WorldInfo world_from_environment() {
  WorldInfo world;
  constexpr int kMaxRanks = 1 << 20;
  if (std::optional<int> size = integer_variable("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks)) {
    world.launcher = "mpirun";
    world.size = *size;
    world.rank = integer_variable("OMPI_COMM_WORLD_RANK", 0, *size - 1).value_or(0);
    world.local_size = integer_variable("OMPI_COMM_WORLD_LOCAL_SIZE", 1, *size).value_or(*size);
    world.local_rank = integer_variable("OMPI_COMM_WORLD_LOCAL_RANK", 0, world.local_size - 1).value_or(world.rank);
    return world;
  }
  if (std::optional<int> size = integer_variable("WORLD_SIZE", 1, kMaxRanks)) {
    world.launcher = "env";
    world.size = *size;
    std::optional<int> rank = integer_variable("RANK", 0, *size - 1);
    OPSNN_CHECK_AS(ConfigError, rank.has_value(), "environment variable WORLD_SIZE=", *size,
                   " is set but RANK is not (a torchrun-style launch sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR "
                   "and MASTER_PORT for every process)");
    world.rank = *rank;
    world.local_size = integer_variable("LOCAL_WORLD_SIZE", 1, *size).value_or(*size);
    world.local_rank = integer_variable("LOCAL_RANK", 0, world.local_size - 1).value_or(world.rank % world.local_size);
    return world;
  }
  return world;
}

Backend resolve_backend(const std::string& backend, const std::string& device) {
  const bool gpu = device.rfind("cuda", 0) == 0;
  if (backend == "auto") return gpu && has_communicator_backend(Backend::nccl) ? Backend::nccl : Backend::mpi;
  if (backend == "nccl") return Backend::nccl;
  if (backend == "mpi") return Backend::mpi;
  throw ConfigError(detail::concat("distributed backend '", backend, "': expected auto, nccl or mpi"));
}

int device_index_for(const WorldInfo& world, Backend backend, int cuda_devices) {
  if (cuda_devices <= 0) return 0;
  return backend == Backend::nccl ? world.local_rank : world.local_rank % cuda_devices;
}

void register_communicator_backend(Backend backend, CommunicatorFactory factory) {
  std::lock_guard<std::mutex> lock(backends_mutex());
  backends()[backend] = factory;
}

bool has_communicator_backend(Backend backend) {
  std::lock_guard<std::mutex> lock(backends_mutex());
  return backends().count(backend) > 0;
}

std::shared_ptr<Communicator> init(const InitOptions& options) {
  OPSNN_CHECK_AS(ConfigError, options.timeout_seconds > 0.0 && options.timeout_seconds <= 1e6, "distributed timeout ",
                 options.timeout_seconds, " s: expected a number of seconds in (0, 1e6]");
  const WorldInfo world = world_from_environment();
  const Backend backend = resolve_backend(options.backend, options.device);
  const bool gpu = options.device.rfind("cuda", 0) == 0;
  OPSNN_CHECK_AS(ConfigError, options.device == "cpu" || gpu, "distributed device '", options.device,
                 "': expected cpu or cuda");
  const int gpus = gpu ? cuda_device_count() : 0;
  OPSNN_CHECK_AS(ConfigError, !gpu || gpus > 0, "distributed training on cuda: this machine has no CUDA device");
  if (backend == Backend::nccl) {
    OPSNN_CHECK_AS(ConfigError, has_communicator_backend(Backend::nccl),
                   "distributed backend nccl: this build of opsnn has no CUDA/NCCL (use backend mpi)");
    OPSNN_CHECK_AS(ConfigError, gpu,
                   "distributed backend nccl communicates GPU tensors: train.device must be cuda (the CPU uses mpi)");
    OPSNN_CHECK_AS(ConfigError, world.local_size <= gpus, "distributed backend nccl: ", world.local_size,
                   " ranks on this host but only ", gpus,
                   " GPU(s); NCCL needs one GPU per rank (two ranks on one GPU are refused by NCCL). Start at most ",
                   gpus, " ranks per host, or use backend mpi, whose ranks may share a GPU");
  } else {
    OPSNN_CHECK_AS(ConfigError, world.launcher != "env" || world.size == 1, "distributed backend mpi with ", world.size,
                   " ranks from RANK/WORLD_SIZE: MPI ranks must be started by mpirun (mpirun -np ", world.size,
                   " ...); the torchrun-style environment bootstraps the nccl backend");
  }
  const int device_index = device_index_for(world, backend, gpus);
  CommunicatorFactory factory = nullptr;
  {
    std::lock_guard<std::mutex> lock(backends_mutex());
    auto found = backends().find(backend);
    if (found != backends().end()) factory = found->second;
  }
  return factory(world, options, device_index);
}

void end_job_after_error(int exit_code) {
  if (!mpi_active()) return;
  try {
    if (world_from_environment().size > 1) mpi_abort_world(exit_code);
  } catch (const Error&) {  // an unreadable environment: nothing distributed was started from it
  }
}

std::string rank_label() {
  try {
    const WorldInfo world = world_from_environment();
    return world.launcher == "none" ? std::string() : detail::concat(" (rank ", world.rank, " of ", world.size, ")");
  } catch (const Error&) {
    return std::string();
  }
}

}  // namespace opsnn::dist
