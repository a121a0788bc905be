#include "apps/host_threads.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace parafab::apps {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

int threads_from_environment() {
  if (const char* e = std::getenv(kThreadsEnv); e != nullptr && *e != '\0') {
    int n = 0;
    const char* end = e + std::strlen(e);
    const auto [at, ec] = std::from_chars(e, end, n);
    if (ec == std::errc() && at == end && n > 0) return n;
    std::fprintf(stderr, "warning: %s=%s is not a positive integer; ignored\n", kThreadsEnv, e);
  }
  return usable_cpus();
}

}  // namespace

int default_threads() {
  static const int threads = threads_from_environment();  // one warning, however many commands ask
  return threads;
}

}  // namespace parafab::apps
