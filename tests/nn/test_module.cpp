// Tests of src/nn/module.cpp and sequential.cpp: registration and dotted names in order, train/eval,
// in-place device moves and zero_grad that keep handles (so arena views survive), state dicts.
#include <memory>
#include <set>
#include <vector>

#include "opsnn/nn/nn.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::nn;

namespace {

// Conv2d(3 -> 4, 3x3, no bias) + BatchNorm2d(4) + ReLU + GlobalAvgPool + Linear(4 -> 2).
std::shared_ptr<Sequential> small_cnn(uint64_t seed) {
  Generator generator(seed);
  auto model = std::make_shared<Sequential>();
  model->push_back(std::make_shared<Conv2d>(Conv2dOptions(3, 4, 3).padding(1).bias(false), generator));
  model->push_back(std::make_shared<BatchNorm2d>(4));
  model->push_back(std::make_shared<ReLU>());
  model->push_back(std::make_shared<GlobalAvgPool>());
  model->push_back(std::make_shared<Linear>(4, 2, generator));
  return model;
}

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> names;
  for (const auto& entry : named) names.push_back(entry.first);
  return names;
}

// A custom module with its own parameter, a buffer and a child, registered in that order.
class Block : public Module {
 public:
  explicit Block(Generator& generator) : Module("Block") {
    scale = register_parameter("scale", Tensor::ones({2}));
    counter = register_buffer("counter", Tensor::zeros({1}, DType::i64));
    head = register_module("head", std::make_shared<Linear>(3, 2, generator));
  }
  Tensor scale, counter;
  std::shared_ptr<Linear> head;
};

}  // namespace

TEST_CASE("parameters and buffers are listed with dotted names in registration order", "[nn]") {
  auto model = small_cnn(1);
  CHECK(model->size() == 5);
  CHECK(names_of(model->named_parameters()) ==
        std::vector<std::string>{"0.weight", "1.weight", "1.bias", "4.weight", "4.bias"});
  CHECK(names_of(model->named_buffers()) == std::vector<std::string>{"1.running_mean", "1.running_var"});
  CHECK(model->parameters().size() == 5);
  CHECK(model->named_parameters(false).empty());  // Sequential owns none itself
  // The listed tensors are the layers' own handles, marked requires_grad and named for messages.
  auto conv = std::dynamic_pointer_cast<Conv2d>((*model)[0]);
  REQUIRE(conv);
  CHECK(model->parameters()[0].same(conv->weight()));
  CHECK_FALSE(conv->bias().defined());
  for (const auto& [name, tensor] : model->named_parameters()) {
    CHECK(tensor.requires_grad());
    CHECK(tensor.name() == name);
  }
  for (const auto& [name, tensor] : model->named_buffers()) {
    CHECK_FALSE(tensor.requires_grad());
    CHECK(tensor.name() == name);
  }
  CHECK(conv->weight().shape() == Shape{4, 3, 3, 3});
  CHECK(std::dynamic_pointer_cast<Linear>((*model)[4])->weight().shape() == Shape{2, 4});
  CHECK_THROWS_WITH((*model)[5], Catch::Contains("index 5") && Catch::Contains("5 modules"));
}

TEST_CASE("nested modules: own entries first, then children, names follow the full path", "[nn]") {
  Generator generator(3);
  auto root = std::make_shared<Module>("Root");
  auto features = root->register_module("features", small_cnn(2));
  auto block = root->register_module("block", std::make_shared<Block>(generator));
  root->register_parameter("temperature", Tensor::ones({1}));
  CHECK(names_of(root->named_parameters()) ==
        std::vector<std::string>{"temperature", "features.0.weight", "features.1.weight", "features.1.bias",
                                 "features.4.weight", "features.4.bias", "block.scale", "block.head.weight",
                                 "block.head.bias"});
  CHECK(names_of(root->named_buffers()) ==
        std::vector<std::string>{"features.1.running_mean", "features.1.running_var", "block.counter"});
  CHECK(names_of(root->named_parameters(false)) == std::vector<std::string>{"temperature"});
  CHECK(block->head->weight().name() == "block.head.weight");
  CHECK(features->parameters()[0].name() == "features.0.weight");
  std::vector<std::string> module_names;
  for (const auto& [name, module] : root->named_modules()) module_names.push_back(name + ":" + module->type_name());
  CHECK(module_names == std::vector<std::string>{"features:Sequential", "features.0:Conv2d", "features.1:BatchNorm2d",
                                                 "features.2:ReLU", "features.3:GlobalAvgPool", "features.4:Linear",
                                                 "block:Block", "block.head:Linear"});
  CHECK(root->named_children().size() == 2);
}

