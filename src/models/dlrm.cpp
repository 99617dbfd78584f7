// The DLRM model on Criteo rows (models.h says what it computes): the dense features' transform and the
// categorical values' hashing on the host, the bottom MLP, the one shared embedding table with per-field
// row ranges, the dot interaction and the top MLP.
#include <algorithm>
#include <cmath>
#include <new>
#include <string>

#include "opsnn/core/error.h"
#include "opsnn/data/criteo.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/init.h"
#include "opsnn/nn/layers.h"
#include "opsnn/nn/sequential.h"
#include "opsnn/ops/ops.h"

namespace opsnn::models {
namespace {

constexpr int64_t kDense = data::kCriteoDenseFields, kCategorical = data::kCriteoCategoricalFields;

// Linear + ReLU layers of `widths` from `width` features; the last ReLU only with `relu_last`.
std::shared_ptr<nn::Sequential> make_mlp_stack(int64_t width, const std::vector<int64_t>& widths, bool relu_last,
                                               const char* key, Generator& generator) {
  auto mlp = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < widths.size(); ++i) {
    OPSNN_CHECK_AS(ConfigError, widths[i] >= 1, "model.", key, "[", i, "] must be at least 1, got ", widths[i]);
    mlp->push_back("fc" + std::to_string(i + 1), std::make_shared<nn::Linear>(width, widths[i], generator));
    if (relu_last || i + 1 < widths.size())
      mlp->push_back("relu" + std::to_string(i + 1), std::make_shared<nn::ReLU>());
    width = widths[i];
  }
  return mlp;
}

class DlrmModel : public nn::Module {
 public:
  DlrmModel(const ModelOptions& options, Generator& generator) : Module("DlrmModel") {
    const int64_t dim = options.embedding_dim;
    OPSNN_CHECK_AS(ConfigError, dim >= 1, "model.embedding_dim must be at least 1, got ", dim);
    const size_t given = options.hash_buckets.size();
    OPSNN_CHECK_AS(ConfigError, given == 1 || given == static_cast<size_t>(kCategorical),
                   "model.hash_buckets: give one row count for every categorical field or one for each of the ",
                   kCategorical, ", got ", given, " entries");
    int64_t rows = 0;
    for (int64_t f = 0; f < kCategorical; ++f) {
      const int64_t buckets = options.hash_buckets[given == 1 ? 0 : static_cast<size_t>(f)];
      OPSNN_CHECK_AS(ConfigError, buckets >= 1, "model.hash_buckets", given == 1 ? "" : detail::concat("[", f, "]"),
                     " must be at least 1, got ", buckets);
      offsets_.push_back(rows);
      buckets_.push_back(buckets);
      OPSNN_CHECK_AS(ConfigError, !__builtin_add_overflow(rows, buckets, &rows),
                     "model.hash_buckets: the fields' rows add up past a 64-bit count (at field C", f + 1, ")");
    }
    int64_t values = 0, bytes = 0;
    OPSNN_CHECK_AS(ConfigError,
                   !__builtin_mul_overflow(rows, dim, &values) && !__builtin_mul_overflow(values, int64_t{4}, &bytes),
                   "model.hash_buckets: ", rows, " table rows of model.embedding_dim ", dim,
                   " hold more bytes of f32 than a 64-bit count holds");
    OPSNN_CHECK_AS(ConfigError, !options.bottom_mlp.empty() && options.bottom_mlp.back() == dim,
                   "model.bottom_mlp must end in model.embedding_dim (", dim,
                   "): its output is the 27th vector of the dot interaction, beside the 26 embeddings; got ",
                   options.bottom_mlp.empty() ? std::string("[]") : std::to_string(options.bottom_mlp.back()));
    bottom_ = register_module("bottom_mlp", make_mlp_stack(kDense, options.bottom_mlp, true, "bottom_mlp", generator));
    try {
      embedding_ = register_module("embedding",
                                   std::make_shared<nn::Embedding>(
                                       nn::EmbeddingOptions(rows, dim).sparse(options.sparse_embeddings), generator));
    } catch (const std::bad_alloc&) {
      throw Error(detail::concat("model.hash_buckets: cannot allocate the embedding table of ", rows, " x ", dim, " = ",
                                 values, " values (", static_cast<double>(values) * 4.0 / (1 << 30), " GiB of f32)"));
    }
    // Each field's rows uniform in +-sqrt(1 / rows), as the reference implementation initialises its tables.
    for (int64_t f = 0; f < kCategorical; ++f) {
      const double bound = std::sqrt(1.0 / static_cast<double>(buckets_[static_cast<size_t>(f)]));
      Tensor field_rows = embedding_->weight().detach().slice(
          0, offsets_[static_cast<size_t>(f)], offsets_[static_cast<size_t>(f)] + buckets_[static_cast<size_t>(f)]);
      nn::init::uniform_(field_rows, -bound, bound, generator);
    }
    const int64_t features = kCategorical + 1;
    top_ = register_module(
        "top_mlp", make_mlp_stack(dim + features * (features - 1) / 2, options.top_mlp, true, "top_mlp", generator));
    const int64_t top_width = options.top_mlp.empty() ? dim + features * (features - 1) / 2 : options.top_mlp.back();
    head_ = register_module("head", std::make_shared<nn::Linear>(top_width, 2, generator));
  }

