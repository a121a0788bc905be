#include "worker/distributed_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <numeric>
#include <stdexcept>

#include "kernels/device_array.h"
#include "kernels/linear_gradient.h"
#include "worker/batch_schedule.h"

namespace parafab::worker {
namespace {

// One minibatch in local slots: the batch's distinct model slots become
// positions 0 … n-1 (keys[j] is the model slot of position j), so the
// kernels see a dense weight vector of n entries.
struct LocalBatch {
  std::vector<uint64_t> keys;  // model slots, sorted; the bias slot last when present
  std::vector<uint64_t> row_ptr;
  std::vector<uint32_t> cols;
  std::vector<float> vals;
  std::vector<float> labels;
  int64_t bias_position = -1;
};

LocalBatch make_batch(const SlotCsr& data, uint64_t lo, uint64_t hi, uint32_t bias_slot) {
  LocalBatch b;
  const uint64_t begin = data.row_ptr[lo], end = data.row_ptr[hi];
  b.keys.assign(data.cols.begin() + static_cast<int64_t>(begin), data.cols.begin() + static_cast<int64_t>(end));
  std::sort(b.keys.begin(), b.keys.end());
  b.keys.erase(std::unique(b.keys.begin(), b.keys.end()), b.keys.end());
  b.keys.push_back(bias_slot);  // slots are below dim == bias_slot: stays sorted
  b.bias_position = static_cast<int64_t>(b.keys.size() - 1);
  b.row_ptr.reserve(hi - lo + 1);
  b.row_ptr.push_back(0);
  b.cols.reserve(end - begin);
  for (uint64_t r = lo; r < hi; ++r) {
    for (uint64_t i = data.row_ptr[r]; i < data.row_ptr[r + 1]; ++i) {
      const auto it = std::lower_bound(b.keys.begin(), b.keys.end() - 1, uint64_t{data.cols[i]});
      b.cols.push_back(static_cast<uint32_t>(it - b.keys.begin()));
    }
    b.row_ptr.push_back(b.cols.size());
  }
  if (!data.vals.empty()) {
    b.vals.assign(data.vals.begin() + static_cast<int64_t>(begin), data.vals.begin() + static_cast<int64_t>(end));
  }
  b.labels.assign(data.labels.begin() + static_cast<int64_t>(lo), data.labels.begin() + static_cast<int64_t>(hi));
  return b;
}

void check(const rdma::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.to_string());
}

}  // namespace

DistributedTrainer::DistributedTrainer(KvClient& kv, const SlotMap& map, const DistributedTrainOptions& options,
                                       uint32_t worker_index, uint32_t workers)
    : kv_(kv), map_(map), options_(options), index_(worker_index), workers_(workers) {
  if (workers_ == 0 || index_ >= workers_) throw std::invalid_argument("worker index outside the job");
  if (options_.batch_rows == 0) throw std::invalid_argument("--batch-size must be >= 1");
  if (!(options_.l2 >= 0)) throw std::invalid_argument("--l2 must be >= 0");
}

