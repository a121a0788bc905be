// A saved fm or dnn model as a read-only parameter store, so that `parafab
// predict` evaluates with the trainer's own code: pulls of keys in the file
// read their saved values, other keys their initial values (what the servers
// would have answered for a key training never pushed), dense pulls the
// MLP's saved layers. Pushes and clocks fail.
//
//   worker::SavedModelStore store(worker::load_model_file("model.pfm"));
//   worker::ModelTrainer t(store, store.model().spec, store.model().map, {}, 0, 1, false);
//   worker::Evaluation e = t.evaluate(rows, &probabilities);
#pragma once

#include <vector>

#include "worker/model_file.h"
#include "worker/parameter_store.h"

namespace parafab::worker {

class SavedModelStore final : public ParameterStore {
 public:
  explicit SavedModelStore(SavedModel model);
  std::future<rdma::Status> pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                 int64_t* data_clock = nullptr) override;
  std::future<rdma::Status> push(uint32_t table, std::span<const uint64_t> keys,
                                 std::span<const float> grads) override;
  std::future<rdma::Status> dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) override;
  std::future<rdma::Status> dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                       std::span<const float> grads) override;
  std::future<rdma::Status> clock() override;
  int64_t current_clock() const override { return 0; }
  std::future<rdma::Status> finish() override { return clock(); }
  const ps::TableSchema& table(uint32_t id) const override;
  const SavedModel& model() const { return model_; }

 private:
  SavedModel model_;
  std::vector<ps::TableSchema> tables_;
  std::vector<uint64_t> dense_offset_;  // by table id: where its rows start in model_.mlp
};

}  // namespace parafab::worker
