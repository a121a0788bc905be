#include "ps/merged_rounds.h"

#include <algorithm>

namespace parafab::ps {

MergedRounds::Round& MergedRounds::round_of(int64_t clock, uint32_t worker) {
  Round& r = rounds_[clock];
  if (std::find(r.workers.begin(), r.workers.end(), worker) == r.workers.end()) r.workers.push_back(worker);
  return r;
}

void MergedRounds::add_sparse(int64_t clock, uint32_t worker, uint32_t table, std::span<const uint64_t> keys,
                              const float* grads, uint32_t width) {
  SparseSum& s = round_of(clock, worker).sparse[table];
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* g = grads + i * width;
    const auto [it, inserted] = s.position.try_emplace(keys[i], static_cast<uint32_t>(s.keys.size()));
    if (inserted) {
      s.keys.push_back(keys[i]);
      s.grads.insert(s.grads.end(), g, g + width);
      floats_ += width;
      continue;
    }
    float* sum = s.grads.data() + static_cast<size_t>(it->second) * width;
    for (uint32_t j = 0; j < width; ++j) sum[j] += g[j];
  }
}

void MergedRounds::add_dense(int64_t clock, uint32_t worker, uint32_t table, uint64_t first_row, uint64_t rows,
                             const float* grads, uint32_t width) {
  Round& r = round_of(clock, worker);
  const size_t n = static_cast<size_t>(rows) * width;
  for (DenseSum& d : r.dense) {
    if (d.table == table && d.first_row == first_row && d.rows == rows) {
      for (size_t j = 0; j < n; ++j) d.grads[j] += grads[j];
      return;
    }
  }
  r.dense.push_back({table, first_row, rows, std::vector<float>(grads, grads + n)});
  floats_ += n;
}

size_t MergedRounds::take_before(int64_t clock, const Sink& sink) {
  size_t taken = 0;
  while (!rounds_.empty() && rounds_.begin()->first < clock) {
    Round r = std::move(rounds_.begin()->second);
    rounds_.erase(rounds_.begin());
    for (const auto& [table, s] : r.sparse) {
      sink.sparse(table, s.keys, s.grads.data());
      floats_ -= s.grads.size();
    }
    for (const DenseSum& d : r.dense) {
      sink.dense(d.table, d.first_row, d.rows, d.grads.data());
      floats_ -= d.grads.size();
    }
    ++taken;
  }
  return taken;
}

std::optional<int64_t> MergedRounds::newest_of(uint32_t worker) const {
  for (auto it = rounds_.rbegin(); it != rounds_.rend(); ++it) {
    const std::vector<uint32_t>& w = it->second.workers;
    if (std::find(w.begin(), w.end(), worker) != w.end()) return it->first;
  }
  return std::nullopt;
}

}  // namespace parafab::ps
