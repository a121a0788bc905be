#include "rdma/completion.h"

namespace parafab::rdma {
namespace detail {

void CompletionState::set(Status s, bool lent) {
  status = std::move(s);
  memory_lent = lent;
  done.store(true, std::memory_order_seq_cst);
  if (waiters.load(std::memory_order_seq_cst) > 0) {
    // Taking the lock orders this notify after a waiter's check of `done`.
    { std::lock_guard lock(mu); }
    cv.notify_all();
  }
}

bool CompletionState::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (done.load(std::memory_order_acquire)) return true;
  waiters.fetch_add(1, std::memory_order_seq_cst);
  bool ok;
  {
    std::unique_lock lock(mu);
    ok = cv.wait_until(lock, deadline, [&] { return done.load(std::memory_order_seq_cst); });
  }
  waiters.fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

void CompletionState::wait() {
  if (done.load(std::memory_order_acquire)) return;
  waiters.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done.load(std::memory_order_seq_cst); });
  }
  waiters.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace detail

Completion Completion::ready(Status s) {
  auto state = std::make_shared<detail::CompletionState>();
  state->status = std::move(s);
  state->done.store(true, std::memory_order_relaxed);
  return Completion(std::move(state));
}

bool Completion::memory_lent() const {
  check_valid();
  return state_->done.load(std::memory_order_acquire) && state_->memory_lent;
}

bool Completion::is_ready() const {
  check_valid();
  return state_->done.load(std::memory_order_acquire);
}

void Completion::wait() const {
  check_valid();
  state_->wait();
}

Status Completion::get() {
  check_valid();
  state_->wait();
  Status s = std::move(state_->status);
  state_.reset();
  return s;
}

void Completion::check_valid() const {
  if (!state_) throw std::future_error(std::future_errc::no_state);
}

}  // namespace parafab::rdma
