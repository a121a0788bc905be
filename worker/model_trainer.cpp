#include "worker/model_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kernels/device_array.h"
#include "kernels/embedding.h"
#include "kernels/fm_gradient.h"
#include "kernels/linear_gradient.h"
#include "kernels/metrics.h"
#include "kernels/mlp.h"
#include "worker/batch_schedule.h"

namespace parafab::worker {
namespace {

void check(const rdma::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.to_string());
}

constexpr size_t kStalenessBuckets = 33;  // 0 .. 31, and 32 or more

}  // namespace

// One minibatch in local slots: the batch's distinct model slots are
// positions 0 … n-1 (keys[j] is the slot of position j).
struct ModelTrainer::Batch {
  std::vector<uint64_t> keys;
  std::vector<uint64_t> row_ptr;
  std::vector<uint32_t> cols;
  std::vector<float> vals;  // empty: all ones
  std::vector<uint8_t> fields;
  std::vector<float> labels;
  std::vector<float> dense;  // rows x dense_dim
  int64_t bias_position = -1;
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

struct ModelTrainer::Params {
  std::vector<float> sparse;  // keys x sparse width
  std::vector<float> mlp;     // the MLP's flat parameters (kernels/mlp.h layout)
  int64_t data_clock = 0;
  std::vector<std::future<rdma::Status>> dense;
};

ModelTrainer::ModelTrainer(ParameterStore& store, const ModelSpec& spec, const SlotMap& map,
                           const ModelTrainOptions& options, uint32_t worker_index, uint32_t workers, bool remote)
    : store_(store),
      spec_(spec),
      bias_key_(map.bias_slot()),
      options_(options),
      index_(worker_index),
      workers_(workers),
      remote_(remote) {
  if (workers_ == 0 || index_ >= workers_) throw std::invalid_argument("worker index outside the job");
  if (options_.batch_rows == 0) throw std::invalid_argument("--batch-size must be >= 1");
  if (!(options_.l2 >= 0)) throw std::invalid_argument("--l2 must be >= 0");
  staleness_.histogram.assign(kStalenessBuckets, 0);
}

void ModelTrainer::make_batch(const ModelRows& data, uint64_t lo, uint64_t hi, Batch& b) const {
  const SlotCsr& s = data.sparse;
  const uint64_t begin = s.row_ptr[lo], end = s.row_ptr[hi];
  b.keys.assign(s.cols.begin() + static_cast<int64_t>(begin), s.cols.begin() + static_cast<int64_t>(end));
  std::sort(b.keys.begin(), b.keys.end());
  b.keys.erase(std::unique(b.keys.begin(), b.keys.end()), b.keys.end());
  const size_t n_features = b.keys.size();
  b.bias_position = -1;
  if (spec_.kind == ModelKind::kFm) {
    // The bias slot is above every feature slot: appending keeps keys sorted.
    b.keys.push_back(bias_key_);
    b.bias_position = static_cast<int64_t>(n_features);
  }
  b.row_ptr.assign(1, 0);
  b.cols.clear();
  b.cols.reserve(end - begin);
  for (uint64_t r = lo; r < hi; ++r) {
    for (uint64_t i = s.row_ptr[r]; i < s.row_ptr[r + 1]; ++i) {
      const auto it = std::lower_bound(b.keys.begin(), b.keys.begin() + static_cast<int64_t>(n_features),
                                       uint64_t{s.cols[i]});
      b.cols.push_back(static_cast<uint32_t>(it - b.keys.begin()));
    }
    b.row_ptr.push_back(b.cols.size());
  }
  b.vals.clear();
  if (!s.vals.empty()) b.vals.assign(s.vals.begin() + static_cast<int64_t>(begin), s.vals.begin() + static_cast<int64_t>(end));
  b.fields.clear();
  if (!data.fields.empty()) {
    b.fields.assign(data.fields.begin() + static_cast<int64_t>(begin), data.fields.begin() + static_cast<int64_t>(end));
  }
  b.labels.assign(s.labels.begin() + static_cast<int64_t>(lo), s.labels.begin() + static_cast<int64_t>(hi));
  const uint64_t D = data.dense_dim;
  b.dense.assign(data.dense.begin() + static_cast<int64_t>(lo * D), data.dense.begin() + static_cast<int64_t>(hi * D));
}

std::future<rdma::Status> ModelTrainer::pull(const Batch& b, Params& p) {
  const uint32_t w = spec_.sparse_width();
  p.sparse.resize(b.keys.size() * w);
  p.dense.clear();
  // The sparse pull first: a one-sided store reads the MLP before it returns.
  std::future<rdma::Status> sparse = store_.pull(0, b.keys, p.sparse.data(), &p.data_clock);
  if (spec_.kind == ModelKind::kDnn) {
    const kernels::MlpShape shape = spec_.mlp_shape();
    p.mlp.resize(static_cast<size_t>(kernels::mlp_parameter_count(shape)));
    int in = shape.input;
    std::vector<int> outs = shape.hidden;
    outs.push_back(shape.outputs);
    size_t offset = 0;
    std::vector<DenseSlice> slices;  // each layer's weights, then its biases
    for (size_t l = 0; l < outs.size(); ++l) {
      const uint64_t rows = static_cast<uint64_t>(outs[l]);
      slices.push_back({static_cast<uint32_t>(1 + 2 * l), 0, rows, p.mlp.data() + offset});
      offset += rows * static_cast<uint64_t>(in);
      slices.push_back({static_cast<uint32_t>(2 + 2 * l), 0, rows, p.mlp.data() + offset});
      offset += rows;
      in = outs[l];
    }
    p.dense.push_back(store_.dense_pull_many(slices));
  }
  return sparse;
}

// The MLP's input rows: each row's field embeddings (gathered on the
// backend) then its dense inputs. Waits for the MLP's pulls.
std::vector<float> ModelTrainer::mlp_input(const Batch& b, const kernels::FieldCsr& fc, const float* d_embeddings,
                                           Params& p) {
  const int64_t rows = b.rows();
  const int64_t emb_cols = int64_t{spec_.n_fields} * spec_.embedding_dim;
  const int64_t D = static_cast<int64_t>(spec_.dense_dim);
  const int64_t in = emb_cols + D;
  std::vector<float> x(static_cast<size_t>(rows * in));
  if (emb_cols > 0) {
    kernels::DeviceArray<float> d_emb(static_cast<size_t>(rows * emb_cols));
    kernels::embedding_gather(fc, d_embeddings, spec_.embedding_dim, d_emb.data());
    const std::vector<float> emb = d_emb.to_host();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(&x[r * in], &emb[r * emb_cols], emb_cols * sizeof(float));
  }
  // Without dense inputs b.dense is empty: no b.dense[0] (a reference through
  // its null data()), no memcpy from null (undefined even for 0 bytes), no x[rows * in].
  if (D > 0) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(x.data() + r * in + emb_cols, b.dense.data() + r * D, D * sizeof(float));
  }
  for (auto& f : p.dense) check(f.get(), "pull of the MLP");
  return x;
}

