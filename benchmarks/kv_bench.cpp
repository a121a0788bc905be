#include "benchmarks/kv_bench.h"

#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "benchmarks/bench_endpoint.h"
#include "benchmarks/bench_rounds.h"
#include "benchmarks/fabric_bench.h"
#include "ps/cluster_map.h"
#include "ps/dense_table.h"
#include "ps/server.h"
#include "ps/sparse_table.h"
#include "ps/table_schema.h"
#include "rdma/endpoint.h"
#include "rdma/fabric_error.h"
#include "worker/kv_client.h"

namespace parafab::benchmarks {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kDenseTable = 0, kSparseTable = 1, kLatencyTable = 2, kInsertTable = 3, kBigTable = 4;
constexpr uint32_t kDenseWidth = 1024;                 // floats per row: 4 KiB
constexpr size_t kRowBytes = kDenseWidth * sizeof(float);
constexpr uint32_t kLatencyWidth = 256;                // 1 KiB
constexpr size_t kLatencyBytes = kLatencyWidth * sizeof(float);
constexpr double kSparseGoal = 40e6;                   // keys/s, issue 4
constexpr double kMemoryGoal = 24.0;                   // bytes per key, issue 4
constexpr double kSparseWireBytesPerKey = 12.0;        // uint64 key + float gradient (or value)

// A failed case: `code` 1 for a verification failure, 2 for anything else.
struct CaseFailure : std::runtime_error {
  int code;
  CaseFailure(int c, const std::string& what) : std::runtime_error(what), code(c) {}
};

void check(const rdma::Status& s, const std::string& what) {
  if (!s.ok()) throw CaseFailure(2, what + ": " + s.to_string());
}

// splitmix64's finalizer after adding its increment: a bijection of uint64,
// so distinct inputs give distinct, random-looking keys.
uint64_t scramble(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Key `index` of key stream `stream`: distinct streams and indices (below
// 2^40) give distinct keys.
uint64_t stream_key(uint64_t stream, uint64_t index) { return scramble((stream << 40) + index); }

std::vector<uint64_t> make_keys(size_t n, uint64_t stream) {
  std::vector<uint64_t> keys(n);
  for (size_t j = 0; j < n; ++j) keys[j] = stream_key(stream, j);
  return keys;
}

// Dense gradients: small integers (|g| <= 30), so that SGD with lr 1 keeps
// every value exact up to 2^24 / 30 pushes of a row; neighbours differ.
float dense_grad(size_t index) { return static_cast<float>(static_cast<int>((index * 7) % 61) - 30); }

// Sparse gradients: distinct non-zero fractions.
float sparse_grad(size_t j) { return (static_cast<float>(j % 1999) - 999.5f) * 1e-3f; }

std::string human_bytes(size_t n) {
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

ps::TableSchema dense_schema(uint32_t id, uint32_t width, uint64_t rows) {
  ps::TableSchema t;
  t.id = id;
  t.kind = ps::TableKind::kDense;
  t.width = width;
  t.rows = rows;
  t.updater.kind = ps::UpdaterKind::kSgd;
  t.updater.learning_rate = 1.0f;  // w -= g: minus the sum of the pushes, exactly
  return t;
}

ps::TableSchema adagrad_schema(uint32_t id) {
  ps::TableSchema t;
  t.id = id;
  t.kind = ps::TableKind::kSparse;
  t.width = 1;
  t.updater.kind = ps::UpdaterKind::kAdaGrad;
  return t;
}

// S servers and W workers of one job, each with its own endpoint, meshed by
// hand as the scheduler would; servers serve on threads of their own.
class KvJob {
 public:
  KvJob(const KvBenchOptions& o, const std::string& provider, std::vector<ps::TableSchema> tables) {
    const rdma::EndpointOptions eo = bench_endpoint_options(provider, o.node, o.timeout, o.busy_poll);
    const uint32_t n = o.servers + o.workers;
    for (uint32_t i = 0; i < n; ++i) eps_.push_back(std::make_unique<rdma::Endpoint>(eo));
    map_.tables = std::move(tables);
    for (uint32_t i = 0; i < n; ++i) {
      ps::NodeInfo node;
      node.role = i < o.servers ? ps::Role::kServer : ps::Role::kWorker;
      node.rank = i;
      node.role_rank = i < o.servers ? i : i - o.servers;
      node.host = o.node;
      node.fabric_address = eps_[i]->address();
      (i < o.servers ? map_.servers : map_.workers).push_back(node);
    }
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        if (i != j) eps_[i]->add_peer(j, eps_[j]->address());
      }
    }
    ps::ServerOptions so;
    so.poll = std::chrono::milliseconds(5);
    so.apply_threads = o.apply_threads;
    // No clocks here: each push is applied as it arrives (BSP would hold a
    // round's pushes of several workers until they tick).
    so.consistency = ps::ConsistencyModel::parse("asp");
    for (uint32_t s = 0; s < o.servers; ++s) servers_.push_back(std::make_unique<ps::Server>(*eps_[s], map_, s, so));
    worker::KvClientOptions ko;
    ko.timeout = o.timeout;
    ko.land_dense_pulls = o.land;
    for (uint32_t w = 0; w < o.workers; ++w) {
      clients_.push_back(std::make_unique<worker::KvClient>(*eps_[o.servers + w], map_, w, ko));
    }
    for (auto& s : servers_) threads_.emplace_back([this, srv = s.get()] { srv->serve(stop_); });
  }
  ~KvJob() {
    clients_.clear();
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  worker::KvClient& worker(uint32_t w) { return *clients_[w]; }
  ps::Server& server(uint32_t s) { return *servers_[s]; }
  uint32_t servers() const { return static_cast<uint32_t>(servers_.size()); }
  const rdma::Endpoint& endpoint(uint32_t rank) const { return *eps_[rank]; }
  // Returns once every server has applied what worker w pushed to the
  // width-1 sparse table before: a pull of one key of each server, which
  // each serves after those pushes. A sparse push is answered before it is
  // applied (ps/server.h), so a timed loop of pushes ends with this, and its
  // last apply is on the clock too.
  void settle(uint32_t w, uint32_t table) {
    std::vector<uint64_t> keys;
    for (uint32_t s = 0; s < servers(); ++s) {
      uint64_t k = 0;
      while (map_.partition().server_of(k) != s) ++k;
      keys.push_back(k);
    }
    std::vector<float> out(keys.size());
    const rdma::Status st = clients_[w]->pull(table, keys, out.data()).get();
    if (!st.ok()) throw std::runtime_error("settling pull: " + st.to_string());
  }

 private:
  std::vector<std::unique_ptr<rdma::Endpoint>> eps_;
  ps::ClusterMap map_;
  std::vector<std::unique_ptr<ps::Server>> servers_;
  std::vector<std::unique_ptr<worker::KvClient>> clients_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// How long and how often each worker runs a case.
struct Budget {
  double seconds = 0.0;
  int min_iterations = 1;
  int max_iterations = 1;
};

struct Timing {
  double elapsed_s = 0.0;
  int64_t ops = 0;                   // all workers
  std::vector<int64_t> per_worker;   // operations of each worker
};

// Runs op(w, i) for i = 0, 1, ... on one thread per worker, all released at
// once; then finish(w) (drain what is in flight) on the clock. Elapsed: from
// the release to the last worker's end. The first exception is rethrown.
Timing run_workers(uint32_t workers, const Budget& b, const std::function<void(uint32_t, int)>& op,
                   const std::function<void(uint32_t)>& finish = {}) {
  Timing t;
  t.per_worker.assign(workers, 0);
  std::vector<Clock::time_point> ends(workers);
  std::vector<std::exception_ptr> errors(workers);
  std::atomic<uint32_t> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point start, deadline;
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      try {
        int i = 0;
        for (; i < b.max_iterations && (i < b.min_iterations || Clock::now() < deadline); ++i) op(w, i);
        if (finish) finish(w);
        t.per_worker[w] = i;
      } catch (...) {
        errors[w] = std::current_exception();
      }
      ends[w] = Clock::now();
    });
  }
  while (ready.load() < workers) std::this_thread::yield();
  start = Clock::now();
  deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(b.seconds));
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  const Clock::time_point end = *std::max_element(ends.begin(), ends.end());
  t.elapsed_s = std::chrono::duration<double>(end - start).count();
  for (int64_t n : t.per_worker) t.ops += n;
  return t;
}

