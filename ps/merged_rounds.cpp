#include "ps/merged_rounds.h"

#include <algorithm>
#include <bit>

#include "ps/key_hash.h"

namespace parafab::ps {

uint32_t MergedRounds::SparseSum::position(uint64_t key, uint32_t width) {
  if (2 * (keys.size() + 1) > index.size()) {
    // Grow to twice the size (at least 1024 slots) and index the keys again.
    index.assign(std::max<size_t>(1024, 2 * index.size()), 0);
    const size_t mask = index.size() - 1;
    for (size_t i = 0; i < keys.size(); ++i) {
      size_t at = mix64(keys[i]) & mask;
      while (index[at] != 0) at = (at + 1) & mask;
      index[at] = static_cast<uint32_t>(i + 1);
    }
  }
  const size_t mask = index.size() - 1;
  size_t at = mix64(key) & mask;
  while (index[at] != 0) {
    const uint32_t i = index[at] - 1;
    if (keys[i] == key) return i;
    at = (at + 1) & mask;
  }
  index[at] = static_cast<uint32_t>(keys.size() + 1);
  keys.push_back(key);
  grads.resize(grads.size() + width, 0.0f);
  return static_cast<uint32_t>(keys.size() - 1);
}

MergedRounds::Round& MergedRounds::round_of(int64_t clock, uint32_t worker) {
  Round& r = rounds_[clock];
  if (std::find(r.workers.begin(), r.workers.end(), worker) == r.workers.end()) r.workers.push_back(worker);
  return r;
}

void MergedRounds::add_sparse(int64_t clock, uint32_t worker, uint32_t table, std::span<const uint64_t> keys,
                              const float* grads, uint32_t width) {
  SparseSum& s = round_of(clock, worker).sparse[table];
  if (s.index.empty()) {
    // Room for about twice this push's keys (the other workers' mostly overlap) without growing.
    s.index.assign(std::bit_ceil(std::max<size_t>(1024, 4 * keys.size())), 0);
    s.keys.reserve(2 * keys.size());
    s.grads.reserve(2 * keys.size() * width);
  }
  const size_t before = s.grads.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* g = grads + i * width;
    const size_t at = s.position(keys[i], width);  // may grow grads: before data()
    float* sum = s.grads.data() + at * width;
    for (uint32_t j = 0; j < width; ++j) sum[j] += g[j];
  }
  floats_ += s.grads.size() - before;
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
