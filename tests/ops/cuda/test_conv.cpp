// Tests of the convolution lowerings in src/ops/cuda/conv_lowerings.cpp against the CPU twin on the same values,
// forward, input gradient and weight gradient, with each lowering forced, off and measured:
//   - the im2col-GEMM lowering of few-channel inputs (stem-like 7x7 stride 2 pad 3 convolutions with 1, 3
//     or 5 channels), in strict f32, f32 with tf32 math, bf16 and f16, also with a column budget so small
//     that the batch runs image by image (the chunked weight-gradient sum);
//   - the same lowering of 1x1 stride-1 convolutions (the input used as its own column matrix when C is
//     a multiple of 8, an im2col copy with padding rows otherwise), also on 37 images (the per-image
//     weight-gradient partials summed in groups of 16 and a tail);
//   - the subsampled lowering of strided 1x1 convolutions (odd sizes, unequal strides);
//   - shapes no lowering applies to never try one;
//   - both GEMM lowerings captured in a CUDA graph replay the eager bits.
// The cached choice says what ran. Compiled in CUDA builds only (it reads the CUDA backend's algorithm
// cache); tagged [cuda]: skipped without a GPU.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/cuda/conv_algorithms.h"
#include "ops/op_test_helpers.h"
#include "opsnn/core/error.h"
#include "opsnn/core/graph.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "support/bit_patterns.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA conv lowering tests"); }

// Puts the process-wide math, lowering and column-budget settings back, whatever a test set.
struct SettingsReset {
  size_t budget = ops::conv_column_budget();
  ~SettingsReset() {
    ops::set_fp32_math(ops::Fp32Math::strict);
    ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::measured);
    ops::set_conv_column_budget(budget);
    ops::set_conv_deterministic(true);
  }
};

// The data of one convolution: values exactly representable in the dtype under test, so the CPU (f32)
// and the GPU see the same operands and only the GPU's rounding differs.
struct ConvCase {
  Tensor input, weight, upstream;  // f32 on the CPU
  ops::Conv2dGeometry geometry;
};

ConvCase conv_case(const Shape& input, const Shape& weight, const ops::Conv2dGeometry& geometry, DType dtype,
                   Generator& generator) {
  auto rounded = [&](const Shape& shape, double bound) {
    return Tensor::uniform(shape, -bound, bound, generator, DType::f32).to(dtype).to(DType::f32);
  };
  ConvCase c;
  c.input = rounded(input, 1.0);
  c.weight = rounded(weight, 0.3);
  c.geometry = geometry;
  const int64_t out_h = (input[2] + 2 * geometry.pad_h - weight[2]) / geometry.stride_h + 1;
  const int64_t out_w = (input[3] + 2 * geometry.pad_w - weight[3]) / geometry.stride_w + 1;
  c.upstream = rounded({input[0], weight[0], out_h, out_w}, 1.0);
  return c;
}

ops::Conv2dGeometry geometry_of(int64_t stride_h, int64_t stride_w, int64_t pad) {
  ops::Conv2dGeometry g;
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.pad_h = g.pad_w = pad;
  return g;
}

struct ConvResults {
  Tensor out, grad_input, grad_weight;  // f32 on the CPU
};

ConvResults run_conv(const ConvCase& c, DType dtype, Device device) {
  // detach: fresh leaves, so a CPU f32 run (where to() returns the case's own tensors) leaves them untouched.
  Tensor input = c.input.to(dtype).to(device).detach(), weight = c.weight.to(dtype).to(device).detach();
  input.set_requires_grad(true);
  weight.set_requires_grad(true);
  const Tensor out = ops::conv2d(input, weight, Tensor(), c.geometry);
  out.backward(c.upstream.to(dtype).to(device));
  REQUIRE(input.grad().dtype() == dtype);
  REQUIRE(weight.grad().dtype() == dtype);
  return {out.to(kCPU).to(DType::f32), input.grad().to(kCPU).to(DType::f32), weight.grad().to(kCPU).to(DType::f32)};
}

