// A worker's last word on what the servers hold of its pushes: the
// gradient bytes each server acknowledged, printed however the worker
// ends (at the end of training, on an error unwinding past it, or on
// SIGTERM/SIGINT, when launch or Slurm stops the job):
//
//   worker 0: gradient bytes of its pushes acknowledged, by server: 0: 5382480, 1: 5371820
//
// A server killed by SIGKILL cannot say what it had applied; the sum of
// these over the workers is a lower bound of it (what it had applied but
// not yet acknowledged is missing), which is how the bytes a whole-job
// restart threw away are counted for it.
//
//   apps::AcknowledgedPushesReport report(w, kv);   // after kv, so it goes first
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "worker/kv_client.h"

namespace parafab::apps {

class AcknowledgedPushesReport {
 public:
  // Watches SIGTERM and SIGINT (the one SignalPipe of the process): on
  // either it prints the line and exits 128+N at once.
  AcknowledgedPushesReport(uint32_t worker, const worker::KvClient& kv);
  // Prints the line (unless a signal did) and stops watching.
  ~AcknowledgedPushesReport();
  AcknowledgedPushesReport(const AcknowledgedPushesReport&) = delete;
  AcknowledgedPushesReport& operator=(const AcknowledgedPushesReport&) = delete;

 private:
  void print() const;

  uint32_t worker_;
  const worker::KvClient& kv_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace parafab::apps