// Bench fabric's figures for one size, and fi_pingpong's beside them.
struct FabricFigures {
  double pingpong_mb_s = 0.0, pingpong_us = 0.0, stream_mb_s = 0.0;
  double fi_mb_s = 0.0, fi_us = 0.0;
};

std::optional<int64_t> int_field(const BenchRecord& r, const std::string& key) {
  const BenchField* f = r.field(key);
  if (f == nullptr || !std::holds_alternative<int64_t>(*f)) return std::nullopt;
  return std::get<int64_t>(*f);
}

std::map<size_t, FabricFigures> fabric_figures(const BenchReport& fr) {
  std::map<size_t, FabricFigures> out;
  for (const BenchRecord& r : fr.records()) {
    const auto bytes = int_field(r, "bytes");
    if (!bytes) continue;
    FabricFigures& f = out[static_cast<size_t>(*bytes)];
    const double c = r.ceiling.value_or(0.0);
    if (r.case_name == "tagged_pingpong" && r.unit == "MB/s") {
      f.pingpong_mb_s = r.value;
      f.fi_mb_s = c;
    } else if (r.case_name == "tagged_pingpong" && r.unit == "us") {
      f.pingpong_us = r.value;
      f.fi_us = c;
    } else if (r.case_name == "tagged_stream" && r.unit == "MB/s") {
      f.stream_mb_s = r.value;
    }
  }
  return out;
}

// Everything one provider's cases share.
class KvCases {
 public:
  KvCases(const KvBenchOptions& o, const std::string& provider, std::map<size_t, FabricFigures> fabric,
          BenchReport& report, std::ostream& log)
      : o_(o), provider_(provider), fabric_(std::move(fabric)), report_(report), log_(log) {
    max_rows_ = *std::max_element(o.dense_sizes.begin(), o.dense_sizes.end()) / kRowBytes;
    dense_grads_.resize(max_rows_ * kDenseWidth);
    for (size_t i = 0; i < dense_grads_.size(); ++i) dense_grads_[i] = dense_grad(i);
    row_pushes_.assign(o.workers, std::vector<int64_t>(max_rows_, 0));
    out_.resize(o.workers);
  }

  std::vector<ps::TableSchema> tables() const {
    return {dense_schema(kDenseTable, kDenseWidth, max_rows_), adagrad_schema(kSparseTable),
            dense_schema(kLatencyTable, kLatencyWidth, 1), adagrad_schema(kInsertTable), adagrad_schema(kBigTable)};
  }

  void run(KvJob& job) {
    job_ = &job;
    for (size_t s : o_.dense_sizes) dense_push(s, 1);
    if (o_.window > 1) {
      for (size_t s : o_.dense_sizes) dense_push(s, o_.window);
    }
    expected_dense_ = expected_dense();
    for (size_t s : o_.dense_sizes) dense_pull(s, 1);
    if (o_.window > 1) {
      for (size_t s : o_.dense_sizes) dense_pull(s, o_.window);
    }
    if (job.endpoint(0).supports_rma()) {
      for (size_t s : o_.dense_sizes) dense_pull(s, 1, /*one_sided=*/true);
    } else {
      log_ << fmt::format("{} dense_read: skipped, the provider has no FI_RMA\n", provider_);
    }
    sparse_push_present();
    sparse_pull();
    sparse_push_insert();
    if (o_.big_table_keys > 0) sparse_push_big_table();
    latency();
    job_ = nullptr;
  }

 private:
  Budget budget() const { return {o_.case_seconds, o_.min_iterations, o_.max_iterations}; }
  Budget warmup(int n) const { return {0.0, n, n}; }
  const char* verified() const { return o_.verify ? "yes" : "no"; }

  BenchRecord record(const std::string& case_name, double value, const std::string& unit, int64_t ops) const {
    BenchRecord r("kv", case_name, value, unit);
    r.with("provider", provider_).with("servers", o_.servers).with("workers", o_.workers).with("iterations", ops);
    return r;
  }

