// opsnn-bench optim: the fused optimizer step's time and effective bandwidth for each optimizer and state
// dtype, next to an unfused Adam chain (the "traditional" pipeline, one pass per stage with temporaries)
// and a STREAM-like triad, all measured in the same run, for 1e6/1e7/1e8 parameters and the ResNet-50
// parameter shapes. Bandwidth counts the bytes each variant must move (every array read or written once
// per pass that touches it), not cache-line traffic.
#include <omp.h>
#if defined(__SSE__)
#include <xmmintrin.h>  // _mm_stream_ps: the streaming copy baseline (SSE, in every x86-64 CPU)
#endif

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "core/cpu_variants.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/optim/optimizer.h"

namespace opsnn::bench {

int64_t Problem::total() const {
  int64_t sum = 0;
  for (const Shape& shape : shapes) sum += shape_numel(shape);
  return sum;
}

// torchvision.models.resnet50(): stem, four stages of bottlenecks (3, 4, 6, 3 blocks, expansion 4, a 1x1
// projection + BatchNorm on each stage's first block), fc 2048 -> 1000. Convolutions have no bias.
static std::vector<Shape> resnet50_shapes() {
  std::vector<Shape> shapes;
  auto conv_bn = [&](int64_t out, int64_t in, int64_t kernel) {
    shapes.push_back({out, in, kernel, kernel});
    shapes.push_back({out});  // BatchNorm weight
    shapes.push_back({out});  // BatchNorm bias
  };
  conv_bn(64, 3, 7);
  int64_t in_channels = 64;
  const int64_t blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    int64_t width = 64 << stage;
    for (int64_t block = 0; block < blocks[stage]; ++block) {
      conv_bn(width, in_channels, 1);
      conv_bn(width, width, 3);
      conv_bn(width * 4, width, 1);
      if (block == 0) conv_bn(width * 4, in_channels, 1);
      in_channels = width * 4;
    }
  }
  shapes.push_back({1000, 2048});
  shapes.push_back({1000});
  return shapes;
}

Problem make_problem(const std::string& text) {
  // "NxK": N parameters in K equal tensors (e.g. 1e9x50: 1e9 values in 50 tensors).
  if (size_t x = text.find('x'); x != std::string::npos && text != "resnet50") {
    Problem whole = make_problem(text.substr(0, x));
    int64_t pieces = 0;
    const std::string count = text.substr(x + 1);
    auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), pieces);
    if (error != std::errc() || end != count.data() + count.size()) pieces = 0;  // whole text only: not 2junk
    OPSNN_CHECK_AS(ConfigError, pieces >= 1 && pieces <= 100000, "--sizes: '", text,
                   "': the tensor count after 'x' must be in [1, 100000]");
    int64_t each = whole.total() / pieces;
    Shape shape = each % 1000 == 0 ? Shape{each / 1000, 1000} : Shape{each};
    return Problem{text, std::vector<Shape>(static_cast<size_t>(pieces), shape)};
  }
  if (text == "resnet50") {
    Problem problem{"resnet50", resnet50_shapes()};
    OPSNN_CHECK(problem.shapes.size() == 161 && problem.total() == 25557032,
                "resnet50 shapes are off: ", problem.shapes.size(), " tensors, ", problem.total(), " values");
    return problem;
  }
  double value = 0.0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())  // whole text only: stod took 1e3junk as 1e3
    throw ConfigError("--sizes: '" + text + "' is neither a number of parameters (1e6) nor 'resnet50'");
  OPSNN_CHECK_AS(ConfigError, value >= 1000 && value <= 4e9, "--sizes: ", text, " must be in [1e3, 4e9]");
  int64_t count = static_cast<int64_t>(value);
  Shape shape = count % 1000 == 0 ? Shape{count / 1000, 1000} : Shape{count};  // 2-d: weight decay applies
  return Problem{text, {shape}};
}

