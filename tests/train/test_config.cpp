// Config loading: every class of bad input gives a ConfigError naming the key and FILE:LINE:COL,
// --set overrides, cross-key rules, the embedded default, and emit -> load round trips.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/core/device.h"
#include "opsnn/core/error.h"
#include "opsnn/train/config.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::train;

namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    load_config_text(yaml, "test.yaml", sets);
  } catch (const ConfigError& error) {
    return error.what();
  }
  FAIL("expected a ConfigError for:\n" << yaml);
  return "";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("Config: an empty file gives the defaults, named after the file", "[config]") {
  const TrainConfig config = load_config_text("", "experiments/my-run.yaml");
  TrainConfig expected;
  expected.run.name = "my-run";
  expected.run.out_dir = "runs/my-run";
  REQUIRE(config == expected);
  REQUIRE(config.source == "experiments/my-run.yaml");
  REQUIRE(config.model.arch == "small_cnn");
  REQUIRE(config.optimizer.betas == std::array<double, 2>{0.9, 0.999});
  REQUIRE(config.monitor.grad_norm_threshold == 1e6);
  REQUIRE_FALSE(config.loss_scaling_enabled());
}

TEST_CASE("Config: malformed YAML names file, line and column", "[config]") {
  const std::string message = error_of("train:\n  epochs: 1\n  seed: [1, 2\nmodel:\n  arch: mlp\n");
  CHECK_THAT(message, Catch::StartsWith("test.yaml:") && Catch::Contains("malformed YAML"));
  CHECK_THAT(error_of("optimizer:\n  name: adam\n   lr: 0.1\n"),
             Catch::StartsWith("test.yaml:3:") && Catch::Contains("malformed YAML"));
  CHECK_THAT(error_of("- just\n- a list\n"), Catch::StartsWith("test.yaml:1:1: expected a mapping of sections"));
}

TEST_CASE("Config: a ',' where a YAML node begins is malformed YAML, not a hang", "[config]") {
  // Found by fuzz_config: yaml-cpp 0.7 loops forever, taking memory, on each of these.
  for (const auto& [yaml, place] :
       std::vector<std::pair<std::string, std::string>>{{",", "test.yaml:1:1:"},
                                                        {"- a\n,", "test.yaml:2:1:"},
                                                        {"'x'\n,", "test.yaml:2:1:"},
                                                        {"# comment\n--- !tag &anchor ,", "test.yaml:2:"},
                                                        {"optimizer:\n  name: adam\n---\n,", "test.yaml:4:1:"}}) {
    INFO(yaml);
    CHECK_THAT(error_of(yaml), Catch::StartsWith(place) && Catch::Contains("malformed YAML: unexpected ','"));
  }
  CHECK_THAT(error_of("", {"optimizer.lr=- a\n,"}),
             Catch::Contains("--set optimizer.lr=") && Catch::Contains("malformed value: unexpected ','"));
  // A --set value is one YAML document: the second one used to be dropped silently.
  CHECK_THAT(error_of("", {"optimizer.lr=0.1\n---\n0.2"}),
             Catch::Contains("key 'optimizer.lr': the value holds more than one YAML document"));
  // Commas inside plain scalars and flow collections are still fine.
  const TrainConfig commas =
      load_config_text("data:\n  root: /data/a,b\noptimizer:\n  betas: [0.8, 0.9]\n", "t.yaml", {"data.root=x,y"});
  CHECK(commas.data.root == "x,y");
  CHECK(commas.optimizer.betas == std::array<double, 2>{0.8, 0.9});
}

TEST_CASE("Config: a second YAML document is refused at its line, not ignored", "[config]") {
  CHECK(error_of("train:\n  epochs: 1\n---\ntrain:\n  epochs: 5\n") ==
        "test.yaml:4:1: a second YAML document (after '---'); a config file holds one mapping of sections, so merge "
        "the documents or split them into separate files");
  // One document with explicit markers is fine.
  REQUIRE(load_config_text("---\ntrain:\n  epochs: 2\n...\n", "t.yaml").train.epochs == 2);
}

TEST_CASE("Config: a top level that is not a mapping is refused with --set too", "[config]") {
  // Without --set these were refused; with one, the list or scalar was replaced by the overrides alone.
  CHECK_THAT(error_of("- just\n- a list\n", {"train.seed=1"}),
             Catch::StartsWith("test.yaml:1:1: expected a mapping of sections"));
  CHECK(error_of("just a sentence\n", {"train.seed=1"}) ==
        "test.yaml:1:1: expected a mapping of sections (run, model, data, train, ...), got just a sentence");
  // An empty file still takes overrides.
  REQUIRE(load_config_text("", "t.yaml", {"train.seed=4"}).train.seed == 4);
}

TEST_CASE("Config: --config refuses devices, pipes and files over 16 MiB, naming the file", "[config]") {
  REQUIRE_THROWS_MATCHES(load_config("/dev/zero"), ConfigError,
                         Catch::Matchers::Message("/dev/zero: is not a regular file (a device, pipe or socket); "
                                                  "expected a config file"));
  const std::filesystem::path big =
      std::filesystem::temp_directory_path() / ("opsnn-config-test-big-" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(big, std::ios::binary);
    const std::string comment = "# " + std::string(1022, 'x') + "\n";
    for (int i = 0; i < 16 * 1024 + 1; ++i) out << comment;
  }
  CHECK_THROWS_MATCHES(
      load_config(big.string()), ConfigError,
      Catch::Matchers::Message(big.string() + ": is larger than 16 MiB; a config file is a small YAML file"));
  std::filesystem::remove(big);
}

TEST_CASE("Config: bytes that are not printable text are escaped in messages", "[config]") {
  // A binary file's bytes used to reach the terminal raw.
  CHECK(error_of("optimizer:\n  lr: \"a\\x01b\"\n") ==
        "test.yaml:2:7: key 'optimizer.lr': expected a number in [1e-30, 1e+30], got the quoted string 'a\\x01b'");
  CHECK_THAT(error_of("optimizer:\n  lr: \"\\\x9b\"\n"),
             Catch::Contains("malformed YAML") && Catch::Contains("\\x9b") && !Catch::Contains("\x9b"));
  CHECK_THAT(error_of("optimizer:\n  \"l\\x1br\": 1\n"), Catch::Contains("unknown key 'optimizer.l\\x1br'"));
}

