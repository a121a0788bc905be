// The future of one endpoint operation: becomes ready once with a Status.
//
//   rdma::Completion c = endpoint.send(peer, tag, data, size);
//   if (c.wait_for(std::chrono::seconds(0)) == std::future_status::ready) ...
//   rdma::Status s = c.get();   // waits; c is then no longer valid()
//
// Why not std::future: std::promise::set_value runs std::call_once, and
// glibc's pthread_once ends every call with a futex wake, a system call
// whether or not anyone waits (measured on this project's 2-core VM: 0.3 us
// for a promise, its future and the get, one per message sent). Here
// fulfilling and polling are plain atomics; the mutex and condition
// variable are touched only when a thread blocks in wait/wait_for.
//
// Same contract as std::future<Status>: move-only, one get(), waiting on an
// invalid Completion is a misuse (throws std::future_error, no_state).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <utility>

#include "rdma/status.h"

namespace parafab::rdma {

namespace detail {

// Shared by one Completion and the endpoint's operation that fulfils it.
// set() happens once. Pairing: set() stores `status` then `done` (seq_cst)
// and then reads `waiters`; a blocking waiter increments `waiters`, then
// reads `done` under `mu`. In the single total order either the waiter's
// increment comes first (set() sees it, and notifies after taking `mu`, so
// the waiter is either before its check, and sees done, or inside wait) or
// the store of done does (the waiter's check sees it).
struct CompletionState {
  std::atomic<bool> done{false};
  std::atomic<int> waiters{0};
  Status status;  // written before done, read after it
  // The operation ended early (a timeout, a peer declared failed) with
  // posts still with the provider, which may read or write its memory until
  // they complete or the endpoint closes. Written before done, like status.
  bool memory_lent = false;
  std::mutex mu;
  std::condition_variable cv;

  void set(Status s, bool lent = false);
  // True when done by `deadline`.
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  void wait();
};

}  // namespace detail

class Completion {
 public:
  Completion() = default;
  explicit Completion(std::shared_ptr<detail::CompletionState> state) : state_(std::move(state)) {}
  // A completion that is ready already.
  static Completion ready(Status s);

  bool valid() const { return state_ != nullptr; }
  // No waiting: whether get() would return at once.
  bool is_ready() const;
  template <typename Rep, typename Period>
  std::future_status wait_for(const std::chrono::duration<Rep, Period>& d) const {
    check_valid();
    if (state_->done.load(std::memory_order_acquire)) return std::future_status::ready;
    if (d <= d.zero()) return std::future_status::timeout;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d);
    return state_->wait_until(deadline) ? std::future_status::ready : std::future_status::timeout;
  }
  void wait() const;
  // Waits, then hands the Status over; the Completion is invalid afterwards.
  Status get();
  // Once ready (and before get): whether the provider may still use the
  // operation's memory (it failed by its timeout or its peer's failure with
  // transfers outstanding), so that memory must not be reused or freed
  // before the endpoint closes (Endpoint::retain_until_close).
  bool memory_lent() const;

 private:
  void check_valid() const;
  std::shared_ptr<detail::CompletionState> state_;
};

}  // namespace parafab::rdma
