// Helper threads that apply one large push (or answer one large pull) side
// by side with the serving thread: a sparse table hands each thread a run of
// its sub-shards, a dense table a run of rows. One caller at a time.
//
//   ps::ApplyPool pool(2);                        // the caller and one helper
//   pool.run(2, [&](unsigned part) { ... });      // part 0 here, part 1 there
//
// A helper sleeps on a condition variable between calls, so an idle pool
// costs no CPU; waking it costs tens of microseconds, which is why tables
// split only requests of many keys or bytes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace parafab::ps {

class ApplyPool {
 public:
  // threads: in all, the caller included (at least 1; 1 means no helper).
  explicit ApplyPool(unsigned threads);
  ~ApplyPool();
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(helpers_.size()) + 1; }

  // Runs fn(part) for every part in [0, parts), part 0 on the calling thread
  // and the others on helpers, and returns when all have finished; the first
  // exception thrown by any part is rethrown here. parts is clamped to
  // [1, threads()].
  void run(unsigned parts, const std::function<void(unsigned part)>& fn);

 private:
  void helper_loop(unsigned index);

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(unsigned)>* job_ = nullptr;
  unsigned parts_ = 0;
  unsigned pending_ = 0;  // helper parts of the current call not yet finished
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> helpers_;
};

}  // namespace parafab::ps
