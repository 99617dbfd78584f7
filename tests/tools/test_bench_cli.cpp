// opsnn-bench's command line: bad input is one clear message and a non-zero exit code (2 for usage
// errors), decided before anything is measured. Runs the built program.
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "opsnn/core/storage.h"
#include "support/catch.h"
#include "support/image_files.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

#ifdef OPSNN_BENCH_EXE  // built with the tools (OPSNN_BUILD_TOOLS)

using opsnn::testing::Outcome;

namespace {

Outcome bench(const std::vector<std::string>& arguments) {
  opsnn::testing::TemporaryFolder folder("opsnn-bench-cli-test");
  return opsnn::testing::run_program(OPSNN_BENCH_EXE, arguments, folder.path);
}

void require_usage_error(const std::vector<std::string>& arguments, const std::string& message) {
  Outcome outcome = bench(arguments);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 2);
  REQUIRE(outcome.output.find(message) != std::string::npos);
}

}  // namespace

TEST_CASE("opsnn-bench: --key=value means what --key value does", "[cli][bench]") {
  // Both spellings pass the option check; the value must then be read, not the default used.
  require_usage_error({"optim", "--sizes=1e3", "--repeats=0"}, "--repeats must be a positive integer, got '0'");
  require_usage_error({"optim", "--sizes=nonsense", "--repeats", "1"}, "nonsense");
  opsnn::testing::TemporaryFolder folder("opsnn-bench-cli-equals");
  const std::string json = (std::filesystem::path(folder.path) / "optim.json").string();
  Outcome outcome = opsnn::testing::run_program(
      OPSNN_BENCH_EXE, {"optim", "--sizes=1e3", "--repeats=1", "--variants=sgd", "--states=f32", "--json=" + json},
      folder.path);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  CHECK(outcome.output.find("median of 1 runs") != std::string::npos);
  CHECK(outcome.output.find("1e3") != std::string::npos);
  CHECK(outcome.output.find("1e6") == std::string::npos);
  CHECK(std::filesystem::is_regular_file(json));
}

TEST_CASE("opsnn-bench: usage errors exit 2 with a message naming the option", "[cli][bench]") {
  require_usage_error({}, "usage: opsnn-bench");
  require_usage_error({"nonsense"}, "unknown command 'nonsense'");
  require_usage_error({"optim", "--sizes", "many"}, "--sizes: 'many' is neither a number of parameters");
  require_usage_error({"optim", "--sizes", "10"}, "must be in [1e3, 4e9]");
  require_usage_error({"optim", "--sizes", "1e6x0"}, "the tensor count after 'x' must be in [1, 100000]");
  require_usage_error({"optim", "--sizes", "1e6", "--repeats", "0"}, "--repeats must be a positive integer");
  require_usage_error({"optim", "--device", "tpu"}, "--device: expected cpu or cuda, got 'tpu'");
  Outcome help = bench({"optim", "--help"});
  REQUIRE(help.exit_code == 0);
  REQUIRE(help.output.find("--device cpu|cuda") != std::string::npos);
}

TEST_CASE("opsnn-bench: unknown options, partial numbers, missing values and empty lists exit 2", "[cli][bench]") {
  // Each of these used to run (or measure the defaults) and exit 0.
  require_usage_error({"optim", "--sizes", "1e3", "--bogus", "x"},
                      "unknown option '--bogus' (options: --device, --sizes");
  require_usage_error({"optim", "--sizes", "1e3", "stray"}, "unexpected argument 'stray'");
  require_usage_error({"optim", "--sizes", "1e3", "--repeats", "1e9"},
                      "--repeats must be a positive integer, got '1e9'");
  require_usage_error({"optim", "--sizes", "1e3", "--repeats", "2abc"},
                      "--repeats must be a positive integer, got '2abc'");
  require_usage_error({"optim", "--sizes", "1e3junk"}, "--sizes: '1e3junk' is neither a number of parameters");
  require_usage_error({"optim", "--sizes", "1e6x2junk"}, "the tensor count after 'x' must be in [1, 100000]");
  require_usage_error({"optim", "--sizes"}, "--sizes needs a value");
  require_usage_error({"optim", "--sizes", "--repeats", "1"}, "--sizes needs a value");
  require_usage_error({"optim", "--sizes", ""}, "--sizes needs a value, got an empty one");
  require_usage_error({"optim", "--sizes", "1e3,"}, "--sizes: empty entry in '1e3,'");
  require_usage_error({"optim", "--sizes", "1e3", "--repeats", "1", "--repeats", "2"}, "--repeats given twice");
  require_usage_error({"optim", "--sizes", "1e3", "--variants", "adamw,adamax"},
                      "--variants: unknown name 'adamax' (known: sgd, adam, adamw, lamb, lion)");
  require_usage_error({"optim", "--sizes", "1e3", "--states", "f64"}, "--states: unknown name 'f64' (known: f32, bf16");
  require_usage_error({"optim", "--sizes", "1e3", "--states", "f32,"}, "--states: empty entry in 'f32,'");
  require_usage_error({"ops", "--repeats", "2abc"}, "--repeats must be a positive integer, got '2abc'");
  require_usage_error({"ops", "--bogus", "1"}, "unknown option '--bogus' (options: --threads, --repeats)");
}