  // The fabric's MB/s of `bytes` as the ceiling (tagged_pingpong, or
  // tagged_stream for windowed cases), fi_pingpong's beside it.
  void ceiling_mb_s(BenchRecord& r, size_t bytes, bool stream, double scale = 1.0) const {
    const auto it = fabric_.find(bytes);
    if (it == fabric_.end()) return;
    const FabricFigures& f = it->second;
    const double c = (stream ? f.stream_mb_s : f.pingpong_mb_s) * scale;
    if (c > 0.0) r.with_ceiling(c, stream ? "fabric tagged_stream" : "fabric tagged_pingpong");
    if (f.fi_mb_s > 0.0) {
      r.with("fi_pingpong", f.fi_mb_s * scale).with("fi_pingpong_ratio", r.value / (f.fi_mb_s * scale));
    }
  }

  // ---- dense -------------------------------------------------------------

  void dense_push(size_t bytes, int window) {
    const uint64_t rows = bytes / kRowBytes;
    const std::span<const float> g(dense_grads_.data(), rows * kDenseWidth);
    std::vector<std::deque<std::future<rdma::Status>>> in_flight(o_.workers);
    std::vector<double> client_s(o_.workers, 0.0);
    auto op = [&](uint32_t w, int) {
      auto& q = in_flight[w];
      if (q.size() >= static_cast<size_t>(window)) {
        check(q.front().get(), fmt::format("dense_push {}", human_bytes(bytes)));
        q.pop_front();
      }
      const auto t0 = Clock::now();
      q.push_back(job_->worker(w).dense_push(kDenseTable, 0, rows, g));
      client_s[w] += std::chrono::duration<double>(Clock::now() - t0).count();
      for (uint64_t r = 0; r < rows; ++r) ++row_pushes_[w][r];
    };
    auto drain = [&](uint32_t w) {
      for (auto& f : in_flight[w]) check(f.get(), fmt::format("dense_push {}", human_bytes(bytes)));
      in_flight[w].clear();
    };
    run_workers(o_.workers, warmup(std::max(2, window)), op, drain);
    std::fill(client_s.begin(), client_s.end(), 0.0);
    const Timing t = run_workers(o_.workers, budget(), op, drain);
    double client_total = 0.0;
    for (double c : client_s) client_total += c;
    // The breakdown: time inside KvClient::dense_push (encode, post), and a
    // DenseTable of this thread applying the same rows (the server's work).
    ps::DenseTable local(dense_schema(kDenseTable, kDenseWidth, max_rows_), 0, max_rows_);
    const int applies = static_cast<int>(std::clamp<int64_t>(t.ops, 1, 20));
    const auto a0 = Clock::now();
    for (int i = 0; i < applies; ++i) (void)local.push(0, rows, g.data());
    const double apply_s = std::chrono::duration<double>(Clock::now() - a0).count();
    add_dense("dense_push", bytes, window, t,
              {{"client_mb_per_s", static_cast<double>(t.ops) * static_cast<double>(bytes) / client_total / 1e6},
               {"apply_mb_per_s", applies * static_cast<double>(bytes) / apply_s / 1e6}});
  }

  // Message pulls, `window` in flight; or, one_sided, KvClient::dense_read
  // (one-sided RMA reads of the shards, blocking: one at a time).
  void dense_pull(size_t bytes, int window, bool one_sided = false) {
    const std::string name = one_sided ? "dense_read" : "dense_pull";
    const uint64_t rows = bytes / kRowBytes;
    const size_t floats = rows * kDenseWidth;
    for (auto& out : out_) out.assign(floats * static_cast<size_t>(window), -1.0f);
    std::vector<std::deque<std::future<rdma::Status>>> in_flight(o_.workers);
    std::vector<int> last(o_.workers, -1);
    auto op = [&](uint32_t w, int i) {
      auto& q = in_flight[w];
      if (q.size() >= static_cast<size_t>(window)) {
        check(q.front().get(), fmt::format("dense_pull {}", human_bytes(bytes)));
        q.pop_front();
      }
      const size_t slot = static_cast<size_t>(i % window);
      if (one_sided) {
        check(job_->worker(w).dense_read(kDenseTable, 0, rows, out_[w].data() + slot * floats),
              fmt::format("dense_read {}", human_bytes(bytes)));
      } else {
        q.push_back(job_->worker(w).dense_pull(kDenseTable, 0, rows, out_[w].data() + slot * floats));
      }
      last[w] = static_cast<int>(slot);
    };
    auto drain = [&](uint32_t w) {
      for (auto& f : in_flight[w]) check(f.get(), fmt::format("dense_pull {}", human_bytes(bytes)));
      in_flight[w].clear();
    };
    auto verify = [&](const std::string& which) {
      if (!o_.verify) return;
      for (uint32_t w = 0; w < o_.workers; ++w) {
        const float* got = out_[w].data() + static_cast<size_t>(last[w]) * floats;
        const auto at = std::mismatch(got, got + floats, expected_dense_.data()).first - got;
        if (at != static_cast<ptrdiff_t>(floats)) {
          throw CaseFailure(1, fmt::format("{} {} ({} pull of worker {}): float {} (row {}) is {}, want {}", name,
                                           human_bytes(bytes), which, w, at, at / kDenseWidth, got[at],
                                           expected_dense_[static_cast<size_t>(at)]));
        }
        std::fill(out_[w].begin(), out_[w].end(), -1.0f);  // a pull that moves nothing shows next time
      }
    };
    // Of the bytes the pulls moved, the share received straight into the
    // output array (worker::KvClient's landings) rather than copied there.
    auto pulled = [&] {
      std::pair<uint64_t, uint64_t> sum{0, 0};
      for (uint32_t w = 0; w < o_.workers; ++w) {
        const worker::KvClientStats s = job_->worker(w).stats();
        sum.first += s.pull_bytes;
        sum.second += s.pull_bytes_landed;
      }
      return sum;
    };
    run_workers(o_.workers, warmup(1), op, drain);
    verify("first");
    run_workers(o_.workers, warmup(std::max(1, window - 1)), op, drain);
    const auto before = pulled();
    const Timing t = run_workers(o_.workers, budget(), op, drain);
    const auto after = pulled();
    verify("last");
    std::vector<std::pair<std::string, double>> extra;
    if (!one_sided && after.first > before.first) {
      extra.emplace_back("landed_share", static_cast<double>(after.second - before.second) /
                                             static_cast<double>(after.first - before.first));
    }
    if (one_sided) {
      uint64_t fallbacks = 0;
      for (uint32_t w = 0; w < o_.workers; ++w) fallbacks += job_->worker(w).dense_read_fallbacks();
      extra.emplace_back("message_fallbacks", static_cast<double>(fallbacks));
    }
    add_dense(name, bytes, window, t, extra);
  }

