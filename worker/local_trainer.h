// Single-process training of a sparse linear model (lr or svm) with Hogwild!
// SGD on the kernels' backend: `parafab train` without a cluster.
//
//   worker::LocalTrainer t(options, map);
//   t.train(train_csr, [](const worker::TrainProgress& p) { ... });
//   worker::Evaluation e = t.evaluate(test_csr, &probabilities);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/csr_batch.h"
#include "worker/linear_model_file.h"
#include "worker/slot_map.h"

namespace parafab::worker {

struct TrainOptions {
  kernels::Loss loss = kernels::Loss::kLogistic;
  int epochs = 3;
  int threads = 1;
  float lr = 0.05f;        // AdaGrad base rate (plain SGD step with adagrad off)
  float l2 = 1e-6f;        // per-step L2 on the touched coordinates
  bool adagrad = true;
  uint64_t batch_rows = 16384;  // rows per Hogwild batch (unit of progress reports)
  uint64_t seed = 1;            // order of batches within an epoch
  bool shuffle = true;          // shuffle the order of batches every epoch
  double progress_seconds = 1.0;  // 0: no progress callbacks
  // Host backend, threads > 1: each thread keeps its own copies of the bias
  // and of up to hot_slots - 1 of the most frequent slots, and the threads'
  // changes to them are summed (averaged without adagrad: summed, stale
  // constant steps overshoot) into the model every merge_rows rows per
  // thread (kernels::hogwild_sgd_parts). Every other weight is shared as in
  // plain Hogwild. 0: plain Hogwild for every weight (the only mode on CUDA).
  uint64_t hot_slots = 4096;
  uint64_t merge_rows = 2048;
};

// Throws std::invalid_argument naming the flag (--epochs, --threads, --lr,
// --l2, --batch-size) of the first option out of range. LocalTrainer checks
// its options with it; `parafab train` also calls it before reading any data.
void validate_train_options(const TrainOptions& options);

struct TrainProgress {
  int epoch = 0;                 // 1-based
  uint64_t examples = 0;         // examples seen this epoch
  uint64_t epoch_examples = 0;   // examples per epoch
  double progressive_loss = 0;   // mean progressive loss so far this epoch
  double seconds = 0;            // since train() started
  double examples_per_second = 0;  // this epoch so far
  bool epoch_done = false;
};

struct Evaluation {
  uint64_t examples = 0;
  double log_loss = 0;   // of sigmoid(margin); for svm a calibration-free reading
  double auc = 0;
  double accuracy = 0;
  double hinge_loss = 0;
  bool multiclass = false;  // a softmax model's: auc is NaN, there being no one score to rank
};

class LocalTrainer {
 public:
  LocalTrainer(const TrainOptions& options, const SlotMap& map);
  // Starts from an existing model (predict, or more epochs).
  explicit LocalTrainer(const LinearModel& model, const TrainOptions& options = {});
  ~LocalTrainer();
  LocalTrainer(const LocalTrainer&) = delete;
  LocalTrainer& operator=(const LocalTrainer&) = delete;

  // Runs options.epochs epochs over data. Returns the mean progressive loss
  // of each epoch. Throws std::invalid_argument if data has a slot outside the map.
  std::vector<double> train(const SlotCsr& data,
                            const std::function<void(const TrainProgress&)>& on_progress = {});

  // Metrics over data; when probabilities is not null it receives
  // sigmoid(margin) per row in input order.
  Evaluation evaluate(const SlotCsr& data, std::vector<float>* probabilities = nullptr) const;

  LinearModel model() const;
  const TrainOptions& options() const { return options_; }

 private:
  struct State;
  TrainOptions options_;
  SlotMap map_;
  std::unique_ptr<State> state_;
};

}  // namespace parafab::worker
