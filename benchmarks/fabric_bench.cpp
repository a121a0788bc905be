#include "benchmarks/fabric_bench.h"

#include <fmt/format.h>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "benchmarks/bench_endpoint.h"
#include "benchmarks/bench_rounds.h"
#include "benchmarks/memory_ceiling.h"
#include "benchmarks/pingpong_ceiling.h"
#include "rdma/endpoint.h"
#include "rdma/fabric_error.h"

namespace parafab::benchmarks {
namespace {

using Clock = std::chrono::steady_clock;
constexpr rdma::PeerId kA = 0;
constexpr rdma::PeerId kB = 1;
// Tags: timed messages carry their iteration number; warm-up and control
// messages live far above any iteration count.
constexpr uint64_t kWarmupTag = uint64_t{1} << 40;
constexpr uint64_t kReadyTag = uint64_t{1} << 41;
// Pattern seeds of the middle messages and of the RMA region, apart from
// every iteration number.
constexpr uint64_t kMidSeed = uint64_t{1} << 50;
constexpr uint64_t kRmaSeed = (uint64_t{1} << 50) + 1;

// A failed case: `code` 1 for a verification failure, 2 for anything else.
struct CaseFailure : std::runtime_error {
  int code;
  CaseFailure(int c, const std::string& what) : std::runtime_error(what), code(c) {}
};

// Word k of message `seed`. k * odd is a bijection mod 2^32, so the words of
// one message (up to 16 GiB) are distinct; the seed enters by XOR with an
// odd multiple, so two messages differ in every word.
uint32_t pattern_word(uint64_t seed, uint64_t k) {
  return static_cast<uint32_t>(k * 0x9E3779B1u) ^ static_cast<uint32_t>(seed * 0x85EBCA77u + 0x27D4EB2Fu);
}

void fill_pattern(std::byte* p, size_t n, uint64_t seed) {
  const size_t words = n / 4;
  for (size_t k = 0; k < words; ++k) {
    const uint32_t w = pattern_word(seed, k);
    std::memcpy(p + 4 * k, &w, 4);
  }
  const uint32_t tail = pattern_word(seed, words);
  std::memcpy(p + 4 * words, &tail, n % 4);
}

// The first byte that differs from message `seed`'s pattern, if any.
std::optional<size_t> pattern_mismatch(const std::byte* p, size_t n, uint64_t seed) {
  std::vector<std::byte> want(n);
  fill_pattern(want.data(), n, seed);
  if (std::memcmp(p, want.data(), n) == 0) return std::nullopt;
  return static_cast<size_t>(std::mismatch(p, p + n, want.data()).first - p);
}

// Middle messages: the kMidSeed pattern with the iteration number in the
// first 8 bytes (when the message has room for it).
void stamp(std::byte* p, size_t n, uint64_t iteration) {
  if (n >= 8) std::memcpy(p, &iteration, 8);
}

bool stamp_ok(const std::byte* p, size_t n, uint64_t iteration, const std::byte* mid) {
  if (n < 8) return std::memcmp(p, mid, n) == 0;
  return std::memcmp(p, &iteration, 8) == 0 && std::memcmp(p + n - std::min<size_t>(n - 8, 8),
                                                           mid + n - std::min<size_t>(n - 8, 8),
                                                           std::min<size_t>(n - 8, 8)) == 0;
}

// Time on the clock minus what was spent checking.
class Stopwatch {
 public:
  void start() { start_ = Clock::now(); }
  void pause() { paused_at_ = Clock::now(); }
  void resume() { excluded_ += Clock::now() - paused_at_; }
  double elapsed_us(Clock::time_point end) const {
    return std::chrono::duration<double, std::micro>(end - start_ - excluded_).count();
  }