double ModelTrainer::step(const Batch& b, Params& p, std::vector<std::future<rdma::Status>>& pushes) {
  const int64_t rows = b.rows();
  const int64_t n_keys = static_cast<int64_t>(b.keys.size());
  // Staleness of the data this gradient is computed from, in clocks.
  double scale = 1.0;
  if (remote_) {
    const int64_t tau = std::max<int64_t>(0, store_.current_clock() - p.data_clock);
    ++staleness_.histogram[std::min<size_t>(static_cast<size_t>(tau), kStalenessBuckets - 1)];
    if (options_.staleness_aware) scale = 1.0 / static_cast<double>(std::max<int64_t>(1, tau));
  }
  scale_sum_ += scale;
  ++scale_count_;
  staleness_.mean_scale = scale_sum_ / static_cast<double>(scale_count_);

  kernels::DeviceArray<uint64_t> d_row_ptr(b.row_ptr);
  kernels::DeviceArray<uint32_t> d_cols(b.cols);
  kernels::DeviceArray<float> d_vals(b.vals), d_labels(b.labels), d_params(p.sparse), d_grad(p.sparse.size());
  double loss = 0;
  std::vector<float> sparse_grad;
  std::vector<float> mlp_grad;
  if (spec_.kind == ModelKind::kFm) {
    const kernels::CsrBatch cb{d_row_ptr.data(), d_cols.data(), b.vals.empty() ? nullptr : d_vals.data(),
                               d_labels.data(), rows, b.bias_position};
    loss = kernels::fm_gradient(cb, d_params.data(), n_keys, spec_.factors, options_.l2, d_grad.data(), nullptr);
    sparse_grad = d_grad.to_host();
    // The kernel gives the batch mean; AdaGrad at the servers takes the
    // per-example sum, as for the linear models.
    const float s = static_cast<float>(rows * scale);
    for (float& g : sparse_grad) g *= s;
  } else {
    const kernels::MlpShape shape = spec_.mlp_shape();
    const int d = spec_.embedding_dim, F = spec_.n_fields;
    const int64_t emb_cols = int64_t{F} * d;
    const int64_t in = shape.input;
    kernels::DeviceArray<uint8_t> d_fields(b.fields);
    const kernels::FieldCsr fc{d_row_ptr.data(), d_cols.data(), b.vals.empty() ? nullptr : d_vals.data(),
                               d_fields.data(), rows, F};
    const std::vector<float> x = mlp_input(b, fc, d_params.data(), p);
    kernels::DeviceArray<float> d_x(x), d_mlp(p.mlp), d_mlp_grad(p.mlp.size()), d_gx(x.size());
    loss = kernels::mlp_forward_backward(shape, d_mlp.data(), d_x.data(), d_labels.data(), rows, d_mlp_grad.data(),
                                         emb_cols > 0 ? d_gx.data() : nullptr, nullptr);
    mlp_grad = d_mlp_grad.to_host();
    if (scale != 1.0) {
      for (float& g : mlp_grad) g *= static_cast<float>(scale);
    }
    if (emb_cols > 0) {
      const std::vector<float> gx = d_gx.to_host();
      std::vector<float> g_emb(static_cast<size_t>(rows * emb_cols));
      for (int64_t r = 0; r < rows; ++r) std::memcpy(&g_emb[r * emb_cols], &gx[r * in], emb_cols * sizeof(float));
      kernels::DeviceArray<float> d_gemb(g_emb);
      // grad_input is of the batch-mean loss: scale to the per-example sum (AdaGrad).
      kernels::embedding_scatter_add(fc, d_gemb.data(), d, n_keys, static_cast<float>(rows * scale), d_grad.data());
      sparse_grad = d_grad.to_host();
    }
  }
  if (!sparse_grad.empty()) pushes.push_back(store_.push(0, b.keys, sparse_grad));
  if (spec_.kind == ModelKind::kDnn) {
    const kernels::MlpShape shape = spec_.mlp_shape();
    int in = shape.input;
    std::vector<int> outs = shape.hidden;
    outs.push_back(shape.outputs);
    size_t offset = 0;
    for (size_t l = 0; l < outs.size(); ++l) {
      const uint64_t r = static_cast<uint64_t>(outs[l]);
      const uint64_t nw = r * static_cast<uint64_t>(in);
      pushes.push_back(store_.dense_push(static_cast<uint32_t>(1 + 2 * l), 0, r,
                                         std::span<const float>(mlp_grad.data() + offset, nw)));
      offset += nw;
      pushes.push_back(store_.dense_push(static_cast<uint32_t>(2 + 2 * l), 0, r,
                                         std::span<const float>(mlp_grad.data() + offset, r)));
      offset += r;
      in = outs[l];
    }
  }
  return loss;
}