TEST_CASE("Config: unknown keys are refused with a did-you-mean", "[config]") {
  CHECK(error_of("optimizer:\n  name: adam\n  lrr: 0.1\n") ==
        "test.yaml:3:3: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
  CHECK(error_of("optimiser:\n  name: adam\n") == "test.yaml:1:1: unknown key 'optimiser' (did you mean 'optimizer'?)");
  CHECK(error_of("optimizer:\n  learning_rate: 0.1\n") ==
        "test.yaml:2:3: unknown key 'optimizer.learning_rate' (did you mean 'optimizer.lr'?)");
  // The right name in the wrong section.
  CHECK(error_of("train:\n  weight_decay: 0.1\n") ==
        "test.yaml:2:3: unknown key 'train.weight_decay' (did you mean 'optimizer.weight_decay'?)");
  CHECK(error_of("optimizer:\n  settings:\n    loss_scaling:\n      initial_scal: 8\n") ==
        "test.yaml:4:7: unknown key 'optimizer.settings.loss_scaling.initial_scal' (did you mean "
        "'optimizer.settings.loss_scaling.initial_scale'?)");
  CHECK_THAT(error_of("monitor:\n  zzqqxx: 1\n"),
             Catch::Contains("test.yaml:2:3: unknown key 'monitor.zzqqxx'; the keys of 'monitor' are: "
                             "grad_norm_threshold, on_nonfinite"));
  CHECK_THAT(error_of("train:\n  epochs: 1\n  epochs: 2\n"),
             Catch::Contains("test.yaml:3:3: duplicate key 'train.epochs' (first set at test.yaml:2:3)"));
}

TEST_CASE("Config: wrong types name the key, the expected type and the position", "[config]") {
  CHECK(error_of("data:\n  batch_size: abc\n") ==
        "test.yaml:2:15: key 'data.batch_size': expected an integer >= 1, got abc");
  CHECK(error_of("data:\n  batch_size: 6.5\n") ==
        "test.yaml:2:15: key 'data.batch_size': expected an integer >= 1, got 6.5");
  CHECK(error_of("optimizer:\n  lr: \"0.1\"\n") ==
        "test.yaml:2:7: key 'optimizer.lr': expected a number in [1e-30, 1e+30], got the quoted string '0.1'");
  CHECK(error_of("optimizer:\n  nesterov: maybe\n") ==
        "test.yaml:2:13: key 'optimizer.nesterov': expected true or false, got maybe");
  CHECK(error_of("optimizer:\n  lr: [1, 2]\n") ==
        "test.yaml:2:7: key 'optimizer.lr': expected a number in [1e-30, 1e+30], got a list");
  CHECK(error_of("optimizer:\n  lr:\n") ==
        "test.yaml:2:3: key 'optimizer.lr': expected a number in [1e-30, 1e+30], got an empty value");
  CHECK(error_of("optimizer:\n  betas: 0.9\n") ==
        "test.yaml:2:10: key 'optimizer.betas': expected a list of 2 numbers, each a number in [0, 1), got 0.9");
  CHECK_THAT(error_of("optimizer: adam\n"),
             Catch::StartsWith("test.yaml:1:12: key 'optimizer': expected a section (a mapping of name, lr,") &&
                 Catch::EndsWith("got adam"));
  CHECK(error_of("train:\n  device: gpu\n") ==
        "test.yaml:2:11: key 'train.device': expected auto, cpu, cuda or cuda:N, got gpu");
  // An index no int holds is no device either (it used to pass here and fail later as 'unknown device', exit 1).
  CHECK(error_of("train:\n  device: cuda:99999999999\n") ==
        "test.yaml:2:11: key 'train.device': expected auto, cpu, cuda or cuda:N, got cuda:99999999999");
  CHECK_THROWS_WITH(Device::parse("cuda:99999999999"),
                    Catch::Contains("device index out of range in 'cuda:99999999999'"));
  CHECK(error_of("data:\n  pin_memory: sometimes\n") ==
        "test.yaml:2:15: key 'data.pin_memory': expected true, false or auto, got sometimes");
  CHECK(error_of("data:\n  pin_memory: [true]\n") ==
        "test.yaml:2:15: key 'data.pin_memory': expected true, false or auto, got a list");
  CHECK(error_of("", {"data.pin_memory=1.5"}) ==
        "--set data.pin_memory=1.5: key 'data.pin_memory': expected true, false or auto, got 1.5");
  CHECK(error_of("run:\n  name: a/b\n") ==
        "test.yaml:2:9: key 'run.name': expected a name of letters, digits, '.', '_' or '-', got a/b");
}

TEST_CASE("Config: data.pin_memory is true, false or auto (the default)", "[config]") {
  REQUIRE_FALSE(load_config_text("", "t.yaml").data.pin_memory.has_value());
  REQUIRE_FALSE(load_config_text("data:\n  pin_memory: auto\n", "t.yaml").data.pin_memory.has_value());
  REQUIRE(load_config_text("data:\n  pin_memory: true\n", "t.yaml").data.pin_memory == std::optional<bool>(true));
  REQUIRE(load_config_text("", "t.yaml", {"data.pin_memory=false"}).data.pin_memory == std::optional<bool>(false));
  const TrainConfig pinned = load_config_text("", "t.yaml", {"data.pin_memory=true"});
  CHECK_THAT(emit_config(pinned), Catch::Contains("\n  pin_memory: true\n"));
  CHECK_THAT(emit_config(load_config_text("", "t.yaml")), Catch::Contains("\n  pin_memory: auto\n"));
  REQUIRE(load_config_text(emit_config(pinned), "emitted.yaml") == pinned);
}

TEST_CASE("Config: model.channels_last is true, false or auto (the default)", "[config]") {
  REQUIRE_FALSE(load_config_text("", "t.yaml").model.channels_last.has_value());
  REQUIRE_FALSE(load_config_text("model:\n  channels_last: auto\n", "t.yaml").model.channels_last.has_value());
  REQUIRE(load_config_text("model:\n  channels_last: true\n", "t.yaml").model.channels_last ==
          std::optional<bool>(true));
  REQUIRE(load_config_text("", "t.yaml", {"model.channels_last=false"}).model.channels_last ==
          std::optional<bool>(false));
  const TrainConfig nhwc = load_config_text("", "t.yaml", {"model.channels_last=true"});
  CHECK_THAT(emit_config(nhwc), Catch::Contains("\n  channels_last: true\n"));
  CHECK_THAT(emit_config(load_config_text("", "t.yaml")), Catch::Contains("\n  channels_last: auto\n"));
  REQUIRE(load_config_text(emit_config(nhwc), "emitted.yaml") == nhwc);
  CHECK(error_of("model:\n  channels_last: sometimes\n") ==
        "test.yaml:2:18: key 'model.channels_last': expected true, false or auto, got sometimes");
  CHECK(error_of("", {"model.channels_last=nhwc"}) ==
        "--set model.channels_last=nhwc: key 'model.channels_last': expected true, false or auto, got nhwc");
}

TEST_CASE("Config: train.deterministic is a boolean, true by default, and a run hands the setting back", "[config]") {
  REQUIRE(load_config_text("", "t.yaml").train.deterministic);
  const TrainConfig fast = load_config_text("train:\n  deterministic: false\n", "t.yaml");
  REQUIRE_FALSE(fast.train.deterministic);
  REQUIRE(load_config_text(emit_config(fast), "emitted.yaml") == fast);
  CHECK(error_of("train:\n  deterministic: mostly\n") ==
        "test.yaml:2:18: key 'train.deterministic': expected true or false, got mostly");
  CHECK(error_of("", {"train.deterministic=2"}) ==
        "--set train.deterministic=2: key 'train.deterministic': expected true or false, got 2");
}

TEST_CASE("Config: distributed.sync_batchnorm is a boolean, false by default", "[config]") {
  REQUIRE_FALSE(load_config_text("", "t.yaml").distributed.sync_batchnorm);
  const TrainConfig synchronised = load_config_text("distributed:\n  sync_batchnorm: true\n", "t.yaml");
  REQUIRE(synchronised.distributed.sync_batchnorm);
  REQUIRE(load_config_text(emit_config(synchronised), "emitted.yaml") == synchronised);
  CHECK(error_of("distributed:\n  sync_batchnorm: 1.5\n") ==
        "test.yaml:2:19: key 'distributed.sync_batchnorm': expected true or false, got 1.5");
  CHECK(error_of("distributed:\n  sync_batchnorm: [true]\n") ==
        "test.yaml:2:19: key 'distributed.sync_batchnorm': expected true or false, got a list");
  CHECK(error_of("", {"distributed.sync_batchnorm=yes please"}) ==
        "--set distributed.sync_batchnorm=yes please: key 'distributed.sync_batchnorm': expected true or false, got "
        "yes please");
}

TEST_CASE("Config: out-of-range values", "[config]") {
  CHECK(error_of("optimizer:\n  name: adam\n  lr: -0.1\n") ==
        "test.yaml:3:7: key 'optimizer.lr': expected a number in [1e-30, 1e+30], got -0.1");
  CHECK(error_of("optimizer:\n  betas: [0.9, 1.0]\n") ==
        "test.yaml:2:16: key 'optimizer.betas[1]': expected a number in [0, 1), got 1.0");
  CHECK(error_of("data:\n  batch_size: 0\n") ==
        "test.yaml:2:15: key 'data.batch_size': expected an integer >= 1, got 0");
  CHECK(error_of("optimizer:\n  eps: .nan\n") ==
        "test.yaml:2:8: key 'optimizer.eps': expected a number in [1e-30, 1e+30], got .nan");
  CHECK(error_of("optimizer:\n  settings:\n    loss_scaling:\n      backoff_factor: 1\n") ==
        "test.yaml:4:23: key 'optimizer.settings.loss_scaling.backoff_factor': expected a number in (0, 1), got 1");
  CHECK(error_of("data:\n  ctr:\n    vocab_sizes: [10, 0]\n") ==
        "test.yaml:3:23: key 'data.ctr.vocab_sizes[1]': expected an integer in [1, 67108864], got 0");
  CHECK(error_of("data:\n  ctr:\n    vocab_sizes: []\n") ==
        "test.yaml:3:18: key 'data.ctr.vocab_sizes': expected a non-empty list of integers, each in [1, 67108864], got "
        "a list (empty)");
  // Integers written as exact floating-point numbers are fine.
  REQUIRE(load_config_text("train:\n  max_steps: 1e6\n", "t.yaml").train.max_steps == 1000000);
  // Optimizer numbers are used as float: they must stay finite there and, where 0 is invalid, above 0.
  CHECK(
      error_of("", {"optimizer.settings.loss_scaling.initial_scale=1e300"}) ==
      "--set optimizer.settings.loss_scaling.initial_scale=1e300: key 'optimizer.settings.loss_scaling.initial_scale': "
      "expected a number in [1e-30, 1e+30], got 1e300");
  CHECK(error_of("optimizer:\n  eps: 1e-50\n") ==
        "test.yaml:2:8: key 'optimizer.eps': expected a number in [1e-30, 1e+30], got 1e-50");
  for (const char* set :
       {"optimizer.lr=1e-40", "optimizer.lr=1e39", "optimizer.weight_decay=1e39",
        "optimizer.settings.fp32_weight_decay=1e39", "optimizer.settings.eps_relative=1e39",
        "optimizer.settings.max_grad_norm=1e39", "optimizer.settings.lamb_trust_bounds=[0, 1e39]",
        "optimizer.settings.loss_scaling.growth_factor=1e39", "optimizer.settings.loss_scaling.growth_interval=3e9"}) {
    INFO(set);
    CHECK_THAT(error_of("", {set}),
               Catch::Contains("expected") && Catch::Contains("1e+30") || Catch::Contains("2147483647"));
  }
  REQUIRE(load_config_text("optimizer:\n  eps: 1e-30\n  lr: 1e30\n", "t.yaml").optimizer.eps == 1e-30);
  // Run lengths and counts are bounded so the step arithmetic built on them cannot overflow.
  CHECK(error_of("", {"checkpoint.keep_last=4294967297"}) ==
        "--set checkpoint.keep_last=4294967297: key 'checkpoint.keep_last': expected an integer in [0, 1000000], got "
        "4294967297");
  CHECK(error_of("train:\n  epochs: 5e15\n") ==
        "test.yaml:2:11: key 'train.epochs': expected an integer in [0, 1000000], got 5e15");
  CHECK(error_of("train:\n  max_steps: 1e13\n") ==
        "test.yaml:2:14: key 'train.max_steps': expected an integer in [0, 1000000000000], got 1e13");
  CHECK(error_of("", {"train.grad_accumulation=9223372036854775807"}) ==
        "--set train.grad_accumulation=9223372036854775807: key 'train.grad_accumulation': expected an integer in "
        "[1, 65536], got 9223372036854775807");
  CHECK(error_of("", {"scheduler.warmup_epochs=1e16"}) ==
        "--set scheduler.warmup_epochs=1e16: key 'scheduler.warmup_epochs': expected a number in [0, 1e+06], got 1e16");
  CHECK(error_of("", {"scheduler.warmup_steps=1e13"}) ==
        "--set scheduler.warmup_steps=1e13: key 'scheduler.warmup_steps': expected an integer in [0, 1000000000000], "
        "got 1e13");
  REQUIRE(
      load_config_text("train:\n  epochs: 1e6\n  grad_accumulation: 65536\ncheckpoint:\n  keep_last: 1e6\n", "t.yaml")
          .checkpoint.keep_last == 1000000);
  // Whole numbers beyond 64 bits are said to be out of range, not "not an integer".
  CHECK(error_of("", {"train.seed=18446744073709551615"}) ==
        "--set train.seed=18446744073709551615: key 'train.seed': expected an integer >= 0, got "
        "18446744073709551615, which is out of range for a 64-bit integer");
  CHECK(error_of("train:\n  seed: 1e19\n") ==
        "test.yaml:2:9: key 'train.seed': expected an integer >= 0, got 1e19, which is out of range for a 64-bit "
        "integer");
  CHECK(error_of("model:\n  hidden_sizes: [10, -99999999999999999999]\n") ==
        "test.yaml:2:22: key 'model.hidden_sizes[1]': expected an integer >= 1, got -99999999999999999999, which is "
        "out of range for a 64-bit integer");
}

TEST_CASE("Config: synthetic data sizes have upper bounds (memory and time stay sane, products never wrap)",
          "[config]") {
  // C*H*W = 2^62 * 16 wrapped to 0 and the pattern writer ran past its buffer.
  CHECK(error_of("", {"data.synthetic.channels=4611686018427387904"}) ==
        "--set data.synthetic.channels=4611686018427387904: key 'data.synthetic.channels': expected an integer in "
        "[1, 65536], got 4611686018427387904");
  CHECK(error_of("data:\n  synthetic:\n    height: 65537\n") ==
        "test.yaml:3:13: key 'data.synthetic.height': expected an integer in [1, 65536], got 65537");
  CHECK(error_of("data:\n  synthetic:\n    width: 0\n") ==
        "test.yaml:3:12: key 'data.synthetic.width': expected an integer in [1, 65536], got 0");
  CHECK(error_of("data:\n  synthetic: {channels: 64, height: 4096, width: 4096}\n") ==
        "test.yaml:2:25: key 'data.synthetic.channels': channels x height x width = 1073741824 values per image, "
        "more than the 268435456 (1 GiB of f32) allowed");
  REQUIRE(load_config_text("data:\n  synthetic: {channels: 16, height: 4096, width: 4096}\n", "t.yaml")
              .data.synthetic.channels == 16);
  // Sample counts: the loader's index array (std::bad_alloc at 1e15) and the test-set walks (hours at 1e11).
  CHECK(error_of("data:\n  synthetic:\n    train_size: 1e15\n") ==
        "test.yaml:3:17: key 'data.synthetic.train_size': expected an integer in [1, 2147483647], got 1e15");
  CHECK(error_of("data:\n  synthetic:\n    test_size: 1e11\n") ==
        "test.yaml:3:16: key 'data.synthetic.test_size': expected an integer in [1, 2147483647], got 1e11");
  CHECK(error_of("data:\n  ctr:\n    train_size: 2147483648\n") ==
        "test.yaml:3:17: key 'data.ctr.train_size': expected an integer in [1, 2147483647], got 2147483648");
  CHECK(error_of("data:\n  ctr:\n    test_size: 1e12\n") ==
        "test.yaml:3:16: key 'data.ctr.test_size': expected an integer in [1, 2147483647], got 1e12");
  REQUIRE(load_config_text("data:\n  synthetic:\n    train_size: 2147483647\n", "t.yaml").data.synthetic.train_size ==
          2147483647);
  // Vocabularies: each (their sum wrapped past int64) and in total (a planted weight per value).
  CHECK(error_of("", {"data.ctr.vocab_sizes=[9223372036854775807,9223372036854775807,3]"}) ==
        "--set data.ctr.vocab_sizes=[9223372036854775807,9223372036854775807,3]: key 'data.ctr.vocab_sizes[0]': "
        "expected an integer in [1, 67108864], got 9223372036854775807");
  CHECK(error_of("data:\n  ctr:\n    vocab_sizes: [1e12]\n") ==
        "test.yaml:3:19: key 'data.ctr.vocab_sizes[0]': expected an integer in [1, 67108864], got 1e12");
  CHECK(error_of("data:\n  ctr:\n    vocab_sizes: [67108864, 1]\n") ==
        "test.yaml:3:18: key 'data.ctr.vocab_sizes': the vocabularies total 67108865 values, more than the 67108864 "
        "allowed (each needs a planted weight and an embedding row)");
}

TEST_CASE("Config: unknown model, optimizer and dataset names list the known ones", "[config]") {
  CHECK(error_of("model:\n  arch: resnet19\n") ==
        "test.yaml:2:9: key 'model.arch': expected one of: mlp, small_cnn, resnet18, resnet34, resnet50, ctr, dlrm, "
        "got resnet19 (did you mean 'resnet18'?)");
  CHECK(error_of("optimizer:\n  name: adan\n") ==
        "test.yaml:2:9: key 'optimizer.name': expected one of: sgd, adam, adamw, lamb, lion, adagrad, got adan (did "
        "you mean "
        "'adam'?)");
  CHECK(error_of("optimizer:\n  name: lino\n") ==
        "test.yaml:2:9: key 'optimizer.name': expected one of: sgd, adam, adamw, lamb, lion, adagrad, got lino (did "
        "you mean "
        "'lion'?)");
  CHECK(error_of("data:\n  dataset: imagenet\n") ==
        "test.yaml:2:12: key 'data.dataset': expected one of: fashion_mnist, synthetic, ctr_synthetic, cifar10, "
        "cifar100, image_folder, criteo, got imagenet");
  CHECK(error_of("scheduler:\n  name: cosine\n") ==
        "test.yaml:2:9: key 'scheduler.name': expected one of: constant, warmup_cosine, step, linear, got cosine "
        "(did you mean 'warmup_cosine'?)");
}

TEST_CASE("Config: a missing config file is a ConfigError naming it", "[config]") {
  REQUIRE_THROWS_MATCHES(
      load_config("/no/such/dir/exp.yaml"), ConfigError,
      Catch::Matchers::Message("/no/such/dir/exp.yaml: cannot read config file (No such file or directory)"));
  REQUIRE_THROWS_AS(load_config("/tmp"), ConfigError);
}

TEST_CASE("Config: rules spanning several keys", "[config]") {
  CHECK(error_of("optimizer:\n  name: adam\n  nesterov: true\n") ==
        "test.yaml:3:13: key 'optimizer.nesterov': nesterov applies to sgd only (optimizer.name is adam)");
  CHECK(error_of("optimizer:\n  name: sgd\n  nesterov: true\n") ==
        "test.yaml:3:13: key 'optimizer.nesterov': Nesterov momentum needs optimizer.momentum > 0 and "
        "optimizer.dampening = 0");
  REQUIRE(
      load_config_text("optimizer:\n  name: sgd\n  momentum: 0.9\n  nesterov: true\n", "t.yaml").optimizer.nesterov);
  // Lion is a registered built-in: accepted by name, and nesterov is as foreign to it as to adam.
  REQUIRE(load_config_text("optimizer:\n  name: lion\n  lr: 0.0001\n  weight_decay: 0.1\n", "t.yaml").optimizer.name ==
          "lion");
  CHECK(error_of("optimizer:\n  name: lion\n  nesterov: true\n") ==
        "test.yaml:3:13: key 'optimizer.nesterov': nesterov applies to sgd only (optimizer.name is lion)");
  CHECK(error_of("train:\n  epochs: 0\n") ==
        "test.yaml:2:11: key 'train.epochs': train.epochs and train.max_steps are both 0; set at least one limit");
  CHECK(error_of("model:\n  arch: ctr\n") ==
        "test.yaml:2:9: key 'model.arch': model 'ctr' needs data.dataset ctr_synthetic (it is fashion_mnist)");
  CHECK(error_of("data:\n  dataset: ctr_synthetic\n") ==
        "test.yaml:2:12: key 'model.arch': model 'small_cnn' needs an image dataset (data.dataset is ctr_synthetic, "
        "which goes with model 'ctr')");
  CHECK(error_of("optimizer:\n  lr: 0.01\nscheduler:\n  min_lr: 0.1\n") ==
        "test.yaml:4:11: key 'scheduler.min_lr': must not exceed optimizer.lr (0.01)");
  CHECK(
      error_of("scheduler:\n  warmup_steps: 10\n  warmup_epochs: 1\n") ==
      "test.yaml:3:18: key 'scheduler.warmup_epochs': set scheduler.warmup_steps or scheduler.warmup_epochs, not both");
  CHECK(error_of("optimizer:\n  weight_decay: 0.1\n  settings:\n    fp32_weight_decay: 0.01\n") ==
        "test.yaml:2:17: key 'optimizer.weight_decay': conflicts with optimizer.settings.fp32_weight_decay (0.01); "
        "set only one");
  CHECK(error_of("optimizer:\n  settings:\n    fp16_momentum: true\n    state_dtype: bf16\n") ==
        "test.yaml:4:18: key 'optimizer.settings.state_dtype': bf16 conflicts with fp16_momentum: true (which stores "
        "states as f16)");
}

TEST_CASE("Config: the optimizer settings block is accepted as written", "[config]") {
  const std::string block =
      "optimizer:\n"
      "  name: adam\n"
      "  settings:\n"
      "    fp32_weight_decay: 0.01\n"
      "    fp16_momentum: true\n"
      "    loss_scaling:\n"
      "      initial_scale: 65536\n"
      "      growth_interval: 2000\n";
  const TrainConfig config = load_config_text(block, "doc.yaml");
  REQUIRE(config.optimizer.name == "adam");
  REQUIRE(config.optimizer.settings.fp32_weight_decay == 0.01);
  REQUIRE(config.optimizer.settings.fp16_momentum);
  REQUIRE(config.optimizer.settings.loss_scaling.initial_scale == 65536.0);
  REQUIRE(config.optimizer.settings.loss_scaling.growth_interval == 2000);
  REQUIRE(config.effective_weight_decay() == 0.01);
  REQUIRE(config.effective_state_dtype() == "f16");
  REQUIRE_FALSE(config.loss_scaling_enabled());  // auto: on with fp16 precision only
  REQUIRE(load_config_text(block, "doc.yaml", {"train.precision=fp16"}).loss_scaling_enabled());
  REQUIRE_FALSE(
      load_config_text(block, "doc.yaml", {"train.precision=fp16", "optimizer.settings.loss_scaling.enabled=false"})
          .loss_scaling_enabled());
}

TEST_CASE("Config: --set overrides keys, lists and whole sections", "[config]") {
  const TrainConfig config = load_config_text(
      "optimizer:\n  name: adam\n  lr: 0.1\n", "t.yaml",
      {"optimizer.lr=3e-4", "optimizer.betas=[0.8, 0.95]", "optimizer.settings.loss_scaling.initial_scale=1024",
       "data.augment={crop_padding: 4, flip: true}", "run.name=sweep-1", "optimizer.lr=5e-4"});
  REQUIRE(config.optimizer.lr == 5e-4);  // the last --set of a key wins
  REQUIRE(config.optimizer.betas == std::array<double, 2>{0.8, 0.95});
  REQUIRE(config.optimizer.settings.loss_scaling.initial_scale == 1024.0);
  REQUIRE(config.data.augment.crop_padding == 4);
  REQUIRE(config.data.augment.flip);
  REQUIRE(config.run.name == "sweep-1");
  REQUIRE(config.run.out_dir == "runs/sweep-1");
  // Paths absent from the file create their sections; a null value resets an optional key.
  REQUIRE_FALSE(load_config_text("optimizer:\n  settings:\n    fp32_weight_decay: 0.1\n", "t.yaml",
                                 {"optimizer.settings.fp32_weight_decay=null"})
                    .optimizer.settings.fp32_weight_decay.has_value());
}

TEST_CASE("Config: --set errors name the --set argument", "[config]") {
  CHECK(error_of("", {"optimizer.lrr=1"}) ==
        "--set optimizer.lrr=1: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
  CHECK(error_of("", {"optimizer.lr=-1"}) ==
        "--set optimizer.lr=-1: key 'optimizer.lr': expected a number in [1e-30, 1e+30], got -1");
  CHECK(error_of("", {"optimizer.betas=[0.9, 2]"}) ==
        "--set optimizer.betas=[0.9, 2]: key 'optimizer.betas[1]': expected a number in [0, 1), got 2");
  CHECK(error_of("", {"optimizer.lr"}) == "--set optimizer.lr: expected key.path=value, e.g. --set optimizer.lr=0.01");
  CHECK_THAT(error_of("", {"optimizer.betas=[0.9,"}),
             Catch::StartsWith("--set optimizer.betas=[0.9,: key 'optimizer.betas': malformed value"));
  // A section set to nothing used to drop the file's whole section silently.
  CHECK(error_of("optimizer:\n  lr: 0.1\n", {"optimizer="}) ==
        "--set optimizer=: key 'optimizer' is a section: setting it to an empty value would drop all its keys; set "
        "single keys (--set optimizer.KEY=VALUE) or give a mapping");
  CHECK_THAT(error_of("", {"data.augment={}"}),
             Catch::StartsWith("--set data.augment={}: key 'data.augment' is a section"));
  CHECK(error_of("", {"optimizer.lr.x=1"}) ==
        "--set optimizer.lr.x=1: unknown key 'optimizer.lr.x' ('optimizer.lr' is a single value, not a section)");
  CHECK(
      error_of("", {"data.augment={crop_padding: -1}"}) ==
      "--set data.augment={crop_padding: -1}: key 'data.augment.crop_padding': expected an integer in [0, 64], got -1");
  CHECK(error_of("", {"model.arch=ctr"}) ==
        "--set model.arch=ctr: key 'model.arch': model 'ctr' needs data.dataset ctr_synthetic (it is fashion_mnist)");
  // An error in the file itself still points into the file.
  CHECK(error_of("train:\n  seed: -3\n", {"optimizer.lr=0.5"}) ==
        "test.yaml:2:9: key 'train.seed': expected an integer >= 0, got -3");
}

TEST_CASE("Config: emit -> load round-trips", "[config]") {
  const std::vector<std::string> sets{
      "run.out_dir=/tmp/some dir/x",
      "model.arch=resnet50",
      "model.stem=imagenet",
      "model.num_classes=1000",
      "model.hidden_sizes=[256, 128]",
      "model.zero_init_residual=true",
      "data.dataset=synthetic",
      "data.synthetic={height: 224, width: 224, num_classes: 1000, noise: 0.25}",
      "data.batch_size=256",
      "train.precision=bf16",
      "train.device=cuda:1",
      "train.max_steps=12345",
      "train.label_smoothing=0.1",
      "optimizer.name=adamw",
      "optimizer.lr=0.002",
      "optimizer.betas=[0.9, 0.95]",
      "optimizer.eps=1e-12",
      "optimizer.weight_decay=0.05",
      "optimizer.settings.loss_scaling.enabled=true",
      "optimizer.settings.sparsification={method: topk, density: 0.001, warmup_steps: 500}",
      "optimizer.settings.lamb_trust_bounds=[0.01, 5.5]",
      "scheduler.name=warmup_cosine",
      "scheduler.warmup_epochs=0.5",
      "scheduler.min_lr=1e-6",
      "monitor.on_nonfinite=stop",
      "logging.progress=plain",
      "checkpoint.keep_last=0",
      "run.name=yes"};
  const TrainConfig original = load_config_text("", "t.yaml", sets);
  REQUIRE(original.run.name == "yes");
  const std::string emitted = emit_config(original);
  const TrainConfig reloaded = load_config_text(emitted, "emitted.yaml");
  REQUIRE(reloaded == original);
  const std::string emitted_again = emit_config(reloaded);  // identical after the first (source) line
  REQUIRE(emitted_again.substr(emitted_again.find('\n')) == emitted.substr(emitted.find('\n')));
  // Every key appears in the emitted text, and the default config round-trips too.
  for (const std::string& path : config_key_paths()) {
    const std::string leaf = path.substr(path.rfind('.') + 1);
    CHECK_THAT(emitted, Catch::Contains(" " + leaf + ": "));
  }
  const TrainConfig quickstart = load_default_config();
  REQUIRE(load_config_text(emit_config(quickstart), "x.yaml") == quickstart);
  CHECK_THAT(emitted,
             Catch::Contains("\noptimizer:\n  name: adamw\n  lr: 0.002\n  betas: [0.9, 0.95]\n  eps: 1e-12\n"));
}

TEST_CASE("Config: the embedded default is configs/quickstart.yaml", "[config]") {
  REQUIRE(default_config_yaml() == read_text(std::string(OPSNN_SOURCE_DIR) + "/configs/quickstart.yaml"));
  const TrainConfig config = load_default_config();
  REQUIRE(config.source == "<embedded quickstart.yaml>");
  REQUIRE(config.run.name == "quickstart");
  REQUIRE(config.model.arch == "small_cnn");
  REQUIRE(config.data.dataset == "fashion_mnist");
  REQUIRE(config.optimizer.name == "adam");
  REQUIRE(config.optimizer.lr == 1e-3);
  REQUIRE(config.data.batch_size == 64);
  REQUIRE(config.train.epochs == 1);
  REQUIRE(load_default_config({"train.epochs=2"}).train.epochs == 2);
  REQUIRE(load_config(std::string(OPSNN_SOURCE_DIR) + "/configs/quickstart.yaml") == config);
}

TEST_CASE("Config: model.file reads an architecture file that the model section overrides", "[config]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("opsnn-config-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "configs");
  fs::create_directories(dir / "models");
  std::ofstream(dir / "models" / "net.yaml") << "# a resnet\narch: resnet18\nstem: imagenet\nwidth: 32\n";
  std::ofstream(dir / "models" / "bad.yaml") << "arch: resnet18\nwidth: -4\n";
  std::ofstream(dir / "models" / "nested.yaml") << "arch: mlp\nfile: other.yaml\n";
  const std::string config_path = (dir / "configs" / "exp.yaml").string();
  std::ofstream(config_path) << "model:\n  file: ../models/net.yaml\n  width: 48\n";

  const TrainConfig config = load_config(config_path);
  REQUIRE(config.model.arch == "resnet18");
  REQUIRE(config.model.stem == "imagenet");
  REQUIRE(config.model.width == 48);  // the config's own key wins
  REQUIRE(config.model.file == (dir / "models" / "net.yaml").lexically_normal().string());
  // The resolved config names the file by its absolute path, so it reloads from anywhere.
  REQUIRE(load_config_text(emit_config(config), "/elsewhere/config.yaml") == config);

  std::ofstream(config_path) << "model:\n  file: ../models/bad.yaml\n";
  REQUIRE_THROWS_MATCHES(load_config(config_path), ConfigError,
                         Catch::Matchers::Message((dir / "models" / "bad.yaml").lexically_normal().string() +
                                                  ":2:8: key 'model.width': expected an integer >= 0, got -4"));
  std::ofstream(config_path) << "model:\n  file: ../models/nested.yaml\n";
  REQUIRE_THROWS_WITH(load_config(config_path),
                      Catch::Contains("nested.yaml:2:1: key 'model.file' is not allowed here"));
  std::ofstream(config_path) << "model:\n  file: ../models/missing.yaml\n";
  REQUIRE_THROWS_WITH(load_config(config_path),
                      Catch::StartsWith(config_path + ":2:9: key 'model.file': cannot read the "
                                                      "architecture file (tried "));
  fs::remove_all(dir);
}

TEST_CASE("Config: optimizer.lr and optimizer.betas left out take the optimizer's own defaults", "[config]") {
  TrainConfig lion = load_config_text("optimizer:\n  name: lion\n", "test.yaml");
  CHECK(lion.optimizer.lr == 1e-4);
  CHECK(lion.optimizer.betas == std::array<double, 2>{0.9, 0.99});
  TrainConfig adam = load_config_text("optimizer:\n  name: adam\n", "test.yaml");
  CHECK(adam.optimizer.lr == 1e-3);
  CHECK(adam.optimizer.betas == std::array<double, 2>{0.9, 0.999});
  // Written, from the file or from --set, they are kept; the resolved config records them either way.
  TrainConfig set =
      load_config_text("optimizer:\n  name: lion\n  lr: 3.0e-5\n", "test.yaml", {"optimizer.betas=[0.95, 0.98]"});
  CHECK(set.optimizer.lr == 3e-5);
  CHECK(set.optimizer.betas == std::array<double, 2>{0.95, 0.98});
  CHECK(load_config_text(emit_config(lion), "resolved.yaml") == lion);
  // A min_lr above lion's default lr is still caught, against the default.
  CHECK_THROWS_WITH(load_config_text("optimizer:\n  name: lion\nscheduler:\n  min_lr: 0.001\n", "test.yaml"),
                    Catch::Contains("scheduler.min_lr") && Catch::Contains("must not exceed optimizer.lr"));
}

TEST_CASE("Config: data.mean, data.std and data.color_jitter are checked against the dataset", "[config]") {
  auto fails = [](const std::string& yaml, const std::string& message) {
    INFO(yaml);
    CHECK_THROWS_WITH(load_config_text(yaml, "test.yaml"), Catch::Contains(message));
  };
  fails("data:\n  dataset: cifar10\n  mean: [0.5, 0.5]\n  std: [0.2, 0.2]\n",
        "key 'data.mean': needs 3 entries for cifar10, one per channel");
  fails("data:\n  dataset: fashion_mnist\n  mean: [0.5, 0.5, 0.5]\n  std: [0.2, 0.2, 0.2]\n",
        "needs 1 entry for fashion_mnist");
  fails("data:\n  dataset: synthetic\n  mean: [0.5]\n  std: [0.2]\n", "not to the generated synthetic");
  fails("data:\n  dataset: cifar10\n  std: [0.2, 0.2, 0.2]\n", "key 'data.std': has 3 entries and data.mean 0");
  fails("data:\n  std: [0]\n", "test.yaml:2:9: key 'data.std[0]'");
  fails("data:\n  mean: [1, 2, 3, 4]\n", "key 'data.mean': expected a list of at most 3 numbers");
  fails("data:\n  dataset: cifar10\n  color_jitter:\n    saturation: 0.4\n",
        "colour jitter applies to image_folder's training crops, not to cifar10");
  fails("data:\n  color_jitter:\n    hue: 0.7\n", "key 'data.color_jitter.hue'");
  TrainConfig ok = load_config_text(
      "data:\n  dataset: image_folder\n  root: /tmp\n  mean: [0.5, 0.4, 0.3]\n  std: [0.2, 0.2, 0.2]\n"
      "  color_jitter: {brightness: 0.4, contrast: 0.4, saturation: 0.4, hue: 0.1}\n",
      "test.yaml");
  CHECK(ok.data.mean == std::vector<double>{0.5, 0.4, 0.3});
  CHECK(ok.data.color_jitter.hue == 0.1);
  CHECK(load_config_text(emit_config(ok), "resolved.yaml") == ok);
}

TEST_CASE("Config: the dlrm and criteo keys with their bounds and the model and dataset pairings", "[config]") {
  const std::string base = "model:\n  arch: dlrm\ndata:\n  dataset: criteo\n  root: /data/criteo\n";
  const TrainConfig scalar = load_config_text(
      "model:\n  arch: dlrm\n  hash_buckets: 1000\ndata:\n  dataset: criteo\n  root: /data/criteo\n", "test.yaml");
  CHECK(scalar.model.hash_buckets == std::vector<int64_t>{1000});
  CHECK(load_config_text(base, "test.yaml", {"model.hash_buckets=77"}).model.hash_buckets == std::vector<int64_t>{77});
  CHECK(load_config_text(emit_config(scalar), "resolved.yaml") == scalar);
  const TrainConfig config = load_config_text(
      base, "test.yaml",
      {"model.hash_buckets=[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26]",
       "model.embedding_dim=8", "model.bottom_mlp=[32,8]", "model.top_mlp=[]", "data.criteo.test_fraction=0.25",
       "data.criteo.max_lines=1000", "data.criteo.bad_lines=fail", "data.criteo.bad_line_messages=0"});
  CHECK(config.model.hash_buckets.size() == 26);
  CHECK(config.model.top_mlp.empty());
  CHECK(config.data.criteo.test_fraction == 0.25);
  CHECK(config.data.criteo.max_lines == 1000);
  CHECK(config.data.criteo.bad_lines == "fail");
  CHECK(config.data.criteo.bad_line_messages == 0);
  CHECK(load_config_text(emit_config(config), "resolved.yaml") == config);

  auto fails = [&base](const std::vector<std::string>& sets, const std::string& message) {
    INFO(message);
    CHECK_THROWS_WITH(load_config_text(base, "test.yaml", sets), Catch::Contains(message));
  };
  fails({"model.hash_buckets=[1,2,3]"},
        "key 'model.hash_buckets': has 3 entries; give one row count for every categorical field or 26, one each "
        "for C1 .. C26");
  fails({"model.hash_buckets=0"},
        "key 'model.hash_buckets': expected an integer in [1, 1099511627776] or a non-empty list of integers, each "
        "in [1, 1099511627776], got 0");
  fails({"model.hash_buckets=[]"}, "got a list (empty)");
  fails({"model.hash_buckets=[5, 0]"}, "key 'model.hash_buckets[1]': expected an integer in [1, 1099511627776], got 0");
  fails({"model.hash_buckets=1e13"}, "key 'model.hash_buckets': expected an integer in [1, 1099511627776]");
  fails({"model.hash_buckets=1099511627776"},
        "key 'model.hash_buckets': the table of 28587302322176 rows x model.embedding_dim 16 has more than the "
        "68719476736 values (256 GiB of f32) allowed");
  fails({"model.embedding_dim=8"},
        "key 'model.bottom_mlp': ends in 16 but must end in model.embedding_dim (8): its output is the 27th vector");
  fails({"model.bottom_mlp=[]"}, "key 'model.bottom_mlp': expected a non-empty list of integers");
  fails({"model.top_mlp=[0]"}, "key 'model.top_mlp[0]': expected an integer >= 1, got 0");
  fails({"data.criteo.test_fraction=1"}, "key 'data.criteo.test_fraction': expected a number in (0, 1), got 1");
  fails({"data.criteo.test_fraction=0"}, "key 'data.criteo.test_fraction': expected a number in (0, 1), got 0");
  fails({"data.criteo.max_lines=-1"}, "key 'data.criteo.max_lines': expected an integer >= 0, got -1");
  fails({"data.criteo.bad_lines=ignore"}, "key 'data.criteo.bad_lines': expected one of: skip, fail, got ignore");
  fails({"data.criteo.bad_line_messages=1000001"},
        "key 'data.criteo.bad_line_messages': expected an integer in [0, "
        "1000000], got 1000001");
  fails({"data.augment.flip=true"}, "crop/flip augmentation applies to image datasets, not criteo");
  fails({"data.mean=[0.5]", "data.std=[0.2]"},
        "key 'data.mean': applies to datasets with normalisation statistics, not to criteo");
  // Each row model reads its own dataset; image models read images.
  fails({"data.dataset=fashion_mnist"},
        "key 'model.arch': model 'dlrm' needs data.dataset criteo (it is fashion_mnist)");
  fails({"data.dataset=ctr_synthetic"},
        "model 'dlrm' needs data.dataset criteo (it is ctr_synthetic); ctr_synthetic goes with model 'ctr'");
  fails({"model.arch=ctr"},
        "model 'ctr' needs data.dataset ctr_synthetic (it is criteo); criteo goes with model 'dlrm'");
  fails({"model.arch=mlp"},
        "model 'mlp' needs an image dataset (data.dataset is criteo, which goes with model 'dlrm')");
  // The dlrm keys are only checked for dlrm.
  CHECK(load_config_text("model:\n  hash_buckets: [1, 2]\n  embedding_dim: 4\n", "test.yaml").model.hash_buckets ==
        std::vector<int64_t>{1, 2});
}