  void add_dense(const std::string& base, size_t bytes, int window, const Timing& t,
                 const std::vector<std::pair<std::string, double>>& extra = {}) {
    const double mb_s = static_cast<double>(t.ops) * static_cast<double>(bytes) / t.elapsed_s / 1e6;
    BenchRecord r = record(window > 1 ? base + "_window" : base, mb_s, "MB/s", t.ops);
    ceiling_mb_s(r, bytes, window > 1);
    r.with("bytes", bytes).with("rows", bytes / kRowBytes).with("in_flight", window)
        .with("keys_per_s", static_cast<double>(t.ops) * static_cast<double>(bytes / kRowBytes) / t.elapsed_s)
        .with("us_per_request", t.elapsed_s * 1e6 * o_.workers / static_cast<double>(t.ops));
    for (const auto& [k, v] : extra) r.with(k, v);
    r.with("verified", verified());
    report_.add(std::move(r));
    log_ << fmt::format("{} {} {} (window {}): {:.1f} MB/s, {} requests\n", provider_, base, human_bytes(bytes),
                        window, mb_s, t.ops);
  }

  // Minus the number of pushes of each row times its gradient (SGD, lr 1).
  std::vector<float> expected_dense() const {
    std::vector<float> want(max_rows_ * kDenseWidth);
    for (size_t r = 0; r < max_rows_; ++r) {
      int64_t n = 0;
      for (const auto& per : row_pushes_) n += per[r];
      for (size_t c = 0; c < kDenseWidth; ++c) {
        want[r * kDenseWidth + c] = -static_cast<float>(n) * dense_grads_[r * kDenseWidth + c];
      }
    }
    return want;
  }

  // ---- sparse ------------------------------------------------------------

