// Training a sparse linear model (lr or svm) with the parameter servers:
// each worker loops over its share of the minibatches,
//
//   pull the batch's weights → minibatch gradient (kernels) → push → clock
//
// with the next batch's pull issued before the current batch is computed
// (pull-ahead, so a pull costs no wait when the network keeps up; it then
// misses the current batch's own push: one step of staleness, on top of
// what the consistency model allows). Model keys are the slots of a
// SlotMap shared by every worker (slot = key for libsvm indices, hashed
// otherwise); the bias is slot `dim`.
//
//   worker::DistributedTrainer t(kv, map, options, worker_index, workers);
//   t.train(train_csr, on_progress);
//   worker::LinearModel m = t.pull_model();   // every slot, from the servers
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/batch_schedule.h"
#include "worker/kv_client.h"
#include "worker/linear_model_file.h"
#include "worker/local_trainer.h"
#include "worker/slot_map.h"

namespace parafab::worker {

struct DistributedTrainOptions {
  kernels::Loss loss = kernels::Loss::kLogistic;
  int epochs = 3;
  uint64_t batch_rows = 256;  // rows per minibatch (one pull, push and clock)
  float l2 = 1e-6f;           // added to the gradient of the batch's coordinates
  uint32_t table = 0;
  uint64_t seed = 1;
  bool shuffle = true;
  bool pull_ahead = true;
  double progress_seconds = 1.0;
  // Between batches, called with the batch count so far (train --slow-ms).
  std::function<void(uint64_t)> after_batch;
  // The batches of dead workers this worker took over (adopted_parts), asked
  // at each epoch's start: their shares of --train, or with --partition
  // their parts; trained in the clocks of its own (epoch_batches).
  AdoptedSource<SlotCsr> adopted_parts;
  // A resumed job (train --resume): the first skip_clocks clocks of the
  // run, with their batches, were done before the checkpoint; skip them.
  uint64_t skip_clocks = 0;
};

class DistributedTrainer {
 public:
  DistributedTrainer(KvClient& kv, const SlotMap& map, const DistributedTrainOptions& options, uint32_t worker_index,
                     uint32_t workers);

  // Trains on this worker's share of `data`: the batches whose index modulo
  // `workers` is `worker_index`; one clock per batch, and every worker ticks
  // ceil(batches / workers) clocks an epoch. Returns each epoch's mean progressive loss
  // over this worker's examples. Throws std::runtime_error with the KV
  // client's reason when a pull or push fails.
  std::vector<double> train(const SlotCsr& data, const std::function<void(const TrainProgress&)>& on_progress = {});

  // Every slot's weight (bias last) as the servers hold it now.
  LinearModel pull_model();
  // Examples trained on so far (every epoch's).
  uint64_t examples() const { return examples_; }

 private:
  KvClient& kv_;
  SlotMap map_;
  DistributedTrainOptions options_;
  uint32_t index_, workers_;
  uint64_t examples_ = 0;
};

}  // namespace parafab::worker
