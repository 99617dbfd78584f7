// Tests of capture_graph (opsnn/core/graph.h): a whole training step (zero_grad, forward, loss, backward,
// fused optimizer step) captured once and replayed gives the eager steps' parameters, buffers, losses and
// optimizer state bit for bit, with new inputs copied in between replays; buffers the work frees stay
// alive for the graph; the range checks of cross_entropy and embedding report a replay's bad index at the
// next replay or synchronize; and what a graph cannot hold (a CPU device, a tensor outliving the work, a
// host read, a nested capture) is refused with a clear error, the device still usable after. [cuda] cases
// skip without a GPU.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/core/graph.h"
#include "opsnn/models/models.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "support/bit_patterns.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using testing::kGpu;
using testing::require_same_bits;

namespace {

models::ModelOptions small_resnet(bool channels_last) {
  models::ModelOptions options;
  options.arch = "resnet18";
  options.stem = "cifar";
  options.width = 8;
  options.in_channels = 3;
  options.num_classes = 10;
  options.channels_last = channels_last;
  return options;
}

// A model and its optimizer as the trainer sets them up (SGD with momentum; with a bf16 compute dtype,
// the optimizer's bf16 copy of the parameters), built from one seed so that two runs start alike.
struct Run {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  Run(const models::ModelOptions& options, DType compute_dtype) {
    Generator generator(31);
    model = models::build_model(options, generator);
    model->to(kGpu);
    model->train();
    if (compute_dtype != DType::f32) model->set_compute_dtype(compute_dtype);
    optimizer = optim::make_optimizer("sgd", model->named_parameters(),
                                      optim::OptimizerOptions(0.05).momentum(0.9).weight_decay(1e-4));
    if (compute_dtype != DType::f32) {
      optimizer->enable_param_copy(compute_dtype);
      model->set_parameter_copies(std::make_shared<const nn::Module::ParameterCopies>(optimizer->param_copies()));
    }
  }
  Tensor step(const Tensor& images, const Tensor& labels) {
    optimizer->zero_grad();
    Tensor loss = ops::cross_entropy(model->forward(images), labels);
    loss.backward();
    optimizer->step_async();
    return loss;
  }
};

}  // namespace

TEST_CASE("capture_graph on the CPU is a clear error", "[graph]") {
  REQUIRE_THROWS_WITH(capture_graph(kCPU, [] {}), Catch::Contains("graphs record CUDA work"));
  REQUIRE_THROWS_AS(capture_graph(kCPU, [] {}), DeviceError);
  REQUIRE_THROWS_AS(capture_graph(kCPU, nullptr), UsageError);
}

TEST_CASE("CUDA graph: a captured training step replays the eager steps bit for bit", "[cuda][graph]") {
  if (testing::gpu_missing("the CUDA graph training step test")) return;
  Generator data(3);
  constexpr int kSteps = 4;
  std::vector<Tensor> batches, labels;
  for (int i = 0; i < 2 + kSteps; ++i) {
    batches.push_back(Tensor::normal({6, 3, 16, 16}, 0.0, 1.0, data).to(kGpu));
    std::vector<int64_t> values(6);
    for (int64_t& value : values) value = static_cast<int64_t>(data.next_below(10));
    labels.push_back(Tensor::from_vector(values, {6}, DType::i64).to(kGpu));
  }
  for (const bool channels_last : {false, true})
    for (const DType compute_dtype : {DType::f32, DType::bf16}) {
      INFO("channels_last " << channels_last << ", compute " << dtype_name(compute_dtype));
      const models::ModelOptions options = small_resnet(channels_last);
      Run eager(options, compute_dtype), graphed(options, compute_dtype);
      std::vector<double> eager_losses;
      for (int i = 0; i < 2 + kSteps; ++i) eager_losses.push_back(eager.step(batches[i], labels[i]).item());
      // Two eager steps first (convolution searches, the optimizer's states), then the capture, whose
      // inputs and loss are tensors made before it.
      Tensor images = batches[0].clone(), targets = labels[0].clone(), loss = Tensor::zeros({}, DType::f32, kGpu);
      for (int i = 0; i < 2; ++i) {
        images.copy_(batches[i]);
        targets.copy_(labels[i]);
        REQUIRE(graphed.step(images, targets).item() == eager_losses[i]);
      }
      std::unique_ptr<CapturedGraph> graph = capture_graph(kGpu, [&] { loss.copy_(graphed.step(images, targets)); });
      // Nothing ran during the capture: the parameters are those after two steps until the first replay.
      for (int i = 2; i < 2 + kSteps; ++i) {
        images.copy_(batches[i]);
        targets.copy_(labels[i]);
        graph->replay();
        REQUIRE(loss.item() == eager_losses[i]);
      }
      graph->synchronize();
      REQUIRE(graphed.optimizer->sync_state().step == eager.optimizer->sync_state().step);
      const auto eager_parameters = eager.model->named_parameters(),
                 graph_parameters = graphed.model->named_parameters();
      for (size_t t = 0; t < eager_parameters.size(); ++t)
        require_same_bits(graph_parameters[t].second, eager_parameters[t].second, eager_parameters[t].first);
      const auto eager_buffers = eager.model->named_buffers(), graph_buffers = graphed.model->named_buffers();
      for (size_t t = 0; t < eager_buffers.size(); ++t)
        if (is_floating(eager_buffers[t].second.dtype()))
          require_same_bits(graph_buffers[t].second, eager_buffers[t].second, eager_buffers[t].first);
    }
}