  void sparse_push_present() {
    const size_t n = o_.sparse_keys;
    keys_ = make_keys(n, o_.seed * 4 + 1);
    grads_.resize(n);
    for (size_t j = 0; j < n; ++j) grads_[j] = sparse_grad(j);
    // The same (key, gradient) pairs in increasing key order: a trainer's
    // batch after sort and unique, and the order ps-lite requires. Every
    // push still gives each key its own gradient, so the reference below
    // needs only the count of pushes.
    std::vector<size_t> by_key(n);
    std::iota(by_key.begin(), by_key.end(), size_t{0});
    std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return keys_[a] < keys_[b]; });
    sorted_keys_.resize(n);
    std::vector<float> sorted_grads(n);
    for (size_t j = 0; j < n; ++j) {
      sorted_keys_[j] = keys_[by_key[j]];
      sorted_grads[j] = grads_[by_key[j]];
    }
    std::vector<double> client_s(o_.workers, 0.0);
    std::vector<std::deque<std::future<rdma::Status>>> in_flight(o_.workers);
    int window = 1;
    bool sorted = false;
    auto op = [&](uint32_t w, int) {
      auto& q = in_flight[w];
      if (q.size() >= static_cast<size_t>(window)) {
        check(q.front().get(), "sparse_push");
        q.pop_front();
      }
      const auto t0 = Clock::now();
      q.push_back(sorted ? job_->worker(w).push(kSparseTable, sorted_keys_, sorted_grads)
                         : job_->worker(w).push(kSparseTable, keys_, grads_));
      client_s[w] += std::chrono::duration<double>(Clock::now() - t0).count();
    };
    auto drain = [&](uint32_t w) {
      for (auto& f : in_flight[w]) check(f.get(), "sparse_push");
      in_flight[w].clear();
      job_->settle(w, kSparseTable);
    };
    int64_t pushes = run_workers(o_.workers, warmup(2), op, drain).ops;  // inserts the keys
    struct Timed {
      int window;
      bool sorted;
      Timing t;
      double client_s;
    };
    std::vector<Timed> timed;
    const std::pair<int, bool> settings[] = {{1, false}, {o_.window, false}, {1, true}};
    for (const auto& [win, in_order] : settings) {
      if (win < 1 || (win == 1 && !in_order && !timed.empty())) continue;
      window = win;
      sorted = in_order;
      std::fill(client_s.begin(), client_s.end(), 0.0);
      const Timing t = run_workers(o_.workers, budget(), op, drain);
      double client_total = 0.0;
      for (double c : client_s) client_total += c;
      timed.push_back({win, in_order, t, client_total});
      pushes += t.ops;
    }

    // The reference: a SparseTable of this thread fed the same pushes. Its
    // present-key pushes are timed: the table's own apply rate.
    reference_ = std::make_unique<ps::SparseTable>(adagrad_schema(kSparseTable));
    const int64_t replay = o_.verify ? pushes : std::min<int64_t>(pushes, 4);
    double apply_s = 0.0;
    for (int64_t p = 0; p < replay; ++p) {
      const auto t0 = Clock::now();
      (void)reference_->push(keys_, grads_.data());
      if (p > 0) apply_s += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (o_.verify) check_sparse(kSparseTable, keys_, *reference_, "sparse_push");

    for (const auto& [win, in_order, t, client_total] : timed) {
      const double keys_s = static_cast<double>(t.ops) * static_cast<double>(n) / t.elapsed_s;
      BenchRecord r = record(in_order ? "sparse_push_sorted" : win > 1 ? "sparse_push_window" : "sparse_push", keys_s,
                             "keys/s", t.ops);
      sparse_ceiling(r, n);
      r.with("keys", n).with("table_keys", n).with("present", "yes").with("updater", "adagrad").with("in_flight", win)
          .with("key_order", in_order ? "increasing" : "random")
          .with("goal", kSparseGoal).with("goal_ratio", keys_s / kSparseGoal)
          .with("mb_per_s", keys_s * kSparseWireBytesPerKey / 1e6)
          .with("client_keys_per_s", static_cast<double>(t.ops) * static_cast<double>(n) / client_total);
      if (replay > 1) r.with("apply_keys_per_s", static_cast<double>(replay - 1) * static_cast<double>(n) / apply_s);
      r.with("verified", verified());
      report_.add(std::move(r));
      log_ << fmt::format("{} sparse_push (window {}, {} keys): {:.3g} keys/s, {} pushes of {} keys\n", provider_, win,
                          in_order ? "increasing" : "random", keys_s, t.ops, n);
    }
  }

  void sparse_pull() {
    sparse_pull_case("sparse_pull", keys_, "random");
    sparse_pull_case("sparse_pull_sorted", sorted_keys_, "increasing");
  }

  void sparse_pull_case(const char* name, const std::vector<uint64_t>& keys, const char* key_order) {
    const size_t n = keys.size();
    for (auto& out : out_) out.assign(n, -1.0f);
    auto op = [&](uint32_t w, int) { check(job_->worker(w).pull(kSparseTable, keys, out_[w].data()).get(), name); };
    std::vector<float> want(n);
    reference_->pull(keys, want.data());
    auto verify = [&](const char* which) {
      if (!o_.verify) return;
      for (uint32_t w = 0; w < o_.workers; ++w) {
        if (std::memcmp(out_[w].data(), want.data(), n * sizeof(float)) != 0) {
          const size_t at = static_cast<size_t>(std::mismatch(out_[w].begin(), out_[w].end(), want.begin()).first -
                                                out_[w].begin());
          throw CaseFailure(1, fmt::format("{} ({} pull of worker {}): key {} reads {}, the reference {}", name,
                                           which, w, keys[at], out_[w][at], want[at]));
        }
        std::fill(out_[w].begin(), out_[w].end(), -1.0f);
      }
    };
    run_workers(o_.workers, warmup(1), op);
    verify("first");
    const Timing t = run_workers(o_.workers, budget(), op);
    verify("last");
    const double keys_s = static_cast<double>(t.ops) * static_cast<double>(n) / t.elapsed_s;
    BenchRecord r = record(name, keys_s, "keys/s", t.ops);
    sparse_ceiling(r, n);
    r.with("keys", n).with("key_order", key_order).with("mb_per_s", keys_s * kSparseWireBytesPerKey / 1e6)
        .with("verified", verified());
    report_.add(std::move(r));
    log_ << fmt::format("{} {}: {:.3g} keys/s, {} pulls of {} keys\n", provider_, name, keys_s, t.ops, n);
  }

  void sparse_push_insert() {
    const size_t n = o_.sparse_keys;
    const int sets = std::max(1, std::min(o_.max_insert_pushes, o_.max_iterations));
    // Fresh keys for every push: generated beforehand, off the clock.
    std::vector<std::vector<std::vector<uint64_t>>> keys(o_.workers);
    for (uint32_t w = 0; w < o_.workers; ++w) {
      for (int i = 0; i <= sets; ++i) keys[w].push_back(make_keys(n, (o_.seed * 4 + 2) * 4096 + w * 1024 + i));
    }
    std::vector<double> client_s(o_.workers, 0.0);
    std::vector<int> used(o_.workers, 0);  // key sets pushed by each worker
    auto op = [&](uint32_t w, int) {
      const auto t0 = Clock::now();
      auto f = job_->worker(w).push(kInsertTable, keys[w][used[w]++], grads_);
      client_s[w] += std::chrono::duration<double>(Clock::now() - t0).count();
      check(f.get(), "sparse_push_insert");
    };
    run_workers(o_.workers, warmup(1), op);  // key set 0
    std::fill(client_s.begin(), client_s.end(), 0.0);
    Budget b = budget();
    b.min_iterations = std::min(b.min_iterations, sets);
    b.max_iterations = sets;
    const Timing t = run_workers(o_.workers, b, op, [&](uint32_t w) { job_->settle(w, kInsertTable); });
    if (o_.verify) {
      // Each key was pushed once: the reference is one push of each set checked.
      for (uint32_t w = 0; w < o_.workers; ++w) {
        for (int i : {1, used[w] - 1}) {
          ps::SparseTable ref(adagrad_schema(kInsertTable));
          (void)ref.push(keys[w][i], grads_.data());
          check_sparse(kInsertTable, keys[w][i], ref, fmt::format("sparse_push_insert (worker {}, push {})", w, i));
        }
      }
      size_t held = 0;
      for (uint32_t s = 0; s < job_->servers(); ++s) held += job_->server(s).sparse_table(kInsertTable)->size();
      const size_t want = static_cast<size_t>(t.ops + o_.workers) * n;
      if (held != want) {
        throw CaseFailure(1, fmt::format("sparse_push_insert: the servers hold {} keys, want {}", held, want));
      }
    }
    const double keys_s = static_cast<double>(t.ops) * static_cast<double>(n) / t.elapsed_s;
    BenchRecord r = record("sparse_push_insert", keys_s, "keys/s", t.ops);
    sparse_ceiling(r, n);
    double client_total = 0.0;
    for (double c : client_s) client_total += c;
    r.with("keys", n).with("present", "no").with("updater", "adagrad")
        .with("goal", kSparseGoal).with("goal_ratio", keys_s / kSparseGoal)
        .with("mb_per_s", keys_s * kSparseWireBytesPerKey / 1e6)
        .with("client_keys_per_s", static_cast<double>(t.ops) * static_cast<double>(n) / client_total)
        .with("verified", verified());
    report_.add(std::move(r));
    log_ << fmt::format("{} sparse_push_insert: {:.3g} keys/s, {} pushes of {} fresh keys\n", provider_, keys_s,
                        t.ops, n);
  }

  // sparse_push_big_table: the servers hold big_table_keys keys (filled by
  // pushes first, off the clock), and each push is sparse_keys of them at
  // random, from a few disjoint key sets in turn: the hash table's lines come
  // from the outer caches or memory, as on a server with a real model, where
  // sparse_push's table holds only the keys it pushes again and again (the
  // setup of ps-lite's benchmark). Every push gives a key the same gradient
  // (a function of the key), so the result does not depend on the order in
  // which the workers' pushes land, and the reference needs only how often
  // each set was pushed.
  void sparse_push_big_table() {
    const size_t n = o_.sparse_keys, total = o_.big_table_keys;
    const uint64_t stream = o_.seed * 4;  // keys need only be distinct within this table
    auto grads_of = [](const std::vector<uint64_t>& keys) {
      std::vector<float> g(keys.size());
      for (size_t j = 0; j < keys.size(); ++j) g[j] = sparse_grad(static_cast<size_t>(keys[j]));
      return g;
    };
    // Fill, every worker its share of chunks, a few pushes in flight each.
    const auto f0 = Clock::now();
    struct InFlight {
      std::vector<uint64_t> keys;
      std::vector<float> grads;
      std::future<rdma::Status> done;
    };
    std::deque<InFlight> fill;
    for (uint64_t first = 0, c = 0; first < total; first += n, ++c) {
      if (fill.size() >= 4 * static_cast<size_t>(o_.workers)) {
        check(fill.front().done.get(), "sparse_push_big_table: filling the table");
        fill.pop_front();
      }
      InFlight f;
      for (uint64_t i = first; i < std::min<uint64_t>(first + n, total); ++i) f.keys.push_back(stream_key(stream, i));
      f.grads = grads_of(f.keys);
      f.done = job_->worker(static_cast<uint32_t>(c % o_.workers)).push(kBigTable, f.keys, f.grads);
      fill.push_back(std::move(f));
    }
    for (auto& f : fill) check(f.done.get(), "sparse_push_big_table: filling the table");
    for (uint32_t w = 0; w < o_.workers; ++w) job_->settle(w, kBigTable);
    const double fill_s = std::chrono::duration<double>(Clock::now() - f0).count();

    // Disjoint key sets: set s, position j is key index (a (s n + j) +
    // 12345) mod total, a bijection of [0, total) for a prime to total.
    const size_t sets = std::max<size_t>(1, std::min<size_t>(8, total / n));
    uint64_t a = 2654435761u;
    while (std::gcd(a, static_cast<uint64_t>(total)) != 1) a += 2;
    std::vector<std::vector<uint64_t>> set_keys(sets);
    std::vector<std::vector<float>> set_grads(sets);
    for (size_t s = 0; s < sets; ++s) {
      set_keys[s].resize(n);
      for (size_t j = 0; j < n; ++j) {
        const auto pos = static_cast<unsigned __int128>(s * n + j);
        set_keys[s][j] = stream_key(stream, static_cast<uint64_t>((pos * a + 12345) % total));
      }
      set_grads[s] = grads_of(set_keys[s]);
    }
    std::vector<std::vector<int64_t>> pushed(o_.workers, std::vector<int64_t>(sets, 0));
    auto op = [&](uint32_t w, int i) {
      const size_t s = (w + static_cast<size_t>(i)) % sets;
      check(job_->worker(w).push(kBigTable, set_keys[s], set_grads[s]).get(), "sparse_push_big_table");
      ++pushed[w][s];
    };
    auto drain = [&](uint32_t w) { job_->settle(w, kBigTable); };
    run_workers(o_.workers, warmup(1), op, drain);
    const Timing t = run_workers(o_.workers, budget(), op, drain);
    if (o_.verify) {
      for (size_t s = 0; s < sets; ++s) {
        ps::SparseTable ref(adagrad_schema(kBigTable));
        int64_t times = 1;  // the fill
        for (uint32_t w = 0; w < o_.workers; ++w) times += pushed[w][s];
        for (int64_t k = 0; k < times; ++k) (void)ref.push(set_keys[s], set_grads[s].data());
        check_sparse(kBigTable, set_keys[s], ref, fmt::format("sparse_push_big_table (key set {})", s));
      }
      size_t held = 0;
      for (uint32_t sv = 0; sv < job_->servers(); ++sv) held += job_->server(sv).sparse_table(kBigTable)->size();
      if (held != total) {
        throw CaseFailure(1, fmt::format("sparse_push_big_table: the servers hold {} keys, want {}", held, total));
      }
    }
    const double keys_s = static_cast<double>(t.ops) * static_cast<double>(n) / t.elapsed_s;
    BenchRecord r = record("sparse_push_big_table", keys_s, "keys/s", t.ops);
    sparse_ceiling(r, n);
    r.with("keys", n).with("table_keys", total).with("key_sets", sets).with("present", "yes")
        .with("updater", "adagrad").with("in_flight", 1).with("key_order", "random")
        .with("goal", kSparseGoal).with("goal_ratio", keys_s / kSparseGoal)
        .with("mb_per_s", keys_s * kSparseWireBytesPerKey / 1e6)
        .with("fill_keys_per_s", static_cast<double>(total) / fill_s)
        .with("verified", verified());
    report_.add(std::move(r));
    log_ << fmt::format("{} sparse_push_big_table: {:.3g} keys/s, {} pushes of {} keys out of {} in the table "
                        "(filled in {:.1f} s)\n",
                        provider_, keys_s, t.ops, n, total, fill_s);
  }

  // Pulls `keys` from the servers and compares them bit for bit with `ref`.
  void check_sparse(uint32_t table, const std::vector<uint64_t>& keys, const ps::SparseTable& ref,
                    const std::string& what) {
    std::vector<float> got(keys.size(), -1.0f), want(keys.size());
    check(job_->worker(0).pull(table, keys, got.data()).get(), what + ": verification pull");
    ref.pull(keys, want.data());
    if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) {
      const size_t at = static_cast<size_t>(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
      throw CaseFailure(1, fmt::format("{}: key {} holds {}, the reference SparseTable {}", what, keys[at], got[at],
                                       want[at]));
    }
  }

  // keys/s the fabric moves at 12 bytes a key, at the fabric size nearest to
  // the request (tagged_pingpong MB/s).
  void sparse_ceiling(BenchRecord& r, size_t keys) const {
    const double wire = kSparseWireBytesPerKey * static_cast<double>(keys);
    size_t best = 0;
    double best_d = 0.0;
    for (const auto& [s, f] : fabric_) {
      const double d = std::fabs(std::log(static_cast<double>(s) / wire));
      if (f.pingpong_mb_s > 0.0 && (best == 0 || d < best_d)) {
        best = s;
        best_d = d;
      }
    }
    if (best == 0) return;
    ceiling_mb_s(r, best, false, 1e6 / kSparseWireBytesPerKey);
    r.with("ceiling_bytes", best).with("wire_bytes", static_cast<int64_t>(wire));
  }

  // ---- latency -----------------------------------------------------------

  void latency() {
    std::vector<float> g(kLatencyWidth), out(kLatencyWidth);
    for (size_t c = 0; c < kLatencyWidth; ++c) g[c] = dense_grad(c + 17);
    int64_t pushes = 0;
    worker::KvClient& kv = job_->worker(0);
    auto measure = [&](bool push) {
      std::vector<double> us;
      auto one = [&] {
        const auto t0 = Clock::now();
        if (push) {
          check(kv.dense_push(kLatencyTable, 0, 1, g).get(), "push_latency");
          ++pushes;
        } else {
          check(kv.dense_pull(kLatencyTable, 0, 1, out.data()).get(), "pull_latency");
        }
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      };
      for (int i = 0; i < 20; ++i) (void)one();
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(o_.case_seconds));
      for (int i = 0; i < o_.max_iterations && (i < o_.min_iterations || Clock::now() < deadline); ++i) {
        us.push_back(one());
      }
      double sum = 0.0;
      for (double u : us) sum += u;
      std::sort(us.begin(), us.end());
      const double mean = sum / static_cast<double>(us.size());
      BenchRecord r = record(push ? "push_latency" : "pull_latency", mean, "us", static_cast<int64_t>(us.size()));
      const auto it = fabric_.find(1024);
      if (it != fabric_.end() && it->second.pingpong_us > 0.0) {
        with_latency_ceiling(r, 2.0 * it->second.pingpong_us, "fabric tagged_pingpong round trip");
        if (it->second.fi_us > 0.0) {
          r.with("fi_pingpong", 2.0 * it->second.fi_us).with("fi_pingpong_ratio", 2.0 * it->second.fi_us / mean);
        }
      } else {
        r.with("better", "lower");
      }
      r.with("bytes", kLatencyBytes).with("p50_us", us[us.size() / 2])
          .with("p99_us", us[std::min(us.size() - 1, us.size() * 99 / 100)]).with("workers_active", 1)
          .with("metric", "round trip, one request at a time").with("verified", verified());
      if (!push && o_.verify) {
        for (size_t c = 0; c < kLatencyWidth; ++c) {
          const float want = -static_cast<float>(pushes) * g[c];
          if (out[c] != want) {
            throw CaseFailure(1, fmt::format("pull_latency: float {} is {}, want {} after {} pushes", c, out[c], want,
                                             pushes));
          }
        }
      }
      report_.add(std::move(r));
      log_ << fmt::format("{} {}: {:.1f} us mean round trip\n", provider_, push ? "push_latency" : "pull_latency",
                          mean);
    };
    measure(true);
    measure(false);
  }

  const KvBenchOptions& o_;
  std::string provider_;
  std::map<size_t, FabricFigures> fabric_;
  BenchReport& report_;
  std::ostream& log_;
  KvJob* job_ = nullptr;

  size_t max_rows_ = 1;
  std::vector<float> dense_grads_;
  std::vector<std::vector<int64_t>> row_pushes_;  // [worker][row]: dense pushes that covered the row
  std::vector<float> expected_dense_;
  std::vector<std::vector<float>> out_;           // per worker: pull destinations
  std::vector<uint64_t> keys_;
  std::vector<uint64_t> sorted_keys_;  // keys_ in increasing order
  std::vector<float> grads_;
  std::unique_ptr<ps::SparseTable> reference_;
};