namespace {

using optim::OptimizerOptions;

// ---- memory ----
// The baselines' buffers come from the CPU allocator the arena uses (64-byte aligned; large ones on huge
// pages unless OPSNN_HUGE_PAGES=0), so both sides of a ratio have the same pages.
struct FloatBuffer {
  explicit FloatBuffer(int64_t count)
      : data(static_cast<float*>(device_services(kCPU).allocate(static_cast<size_t>(count) * 4, 0))), size(count) {}
  ~FloatBuffer() { device_services(kCPU).deallocate(data, static_cast<size_t>(size) * 4, 0); }
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  float* data;
  int64_t size;
};

// Deterministic values in [low, high), first-touched by the threads that will use them.
void fill_random(float* data, int64_t count, uint64_t seed, float low, float high) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    data[i] = low + (high - low) * static_cast<float>(z >> 40) * 0x1p-24f;
  }
}

// ---- baselines ----
double triad_seconds(int64_t count, int warmup, int repeats) {
  FloatBuffer a(count), b(count), c(count);
  fill_random(a.data, count, 1, -1, 1);
  fill_random(b.data, count, 2, -1, 1);
  fill_random(c.data, count, 3, -1, 1);
  const float s = 0.5f;
  return median_seconds(
      [&] {
        float* __restrict x = a.data;
        const float* __restrict y = b.data;
        const float* __restrict z = c.data;
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < count; ++i) x[i] = y[i] + s * z[i];
      },
      warmup, repeats);
}

// A STREAM-like copy y = x with non-temporal (streaming) stores: the write bandwidth these cores reach
// without first reading the destination lines, 8 bytes per element.
struct StreamCopy {
  explicit StreamCopy(int64_t count) : a(count), b(count), count(count) {
    fill_random(a.data, count, 1, -1, 1);
    fill_random(b.data, count, 2, -1, 1);
  }
  void run() {
    const float* __restrict x = a.data;
    float* __restrict y = b.data;
    // 16-float blocks (64-byte lines; both buffers 64-byte aligned), the tail without streaming.
    const int64_t blocks = count / 16;
#pragma omp parallel for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
#if defined(__SSE__)
      for (int64_t i = block * 16; i < block * 16 + 16; i += 4) _mm_stream_ps(y + i, _mm_load_ps(x + i));
#else
      std::copy(x + block * 16, x + block * 16 + 16, y + block * 16);  // no streaming stores here
#endif
    }
    for (int64_t i = blocks * 16; i < count; ++i) y[i] = x[i];
#if defined(__SSE__)
    _mm_sfence();
#endif
  }
  FloatBuffer a, b;
  int64_t count;
};

double stream_copy_seconds(int64_t count, int warmup, int repeats) {
  StreamCopy copy(count);
  return median_seconds([&] { copy.run(); }, warmup, repeats);
}

// Adam (fp32, L2 decay) as the traditional pipeline: a norm/inf pass, then grad prep, momentum, variance,
// bias correction and update, each its own pass over memory through temporaries.
struct UnfusedAdam {
  explicit UnfusedAdam(int64_t count)
      : params(count),
        grads(count),
        exp_avg(count),
        exp_avg_sq(count),
        grad_prepared(count),
        m_hat(count),
        v_hat(count),
        n(count) {
    fill_random(params.data, n, 11, -1, 1);
    fill_random(grads.data, n, 12, -1e-2f, 1e-2f);
    fill_random(exp_avg.data, n, 13, 0, 0);
    fill_random(exp_avg_sq.data, n, 14, 0, 0);
    fill_random(grad_prepared.data, n, 15, 0, 0);
    fill_random(m_hat.data, n, 16, 0, 0);
    fill_random(v_hat.data, n, 17, 0, 0);
  }

