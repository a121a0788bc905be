// Where a trainer's parameters live: on the servers of a job (RemoteStore,
// over the KV client) or in this process (LocalStore: the servers' own
// tables and updaters, in memory). The minibatch trainer (model_trainer.h)
// runs the same loop against either, so `parafab train --model fm|dnn`
// trains the same model the same way in one process and across a cluster;
// only the staleness differs.
//
//   worker::LocalStore store(tables);            // single process
//   worker::RemoteStore store(kv);               // a worker of a job
//   auto f = store.pull(0, keys, values.data());
//   rdma::Status s = f.get();
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ps/dense_table.h"
#include "ps/sparse_table.h"
#include "ps/table_schema.h"
#include "rdma/status.h"
#include "worker/kv_client.h"

namespace parafab::worker {

class ParameterStore {
 public:
  virtual ~ParameterStore() = default;
  // keys.size() * width floats to out (valid until the future is ready).
  // data_clock (when not null) gets the clock the values are complete to:
  // every worker's updates of iterations before it are in them.
  virtual std::future<rdma::Status> pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                         int64_t* data_clock = nullptr) = 0;
  // Duplicate keys are merged (gradients summed); the spans are copied before return.
  virtual std::future<rdma::Status> push(uint32_t table, std::span<const uint64_t> keys,
                                         std::span<const float> grads) = 0;
  virtual std::future<rdma::Status> dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) = 0;
  // Several slices (each out valid until the future is ready), one future
  // for all: by default a dense_pull each, side by side.
  virtual std::future<rdma::Status> dense_pull_many(std::span<const DenseSlice> slices);
  virtual std::future<rdma::Status> dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                               std::span<const float> grads) = 0;
  // This worker finished an iteration.
  virtual std::future<rdma::Status> clock() = 0;
  // Iterations this worker has finished.
  virtual int64_t current_clock() const = 0;
  // This worker's training is over: it no longer holds the others back
  // (KvClient::finish). Pulls may follow; clocks may not.
  virtual std::future<rdma::Status> finish() = 0;
  virtual const ps::TableSchema& table(uint32_t id) const = 0;

 protected:
  // For stores that answer at once.
  static std::future<rdma::Status> ready(rdma::Status s) {
    std::promise<rdma::Status> p;
    p.set_value(std::move(s));
    return p.get_future();
  }
  static rdma::Status invalid(std::string what) { return {rdma::StatusCode::kInvalidArgument, std::move(what)}; }
};

// one_sided_dense: dense_pull and dense_pull_many read the servers' shards
// one-sided (KvClient::dense_read, same consistency) before they return.
class RemoteStore final : public ParameterStore {
 public:
  RemoteStore(KvClient& kv, const ps::ClusterMap& map, bool one_sided_dense = false)
      : kv_(kv), map_(map), one_sided_dense_(one_sided_dense) {}
  std::future<rdma::Status> pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                 int64_t* data_clock = nullptr) override {
    return kv_.pull(table, keys, out, data_clock);
  }
  std::future<rdma::Status> push(uint32_t table, std::span<const uint64_t> keys,
                                 std::span<const float> grads) override {
    return kv_.push(table, keys, grads);
  }
  std::future<rdma::Status> dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) override {
    if (one_sided_dense_) return ready(kv_.dense_read(table, first_row, rows, out));
    return kv_.dense_pull(table, first_row, rows, out);
  }
  // One-sided: every slice in the same rounds of reads (KvClient::dense_read).
  std::future<rdma::Status> dense_pull_many(std::span<const DenseSlice> slices) override {
    if (one_sided_dense_) return ready(kv_.dense_read(slices));
    return ParameterStore::dense_pull_many(slices);
  }
  std::future<rdma::Status> dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                       std::span<const float> grads) override {
    return kv_.dense_push(table, first_row, rows, grads);
  }
  std::future<rdma::Status> clock() override { return kv_.clock(); }
  int64_t current_clock() const override { return kv_.current_clock(); }
  std::future<rdma::Status> finish() override { return kv_.finish(); }
  const ps::TableSchema& table(uint32_t id) const override;

 private:
  KvClient& kv_;
  const ps::ClusterMap& map_;
  bool one_sided_dense_ = false;
};

// Every table whole in this process; operations complete before they
// return (ready futures). Thread-safe: the tables lock as on a server.
class LocalStore final : public ParameterStore {
 public:
  // Throws std::invalid_argument for an invalid schema or a repeated id.
  explicit LocalStore(const std::vector<ps::TableSchema>& tables);
  std::future<rdma::Status> pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                 int64_t* data_clock = nullptr) override;
  std::future<rdma::Status> push(uint32_t table, std::span<const uint64_t> keys,
                                 std::span<const float> grads) override;
  std::future<rdma::Status> dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) override;
  std::future<rdma::Status> dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                       std::span<const float> grads) override;
  std::future<rdma::Status> clock() override;
  int64_t current_clock() const override { return clock_.load(); }
  std::future<rdma::Status> finish() override { return clock(); }
  const ps::TableSchema& table(uint32_t id) const override;
  // Gradients the updaters refused (non-finite), over all tables.
  uint64_t refused_non_finite() const;

 private:
  std::map<uint32_t, ps::TableSchema> schemas_;
  std::map<uint32_t, std::unique_ptr<ps::SparseTable>> sparse_;
  std::map<uint32_t, std::unique_ptr<ps::DenseTable>> dense_;
  mutable std::mutex mu_;
  uint64_t refused_ = 0;
  std::atomic<int64_t> clock_{0};
};

}  // namespace parafab::worker
