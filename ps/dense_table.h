// A server's shard of a dense table: rows [begin_row, end_row) of a table of
// schema.rows keys, each `width` floats, in one contiguous value array (to be
// registered for one-sided RMA reads) with the optimizer state apart.
//
//   ps::TableSchema t{.id = 1, .kind = ps::TableKind::kDense, .width = 16, .rows = 1000};
//   ps::DenseTable table(t, 0, 500);               // this server's rows
//   table.push(10, 2, grads);                      // rows 10, 11: 2 x 16 floats
//   table.pull(10, 2, out);
//
// Torn-free reads without a lock (one-sided readers): a seqlock. Each push
// makes version() odd before it writes any value and even again after the
// last one. A reader reads version() (v1), the values, then version() again
// (v2), and keeps the values only if v1 == v2 and v1 is even; try_read does
// exactly that in-process. Memory-order pairing (Boehm, "Can seqlocks get
// along with programming language memory models?", MSPC 2012):
//   writer: store(v+1, relaxed); fence(release); value stores;
//           store(v+2, release)
//   reader: v1 = load(acquire); value loads (relaxed); fence(acquire);
//           v2 = load(relaxed)
// - the writer's final release store pairs with the reader's acquire load of
//   v1: a reader that sees v+2 sees every value of that push;
// - the writer's release fence pairs with the reader's acquire fence: a
//   reader whose value loads saw any store of a push sees v2 >= v+1, so it
//   retries.
// The pairing holds as written for atomic value stores, which is what a
// ThreadSanitizer build makes. Otherwise a push stores the values with
// memcpy, which vectorizes (dense_table.cpp, store_values): correct on the
// hardware (a compiler barrier keeps the stores after the odd version, and
// x86 and arm64 keep the order of stores after a release fence), but in
// C++'s model an in-process reader (only try_read, in tests) then races
// with them. try_read loads the values as relaxed atomics. A remote RMA reader does
// the same three reads as separate operations, each completed before the
// next; version_word() and values() both lie in region(), one allocation
// that can be registered once.
//
// Beside the version word the region holds a clock word (at
// kClockWordOffset) that the owner publishes for one-sided readers: the
// server writes its minimum worker clock there after it has applied every
// update of the iterations before it, so a reader that reads the clock word
// before the values knows how stale they may be (its SSP bound).
//
// Pushes from several threads are serialized by a mutex (the seqlock admits
// one writer at a time); pull takes the same mutex and never retries.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "ps/sparse_table.h"  // PushResult, ApplyPool (declared)
#include "ps/table_schema.h"

namespace parafab::ps {

class DenseTable {
 public:
  // Throws std::invalid_argument when the schema is invalid or not dense, or
  // unless begin_row < end_row <= schema.rows.
  DenseTable(const TableSchema& schema, uint64_t begin_row, uint64_t end_row);
  ~DenseTable();
  DenseTable(const DenseTable&) = delete;
  DenseTable& operator=(const DenseTable&) = delete;

  // Rows [first_row, first_row + rows) in table coordinates; out / grads hold
  // rows x width floats. Throw std::out_of_range naming the requested range
  // and this shard's when the range is not inside [begin_row, end_row).
  void pull(uint64_t first_row, uint64_t rows, float* out) const;
  // The same rows in place, not copied (range errors as pull): for the
  // table's only writer, which must not push to it while it still reads them
  // (the server lends them to a large pull's reply; see Server::settle_lent).
  std::span<const float> rows_in_place(uint64_t first_row, uint64_t rows) const;
  // Applies each row's gradient with the table's updater (apply_update); a row
  // with a non-finite gradient or result is refused and counted, the others
  // applied. inserted is always 0. With a pool, a push of many bytes is
  // applied by its threads side by side, each over a run of rows, inside
  // the one seqlock write (readers see all of it or none).
  PushResult push(uint64_t first_row, uint64_t rows, const float* grads, ApplyPool* pool = nullptr);

  // One seqlock read attempt of rows [first_row, first_row + rows), without
  // the mutex: true with a consistent copy in out, false when a push ran
  // meanwhile (the caller retries). Range errors as pull.
  bool try_read(uint64_t first_row, uint64_t rows, float* out) const;

  // The values of rows [begin_row, end_row), row-major, contiguous.
  float* values() { return values_; }
  const float* values() const { return values_; }
  size_t value_bytes() const { return value_count_ * sizeof(float); }
  // Even when no push is running; advances by 2 per push.
  uint64_t version() const { return version_->load(std::memory_order_acquire); }
  const std::atomic<uint64_t>* version_word() const { return version_; }
  // The clock word: 0 until the first publish_clock. A release store, after
  // the updates it stands for.
  static constexpr size_t kClockWordOffset = 8;
  void publish_clock(int64_t clock) { clock_->store(clock, std::memory_order_release); }
  // The allocation holding the version word (at its start) and the values
  // (at values() - region()): what to register for RMA.
  const void* region() const { return region_.get(); }
  size_t region_bytes() const { return region_bytes_; }

  uint64_t begin_row() const { return begin_; }
  uint64_t end_row() const { return end_; }
  const TableSchema& schema() const { return schema_; }

  // The shard's values and optimizer state, copied under the writer lock
  // (a checkpoint), and put back (a recovery; a seqlock write like a push).
  // restore throws std::invalid_argument when the sizes do not fit.
  void snapshot(std::vector<float>& values, std::vector<float>& state) const;
  void restore(const std::vector<float>& values, const std::vector<float>& state);

 private:
  struct FreeRegion {
    void operator()(unsigned char* p) const;
  };
  void check_range(const char* op, uint64_t first_row, uint64_t rows) const;

  TableSchema schema_;
  uint64_t begin_ = 0, end_ = 0;
  size_t width_ = 1, state_floats_ = 0, value_count_ = 0;
  std::unique_ptr<unsigned char, FreeRegion> region_;
  size_t region_bytes_ = 0;
  std::atomic<uint64_t>* version_ = nullptr;  // inside region_
  std::atomic<int64_t>* clock_ = nullptr;     // inside region_, at kClockWordOffset
  float* values_ = nullptr;                   // inside region_, 64-byte aligned
  std::vector<float> state_;
  mutable std::mutex writer_;
};

}  // namespace parafab::ps
