#include "worker/saved_model_store.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace parafab::worker {
SavedModelStore::SavedModelStore(SavedModel model) : model_(std::move(model)), tables_(model_.spec.tables(model_.map)) {
  // The MLP's tables lie back to back in model_.mlp, in id order (W_l, b_l).
  dense_offset_.assign(tables_.size() + 1, 0);
  uint64_t offset = 0;
  for (const ps::TableSchema& t : tables_) {
    if (t.kind != ps::TableKind::kDense) continue;
    dense_offset_[t.id] = offset;
    offset += t.rows * t.width;
  }
}

const ps::TableSchema& SavedModelStore::table(uint32_t id) const {
  if (id >= tables_.size()) throw std::out_of_range("no table " + std::to_string(id));
  return tables_[id];
}

std::future<rdma::Status> SavedModelStore::pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                                int64_t* data_clock) {
  if (table != 0) return ready(invalid("pull: the saved model's sparse table is 0"));
  const ps::TableSchema& t = tables_[0];
  const uint32_t w = t.width;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto it = std::lower_bound(model_.keys.begin(), model_.keys.end(), keys[i]);
    if (it != model_.keys.end() && *it == keys[i]) {
      std::memcpy(out + i * w, model_.values.data() + static_cast<size_t>(it - model_.keys.begin()) * w,
                  w * sizeof(float));
    } else {
      ps::initialize_value(t.init, keys[i], out + i * w, w);
    }
  }
  if (data_clock != nullptr) *data_clock = 0;
  return ready({});
}

std::future<rdma::Status> SavedModelStore::push(uint32_t, std::span<const uint64_t>, std::span<const float>) {
  return ready(invalid("a saved model is read-only"));
}

std::future<rdma::Status> SavedModelStore::dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) {
  if (table == 0 || table >= tables_.size()) return ready(invalid("dense_pull: no dense table " + std::to_string(table)));
  const ps::TableSchema& t = tables_[table];
  if (first_row > t.rows || rows > t.rows - first_row) return ready(invalid("dense_pull: rows outside the table"));
  std::memcpy(out, model_.mlp.data() + dense_offset_[table] + first_row * t.width, rows * t.width * sizeof(float));
  return ready({});
}

std::future<rdma::Status> SavedModelStore::dense_push(uint32_t, uint64_t, uint64_t, std::span<const float>) {
  return ready(invalid("a saved model is read-only"));
}

std::future<rdma::Status> SavedModelStore::clock() { return ready({}); }

}  // namespace parafab::worker