 private:
  Clock::time_point start_, paused_at_;
  Clock::duration excluded_{0};
};

struct Payloads {
  std::vector<std::byte> first, last, mid;
  Payloads(size_t n, int iterations) : first(n), last(n), mid(n) {
    fill_pattern(first.data(), n, 0);
    fill_pattern(last.data(), n, static_cast<uint64_t>(iterations - 1));
    fill_pattern(mid.data(), n, kMidSeed);
  }
};

// What a timed loop is doing, for an error message: a literal and the
// iteration, put into words only when something failed. Formatting (and
// allocating) the text on every call cost the timed loops 4 heap blocks and
// 2 fmt::format calls a round trip.
struct Where {
  const char* what;
  int iteration = -1;
  Where(const char* w) : what(w) {}  // NOLINT: implicit, from a literal
  Where(const char* w, int i) : what(w), iteration(i) {}
  std::string text() const {
    return iteration < 0 ? std::string(what) : fmt::format("{} (iteration {})", what, iteration);
  }
};

void check_status(const rdma::Status& s, const Where& where) {
  if (!s.ok()) throw CaseFailure(2, where.text() + ": " + s.to_string());
}

rdma::Message receive_or_throw(rdma::Endpoint& e, std::chrono::milliseconds timeout, const Where& where) {
  auto m = e.receive(timeout);
  if (!m) {
    throw CaseFailure(2, where.text() + ": nothing received within " + std::to_string(timeout.count()) + " ms");
  }
  return std::move(*m);
}

// A thread that runs `body` and keeps its first exception for join_and_rethrow.
// Destroying it joins: it outlives no endpoint declared before it.
class Helper {
 public:
  explicit Helper(std::function<void(const std::atomic<bool>& stop)> body)
      : thread_([this, body = std::move(body)] {
          try {
            body(stop_);
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~Helper() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void join_and_rethrow() {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(error_);
  }
  void stop() { stop_ = true; }

 private:
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::thread thread_;
};

// Receives on `e` in short slices so that a stop request ends the wait.
rdma::Message receive_until(rdma::Endpoint& e, const std::atomic<bool>& stop, std::chrono::milliseconds timeout,
                            const Where& where) {
  const auto deadline = Clock::now() + timeout;
  while (!stop && Clock::now() < deadline) {
    if (auto m = e.receive(std::chrono::milliseconds(100))) return std::move(*m);
  }
  throw CaseFailure(2, where.text() + (stop ? ": stopped" : ": nothing received within the timeout"));
}

struct Timed {
  double elapsed_us = 0.0;
};

// Whether message m is message i of a ping-pong or stream (tag and size;
// its bytes: the whole pattern for the first and last, the stamp for the
// others); what is wrong with it otherwise.
std::optional<std::string> wrong_message(const rdma::Message& m, size_t n, int i, int iterations,
                                         const Payloads& pay) {
  if (m.tag != static_cast<uint64_t>(i) || m.data.size() != n) {
    return fmt::format("has tag {} and {} bytes, want tag {} and {} bytes", m.tag, m.data.size(), i, n);
  }
  if (i == 0 || i == iterations - 1) {
    if (auto at = pattern_mismatch(m.data.data(), n, i == 0 ? 0 : iterations - 1)) {
      return fmt::format("differs at byte {}", *at);
    }
  } else if (!stamp_ok(m.data.data(), n, i, pay.mid.data())) {
    return std::string("has a wrong stamp");
  }
  return std::nullopt;
}

// tagged_pingpong: A sends message i, B answers with message i of the same
// size from buffers of its own, and each verifies what it receives. As in
// fi_pingpong, neither sends the bytes it has just received: an echo would
// make the reader copy lines dirty in the other core's cache, which on this
// machine's two vCPUs cost from nothing to 3x the whole round trip at 64 KiB
// (varying with the host's placement of the vCPUs) -- a cost of the echo,
// not of the transport, and one fi_pingpong's figure does not include.
Timed run_pingpong(rdma::Endpoint& a, rdma::Endpoint& b, size_t n, int iterations, int warmup, bool verify,
                   std::chrono::milliseconds timeout) {
  Payloads pay(n, iterations);
  Payloads answers(n, iterations);  // B's, the same patterns in B's own memory
  auto buffer_of = [&](Payloads& p, int i) -> std::byte* {
    if (i == 0) return p.first.data();
    if (i == iterations - 1) return p.last.data();
    stamp(p.mid.data(), n, static_cast<uint64_t>(i));
    return p.mid.data();
  };
  Helper answer([&](const std::atomic<bool>& stop) {
    for (int w = 0; w < warmup; ++w) {
      rdma::Message m = receive_until(b, stop, timeout, "tagged_pingpong warm-up: B");
      auto sent = b.send(kA, m.tag, answers.mid.data(), n);
      check_status(b.wait(sent), "tagged_pingpong warm-up: B's answer");
    }
    // The first and last messages are checked whole after the timed loop.
    std::vector<std::pair<int, rdma::Message>> ends;
    for (int i = 0; i < iterations; ++i) {
      rdma::Message m = receive_until(b, stop, timeout, Where("tagged_pingpong: B", i));
      auto sent = b.send(kA, static_cast<uint64_t>(i), buffer_of(answers, i), n);
      check_status(b.wait(sent), Where("tagged_pingpong: B's answer", i));
      if (!verify) continue;
      if (i == 0 || i == iterations - 1) {
        ends.emplace_back(i, std::move(m));
      } else if (auto why = wrong_message(m, n, i, iterations, pay)) {
        throw CaseFailure(1, fmt::format("tagged_pingpong: B's message {} ({} bytes) {}", i, n, *why));
      }
    }
    for (const auto& [i, m] : ends) {
      if (auto why = wrong_message(m, n, i, iterations, pay)) {
        throw CaseFailure(1, fmt::format("tagged_pingpong: B's message {} ({} bytes) {}", i, n, *why));
      }
    }
  });
  for (int w = 0; w < warmup; ++w) {
    auto sent = a.send(kB, kWarmupTag + w, pay.mid.data(), n);
    rdma::Message m = receive_or_throw(a, timeout, "tagged_pingpong warm-up: A");
    check_status(a.wait(sent), "tagged_pingpong warm-up: A's send");
    if (m.tag != kWarmupTag + w || m.data.size() != n) throw CaseFailure(1, "tagged_pingpong warm-up: wrong answer");
  }
  Stopwatch clock;
  clock.start();
  for (int i = 0; i < iterations; ++i) {
    auto sent = a.send(kB, static_cast<uint64_t>(i), buffer_of(pay, i), n);
    rdma::Message m = receive_or_throw(a, timeout, Where("tagged_pingpong: A", i));
    check_status(a.wait(sent), Where("tagged_pingpong: A's send", i));
    if (!verify) continue;
    clock.pause();
    if (auto why = wrong_message(m, n, i, iterations, answers)) {
      throw CaseFailure(1, fmt::format("tagged_pingpong: A's answer {} ({} bytes) {}", i, n, *why));
    }
    clock.resume();
  }
  const auto end = Clock::now();
  answer.join_and_rethrow();
  return {clock.elapsed_us(end)};
}

// tagged_stream: A keeps `window` sends in flight; B receives them all.
Timed run_stream(rdma::Endpoint& a, rdma::Endpoint& b, size_t n, int iterations, int warmup, int window,
                 bool verify, std::chrono::milliseconds timeout) {
  Payloads pay(n, iterations);
  // The middle messages' buffers: slot i % window, free again once send
  // i - window completed (the window guarantees it).
  std::vector<std::vector<std::byte>> slots(static_cast<size_t>(window), pay.mid);
  Clock::time_point end;
  std::optional<rdma::Message> first_msg, last_msg;
  Helper receiver([&](const std::atomic<bool>& stop) {
    for (int w = 0; w < warmup; ++w) (void)receive_until(b, stop, timeout, "tagged_stream warm-up: B");
    const uint64_t ready = 1;
    auto ready_sent = b.send(kA, kReadyTag, &ready, sizeof ready);
    check_status(b.wait(ready_sent), "tagged_stream: B's ready message");
    std::vector<bool> seen(static_cast<size_t>(iterations), false);
    for (int r = 0; r < iterations; ++r) {
      rdma::Message m = receive_until(b, stop, timeout, "tagged_stream: B");
      if (r == iterations - 1) end = Clock::now();
      if (!verify) continue;
      const uint64_t i = m.tag;
      if (i >= seen.size() || seen[i] || m.data.size() != n) {
        throw CaseFailure(1, fmt::format("tagged_stream: message {} of {} has tag {} and {} bytes (want a new tag "
                                         "below {} and {} bytes)", r, iterations, i, m.data.size(), iterations, n));
      }
      seen[i] = true;
      if (i == 0) {
        first_msg = std::move(m);
      } else if (i + 1 == static_cast<uint64_t>(iterations)) {
        last_msg = std::move(m);
      } else if (auto why = wrong_message(m, n, static_cast<int>(i), iterations, pay)) {
        throw CaseFailure(1, fmt::format("tagged_stream: message {} ({} bytes) {}", i, n, *why));
      }
    }
  });
  std::deque<rdma::Completion> in_flight;
  auto retire = [&](size_t keep) {
    while (in_flight.size() > keep) {
      check_status(a.wait(in_flight.front()), "tagged_stream: A's send");
      in_flight.pop_front();
    }
  };
  for (int w = 0; w < warmup; ++w) {
    retire(static_cast<size_t>(window) - 1);
    in_flight.push_back(a.send(kB, kWarmupTag + w, pay.mid.data(), n));
  }
  retire(0);
  rdma::Message ready = receive_or_throw(a, timeout, "tagged_stream: A waiting for B");
  if (ready.tag != kReadyTag) throw CaseFailure(1, "tagged_stream: unexpected message instead of B's ready");
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    retire(static_cast<size_t>(window) - 1);
    const bool first = i == 0, last = i == iterations - 1;
    std::byte* buf = first ? pay.first.data() : last ? pay.last.data() : slots[i % window].data();
    if (!first && !last) stamp(buf, n, i);
    in_flight.push_back(a.send(kB, i, buf, n));
  }
  retire(0);
  receiver.join_and_rethrow();
  if (verify) {
    for (const auto* m : {&first_msg, &last_msg}) {
      if (!m->has_value()) throw CaseFailure(1, "tagged_stream: first or last message missing");
      const int i = static_cast<int>((*m)->tag);
      if (auto why = wrong_message(**m, n, i, iterations, pay)) {
        throw CaseFailure(1, fmt::format("tagged_stream: message {} ({} bytes) {}", i, n, *why));
      }
    }
  }
  return {std::chrono::duration<double, std::micro>(end - start).count()};
}

struct RmaTimes {
  Timed latency;    // one read at a time
  Timed bandwidth;  // `window` reads in flight
};

RmaTimes run_rma_read(rdma::Endpoint& a, rdma::Endpoint& b, size_t n, int iterations, int warmup, int window,
                      bool verify) {
  std::vector<std::byte> remote(n);
  fill_pattern(remote.data(), n, kRmaSeed);
  const rdma::MemoryRegion remote_mr = b.register_memory(remote.data(), n, rdma::kRemoteRead);
  const rdma::RemoteKey key = remote_mr.remote_key();
  std::vector<std::byte> local(n * static_cast<size_t>(window));
  const rdma::MemoryRegion local_mr = a.register_memory(local.data(), local.size(), rdma::kLocalOnly);
  auto read_into = [&](size_t slot) { return a.read(kB, local.data() + slot * n, n, key, 0, &local_mr); };
  auto check_slot = [&](size_t slot, const std::string& what) {
    if (auto at = pattern_mismatch(local.data() + slot * n, n, kRmaSeed)) {
      throw CaseFailure(1, fmt::format("rma_read {} ({} bytes): differs at byte {}", what, n, *at));
    }
  };
  // B is passive, but under manual progress (tcp) it must read its queue to
  // serve our reads: when it has no progress thread, this one does it.
  Helper serve([&](const std::atomic<bool>& stop) {
    while (!stop) b.progress();
  });
  auto read_wait = [&](size_t slot) {
    auto f = read_into(slot);
    return a.wait(f);
  };
  for (int w = 0; w < warmup; ++w) check_status(read_wait(0), "rma_read warm-up");

  RmaTimes t;
  std::fill(local.begin(), local.end(), std::byte{0});
  Stopwatch clock;
  clock.start();
  for (int i = 0; i < iterations; ++i) {
    check_status(read_wait(0), Where("rma_read", i));
    const bool first = i == 0, last = i == iterations - 1;
    if (!verify || !(first || last || i == iterations - 2)) continue;
    clock.pause();
    if (first || last) check_slot(0, fmt::format("iteration {}", i));
    // The last read lands in a cleared buffer, so a read that moved nothing shows.
    if (i == iterations - 2) std::fill(local.begin(), local.begin() + n, std::byte{0});
    clock.resume();
  }
  t.latency.elapsed_us = clock.elapsed_us(Clock::now());

  std::fill(local.begin(), local.end(), std::byte{0});
  std::deque<rdma::Completion> in_flight;
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    if (in_flight.size() == static_cast<size_t>(window)) {
      check_status(a.wait(in_flight.front()), "rma_read (windowed)");
      in_flight.pop_front();
    }
    in_flight.push_back(read_into(static_cast<size_t>(i % window)));
  }
  while (!in_flight.empty()) {
    check_status(a.wait(in_flight.front()), "rma_read (windowed)");
    in_flight.pop_front();
  }
  t.bandwidth.elapsed_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (verify) {
    // Every slot holds one of the last `window` reads, the last one included.
    for (int s = 0; s < std::min(window, iterations); ++s) check_slot(s, fmt::format("(windowed) slot {}", s));
  }
  return t;
}

std::string human_bytes(size_t n) {
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

}  // namespace

int default_fabric_iterations(size_t bytes) {
  const size_t by_volume = (size_t{512} << 20) / std::max<size_t>(bytes, 1);
  return static_cast<int>(std::clamp<size_t>(by_volume, 200, 5000));
}

BenchRecord& with_latency_ceiling(BenchRecord& record, double ceiling_us, std::string source) {
  record.with_ceiling(ceiling_us, std::move(source));
  if (record.value > 0.0 && ceiling_us > 0.0) {
    record.ratio = ceiling_us / record.value;
  } else {
    record.ratio.reset();
  }
  return record.with("better", "lower");
}

// One round of one size: fi_pingpong's figures (when it ran) and ours.
struct Round {
  std::optional<PingpongFigures> ceiling;
  double pingpong_us = 0.0;  // whole timed loops
  double stream_us = 0.0;
  std::optional<RmaTimes> rma;
};

// Medians over the rounds of a size, and the spread of the rounds' ratios.
class RoundSummary {
 public:
  explicit RoundSummary(std::vector<Round> rounds) : rounds_(std::move(rounds)) {}