std::vector<double> ModelTrainer::train(const ModelRows& data,
                                        const std::function<void(const TrainProgress&)>& on_progress) {
  const uint64_t n = data.rows();
  const uint64_t batch = options_.batch_rows;
  ProgressReporter report(on_progress, options_.progress_seconds, 0);
  std::vector<double> losses;
  uint64_t batches_done = 0;
  uint64_t skip = options_.skip_clocks;
  const bool ahead = remote_ && options_.pull_ahead;
  for (int epoch = 1; epoch <= options_.epochs; ++epoch) {
    const EpochPlan plan = plan_epoch(n, batch, index_, workers_, options_.shuffle, options_.seed, epoch, &skip);
    const PartedEpoch<ModelRows> parted =
        epoch_over_parts(plan, data, options_.adopted_parts, batch, options_.shuffle, options_.seed, epoch);
    const std::vector<const ModelRows*>& parts = parted.parts;
    const std::vector<PartBatch>& order = parted.batches.order;
    report.start_epoch(epoch, parted.batches.rows);
    double loss_sum = 0;
    uint64_t seen = 0;
    auto prepare = [&](size_t k, Batch& b, Params& p) {
      const ModelRows& part = *parts[order[k].part];
      const uint64_t lo = order[k].batch * batch, hi = std::min(part.rows(), lo + batch);
      make_batch(part, lo, hi, b);
      return pull(b, p);
    };
    Batch cur, next;
    Params p_cur, p_next;
    std::future<rdma::Status> pulled_cur, pulled_next;
    std::vector<std::future<rdma::Status>> pushes;
    if (!order.empty()) pulled_cur = prepare(0, cur, p_cur);
    for (size_t k = 0; k < order.size(); ++k) {
      // Within one clock (a dead worker's batch beside this worker's own)
      // the next pull never waits for this push: in a fault-free run that
      // batch's worker would not have seen it either.
      const bool ahead_k = ahead || (remote_ && !order[k].ends_clock);
      if (ahead_k && k + 1 < order.size()) pulled_next = prepare(k + 1, next, p_next);
      check(pulled_cur.get(), "pull");
      const double loss = step(cur, p_cur, pushes);
      if (order[k].ends_clock) pushes.push_back(store_.clock());
      while (pushes.size() > 16) {
        check(pushes.front().get(), "push");
        pushes.erase(pushes.begin());
      }
      loss_sum += loss * static_cast<double>(cur.rows());
      seen += static_cast<uint64_t>(cur.rows());
      examples_ += static_cast<uint64_t>(cur.rows());
      ++batches_done;
      if (options_.after_batch) options_.after_batch(batches_done);
      if (k + 1 < order.size()) {
        if (ahead_k) {
          std::swap(cur, next);
          std::swap(p_cur, p_next);
          pulled_cur = std::move(pulled_next);
        } else {
          // Without pull-ahead the next pull must see this batch's pushes.
          for (auto& f : pushes) check(f.get(), "push");
          pushes.clear();
          pulled_cur = prepare(k + 1, cur, p_cur);
        }
      }
      report.update(seen, loss_sum, k + 1 == order.size());
    }
    // Equal clocks per epoch on every worker (BatchShare::clocks_per_epoch).
    for (uint64_t k = 0; k < parted.batches.idle_clocks; ++k) pushes.push_back(store_.clock());
    for (auto& f : pushes) check(f.get(), "push");
    losses.push_back(seen ? loss_sum / static_cast<double>(seen) : 0);
  }
  return losses;
}