void require_close_to(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  REQUIRE(actual.shape() == expected.shape());
  const double error = scaled_error(actual, expected);
  INFO(what << ": max scaled error " << error << ", tolerance " << tolerance);
  REQUIRE(error <= tolerance);
}

// Forward, input gradient and weight gradient within `tolerance` of `expected`.
void require_results_close(const ConvResults& actual, const ConvResults& expected, double tolerance,
                           const std::string& name) {
  require_close_to(actual.out, expected.out, tolerance, name + " forward");
  require_close_to(actual.grad_input, expected.grad_input, tolerance, name + " grad input");
  require_close_to(actual.grad_weight, expected.grad_weight, tolerance, name + " grad weight");
}

struct Precision {
  const char* name;
  DType dtype;
  ops::Fp32Math math;
  double tolerance;  // as the other strict / tf32 / mixed-precision conv tests
};
const Precision kPrecisions[] = {{"f32", DType::f32, ops::Fp32Math::strict, 1e-4},
                                 {"tf32", DType::f32, ops::Fp32Math::tf32, 5e-3},
                                 {"bf16", DType::bf16, ops::Fp32Math::strict, 2e-2},
                                 {"f16", DType::f16, ops::Fp32Math::strict, 5e-3}};

const std::pair<const char*, ops::ConvLoweringPolicy> kPolicies[] = {{"always", ops::ConvLoweringPolicy::always},
                                                                     {"never", ops::ConvLoweringPolicy::never},
                                                                     {"measured", ops::ConvLoweringPolicy::measured}};

const ops::ConvDirection kDirections[] = {ops::ConvDirection::forward, ops::ConvDirection::backward_input,
                                          ops::ConvDirection::backward_weight};

// Runs c under every policy in precision p and checks the results and the cached choices, where
// `lowering` is what applies to the shape.
void check_policies(const ConvCase& c, const Precision& p, ops::ConvLowering lowering, const std::string& label) {
  ops::set_fp32_math(p.math);
  REQUIRE(ops::applicable_lowering(c.input.shape(), c.weight.shape(), c.geometry, p.dtype) == lowering);
  const ConvResults expected = run_conv(c, DType::f32, kCPU);
  for (const auto& [policy_name, policy] : kPolicies) {
    ops::set_conv_lowering_policy(policy);
    const std::string name = label + " " + p.name + " lowering " + policy_name;
    const ConvResults actual = run_conv(c, p.dtype, kGpu);
    require_results_close(actual, expected, p.tolerance, name);
    for (ops::ConvDirection direction : kDirections) {
      const auto choice =
          ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry, p.dtype);
      REQUIRE(choice.has_value());
      INFO(name << ", direction " << static_cast<int>(direction) << ": " << ops::describe(*choice));
      if (policy == ops::ConvLoweringPolicy::always) {
        CHECK(choice->lowering == lowering);
        CHECK(choice->cudnn_ms < 0.0f);  // cuDNN's own search skipped
        CHECK(choice->lowered_ms >= 0.0f);
      } else if (policy == ops::ConvLoweringPolicy::never) {
        CHECK(choice->lowering == ops::ConvLowering::cudnn);
        CHECK(choice->lowered_ms < 0.0f);
      } else {  // measured: both timed, the faster runs (or the lowering, where cuDNN had nothing deterministic)
        CHECK(choice->cudnn_ms >= 0.0f);
        CHECK(choice->lowered_ms >= 0.0f);
        CHECK((choice->lowering == lowering) ==
              (choice->lowered_ms < choice->cudnn_ms || (ops::conv_deterministic() && !choice->cudnn_deterministic)));
      }
      if (choice->lowering == ops::ConvLowering::gemm) CHECK(choice->deterministic);
    }
  }
}

}  // namespace

