// The consistency rule (DESIGN.md, "Consistency") and the clock table a
// server keeps to enforce it.
//
// A worker's clock c_w is the number of iterations it has finished; it ticks
// every server after its pushes for an iteration. Under SSP(s) a pull sent
// by a worker at clock c is answered only when min_w c_w >= c - s: the
// worker then sees every worker's updates from iterations 0 … c-s-1 (and
// maybe more), and always its own, since a server handles each worker's
// messages in the order sent. BSP is s = 0; ASP has no bound. A worker
// declared dead leaves the minimum.
//
//   auto model = ps::ConsistencyModel::parse("ssp:4");
//   ps::ClockTable clocks(num_workers);
//   if (model.allows(pull_clock, clocks.min_clock())) answer(); else park();
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace parafab::ps {

struct ConsistencyModel {
  enum class Kind : uint8_t { kBsp, kSsp, kAsp };
  Kind kind = Kind::kBsp;
  int64_t staleness = 0;  // s; 0 for BSP, unused for ASP

  // "bsp", "asp", "ssp:S" (S >= 0). Throws std::invalid_argument naming the text.
  static ConsistencyModel parse(std::string_view text);
  std::string to_string() const;
  // May a pull sent at `pull_clock` be answered when the slowest live worker is at `min_clock`?
  bool allows(int64_t pull_clock, int64_t min_clock) const {
    return kind == Kind::kAsp || min_clock >= pull_clock - staleness;
  }
};

class ClockTable {
 public:
  explicit ClockTable(uint32_t workers);

  enum class TickResult { kAdvanced, kMinAdvanced, kStale, kUnknownWorker };
  // Worker `w` reports clock `c`. Clocks only move forward: an older or
  // equal clock is kStale (a duplicate), a worker out of range or dead
  // kUnknownWorker. kMinAdvanced when the minimum moved.
  TickResult tick(uint32_t worker, int64_t clock);
  // The dead worker no longer holds the minimum back.
  void remove(uint32_t worker);

  // Over live workers; the maximum int64 when none is left.
  int64_t min_clock() const { return min_; }
  int64_t clock(uint32_t worker) const { return clocks_.at(worker); }
  bool live(uint32_t worker) const { return worker < live_.size() && live_[worker]; }
  uint32_t workers() const { return static_cast<uint32_t>(clocks_.size()); }

 private:
  void recompute_min();

  std::vector<int64_t> clocks_;
  std::vector<bool> live_;
  int64_t min_ = 0;
};

// Staleness of answered pulls: bucket k counts pulls answered when the
// slowest worker was k clocks behind the puller (the last bucket: k or more).
class StalenessHistogram {
 public:
  explicit StalenessHistogram(size_t buckets = 32) : counts_(buckets, 0) {}
  void record(int64_t pull_clock, int64_t min_clock);
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t total() const;
  int64_t max_seen() const { return max_; }

 private:
  std::vector<uint64_t> counts_;
  int64_t max_ = 0;
};

}  // namespace parafab::ps