TEST_CASE("registration rejects bad names, non-leaves and duplicates", "[nn]") {
  Module module("Custom");
  module.register_parameter("w", Tensor::zeros({2}));
  CHECK_THROWS_WITH(module.register_parameter("w", Tensor::zeros({2})),
                    Catch::Contains("Custom") && Catch::Contains("'w'") && Catch::Contains("already used"));
  CHECK_THROWS_WITH(module.register_buffer("w", Tensor::zeros({2})), Catch::Contains("already used"));
  CHECK_THROWS_WITH(module.register_module("w", std::make_shared<ReLU>()), Catch::Contains("already used"));
  CHECK_THROWS_WITH(module.register_parameter("a.b", Tensor::zeros({2})), Catch::Contains("'a.b'"));
  CHECK_THROWS_WITH(module.register_parameter("", Tensor::zeros({2})), Catch::Contains("non-empty"));
  CHECK_THROWS_WITH(module.register_parameter("u", Tensor()), Catch::Contains("'u'"));
  CHECK_THROWS_WITH(module.register_parameter("i", Tensor::zeros({2}, DType::i64)), Catch::Contains("i64"));
  CHECK_THROWS_WITH(module.register_module("m", std::shared_ptr<ReLU>()), Catch::Contains("null"));
  // A parameter that does not require grad is still a parameter.
  Tensor frozen = module.register_parameter("frozen", Tensor::zeros({2}), false);
  CHECK_FALSE(frozen.requires_grad());
  CHECK(module.parameters().size() == 2);
  // The base forward explains itself.
  CHECK_THROWS_WITH(module.forward(Tensor::zeros({1})), Catch::Contains("Custom") && Catch::Contains("forward"));
}

TEST_CASE("registration refuses a submodule that already contains the parent (a cycle)", "[nn]") {
  auto outer = std::make_shared<Sequential>(), middle = std::make_shared<Sequential>();
  auto inner = std::make_shared<Sequential>();
  outer->push_back(middle);
  middle->push_back(inner);
  // Each of these closed a loop that named_parameters() and forward() followed until the stack overflowed.
  CHECK_THROWS_WITH(inner->push_back(outer), Catch::Contains("already contains this module"));
  CHECK_THROWS_WITH(middle->push_back(outer), Catch::Contains("cycle"));
  CHECK(inner->named_modules().empty());      // nothing registered
  CHECK(outer->named_modules().size() == 2);  // middle, inner
  // Sharing a module in two places is no cycle.
  auto shared = std::make_shared<ReLU>();
  outer->push_back(shared);
  middle->push_back(shared);
  CHECK(outer->named_modules().size() >= 3);
}

TEST_CASE("a tensor registered twice (tied weights) is listed once", "[nn]") {
  Module module("Tied");
  Tensor shared = Tensor::zeros({3});
  module.register_parameter("first", shared);
  auto child = std::make_shared<Module>("Child");
  child->register_parameter("second", shared);
  module.register_module("child", child);
  CHECK(names_of(module.named_parameters()) == std::vector<std::string>{"first"});
  StateDict state = module.state_dict();
  CHECK(state.size() == 2);
  CHECK(state.at("child.second").same(shared));
}

