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

// The job's live workers, ascending (one declared dead is left out).
using LiveWorkers = std::function<std::vector<uint32_t>()>;

// One epoch of a worker's own share, as both trainers run it: its batches in
// the epoch's order, less those a resumed job already did (the first
// *skip_clocks clocks of the run; *skip_clocks is decreased by the clocks
// this epoch skips). Every worker ticks the share's clocks_per_epoch an
// epoch whoever is dead (epoch_batches), so a clock of the run is the same
// batch position in every run of the job, and a resume skips exact clocks.
struct EpochPlan {
  std::vector<uint64_t> order;  // batch indices, to train in this order
  uint64_t rows = 0;            // rows of the whole share (for progress)
  uint64_t skipped = 0;         // clocks of this epoch a resumed job skips
  uint64_t clocks = 0;          // the share's clocks_per_epoch
};
EpochPlan plan_epoch(uint64_t n_rows, uint64_t batch_rows, uint32_t index, uint32_t workers, bool shuffle,
                     uint64_t seed, int epoch, uint64_t* skip_clocks);

// The workers whose batches worker `me` trains besides its own, dead ones
// (under --on-worker-failure continue): the dead, ascending, are dealt
// round-robin over the live workers (ascending): the j-th goes to
// live[j % live.size()]. Recomputed at each epoch's start, so the batches of
// a worker whose adopter dies too move on again. Empty when `me` is not live.
std::vector<uint32_t> adopted_parts(const std::vector<uint32_t>& live, uint32_t workers, uint32_t me);

// The batches of a dead worker a live one took over (adopted_parts): share
// `share_index` of `share_count` of data of `rows` rows. Without --partition
// the data is the whole --train that every worker holds, and the share the
// dead worker's (index = its own, count = W); with --partition, the dead
// worker's part of --train, all of it (0 of 1).
struct AdoptedPart {
  uint32_t part = 0;  // the dead worker's index, which also seeds its batches' order
  uint64_t rows = 0;
  uint32_t share_index = 0, share_count = 1;
};

// A dead worker's batches, with its data as a trainer holds it (SlotCsr,
// ModelRows), and the trainers' option that gives them at each epoch's
// start (the epoch, 1-based); a null function: none.
template <class Data>
struct AdoptedData {
  uint32_t part = 0;
  const Data* data = nullptr;
  uint32_t share_index = 0, share_count = 1;
};
template <class Data>
using AdoptedSource = std::function<std::vector<AdoptedData<Data>>(int epoch)>;

// A batch of an epoch over several parts of the data: part 0 is the
// worker's own, part i > 0 the i-th it took over. The worker ticks its
// clock after a batch that ends_clock.
struct PartBatch {
  size_t part = 0;
  uint64_t batch = 0;  // index within its part: rows [batch * batch_rows, ...)
  bool ends_clock = true;
  bool operator==(const PartBatch&) const = default;
};

// The epoch's batches, clock by clock: at its j-th clock a worker trains the
// j-th batch of its own share (as `plan` orders it) and the j-th batch of
// each share it took over (in the order the dead worker would have given
// them, with the same clocks skipped), so every clock of the job trains the
// batches it would have without the death: under BSP a round is the same
// step. Then idle_clocks clocks without a batch, up to the share's
// clocks_per_epoch. rows: of the whole epoch (progress).
struct EpochBatches {
  std::vector<PartBatch> order;
  uint64_t rows = 0;
  uint64_t idle_clocks = 0;
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
      adopted.push_back({a.part, a.data->rows(), a.share_index, a.share_count});
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