TEST_CASE("CUDA stem-like conv2d through the im2col-GEMM lowering matches the CPU, forward and both gradients",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(41);
  // 19x22 planes give 10x11 outputs (single-value column stores); 16x32 ones 8x16 (16-byte stores: the
  // widest of the 7x7/2 kernel's row spans).
  for (const Precision& precision : kPrecisions)
    for (const Shape& plane : {Shape{19, 22}, Shape{16, 32}})
      for (int64_t channels : {1, 3, 5}) {
        const ConvCase c = conv_case({3, channels, plane[0], plane[1]}, {16, channels, 7, 7}, geometry_of(2, 2, 3),
                                     precision.dtype, generator);
        check_policies(c, precision, ops::ConvLowering::gemm,
                       "stem C=" + std::to_string(channels) + " " + shape_str(plane));
      }
}

TEST_CASE("CUDA 1x1 stride-1 conv2d through the GEMM lowering matches the CPU, forward and both gradients",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(45);
  struct Pointwise {
    const char* name;
    Shape input, weight;
  };
  // C = 16: the input is the column matrix; C = 12: padded rows for bf16/f16/strict f32 (and for tf32,
  // whose granule 4 divides 12, through the 1x1 rule); odd planes (63 and 35 positions). 37 images: the
  // weight gradient sums 37 per-image partials, two groups of 16 loaded together and 5 one by one.
  const Pointwise cases[] = {{"1x1 C=16", {3, 16, 9, 7}, {24, 16, 1, 1}},
                             {"1x1 C=12", {2, 12, 5, 7}, {8, 12, 1, 1}},
                             {"1x1 C=16 37 images", {37, 16, 3, 2}, {8, 16, 1, 1}}};
  for (const Precision& precision : kPrecisions)
    for (const Pointwise& p : cases) {
      const ConvCase c = conv_case(p.input, p.weight, geometry_of(1, 1, 0), precision.dtype, generator);
      check_policies(c, precision, ops::ConvLowering::gemm, p.name);
    }
}

TEST_CASE("CUDA im2col-GEMM lowering gives the same results when the batch runs in chunks of one image",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(44);
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::always);
  for (const Precision& precision : kPrecisions) {
    ops::set_fp32_math(precision.math);
    // 7 images, 2 channels, 5x3 kernel, stride (1, 2), pad 1: rows 30 (padded to 32).
    const ConvCase c = conv_case({7, 2, 11, 13}, {6, 2, 5, 3}, geometry_of(1, 2, 1), precision.dtype, generator);
    const ConvResults expected = run_conv(c, DType::f32, kCPU);
    ops::set_conv_column_budget(1);  // one image per chunk
    const ConvResults chunked = run_conv(c, precision.dtype, kGpu);
    const std::string name = std::string("chunked gemm lowering ") + precision.name;
    require_results_close(chunked, expected, precision.tolerance, name);
    ops::set_conv_column_budget(size_t{512} << 20);
    const ConvResults whole = run_conv(c, precision.dtype, kGpu);
    // cuBLAS may pick other kernels for another batch count, so the two agree to rounding.
    require_results_close(whole, chunked, precision.tolerance, name + " vs unchunked");
  }
}

TEST_CASE("CUDA strided 1x1 conv2d through the subsampled lowering matches the CPU, forward and both gradients",
          "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  Generator generator(43);
  struct Strided {
    const char* name;
    Shape input, weight;
    int64_t stride_h, stride_w;
  };
  // Odd sizes leave the last row / column unsampled or sampled depending on the stride.
  const Strided cases[] = {{"1x1/2 odd", {2, 16, 9, 11}, {24, 16, 1, 1}, 2, 2},
                           {"1x1/(3,2)", {3, 8, 10, 7}, {8, 8, 1, 1}, 3, 2},
                           {"1x1/2 even", {2, 32, 8, 8}, {16, 32, 1, 1}, 2, 2}};
  for (const Precision& precision : kPrecisions)
    for (const Strided& s : cases) {
      const ConvCase c =
          conv_case(s.input, s.weight, geometry_of(s.stride_h, s.stride_w, 0), precision.dtype, generator);
      check_policies(c, precision, ops::ConvLowering::subsampled, s.name);
    }
}