  bool has_ceiling() const {
    return std::any_of(rounds_.begin(), rounds_.end(), [](const Round& r) { return r.ceiling.has_value(); });
  }
  double median(const std::function<double(const Round&)>& ours) const {
    std::vector<double> v;
    for (const Round& r : rounds_) v.push_back(ours(r));
    return median_of(std::move(v));
  }
  double median_ceiling(const std::function<double(const PingpongFigures&)>& figure) const {
    std::vector<double> v;
    for (const Round& r : rounds_) {
      if (r.ceiling) v.push_back(figure(*r.ceiling));
    }
    return median_of(std::move(v));
  }
  // The lowest and highest ratio of a round to its own fi_pingpong run
  // (ceiling / ours when lower is better); none with fewer than two.
  std::optional<std::pair<double, double>> ratio_range(const std::function<double(const Round&)>& ours,
                                                       const std::function<double(const PingpongFigures&)>& figure,
                                                       bool lower) const {
    std::vector<double> ratios;
    for (const Round& r : rounds_) {
      if (!r.ceiling || ours(r) <= 0.0 || figure(*r.ceiling) <= 0.0) continue;
      ratios.push_back(lower ? figure(*r.ceiling) / ours(r) : ours(r) / figure(*r.ceiling));
    }
    if (ratios.size() < 2) return std::nullopt;
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    return std::make_pair(*lo, *hi);
  }