TEST_CASE("train and eval switch the whole tree", "[nn]") {
  Generator generator(4);
  auto root = std::make_shared<Module>("Root");
  auto model = root->register_module("features", small_cnn(5));
  auto block = root->register_module("block", std::make_shared<Block>(generator));
  CHECK(root->is_training());
  root->eval();
  CHECK_FALSE(root->is_training());
  CHECK_FALSE(model->is_training());
  CHECK_FALSE((*model)[1]->is_training());
  CHECK_FALSE(block->head->is_training());
  root->train();
  CHECK((*model)[1]->is_training());
  model->train(false);  // a subtree alone
  CHECK(root->is_training());
  CHECK_FALSE((*model)[4]->is_training());
}

TEST_CASE("to(cpu) keeps every handle, an absent GPU fails before anything moves", "[nn]") {
  auto model = small_cnn(6);
  std::vector<Tensor> before = model->parameters();
  std::vector<std::shared_ptr<Storage>> storages;
  for (const Tensor& tensor : before) storages.push_back(tensor.storage());
  model->to(kCPU);
  std::vector<Tensor> after = model->parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].same(before[i]));
    CHECK(after[i].storage() == storages[i]);
  }
  Device gpu(DeviceType::cuda, 0);
  if (cuda_device_count() == 0) {
    CHECK_THROWS_AS(model->to(gpu), DeviceError);
    CHECK(model->parameters()[0].device() == kCPU);
    return;
  }
  // With a GPU: moved in place, values kept, handles still the layer's own.
  std::vector<float> weight_values = before[0].to_vector<float>();
  before[0].set_grad(Tensor::ones(before[0].shape()));
  model->to(gpu);
  for (const Tensor& tensor : model->parameters()) CHECK(tensor.device() == gpu);
  for (const Tensor& tensor : model->buffers()) CHECK(tensor.device() == gpu);
  CHECK(before[0].device() == gpu);
  CHECK(before[0].grad().device() == gpu);
  CHECK(before[0].to_vector<float>() == weight_values);
  model->to(kCPU);
  CHECK(before[0].device() == kCPU);
}