TEST_CASE("CUDA conv2d tries no lowering where none applies", "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::always);
  Generator generator(42);
  struct Plain {
    const char* name;
    Precision precision;
    Shape input, weight;
    ops::Conv2dGeometry geometry;
  };
  const Plain cases[] = {{"tf32 C=4 7x7/2", kPrecisions[1], {2, 4, 19, 22}, {16, 4, 7, 7}, geometry_of(2, 2, 3)},
                         {"bf16 C=8 7x7/2", kPrecisions[2], {2, 8, 19, 22}, {16, 8, 7, 7}, geometry_of(2, 2, 3)},
                         {"f32 C=16 1x1/2 padded", kPrecisions[0], {2, 16, 9, 9}, {8, 16, 1, 1}, geometry_of(2, 2, 1)},
                         {"bf16 C=16 1x1/1 padded", kPrecisions[2], {2, 16, 9, 9}, {8, 16, 1, 1}, geometry_of(1, 1, 1)},
                         {"f16 C=16 3x3/1", kPrecisions[3], {2, 16, 9, 9}, {8, 16, 3, 3}, geometry_of(1, 1, 1)}};
  for (const Plain& p : cases) {
    ops::set_fp32_math(p.precision.math);
    const ConvCase c = conv_case(p.input, p.weight, p.geometry, p.precision.dtype, generator);
    REQUIRE(ops::applicable_lowering(c.input.shape(), c.weight.shape(), c.geometry, p.precision.dtype) ==
            ops::ConvLowering::cudnn);
    const ConvResults expected = run_conv(c, DType::f32, kCPU);
    const ConvResults actual = run_conv(c, p.precision.dtype, kGpu);
    const std::string name = std::string(p.name) + " lowering always";
    require_results_close(actual, expected, p.precision.tolerance, name);
    for (ops::ConvDirection direction : kDirections) {
      const auto choice =
          ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry, p.precision.dtype);
      REQUIRE(choice.has_value());
      INFO(name << ", direction " << static_cast<int>(direction) << ": " << ops::describe(*choice));
      CHECK(choice->lowering == ops::ConvLowering::cudnn);
      CHECK(choice->lowered_ms < 0.0f);  // never tried
    }
  }
}

TEST_CASE("CUDA conv2d chooses deterministic cuDNN algorithms by default and repeats bit for bit", "[cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  REQUIRE(ops::conv_deterministic());
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::never);  // cuDNN's own choice in every direction
  Generator generator(7);
  // Large reductions for the weight gradient (N*H*W = 25088 per filter tap), where cuDNN's fastest
  // algorithms may accumulate with atomics.
  const ConvCase c = conv_case({32, 64, 28, 28}, {64, 64, 3, 3}, geometry_of(1, 1, 1), DType::bf16, generator);
  auto bits = [](const Tensor& t) { return t.to_vector<float>(); };
  for (const Precision& p : {kPrecisions[0], kPrecisions[2], kPrecisions[3]}) {
    INFO(p.name);
    ops::set_fp32_math(p.math);
    const ConvResults first = run_conv(c, p.dtype, kGpu);
    for (int repeat = 0; repeat < 3; ++repeat) {
      const ConvResults again = run_conv(c, p.dtype, kGpu);
      CHECK(bits(again.out) == bits(first.out));
      CHECK(bits(again.grad_input) == bits(first.grad_input));
      CHECK(bits(again.grad_weight) == bits(first.grad_weight));
    }
  }
  // The setting is part of the algorithm cache key: switching it searches again, and any algorithm still
  // computes the same convolution.
  ops::set_fp32_math(ops::Fp32Math::strict);
  ops::set_conv_deterministic(false);
  for (ops::ConvDirection direction : kDirections)
    CHECK_FALSE(ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry, DType::f32)
                    .has_value());
  const ConvResults expected = run_conv(c, DType::f32, kCPU);
  require_results_close(run_conv(c, DType::f32, kGpu), expected, kPrecisions[0].tolerance, "f32, any algorithm");
  for (ops::ConvDirection direction : kDirections)
    CHECK(ops::cached_conv_algorithm(direction, kGpu, c.input.shape(), c.weight.shape(), c.geometry, DType::f32)
              .has_value());
}

