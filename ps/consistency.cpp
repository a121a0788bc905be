#include "ps/consistency.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <stdexcept>

namespace parafab::ps {

ConsistencyModel ConsistencyModel::parse(std::string_view text) {
  if (text == "bsp") return {Kind::kBsp, 0};
  if (text == "asp") return {Kind::kAsp, 0};
  if (text.substr(0, 4) == "ssp:") {
    const std::string_view num = text.substr(4);
    int64_t s = -1;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), s);
    if (ec == std::errc() && end == num.data() + num.size() && s >= 0) return {Kind::kSsp, s};
  }
  throw std::invalid_argument("consistency '" + std::string(text) + "': expected bsp, asp or ssp:S with S >= 0");
}

std::string ConsistencyModel::to_string() const {
  switch (kind) {
    case Kind::kBsp: return "bsp";
    case Kind::kAsp: return "asp";
    case Kind::kSsp: return "ssp:" + std::to_string(staleness);
  }
  return "unknown";
}

ClockTable::ClockTable(uint32_t workers) : clocks_(workers, 0), live_(workers, true) {
  if (workers == 0) min_ = std::numeric_limits<int64_t>::max();
}

ClockTable::TickResult ClockTable::tick(uint32_t worker, int64_t clock) {
  if (!live(worker)) return TickResult::kUnknownWorker;
  if (clock <= clocks_[worker]) return TickResult::kStale;
  const bool was_min = clocks_[worker] == min_;
  clocks_[worker] = clock;
  if (!was_min) return TickResult::kAdvanced;
  const int64_t before = min_;
  recompute_min();
  return min_ > before ? TickResult::kMinAdvanced : TickResult::kAdvanced;
}

void ClockTable::remove(uint32_t worker) {
  if (!live(worker)) return;
  live_[worker] = false;
  recompute_min();
}

void ClockTable::recompute_min() {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (live_[w]) m = std::min(m, clocks_[w]);
  }
  min_ = m;
}

void StalenessHistogram::record(int64_t pull_clock, int64_t min_clock) {
  const int64_t behind = std::max<int64_t>(0, pull_clock - min_clock);
  max_ = std::max(max_, behind);
  counts_[static_cast<size_t>(std::min<int64_t>(behind, static_cast<int64_t>(counts_.size()) - 1))]++;
}

uint64_t StalenessHistogram::total() const { return std::accumulate(counts_.begin(), counts_.end(), uint64_t{0}); }

}  // namespace parafab::ps
