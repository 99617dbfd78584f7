// opsnn-bench dist: all-reduce of gradient-bucket-sized f32 tensors over the world that mpirun or the
// torchrun-style environment describes (world 1 without a launcher): median time, algorithm bandwidth
// (bytes / time) and bus bandwidth (x 2 (world - 1) / world, the ring all-reduce's traffic per link, as
// nccl-tests report it). Run under mpirun for the MPI backend on CPU tensors, or with --device cuda for
// NCCL. Then ZeRO-1 over ResNet-50's arena (25.6M parameters) with Adam: the optimizer-state memory per
// rank against unsharded, and the time of its reduce-scatter + all-gather against a plain all-reduce of
// the same arena. The overlap with backward and the cost per ResNet-50 step: opsnn-bench resnet50
// --distributed [--zero-stage 1].
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "opsnn/core/error.h"
#include "opsnn/dist/data_parallel.h"
#include "opsnn/dist/dist.h"
#include "opsnn/models/models.h"
#include "opsnn/optim/optimizer.h"

namespace opsnn::bench {
namespace {

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: [mpirun -np N] opsnn-bench dist [--device cpu|cuda] [--backend auto|nccl|mpi] "
          "[--sizes-mb 1,4,25,100] [--repeats 20] [--json FILE]\n");
      return 0;
    }
  check_options(args, {"--device", "--backend", "--sizes-mb", "--repeats", "--json"});
  const std::string device = option(args, "--device", "cpu");
  OPSNN_CHECK_AS(ConfigError, device == "cpu" || device == "cuda", "--device: expected cpu or cuda, got '", device,
                 "'");
  const int repeats = parse_positive(args, "--repeats", 20);
  std::vector<double> sizes_mb;
  for (const std::string& text : split(option(args, "--sizes-mb", "1,4,25,100"), "--sizes-mb")) {
    size_t used = 0;
    double value = 0.0;
    try {
      value = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    OPSNN_CHECK_AS(ConfigError, used == text.size() && value > 0.0 && value <= 4096.0, "--sizes-mb: '", text,
                   "' is not a size in MiB in (0, 4096]");
    sizes_mb.push_back(value);
  }
  dist::InitOptions init;
  init.backend = option(args, "--backend", "auto");
  init.device = device;
  init.timeout_seconds = 300.0;
  auto comm = dist::init(init);
  const Device where = comm->device();  // NCCL's GPU, or the CPU for MPI
  const int world = comm->size();
  if (comm->rank() == 0)
    std::printf(
        "opsnn-bench dist: all-reduce (avg) of f32 tensors, world %d (%s), backend %s, %s tensors, median of %d\n",
        world, comm->world().launcher.c_str(), std::string(dist::backend_name(comm->backend())).c_str(),
        where.str().c_str(), repeats);
  nlohmann::json rows = nlohmann::json::array();
  for (double mb : sizes_mb) {
    const int64_t elements = static_cast<int64_t>(mb * 1024 * 1024 / 4);
    Tensor tensor = Tensor::ones({elements}, DType::f32, where);
    const double seconds = median_seconds(
        [&] { comm->all_reduce(tensor, dist::ReduceOp::avg, "benchmark all-reduce"); },  // returns once done
        3, repeats);
    const double bytes = static_cast<double>(elements) * 4.0;
    const double algorithm_gbps = bytes / seconds / 1e9;
    const double bus_gbps = algorithm_gbps * (world > 1 ? 2.0 * (world - 1) / world : 1.0);
    if (comm->rank() == 0)
      std::printf("  %8.2f MiB  %9.3f ms  algbw %7.2f GB/s  busbw %7.2f GB/s\n", mb, seconds * 1e3, algorithm_gbps,
                  bus_gbps);
    rows.push_back({{"mb", mb}, {"ms", seconds * 1e3}, {"algbw_gbps", algorithm_gbps}, {"busbw_gbps", bus_gbps}});
  }
  // ZeRO-1 over ResNet-50's parameters (Adam: two states per parameter).
  Generator generator(0);
  models::ModelOptions model_options;
  model_options.arch = "resnet50";
  model_options.num_classes = 1000;
  model_options.image_size = 224;
  model_options.stem = "imagenet";
  auto model = models::make_resnet(50, model_options, generator);
  if (where.is_cuda()) model->to(where);
  auto optimizer = optim::make_optimizer("adam", model->named_parameters(), optim::OptimizerOptions(1e-3));
  const optim::ParamArena& arena = optimizer->arena();
  const double unsharded_mib = 2.0 * static_cast<double>(arena.padded_elements()) * 4.0 / 1048576.0;
  dist::DataParallelOptions zero_options;
  zero_options.zero_stage = 1;
  dist::DataParallel zero(*model, *optimizer, comm, zero_options);
  const double sharded_mib = static_cast<double>(zero.state_bytes_per_rank()) / 1048576.0;
  std::vector<int64_t> counts;
  for (int r = 0; r < world; ++r) {
    const optim::ArenaShardRange shard = optim::arena_shard_range(arena.padded_elements(), r, world);
    counts.push_back(shard.end - shard.begin);
  }
  Tensor grads = arena.grads(), params = arena.params();
  const double zero_seconds = median_seconds(
      [&] {
        comm->reduce_scatter_v_async(grads, counts, dist::ReduceOp::avg, "benchmark reduce-scatter")->wait();
        comm->all_gather_v(params, counts, "benchmark all-gather");
      },
      2, std::max(3, repeats / 4));
  const double plain_seconds = median_seconds(
      [&] { comm->all_reduce(grads, dist::ReduceOp::avg, "benchmark all-reduce"); }, 2, std::max(3, repeats / 4));
  if (comm->rank() == 0)
    std::printf(
        "  ZeRO-1, ResNet-50 arena (%lld elements), Adam: %.1f MiB of optimizer state per rank (unsharded %.1f MiB, "
        "%.2fx less); reduce-scatter + all-gather %.3f ms vs all-reduce %.3f ms\n",
        static_cast<long long>(arena.padded_elements()), sharded_mib, unsharded_mib, unsharded_mib / sharded_mib,
        zero_seconds * 1e3, plain_seconds * 1e3);
  const std::string json_path = option(args, "--json", "");
  if (!json_path.empty() && comm->rank() == 0) {
    std::ofstream out(json_path);
    OPSNN_CHECK_AS(DataError, out.good(), "--json: cannot write '", json_path, "'");
    out << nlohmann::json{{"world_size", world},
                          {"backend", dist::backend_name(comm->backend())},
                          {"rows", rows},
                          {"zero1",
                           {{"arena_elements", arena.padded_elements()},
                            {"state_mib_per_rank", sharded_mib},
                            {"state_mib_unsharded", unsharded_mib},
                            {"reduce_scatter_all_gather_ms", zero_seconds * 1e3},
                            {"all_reduce_ms", plain_seconds * 1e3}}}}
               .dump()
        << "\n";
  }
  return 0;
}

Registration registration{{"dist", "all-reduce bandwidth of the distributed backend (under mpirun, or world 1)", run}};

}  // namespace
}  // namespace opsnn::bench