TEST_CASE("CUDA conv2d choices saved as JSON are used where they are loaded, entries that cannot run are refused",
          "[conv][cuda][ops]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  using Json = nlohmann::json;
  Generator generator(23);
  const ConvCase saved_case = conv_case({3, 16, 11, 11}, {24, 16, 3, 3}, geometry_of(1, 1, 1), DType::f32, generator);
  const ConvCase one_by_one = conv_case({3, 16, 7, 7}, {8, 16, 1, 1}, geometry_of(1, 1, 0), DType::f32, generator);
  REQUIRE(ops::applicable_lowering(one_by_one.input.shape(), one_by_one.weight.shape(), one_by_one.geometry,
                                   DType::f32) == ops::ConvLowering::gemm);
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::always);  // a lowering entry too
  run_conv(one_by_one, DType::f32, kGpu);
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::measured);
  run_conv(saved_case, DType::f32, kGpu);

  // This process's entries for the two shapes, marked with a cuDNN time no search gives, loaded into an
  // empty cache (as a new process would): where they show up, they came from the file.
  const Json saved = Json::parse(ops::save_conv_algorithms());
  Json marked = Json::array();
  for (const ConvCase* c : {&saved_case, &one_by_one})
    for (Json entry : saved.at("entries"))
      if (entry.at("input") == Json(c->input.shape()) && entry.at("weight") == Json(c->weight.shape())) {
        entry["cudnn_ms"] = 123.5;
        marked.push_back(entry);
      }
  REQUIRE(marked.size() == 6);
  Json document = saved;
  document["entries"] = marked;
  ops::clear_conv_algorithm_cache();
  const ops::ConvAlgorithmLoad load = ops::load_conv_algorithms(document.dump(), "marked.json");
  CHECK(load.applied == 6);
  CHECK(load.skipped == 0);

  // Each shape under the policy its entries were recorded with: the loaded choices are in the cache
  // before anything runs, they compute the convolution, and no search replaces them.
  const std::pair<const ConvCase*, ops::ConvLoweringPolicy> recorded[] = {
      {&saved_case, ops::ConvLoweringPolicy::measured}, {&one_by_one, ops::ConvLoweringPolicy::always}};
  for (const auto& [c, policy] : recorded) {
    ops::set_conv_lowering_policy(policy);
    auto check_loaded = [&](const char* when) {
      for (ops::ConvDirection direction : kDirections) {
        INFO(when << ", direction " << static_cast<int>(direction));
        const auto choice =
            ops::cached_conv_algorithm(direction, kGpu, c->input.shape(), c->weight.shape(), c->geometry, DType::f32);
        REQUIRE(choice.has_value());
        CHECK(choice->cudnn_ms == 123.5f);  // the file's, not a search's
      }
    };
    check_loaded("before running");
    require_results_close(run_conv(*c, DType::f32, kGpu), run_conv(*c, DType::f32, kCPU), kPrecisions[0].tolerance,
                          "loaded choices");
    check_loaded("after running");
  }
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::measured);
  const ops::ConvAlgorithmLoad again = ops::load_conv_algorithms(document.dump(), "marked.json");
  CHECK(again.applied == 0);  // decided already: kept
  CHECK(again.skipped == 6);

  // Entries for this GPU that could not run are refused, naming the field.
  struct Bad {
    const char* key;
    Json value;
    const char* expected;
  };
  const Bad bad[] = {{"algorithm", 99, "field \"entries[0].algorithm\": 99 is not a cuDNN algorithm"},
                     {"math_type", 9, "field \"entries[0].math_type\": 9 is not a cudnnMathType_t"},
                     {"lowering", "subsampled", "field \"entries[0].lowering\": this lowering does not apply"},
                     {"workspace_bytes", Json(uint64_t{1} << 60), "field \"entries[0].workspace_bytes\": "}};
  for (const Bad& b : bad) {
    INFO(b.key);
    Json entry = marked.at(0);
    REQUIRE(entry.at("lowering") == "cudnn");
    entry["input"][0] = 7;
    entry[b.key] = b.value;
    Json one = saved;
    one["entries"] = Json::array({entry});
    try {
      ops::load_conv_algorithms(one.dump(), "bad.json");
      FAIL("accepted an entry with a bad " << b.key);
    } catch (const DataError& error) {
      CHECK_THAT(std::string(error.what()), Catch::Matchers::StartsWith("bad.json: ") && Catch::Contains(b.expected));
    }
  }
}