TEST_CASE("CUDA graph: a buffer the work frees stays alive for the graph", "[cuda][graph]") {
  if (testing::gpu_missing("the CUDA graph buffer lifetime test")) return;
  Tensor input = Tensor::full({1 << 16}, 1.5, DType::f32, kGpu);
  Tensor out = Tensor::zeros({1 << 16}, DType::f32, kGpu);
  std::unique_ptr<CapturedGraph> graph = capture_graph(kGpu, [&] {
    out.copy_(ops::add(input, input));
    input = Tensor();  // the last handle: the graph keeps the buffer
  });
  // Same-sized allocations now would reuse the buffer if it had been freed.
  std::vector<Tensor> others;
  for (int i = 0; i < 4; ++i) others.push_back(Tensor::full({1 << 16}, -7.0, DType::f32, kGpu));
  graph->replay();
  graph->synchronize();
  for (float value : out.to_vector<float>()) REQUIRE(value == 3.0f);
}

TEST_CASE("CUDA graph: a replay reports a target or index out of range afterwards", "[cuda][graph]") {
  if (testing::gpu_missing("the CUDA graph range check test")) return;
  Generator generator(5);
  const Tensor logits = Tensor::normal({4, 10}, 0.0, 1.0, generator).to(kGpu);
  Tensor targets = Tensor::from_vector<int64_t>({1, 9, 4, 0}, {4}).to(kGpu);
  const Tensor table = Tensor::normal({8, 3}, 0.0, 1.0, generator).to(kGpu);
  Tensor indices = Tensor::from_vector<int64_t>({7, 0, 3}, {3}).to(kGpu);
  Tensor loss = Tensor::zeros({}, DType::f32, kGpu), rows = Tensor::zeros({3, 3}, DType::f32, kGpu);
  const double expected_loss = ops::cross_entropy(logits, targets).item();
  const std::vector<float> expected_rows = ops::embedding(table, indices).to_vector<float>();
  std::unique_ptr<CapturedGraph> graph = capture_graph(kGpu, [&] {
    loss.copy_(ops::cross_entropy(logits, targets));
    rows.copy_(ops::embedding(table, indices));
  });
  graph->replay();
  graph->synchronize();
  REQUIRE(loss.item() == expected_loss);
  REQUIRE(rows.to_vector<float>() == expected_rows);

  targets.copy_(Tensor::from_vector<int64_t>({1, 12, 4, 0}, {4}));
  graph->replay();
  REQUIRE_THROWS_WITH(graph->synchronize(), Catch::Contains("target 12 (row 1) is out of range for 10 classes") &&
                                                Catch::Contains("replay of a captured CUDA graph"));
  REQUIRE(std::isnan(loss.item()));  // the guarded kernel's NaN, not a read outside the row
  graph->synchronize();              // reported once
  // Found by replay() too, once the failed replay has finished: here an embedding index, whose row reads
  // as NaN meanwhile.
  targets.copy_(Tensor::from_vector<int64_t>({1, 9, 4, 0}, {4}));
  indices.copy_(Tensor::from_vector<int64_t>({7, -2, 3}, {3}));
  graph->replay();
  const std::vector<float> bad_rows = rows.to_vector<float>();  // waits for the replay
  REQUIRE(std::isnan(bad_rows[3]));
  REQUIRE(bad_rows[0] == expected_rows[0]);
  REQUIRE_THROWS_WITH(graph->replay(), Catch::Contains("index -2 (position 1) is out of range for a table of 8 rows"));
  // The failed replay() enqueued nothing; with the index fixed the graph works again.
  indices.copy_(Tensor::from_vector<int64_t>({7, 0, 3}, {3}));
  graph->replay();
  graph->synchronize();
  REQUIRE(loss.item() == expected_loss);
  REQUIRE(rows.to_vector<float>() == expected_rows);
}

TEST_CASE("CUDA graph: what a graph cannot hold is refused, and the device works after", "[cuda][graph]") {
  if (testing::gpu_missing("the CUDA graph refusal test")) return;
  const Tensor x = Tensor::full({256}, 2.0, DType::f32, kGpu);
  Tensor kept;
  REQUIRE_THROWS_WITH(capture_graph(kGpu, [&] { kept = ops::add(x, x); }),
                      Catch::Contains("1 buffer(s) the work allocated outlive it"));
  // The kept tensor's allocation went with the discarded graph: a buffer made before it is destroyed (which
  // may take its address) must survive its destruction and the allocations after.
  const Tensor before = Tensor::full({256}, 3.0, DType::f32, kGpu);
  kept = Tensor();
  const Tensor after = Tensor::full({256}, 5.0, DType::f32, kGpu);
  for (float value : before.to_vector<float>()) REQUIRE(value == 3.0f);
  for (float value : after.to_vector<float>()) REQUIRE(value == 5.0f);
  REQUIRE_THROWS_WITH(capture_graph(kGpu, [&] { (void)ops::add(x, x).to(kCPU); }),
                      Catch::Contains("a call that a CUDA graph cannot record"));
  REQUIRE_THROWS_WITH(capture_graph(kGpu, [&] { (void)capture_graph(kGpu, [] {}); }),
                      Catch::Contains("inside the work of another capture"));
  REQUIRE_THROWS_WITH(capture_graph(kGpu, [&] { throw DataError("the work's own error"); }),
                      Catch::Contains("the work's own error"));
  // Eager work after the refusals: on the legacy stream again, with the right result.
  for (float value : ops::add(x, x).to_vector<float>()) REQUIRE(value == 4.0f);
}
