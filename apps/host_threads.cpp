#include "apps/host_threads.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace parafab::apps {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int cpu_share(int workers) { return std::max(1, usable_cpus() / std::max(1, workers)); }

std::optional<int> parse_positive_int(std::string_view text) {
  int n = 0;
  const auto [at, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || at != text.data() + text.size() || n <= 0) return std::nullopt;
  return n;
}

namespace {

int threads_from_environment() {
  if (const char* e = std::getenv(kThreadsEnv); e != nullptr && *e != '\0') {
    if (const std::optional<int> n = parse_positive_int(e)) return *n;
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
