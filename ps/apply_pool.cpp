#include "ps/apply_pool.h"

#include <algorithm>
#include <stdexcept>

namespace parafab::ps {

ApplyPool::ApplyPool(unsigned threads) {
  if (threads == 0) throw std::invalid_argument("ApplyPool: threads must be at least 1");
  helpers_.reserve(threads - 1);
  for (unsigned i = 1; i < threads; ++i) helpers_.emplace_back([this, i] { helper_loop(i); });
}

ApplyPool::~ApplyPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : helpers_) t.join();
}

void ApplyPool::run(unsigned parts, const std::function<void(unsigned part)>& fn) {
  parts = std::clamp(parts, 1u, threads());
  if (parts > 1) {
    std::lock_guard lock(mu_);
    job_ = &fn;
    parts_ = parts;
    pending_ = parts - 1;
    error_ = nullptr;
    ++generation_;
  }
  if (parts > 1) start_cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  if (parts == 1) {
    if (mine) std::rethrow_exception(mine);
    return;
  }
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  std::exception_ptr err = mine ? mine : error_;
  lock.unlock();
  if (err) std::rethrow_exception(err);
}

void ApplyPool::helper_loop(unsigned index) {
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    if (index >= parts_) continue;  // not needed this time
    const std::function<void(unsigned)>* job = job_;
    lock.unlock();
    std::exception_ptr err;
    try {
      (*job)(index);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_) error_ = err;
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace parafab::ps
