#include "apps/acknowledged_pushes_report.h"

#include <poll.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "apps/signal_pipe.h"

namespace parafab::apps {

AcknowledgedPushesReport::AcknowledgedPushesReport(uint32_t worker, const worker::KvClient& kv)
    : worker_(worker), kv_(kv) {
  auto signals = std::make_shared<SignalPipe>(std::initializer_list<int>{SIGTERM, SIGINT});
  watcher_ = std::thread([this, signals] {
    while (!stop_) {
      pollfd p{signals->fd(), POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      for (const int s : signals->take()) {
        print();
        std::fprintf(stderr, "worker %u: stopped by signal %d (%s)\n", worker_, s, strsignal(s));
        std::fflush(stderr);
        std::_Exit(128 + s);
      }
    }
  });
}

AcknowledgedPushesReport::~AcknowledgedPushesReport() {
  stop_ = true;
  watcher_.join();  // the SignalPipe goes with the thread's copy: the old dispositions come back
  print();
}

void AcknowledgedPushesReport::print() const {
  std::string by_server;
  const std::vector<uint64_t> acked = kv_.acked_push_bytes();
  for (size_t s = 0; s < acked.size(); ++s) {
    by_server += (s ? ", " : "") + std::to_string(s) + ": " + std::to_string(acked[s]);
  }
  std::fprintf(stderr, "worker %u: gradient bytes of its pushes acknowledged, by server: %s\n", worker_,
               by_server.c_str());
}

}  // namespace parafab::apps
