#include "worker/parameter_store.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "ps/cluster_map.h"

namespace parafab::worker {

std::future<rdma::Status> ParameterStore::dense_pull_many(std::span<const DenseSlice> slices) {
  std::vector<std::future<rdma::Status>> each;
  each.reserve(slices.size());
  for (const DenseSlice& sl : slices) each.push_back(dense_pull(sl.table, sl.first_row, sl.rows, sl.out));
  // Joined in the caller's thread when it asks; the first failure wins.
  return std::async(std::launch::deferred, [each = std::move(each)]() mutable {
    rdma::Status first;
    for (auto& f : each) {
      rdma::Status s = f.get();
      if (!s.ok() && first.ok()) first = std::move(s);
    }
    return first;
  });
}

const ps::TableSchema& RemoteStore::table(uint32_t id) const { return map_.table(id); }

LocalStore::LocalStore(const std::vector<ps::TableSchema>& tables) {
  for (const ps::TableSchema& t : tables) {
    t.validate();
    if (!schemas_.emplace(t.id, t).second) {
      throw std::invalid_argument("LocalStore: table " + std::to_string(t.id) + " given twice");
    }
    if (t.kind == ps::TableKind::kSparse) {
      sparse_.emplace(t.id, std::make_unique<ps::SparseTable>(t));
    } else {
      dense_.emplace(t.id, std::make_unique<ps::DenseTable>(t, 0, t.rows));
    }
  }
}

const ps::TableSchema& LocalStore::table(uint32_t id) const {
  const auto it = schemas_.find(id);
  if (it == schemas_.end()) throw std::out_of_range("no table " + std::to_string(id));
  return it->second;
}

std::future<rdma::Status> LocalStore::pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                           int64_t* data_clock) {
  const auto it = sparse_.find(table);
  if (it == sparse_.end()) return ready(invalid("pull: no sparse table " + std::to_string(table)));
  it->second->pull(keys, out);
  // One process: every update so far is in.
  if (data_clock != nullptr) *data_clock = clock_.load();
  return ready({});
}

std::future<rdma::Status> LocalStore::push(uint32_t table, std::span<const uint64_t> keys,
                                           std::span<const float> grads) {
  const auto it = sparse_.find(table);
  if (it == sparse_.end()) return ready(invalid("push: no sparse table " + std::to_string(table)));
  const size_t w = it->second->schema().width;
  if (grads.size() != keys.size() * w) return ready(invalid("push: gradients do not match keys x width"));
  // SparseTable::push wants unique keys: merge duplicates as the KV client does.
  std::vector<uint32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  std::vector<uint64_t> unique_keys;
  std::vector<float> summed;
  unique_keys.reserve(keys.size());
  summed.reserve(grads.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t r = order[i];
    if (i == 0 || keys[r] != unique_keys.back()) {
      unique_keys.push_back(keys[r]);
      summed.insert(summed.end(), grads.begin() + static_cast<int64_t>(r * w),
                    grads.begin() + static_cast<int64_t>((r + 1) * w));
    } else {
      float* acc = summed.data() + summed.size() - w;
      for (size_t c = 0; c < w; ++c) acc[c] += grads[r * w + c];
    }
  }
  const ps::PushResult res = it->second->push(unique_keys, summed.data());
  std::lock_guard lock(mu_);
  refused_ += res.refused_non_finite;
  return ready({});
}

std::future<rdma::Status> LocalStore::dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) {
  const auto it = dense_.find(table);
  if (it == dense_.end()) return ready(invalid("dense_pull: no dense table " + std::to_string(table)));
  try {
    it->second->pull(first_row, rows, out);
  } catch (const std::out_of_range& e) {
    return ready(invalid(e.what()));
  }
  return ready({});
}

std::future<rdma::Status> LocalStore::dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                                 std::span<const float> grads) {
  const auto it = dense_.find(table);
  if (it == dense_.end()) return ready(invalid("dense_push: no dense table " + std::to_string(table)));
  if (grads.size() != rows * it->second->schema().width) return ready(invalid("dense_push: gradients do not match rows x width"));
  try {
    const ps::PushResult res = it->second->push(first_row, rows, grads.data());
    std::lock_guard lock(mu_);
    refused_ += res.refused_non_finite;
  } catch (const std::out_of_range& e) {
    return ready(invalid(e.what()));
  }
  return ready({});
}

std::future<rdma::Status> LocalStore::clock() {
  clock_.fetch_add(1);
  return ready({});
}

uint64_t LocalStore::refused_non_finite() const {
  std::lock_guard lock(mu_);
  return refused_;
}

}  // namespace parafab::worker