// The lowerings' own copies (the padded weight, the columns) must go to the current stream: a capture
// refuses a call on the legacy stream, so a missed one fails here instead of escaping the graph.
TEST_CASE("CUDA conv2d lowered to GEMMs replays in a captured graph bit for bit", "[cuda][ops][graph]") {
  if (gpu_missing()) return;
  SettingsReset reset;
  ops::set_conv_lowering_policy(ops::ConvLoweringPolicy::always);
  Generator generator(53);
  const std::pair<ConvCase, const char*> cases[] = {
      {conv_case({2, 3, 15, 13}, {8, 3, 7, 7}, geometry_of(2, 2, 3), DType::bf16, generator), "stem"},
      {conv_case({2, 16, 9, 9}, {8, 16, 1, 1}, geometry_of(1, 1, 0), DType::bf16, generator), "1x1"}};
  for (const auto& [c, label] : cases) {
    INFO(label);
    REQUIRE(ops::applicable_lowering(c.input.shape(), c.weight.shape(), c.geometry, DType::bf16) ==
            ops::ConvLowering::gemm);
    Tensor input = c.input.to(DType::bf16).to(kGpu).detach(), weight = c.weight.to(DType::bf16).to(kGpu).detach();
    const Tensor upstream = c.upstream.to(DType::bf16).to(kGpu);
    input.set_requires_grad(true);
    weight.set_requires_grad(true);
    input.set_grad(Tensor::zeros(input.shape(), DType::bf16, kGpu));
    weight.set_grad(Tensor::zeros(weight.shape(), DType::bf16, kGpu));
    auto step = [&] {  // the gradients accumulate into the zeroed buffers, which outlive a capture
      input.grad().zero_();
      weight.grad().zero_();
      const Tensor out = ops::conv2d(input, weight, Tensor(), c.geometry);
      out.backward(upstream);
      return out;
    };
    const Tensor eager_out = step().clone(), eager_grad_input = input.grad().clone(),
                 eager_grad_weight = weight.grad().clone();
    Tensor out = Tensor::zeros(eager_out.shape(), DType::bf16, kGpu),
           grad_input = Tensor::zeros(input.shape(), DType::bf16, kGpu),
           grad_weight = Tensor::zeros(weight.shape(), DType::bf16, kGpu);
    std::unique_ptr<CapturedGraph> graph = capture_graph(kGpu, [&] {
      out.copy_(step());
      grad_input.copy_(input.grad());
      grad_weight.copy_(weight.grad());
    });
    graph->replay();
    graph->synchronize();
    require_same_bits(out, eager_out, std::string(label) + " forward");
    require_same_bits(grad_input, eager_grad_input, std::string(label) + " grad input");
    require_same_bits(grad_weight, eager_grad_weight, std::string(label) + " grad weight");
  }
}
