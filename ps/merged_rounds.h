// BSP's rounds: the pushes every worker sends for one clock, summed per key
// (sparse tables) and per row range (dense tables), so that a server applies
// a whole round as one updater step per key: what one process does with one
// minibatch of the job, however many workers computed its parts. Applying
// each push as a step of its own instead (SSP, and `ssp:0`) gives a stateful
// updater (AdaGrad, Adam, FTRL) W steps a round, each from the same weights.
//
//   ps::MergedRounds rounds;
//   rounds.add_sparse(clock, worker, table, keys, grads, width);  // summed
//   ...                                                           // every worker's push of `clock`
//   rounds.take_before(clocks.min_clock(), sink);  // rounds every live worker ended, oldest first
//
// A round is the clock in the push's header (the pusher's clock: the
// iterations it had finished), so round c holds iteration c's pushes and is
// complete once the minimum clock is past c. Keys are handed out in the
// order they first arrived, each once; dense ranges likewise, a range summed
// only with pushes of exactly the same rows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace parafab::ps {

class MergedRounds {
 public:
  // Where take_before hands a round's sums: each sparse table's keys (unique)
  // with keys.size() x width gradients, each dense range with rows x width.
  struct Sink {
    std::function<void(uint32_t table, std::span<const uint64_t> keys, const float* grads)> sparse;
    std::function<void(uint32_t table, uint64_t first_row, uint64_t rows, const float* grads)> dense;
  };

  // grads: keys.size() x width (sparse), rows x width (dense). Duplicate
  // keys within one push are summed too.
  void add_sparse(int64_t clock, uint32_t worker, uint32_t table, std::span<const uint64_t> keys, const float* grads,
                  uint32_t width);
  void add_dense(int64_t clock, uint32_t worker, uint32_t table, uint64_t first_row, uint64_t rows,
                 const float* grads, uint32_t width);

  // Hands every round with a clock below `clock` to `sink`, oldest first,
  // and drops it. Returns the number of rounds handed out.
  size_t take_before(int64_t clock, const Sink& sink);
  // The newest round holding a push of `worker`, if any: a pull of that
  // worker must not be answered before it is applied (read-my-writes).
  std::optional<int64_t> newest_of(uint32_t worker) const;

  bool empty() const { return rounds_.empty(); }
  size_t rounds() const { return rounds_.size(); }
  // Gradient floats held, over every round.
  size_t floats() const { return floats_; }

 private:
  // A table's sums in a round: keys in first-arrival order, and an
  // open-addressing index over them (linear probing on mix64(key), at most
  // half full; 1 + the key's position, 0 empty): one probe a key, no
  // allocation per key (std::unordered_map measured 63 ns a key).
  struct SparseSum {
    std::vector<uint32_t> index;
    std::vector<uint64_t> keys;
    std::vector<float> grads;  // keys.size() x width
    // The key's position in keys, appending it (with zero gradients) when new.
    uint32_t position(uint64_t key, uint32_t width);
  };
  struct DenseSum {
    uint32_t table = 0;
    uint64_t first_row = 0, rows = 0;
    std::vector<float> grads;  // rows x width
  };
  struct Round {
    std::map<uint32_t, SparseSum> sparse;  // by table id
    std::vector<DenseSum> dense;           // in first-arrival order
    std::vector<uint32_t> workers;         // who pushed into it
  };
  Round& round_of(int64_t clock, uint32_t worker);

  std::map<int64_t, Round> rounds_;
  size_t floats_ = 0;
};

}  // namespace parafab::ps
