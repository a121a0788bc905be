// Minibatch training of an fm or dnn model (model_spec.h) against a
// parameter store: the servers of a job, or this process (parameter_store.h).
// Each worker loops over its share of the minibatches:
//
//   pull the batch's parameters → gradient (kernels) → push → clock
//
// with, against servers, the next batch's pull issued before the current
// batch is computed (pull-ahead: one more step of staleness, as in
// distributed_trainer.h). With staleness-aware steps (Zhang et al., IJCAI
// 2016) a gradient computed from parameters τ clocks old (the servers say
// how old: KvClient::pull's data clock) is pushed scaled by 1 / max(1, τ).
//
//   worker::LocalStore store(spec.tables(map));
//   worker::ModelTrainer t(store, spec, map, options, /*worker_index=*/0, /*workers=*/1, /*remote=*/false);
//   t.train(rows, on_progress);
//   worker::Evaluation e = t.evaluate(test_rows, &probabilities);
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/embedding.h"
#include "worker/local_trainer.h"
#include "worker/batch_schedule.h"
#include "worker/model_file.h"
#include "worker/model_spec.h"
#include "worker/parameter_store.h"

namespace parafab::worker {

struct ModelTrainOptions {
  int epochs = 3;
  uint64_t batch_rows = 256;
  float l2 = 0.0f;  // fm: L2 added to the gradient of the batch's parameters (lazy)
  uint64_t seed = 1;
  bool shuffle = true;
  bool pull_ahead = true;  // ignored by a LocalStore (its pulls are immediate)
  bool staleness_aware = false;
  double progress_seconds = 1.0;
  // Between batches, called with the batch count so far (tests slow a worker; metrics).
  std::function<void(uint64_t)> after_batch;
  // The batches of dead workers this worker took over (adopted_parts), asked
  // at each epoch's start: their shares of --train, or with --partition
  // their parts; trained in the clocks of its own (epoch_batches).
  AdoptedSource<ModelRows> adopted_parts;
  // A resumed job (train --resume): the first skip_clocks clocks of the
  // run, with their batches, were done before the checkpoint; skip them.
  uint64_t skip_clocks = 0;
};

struct StalenessStats {
  std::vector<uint64_t> histogram;  // [τ] pulls whose data was τ clocks old (last bucket: that or more)
  double mean_scale = 1.0;          // mean gradient scale applied (staleness-aware)
};

class ModelTrainer {
 public:
  // remote: the store is a job's servers (pull-ahead, staleness measured).
  ModelTrainer(ParameterStore& store, const ModelSpec& spec, const SlotMap& map, const ModelTrainOptions& options,
               uint32_t worker_index, uint32_t workers, bool remote);

  // Trains on this worker's share of `data` (batches whose index modulo
  // workers is worker_index); every worker ticks the same number of clocks
  // per epoch. Returns each epoch's mean progressive loss. Throws
  // std::runtime_error with the store's reason when a pull or push fails.
  std::vector<double> train(const ModelRows& data, const std::function<void(const TrainProgress&)>& on_progress = {});

  // Held-out metrics with the store's current parameters. probabilities (if
  // not null) gets one value per row (two classes: P(y = 1)) or `classes`
  // per row. Multi-class: log_loss is the cross-entropy, accuracy of the
  // argmax, auc NaN.
  Evaluation evaluate(const ModelRows& data, std::vector<float>* probabilities = nullptr);

  const StalenessStats& staleness() const { return staleness_; }
  // Examples trained on so far (every epoch's).
  uint64_t examples() const { return examples_; }

  // The model as the store holds it now: every slot of `train` (and the fm
  // bias) with its values, and the MLP, for save_model_file. Against
  // servers, call it after every worker's last push (a barrier).
  SavedModel gather(const ModelRows& train, const SlotMap& map);
  // The same over every slot of the map, keeping the keys whose values are
  // not their initial ones: for workers that each saw only part of the data.
  SavedModel gather_all_slots(const SlotMap& map);

 private:
  struct Batch;
  void make_batch(const ModelRows& data, uint64_t lo, uint64_t hi, Batch& b) const;
  struct Params;
  std::future<rdma::Status> pull(const Batch& b, Params& p);
  double step(const Batch& b, Params& p, std::vector<std::future<rdma::Status>>& pushes);
  void predict(const Batch& b, Params& p, float* probs);
  std::vector<float> mlp_input(const Batch& b, const kernels::FieldCsr& fc, const float* d_embeddings, Params& p);

  ParameterStore& store_;
  ModelSpec spec_;
  uint64_t bias_key_;
  ModelTrainOptions options_;
  uint32_t index_, workers_;
  bool remote_;
  StalenessStats staleness_;
  uint64_t examples_ = 0;
  double scale_sum_ = 0;
  uint64_t scale_count_ = 0;
};

}  // namespace parafab::worker
