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
  void start_epoch(int epoch);
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