 private:
  std::vector<Round> rounds_;
};

int measure_fabric_provider(const FabricBenchOptions& o, const std::string& provider, BenchReport& report,
                            std::ostream& log) {
  auto iterations_for = [&](size_t s) { return o.iterations > 0 ? o.iterations : default_fabric_iterations(s); };

  // Size by size: fi_pingpong, then our cases on endpoints opened for that
  // size alone, so that both figures of a ratio come from the same few
  // seconds (this machine's speed drifts up to 2x over a minute; with every
  // fi_pingpong size first, a ratio compared periods, not transports). No
  // endpoint is open while fi_pingpong is forked: no fork after memory
  // registration (a verbs provider's registered pages would go
  // copy-on-write under the parent).
  bool fi_pingpong_missing = false;
  auto measure_ceiling = [&](size_t s) -> std::optional<std::pair<PingpongFigures, int>> {
    if (!o.ceiling || fi_pingpong_missing) return std::nullopt;
    PingpongCeilingOptions c;
    c.executable = o.fi_pingpong;
    c.provider = provider;
    c.bytes = s;
    // fi_pingpong does not warm up: a few more round trips dilute its set-up.
    c.iterations = std::max(iterations_for(s), 50);
    c.timeout = o.timeout;
    const PingpongCeiling r = measure_fi_pingpong(c);
    if (r.figures) {
      log << fmt::format("{} {}: fi_pingpong {:.2f} MB/s, {:.2f} us/xfer\n", provider, human_bytes(s),
                         r.figures->mb_per_s, r.figures->usec_per_xfer);
      return std::make_pair(*r.figures, c.iterations);
    }
    log << fmt::format("{} {}: no fi_pingpong ceiling ({}): {}\n", provider, human_bytes(s), r.command, r.error);
    if (r.error.rfind("fi_pingpong not found", 0) == 0) {
      log << provider << ": fi_pingpong (Debian package libfabric-bin) is not available; "
          << "figures are reported without a ceiling\n";
      fi_pingpong_missing = true;
    }
    return std::nullopt;
  };

  std::unique_ptr<rdma::Endpoint> a, b;
  auto open_pair = [&]() -> bool {
    try {
      const rdma::EndpointOptions eo = bench_endpoint_options(provider, o.node, o.timeout, o.busy_poll);
      a = std::make_unique<rdma::Endpoint>(eo);
      b = std::make_unique<rdma::Endpoint>(eo);
      a->add_peer(kB, b->address());
      b->add_peer(kA, a->address());
    } catch (const std::exception& e) {
      log << provider << ": cannot open two endpoints: " << e.what() << "\n";
      return false;
    }
    return true;
  };
  bool described = false;

  const char* verified = o.verify ? "yes" : "no";
  const std::string pp_kind = "fi_pingpong ping-pong (both directions)";
  const int rounds = std::max(o.rounds, 1);
  try {
    for (size_t s : o.sizes) {
      const int n = iterations_for(s);
      const int warmup = std::clamp(n / 10, 2, 50);
      // Round by round: fi_pingpong, then our cases on fresh endpoints; each
      // figure is the median of its rounds, and each ratio also comes with
      // the lowest and highest of the rounds' own ratios.
      std::vector<Round> taken;
      int ceiling_iterations = 0;
      for (int r = 0; r < rounds; ++r) {
        a.reset();
        b.reset();
        Round round;
        if (const auto c = measure_ceiling(s)) {
          round.ceiling = c->first;
          ceiling_iterations = c->second;
        }
        if (!open_pair()) return 2;
        if (!described) {
          log << fmt::format("{}: endpoints {} and {} ({}), max message {} bytes, RMA {}\n", provider,
                             a->address_string(), b->address_string(), a->provider().provider, a->max_chunk_bytes(),
                             a->supports_rma() ? "yes" : "no");
          described = true;
        }
        round.pingpong_us = run_pingpong(*a, *b, s, n, warmup, o.verify, o.timeout).elapsed_us;
        round.stream_us = run_stream(*a, *b, s, n, warmup, o.window, o.verify, o.timeout).elapsed_us;
        if (a->supports_rma()) round.rma = run_rma_read(*a, *b, s, n, warmup, o.window, o.verify);
        taken.push_back(round);
      }
      const RoundSummary sum(taken);
      const bool has_c = sum.has_ceiling();
      // What one core copies of the bandwidth cases' working set (`window`
      // messages of this size): beside them, since a receiver's one thread
      // copies each message once (shm: process_vm_readv) and fi_pingpong's
      // one buffer a side stays in cache where these do not.
      const size_t working_set = s * static_cast<size_t>(o.window);
      const int copy_reps = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / working_set, 5, 200));
      const double copy_mb_s = measure_host_memcpy(1, working_set, copy_reps).bytes_per_second / 2.0 / 1e6;
      auto with_copy = [&](BenchRecord& r) {
        if (copy_mb_s > 0.0) r.with("copy_mb_s", copy_mb_s).with("copy_ratio", r.value / copy_mb_s);
      };
      auto base = [](const char* case_name, double value, const char* unit) {
        return BenchRecord("fabric", case_name, value, unit);
      };
      auto common = [&](BenchRecord& r) {
        r.with("provider", provider).with("bytes", s).with("iterations", n).with("verified", verified)
            .with("progress", o.busy_poll ? "busy_poll" : "adaptive").with("rounds", rounds);
        if (has_c) r.with("ceiling_iterations", ceiling_iterations);
      };
      // ours(round) of a record, the same unit as its value; lower: a latency.
      auto add = [&](BenchRecord r, const std::function<double(const Round&)>& ours, bool lower,
                     const std::function<double(const PingpongFigures&)>& ceiling) {
        if (has_c) {
          const double c = sum.median_ceiling(ceiling);
          if (lower) {
            with_latency_ceiling(r, c, "fi_pingpong");
          } else {
            r.with_ceiling(c, "fi_pingpong").with("better", "higher");
          }
          if (const auto range = sum.ratio_range(ours, ceiling, lower)) {
            r.with("ratio_min", range->first).with("ratio_max", range->second);
          }
        } else {
          r.with("better", lower ? "lower" : "higher");
        }
        common(r);
        report.add(std::move(r));
      };
      const double bytes = static_cast<double>(s);
      auto pp_us = [&](const Round& r) { return r.pingpong_us / (2.0 * n); };
      auto pp_mb = [&](const Round& r) { return 2.0 * n * bytes / r.pingpong_us; };
      auto st_mb = [&](const Round& r) { return n * bytes / r.stream_us; };
      auto usec = [](const PingpongFigures& c) { return c.usec_per_xfer; };
      auto mb = [](const PingpongFigures& c) { return c.mb_per_s; };
      add(base("tagged_pingpong", sum.median(pp_us), "us").with("metric", "one-way latency (round trip / 2)"), pp_us,
          true, usec);
      add(base("tagged_pingpong", sum.median(pp_mb), "MB/s").with("metric", "ping-pong bandwidth (both directions)"),
          pp_mb, false, mb);
      BenchRecord stream = base("tagged_stream", sum.median(st_mb), "MB/s");
      stream.with("metric", "one-way bandwidth").with("window", o.window);
      if (has_c) stream.with("ceiling_kind", pp_kind);
      with_copy(stream);
      add(std::move(stream), st_mb, false, mb);

      if (!a->supports_rma()) {
        log << provider << ": no FI_RMA, rma_read skipped\n";
      } else {
        auto rma_us = [&](const Round& r) { return r.rma->latency.elapsed_us / n; };
        auto rma_mb = [&](const Round& r) { return n * bytes / r.rma->bandwidth.elapsed_us; };
        BenchRecord lat = base("rma_read", sum.median(rma_us), "us");
        lat.with("metric", "latency per read, one at a time");
        if (has_c) lat.with("ceiling_kind", "fi_pingpong usec/xfer (half a round trip of tagged messages)");
        add(std::move(lat), rma_us, true, usec);
        BenchRecord bw = base("rma_read", sum.median(rma_mb), "MB/s");
        bw.with("metric", "read bandwidth").with("window", o.window);
        if (has_c) bw.with("ceiling_kind", pp_kind);
        with_copy(bw);
        add(std::move(bw), rma_mb, false, mb);
      }
      log << fmt::format("{} {}: measured ({} iterations, {} round{})\n", provider, human_bytes(s), n, rounds,
                         rounds == 1 ? "" : "s");
    }
  } catch (const CaseFailure& e) {
    log << provider << ": " << (e.code == 1 ? "verification failed: " : "error: ") << e.what() << "\n";
    return e.code;
  } catch (const rdma::FabricError& e) {
    log << provider << ": error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

int run_fabric_bench(const FabricBenchOptions& o, std::ostream& out) {
  if (o.providers.empty() || o.sizes.empty() || o.window < 1 || o.iterations < 0) {
    out << "bench fabric: need at least one provider and one size, window >= 1 and iterations >= 0\n";
    return 2;
  }
  for (size_t s : o.sizes) {
    if (s == 0) {
      out << "bench fabric: sizes must be positive\n";
      return 2;
    }
  }
  BenchReport report;
  int rc = 0;
  for (const auto& p : o.providers) {
    const int r = measure_fabric_provider(o, p, report, out);
    rc = std::max(rc, r);
  }
  out << "\nratio: value / ceiling for MB/s, ceiling / value for us (lower is better); either way >= 1 is as good as "
         "fi_pingpong.\ntagged_stream and rma_read are compared with fi_pingpong's ping-pong figures of the same "
         "size;\ncopy_mb_s beside them is one thread's memcpy of their working set (window x size), copy_ratio the "
         "figure over it.\n";
  report.print_table(out);
  // fi_pingpong spins on its CQs in two processes; where they share cores
  // with other work they are starved and stop being a ceiling. Say so rather
  // than let a ratio far above 1 pass for a result.
  size_t with_ratio = 0, far_above = 0;
  for (const auto& r : report.records()) {
    if (!r.ratio) continue;
    ++with_ratio;
    if (*r.ratio > 1.5) ++far_above;
  }
  if (far_above > 0) {
    double load[1] = {0.0};
    const bool has_load = getloadavg(load, 1) == 1;
    out << fmt::format("note: {} of {} ratios exceed 1.5. fi_pingpong busy-polls in both of its processes; on shared "
                       "or oversubscribed cores ({} CPUs{}) it is starved and its figures are no ceiling. Rerun on "
                       "idle cores to compare.\n",
                       far_above, with_ratio, std::thread::hardware_concurrency(),
                       has_load ? fmt::format(", load average {:.2f}", load[0]) : std::string());
  }
  if (!o.json_path.empty()) report.write_json_lines(o.json_path);
  return rc;
}

}  // namespace parafab::benchmarks
