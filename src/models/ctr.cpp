// The click-through-rate model: one embedding table shared by all categorical fields (each field's ids
// offset into its own rows), row-sparse gradients by default, the field embeddings concatenated into an
// MLP that outputs two logits (no click / click), trained with cross-entropy.
#include <numeric>

#include "opsnn/core/error.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/layers.h"
#include "opsnn/nn/sequential.h"
#include "opsnn/ops/ops.h"

namespace opsnn::models {
namespace {

class CtrModel : public nn::Module {
 public:
  CtrModel(const ModelOptions& options, Generator& generator) : Module("CtrModel") {
    OPSNN_CHECK_AS(ConfigError, !options.field_vocab_sizes.empty(),
                   "model.field_vocab_sizes: the ctr model needs at least one field");
    OPSNN_CHECK_AS(ConfigError, options.embedding_dim >= 1, "model.embedding_dim must be at least 1, got ",
                   options.embedding_dim);
    int64_t rows = 0;
    for (size_t f = 0; f < options.field_vocab_sizes.size(); ++f) {
      OPSNN_CHECK_AS(ConfigError, options.field_vocab_sizes[f] >= 1, "model.field_vocab_sizes[", f,
                     "] must be at least 1, got ", options.field_vocab_sizes[f]);
      field_offsets_.push_back(rows);
      field_sizes_.push_back(options.field_vocab_sizes[f]);
      OPSNN_CHECK_AS(ConfigError, !__builtin_add_overflow(rows, options.field_vocab_sizes[f], &rows),
                     "model.field_vocab_sizes: the fields' rows add up past a 64-bit count (at field ", f, ")");
    }
    embedding_ = register_module(
        "embedding",
        std::make_shared<nn::Embedding>(
            nn::EmbeddingOptions(rows, options.embedding_dim).sparse(options.sparse_embeddings), generator));
    auto mlp = std::make_shared<nn::Sequential>();
    int64_t width = options.embedding_dim * static_cast<int64_t>(field_sizes_.size());
    for (size_t i = 0; i < options.hidden.size(); ++i) {
      OPSNN_CHECK_AS(ConfigError, options.hidden[i] >= 1, "model.hidden[", i, "] must be at least 1, got ",
                     options.hidden[i]);
      mlp->push_back("fc" + std::to_string(i + 1), std::make_shared<nn::Linear>(width, options.hidden[i], generator));
      mlp->push_back("relu" + std::to_string(i + 1), std::make_shared<nn::ReLU>());
      width = options.hidden[i];
    }
    mlp->push_back("head", std::make_shared<nn::Linear>(width, 2, generator));
    mlp_ = register_module("mlp", mlp);
  }

  // ids: i64 [B, F], each in [0, vocab of its field) -> logits [B, 2].
  Tensor forward(const Tensor& ids) override {
    OPSNN_CHECK_AS(ShapeError, ids.dim() == 2 && ids.size(1) == static_cast<int64_t>(field_sizes_.size()),
                   "ctr model: expected ids of shape [batch, ", field_sizes_.size(), "], got ", shape_str(ids.shape()));
    OPSNN_CHECK_AS(TypeError, ids.dtype() == DType::i64, "ctr model: ids must be i64, got ", dtype_name(ids.dtype()));
    Tensor host = ids.to(kCPU).contiguous().clone();
    int64_t* values = host.data<int64_t>();
    int64_t fields = static_cast<int64_t>(field_sizes_.size());
    for (int64_t i = 0; i < host.numel(); ++i) {
      int64_t field = i % fields;
      OPSNN_CHECK_AS(DataError, values[i] >= 0 && values[i] < field_sizes_[static_cast<size_t>(field)],
                     "ctr model: id ", values[i], " of field ", field, " is outside [0, ",
                     field_sizes_[static_cast<size_t>(field)], ")");
      values[i] += field_offsets_[static_cast<size_t>(field)];
    }
    Tensor embedded = embedding_->forward(host.to(ids.device()));  // [B, F, D]
    return mlp_->forward(ops::flatten(embedded, 1));
  }

 private:
  std::vector<int64_t> field_offsets_, field_sizes_;
  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::Sequential> mlp_;
};

}  // namespace

std::shared_ptr<nn::Module> make_ctr(const ModelOptions& options, Generator& generator) {
  return std::make_shared<CtrModel>(options, generator);
}

}  // namespace opsnn::models