  // rows: i64 [B, 39] as criteo batches hold them -> logits [B, 2].
  Tensor forward(const Tensor& rows) override {
    OPSNN_CHECK_AS(ShapeError, rows.dim() == 2 && rows.size(1) == data::kCriteoFeatures,
                   "dlrm model: expected Criteo rows of shape [batch, ", data::kCriteoFeatures, "], got ",
                   shape_str(rows.shape()));
    OPSNN_CHECK_AS(TypeError, rows.dtype() == DType::i64, "dlrm model: rows must be i64, got ",
                   dtype_name(rows.dtype()));
    const int64_t batch = rows.size(0);
    Tensor host = rows.to(kCPU).contiguous();
    const int64_t* values = host.data<int64_t>();
    Tensor dense = Tensor::empty({batch, kDense}, DType::f32);
    Tensor ids = Tensor::empty({batch, kCategorical}, DType::i64);
    float* dense_values = dense.data<float>();
    int64_t* id_values = ids.data<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t* row = values + b * data::kCriteoFeatures;
      for (int64_t k = 0; k < kDense; ++k)  // kCriteoEmpty, like any value below 0, becomes log(1) = 0
        dense_values[b * kDense + k] =
            static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(row[k], 0))));
      for (int64_t f = 0; f < kCategorical; ++f)
        id_values[b * kCategorical + f] =
            offsets_[static_cast<size_t>(f)] + dlrm_hash(f, row[kDense + f], buckets_[static_cast<size_t>(f)]);
    }
    const Device device = rows.device();
    // The interaction and the head's input in f32 whatever the MLPs compute in.
    Tensor bottom = ops::cast(bottom_->forward(dense.to(device)), DType::f32);  // [B, D]
    Tensor embedded = embedding_->forward(ids.to(device));                      // [B, 26, D]
    Tensor vectors = ops::concat({ops::reshape(bottom, {batch, 1, bottom.size(1)}), embedded}, 1);
    Tensor joined = ops::concat({bottom, ops::dot_interaction(vectors)}, 1);  // [B, D + 351]
    return head_->forward(top_->forward(joined));
  }

 private:
  std::vector<int64_t> offsets_, buckets_;  // each field's first row and row count
  std::shared_ptr<nn::Sequential> bottom_, top_;
  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace

int64_t dlrm_hash(int64_t field, int64_t value, int64_t buckets) {
  OPSNN_CHECK(buckets >= 1, "dlrm_hash: buckets must be at least 1, got ", buckets);
  uint64_t x = static_cast<uint64_t>(value) + static_cast<uint64_t>(field + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int64_t>(x % static_cast<uint64_t>(buckets));
}

std::shared_ptr<nn::Module> make_dlrm(const ModelOptions& options, Generator& generator) {
  return std::make_shared<DlrmModel>(options, generator);
}

}  // namespace opsnn::models
