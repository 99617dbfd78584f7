// opsnn-bench resnet50: ResNet-50 training throughput on the GPU (synthetic 224x224 images, batch 256 by
// default, fused SGD with momentum), images per second and peak GPU memory from the stream-ordered pool,
// the same measurement tools/bench_resnet50_torch.py makes with torchvision's model so the two run side
// by side. Every step is forward + cross-entropy + backward + optimizer step; the first steps (cuDNN
// algorithm search per shape) are warm-up. --channels-last picks the residual stages' layout (auto: NHWC
// for bf16/fp16, as the trainer's model.channels_last). --cuda-graph captures one whole step (zero_grad,
// forward, loss, backward, optimizer step) after the warm-up and times replays of it.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/cuda/cuda_bench.h"
#include "opsnn/core/error.h"
#include "opsnn/core/graph.h"
#include "opsnn/dist/data_parallel.h"
#include "opsnn/dist/dist.h"
#include "opsnn/models/models.h"
#include "opsnn/ops/backend.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"

namespace opsnn::bench {
namespace {

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench resnet50 [--batch 256] [--steps 20] [--warmup 5] [--precision fp32|tf32|bf16|fp16] "
          "[--channels-last auto|on|off] [--depth 50] [--image-size 224] [--conv-deterministic on|off] "
          "[--json FILE] [--profile] [--cuda-graph] [--distributed [--zero-stage 0|1]]\n"
          "  --conv-deterministic off: cuDNN may pick algorithms that accumulate with atomics\n"
          "  --profile: one more step after the timed ones between cudaProfilerStart/Stop, for\n"
          "             ncu --profile-from-start off / nsys --capture-range=cudaProfilerApi\n"
          "  --cuda-graph: the whole step captured in a CUDA graph after the warm-up, replayed (not with\n"
          "             --distributed, nor fp16, whose loss scale the host reads each step)\n"
          "  --distributed: data-parallel over the world mpirun or RANK/WORLD_SIZE describe (NCCL; world 1\n"
          "             without a launcher), images/s of this rank; also the gradient all-reduce's cost\n"
          "             alone and how much of it backward hides; --zero-stage 1 shards the optimizer states\n");
      return 0;
    }
  check_options(args,
                {"--batch", "--steps", "--warmup", "--depth", "--image-size", "--precision", "--json",
                 "--channels-last", "--conv-deterministic", "--zero-stage"},
                {"--profile", "--distributed", "--cuda-graph"});
  const int batch = parse_positive(args, "--batch", 256);
  const int steps = parse_positive(args, "--steps", 20);
  const int warmup = parse_positive(args, "--warmup", 5);
  const int depth = parse_positive(args, "--depth", 50);
  const int image_size = parse_positive(args, "--image-size", 224);
  const std::string precision = option(args, "--precision", "fp32");
  const std::string json_path = option(args, "--json", "");
  const bool profile = std::find(args.begin(), args.end(), "--profile") != args.end();
  const bool distributed = std::find(args.begin(), args.end(), "--distributed") != args.end();
  const bool cuda_graph = std::find(args.begin(), args.end(), "--cuda-graph") != args.end();
  const std::string zero_stage = option(args, "--zero-stage", "0");
  OPSNN_CHECK_AS(ConfigError, zero_stage == "0" || zero_stage == "1", "--zero-stage: expected 0 or 1, got '",
                 zero_stage, "'");
  const std::string channels_last_choice = option(args, "--channels-last", "auto");
  const std::string deterministic = option(args, "--conv-deterministic", "on");
  OPSNN_CHECK_AS(ConfigError, precision == "fp32" || precision == "tf32" || precision == "bf16" || precision == "fp16",
                 "--precision: expected fp32, tf32, bf16 or fp16, got '", precision, "'");
  OPSNN_CHECK_AS(ConfigError,
                 channels_last_choice == "auto" || channels_last_choice == "on" || channels_last_choice == "off",
                 "--channels-last: expected auto, on or off, got '", channels_last_choice, "'");
  OPSNN_CHECK_AS(ConfigError, deterministic == "on" || deterministic == "off",
                 "--conv-deterministic: expected on or off, got '", deterministic, "'");
  OPSNN_CHECK_AS(ConfigError, !cuda_graph || !distributed,
                 "--cuda-graph: not with --distributed (the gradient reductions run on a stream of their own)");
  OPSNN_CHECK_AS(ConfigError, !cuda_graph || precision != "fp16",
                 "--cuda-graph: not with --precision fp16 (loss scaling reads the scale on the host each step)");
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "opsnn-bench resnet50: no CUDA device\n");
    return 1;
  }
  std::shared_ptr<dist::Communicator> comm;
  if (distributed) {
    dist::InitOptions init;
    init.backend = "nccl";
    init.device = "cuda";
    init.timeout_seconds = 300.0;
    comm = dist::init(init);
  }
  const Device gpu(DeviceType::cuda, comm ? comm->device().index : 0);
  const DType compute_dtype = precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
  const bool channels_last = channels_last_choice == "auto"
                                 ? models::channels_last_by_default(gpu, compute_dtype, precision == "tf32")
                                 : channels_last_choice == "on";

  Generator generator(0);
  models::ModelOptions options;
  options.arch = "resnet" + std::to_string(depth);
  options.in_channels = 3;
  options.num_classes = 1000;
  options.image_size = image_size;
  options.stem = "imagenet";
  options.channels_last = channels_last;
  auto model = models::make_resnet(depth, options, generator);
  model->to(gpu);
  model->train();
  // As train.precision: tf32 lets cuDNN/cuBLAS use TF32 tensor cores for fp32 data; bf16/fp16 run the
  // activations and convolution inputs in that dtype (fp32 master weights, BatchNorm statistics, loss).
  ops::set_fp32_math(precision == "tf32" ? ops::Fp32Math::tf32 : ops::Fp32Math::strict);
  ops::set_conv_deterministic(deterministic == "on");
  if (compute_dtype != DType::f32) model->set_compute_dtype(compute_dtype);
  const bool scaling = precision == "fp16";
  auto optimizer =
      optim::make_optimizer("sgd", model->named_parameters(),
                            optim::OptimizerOptions(0.1)
                                .momentum(0.9)
                                .loss_scaling(optim::LossScalingOptions().enabled(scaling))
                                .monitor(optim::MonitorOptions().on_nonfinite(scaling ? optim::NonFiniteAction::skip
                                                                                      : optim::NonFiniteAction::warn)));
  if (precision == "bf16" || precision == "fp16") {  // as the trainer: the optimizer keeps the low-precision weights
    optimizer->enable_param_copy(model->compute_dtype());
    model->set_parameter_copies(std::make_shared<const nn::Module::ParameterCopies>(optimizer->param_copies()));
  }
  std::unique_ptr<dist::DataParallel> parallel;
  if (comm) {
    dist::DataParallelOptions parallel_options;
    parallel_options.zero_stage = zero_stage == "1" ? 1 : 0;
    parallel = std::make_unique<dist::DataParallel>(*model, *optimizer, comm, parallel_options);
  }
  Tensor images = Tensor::normal({batch, 3, image_size, image_size}, 0.0, 1.0, generator).to(gpu);
  std::vector<int64_t> label_values(static_cast<size_t>(batch));
  for (int64_t& label : label_values) label = static_cast<int64_t>(generator.next_below(1000));
  Tensor labels = Tensor::from_vector(label_values, {batch}, DType::i64).to(gpu);

  double last_loss = 0.0;
  bool use_parallel = parallel != nullptr;
  auto train_step = [&] {
    optimizer->zero_grad();
    Tensor loss = ops::cross_entropy(model->forward(images), labels);
    if (use_parallel) {  // the reduction overlapped with backward, then the step as below
      parallel->backward(optimizer->scale_loss(loss));
      if (scaling)
        parallel->step();
      else
        parallel->step_async();
      return loss;
    }
    optimizer->scale_loss(loss).backward();
    if (scaling)
      optimizer->step();  // scale_loss reads the scale the step leaves on the host
    else
      optimizer->step_async();
    return loss;
  };
  for (int i = 0; i < warmup; ++i) last_loss = train_step().item();
  Tensor loss;  // the last timed step's
  std::unique_ptr<CapturedGraph> graph;
  double capture_ms = 0.0;
  if (cuda_graph) {  // captured after the warm-up (the searches are done), then replayed once untimed
    loss = Tensor::zeros({}, DType::f32, gpu);  // where the replays leave their loss
    const auto begin = std::chrono::steady_clock::now();
    graph = capture_graph(gpu, [&] { loss.copy_(train_step()); });
    capture_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    graph->replay();
    graph->synchronize();
  }
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());
  cudaMemPool_t pool;
  BENCH_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t zero = 0;
  BENCH_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  BENCH_CUDA_CHECK(cudaDeviceSetGraphMemAttribute(gpu.index, cudaGraphMemAttrUsedMemHigh, &zero));
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  // --distributed: the same steps without the data-parallel wrapper first, in this process, as the
  // baseline its cost is measured against.
  float plain_ms = 0.0f;
  if (parallel) {
    use_parallel = false;
    for (int i = 0; i < warmup; ++i) train_step();
    BENCH_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (int i = 0; i < steps; ++i) train_step();
    BENCH_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&plain_ms, start, stop));
    use_parallel = true;
    for (int i = 0; i < warmup; ++i) train_step();
  }
  // A replay's graph runs on a blocking stream, so events on the legacy stream enclose it.
  const auto timed_step = [&] {
    if (graph)
      graph->replay();
    else
      loss = train_step();
  };
  BENCH_CUDA_CHECK(cudaEventRecord(start, nullptr));
  for (int i = 0; i < steps; ++i) timed_step();
  BENCH_CUDA_CHECK(cudaEventRecord(stop, nullptr));
  BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
  if (graph) graph->synchronize();
  last_loss = loss.item();
  if (profile) {  // one more step, the only one a profiler started with profiling off sees
    BENCH_CUDA_CHECK(cudaProfilerStart());
    timed_step();
    BENCH_CUDA_CHECK(cudaDeviceSynchronize());
    BENCH_CUDA_CHECK(cudaProfilerStop());
  }
  optimizer->sync_state();
  float ms = 0.0f;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  // The graph's temporaries come from the graph memory pool, beside the default pool's persistent buffers.
  uint64_t peak = 0, graph_peak = 0;
  BENCH_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &peak));
  BENCH_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(gpu.index, cudaGraphMemAttrUsedMemHigh, &graph_peak));
  peak += graph_peak;
  cudaDeviceProp properties{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  const double images_per_second = static_cast<double>(batch) * steps / (ms * 1e-3);
  std::printf(
      "opsnn-bench resnet%d: %s, batch %d, %dx%d, %s, channels_last %s (%s), %s conv algorithms, %d steps "
      "after %d warm-up%s\n",
      depth, properties.name, batch, image_size, image_size, precision.c_str(), channels_last ? "on" : "off",
      channels_last_choice == "auto" ? "auto" : "as given", deterministic == "on" ? "deterministic" : "any", steps,
      warmup, graph ? ", replays of a captured CUDA graph" : "");
  std::printf("  %.1f images/s, %.1f ms/step, peak GPU memory %.2f GiB (pool high-water mark%s), last loss %.3f\n",
              images_per_second, ms / steps, static_cast<double>(peak) / (1u << 30),
              graph ? " plus the graph pool's" : "", last_loss);
  if (graph) std::printf("  capture and instantiation %.1f ms (once)\n", capture_ms);
  double exposed_ms = 0.0, alone_ms = 0.0;
  if (comm) {
    // What data parallelism added to a step, against the all-reduce of the whole gradient arena on its
    // own (median of 5): the rest of the all-reduce was hidden behind backward.
    exposed_ms = std::max(0.0, static_cast<double>(ms - plain_ms) / steps);
    Tensor grads = optimizer->arena().grads();
    alone_ms = 1e3 * median_seconds([&] { comm->all_reduce(grads, dist::ReduceOp::avg, "timed all-reduce"); }, 2, 5);
    std::printf(
        "  distributed: world %d (%s), zero_stage %s (%.1f MiB of optimizer state on this rank), %zu buckets; %.2f "
        "ms/step without the wrapper in this process (%.2f%% added); gradient all-reduce alone %.3f ms, %.0f%% of it "
        "hidden behind backward\n",
        comm->size(), comm->world().launcher.c_str(), zero_stage.c_str(),
        static_cast<double>(parallel->state_bytes_per_rank()) / 1048576.0, parallel->buckets().size(), plain_ms / steps,
        100.0 * (ms / plain_ms - 1.0), alone_ms,
        alone_ms > 0 ? 100.0 * std::max(0.0, 1.0 - exposed_ms / alone_ms) : 0.0);
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    OPSNN_CHECK_AS(DataError, out.good(), "--json: cannot write '", json_path, "'");
    out << nlohmann::json{{"images_per_second", images_per_second},
                          {"ms_per_step", ms / steps},
                          {"peak_bytes", peak},
                          {"batch", batch},
                          {"precision", precision},
                          {"channels_last", channels_last},
                          {"world_size", comm ? comm->size() : 0},
                          {"zero_stage", zero_stage == "1" ? 1 : 0},
                          {"cuda_graph", cuda_graph},
                          {"capture_ms", capture_ms},
                          {"allreduce_alone_ms", alone_ms},
                          {"exposed_comm_ms", exposed_ms},
                          {"ms_per_step_without_wrapper", comm ? plain_ms / steps : 0.0}}
               .dump()
        << "\n";
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}

Registration registration{
    {"resnet50", "ResNet-50 training throughput on the GPU, synthetic 224x224 (--device cuda)", run}};

}  // namespace
}  // namespace opsnn::bench