TEST_CASE("opsnn-bench optim --device cpu --json writes its rows, or says why it cannot", "[cli][bench]") {
  opsnn::testing::TemporaryFolder folder("opsnn-bench-cli-test");
  Outcome written = opsnn::testing::run_program(
      OPSNN_BENCH_EXE, {"optim", "--sizes", "1e3", "--repeats", "1", "--threads", "1", "--json", "out.json"},
      folder.path);
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  const std::string json = opsnn::testing::read_text(folder.path / "out.json");
  for (const char* expected : {"\"cpu_kernels\"", "\"stream copy\"", "\"triad\"", "\"adamw\"", "\"sgd momentum\""}) {
    INFO(expected);
    REQUIRE(json.find(expected) != std::string::npos);
  }
  // --variants and --states keep the named rows (with their single-pass twins) and drop the rest.
  Outcome filtered = opsnn::testing::run_program(OPSNN_BENCH_EXE,
                                                 {"optim", "--sizes", "1e3", "--repeats", "1", "--threads", "1",
                                                  "--variants", "sgd", "--states", "f32", "--json", "sgd.json"},
                                                 folder.path);
  INFO(filtered.output);
  REQUIRE(filtered.exit_code == 0);
  const std::string sgd_json = opsnn::testing::read_text(folder.path / "sgd.json");
  for (const char* expected : {"\"sgd momentum\"", "\"sgd mom 1p\"", "\"stream copy\""}) {
    INFO(expected);
    REQUIRE(sgd_json.find(expected) != std::string::npos);
  }
  for (const char* dropped : {"\"adam\"", "\"adamw 1p\"", "\"bf16\"", "\"lion\""}) {
    INFO(dropped);
    REQUIRE(sgd_json.find(dropped) == std::string::npos);
  }
  Outcome unwritable = opsnn::testing::run_program(
      OPSNN_BENCH_EXE, {"optim", "--sizes", "1e3", "--repeats", "1", "--json", "no/such/folder/out.json"}, folder.path);
  INFO(unwritable.output);
  REQUIRE(unwritable.exit_code >= 1);
  REQUIRE(unwritable.output.find("--json: cannot write 'no/such/folder/out.json'") != std::string::npos);
}

TEST_CASE("opsnn-bench optim --serve answers each request with one line, an unknown one with exit 2", "[cli][bench]") {
  opsnn::testing::TemporaryFolder folder("opsnn-bench-cli-test");
  const std::vector<std::string> arguments = {"optim",      "--sizes",  "1e3",      "--threads", "1",
                                              "--variants", "adam,sgd", "--states", "f32",       "--serve"};
  Outcome served = opsnn::testing::run_program(OPSNN_BENCH_EXE, arguments, folder.path,
                                               "adam 1p\nadam 1p\nstream copy\nsgd momentum\ndrop\nquit\n");
  INFO(served.output);
  REQUIRE(served.exit_code == 0);
  std::istringstream lines(served.output);
  std::vector<std::string> answers;
  for (std::string line; std::getline(lines, line);) answers.push_back(line);
  REQUIRE(answers.size() == 6);
  CHECK(answers[0] == "ready");
  CHECK(answers[1] == "built");
  CHECK(std::stod(answers[2]) > 0.0);  // one step's milliseconds
  CHECK(std::stod(answers[3]) > 0.0);  // one streaming copy's
  CHECK(answers[4] == "built");
  CHECK(answers[5] == "dropped");

  Outcome unknown = opsnn::testing::run_program(OPSNN_BENCH_EXE, arguments, folder.path, "lamb\n");
  INFO(unknown.output);
  REQUIRE(unknown.exit_code == 2);
  REQUIRE(unknown.output.find("error: unknown request 'lamb' (variants: sgd momentum, adam, sgd mom 1p, adam 1p") !=
          std::string::npos);
  // Two state dtypes give two variants one label: --serve needs one.
  require_usage_error({"optim", "--sizes", "1e3", "--variants", "adam", "--serve"},
                      "--serve: the label 'adam' names more than one variant");
  require_usage_error({"optim", "--sizes", "1e3,1e4", "--states", "f32", "--serve"},
                      "--serve takes one problem in --sizes, got 2");
  // The driver times the served steps: the program's own timing options are refused, not ignored.
  require_usage_error({"optim", "--sizes", "1e3", "--states", "f32", "--repeats", "3", "--serve"},
                      "--serve times nothing itself: --repeats does not apply");
  require_usage_error({"optim", "--sizes", "1e3", "--states", "f32", "--serve", "--json", "x.json"},
                      "--serve times nothing itself: --json does not apply");
}