std::string check_options(const KvBenchOptions& o) {
  if (o.providers.empty()) return "need at least one provider";
  if (o.servers < 1 || o.workers < 1) return "need at least one server and one worker";
  if (o.dense_sizes.empty()) return "need at least one dense size";
  for (size_t s : o.dense_sizes) {
    if (s == 0 || s % kRowBytes != 0) return fmt::format("dense size {} is not a positive multiple of 4 KiB", s);
  }
  if (o.sparse_keys == 0) return "need at least one sparse key";
  if (o.big_table_keys != 0 && o.big_table_keys < o.sparse_keys) {
    return fmt::format("--big-table-keys {} is below --sparse-keys {} (0 skips sparse_push_big_table)",
                       o.big_table_keys, o.sparse_keys);
  }
  if (o.window < 0) return "window must be >= 0";
  if (o.rounds < 1) return "need at least one round";
  if (o.case_seconds < 0.0 || o.min_iterations < 1 || o.max_iterations < o.min_iterations || o.max_insert_pushes < 1) {
    return "need case seconds >= 0, 1 <= min iterations <= max iterations, max insert pushes >= 1";
  }
  return "";
}

}  // namespace

size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (got != 2) return 0;
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

namespace {

// One round: the fabric's figures, then every case beside them.
int measure_kv_round(const KvBenchOptions& o, const std::string& provider, BenchReport& report, std::ostream& log) {
  // The fabric's figures first: bench fabric runs fi_pingpong before this
  // process opens any endpoint of the provider (no fork after registration).
  // Once per round: the rounds are the repetition.
  FabricBenchOptions fo;
  fo.rounds = 1;
  std::set<size_t> sizes(o.dense_sizes.begin(), o.dense_sizes.end());
  sizes.insert(1024);
  // The power of two nearest to a sparse request's 12 bytes a key: the size
  // its keys/s ceiling is taken from.
  const size_t wire = static_cast<size_t>(kSparseWireBytesPerKey) * o.sparse_keys;
  const size_t low = std::bit_floor(wire);
  sizes.insert(wire - low <= 2 * low - wire ? low : 2 * low);
  fo.providers = {provider};
  fo.sizes.assign(sizes.begin(), sizes.end());
  fo.iterations = o.fabric_iterations;
  fo.window = std::max(o.window, 1);
  fo.verify = o.verify;
  fo.ceiling = o.ceiling;
  fo.busy_poll = o.busy_poll;
  fo.fi_pingpong = o.fi_pingpong;
  fo.node = o.node;
  fo.timeout = o.timeout;
  BenchReport fabric_report;
  const auto f0 = Clock::now();
  const int frc = measure_fabric_provider(fo, provider, fabric_report, log);
  log << fmt::format("{}: fabric ceilings measured in {:.1f} s{}\n", provider,
                     std::chrono::duration<double>(Clock::now() - f0).count(),
                     frc == 0 ? "" : " (with errors: figures without ceilings where missing)");
  auto figures = fabric_figures(fabric_report);
  for (const auto& [s, f] : figures) {
    log << fmt::format("{} {}: fabric tagged_pingpong {:.1f} MB/s {:.2f} us, tagged_stream {:.1f} MB/s; "
                       "fi_pingpong {:.1f} MB/s {:.2f} us\n",
                       provider, human_bytes(s), f.pingpong_mb_s, f.pingpong_us, f.stream_mb_s, f.fi_mb_s, f.fi_us);
  }

  try {
    KvCases cases(o, provider, std::move(figures), report, log);
    KvJob job(o, provider, cases.tables());
    cases.run(job);
  } catch (const CaseFailure& e) {
    log << provider << ": " << (e.code == 1 ? "verification failed: " : "error: ") << e.what() << "\n";
    return e.code;
  } catch (const rdma::FabricError& e) {
    log << provider << ": error: " << e.what() << "\n";
    return 2;
  }
  return frc == 1 ? 1 : 0;
}

}  // namespace

