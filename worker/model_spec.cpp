#include "worker/model_spec.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "worker/feature_hashing.h"

namespace parafab::worker {
namespace {

bool is_dense_input(uint64_t key, uint32_t dense_dim) {
  return dense_dim > 0 && key >= 1 && key <= dense_dim;  // libsvm indices: namespace 0
}

}  // namespace

ModelSpec ModelSpec::fm(int factors) {
  if (factors < 0 || factors > 256) throw std::invalid_argument(fmt::format("--factors {}: must be in [0, 256]", factors));
  ModelSpec s;
  s.kind = ModelKind::kFm;
  s.factors = factors;
  return s;
}

ModelSpec ModelSpec::dnn(const DatasetView& train, int embedding_dim, std::vector<int> hidden, int classes,
                         uint32_t dense_dim) {
  std::array<bool, 256> seen{};
  for (uint64_t key : train.keys) {
    if (!is_dense_input(key, dense_dim)) seen[feature_namespace(key)] = true;
  }
  return dnn_with_fields(seen, embedding_dim, std::move(hidden), classes, dense_dim);
}

std::array<bool, 256> ModelSpec::fields_of_format(bool criteo) {
  std::array<bool, 256> seen{};
  if (criteo) {
    for (int ns = 1; ns <= 39; ++ns) seen[ns] = true;
  } else {
    seen[0] = true;
  }
  return seen;
}

ModelSpec ModelSpec::dnn_with_fields(const std::array<bool, 256>& seen, int embedding_dim, std::vector<int> hidden,
                                     int classes, uint32_t dense_dim) {
  if (embedding_dim < 1 || embedding_dim > 1024) {
    throw std::invalid_argument(fmt::format("--embedding-dim {}: must be in [1, 1024]", embedding_dim));
  }
  if (classes < 2) throw std::invalid_argument(fmt::format("--classes {}: must be >= 2", classes));
  for (int h : hidden) {
    if (h < 1) throw std::invalid_argument(fmt::format("--hidden: a layer of {} units (must be >= 1)", h));
  }
  ModelSpec s;
  s.kind = ModelKind::kDnn;
  s.embedding_dim = embedding_dim;
  s.hidden = std::move(hidden);
  s.classes = classes;
  s.dense_dim = dense_dim;
  s.field_of_namespace.fill(-1);
  for (int ns = 0; ns < 256; ++ns) {
    if (seen[ns]) s.field_of_namespace[ns] = static_cast<int16_t>(s.n_fields++);
  }
  if (s.n_fields == 0 && dense_dim == 0) {
    throw std::invalid_argument("dnn: the training data has no features (no fields and --dense-features 0)");
  }
  return s;
}

uint32_t ModelSpec::sparse_width() const {
  return kind == ModelKind::kFm ? static_cast<uint32_t>(1 + factors) : static_cast<uint32_t>(embedding_dim);
}

kernels::MlpShape ModelSpec::mlp_shape() const {
  kernels::MlpShape m;
  m.input = n_fields * embedding_dim + static_cast<int>(dense_dim);
  m.hidden = hidden;
  m.outputs = outputs();
  return m;
}

std::vector<ps::TableSchema> ModelSpec::tables(const SlotMap& /*map*/) const {
  std::vector<ps::TableSchema> t;
  ps::TableSchema sparse;
  sparse.id = 0;
  sparse.kind = ps::TableKind::kSparse;
  sparse.width = sparse_width();
  sparse.init.kind = ps::InitializerKind::kNormal;
  sparse.init.stddev = hyper.init_stddev;
  sparse.init.seed = hyper.seed;
  sparse.updater.kind = hyper.sparse_updater;
  if (hyper.sparse_updater == ps::UpdaterKind::kFtrl) {
    sparse.updater.ftrl_alpha = hyper.ftrl_alpha;
    sparse.updater.ftrl_beta = hyper.ftrl_beta;
    sparse.updater.ftrl_l1 = hyper.ftrl_l1;
    sparse.updater.ftrl_l2 = hyper.ftrl_l2;
  } else {
    sparse.updater.learning_rate = hyper.sparse_lr;
    sparse.updater.l2 = hyper.l2;
  }
  if (hyper.init_stddev == 0.0f) sparse.init = {};
  t.push_back(sparse);
  if (kind == ModelKind::kDnn) {
    const kernels::MlpShape m = mlp_shape();
    int in = m.input;
    std::vector<int> outs = m.hidden;
    outs.push_back(m.outputs);
    for (size_t l = 0; l < outs.size(); ++l) {
      ps::TableSchema w;
      w.id = static_cast<uint32_t>(1 + 2 * l);
      w.kind = ps::TableKind::kDense;
      w.width = static_cast<uint32_t>(in);
      w.rows = static_cast<uint64_t>(outs[l]);
      w.init.kind = ps::InitializerKind::kNormal;
      // He for ReLU layers; the output layer's logits start small (1/in).
      w.init.stddev = static_cast<float>(l + 1 < outs.size() ? std::sqrt(2.0 / in) : std::sqrt(1.0 / in));
      w.init.seed = hyper.seed + 1000 + l;
      w.updater.kind = ps::UpdaterKind::kAdam;
      w.updater.learning_rate = hyper.dense_lr;
      ps::TableSchema b = w;
      b.id = w.id + 1;
      b.width = 1;
      b.init = {};
      t.push_back(w);
      t.push_back(b);
      in = outs[l];
    }
  }
  return t;
}

std::string ModelSpec::describe() const {
  if (kind == ModelKind::kFm && factors == 0 && hyper.sparse_updater == ps::UpdaterKind::kFtrl) {
    return fmt::format("lr (FTRL-Proximal: alpha {}, beta {}, l1 {}, l2 {})", hyper.ftrl_alpha, hyper.ftrl_beta,
                       hyper.ftrl_l1, hyper.ftrl_l2);
  }
  if (kind == ModelKind::kFm) return fmt::format("fm with {} factors", factors);
  std::string h;
  for (int x : hidden) h += (h.empty() ? "" : ",") + std::to_string(x);
  return fmt::format("dnn: {} field{} x {}-dim embeddings + {} dense inputs -> MLP [{}] -> {}", n_fields,
                     n_fields == 1 ? "" : "s", embedding_dim, dense_dim, h.empty() ? "none" : h,
                     classes > 2 ? fmt::format("softmax over {} classes", classes) : std::string("sigmoid"));
}

ModelRows build_model_rows(const DatasetView& data, const SlotMap& map, const ModelSpec& spec, int threads) {
  ModelRows r;
  const int K = spec.kind == ModelKind::kDnn ? spec.classes : 2;
  for (size_t i = 0; i < data.rows(); ++i) {
    const float y = data.labels[i];
    if (!(y >= 0 && y < K && y == std::floor(y))) {
      throw std::invalid_argument(fmt::format("row {}: label {} is not a class of the model (0 .. {})", i + 1, y, K - 1));
    }
  }
  if (spec.kind == ModelKind::kFm) {
    r.sparse = SlotCsr::build(data, map, threads);
    r.dropped = r.sparse.dropped;
    return r;
  }
  const uint32_t D = spec.dense_dim;
  r.dense_dim = D;
  r.dense.assign(data.rows() * D, 0.0f);
  SlotCsr& s = r.sparse;
  s.labels.assign(data.labels.begin(), data.labels.end());
  s.row_ptr.reserve(data.rows() + 1);
  s.row_ptr.push_back(0);
  s.cols.reserve(data.nnz());
  s.vals.reserve(data.nnz());
  r.fields.reserve(data.nnz());
  bool all_ones = true;
  for (size_t i = 0; i < data.rows(); ++i) {
    const auto keys = data.row_keys(i);
    const auto vals = data.row_values(i);
    for (size_t j = 0; j < keys.size(); ++j) {
      const uint64_t key = keys[j];
      if (is_dense_input(key, D)) {
        r.dense[i * D + (key - 1)] += vals[j];
        continue;
      }
      const int field = spec.field_of_namespace[feature_namespace(key)];
      const uint32_t slot = map.slot(key);
      if (field < 0 || slot == SlotMap::kDropped) {
        ++r.dropped;
        continue;
      }
      s.cols.push_back(slot);
      s.vals.push_back(vals[j]);
      all_ones = all_ones && vals[j] == 1.0f;
      r.fields.push_back(static_cast<uint8_t>(field));
    }
    s.row_ptr.push_back(s.cols.size());
  }
  if (all_ones) s.vals.clear();
  s.dropped = r.dropped;
  return r;
}

}  // namespace parafab::worker