std::vector<double> DistributedTrainer::train(const SlotCsr& data,
                                              const std::function<void(const TrainProgress&)>& on_progress) {
  const uint64_t n = data.rows();
  const uint64_t batch = options_.batch_rows;
  ProgressReporter report(on_progress, options_.progress_seconds, 0);
  std::vector<double> losses;
  const uint32_t bias = map_.bias_slot();
  uint64_t skip = options_.skip_clocks;
  uint64_t batches_done = 0;
  for (int epoch = 1; epoch <= options_.epochs; ++epoch) {
    const EpochPlan plan = plan_epoch(n, batch, index_, workers_, options_.shuffle, options_.seed, epoch, &skip);
    const PartedEpoch<SlotCsr> parted =
        epoch_over_parts(plan, data, options_.adopted_parts, batch, options_.shuffle, options_.seed, epoch);
    const std::vector<const SlotCsr*>& parts = parted.parts;
    const std::vector<PartBatch>& order = parted.batches.order;
    report.start_epoch(epoch, parted.batches.rows);
    double loss_sum = 0;
    uint64_t seen = 0;
    // Pull-ahead: batch k+1's weights are requested before batch k is
    // computed; always within one clock (a dead worker's batch beside this
    // worker's own, which in a fault-free run would not see this push either).
    auto prepare = [&](size_t k, LocalBatch& b, std::vector<float>& w) {
      const SlotCsr& part = *parts[order[k].part];
      const uint64_t lo = order[k].batch * batch, hi = std::min(part.rows(), lo + batch);
      b = make_batch(part, lo, hi, bias);
      w.assign(b.keys.size(), 0.0f);
      return kv_.pull(options_.table, b.keys, w.data());
    };
    LocalBatch cur, next;
    std::vector<float> w_cur, w_next;
    std::future<rdma::Status> pulled_cur, pulled_next;
    std::vector<std::future<rdma::Status>> pushes;
    if (!order.empty()) pulled_cur = prepare(0, cur, w_cur);
    for (size_t k = 0; k < order.size(); ++k) {
      const bool ahead = options_.pull_ahead || !order[k].ends_clock;
      if (ahead && k + 1 < order.size()) pulled_next = prepare(k + 1, next, w_next);
      check(pulled_cur.get(), "pull");
      const int64_t rows = static_cast<int64_t>(cur.labels.size());
      const int64_t slots = static_cast<int64_t>(cur.keys.size());
      kernels::DeviceArray<uint64_t> d_row_ptr(cur.row_ptr);
      kernels::DeviceArray<uint32_t> d_cols(cur.cols);
      kernels::DeviceArray<float> d_vals(cur.vals), d_labels(cur.labels), d_w(w_cur), d_grad(cur.keys.size());
      const kernels::CsrBatch cb{d_row_ptr.data(), d_cols.data(), cur.vals.empty() ? nullptr : d_vals.data(),
                                 d_labels.data(), rows, cur.bias_position};
      const double loss = kernels::linear_gradient(options_.loss, cb, d_w.data(), slots, options_.l2, d_grad.data(), nullptr);
      // The kernel gives the batch mean; the servers' AdaGrad/FTRL expect
      // per-example scale (the sum), as in single-process training.
      std::vector<float> grad = d_grad.to_host();
      for (float& g : grad) g *= static_cast<float>(rows);
      pushes.push_back(kv_.push(options_.table, cur.keys, grad));
      if (order[k].ends_clock) pushes.push_back(kv_.clock());
      // Keep a bounded number of pushes in flight; collect errors as they come.
      while (pushes.size() > 8) {
        check(pushes.front().get(), "push");
        pushes.erase(pushes.begin());
      }
      loss_sum += loss * static_cast<double>(rows);
      seen += static_cast<uint64_t>(rows);
      examples_ += static_cast<uint64_t>(rows);
      ++batches_done;
      if (options_.after_batch) options_.after_batch(batches_done);
      if (k + 1 < order.size()) {
        if (ahead) {
          std::swap(cur, next);
          std::swap(w_cur, w_next);
          pulled_cur = std::move(pulled_next);
        } else {
          pulled_cur = prepare(k + 1, cur, w_cur);
        }
      }
      report.update(seen, loss_sum, k + 1 == order.size());
    }
    // Equal clocks per epoch on every worker (BatchShare::clocks_per_epoch).
    for (uint64_t k = 0; k < parted.batches.idle_clocks; ++k) pushes.push_back(kv_.clock());
    for (auto& f : pushes) check(f.get(), "push");
    losses.push_back(seen ? loss_sum / static_cast<double>(seen) : 0);
  }
  return losses;
}

LinearModel DistributedTrainer::pull_model() {
  std::vector<uint64_t> keys(map_.slots_with_bias());
  std::iota(keys.begin(), keys.end(), uint64_t{0});
  LinearModel m;
  m.loss = options_.loss;
  m.map = map_;
  m.weights.assign(keys.size(), 0.0f);
  check(kv_.pull(options_.table, keys, m.weights.data()).get(), "pull of the model");
  return m;
}

}  // namespace parafab::worker