  void step() {
    ++t;
    const float beta1 = 0.9f, beta2 = 0.999f, lr = 1e-3f, eps = 1e-8f, weight_decay = 0.0f, inverse_scale = 1.0f;
    float* __restrict p = params.data;
    float* __restrict g = grads.data;
    float* __restrict m = exp_avg.data;
    float* __restrict v = exp_avg_sq.data;
    float* __restrict prepared = grad_prepared.data;
    float* __restrict mh = m_hat.data;
    float* __restrict vh = v_hat.data;
    double sum = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
    grad_norm = std::sqrt(sum);
    const float factor = inverse_scale;  // clipping off: factor = 1/loss_scale
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) prepared[i] = g[i] * factor + weight_decay * p[i];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) m[i] = beta1 * m[i] + (1 - beta1) * prepared[i];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = beta2 * v[i] + (1 - beta2) * prepared[i] * prepared[i];
    const float correction1 = static_cast<float>(1.0 / (1.0 - std::pow(0.9, t)));
    const float correction2 = static_cast<float>(1.0 / (1.0 - std::pow(0.999, t)));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      mh[i] = m[i] * correction1;
      vh[i] = v[i] * correction2;
    }
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * mh[i] / (std::sqrt(vh[i]) + eps);
  }

  FloatBuffer params, grads, exp_avg, exp_avg_sq, grad_prepared, m_hat, v_hat;
  int64_t n;
  int64_t t = 0;
  double grad_norm = 0.0;
  // norm 4 + prep 12 + momentum 12 + variance 12 + bias correction 16 + update 16 bytes per parameter
  static constexpr double kBytesPerParameter = 72.0;
};

// ---- the fused step ----
struct Variant {
  std::string optimizer;
  OptimizerOptions options;
  std::string label;
};

// Bytes the fused step must move per parameter: the gradient pass reads g (4; none in a single-pass step,
// monitor.on_nonfinite = warn); then per update pass every array it touches once. s = bytes per state
// element. The states come from the optimizer's descriptor (sgd momentum 1, adam 2, lion 1).
double fused_bytes_per_parameter(const std::string& optimizer, const OptimizerOptions& options) {
  const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(optimizer);
  double s = static_cast<double>(dtype_size(options.state_dtype()));
  double states = static_cast<double>(descriptor->state_names(options).size());
  double gradient_pass = options.monitor().on_nonfinite() == optim::NonFiniteAction::warn ? 0 : 4;
  if (descriptor->per_tensor_norms)  // lamb: phase 1 g, p r, states r+w; phase 2 p r+w, states r
    return gradient_pass + (4 + 4 + 2 * states * s) + (8 + states * s);
  return gradient_pass + (4 + 8 + 2 * states * s);  // g; then g, p r+w, each state r+w
}

// A variant's optimizer over the problem's parameters, with non-zero gradients.
struct FusedStep {
  FusedStep(const Problem& problem, const Variant& variant) {
    for (size_t i = 0; i < problem.shapes.size(); ++i) {
      Tensor t = Tensor::empty(problem.shapes[i]);
      fill_random(t.data<float>(), t.numel(), 100 + i, -1, 1);
      t.set_requires_grad(true);
      parameters.emplace_back(std::string("p").append(std::to_string(i)), t);
    }
    optimizer = optim::make_optimizer(variant.optimizer, parameters, variant.options);
    for (size_t i = 0; i < parameters.size(); ++i) {
      Tensor grad = parameters[i].second.grad();
      fill_random(grad.data<float>(), grad.numel(), 1000 + i, -1e-2f, 1e-2f);
    }
  }
  optim::NamedParameters parameters;
  std::unique_ptr<optim::Optimizer> optimizer;
};

double fused_step_seconds(const Problem& problem, const Variant& variant, int warmup, int repeats) {
  FusedStep step(problem, variant);
  return median_seconds([&] { step.optimizer->step(); }, warmup, repeats);
}