TEST_CASE("opsnn-bench: GPU benchmarks without a GPU fail cleanly", "[cli][bench]") {
  if (opsnn::cuda_device_count() > 0) {
    // With a GPU they would measure; only the argument checks run here.
    require_usage_error({"optim", "--device", "cuda", "--sizes", "many"}, "--sizes");
    return;
  }
  // A CPU-only build has no CUDA benchmarks (exit 2); a CUDA build on a machine without a GPU says so (1).
  for (const std::vector<std::string>& arguments :
       {std::vector<std::string>{"optim", "--device", "cuda"}, std::vector<std::string>{"resnet50"}}) {
    Outcome outcome = bench(arguments);
    INFO(outcome.output);
    REQUIRE((outcome.exit_code == 1 || outcome.exit_code == 2));
    bool explained = outcome.output.find("CUDA") != std::string::npos ||
                     outcome.output.find("unknown command 'resnet50'") != std::string::npos;
    REQUIRE(explained);
  }
}

TEST_CASE("opsnn-bench: the GPU kernel benchmarks check their options before looking for a GPU", "[cli][bench]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"batchnorm", "--dtype", "f64"}, "--dtype: expected f32, bf16 or f16, got 'f64'"},
      {{"conv", "--dtype", "int8"}, "--dtype: expected f32, tf32, bf16 or f16, got 'int8'"},
      {{"conv", "--lowering", "sometimes"}, "--lowering: expected measured, always or never, got 'sometimes'"},
      {{"conv", "--layer", "layer9"}, "--layer: no layer name starts with 'layer9'"},
      {{"conv", "--layout", "nchwc"}, "--layout: expected nchw or nhwc, got 'nchwc'"},
      {{"conv", "--repeats", "0"}, "--repeats"},
      {{"resnet50", "--precision", "fp8"}, "--precision: expected fp32, tf32, bf16 or fp16, got 'fp8'"},
      {{"resnet50", "--precison", "bf16"}, "unknown option '--precison'"},
      {{"resnet50", "--steps", "1e9"}, "--steps must be a positive integer, got '1e9'"},
      {{"batchnorm", "--bogus", "1"}, "unknown option '--bogus'"},
      {{"batchnorm", "--channels-last", "yes"}, "unexpected argument 'yes'"},
      {{"batchnorm", "--channels-last", "--channels-last"}, "--channels-last given twice"},
      {{"conv", "--layer"}, "--layer needs a value"},
      {{"memory-bound", "--dtype", "garbage"}, "--dtype: expected f32, bf16 or f16, got 'garbage'"},
      {{"memory-bound", "--size", "56x"}, "--size must be a positive integer, got '56x'"},
      {{"optim", "--device", "cuda", "--sizes", ""}, "--sizes needs a value, got an empty one"},
      {{"optim", "--device", "cuda", "--variants", "adamw,,lamb"}, "--variants: empty entry in 'adamw,,lamb'"},
      {{"resnet50", "--channels-last", "sometimes"}, "--channels-last: expected auto, on or off, got 'sometimes'"},
      {{"resnet50", "--conv-deterministic", "maybe"}, "--conv-deterministic: expected on or off, got 'maybe'"},
      {{"resnet50", "--cuda-graph", "--distributed"}, "--cuda-graph: not with --distributed"},
      {{"resnet50", "--cuda-graph", "--precision", "fp16"}, "--cuda-graph: not with --precision fp16"},
      {{"resnet50", "--cuda-graph", "yes"}, "unexpected argument 'yes'"},
      {{"optim", "--device", "cuda", "--variants", "adamw,adamax"},
       "--variants: unknown variant 'adamax' (known: adamw, adamw graph"}};
  for (const auto& [arguments, message] : cases) {
    Outcome outcome = bench(arguments);
    INFO(outcome.output);
    REQUIRE(outcome.exit_code == 2);
    // A CPU-only build has no CUDA benchmarks at all.
    if (outcome.output.find("unknown command '" + arguments[0] + "'") != std::string::npos ||
        outcome.output.find("needs a build with the CUDA backend") != std::string::npos)
      continue;
    REQUIRE(outcome.output.find(message) != std::string::npos);
  }
}

