#include "worker/local_trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/device_array.h"
#include "kernels/hogwild_sgd.h"
#include "kernels/linear_gradient.h"
#include "kernels/memory.h"
#include "kernels/metrics.h"
#include "parafab/config.h"
#include "ps/key_hash.h"
#include "worker/batch_schedule.h"
#include "worker/hot_slots.h"
#include "worker/parallel_ranges.h"

namespace parafab::worker {
namespace {

// The arrays of a SlotCsr in backend memory: on the host backend the vectors
// themselves (no copy), under CUDA device copies.
class BackendCsr {
 public:
  explicit BackendCsr(const SlotCsr& csr) : n_rows_(static_cast<int64_t>(csr.rows())) {
    if constexpr (PARAFAB_CUDA) {
      row_ptr_.upload(csr.row_ptr);
      cols_.upload(csr.cols);
      if (!csr.vals.empty()) vals_.upload(csr.vals);
      labels_.upload(csr.labels);
      base_ = {row_ptr_.data(), cols_.data(), csr.vals.empty() ? nullptr : vals_.data(), labels_.data(),
               n_rows_, -1};
    } else {
      base_ = {csr.row_ptr.data(), csr.cols.data(), csr.vals.empty() ? nullptr : csr.vals.data(),
               csr.labels.data(), n_rows_, -1};
    }
  }
  // Rows [begin, end). row_ptr holds absolute offsets, so a batch is a view.
  // cols, when given, replaces the columns (the same length, backend memory).
  kernels::CsrBatch rows(int64_t begin, int64_t end, int64_t bias_slot,
                         const uint32_t* cols = nullptr) const {
    kernels::CsrBatch b = base_;
    if (cols != nullptr) b.cols = cols;
    b.row_ptr += begin;
    b.labels += begin;
    b.n_rows = end - begin;
    b.bias_slot = bias_slot;
    return b;
  }
  int64_t n_rows() const { return n_rows_; }

 private:
  int64_t n_rows_;
  kernels::DeviceArray<uint64_t> row_ptr_;
  kernels::DeviceArray<uint32_t> cols_;
  kernels::DeviceArray<float> vals_;
  kernels::DeviceArray<float> labels_;
  kernels::CsrBatch base_;
};

// Hogwild with per-thread copies of the hot slots (TrainOptions::hot_slots):
// a batch runs in rounds of threads * merge_rows rows, each round one
// hogwild_sgd_parts call (a part per thread) and a merge of the copies.
// Host backend only: find_hot_slots writes its arrays on the host.
class HotCopyTrainer {
 public:
  HotCopyTrainer(const SlotCsr& data, const SlotMap& map, const TrainOptions& o, float* w, float* g2)
      : found_(find_hot_slots(data, map.bias_slot(), map.slots_with_bias(), o.hot_slots, o.threads)),
        n_slots_(static_cast<int64_t>(map.slots_with_bias())),
        parts_(o.threads),
        merge_rows_(static_cast<int64_t>(o.merge_rows)),
        w_(w),
        g2_(g2) {
    const auto n_hot = static_cast<int64_t>(found_.slots.size());
    const int64_t stride = (n_hot + 15) / 16 * 16;
    // Backend memory starts on a 64-byte line, so with the padded stride no
    // two parts' copies share one.
    copies_w_ = kernels::DeviceArray<float>(static_cast<size_t>(parts_ * stride));
    if (g2 != nullptr) copies_g2_ = kernels::DeviceArray<float>(static_cast<size_t>(parts_ * stride));
    hot_ = {n_hot, parts_, stride, copies_w_.data(), g2 != nullptr ? copies_g2_.data() : nullptr,
            /*average=*/!o.adagrad};
    kernels::fill_hot_copies(hot_, found_.slots.data(), w_, g2_);
  }

