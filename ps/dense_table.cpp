#include "ps/dense_table.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "ps/apply_pool.h"

namespace parafab::ps {
namespace {

constexpr size_t kRegionAlign = 4096;  // page-aligned: what memory registration likes best
constexpr size_t kValuesOffset = 64;   // the version and clock words' cache line, then the values

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

void DenseTable::FreeRegion::operator()(unsigned char* p) const { ::operator delete(p, std::align_val_t{kRegionAlign}); }

DenseTable::DenseTable(const TableSchema& schema, uint64_t begin_row, uint64_t end_row)
    : schema_(schema), begin_(begin_row), end_(end_row) {
  schema_.validate();
  const std::string who = "DenseTable (table " + std::to_string(schema_.id) + "): ";
  if (schema_.kind != TableKind::kDense) throw std::invalid_argument(who + "schema kind is not dense");
  if (!(begin_row < end_row && end_row <= schema_.rows)) {
    throw std::invalid_argument(who + "rows " + range_text(begin_row, end_row) + " must be a non-empty part of " +
                                range_text(0, schema_.rows));
  }
  width_ = schema_.width;
  state_floats_ = state_floats_per_key(schema_.updater.kind, width_);
  const uint64_t rows = end_ - begin_;
  if (rows > (SIZE_MAX - kValuesOffset) / sizeof(float) / width_) {
    throw std::invalid_argument(who + std::to_string(rows) + " rows of width " + std::to_string(width_) +
                                " do not fit in memory");
  }
  value_count_ = static_cast<size_t>(rows) * width_;
  region_bytes_ = kValuesOffset + value_count_ * sizeof(float);
  region_.reset(static_cast<unsigned char*>(::operator new(region_bytes_, std::align_val_t{kRegionAlign})));
  version_ = new (region_.get()) std::atomic<uint64_t>(0);
  clock_ = new (region_.get() + kClockWordOffset) std::atomic<int64_t>(0);
  values_ = reinterpret_cast<float*>(region_.get() + kValuesOffset);
  state_.resize(static_cast<size_t>(rows) * state_floats_);
  // Rows are keyed by their global index, so every server (and a later
  // repartition) initializes a row the same way.
  for (uint64_t r = 0; r < rows; ++r) {
    float* value = values_ + r * width_;
    initialize_value(schema_.init, begin_ + r, value, static_cast<uint32_t>(width_));
    initialize_state(schema_.updater, value, state_.data() + r * state_floats_, width_);
  }
}

DenseTable::~DenseTable() = default;  // the atomic in region_ is trivially destructible

void DenseTable::check_range(const char* op, uint64_t first_row, uint64_t rows) const {
  if (first_row < begin_ || first_row > end_ || rows > end_ - first_row) {
    const std::string asked = first_row > UINT64_MAX - rows
                                  ? "[" + std::to_string(first_row) + ", " + std::to_string(first_row) + " + " +
                                        std::to_string(rows) + ")"
                                  : range_text(first_row, first_row + rows);
    throw std::out_of_range("DenseTable (table " + std::to_string(schema_.id) + ")::" + op + ": rows " + asked +
                            " are not inside this shard's rows " + range_text(begin_, end_));
  }
}

namespace {

// Copies n floats to dst: the values a seqlock write publishes. Readers
// that load them meanwhile (one-sided RMA, and try_read) drop what they read
// when the version moved, so a torn row never reaches anyone: the seqlock,
// not the stores, keeps it out. The copy is therefore a plain memcpy, which
// vectorizes: a 1 MiB SGD push applied by 2 threads took 89-145 us against
// 124-175 us with relaxed atomic stores of two floats each (one thread:
// 121-128 against 149-198 us; two sets of alternating runs on a busy
// host). In the C++ memory model an in-process reader
// racing with it is a data race even so; only try_read, in tests, is one
// (the server's own reads take the writer lock). A ThreadSanitizer build,
// which checks the protocol's ordering, keeps relaxed atomic stores, so
// that it reports only what would be a race there too.
#if defined(__SANITIZE_THREAD__)
#define PARAFAB_DENSE_ATOMIC_STORES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PARAFAB_DENSE_ATOMIC_STORES 1
#endif
#endif

#if defined(PARAFAB_DENSE_ATOMIC_STORES)
// A float pair seen as one 8-byte word, allowed to alias the floats.
using FloatPairBits = uint64_t __attribute__((may_alias));

void store_values(float* dst, const float* src, size_t n) {
  size_t i = 0;
  if (n > 0 && reinterpret_cast<uintptr_t>(dst) % 8 != 0) {
    std::atomic_ref<float>(dst[0]).store(src[0], std::memory_order_relaxed);
    i = 1;
  }
  for (; i + 2 <= n; i += 2) {
    uint64_t bits;
    std::memcpy(&bits, src + i, 8);
    __atomic_store_n(reinterpret_cast<FloatPairBits*>(dst + i), bits, __ATOMIC_RELAXED);
  }
  if (i < n) std::atomic_ref<float>(dst[i]).store(src[i], std::memory_order_relaxed);
}
#else
void store_values(float* dst, const float* src, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
#endif

}  // namespace

void DenseTable::pull(uint64_t first_row, uint64_t rows, float* out) const {
  check_range("pull", first_row, rows);
  // Under the writer mutex no store to the values can run; try_read's relaxed
  // loads may, but concurrent reads do not race.
  std::lock_guard<std::mutex> lock(writer_);
  std::memcpy(out, values_ + (first_row - begin_) * width_, rows * width_ * sizeof(float));
}

std::span<const float> DenseTable::rows_in_place(uint64_t first_row, uint64_t rows) const {
  check_range("pull", first_row, rows);
  return {values_ + (first_row - begin_) * width_, static_cast<size_t>(rows * width_)};
}

PushResult DenseTable::push(uint64_t first_row, uint64_t rows, const float* grads, ApplyPool* pool) {
  check_range("push", first_row, rows);
  PushResult result;
  if (rows == 0) return result;
  // Rows [r0, r1) of the push into r. Scratch copies of a row's value and
  // state: the update is computed into them in one pass and written back
  // only when applied.
  auto apply_rows = [&](uint64_t r0, uint64_t r1, PushResult& r) {
    std::vector<float> row(width_), row_state(state_floats_);
    for (uint64_t k = r0; k < r1; ++k) {
      const size_t local = static_cast<size_t>(first_row - begin_ + k);
      float* value = values_ + local * width_;
      const float* grad = grads + k * width_;
      // Only this push writes the values (under writer_, each row by one
      // thread), so its plain reads race with nothing (store_values: the
      // stores).
      float* state = state_.data() + local * state_floats_;
      std::memcpy(row.data(), value, width_ * sizeof(float));
      if (state_floats_ > 0) std::memcpy(row_state.data(), state, state_floats_ * sizeof(float));
      if (apply_update_to_copy(schema_.updater, row.data(), row_state.data(), grad, width_) != UpdateStatus::kApplied) {
        ++r.refused_non_finite;
        continue;
      }
      if (state_floats_ > 0) std::memcpy(state, row_state.data(), state_floats_ * sizeof(float));
      store_values(value, row.data(), width_);
      ++r.applied;
    }
  };
  // Split only pushes worth a helper's wake-up (tens of microseconds).
  constexpr uint64_t kParallelFloats = 64 * 1024;  // 256 KiB of gradients
  unsigned parts = pool == nullptr || rows * width_ < kParallelFloats ? 1u : pool->threads();
  parts = static_cast<unsigned>(std::min<uint64_t>(parts, rows));
  std::lock_guard<std::mutex> lock(writer_);
  const uint64_t v = version_->load(std::memory_order_relaxed);
  version_->store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // pairs with try_read's acquire fence
  // The values' stores are plain (store_values): keep the compiler from
  // moving them above the odd version (a release fence alone orders only
  // atomic stores after it). GCC and Clang treat the fence above as a
  // compiler barrier already; this says so.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (parts <= 1) {
    apply_rows(0, rows, result);
  } else {
    // The pool's hand-off orders the odd version before the helpers' stores,
    // and their stores before the even version below.
    std::vector<PushResult> results(parts);
    pool->run(parts, [&](unsigned p) { apply_rows(rows * p / parts, rows * (p + 1) / parts, results[p]); });
    for (const PushResult& r : results) {
      result.applied += r.applied;
      result.refused_non_finite += r.refused_non_finite;
    }
  }
  version_->store(v + 2, std::memory_order_release);  // pairs with try_read's acquire load of v1
  return result;
}

bool DenseTable::try_read(uint64_t first_row, uint64_t rows, float* out) const {
  check_range("try_read", first_row, rows);
  const uint64_t v1 = version_->load(std::memory_order_acquire);
  if (v1 & 1) return false;
  const float* src = values_ + (first_row - begin_) * width_;
  const size_t n = rows * width_;
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::atomic_ref<float>(const_cast<float&>(src[i])).load(std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return version_->load(std::memory_order_relaxed) == v1;
}

void DenseTable::snapshot(std::vector<float>& values, std::vector<float>& state) const {
  std::lock_guard<std::mutex> lock(writer_);
  values.assign(values_, values_ + value_count_);
  state = state_;
}

void DenseTable::restore(const std::vector<float>& values, const std::vector<float>& state) {
  if (values.size() != value_count_ || state.size() != state_.size()) {
    throw std::invalid_argument("DenseTable (table " + std::to_string(schema_.id) + ")::restore: " +
                                std::to_string(values.size()) + " values and " + std::to_string(state.size()) +
                                " state floats for a shard of " + std::to_string(value_count_) + " and " +
                                std::to_string(state_.size()));
  }
  std::lock_guard<std::mutex> lock(writer_);
  const uint64_t v = version_->load(std::memory_order_relaxed);
  version_->store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // as in push
  store_values(values_, values.data(), value_count_);
  state_ = state;
  version_->store(v + 2, std::memory_order_release);
}

}  // namespace parafab::ps