// --serve: steps on request, for a driver that alternates them with another framework's steps in one call
// (tools/bench_optim_torch.py --paired): a shared machine's bandwidth drifts by tens of percent within
// minutes, so only steps taken side by side compare. Prints "ready", then reads one request a line and
// answers each with one line: a variant's label (its first request builds it and answers "built"; later
// ones take one step and answer its milliseconds), "stream copy" (one streaming copy of the problem's
// size, milliseconds), "drop" (frees every built variant; answers "dropped"); "quit" or the end of input
// ends it. An unknown request is answered "error: ..." and ends it with exit code 2.
int serve(const Problem& problem, const std::vector<Variant>& variants) {
  for (size_t i = 0; i < variants.size(); ++i)
    for (size_t j = i + 1; j < variants.size(); ++j)
      OPSNN_CHECK_AS(ConfigError, variants[i].label != variants[j].label, "--serve: the label '", variants[i].label,
                     "' names more than one variant: choose one state dtype with --states");
  std::map<std::string, std::unique_ptr<FusedStep>> built;
  std::unique_ptr<StreamCopy> copy;
  auto milliseconds = [](auto&& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  std::printf("ready\n");
  std::fflush(stdout);
  std::string request;
  while (std::getline(std::cin, request) && request != "quit") {
    if (request == "drop") {
      built.clear();
      copy.reset();
      std::printf("dropped\n");
    } else if (request == "stream copy") {
      if (!copy) copy = std::make_unique<StreamCopy>(problem.total());
      std::printf("%.6f\n", milliseconds([&] { copy->run(); }));
    } else {
      auto variant =
          std::find_if(variants.begin(), variants.end(), [&](const Variant& v) { return v.label == request; });
      if (variant == variants.end()) {
        std::string known;
        for (const Variant& v : variants) known += (known.empty() ? "" : ", ") + v.label;
        std::printf("error: unknown request '%s' (variants: %s; or stream copy, drop, quit)\n", request.c_str(),
                    known.c_str());
        return 2;
      }
      std::unique_ptr<FusedStep>& step = built[request];
      if (!step) {
        step = std::make_unique<FusedStep>(problem, *variant);
        std::printf("built\n");
      } else {
        std::printf("%.6f\n", milliseconds([&] { step->optimizer->step(); }));
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

namespace {

// The variants --variants (optimizer names) and --states (state dtypes) keep, in their order; ConfigError
// naming the option for a name no variant has.
std::vector<Variant> chosen_variants(std::vector<Variant> variants, const std::vector<std::string>& args) {
  auto keep_matching = [&](const std::string& key, auto&& name_of) {
    const std::string wanted = option(args, key, "");
    if (wanted.empty()) return;
    std::vector<std::string> names = split(wanted, key);
    std::vector<std::string> known;
    for (const Variant& variant : variants)
      if (std::find(known.begin(), known.end(), name_of(variant)) == known.end()) known.push_back(name_of(variant));
    for (const std::string& name : names)
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        throw ConfigError(key + ": unknown name '" + name + "' (known: " + list + ")");
      }
    std::erase_if(variants,
                  [&](const Variant& v) { return std::find(names.begin(), names.end(), name_of(v)) == names.end(); });
  };
  keep_matching("--variants", [](const Variant& v) { return v.optimizer; });
  keep_matching("--states", [](const Variant& v) { return std::string(dtype_name(v.options.state_dtype())); });
  return variants;
}

int run(const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: opsnn-bench optim [--device cpu|cuda] [--sizes 1e6,1e7,1e8,resnet50,1e9x50] "
          "[--repeats 10] [--threads N] [--json FILE] [--variants adamw,lamb,...] [--states f32,bf16,f16 (cpu)] "
          "[--serve (cpu)]\n"
          "  --variants: cuda: variant labels; cpu: optimizer names (sgd, adam, adamw, lamb, lion), each with its "
          "single-pass row where it has one\n");
      return 0;
    }
  check_options(args, {"--device", "--sizes", "--repeats", "--threads", "--json", "--variants", "--states"},
                {"--serve"});
  std::string device = option(args, "--device", "cpu");
  if (device == "cuda") {  // tools/bench/cuda/, built with the CUDA backend
    for (const Command& command : commands())
      if (command.name == "optim-cuda") return command.run(args);
    std::fprintf(stderr, "opsnn-bench optim: --device cuda needs a build with the CUDA backend\n");
    return 2;
  }
  OPSNN_CHECK_AS(ConfigError, device == "cpu", "--device: expected cpu or cuda, got '", device, "'");
  const std::string json_path = option(args, "--json", "");
  std::vector<Problem> problems;
  for (const std::string& size : split(option(args, "--sizes", "1e6,1e7,1e8,resnet50"), "--sizes"))
    problems.push_back(make_problem(size));
  int repeats = parse_positive(args, "--repeats", 10);
  int threads = parse_positive(args, "--threads", omp_get_max_threads());
  omp_set_num_threads(threads);
  const int warmup = 2;

  std::vector<Variant> variants;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    std::string suffix = std::string(dtype_name(dtype));
    variants.push_back({"sgd", OptimizerOptions(0.1).momentum(0.95).state_dtype(dtype), "sgd momentum"});
    variants.push_back({"adam", OptimizerOptions(1e-3).betas({0.95, 0.999}).state_dtype(dtype), "adam"});
    variants.push_back({"adamw", OptimizerOptions(1e-3).betas({0.95, 0.999}).state_dtype(dtype), "adamw"});
    variants.push_back({"lamb", OptimizerOptions(1e-3).betas({0.95, 0.999}).state_dtype(dtype), "lamb"});
    variants.push_back({"lion", OptimizerOptions(1e-4).state_dtype(dtype), "lion"});
  }
  // Single-pass steps: with monitor.on_nonfinite = warn (no clipping, no loss scaling) nothing waits for the
  // gradient norm, so it is summed in the update pass (PyTorch's fused steps check nothing).
  const optim::MonitorOptions warn = optim::MonitorOptions().on_nonfinite(optim::NonFiniteAction::warn);
  variants.push_back({"sgd", OptimizerOptions(0.1).momentum(0.95).monitor(warn), "sgd mom 1p"});
  variants.push_back({"adam", OptimizerOptions(1e-3).betas({0.95, 0.999}).monitor(warn), "adam 1p"});
  variants.push_back({"adamw", OptimizerOptions(1e-3).betas({0.95, 0.999}).monitor(warn), "adamw 1p"});
  variants = chosen_variants(std::move(variants), args);
  if (std::find(args.begin(), args.end(), "--serve") != args.end()) {
    OPSNN_CHECK_AS(ConfigError, problems.size() == 1, "--serve takes one problem in --sizes, got ", problems.size());
    // The driver times each served step itself: options about this program's own timing would be ignored.
    for (const char* timing : {"--repeats", "--json"})
      OPSNN_CHECK_AS(ConfigError, option(args, timing, "").empty(), "--serve times nothing itself: ", timing,
                     " does not apply (the driver times each step)");
    return serve(problems[0], variants);
  }
  // The unfused chain is Adam's: measured only when the f32 Adam row it is compared with runs.
  const bool with_unfused = std::any_of(variants.begin(), variants.end(), [](const Variant& v) {
    return v.label == "adam" && v.options.state_dtype() == DType::f32;
  });
  const char* kernels = opsnn::cpu::cpu_kernels().name;
  std::printf("opsnn-bench optim --device cpu: %d threads, CPU kernels %s, median of %d runs after %d warm-up runs\n",
              threads, kernels, repeats, warmup);
  std::printf(
      "bandwidth = bytes the variant must move / time; %% triad = fused bandwidth / triad bandwidth; 1p = single pass "
      "(monitor.on_nonfinite = warn: no gradient pass first); stream copy: "
      "8 B/param with streaming stores (same size, same run)\n\n");
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-10s %-13s %-5s %11s %9s %8s %13s %9s\n", "params", "optimizer", "state", "fused ms", "GB/s", "% triad",
              "unfused ms", "speedup");
  double acceptance_speedup = 0.0, acceptance_fraction = 0.0;
  for (const Problem& problem : problems) {
    int64_t n = problem.total();
    double triad = triad_seconds(n, warmup, repeats);
    double triad_bandwidth = 12.0 * static_cast<double>(n) / triad / 1e9;
    double unfused = 0.0;
    if (with_unfused) {
      UnfusedAdam chain(n);
      unfused = median_seconds([&] { chain.step(); }, warmup, repeats);
    }
    const double stream = stream_copy_seconds(n, warmup, repeats);
    const double stream_bandwidth = 8.0 * static_cast<double>(n) / stream / 1e9;
    std::printf("%-10s %-13s %-5s %11.3f %9.1f %8s\n", problem.label.c_str(), "triad", "-", triad * 1e3,
                triad_bandwidth, "100%");
    std::printf("%-10s %-13s %-5s %11.3f %9.1f %7.0f%%\n", problem.label.c_str(), "stream copy", "-", stream * 1e3,
                stream_bandwidth, 100.0 * stream_bandwidth / triad_bandwidth);
    rows.push_back({{"problem", problem.label}, {"variant", "triad"}, {"ms", triad * 1e3}, {"gbps", triad_bandwidth}});
    rows.push_back(
        {{"problem", problem.label}, {"variant", "stream copy"}, {"ms", stream * 1e3}, {"gbps", stream_bandwidth}});
    if (with_unfused)
      std::printf("%-10s %-13s %-5s %11.3f %9.1f %7.0f%%\n", problem.label.c_str(), "unfused adam", "f32",
                  unfused * 1e3, UnfusedAdam::kBytesPerParameter * static_cast<double>(n) / unfused / 1e9,
                  100.0 * UnfusedAdam::kBytesPerParameter * static_cast<double>(n) / unfused / 1e9 / triad_bandwidth);
    for (const Variant& variant : variants) {
      double seconds = fused_step_seconds(problem, variant, warmup, repeats);
      double bandwidth =
          fused_bytes_per_parameter(variant.optimizer, variant.options) * static_cast<double>(n) / seconds / 1e9;
      bool compare = variant.label == "adam" && variant.options.state_dtype() == DType::f32;  // the chain's rule
      std::printf("%-10s %-13s %-5s %11.3f %9.1f %7.0f%%", problem.label.c_str(), variant.label.c_str(),
                  std::string(dtype_name(variant.options.state_dtype())).c_str(), seconds * 1e3, bandwidth,
                  100.0 * bandwidth / triad_bandwidth);
      if (compare) std::printf(" %13.3f %8.2fx", unfused * 1e3, unfused / seconds);
      std::printf("\n");
      rows.push_back({{"problem", problem.label},
                      {"variant", variant.label},
                      {"state", std::string(dtype_name(variant.options.state_dtype()))},
                      {"ms", seconds * 1e3},
                      {"gbps", bandwidth},
                      {"stream_fraction", bandwidth / stream_bandwidth}});
      std::fflush(stdout);
      if (compare && problem.label == "1e8") {
        acceptance_speedup = unfused / seconds;
        acceptance_fraction = bandwidth / triad_bandwidth;
      }
    }
    std::printf("\n");
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    OPSNN_CHECK_AS(DataError, out.good(), "--json: cannot write '", json_path, "'");
    out << nlohmann::json{{"device", "cpu"}, {"threads", threads}, {"cpu_kernels", kernels}, {"rows", rows}}.dump(1)
        << "\n";
  }
  if (acceptance_speedup > 0.0)
    std::printf(
        "issue 3 acceptance, adam f32 on 1e8 parameters: fused %.2fx faster than the unfused chain "
        "(needs >= 1.8x: %s), %.0f%% of the triad bandwidth (needs >= 60%%: %s)\n",
        acceptance_speedup, acceptance_speedup >= 1.8 ? "met" : "NOT met", 100.0 * acceptance_fraction,
        acceptance_fraction >= 0.6 ? "met" : "NOT met");
  return 0;
}

Registration registration{{"optim", "fused optimizer step vs unfused chain vs triad (--device cpu)", run}};

}  // namespace
}  // namespace opsnn::bench