void ModelTrainer::predict(const Batch& b, Params& p, float* probs) {
  const int64_t rows = b.rows();
  kernels::DeviceArray<uint64_t> d_row_ptr(b.row_ptr);
  kernels::DeviceArray<uint32_t> d_cols(b.cols);
  kernels::DeviceArray<float> d_vals(b.vals), d_params(p.sparse);
  if (spec_.kind == ModelKind::kFm) {
    const kernels::CsrBatch cb{d_row_ptr.data(), d_cols.data(), b.vals.empty() ? nullptr : d_vals.data(), nullptr,
                               rows, b.bias_position};
    kernels::DeviceArray<float> m(static_cast<size_t>(rows)), pr(static_cast<size_t>(rows));
    kernels::fm_margins(cb, d_params.data(), spec_.factors, m.data());
    kernels::sigmoid(m.data(), rows, pr.data());
    const std::vector<float> h = pr.to_host();
    std::copy(h.begin(), h.end(), probs);
    return;
  }
  const kernels::MlpShape shape = spec_.mlp_shape();
  kernels::DeviceArray<uint8_t> d_fields(b.fields);
  const kernels::FieldCsr fc{d_row_ptr.data(), d_cols.data(), b.vals.empty() ? nullptr : d_vals.data(),
                             d_fields.data(), rows, spec_.n_fields};
  kernels::DeviceArray<float> d_x(mlp_input(b, fc, d_params.data(), p)), d_mlp(p.mlp), d_probs(static_cast<size_t>(rows * spec_.outputs()));
  kernels::mlp_predict(shape, d_mlp.data(), d_x.data(), rows, d_probs.data());
  const std::vector<float> h = d_probs.to_host();
  std::copy(h.begin(), h.end(), probs);
}