int measure_kv_provider(const KvBenchOptions& o, const std::string& provider, BenchReport& report,
                        std::ostream& log) {
  const int rounds = o.rounds;
  std::vector<BenchReport> done;
  for (int r = 1; r <= rounds; ++r) {
    if (rounds > 1) log << fmt::format("{}: round {} of {}\n", provider, r, rounds);
    BenchReport round;
    const int rc = measure_kv_round(o, provider, round, log);
    if (rc != 0) {
      // The rounds before it merged, or what this one measured: not a
      // partial round among whole ones.
      const BenchReport keep = done.empty() ? std::move(round) : merge_rounds(done);
      for (const BenchRecord& rec : keep.records()) report.add(rec);
      if (!done.empty()) log << fmt::format("{}: reporting the {} whole round(s) before it\n", provider, done.size());
      return rc;
    }
    done.push_back(std::move(round));
  }
  const BenchReport merged = merge_rounds(done);
  for (const BenchRecord& rec : merged.records()) report.add(rec);
  return 0;
}

int measure_kv_memory(const KvBenchOptions& o, BenchReport& report, std::ostream& log) {
  const size_t n = o.memory_keys;
  constexpr size_t kBatch = 100000;
  std::vector<uint64_t> keys(std::min(n, kBatch));
  std::vector<float> grads(keys.size());
  for (size_t j = 0; j < grads.size(); ++j) grads[j] = sparse_grad(j);
  // Hand freed heap back first, so the table cannot hide in pages that are
  // already resident.
  malloc_trim(0);
  const size_t before = resident_bytes();
  const auto t0 = Clock::now();
  auto table = std::make_unique<ps::SparseTable>(adagrad_schema(0));
  for (size_t done = 0; done < n; done += keys.size()) {
    const size_t m = std::min(keys.size(), n - done);
    for (size_t j = 0; j < m; ++j) keys[j] = stream_key(o.seed * 4 + 3, done + j);
    (void)table->push(std::span<const uint64_t>(keys.data(), m), grads.data());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const size_t after = resident_bytes();
  const double per_key = (static_cast<double>(after) - static_cast<double>(before)) / static_cast<double>(n);
  BenchRecord r("kv", "sparse_memory", per_key, "B/key");
  with_latency_ceiling(r, kMemoryGoal, "goal");  // lower is better: ratio = goal / value
  r.with("keys", n).with("width", 1).with("updater", "adagrad")
      .with("table_bytes_per_key", static_cast<double>(table->memory_bytes()) / static_cast<double>(n))
      .with("resident_before", before).with("resident_after", after)
      .with("insert_keys_per_s", static_cast<double>(n) / seconds)
      .with("metric", "(resident after - before) / keys, /proc/self/statm");
  const bool lost = table->size() != n;
  r.with("verified", lost ? "failed" : "yes");
  report.add(std::move(r));
  log << fmt::format("sparse_memory: {} keys, {:.2f} B/key resident, {:.2f} B/key by the table's count, {:.1f} s\n", n,
                     per_key, static_cast<double>(table->memory_bytes()) / static_cast<double>(n), seconds);
  if (lost) {
    log << fmt::format("sparse_memory: verification failed: the table holds {} keys, want {}\n", table->size(), n);
    return 1;
  }
  return 0;
}

int run_kv_bench(const KvBenchOptions& o, std::ostream& out) {
  if (const std::string err = check_options(o); !err.empty()) {
    out << "bench kv: " << err << "\n";
    return 2;
  }
  out << fmt::format("bench kv: {} server(s), {} worker(s), {} s per case, sparse {} keys, window {}, {}, {} round{}\n",
                     o.servers, o.workers, o.case_seconds, o.sparse_keys, o.window,
                     o.busy_poll ? "busy polling endpoints" : "adaptive progress threads", o.rounds,
                     o.rounds == 1 ? "" : "s");
  BenchReport report;
  int rc = 0;
  for (const auto& p : o.providers) rc = std::max(rc, measure_kv_provider(o, p, report, out));
  if (o.memory_keys > 0) rc = std::max(rc, measure_kv_memory(o, report, out));
  out << "\nratio: value / ceiling for MB/s and keys/s, ceiling / value for us and B/key (lower is better); >= 1 is "
         "as good as the ceiling.\nrounds: each record is the median of its rounds (value and ceiling), and ratio_min, "
         "ratio_max the lowest and highest of the rounds' own ratios.\nceilings: bench fabric's tagged_pingpong (one request at a time) or tagged_stream "
         "(window) of the same size and provider, measured in this run; sparse keys/s: that MB/s / 12 bytes a key; "
         "*_sorted: the same keys in increasing order; latency: its 1 KiB round trip; sparse_memory: the 24 B/key "
         "goal.\n";
  report.print_table(out);
  if (!o.json_path.empty()) report.write_json_lines(o.json_path);
  return rc;
}

}  // namespace parafab::benchmarks
