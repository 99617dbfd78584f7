// The records behind ops::save_conv_algorithms / load_conv_algorithms (opsnn/ops/backend.h): one decided
// convolution each, in terms that mean the same in another process (the GPU's name, not its index).
// The CUDA backend keeps them in its algorithm cache and registers a store over it
// (src/ops/cuda/conv_algorithm_records.cpp); conv_algorithm_file.cpp converts them to and from JSON. Plain
// C++ (no CUDA headers).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/cuda/conv_algorithms.h"

namespace opsnn::ops {

struct ConvAlgorithmRecord {
  std::string device;         // the GPU's name, e.g. "NVIDIA H200"
  int64_t cudnn_version = 0;  // cudnnGetVersion() of the process that decided
  // The cache key: the convolution as conv2d passes it and the settings it was decided under.
  ConvDirection direction = ConvDirection::forward;
  Shape input, weight;
  Conv2dGeometry geometry;
  DType dtype = DType::f32;
  int math = 0;  // the cudnnMathType_t the dtype and f32 math setting allowed
  ConvLoweringPolicy policy = ConvLoweringPolicy::measured;
  bool deterministic_setting = true;  // set_conv_deterministic at the decision
  ConvAlgorithmChoice choice;         // what runs
};

class ConvAlgorithmStore {
 public:
  virtual ~ConvAlgorithmStore() = default;
  // Every decision this process made or loaded.
  virtual std::vector<ConvAlgorithmRecord> records() = 0;
  // Adds the records that apply to this process's GPUs (a DataError naming `origin` and entry i for a
  // record that cannot run: an algorithm cuDNN does not have, a lowering that does not apply).
  virtual ConvAlgorithmLoad insert(const std::vector<ConvAlgorithmRecord>& records, const std::string& origin) = 0;
};

// Called once by the CUDA backend's registration; without it saving gives no entries and loading
// applies none.
void register_conv_algorithm_store(std::unique_ptr<ConvAlgorithmStore> store);

}  // namespace opsnn::ops