Evaluation ModelTrainer::evaluate(const ModelRows& data, std::vector<float>* probabilities) {
  const uint64_t n = data.rows();
  const int K = spec_.outputs();
  std::vector<float> probs(n * static_cast<uint64_t>(K));
  constexpr uint64_t kEvalRows = 4096;
  Batch b;
  Params p;
  for (uint64_t lo = 0; lo < n; lo += kEvalRows) {
    const uint64_t hi = std::min(n, lo + kEvalRows);
    make_batch(data, lo, hi, b);
    check(pull(b, p).get(), "pull for evaluation");
    predict(b, p, probs.data() + lo * static_cast<uint64_t>(K));
  }
  Evaluation e;
  e.examples = n;
  const std::vector<float>& labels = data.sparse.labels;
  if (K == 1) {
    kernels::DeviceArray<float> d_p(probs), d_y(labels);
    e.log_loss = kernels::log_loss(d_p.data(), d_y.data(), n);
    e.auc = kernels::roc_auc(d_p.data(), d_y.data(), n);
    e.accuracy = kernels::accuracy(d_p.data(), d_y.data(), n, 0.5f);
  } else {
    double ce = 0;
    uint64_t right = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const float* pi = probs.data() + i * static_cast<uint64_t>(K);
      const int y = static_cast<int>(labels[i]);
      ce -= std::log(std::clamp(static_cast<double>(pi[y]), 1e-15, 1.0));
      right += static_cast<int>(std::max_element(pi, pi + K) - pi) == y;
    }
    e.log_loss = n ? ce / static_cast<double>(n) : 0;
    e.accuracy = n ? static_cast<double>(right) / static_cast<double>(n) : std::nan("");
    e.auc = std::nan("");
    e.multiclass = true;
  }
  if (probabilities != nullptr) *probabilities = std::move(probs);
  return e;
}

SavedModel ModelTrainer::gather(const ModelRows& train, const SlotMap& map) {
  SavedModel m;
  m.spec = spec_;
  m.map = map;
  m.keys.assign(train.sparse.cols.begin(), train.sparse.cols.end());
  if (spec_.kind == ModelKind::kFm) m.keys.push_back(bias_key_);
  std::sort(m.keys.begin(), m.keys.end());
  m.keys.erase(std::unique(m.keys.begin(), m.keys.end()), m.keys.end());
  const uint64_t w = spec_.sparse_width();
  m.values.resize(m.keys.size() * w);
  constexpr size_t kChunk = 1 << 18;  // keys per pull
  for (size_t i = 0; i < m.keys.size(); i += kChunk) {
    const size_t n = std::min(kChunk, m.keys.size() - i);
    check(store_.pull(0, std::span<const uint64_t>(m.keys.data() + i, n), m.values.data() + i * w).get(),
          "pull of the model");
  }
  if (spec_.kind == ModelKind::kDnn) {
    Batch empty;
    Params p;
    check(pull(empty, p).get(), "pull of the model");
    for (auto& f : p.dense) check(f.get(), "pull of the MLP");
    m.mlp = std::move(p.mlp);
  }
  return m;
}

SavedModel ModelTrainer::gather_all_slots(const SlotMap& map) {
  SavedModel m;
  m.spec = spec_;
  m.map = map;
  const ps::TableSchema& t = store_.table(0);
  const uint64_t w = t.width;
  constexpr uint64_t kChunk = 1 << 18;
  std::vector<uint64_t> keys;
  std::vector<float> values, init(w);
  for (uint64_t lo = 0; lo < map.slots_with_bias(); lo += kChunk) {
    const uint64_t n = std::min(kChunk, map.slots_with_bias() - lo);
    keys.resize(n);
    for (uint64_t i = 0; i < n; ++i) keys[i] = lo + i;
    values.resize(n * w);
    check(store_.pull(0, keys, values.data()).get(), "pull of the model");
    for (uint64_t i = 0; i < n; ++i) {
      ps::initialize_value(t.init, keys[i], init.data(), static_cast<uint32_t>(w));
      if (std::memcmp(init.data(), values.data() + i * w, w * sizeof(float)) == 0) continue;
      m.keys.push_back(keys[i]);
      m.values.insert(m.values.end(), values.begin() + static_cast<int64_t>(i * w),
                      values.begin() + static_cast<int64_t>((i + 1) * w));
    }
  }
  if (spec_.kind == ModelKind::kDnn) {
    Batch empty;
    Params p;
    check(pull(empty, p).get(), "pull of the model");
    for (auto& f : p.dense) check(f.get(), "pull of the MLP");
    m.mlp = std::move(p.mlp);
  }
  return m;
}

}  // namespace parafab::worker