TEST_CASE("opsnn-bench data: bad options exit 2, a bad folder exits non-zero naming it, a folder is measured",
          "[cli][bench][image]") {
  require_usage_error({"data"}, "--root is required");
  require_usage_error({"data", "--root", "x", "--workers", "0"}, "--workers must be a positive integer, got '0'");
  require_usage_error({"data", "--root", "x", "--seed", "-3"}, "--seed must be a non-negative integer, got '-3'");
  require_usage_error({"data", "--root", "x", "--crop", "1"}, "unknown option '--crop'");
  Outcome missing = bench({"data", "--root", "/nonexistent/opsnn-images"});
  INFO(missing.output);
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("/nonexistent/opsnn-images") != std::string::npos);

  // 2 classes x 12 JPEGs of 40x30: 3 batches of 8 per epoch; 2 are timed after 1 warm-up (and 4 in val/,
  // which the dataset needs beside train/).
  opsnn::testing::TemporaryFolder folder("opsnn-bench-data-test");
  for (int i = 0; i < 28; ++i)
    opsnn::testing::write_bytes(
        folder.path / (i < 24 ? "train" : "val") / (i % 2 ? "cat" : "dog") / ("img" + std::to_string(i) + ".jpg"),
        opsnn::testing::encode_jpeg(opsnn::testing::gradient_pixels(40, 30, i), 40, 30));
  const std::string json = (folder.path / "data.json").string();
  Outcome measured = bench({"data", "--root", folder.path.string(), "--workers", "2", "--batch", "8", "--batches", "2",
                            "--warmup", "1", "--image-size", "16", "--json", json});
  INFO(measured.output);
  REQUIRE(measured.exit_code == 0);
  CHECK(measured.output.find("24 training images in 2 classes") != std::string::npos);
  const std::vector<uint8_t> bytes = opsnn::testing::read_bytes(json);
  const std::string record(bytes.begin(), bytes.end());
  CHECK(record.find("\"images\":16") != std::string::npos);
  CHECK(record.find("\"images_per_s\":") != std::string::npos);
  // More batches than an epoch holds is refused before measuring.
  Outcome too_many = bench({"data", "--root", folder.path.string(), "--batch", "8", "--batches", "3"});
  CHECK(too_many.exit_code == 2);
  CHECK(too_many.output.find("the measurement needs 11") != std::string::npos);
}

TEST_CASE("opsnn-bench sparse: bad options exit 2 naming them, a small CPU table is measured", "[cli][bench]") {
  require_usage_error({"sparse", "--touched", "0"}, "--touched: expected fractions in (0, 1), got '0'");
  require_usage_error({"sparse", "--touched", "0.1,"}, "--touched: empty entry");
  require_usage_error({"sparse", "--rows", "1e7x"}, "--rows: expected a whole number >= 1");
  require_usage_error({"sparse", "--width", "2.5"}, "--width: expected a whole number >= 1");
  require_usage_error({"sparse", "--distributions", "normal"}, "--distributions: expected uniform and/or zipf");
  require_usage_error({"sparse", "--state-dtype", "f64"}, "--state-dtype: expected f32, bf16 or f16");
  require_usage_error({"sparse", "--device", "tpu"}, "--device: expected cpu or cuda, got 'tpu'");
  require_usage_error({"sparse", "--rows"}, "--rows");
  opsnn::testing::TemporaryFolder folder("opsnn-bench-sparse-test");
  const std::string json = (folder.path / "sparse.json").string();
  Outcome measured = bench({"sparse", "--rows", "4096", "--width", "8", "--touched", "0.01,0.1", "--topk-size", "1e4",
                            "--sparsities", "0.9", "--repeats", "2", "--json", json});
  INFO(measured.output);
  REQUIRE(measured.exit_code == 0);
  const std::vector<uint8_t> bytes = opsnn::testing::read_bytes(json);
  const std::string record(bytes.begin(), bytes.end());
  // 1% and 10% of 4096 rows, both distributions, and the lookups drawn until that many rows are touched.
  CHECK(record.find("\"touched_rows\": 41") != std::string::npos);
  CHECK(record.find("\"touched_rows\": 410") != std::string::npos);
  CHECK(record.find("\"distribution\": \"zipf\"") != std::string::npos);
  CHECK(record.find("\"dense_adam_ms\":") != std::string::npos);
  CHECK(record.find("\"topk_ms\":") != std::string::npos);
}

#endif  // OPSNN_BENCH_EXE
