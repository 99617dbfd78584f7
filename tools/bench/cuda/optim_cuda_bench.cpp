// opsnn-bench optim --device cuda: the fused CUDA optimizer step (device_step.h) per optimizer and dtype
// variant, next to the device copy bandwidth and the unfused Adam and AdamW chains measured in the same run.
// Times are CUDA-event medians of single steps after warm-up; bandwidth counts the bytes a variant must
// move (every array read or written once per pass that touches it). --json FILE writes the rows for
// tools/bench_optim_torch.py, which prints them beside PyTorch's fused optimizers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/cuda/cuda_bench.h"
#include "bench/cuda/unfused_chain.h"
#include "opsnn/core/error.h"
#include "opsnn/optim/device_step.h"
#include "opsnn/optim/optimizer.h"

namespace opsnn::bench {
namespace {

using optim::OptimizerOptions;
const Device kGpu(DeviceType::cuda, 0);

float* device_floats(std::vector<Tensor>& keep, int64_t n) {
  keep.push_back(Tensor::empty({n}, DType::f32, kGpu));
  return keep.back().data<float>();
}

double copy_ms(int64_t n, int warmup, int repeats) {
  std::vector<Tensor> keep;
  float* a = device_floats(keep, n);
  float* b = device_floats(keep, n);
  fill_uniform(a, n, 1, -1, 1, nullptr);
  return median_ms(
      [&] { BENCH_CUDA_CHECK(cudaMemcpyAsync(b, a, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, nullptr)); },
      warmup, repeats);
}

double unfused_ms(int64_t n, UnfusedRule rule, int warmup, int repeats) {
  std::vector<Tensor> keep;
  UnfusedAdamBuffers b{};
  b.n = n;
  float** arrays[] = {&b.params, &b.grads, &b.exp_avg, &b.exp_avg_sq, &b.prepared, &b.m_hat, &b.v_hat};
  uint64_t seed = 10;
  for (float** array : arrays) {
    *array = device_floats(keep, n);
    fill_uniform(*array, n, seed++, -1e-2f, 1e-2f, nullptr);
  }
  fill_uniform(b.exp_avg_sq, n, seed++, 0.0f, 1e-4f, nullptr);
  keep.push_back(Tensor::empty({1024}, DType::f64, kGpu));
  b.norm_partials = keep.back().data<double>();
  int64_t step = 0;
  return median_ms([&] { unfused_step(b, rule, ++step, nullptr); }, warmup, repeats);
}

struct Variant {
  std::string label;
  std::string optimizer;
  OptimizerOptions options;
  DType grad_dtype = DType::f32;
  bool param_copy = false;  // fp32 master + bf16 copy
  bool graph = false;       // replay a captured step
};

// Bytes a variant must move per parameter (s: state bytes, g: gradient bytes, c: copy bytes): each array
// read and written once. LAMB counts like Adam: its second pass rereads p, m and v, from L2 where its
// windows fit there (ResNet-50 shapes), from memory otherwise (1e9 parameters: 12 more bytes with fp32).
double bytes_per_parameter(const Variant& v, bool single_pass) {
  double s = static_cast<double>(dtype_size(v.options.state_dtype()));
  double g = static_cast<double>(dtype_size(v.grad_dtype));
  double c = v.param_copy ? 2.0 : 0.0;
  double stats = single_pass ? 0.0 : g;  // the separate gradient pass
  // The optimizer's own state list for these options (descriptor.h): sgd 0-1, adam 2-3, lion 1.
  const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(v.optimizer);
  int states = static_cast<int>(descriptor->state_names(v.options).size());
  return stats + 8 + g + 2 * states * s + c;
}

struct Row {
  std::string problem, variant;
  double ms = 0.0, bytes_per_parameter = 0.0, gbps = 0.0, copy_fraction = 0.0;
};

Row measure(const Problem& problem, const Variant& v, double copy_gbps, int warmup, int repeats) {
  optim::NamedParameters parameters;
  for (size_t i = 0; i < problem.shapes.size(); ++i) {
    Tensor t = Tensor::empty(problem.shapes[i], DType::f32, kGpu);
    fill_uniform(t.data<float>(), t.numel(), 100 + i, -1, 1, nullptr);
    t.set_requires_grad(true);
    parameters.emplace_back(std::string("p").append(std::to_string(i)), t);
  }
  auto optimizer = optim::make_optimizer(v.optimizer, parameters, v.options);
  const optim::ParamArena& arena = optimizer->arena();
  fill_uniform(arena.grads().data<float>(), arena.padded_elements(), 7, -1e-2f, 1e-2f, nullptr);
  std::vector<Tensor> keep;
  std::unique_ptr<optim::DeviceStepper> custom;
  if (v.grad_dtype != DType::f32 || v.param_copy) {
    optim::DeviceArena buffers = optimizer->device_arena();
    keep.push_back(arena.grads().to(v.grad_dtype));
    buffers.grads = keep.back().data_ptr();
    buffers.grad_dtype = v.grad_dtype;
    if (v.param_copy) {
      keep.push_back(Tensor::zeros({arena.padded_elements()}, DType::bf16, kGpu));
      buffers.param_copy = keep.back().data_ptr();
      buffers.param_copy_dtype = DType::bf16;
    }
    custom = optim::device_stepper_factory(DeviceType::cuda)(kGpu, optimizer->device_step_constants(), buffers,
                                                             optimizer->device_segments());
    custom->write_state(optimizer->step_state());
  }
  const bool single_pass = optim::single_pass_step(optimizer->device_step_constants());
  double ms = 0.0;
  if (custom) {
    ms = median_ms([&] { custom->enqueue(nullptr); }, 3, repeats);
  } else if (v.graph) {
    auto graph = optimizer->capture_step();
    ms = median_ms([&] { graph->replay(); }, 3, repeats);
  } else {
    ms = median_ms([&] { optimizer->step_async(); }, warmup, repeats);
  }
  optimizer->sync_state();
  Row row{problem.label, v.label, ms, bytes_per_parameter(v, single_pass)};
  row.gbps = row.bytes_per_parameter * static_cast<double>(problem.total()) / (ms * 1e-3) / 1e9;
  row.copy_fraction = row.gbps / copy_gbps;
  return row;
}

int run(const std::vector<std::string>& args) {
  check_options(args, {"--device", "--sizes", "--repeats", "--json", "--variants"});  // --device cuda: from optim
  std::vector<Problem> problems;
  for (const std::string& size : split(option(args, "--sizes", "resnet50,1e9x50"), "--sizes"))
    problems.push_back(make_problem(size));
  int repeats = parse_positive(args, "--repeats", 20);
  std::string json_path = option(args, "--json", "");
  const int warmup = 3;

  auto warn = optim::MonitorOptions().on_nonfinite(optim::NonFiniteAction::warn);
  std::vector<Variant> variants = {
      {"adamw", "adamw", OptimizerOptions(1e-3).monitor(warn)},
      {"adamw graph", "adamw", OptimizerOptions(1e-3).monitor(warn), DType::f32, false, true},
      {"adamw skip", "adamw", OptimizerOptions(1e-3)},  // default monitor: the separate gradient pass
      {"adam", "adam", OptimizerOptions(1e-3).monitor(warn)},
      {"sgd momentum", "sgd", OptimizerOptions(0.1).momentum(0.9).monitor(warn)},
      {"lamb", "lamb", OptimizerOptions(1e-3).monitor(warn)},
      {"lamb graph", "lamb", OptimizerOptions(1e-3).monitor(warn), DType::f32, false, true},
      {"lion", "lion", OptimizerOptions(1e-4).monitor(warn)},
      {"lion graph", "lion", OptimizerOptions(1e-4).monitor(warn), DType::f32, false, true},
      {"adamw bf16 st", "adamw", OptimizerOptions(1e-3).state_dtype(DType::bf16).monitor(warn)},
      {"adamw mixed", "adamw", OptimizerOptions(1e-3).state_dtype(DType::bf16).monitor(warn), DType::bf16, true},
  };
  const std::string only = option(args, "--variants", "");
  if (!only.empty()) {
    std::vector<Variant> chosen;
    for (const std::string& name : split(only, "--variants")) {
      auto found = std::find_if(variants.begin(), variants.end(), [&](const Variant& v) { return v.label == name; });
      if (found == variants.end()) {
        std::string known;
        for (const Variant& v : variants) known += (known.empty() ? "" : ", ") + v.label;
        throw ConfigError("--variants: unknown variant '" + name + "' (known: " + known + ")");
      }
      chosen.push_back(*found);
    }
    variants = chosen;
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "opsnn-bench optim --device cuda: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp properties{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("opsnn-bench optim --device cuda: %s, median of %d steps after warm-up (CUDA events)\n", properties.name,
              repeats);
  std::printf(
      "adamw mixed = fp32 master + bf16 parameter copy + bf16 states + bf16 gradients; "
      "'skip' = monitor.on_nonfinite skip (a separate gradient pass); others: warn (single pass)\n\n");
  std::printf("%-10s %-14s %10s %8s %9s %8s %10s\n", "params", "variant", "ms", "B/param", "GB/s", "% copy",
              "vs unfused");
  nlohmann::json rows = nlohmann::json::array();
  for (const Problem& problem : problems) {
    int64_t n = problem.total();
    double copy = copy_ms(n, warmup, repeats);
    double copy_gbps = 8.0 * static_cast<double>(n) / (copy * 1e-3) / 1e9;
    std::printf("%-10s %-14s %10.3f %8.0f %9.0f %7.0f%%\n", problem.label.c_str(), "copy (d2d)", copy, 8.0, copy_gbps,
                100.0);
    rows.push_back({{"problem", problem.label}, {"variant", "copy"}, {"ms", copy}, {"gbps", copy_gbps}});
    double unfused_adam = 0.0, unfused_adamw = 0.0;
    for (UnfusedRule rule : {UnfusedRule::adam, UnfusedRule::adamw}) {
      const double ms = unfused_ms(n, rule, warmup, repeats);
      const double bytes = unfused_bytes_per_parameter(rule);
      const double gbps = bytes * static_cast<double>(n) / (ms * 1e-3) / 1e9;
      const char* name = rule == UnfusedRule::adam ? "unfused adam" : "unfused adamw";
      std::printf("%-10s %-14s %10.3f %8.0f %9.0f %7.0f%%\n", problem.label.c_str(), name, ms, bytes, gbps,
                  100.0 * gbps / copy_gbps);
      rows.push_back({{"problem", problem.label}, {"variant", name}, {"ms", ms}, {"gbps", gbps}});
      (rule == UnfusedRule::adam ? unfused_adam : unfused_adamw) = ms;
    }
    for (const Variant& variant : variants) {
      Row row = measure(problem, variant, copy_gbps, warmup, repeats);
      // Decoupled-decay variants (adamw, lion) against the AdamW chain, the others against Adam's.
      const double unfused =
          optim::find_optimizer(variant.optimizer)->decoupled_weight_decay ? unfused_adamw : unfused_adam;
      std::printf("%-10s %-14s %10.3f %8.0f %9.0f %7.0f%% %9.2fx\n", problem.label.c_str(), row.variant.c_str(), row.ms,
                  row.bytes_per_parameter, row.gbps, 100.0 * row.copy_fraction, unfused / row.ms);
      std::fflush(stdout);
      rows.push_back({{"problem", row.problem},
                      {"variant", row.variant},
                      {"ms", row.ms},
                      {"bytes_per_parameter", row.bytes_per_parameter},
                      {"gbps", row.gbps},
                      {"copy_fraction", row.copy_fraction},
                      {"vs_unfused", unfused / row.ms}});
    }
    std::printf("\n");
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    OPSNN_CHECK_AS(DataError, out.good(), "--json: cannot write '", json_path, "'");
    out << nlohmann::json{{"device", properties.name}, {"rows", rows}}.dump(1) << "\n";
  }
  return 0;
}

Registration registration{{"optim-cuda", "the fused CUDA optimizer step (same as: optim --device cuda)", run}};

}  // namespace
}  // namespace opsnn::bench
