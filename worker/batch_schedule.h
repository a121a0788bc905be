// The minibatch bookkeeping the trainers share: which batches a worker
// takes, their order in each epoch, and when to report progress.
//
//   worker::BatchShare share = worker::batch_share(rows, 256, worker_index, workers);
//   worker::ProgressReporter report(on_progress, options.progress_seconds, share.rows);
//   for (int epoch = 1; epoch <= epochs; ++epoch) {
//     report.start_epoch(epoch);
//     for (uint64_t b : worker::epoch_order(share.batches, shuffle, seed, epoch, worker_index)) {
//       ...; report.update(seen, loss_sum, /*done=*/last);
//     }
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "worker/local_trainer.h"

namespace parafab::worker {

struct BatchShare {
  std::vector<uint64_t> batches;  // indices of this worker's batches, ascending
  uint64_t rows = 0;              // rows in them
  // Clocks every worker ticks per epoch: the largest share, so that no
  // worker's clock stays behind for want of batches (under SSP that would
  // hold the others' pulls back for good).
  uint64_t clocks_per_epoch = 0;
};

// Batch b covers rows [b * batch_rows, (b + 1) * batch_rows) of n_rows; a
// worker takes the batches whose index modulo workers is its index.
BatchShare batch_share(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers);

// The job's live workers, ascending (one declared dead is left out); a null
// function: all of them, always.
using LiveWorkers = std::function<std::vector<uint32_t>()>;

// The share of worker `index` among the live workers: its position among
// them and their count take the place of index and workers, so when a
// worker has died the survivors divide every batch again (the trainers ask
// at each epoch's start). A worker not in the list keeps its own share.
BatchShare live_batch_share(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers,
                            const LiveWorkers& live);

// One epoch of a worker, as both trainers run it: its live share's batches
// in the epoch's order, less those a resumed job already did (the first
// *skip_clocks clocks of the run; *skip_clocks is decreased by the clocks
// this epoch skips), and the clocks it ticks after them without a batch, so
// that every worker ticks the share's clocks_per_epoch in all.
struct EpochPlan {
  std::vector<uint64_t> order;  // batch indices, to train in this order
  uint64_t rows = 0;            // rows of the whole share (for progress)
  uint64_t idle_clocks = 0;
};
EpochPlan plan_epoch(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers, const LiveWorkers& live,
                     bool shuffle, uint64_t seed, int epoch, uint64_t* skip_clocks);

// --partition: the parts of --train (part i is worker i's byte range) that
// worker `me` trains on for dead workers. The dead parts, ascending, are
// dealt round-robin over the live workers (ascending): the j-th goes to
// live[j % live.size()]. Recomputed at each epoch's start, so a part whose
// adopter dies too moves on again. Empty when `me` is not live.
std::vector<uint32_t> adopted_parts(const std::vector<uint32_t>& live, uint32_t workers, uint32_t me);

// One part of the data a worker took over (adopted_parts) and its rows.
struct AdoptedPart {
  uint32_t part = 0;  // the dead worker's index, which also seeds its batches' order
  uint64_t rows = 0;
};

// A part taken over, with its rows as a trainer holds them (SlotCsr,
// ModelRows), and the trainers' option that gives them at each epoch's
// start (the epoch, 1-based); a null function: none.
template <class Data>
struct AdoptedData {
  uint32_t part = 0;
  const Data* data = nullptr;
};
template <class Data>
using AdoptedSource = std::function<std::vector<AdoptedData<Data>>(int epoch)>;

// A batch of an epoch over several parts of the data: part 0 is the
// worker's own, part i > 0 the i-th it took over.
struct PartBatch {
  size_t part = 0;
  uint64_t batch = 0;  // index within its part: rows [batch * batch_rows, ...)
  bool operator==(const PartBatch&) const = default;
};

// The epoch's batches: the own part's as `plan` orders them, then every
// batch of each adopted part in the epoch's order (as its own worker would
// have ordered them); one clock each. rows: of the whole epoch (progress).
struct EpochBatches {
  std::vector<PartBatch> order;
  uint64_t rows = 0;
};
EpochBatches epoch_batches(const EpochPlan& plan, const std::vector<AdoptedPart>& adopted, uint64_t batch_rows,
                           bool shuffle, uint64_t seed, int epoch);

// What both trainers plan an epoch over: epoch_batches of `plan` and the
// parts `source` gives (none when it is null), with parts[i] the data of
// part i (parts[0] = &own).
template <class Data>
struct PartedEpoch {
  std::vector<const Data*> parts;
  EpochBatches batches;
};
template <class Data>
PartedEpoch<Data> epoch_over_parts(const EpochPlan& plan, const Data& own, const AdoptedSource<Data>& source,
                                   uint64_t batch_rows, bool shuffle, uint64_t seed, int epoch) {
  PartedEpoch<Data> e;
  e.parts.push_back(&own);
  std::vector<AdoptedPart> adopted;
  if (source) {
    for (const AdoptedData<Data>& a : source(epoch)) {
      e.parts.push_back(a.data);
      adopted.push_back({a.part, a.data->rows()});
    }
  }
  e.batches = epoch_batches(plan, adopted, batch_rows, shuffle, seed, epoch);
  return e;
}

// The share's order in `epoch` (1-based): as given in epoch 1 or without
// shuffle, else a Fisher-Yates shuffle from a counter-based stream of (seed,
// epoch, index), the same on every machine.
std::vector<uint64_t> epoch_order(const std::vector<uint64_t>& batches, bool shuffle, uint64_t seed, int epoch,
                                  uint32_t index);

// Calls on_progress at the end of each epoch and, between, at most every
// `seconds` (0: at epoch ends only). A null callback makes it do nothing.
class ProgressReporter {
 public:
  ProgressReporter(std::function<void(const TrainProgress&)> on_progress, double seconds, uint64_t epoch_examples);
  // epoch_examples: this epoch's examples, when the share changed.
  void start_epoch(int epoch);
  void start_epoch(int epoch, uint64_t epoch_examples);
  // seen: examples so far this epoch; loss_sum: their summed progressive loss.
  void update(uint64_t seen, double loss_sum, bool epoch_done);

 private:
  using Clock = std::chrono::steady_clock;
  std::function<void(const TrainProgress&)> on_progress_;
  double seconds_;
  uint64_t epoch_examples_;
  Clock::time_point start_ = Clock::now(), last_ = start_, epoch_start_ = start_;
  int epoch_ = 0;
};

}  // namespace parafab::worker