TEST_CASE("zero_grad zeroes in place (arena views stay) or drops gradients", "[nn]") {
  auto model = small_cnn(7);
  std::vector<Tensor> parameters = model->parameters();
  auto arena = std::make_shared<Storage>(256 * sizeof(float), kCPU);
  Tensor grad_view = Tensor::view_of(arena, 0, parameters[1].shape(), DType::f32);
  grad_view.fill_(3.0);
  parameters[1].set_grad(grad_view);
  parameters[2].set_grad(Tensor::ones(parameters[2].shape()));
  parameters[0].row_sparse_grad().indices.push_back(Tensor::zeros({1}, DType::i64));
  parameters[0].row_sparse_grad().rows.push_back(Tensor::zeros({1, 27}));
  model->zero_grad();
  CHECK(parameters[1].grad().same(grad_view));
  CHECK(Tensor::view_of(arena, 0, {4}, DType::f32).to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(parameters[2].grad().to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(parameters[0].row_sparse_grad().empty());
  CHECK_FALSE(parameters[3].grad().defined());
  model->zero_grad(/*set_to_none=*/true);
  CHECK_FALSE(parameters[1].grad().defined());
  CHECK_FALSE(parameters[2].grad().defined());
}

TEST_CASE("parameters re-homed into one arena stay the module's parameters", "[nn]") {
  auto model = small_cnn(8);
  std::vector<Tensor> parameters = model->parameters();
  int64_t total = 0;
  for (const Tensor& p : parameters) total += p.numel();
  auto arena = std::make_shared<Storage>(static_cast<size_t>(total) * sizeof(float), kCPU);
  StateDict original;
  for (const auto& [name, tensor] : model->state_dict()) original[name] = tensor.clone();
  int64_t offset = 0;
  for (const Tensor& p : parameters) {
    p.rehome(arena, offset);
    offset += p.numel();
  }
  for (const auto& [name, tensor] : model->named_parameters()) {
    CHECK(tensor.storage() == arena);
    CHECK(tensor.to_vector<float>() == original.at(name).to_vector<float>());
  }
  // Loading a state dict writes through into the arena.
  StateDict state = model->state_dict();
  Tensor replacement = Tensor::full(state.at("4.bias").shape(), 0.25);
  model->load_state_dict({{"4.bias", replacement}}, /*strict=*/false);
  std::vector<float> arena_tail = Tensor::view_of(arena, total - 2, {2}, DType::f32).to_vector<float>();
  CHECK(arena_tail == std::vector<float>{0.25f, 0.25f});
}

TEST_CASE("state_dict round trip copies values into the existing tensors", "[nn]") {
  auto source = small_cnn(10);
  auto target = small_cnn(11);
  StateDict source_state = source->state_dict();
  CHECK(source_state.size() == 7);
  CHECK(source_state.count("1.running_var") == 1);
  CHECK(source_state.at("0.weight").same(source->parameters()[0]));  // handles, not copies
  REQUIRE(source_state.at("0.weight").to_vector<float>() != target->state_dict().at("0.weight").to_vector<float>());
  source_state.at("1.running_mean").fill_(0.5);

  std::vector<Tensor> target_handles = target->parameters();
  std::shared_ptr<Storage> target_storage = target_handles[0].storage();
  LoadStateDictResult result = target->load_state_dict(source_state);
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  for (const auto& [name, tensor] : target->state_dict())
    CHECK(tensor.to_vector<float>() == source_state.at(name).to_vector<float>());
  CHECK(target->parameters()[0].same(target_handles[0]));
  CHECK(target_handles[0].storage() == target_storage);
  CHECK_FALSE(target_handles[0].storage() == source_state.at("0.weight").storage());

  // Values of another dtype are converted on the way in.
  StateDict as_f64;
  for (const auto& [name, tensor] : source_state) as_f64[name] = tensor.to(DType::f64);
  as_f64.at("4.bias").fill_(-1.0);
  target->load_state_dict(as_f64);
  CHECK(std::dynamic_pointer_cast<Linear>((*target)[4])->bias().to_vector<float>() == std::vector<float>{-1, -1});
  CHECK(std::dynamic_pointer_cast<Linear>((*target)[4])->bias().dtype() == DType::f32);
}

TEST_CASE("load_state_dict errors name the keys and both shapes, and change nothing", "[nn]") {
  auto model = small_cnn(12);
  StateDict good = small_cnn(13)->state_dict();
  std::vector<float> before = model->parameters()[0].to_vector<float>();

  StateDict missing = good;
  missing.erase("4.weight");
  CHECK_THROWS_AS(model->load_state_dict(missing), DataError);
  CHECK_THROWS_WITH(model->load_state_dict(missing), Catch::Contains("missing keys: 4.weight"));

  StateDict extra = good;
  extra["5.weight"] = Tensor::zeros({1});
  CHECK_THROWS_WITH(model->load_state_dict(extra), Catch::Contains("unexpected keys: 5.weight"));

  StateDict both = missing;
  both["head.bias"] = Tensor::zeros({1});
  CHECK_THROWS_WITH(model->load_state_dict(both),
                    Catch::Contains("missing keys: 4.weight") && Catch::Contains("unexpected keys: head.bias"));

  StateDict wrong_shape = good;
  wrong_shape["4.weight"] = Tensor::zeros({3, 4});
  CHECK_THROWS_AS(model->load_state_dict(wrong_shape), ShapeError);
  CHECK_THROWS_WITH(model->load_state_dict(wrong_shape),
                    Catch::Contains("'4.weight'") && Catch::Contains("[3, 4]") && Catch::Contains("[2, 4]"));
  // Shapes are checked even when not strict.
  CHECK_THROWS_AS(model->load_state_dict(wrong_shape, false), ShapeError);
  CHECK(model->parameters()[0].to_vector<float>() == before);  // nothing copied by any failed load

  // Integer bits in a floating parameter (a safetensors header saying I32 for f32 data) would load as
  // garbage values; a float of another precision converts.
  StateDict wrong_dtype = good;
  wrong_dtype["4.bias"] = Tensor::zeros({2}, DType::i32);
  CHECK_THROWS_AS(model->load_state_dict(wrong_dtype), TypeError);
  CHECK_THROWS_WITH(model->load_state_dict(wrong_dtype),
                    Catch::Contains("dtype mismatch for '4.bias': state dict has i32, module has f32"));
  CHECK(model->parameters()[0].to_vector<float>() == before);
  StateDict other_float = good;
  other_float["4.bias"] = good.at("4.bias").to(DType::f64);
  CHECK_NOTHROW(model->load_state_dict(other_float));
  CHECK(model->state_dict().at("4.bias").to_vector<float>() == good.at("4.bias").to_vector<float>());
  model->load_state_dict(small_cnn(12)->state_dict());  // back to the starting weights

  // Not strict: the lists come back and the present keys are loaded.
  LoadStateDictResult result = model->load_state_dict(both, /*strict=*/false);
  CHECK(result.missing_keys == std::vector<std::string>{"4.weight"});
  CHECK(result.unexpected_keys == std::vector<std::string>{"head.bias"});
  CHECK(model->parameters()[0].to_vector<float>() == good.at("0.weight").to_vector<float>());
}

TEST_CASE("options have chained setters and modules print as a tree", "[nn]") {
  Conv2dOptions conv_options = Conv2dOptions(3, 16, 3).stride(2).padding(1).bias(false);
  CHECK(conv_options.in_channels() == 3);
  CHECK(conv_options.out_channels() == 16);
  CHECK(conv_options.kernel_size() == 3);
  CHECK(conv_options.stride() == 2);
  CHECK(conv_options.padding() == 1);
  CHECK_FALSE(conv_options.bias());
  CHECK(MaxPool2dOptions(3).stride() == 3);  // stride defaults to the kernel size
  CHECK(MaxPool2dOptions(3).stride(2).stride() == 2);
  CHECK(BatchNorm2dOptions(8).eps(1e-3).momentum(0.01).momentum() == 0.01);
  CHECK(EmbeddingOptions(10, 4).sparse(true).sparse());
  CHECK(LinearOptions(2, 3).bias(false).out_features() == 3);

  auto model = small_cnn(14);
  CHECK(model->str() ==
        "Sequential(\n"
        "  (0): Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=false)\n"
        "  (1): BatchNorm2d(4, eps=1e-05, momentum=0.1)\n"
        "  (2): ReLU()\n"
        "  (3): GlobalAvgPool()\n"
        "  (4): Linear(in_features=4, out_features=2, bias=true)\n"
        ")");
}

TEST_CASE("layer options are validated with the layer named", "[nn]") {
  Generator generator(15);
  CHECK_THROWS_WITH(Conv2d(Conv2dOptions(3, 4, 0), generator),
                    Catch::Contains("Conv2d") && Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(Conv2d(Conv2dOptions(3, 4, 3).padding(-1), generator), Catch::Contains("padding"));
  CHECK_THROWS_WITH(Linear(0, 4, generator), Catch::Contains("in_features"));
  CHECK_THROWS_WITH(BatchNorm2d(BatchNorm2dOptions(4).momentum(2.0)), Catch::Contains("momentum"));
  CHECK_THROWS_WITH(MaxPool2d(MaxPool2dOptions(2).padding(2)),
                    Catch::Contains("MaxPool2d") && Catch::Contains("padding"));
  CHECK_THROWS_WITH(Embedding(EmbeddingOptions(0, 4), generator), Catch::Contains("num_embeddings"));
  // Sequential names must stay unique.
  Sequential sequential;
  sequential.push_back("1", std::make_shared<ReLU>());
  CHECK_THROWS_WITH(sequential.push_back(std::make_shared<ReLU>()), Catch::Contains("'1'"));
}