  // Rows [lo, hi); returns their progressive loss. The model is whole after.
  double train(const kernels::SgdParams& params, const BackendCsr& csr, int64_t lo, int64_t hi) {
    double loss = 0;
    const uint32_t* cols = found_.cols.size() == 0 ? nullptr : found_.cols.data();
    const int64_t bias = n_slots_;  // the bias is hot slot 0
    for (int64_t r = lo; r < hi; r += parts_ * merge_rows_) {
      const int64_t end = std::min(hi, r + parts_ * merge_rows_);
      loss += kernels::hogwild_sgd_parts(params, csr.rows(r, end, bias, cols), w_, g2_, n_slots_, hot_);
      kernels::merge_hot_copies(hot_, found_.slots.data(), w_, g2_);
    }
    return loss;
  }

 private:
  HotSlots found_;
  int64_t n_slots_;
  int64_t parts_;
  int64_t merge_rows_;
  float* w_;
  float* g2_;
  kernels::DeviceArray<float> copies_w_;
  kernels::DeviceArray<float> copies_g2_;
  kernels::HotCopies hot_;
};

void check_slots(const SlotCsr& data, const SlotMap& map, int threads) {
  if (data.row_ptr.size() != data.rows() + 1 || data.row_ptr.back() != data.cols.size() ||
      (!data.vals.empty() && data.vals.size() != data.cols.size()))
    throw std::invalid_argument("LocalTrainer: inconsistent CSR arrays");
  std::atomic<uint32_t> largest{0};
  parallel_ranges(data.cols.size(), threads, [&](size_t lo, size_t hi) {
    const uint32_t m = *std::max_element(data.cols.begin() + static_cast<ptrdiff_t>(lo),
                                         data.cols.begin() + static_cast<ptrdiff_t>(hi));
    uint32_t seen = largest.load(std::memory_order_relaxed);
    while (m > seen && !largest.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
    }
  });
  const auto limit = static_cast<uint32_t>(map.dim);
  if (!data.cols.empty() && largest.load() >= limit) {
    throw std::invalid_argument(fmt::format("LocalTrainer: slot {} outside the model's {} slots", largest.load(), limit));
  }
}

}  // namespace

struct LocalTrainer::State {
  kernels::DeviceArray<float> w;
  kernels::DeviceArray<float> g2;
};

void validate_train_options(const TrainOptions& o) {
  if (o.epochs < 0) throw std::invalid_argument(fmt::format("--epochs must be >= 0, got {}", o.epochs));
  if (o.threads < 1) throw std::invalid_argument(fmt::format("--threads must be >= 1, got {}", o.threads));
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw std::invalid_argument(fmt::format("--lr must be a positive number, got {}", o.lr));
  if (!(o.l2 >= 0) || !std::isfinite(o.l2)) throw std::invalid_argument(fmt::format("--l2 must be >= 0, got {}", o.l2));
  if (o.batch_rows < 1) throw std::invalid_argument("--batch-size must be >= 1");
  if (o.hot_slots > (uint64_t{1} << 20)) {
    throw std::invalid_argument(fmt::format("--hot-slots must be <= 1048576, got {}", o.hot_slots));
  }
  if (o.merge_rows < 1) throw std::invalid_argument("merge_rows must be >= 1");
}

LocalTrainer::LocalTrainer(const TrainOptions& options, const SlotMap& map)
    : options_(options), map_(map), state_(std::make_unique<State>()) {
  validate_train_options(options_);
  const std::vector<float> zeros(map_.slots_with_bias(), 0.0f);
  state_->w.upload(zeros);
  if (options_.adagrad) state_->g2.upload(zeros);
}

LocalTrainer::LocalTrainer(const LinearModel& model, const TrainOptions& options)
    : LocalTrainer([&] { TrainOptions o = options; o.loss = model.loss; return o; }(), model.map) {
  state_->w.upload(model.weights);
}

LocalTrainer::~LocalTrainer() = default;

std::vector<double> LocalTrainer::train(const SlotCsr& data,
                                        const std::function<void(const TrainProgress&)>& on_progress) {
  check_slots(data, map_, options_.threads);
  kernels::set_host_threads(options_.threads);
  const BackendCsr csr(data);
  const int64_t n = csr.n_rows();
  const int64_t batch = static_cast<int64_t>(options_.batch_rows);
  const int64_t n_batches = (n + batch - 1) / batch;
  std::vector<int64_t> order(n_batches);
  std::iota(order.begin(), order.end(), 0);

  kernels::SgdParams params;
  params.loss = options_.loss;
  params.lr = options_.lr;
  params.l2 = options_.l2;
  params.adagrad = options_.adagrad;

  const auto n_slots = static_cast<int64_t>(map_.slots_with_bias());
  std::unique_ptr<HotCopyTrainer> hot;
  if (!PARAFAB_CUDA && options_.threads > 1 && options_.hot_slots > 0 && n > 0 && options_.epochs > 0) {
    hot = std::make_unique<HotCopyTrainer>(data, map_, options_, state_->w.data(),
                                           options_.adagrad ? state_->g2.data() : nullptr);
  }

  ProgressReporter report(on_progress, options_.progress_seconds, static_cast<uint64_t>(n));
  std::vector<double> epoch_losses;
  for (int epoch = 1; epoch <= options_.epochs; ++epoch) {
    if (options_.shuffle && epoch > 1) {
      // Fisher-Yates with a counter-based stream: the same order for a seed
      // on every backend and thread count.
      uint64_t s = ps::mix64(options_.seed * 0x9e3779b97f4a7c15ULL + epoch);
      for (int64_t i = n_batches - 1; i > 0; --i) {
        s = ps::mix64(s + 0x9e3779b97f4a7c15ULL);
        std::swap(order[i], order[static_cast<int64_t>(s % static_cast<uint64_t>(i + 1))]);
      }
    }
    report.start_epoch(epoch);
    double loss_sum = 0;
    uint64_t seen = 0;
    for (int64_t b = 0; b < n_batches; ++b) {
      const int64_t lo = order[b] * batch, hi = std::min(n, lo + batch);
      loss_sum += hot ? hot->train(params, csr, lo, hi)
                      : kernels::hogwild_sgd(params, csr.rows(lo, hi, map_.bias_slot()), state_->w.data(),
                                             options_.adagrad ? state_->g2.data() : nullptr, n_slots);
      seen += static_cast<uint64_t>(hi - lo);
      report.update(seen, loss_sum, b + 1 == n_batches);
    }
    epoch_losses.push_back(n > 0 ? loss_sum / static_cast<double>(n) : 0);
  }
  return epoch_losses;
}

Evaluation LocalTrainer::evaluate(const SlotCsr& data, std::vector<float>* probabilities) const {
  check_slots(data, map_, options_.threads);
  kernels::set_host_threads(options_.threads);
  const BackendCsr csr(data);
  const auto n = static_cast<size_t>(csr.n_rows());
  Evaluation e;
  e.examples = n;
  kernels::DeviceArray<float> margins(n), probs(n);
  const kernels::CsrBatch all = csr.rows(0, csr.n_rows(), map_.bias_slot());
  kernels::linear_margins(all, state_->w.data(), margins.data());
  kernels::sigmoid(margins.data(), static_cast<int64_t>(n), probs.data());
  const float* labels = all.labels;
  e.log_loss = kernels::log_loss(probs.data(), labels, n);
  e.auc = kernels::roc_auc(margins.data(), labels, n);
  e.accuracy = kernels::accuracy(margins.data(), labels, n, 0.0f);
  // Hinge loss on the host: a cheap pass over n floats.
  const std::vector<float> m = margins.to_host();
  double hinge = 0;
  for (size_t i = 0; i < n; ++i) {
    const double y = data.labels[i] > 0.5f ? 1.0 : -1.0;
    hinge += std::max(0.0, 1.0 - y * m[i]);
  }
  e.hinge_loss = n ? hinge / static_cast<double>(n) : 0;
  if (probabilities) *probabilities = probs.to_host();
  return e;
}

LinearModel LocalTrainer::model() const {
  return LinearModel{options_.loss, map_, state_->w.to_host()};
}

}  // namespace parafab::worker
