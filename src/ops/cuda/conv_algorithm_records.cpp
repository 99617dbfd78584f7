// The CUDA backend's convolution algorithm cache (conv_search.h) as records, behind
// ops::save_conv_algorithms / load_conv_algorithms (src/ops/conv_algorithm_store.h): records() lists every
// decision made or loaded, naming the GPU instead of its index; insert() refuses (DataError) an entry that
// cannot run - a lowering that does not apply, an algorithm or math type cuDNN does not have, a workspace
// larger than the GPU - and adds the others to the cache of each GPU of this process with the recorded
// name, when the cuDNN version is the recorded one (the rest count as skipped).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "ops/conv_algorithm_store.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/conv_search.h"
#include "ops/cuda/cuda_backend.h"

namespace opsnn::ops {
namespace {

using namespace detail;  // conv_search.h: the cache, its keys and lowering_for

// The name and memory of each GPU of this process, by index (one properties query each, no context).
struct GpuIdentity {
  std::string name;
  size_t memory_bytes;
};
std::vector<GpuIdentity> gpu_identities() {
  std::vector<GpuIdentity> gpus;
  for (int d = 0; d < cuda_device_count(); ++d) {
    cudaDeviceProp properties{};
    OPSNN_CUDA_CHECK(cudaGetDeviceProperties(&properties, d));
    gpus.push_back({properties.name, properties.totalGlobalMem});
  }
  return gpus;
}

int algorithm_count(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward:
      return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case ConvDirection::backward_input:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case ConvDirection::backward_weight:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

class CudaConvAlgorithmStore final : public ConvAlgorithmStore {
 public:
  std::vector<ConvAlgorithmRecord> records() override {
    std::vector<std::pair<ConvKey, ConvAlgorithmChoice>> entries;
    {
      AlgorithmCache& cache = algorithm_cache();
      std::lock_guard<std::mutex> lock(cache.mutex);
      entries.assign(cache.entries.begin(), cache.entries.end());
    }
    std::vector<ConvAlgorithmRecord> out;
    out.reserve(entries.size());
    const std::vector<GpuIdentity> gpus = entries.empty() ? std::vector<GpuIdentity>() : gpu_identities();
    for (const auto& [key, choice] : entries) {
      ConvAlgorithmRecord r;
      r.device = gpus.at(static_cast<size_t>(key.device)).name;
      r.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
      r.direction = key.direction;
      r.input = Shape(key.input.begin(), key.input.end());
      r.weight = Shape(key.weight.begin(), key.weight.end());
      r.geometry = {key.geometry[0], key.geometry[1], key.geometry[2], key.geometry[3], key.channels_last};
      r.dtype = key.dtype;
      r.math = key.math;
      r.policy = key.policy;
      r.deterministic_setting = key.deterministic;
      r.choice = choice;
      out.push_back(std::move(r));
    }
    return out;
  }

  ConvAlgorithmLoad insert(const std::vector<ConvAlgorithmRecord>& records, const std::string& origin) override {
    const std::vector<GpuIdentity> gpus = gpu_identities();
    const int64_t cudnn_version = static_cast<int64_t>(cudnnGetVersion());
    ConvAlgorithmLoad load;
    AlgorithmCache& cache = algorithm_cache();
    for (size_t i = 0; i < records.size(); ++i) {
      const ConvAlgorithmRecord& r = records[i];
      const ConvAlgorithmChoice& c = r.choice;
      auto fail = [&](const char* field, auto&&... parts) {
        throw DataError(opsnn::detail::concat(origin, ": field \"entries[", i, "].", field, "\": ", parts...));
      };
      // What would run wrongly rather than fail: a lowering where it does not apply (the granule follows
      // the math the entry was decided under: TF32 tensor cores for f32 only with CUDNN_DEFAULT_MATH).
      const int64_t granule = r.dtype != DType::f32 ? 8 : (r.math == CUDNN_DEFAULT_MATH ? 4 : 0);
      if (c.lowering != ConvLowering::cudnn && lowering_for(r.input, r.weight, r.geometry, granule) != c.lowering)
        fail("lowering", "this lowering does not apply to the entry's convolution");
      if (c.algorithm >= algorithm_count(r.direction))
        fail("algorithm", c.algorithm, " is not a cuDNN algorithm of this direction (there are ",
             algorithm_count(r.direction), ")");
      if (c.math > CUDNN_FMA_MATH) fail("math_type", c.math, " is not a cudnnMathType_t");
      bool applied = false;
      for (int d = 0; d < static_cast<int>(gpus.size()); ++d) {
        if (gpus[d].name != r.device || cudnn_version != r.cudnn_version) continue;
        if (c.workspace_bytes > gpus[d].memory_bytes)
          fail("workspace_bytes", c.workspace_bytes, " is more than the GPU's ", gpus[d].memory_bytes, " bytes");
        const ConvKey key =
            key_of(r.direction, d, r.input, r.weight, r.geometry, r.dtype, r.math, r.policy, r.deterministic_setting);
        std::lock_guard<std::mutex> lock(cache.mutex);
        applied = cache.entries.emplace(key, c).second || applied;
      }
      (applied ? load.applied : load.skipped) += 1;
    }
    return load;
  }
};

}  // namespace

std::unique_ptr<ConvAlgorithmStore> make_cuda_conv_algorithm_store() {
  return std::make_unique<CudaConvAlgorithmStore>();
}

}  // namespace opsnn::ops
