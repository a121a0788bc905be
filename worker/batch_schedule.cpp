#include "worker/batch_schedule.h"

#include <algorithm>
#include <utility>

#include "ps/key_hash.h"

namespace parafab::worker {

BatchShare batch_share(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers) {
  BatchShare s;
  const uint64_t n_batches = (n_rows + batch_rows - 1) / batch_rows;
  for (uint64_t b = index; b < n_batches; b += workers) {
    s.batches.push_back(b);
    s.rows += std::min(n_rows, (b + 1) * batch_rows) - b * batch_rows;
  }
  s.clocks_per_epoch = (n_batches + workers - 1) / workers;
  return s;
}

BatchShare live_batch_share(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers,
                            const LiveWorkers& live) {
  if (!live) return batch_share(n_rows, batch_rows, index, workers);
  const std::vector<uint32_t> alive = live();
  const auto at = std::find(alive.begin(), alive.end(), index);
  if (at == alive.end()) return batch_share(n_rows, batch_rows, index, workers);
  return batch_share(n_rows, batch_rows, static_cast<uint32_t>(at - alive.begin()),
                     static_cast<uint32_t>(alive.size()));
}

EpochPlan plan_epoch(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers, const LiveWorkers& live,
                     bool shuffle, uint64_t seed, int epoch, uint64_t* skip_clocks) {
  const BatchShare share = live_batch_share(n_rows, batch_rows, index, workers, live);
  EpochPlan plan;
  plan.order = epoch_order(share.batches, shuffle, seed, epoch, index);
  plan.rows = share.rows;
  const uint64_t skipped = std::min(*skip_clocks, share.clocks_per_epoch);
  *skip_clocks -= skipped;
  plan.order.erase(plan.order.begin(),
                   plan.order.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(skipped, plan.order.size())));
  plan.idle_clocks = share.clocks_per_epoch - skipped - plan.order.size();
  return plan;
}

std::vector<uint32_t> adopted_parts(const std::vector<uint32_t>& live, uint32_t workers, uint32_t me) {
  std::vector<uint32_t> mine;
  const auto at = std::find(live.begin(), live.end(), me);
  if (at == live.end()) return mine;
  const auto position = static_cast<size_t>(at - live.begin());
  size_t j = 0;  // dead parts so far
  for (uint32_t part = 0; part < workers; ++part) {
    if (std::find(live.begin(), live.end(), part) != live.end()) continue;
    if (j % live.size() == position) mine.push_back(part);
    ++j;
  }
  return mine;
}

EpochBatches epoch_batches(const EpochPlan& plan, const std::vector<AdoptedPart>& adopted, uint64_t batch_rows,
                           bool shuffle, uint64_t seed, int epoch) {
  EpochBatches e;
  e.rows = plan.rows;
  for (const uint64_t b : plan.order) e.order.push_back({0, b});
  for (size_t i = 0; i < adopted.size(); ++i) {
    const BatchShare all = batch_share(adopted[i].rows, batch_rows, 0, 1);
    for (const uint64_t b : epoch_order(all.batches, shuffle, seed, epoch, adopted[i].part)) {
      e.order.push_back({i + 1, b});
    }
    e.rows += adopted[i].rows;
  }
  return e;
}

std::vector<uint64_t> epoch_order(const std::vector<uint64_t>& batches, bool shuffle, uint64_t seed, int epoch,
                                  uint32_t index) {
  std::vector<uint64_t> order = batches;
  if (!shuffle || epoch <= 1) return order;
  uint64_t s = ps::mix64(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch) * 7919 + index);
  for (size_t i = order.size(); i > 1; --i) {
    s = ps::mix64(s + 0x9e3779b97f4a7c15ULL);
    std::swap(order[i - 1], order[s % i]);
  }
  return order;
}

ProgressReporter::ProgressReporter(std::function<void(const TrainProgress&)> on_progress, double seconds,
                                   uint64_t epoch_examples)
    : on_progress_(std::move(on_progress)), seconds_(seconds), epoch_examples_(epoch_examples) {}

void ProgressReporter::start_epoch(int epoch) {
  epoch_ = epoch;
  epoch_start_ = Clock::now();
}

void ProgressReporter::start_epoch(int epoch, uint64_t epoch_examples) {
  epoch_examples_ = epoch_examples;
  start_epoch(epoch);
}

void ProgressReporter::update(uint64_t seen, double loss_sum, bool epoch_done) {
  if (!on_progress_) return;
  const auto now = Clock::now();
  if (!epoch_done && !(seconds_ > 0 && std::chrono::duration<double>(now - last_).count() >= seconds_)) return;
  last_ = now;
  const double es = std::chrono::duration<double>(now - epoch_start_).count();
  on_progress_(TrainProgress{epoch_, seen, epoch_examples_, seen ? loss_sum / static_cast<double>(seen) : 0,
                             std::chrono::duration<double>(now - start_).count(),
                             es > 0 ? static_cast<double>(seen) / es : 0, epoch_done});
}

}  // namespace parafab::worker
