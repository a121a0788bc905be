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

namespace {

// The first `n` of `order` (clocks a resumed job skips) dropped.
void drop_front(std::vector<uint64_t>& order, uint64_t n) {
  order.erase(order.begin(), order.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(n, order.size())));
}

}  // namespace

EpochPlan plan_epoch(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers, bool shuffle,
                     uint64_t seed, int epoch, uint64_t* skip_clocks) {
  const BatchShare share = batch_share(n_rows, batch_rows, index, workers);
  EpochPlan plan;
  plan.order = epoch_order(share.batches, shuffle, seed, epoch, index);
  plan.rows = share.rows;
  plan.clocks = share.clocks_per_epoch;
  plan.skipped = std::min(*skip_clocks, share.clocks_per_epoch);
  *skip_clocks -= plan.skipped;
  drop_front(plan.order, plan.skipped);
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
  std::vector<std::vector<uint64_t>> orders = {plan.order};  // by part
  size_t clocks = plan.order.size();
  for (const AdoptedPart& a : adopted) {
    const BatchShare share = batch_share(a.rows, batch_rows, a.share_index, a.share_count);
    orders.push_back(epoch_order(share.batches, shuffle, seed, epoch, a.part));
    drop_front(orders.back(), plan.skipped);
    clocks = std::max(clocks, orders.back().size());
    e.rows += share.rows;
  }
  for (size_t j = 0; j < clocks; ++j) {
    for (size_t part = 0; part < orders.size(); ++part) {
      if (j < orders[part].size()) e.order.push_back({part, orders[part][j], false});
    }
    e.order.back().ends_clock = true;
  }
  // --partition parts differ in length: a longer adopted one gets no idle clocks.
  const uint64_t left = plan.clocks - plan.skipped;
  e.idle_clocks = left > clocks ? left - clocks : 0;
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
