// Servers and workers as threads of one process over real libfabric on
// loopback (both providers): sums of pushes, pulls, dense ranges, the SSP
// bound, and bad messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <mutex>
#include <random>
#include <thread>

#include "ps/checkpoint.h"
#include "ps/server.h"
#include "ps/wire_format.h"
#include "rdma/endpoint.h"
#include "worker/kv_client.h"

namespace parafab::ps {
namespace {

using worker::KvClient;
using worker::KvClientOptions;

constexpr const char* kMrLocalSuffix = "+mr_local";

// S servers, W workers, endpoints meshed, servers serving on threads.
class Job {
 public:
  // The last `raw_workers` workers get no KvClient: tests speak bytes on
  // their endpoints (which, with raw_progress false, make no progress
  // unless the test drives them: a peer that stopped reading).
  Job(const std::string& provider, uint32_t servers, uint32_t workers, std::vector<TableSchema> tables,
      ConsistencyModel model = {}, uint32_t raw_workers = 0, KvClientOptions client_options = {},
      bool raw_progress = true) {
    rdma::EndpointOptions o;
    o.provider = provider;
    // "P+mr_local": provider P with every local buffer registered, as
    // FI_MR_LOCAL providers (efa, verbs;ofi_rxm) require.
    if (const size_t plus = provider.find(kMrLocalSuffix); plus != std::string::npos) {
      o.provider = provider.substr(0, plus);
      o.register_local_buffers = true;
    }
    o.timeout = std::chrono::seconds(20);
    const uint32_t n = servers + workers;
    for (uint32_t i = 0; i < n; ++i) {
      rdma::EndpointOptions oi = o;
      if (i >= n - raw_workers) oi.progress_thread = raw_progress;
      eps_.push_back(std::make_unique<rdma::Endpoint>(oi));
    }
    map_.tables = std::move(tables);
    for (uint32_t i = 0; i < n; ++i) {
      NodeInfo node;
      node.role = i < servers ? Role::kServer : Role::kWorker;
      node.rank = i;
      node.role_rank = i < servers ? i : i - servers;
      node.fabric_address = eps_[i]->address();
      (i < servers ? map_.servers : map_.workers).push_back(node);
    }
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        if (i != j) eps_[i]->add_peer(j, eps_[j]->address());
      }
    }
    ServerOptions so;
    so.consistency = model;
    so.poll = std::chrono::milliseconds(5);
    for (uint32_t s = 0; s < servers; ++s) servers_.push_back(std::make_unique<Server>(*eps_[s], map_, s, so));
    for (uint32_t w = 0; w + raw_workers < workers; ++w) clients_.push_back(std::make_unique<KvClient>(*eps_[servers + w], map_, w, client_options));
  }
  void start() {
    for (auto& s : servers_) threads_.emplace_back([this, srv = s.get()] { srv->serve(stop_); });
  }
  ~Job() {
    clients_.clear();
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  KvClient& worker(uint32_t w) { return *clients_[w]; }
  Server& server(uint32_t s) { return *servers_[s]; }
  rdma::Endpoint& endpoint(uint32_t rank) { return *eps_[rank]; }
  const ClusterMap& map() const { return map_; }

 private:
  std::vector<std::unique_ptr<rdma::Endpoint>> eps_;
  ClusterMap map_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<KvClient>> clients_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TableSchema sgd_table(uint32_t id, uint32_t width, TableKind kind = TableKind::kSparse, uint64_t rows = 0) {
  TableSchema t;
  t.id = id;
  t.kind = kind;
  t.width = width;
  t.rows = rows;
  t.updater.kind = UpdaterKind::kSgd;
  t.updater.learning_rate = 1.0f;  // w -= g: values are minus the sum of pushes, exactly (small integers)
  return t;
}

class PsLoopback : public ::testing::TestWithParam<std::string> {};

TEST_P(PsLoopback, PushesFromAllWorkersSumExactlyAndPullsReturnThem) {
  constexpr uint32_t kServers = 2, kWorkers = 3, kWidth = 3;
  Job job(GetParam(), kServers, kWorkers, {sgd_table(5, kWidth)});
  job.start();
  // Each worker pushes integer gradients for overlapping random keys, with
  // duplicates inside a push; the reference sums in int64.
  std::map<uint64_t, std::vector<int64_t>> ref;
  std::vector<std::vector<uint64_t>> keys(kWorkers);
  std::vector<std::vector<float>> grads(kWorkers);
  std::mt19937_64 rng(11);
  for (uint32_t w = 0; w < kWorkers; ++w) {
    for (int i = 0; i < 3000; ++i) {
      const uint64_t k = rng() % 2000 * 0x9e3779b97f4a7c15ULL;  // spread, some repeats
      keys[w].push_back(k);
      auto& r = ref[k];
      r.resize(kWidth, 0);
      for (uint32_t c = 0; c < kWidth; ++c) {
        const int g = static_cast<int>(rng() % 7) - 3;
        grads[w].push_back(static_cast<float>(g));
        r[c] += g;
      }
    }
  }
  std::vector<std::thread> pushers;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    pushers.emplace_back([&, w] {
      const rdma::Status s = job.worker(w).push(5, keys[w], grads[w]).get();
      EXPECT_TRUE(s.ok()) << s.to_string();
    });
  }
  for (auto& t : pushers) t.join();
  std::vector<uint64_t> all;
  for (auto& [k, v] : ref) all.push_back(k);
  all.push_back(all.front());  // a duplicate in the pull
  all.push_back(123456789);    // never pushed: the initial value, 0
  std::vector<float> got(all.size() * kWidth, -999.0f);
  const rdma::Status s = job.worker(1).pull(5, all, got.data()).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    const auto& r = ref[all[i]];
    for (uint32_t c = 0; c < kWidth; ++c) ASSERT_EQ(got[i * kWidth + c], static_cast<float>(-r[c])) << "key " << all[i];
  }
  for (uint32_t c = 0; c < kWidth; ++c) EXPECT_EQ(got[(all.size() - 1) * kWidth + c], 0.0f);
  // The keys spread over both servers.
  EXPECT_GT(job.server(0).sparse_table(5)->size(), 100u);
  EXPECT_GT(job.server(1).sparse_table(5)->size(), 100u);
  EXPECT_EQ(job.server(0).sparse_table(5)->size() + job.server(1).sparse_table(5)->size(), ref.size());
  EXPECT_EQ(job.server(0).stats().bad_messages + job.server(1).stats().bad_messages, 0u);
  // The servers count the gradient bytes they applied: each worker's keys
  // once (the client merges a push's duplicates), kWidth floats each.
  uint64_t expected_bytes = 0;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    expected_bytes += std::set<uint64_t>(keys[w].begin(), keys[w].end()).size() * kWidth * sizeof(float);
  }
  EXPECT_EQ(job.server(0).stats().bytes_pushed + job.server(1).stats().bytes_pushed, expected_bytes);
}

// Width-1 pushes and pulls in the three shapes the client treats apart:
// strictly increasing keys (no dedup pass; with one server, the arrays as
// given), keys in order with a key repeated next to itself (not strictly
// increasing: merged), and keys in random order with repeats (hash dedup,
// per-key copies). Checked against int64 sums, and the servers' count of
// applied gradient bytes shows each push's repeats were merged, not sent.
void run_width_one_shapes(const std::string& provider, uint32_t servers) {
  Job job(provider, servers, 1, {sgd_table(7, 1)});
  job.start();
  std::mt19937_64 rng(29);
  std::map<uint64_t, int64_t> ref;
  uint64_t expected_bytes = 0;
  auto push = [&](const std::vector<uint64_t>& keys) {
    std::vector<float> grads;
    for (uint64_t k : keys) {
      const int g = static_cast<int>(rng() % 9) - 4;
      grads.push_back(static_cast<float>(g));
      ref[k] += g;
    }
    expected_bytes += std::set<uint64_t>(keys.begin(), keys.end()).size() * sizeof(float);
    const rdma::Status st = job.worker(0).push(7, keys, grads).get();
    ASSERT_TRUE(st.ok()) << st.to_string();
  };
  std::vector<uint64_t> increasing;
  for (uint64_t k = 0; k < 4000; ++k) increasing.push_back(k * 0x9e3779b97f4a7c15ULL % (uint64_t{1} << 50) + k);
  std::sort(increasing.begin(), increasing.end());
  increasing.erase(std::unique(increasing.begin(), increasing.end()), increasing.end());
  ASSERT_GT(increasing.size(), 3900u);
  push(increasing);
  std::vector<uint64_t> with_repeats;
  for (size_t i = 0; i < increasing.size(); ++i) {
    with_repeats.push_back(increasing[i]);
    if (i % 5 == 0) with_repeats.push_back(increasing[i]);  // sorted, but not strictly
  }
  push(with_repeats);
  std::vector<uint64_t> shuffled;
  for (int i = 0; i < 3000; ++i) shuffled.push_back(increasing[rng() % increasing.size()]);
  push(shuffled);
  // Pulls: the keys in increasing order, and in random order with a repeat.
  for (const auto& keys : {increasing, shuffled}) {
    std::vector<float> got(keys.size(), -999.0f);
    const rdma::Status st = job.worker(0).pull(7, keys, got.data()).get();
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(-ref[keys[i]])) << "key " << keys[i];
  }
  uint64_t bytes = 0, bad = 0;
  for (uint32_t s = 0; s < servers; ++s) {
    bytes += job.server(s).stats().bytes_pushed;
    bad += job.server(s).stats().bad_messages;
  }
  EXPECT_EQ(bytes, expected_bytes);
  EXPECT_EQ(bad, 0u);
}

TEST_P(PsLoopback, WidthOnePushesInEveryKeyOrderSumExactlyOnOneServer) { run_width_one_shapes(GetParam(), 1); }
TEST_P(PsLoopback, WidthOnePushesInEveryKeyOrderSumExactlyOnTwoServers) { run_width_one_shapes(GetParam(), 2); }

// A server answers a sparse push before it applies it (ps/server.h); the
// answer still orders the push before everything the server handles later.
// Worker 0 pushes 20000 keys (an apply of a millisecond or more, on two
// servers), and as soon as it is answered worker 1, which sent nothing
// before, pulls them: it must see the whole push, every time; and worker 0's
// own pull right after its next push too (read-my-writes).
TEST_P(PsLoopback, AnAnsweredSparsePushIsSeenByEveryLaterPull) {
  // ASP: each push is applied as it arrives (BSP would hold it in its round
  // until both workers tick).
  Job job(GetParam(), 2, 2, {sgd_table(3, 1)}, ConsistencyModel::parse("asp"));
  job.start();
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys(20000);
  for (uint64_t& k : keys) k = rng();
  std::vector<float> grads(keys.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(1 + i % 3);
  std::vector<float> got(keys.size());
  for (int round = 1; round <= 8; ++round) {
    ASSERT_TRUE(job.worker(0).push(3, keys, grads).get().ok());
    ASSERT_TRUE(job.worker(1).pull(3, keys, got.data()).get().ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(got[i], -static_cast<float>(2 * round - 1) * grads[i]) << "round " << round << " key " << i;
    }
    ASSERT_TRUE(job.worker(0).push(3, keys, grads).get().ok());
    ASSERT_TRUE(job.worker(0).pull(3, keys, got.data()).get().ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(got[i], -static_cast<float>(2 * round) * grads[i]) << "round " << round << " key " << i;
    }
  }
}

// KvClientOptions::delta_varint_keys: sorted keys go delta + varint coded
// (ps::kFlagDeltaVarintKeys) to both servers; pushes sum and pulls return
// exactly as with plain keys, duplicates and unsorted keys still go plain,
// and the workers send fewer bytes for the same requests.
TEST_P(PsLoopback, DeltaVarintKeysGiveTheSameResultsInFewerBytes) {
  auto run = [&](bool delta, uint64_t* bytes_sent) {
    KvClientOptions o;
    o.delta_varint_keys = delta;
    Job job(GetParam(), 2, 2, {sgd_table(4, 2)}, ConsistencyModel::parse("asp"), 0, o);
    job.start();
    std::vector<uint64_t> sorted;  // a libsvm-like key space: small, with gaps
    for (uint64_t k = 3; k < 60000; k += 1 + k % 7) sorted.push_back(k);
    sorted.push_back(~uint64_t{0});  // the largest key: a 10-byte varint
    std::vector<uint64_t> shuffled = sorted;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(5));
    shuffled.push_back(shuffled.front());  // a duplicate: merged by the client
    std::map<uint64_t, double> ref;
    auto push = [&](uint32_t w, const std::vector<uint64_t>& keys) {
      std::vector<float> g(keys.size() * 2);
      for (size_t i = 0; i < keys.size(); ++i) {
        for (int c = 0; c < 2; ++c) {
          g[i * 2 + c] = static_cast<float>((keys[i] + c + w) % 5 + 1);
          ref[keys[i] * 2 + c] += g[i * 2 + c];
        }
      }
      ASSERT_TRUE(job.worker(w).push(4, keys, g).get().ok());
    };
    push(0, sorted);
    push(1, shuffled);
    push(1, sorted);
    for (const auto& keys : {sorted, shuffled}) {
      std::vector<float> got(keys.size() * 2);
      ASSERT_TRUE(job.worker(0).pull(4, keys, got.data()).get().ok());
      for (size_t i = 0; i < keys.size(); ++i) {
        for (int c = 0; c < 2; ++c) ASSERT_EQ(got[i * 2 + c], -static_cast<float>(ref[keys[i] * 2 + c])) << keys[i];
      }
    }
    EXPECT_EQ(job.server(0).stats().bad_messages + job.server(1).stats().bad_messages, 0u);
    *bytes_sent = job.endpoint(2).stats().bytes_sent + job.endpoint(3).stats().bytes_sent;
  };
  uint64_t plain = 0, delta = 0;
  run(false, &plain);
  run(true, &delta);
  // Worker 0 sends its sorted push and its sorted pull (7/8 of the key bytes
  // saved) and a shuffled pull (plain either way); worker 1 one sorted push.
  EXPECT_LT(delta, plain) << "delta-varint keys sent no fewer bytes";
  std::vector<uint64_t> sorted;
  for (uint64_t k = 3; k < 60000; k += 1 + k % 7) sorted.push_back(k);
  EXPECT_GE(plain - delta, 3 * sorted.size() * 6) << plain << " against " << delta;
}

TEST_P(PsLoopback, DenseRangesSpanningBothServers) {
  constexpr uint64_t kRows = 1001;
  constexpr uint32_t kWidth = 4;
  Job job(GetParam(), 2, 2, {sgd_table(1, kWidth, TableKind::kDense, kRows)});
  job.start();
  std::vector<float> g(300 * kWidth);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 13);
  ASSERT_TRUE(job.worker(0).dense_push(1, 400, 300, g).get().ok());  // rows 400..699 cross the split at 500
  ASSERT_TRUE(job.worker(1).dense_push(1, 400, 300, g).get().ok());
  std::vector<float> out(kRows * kWidth, 7.0f);
  ASSERT_TRUE(job.worker(0).dense_pull(1, 0, kRows, out.data()).get().ok());
  for (uint64_t r = 0; r < kRows; ++r) {
    for (uint32_t c = 0; c < kWidth; ++c) {
      const float want = (r >= 400 && r < 700) ? -2.0f * g[(r - 400) * kWidth + c] : 0.0f;
      ASSERT_EQ(out[r * kWidth + c], want) << "row " << r;
    }
  }
  const rdma::Status bad = job.worker(0).dense_pull(1, 1000, 2, out.data()).get();
  EXPECT_EQ(bad.code(), rdma::StatusCode::kInvalidArgument);
}

// A dense pull's parts of 64 KiB or more are received straight into the
// caller's array (KvClient's landings), each server's at its own rows, and
// nothing outside the rows pulled is written; smaller parts are copied.
TEST_P(PsLoopback, LargeDensePullsLandInTheCallersArray) {
  constexpr uint64_t kRows = 256;     // 128 rows a server: 128 KiB each
  constexpr uint32_t kWidth = 256;    // 1 KiB a row
  constexpr uint64_t kGuard = 1000;   // floats on each side that nothing may write
  Job job(GetParam(), 2, 1, {sgd_table(1, kWidth, TableKind::kDense, kRows)});
  job.start();
  std::vector<float> g(kRows * kWidth);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 1021);
  ASSERT_TRUE(job.worker(0).dense_push(1, 0, kRows, g).get().ok());
  std::vector<float> out(kGuard + kRows * kWidth + kGuard, 7.0f);
  ASSERT_TRUE(job.worker(0).dense_pull(1, 0, kRows, out.data() + kGuard).get().ok());
  for (size_t i = 0; i < out.size(); ++i) {
    const bool pulled = i >= kGuard && i < kGuard + kRows * kWidth;
    ASSERT_EQ(out[i], pulled ? -g[i - kGuard] : 7.0f) << "float " << i;  // SGD with rate 1
  }
  const uint64_t bytes = kRows * kWidth * sizeof(float);
  EXPECT_EQ(job.worker(0).stats().pull_bytes_landed, bytes);
  // 40 rows (10 KiB from server 0, 30 KiB from server 1): copied.
  std::vector<float> few(40 * kWidth);
  ASSERT_TRUE(job.worker(0).dense_pull(1, 118, 40, few.data()).get().ok());
  for (size_t i = 0; i < few.size(); ++i) ASSERT_EQ(few[i], -g[118 * kWidth + i]) << "float " << i;
  EXPECT_EQ(job.worker(0).stats().pull_bytes_landed, bytes);
  EXPECT_EQ(job.worker(0).stats().pull_bytes, bytes + few.size() * sizeof(float));
}

// Worker `client` adds 1 to every value of dense table `table` (rows x
// width), push after push, on a thread of its own until stop() or the
// destructor, however the test ends (a failed ASSERT returns early, and a
// joinable thread's destructor would end the whole process).
class KeepPushingOnes {
 public:
  KeepPushingOnes(KvClient& client, uint32_t table, uint64_t rows, uint32_t width)
      : ones_(rows * width, -1.0f), thread_([this, &client, table, rows] {
          while (!stop_) {
            ASSERT_TRUE(client.dense_push(table, 0, rows, ones_).get().ok());
            ++pushes_;
          }
        }) {}
  ~KeepPushingOnes() { stop(); }
  KeepPushingOnes(const KeepPushingOnes&) = delete;
  KeepPushingOnes& operator=(const KeepPushingOnes&) = delete;
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int pushes() const { return pushes_; }  // answered so far

 private:
  const std::vector<float> ones_;  // SGD lr 1: value += 1
  std::atomic<bool> stop_{false};
  std::atomic<int> pushes_{0};
  std::thread thread_;  // last: starts once the members above exist
};

// A large dense pull's reply is sent from the table's rows in place (no
// copy): a push arriving while it is still being sent must wait for it, so
// every pull sees each shard as of one moment. Worker 1 keeps adding 1 to
// every value while worker 0 pulls the whole 2 MiB table.
TEST_P(PsLoopback, LargeDensePullsSentInPlaceAreNeverTornByLaterPushes) {
  constexpr uint64_t kRows = 512;
  constexpr uint32_t kWidth = 1024;  // 4 KiB rows: a 1 MiB reply from each server
  Job job(GetParam(), 2, 2, {sgd_table(2, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("asp"));
  job.start();
  KeepPushingOnes pusher(job.worker(1), 2, kRows, kWidth);
  std::vector<float> out(kRows * kWidth);
  float last[2] = {0.0f, 0.0f};
  for (int pull = 0; pull < 40; ++pull) {
    std::fill(out.begin(), out.end(), -7.0f);
    const rdma::Status s = job.worker(0).dense_pull(2, 0, kRows, out.data()).get();
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (uint32_t server = 0; server < 2; ++server) {
      const RowRange r = dense_rows_of(kRows, server, 2);
      const float v = out[r.begin * kWidth];
      ASSERT_GE(v, last[server]) << "server " << server << "'s shard went back";
      last[server] = v;
      for (uint64_t i = r.begin * kWidth; i < r.end * kWidth; ++i) {
        ASSERT_EQ(out[i], v) << "pull " << pull << ": torn reply of server " << server << " at float " << i;
      }
    }
  }
  pusher.stop();
  // At rest, a pull holds every push.
  ASSERT_TRUE(job.worker(0).dense_pull(2, 0, kRows, out.data()).get().ok());
  for (float v : out) ASSERT_EQ(v, static_cast<float>(pusher.pushes()));
  std::printf("40 pulls of 2 MiB during %d pushes; the last pulls mid-run saw %g and %g\n", pusher.pushes(),
              static_cast<double>(last[0]), static_cast<double>(last[1]));
}

// kWidth 256: 32 KiB shards, read with their region's head in one read;
// 4096: 512 KiB shards, head and values read apart.
void run_torn_reads(const std::string& provider, uint32_t kWidth) {
  constexpr uint64_t kRows = 64;
  // ASP: no clocks here, every push applied as it arrives (BSP would hold
  // worker 1's pushes in its round until it ticks).
  Job job(provider, 2, 2, {sgd_table(2, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("asp"));
  job.start();
  std::vector<float> out(kRows * kWidth);
  const rdma::Status first = job.worker(0).dense_read(2, 0, kRows, out.data());
  if (first.code() == rdma::StatusCode::kUnsupported) GTEST_SKIP() << first.to_string();
  ASSERT_TRUE(first.ok()) << first.to_string();
  for (float v : out) ASSERT_EQ(v, 0.0f);
  // Worker 1 keeps adding 1 to every value; each push is atomic per server
  // shard, so a consistent read sees one value across each shard's rows.
  KeepPushingOnes pusher(job.worker(1), 2, kRows, kWidth);
  int reads = 0;
  for (; reads < 200; ++reads) {
    const rdma::Status s = job.worker(0).dense_read(2, 0, kRows, out.data());
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (uint32_t server = 0; server < 2; ++server) {
      const RowRange r = dense_rows_of(kRows, server, 2);
      const float v = out[r.begin * kWidth];
      for (uint64_t i = r.begin * kWidth; i < r.end * kWidth; ++i) {
        ASSERT_EQ(out[i], v) << "torn read of server " << server << "'s shard at float " << i;
      }
    }
  }
  pusher.stop();
  // At rest, the one-sided read equals the message pull.
  std::vector<float> pulled(kRows * kWidth);
  ASSERT_TRUE(job.worker(0).dense_pull(2, 0, kRows, pulled.data()).get().ok());
  ASSERT_TRUE(job.worker(0).dense_read(2, 0, kRows, out.data()).ok());
  EXPECT_EQ(out, pulled);
  EXPECT_GT(pulled[0], 0.0f);
  std::printf("one-sided reads of %u-float rows retried %llu times during %d reads under pushes\n", kWidth,
              static_cast<unsigned long long>(job.worker(0).dense_read_retries()), reads);
}

// A shard that changes during every one-sided read (here its version word
// is held odd by hand, as a push that never ends would leave it) is pulled
// by message after 64 rounds, not failed: the same values, counted as a
// fallback.
TEST_P(PsLoopback, AShardThatKeepsChangingIsPulledByMessageInstead) {
  constexpr uint64_t kRows = 8;
  constexpr uint32_t kWidth = 4;
  Job job(GetParam(), 1, 1, {sgd_table(2, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("asp"));
  job.start();
  std::vector<float> g(kRows * kWidth);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
  ASSERT_TRUE(job.worker(0).dense_push(2, 0, kRows, g).get().ok());
  std::vector<float> out(kRows * kWidth, 7.0f);
  const rdma::Status first = job.worker(0).dense_read(2, 0, kRows, out.data());
  if (first.code() == rdma::StatusCode::kUnsupported) GTEST_SKIP() << first.to_string();
  ASSERT_TRUE(first.ok()) << first.to_string();
  EXPECT_EQ(job.worker(0).dense_read_fallbacks(), 0u);
  auto* version = const_cast<std::atomic<uint64_t>*>(job.server(0).dense_table(2)->version_word());
  const uint64_t even = version->load();
  version->store(even | 1);  // "a push is running", for good
  std::fill(out.begin(), out.end(), 7.0f);
  const rdma::Status s = job.worker(0).dense_read(2, 0, kRows, out.data());
  version->store(even);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], -g[i]) << i;  // SGD lr 1: minus the push
  EXPECT_EQ(job.worker(0).dense_read_fallbacks(), 1u);
  EXPECT_GE(job.worker(0).dense_read_retries(), 64u);
}

TEST_P(PsLoopback, OneSidedDenseReadsAreNeverTorn) { run_torn_reads(GetParam(), 256); }
TEST_P(PsLoopback, OneSidedDenseReadsOfLargeShardsAreNeverTorn) { run_torn_reads(GetParam(), 4096); }

// A one-sided read keeps dense_pull's consistency: it sees this worker's own
// pushes, and beyond the SSP bound it waits as a message pull would.
TEST_P(PsLoopback, OneSidedReadsSeeTheirOwnPushesAndKeepTheSspBound) {
  constexpr uint64_t kRows = 8;
  constexpr uint32_t kWidth = 4;
  Job job(GetParam(), 2, 2, {sgd_table(2, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("ssp:1"));
  std::mutex mu;
  std::condition_variable cv;
  int parked = 0;
  std::vector<std::tuple<uint32_t, int64_t, int64_t>> answered;  // worker, pull clock, min clock
  for (uint32_t srv = 0; srv < 2; ++srv) {
    job.server(srv).on_pull_parked = [&](uint32_t, int64_t, int64_t) {
      std::lock_guard lock(mu);
      ++parked;
      cv.notify_all();
    };
    job.server(srv).on_pull_answered = [&](uint32_t w, int64_t c, int64_t min) {
      std::lock_guard lock(mu);
      answered.emplace_back(w, c, min);
    };
  }
  job.start();
  KvClient& w0 = job.worker(0);
  std::vector<float> out(kRows * kWidth);
  int64_t data_clock = -1;
  const rdma::Status probe = w0.dense_read(2, 0, kRows, out.data(), &data_clock);
  if (probe.code() == rdma::StatusCode::kUnsupported) GTEST_SKIP() << probe.to_string();
  ASSERT_TRUE(probe.ok()) << probe.to_string();
  EXPECT_EQ(data_clock, 0);
  EXPECT_EQ(w0.dense_read_fallbacks(), 0u);
  // A push of no rows sends nothing and leaves nothing unanswered.
  ASSERT_TRUE(w0.dense_push(2, 0, 0, {}).get().ok());
  ASSERT_TRUE(w0.dense_read(2, 0, kRows, out.data()).ok());
  EXPECT_EQ(w0.dense_read_fallbacks(), 0u);

  // Read-my-writes: a push whose reply may not be in yet is seen.
  std::vector<float> g(kRows * kWidth);
  for (size_t i = 0; i < g.size(); ++i) g[i] = -static_cast<float>(i % 7 + 1);  // SGD lr 1: value -= g
  auto pushed = w0.dense_push(2, 0, kRows, g);
  ASSERT_TRUE(w0.dense_read(2, 0, kRows, out.data()).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], -g[i]) << "float " << i;
  ASSERT_TRUE(pushed.get().ok());
  // Answered: read one-sided, no server thread involved.
  const uint64_t before = w0.dense_read_fallbacks();
  ASSERT_TRUE(w0.dense_read(2, 0, kRows, out.data()).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], -g[i]) << "float " << i;
  EXPECT_EQ(w0.dense_read_fallbacks(), before);
  {
    std::lock_guard lock(mu);
    answered.clear();
  }

  // Worker 0 runs two clocks ahead of worker 1, beyond ssp:1's bound: both
  // shards are pulled by message instead, and the read waits, parked, until
  // worker 1 ticks.
  ASSERT_TRUE(w0.clock().get().ok());
  ASSERT_TRUE(w0.clock().get().ok());
  auto read = std::async(std::launch::async, [&] { return w0.dense_read(2, 0, kRows, out.data(), &data_clock); });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return parked >= 1; }))
        << "the read beyond the bound was not parked";
  }
  ASSERT_TRUE(job.worker(1).clock().get().ok());
  const rdma::Status st = read.get();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(data_clock, 1);
  EXPECT_EQ(w0.dense_read_fallbacks(), before + 2);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], -g[i]) << "float " << i;
  std::lock_guard lock(mu);
  ASSERT_EQ(answered.size(), 2u);
  for (auto [w, c, min] : answered) {
    EXPECT_EQ(w, 0u);
    EXPECT_EQ(c, 2);
    EXPECT_EQ(min, 1);
  }
}

// Under BSP rounds an answered dense push still waits in its round until
// every worker has ended it: the pusher's one-sided read of that clock goes
// by message (the server applies the pusher's own round first), and reads
// one-sided again once the round is applied and its clock published.
TEST_P(PsLoopback, OneSidedReadsUnderBspSeeTheirOwnPushesBeforeTheRoundEnds) {
  constexpr uint64_t kRows = 8;
  constexpr uint32_t kWidth = 4;
  Job job(GetParam(), 2, 2, {sgd_table(2, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("bsp"));
  job.start();
  KvClient& w0 = job.worker(0);
  std::vector<float> out(kRows * kWidth);
  const rdma::Status probe = w0.dense_read(2, 0, kRows, out.data());
  if (probe.code() == rdma::StatusCode::kUnsupported) GTEST_SKIP() << probe.to_string();
  ASSERT_TRUE(probe.ok()) << probe.to_string();
  EXPECT_EQ(w0.dense_read_fallbacks(), 0u);
  std::vector<float> g(kRows * kWidth);
  for (size_t i = 0; i < g.size(); ++i) g[i] = -static_cast<float>(i % 5 + 1);  // SGD lr 1: value -= g
  ASSERT_TRUE(w0.dense_push(2, 0, kRows, g).get().ok());  // answered, and waiting in round 0
  int64_t data_clock = -1;
  ASSERT_TRUE(w0.dense_read(2, 0, kRows, out.data(), &data_clock).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], -g[i]) << "float " << i;
  EXPECT_EQ(w0.dense_read_fallbacks(), 2u);  // both shards by message
  // Worker 1, which did not push, reads one-sided what is applied: worker
  // 0's round was applied for worker 0's pull (read-my-writes).
  std::vector<float> other(kRows * kWidth);
  ASSERT_TRUE(job.worker(1).dense_read(2, 0, kRows, other.data()).ok());
  EXPECT_EQ(job.worker(1).dense_read_fallbacks(), 0u);
  // Both end round 0: it is published, and worker 0 reads one-sided again.
  ASSERT_TRUE(w0.clock().get().ok());
  ASSERT_TRUE(job.worker(1).clock().get().ok());
  ASSERT_TRUE(w0.dense_read(2, 0, kRows, out.data(), &data_clock).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], -g[i]) << "float " << i;
  EXPECT_EQ(data_clock, 1);
  EXPECT_EQ(w0.dense_read_fallbacks(), 2u);
}

// Under BSP a round is applied when every worker ended it; a one-sided read
// of the next clock sees the whole round, whichever path it took.
TEST_P(PsLoopback, OneSidedReadsUnderBspSeeWholeRounds) {
  constexpr uint64_t kRows = 6;
  constexpr uint32_t kWidth = 3;
  Job job(GetParam(), 2, 2, {sgd_table(2, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("bsp"));
  job.start();
  std::vector<float> out(kRows * kWidth);
  const rdma::Status probe = job.worker(0).dense_read(2, 0, kRows, out.data());
  if (probe.code() == rdma::StatusCode::kUnsupported) GTEST_SKIP() << probe.to_string();
  ASSERT_TRUE(probe.ok()) << probe.to_string();
  std::vector<float> want(kRows * kWidth, 0.0f);
  for (int round = 0; round < 3; ++round) {
    for (uint32_t w = 0; w < 2; ++w) {
      std::vector<float> g(kRows * kWidth);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i + 3 * w + round) % 5) - 2.0f;
      for (size_t i = 0; i < g.size(); ++i) want[i] -= g[i];
      ASSERT_TRUE(job.worker(w).dense_push(2, 0, kRows, g).get().ok());
    }
    auto c0 = job.worker(0).clock();
    ASSERT_TRUE(job.worker(1).clock().get().ok());
    ASSERT_TRUE(c0.get().ok());
    for (uint32_t w = 0; w < 2; ++w) {
      int64_t data_clock = -1;
      ASSERT_TRUE(job.worker(w).dense_read(2, 0, kRows, out.data(), &data_clock).ok());
      EXPECT_EQ(data_clock, round + 1);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(out[i], want[i]) << "round " << round << " float " << i;
    }
  }
}

// Each suite on both providers, and again with the FI_MR_LOCAL path (every
// local buffer registered and its descriptor passed): servers lending table
// rows to replies, landings and one-sided reads over registered buffers.
INSTANTIATE_TEST_SUITE_P(Loopback, PsLoopback,
                         ::testing::Values("tcp;ofi_rxm", "shm", "tcp;ofi_rxm+mr_local", "shm+mr_local"),
                         [](const auto& info) {
                           const std::string p = info.param;
                           return std::string(p.rfind("shm", 0) == 0 ? "shm" : "tcp_rxm") +
                                  (p.find(kMrLocalSuffix) != std::string::npos ? "_mr_local" : "");
                         });

// Under SSP(s) no pull at clock c is answered before min clock >= c - s, as
// the servers themselves saw it; a slow worker blocks the fast ones without
// failing them.
void run_ssp(int64_t s, const char* model) {
  constexpr uint32_t kWorkers = 3, kIters = 12;
  Job job("tcp;ofi_rxm", 2, kWorkers, {sgd_table(0, 1)}, ConsistencyModel::parse(model));
  std::mutex mu;
  std::vector<std::tuple<uint32_t, int64_t, int64_t>> answered;
  for (uint32_t srv = 0; srv < 2; ++srv) {
    job.server(srv).on_pull_answered = [&](uint32_t w, int64_t c, int64_t min) {
      std::lock_guard lock(mu);
      answered.emplace_back(w, c, min);
    };
  }
  job.start();
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      const std::vector<uint64_t> keys = {1, 2, 3, 4, 5, 6, 7, 8};
      std::vector<float> vals(keys.size());
      const std::vector<float> g(keys.size(), 1.0f);
      for (uint32_t it = 0; it < kIters; ++it) {
        if (!job.worker(w).pull(0, keys, vals.data()).get().ok()) ++failures;
        // Worker 0 is the straggler: it computes longer (not a synchronization).
        if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(15));
        if (!job.worker(w).push(0, keys, g).get().ok()) ++failures;
        if (!job.worker(w).clock().get().ok()) ++failures;
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::lock_guard lock(mu);
  EXPECT_EQ(answered.size(), size_t{kWorkers} * kIters * 2);  // one pull per server per iteration
  int64_t max_ahead = 0;
  for (auto [w, c, min] : answered) {
    EXPECT_GE(min, c - s) << "worker " << w << " pulled at clock " << c << " with the minimum at " << min;
    max_ahead = std::max(max_ahead, c - min);
  }
  // The fast workers did run ahead as far as the bound lets them (not further).
  EXPECT_EQ(max_ahead, s);
}

TEST(PsConsistency, SspBoundHoldsFromTheServersOwnRecord) { run_ssp(2, "ssp:2"); }
TEST(PsConsistency, ZeroStalenessIsBsp) { run_ssp(0, "bsp"); }

// BSP sums a round's pushes of every worker and applies them as one updater
// step when the last worker ends the round; ssp:0 (the same waiting rule)
// applies each push as a step of its own. AdaGrad tells the two apart: one
// step of g0 + g1 is not a step of g0 then one of g1.
TableSchema adagrad_table(uint32_t id, uint32_t width, TableKind kind = TableKind::kSparse, uint64_t rows = 0) {
  TableSchema t = sgd_table(id, width, kind, rows);
  t.updater.kind = UpdaterKind::kAdaGrad;
  t.updater.learning_rate = 0.5f;
  return t;
}

// float64 AdaGrad from a zero weight (no l1, l2), one step per gradient, in order.
double adagrad_steps(const UpdaterConfig& c, std::initializer_list<double> grads) {
  double w = 0, G = c.adagrad_initial_accumulator;
  for (double g : grads) {
    G += g * g;
    w -= c.learning_rate / (c.adagrad_epsilon + std::sqrt(G)) * g;
  }
  return w;
}

struct TwoWorkerRound {
  std::vector<float> sparse = std::vector<float>(3);  // keys 1, 2, 3
  std::vector<float> dense = std::vector<float>(4);   // rows 0, 1 of width 2
  ServerStats stats;
};
const TableSchema kRoundSparse = adagrad_table(0, 1), kRoundDense = adagrad_table(1, 2, TableKind::kDense, 2);

// One server, two workers, AdaGrad tables 0 (sparse) and 1 (dense, 2 rows).
// Worker 0 pushes keys {1, 2} and the dense rows, worker 1 keys {2, 3} and
// the dense rows, worker 0's first (each waited for); both tick; worker 0
// pulls at clock 1.
TwoWorkerRound push_one_round(const char* consistency) {
  Job job("tcp;ofi_rxm", 1, 2, {kRoundSparse, kRoundDense}, ConsistencyModel::parse(consistency));
  job.start();
  const std::vector<uint64_t> k0 = {1, 2}, k1 = {2, 3};
  EXPECT_TRUE(job.worker(0).push(0, k0, std::vector<float>{1, 1}).get().ok());
  EXPECT_TRUE(job.worker(0).dense_push(1, 0, 2, std::vector<float>{1, 2, 3, 4}).get().ok());
  EXPECT_TRUE(job.worker(1).push(0, k1, std::vector<float>{2, 3}).get().ok());
  EXPECT_TRUE(job.worker(1).dense_push(1, 0, 2, std::vector<float>{4, 3, 2, 1}).get().ok());
  EXPECT_TRUE(job.worker(0).clock().get().ok());
  // Parked until worker 1 ends round 0 too.
  TwoWorkerRound r;
  auto sparse = job.worker(0).pull(0, std::vector<uint64_t>{1, 2, 3}, r.sparse.data());
  auto dense = job.worker(0).dense_pull(1, 0, 2, r.dense.data());
  EXPECT_TRUE(job.worker(1).clock().get().ok());
  EXPECT_TRUE(sparse.get().ok());
  EXPECT_TRUE(dense.get().ok());
  r.stats = job.server(0).stats();
  return r;
}

TEST(PsBspRounds, ARoundOfEveryWorkersPushesIsOneStep) {
  const TwoWorkerRound r = push_one_round("bsp");
  const UpdaterConfig& c = kRoundSparse.updater;
  EXPECT_NEAR(r.sparse[0], adagrad_steps(c, {1}), 1e-6);
  EXPECT_NEAR(r.sparse[1], adagrad_steps(c, {1 + 2}), 1e-6);  // one step of the sum
  EXPECT_NEAR(r.sparse[2], adagrad_steps(c, {3}), 1e-6);
  for (float v : r.dense) EXPECT_NEAR(v, adagrad_steps(c, {5}), 1e-6);  // 1+4, 2+3, 3+2, 4+1
  EXPECT_EQ(r.stats.rounds_applied, 1u);
  EXPECT_EQ(r.stats.rounds_applied_early, 0u);
}

TEST(PsBspRounds, UnderZeroStalenessEachPushIsAStepOfItsOwn) {
  const TwoWorkerRound r = push_one_round("ssp:0");
  const UpdaterConfig& c = kRoundSparse.updater;
  EXPECT_NEAR(r.sparse[0], adagrad_steps(c, {1}), 1e-6);
  EXPECT_NEAR(r.sparse[1], adagrad_steps(c, {1, 2}), 1e-6);  // worker 0's step, then worker 1's
  EXPECT_GT(std::abs(adagrad_steps(c, {1, 2}) - adagrad_steps(c, {1 + 2})), 0.1);
  EXPECT_NEAR(r.dense[0], adagrad_steps(c, {1, 4}), 1e-6);
  EXPECT_NEAR(r.dense[3], adagrad_steps(c, {4, 1}), 1e-6);
  EXPECT_EQ(r.stats.rounds_applied, 0u);
}

// Read-my-writes holds under BSP too: a worker that pulls before the round
// ends sees its own push (the round is applied early, and counted); the
// other worker's later push to the same round is then a step of its own.
TEST(PsBspRounds, AWorkersPullAppliesTheRoundHoldingItsOwnPush) {
  const TableSchema sparse = adagrad_table(0, 1);
  Job job("tcp;ofi_rxm", 1, 2, {sparse}, ConsistencyModel::parse("bsp"));
  job.start();
  const std::vector<uint64_t> key = {7};
  float v = 0;
  ASSERT_TRUE(job.worker(1).push(0, key, std::vector<float>{2}).get().ok());
  ASSERT_TRUE(job.worker(0).pull(0, key, &v).get().ok());
  EXPECT_EQ(v, 0.0f);  // worker 1's push waits in round 0: not worker 0's to see before the round ends
  ASSERT_TRUE(job.worker(0).push(0, key, std::vector<float>{1}).get().ok());
  ASSERT_TRUE(job.worker(0).pull(0, key, &v).get().ok());
  EXPECT_NEAR(v, adagrad_steps(sparse.updater, {1 + 2}), 1e-6);  // its own, with worker 1's of the same round
  ASSERT_TRUE(job.worker(1).push(0, key, std::vector<float>{4}).get().ok());
  ASSERT_TRUE(job.worker(1).pull(0, key, &v).get().ok());
  EXPECT_NEAR(v, adagrad_steps(sparse.updater, {1 + 2, 4}), 1e-6);
  EXPECT_EQ(job.server(0).stats().rounds_applied, 2u);
  EXPECT_EQ(job.server(0).stats().rounds_applied_early, 2u);
}

TEST(PsValidation, BadMessagesGetErrorsAndTheServerKeepsServing) {
  // Table 2: 4 MiB a key, so that a pull of 1025 keys asks for a reply past
  // the 4 GiB one may carry (WireLimits::max_reply_bytes).
  Job job("tcp;ofi_rxm", 1, 2, {sgd_table(0, 2), sgd_table(1, 2, TableKind::kDense, 10), sgd_table(2, 1u << 20)}, {},
          /*raw_workers=*/1);
  job.start();
  rdma::Endpoint& rogue = job.endpoint(2);  // worker 1's endpoint, speaking raw bytes
  auto send_raw = [&](std::vector<std::byte> bytes) {
    ASSERT_TRUE(rogue.send(0, 0, bytes.data(), bytes.size()).get().ok());
  };
  const uint64_t key = 42;
  const std::vector<float> two = {1, 2};
  WireHeader h{.op = Op::kPush, .table = 0, .sender = 2, .request_id = 77};
  std::vector<std::vector<std::byte>> bad;
  bad.push_back(std::vector<std::byte>(10));                                     // too short
  bad.push_back(encode_message(WireHeader{.op = Op::kPush, .table = 9, .sender = 2}, {&key, 1}, two));  // no table
  bad.push_back(encode_message(WireHeader{.op = Op::kPush, .table = 0, .sender = 1}, {&key, 1}, two));  // lies about sender
  bad.push_back(encode_message(h, {&key, 1}, std::span<const float>(two.data(), 1)));  // wrong width
  bad.push_back(encode_message(WireHeader{.op = Op::kPullReply, .sender = 2}, {}, std::span<const float>()));  // not a request
  bad.push_back(encode_message(WireHeader{.op = Op::kDensePull, .table = 1, .sender = 2},
                               std::vector<uint64_t>{8, 5}, std::span<const float>()));  // rows out of range
  bad.push_back(encode_message(WireHeader{.op = Op::kPull, .table = 1, .sender = 2}, {&key, 1},
                               std::span<const float>()));  // sparse op on a dense table
  auto garbage = encode_message(h, {&key, 1}, two);
  garbage[0] = std::byte{0};
  bad.push_back(garbage);  // bad magic
  // Clocks a worker never sends: negative, past a finished worker's, and a
  // finished worker's on anything but a clock message.
  bad.push_back(encode_message(WireHeader{.op = Op::kPush, .table = 0, .sender = 2, .clock = -1}, {&key, 1}, two));
  bad.push_back(encode_message(WireHeader{.op = Op::kPush, .table = 0, .sender = 2,
                                          .clock = std::numeric_limits<int64_t>::max()},
                               {&key, 1}, two));
  bad.push_back(encode_message(WireHeader{.op = Op::kPull, .table = 0, .sender = 2, .clock = kMaxWireClock}, {&key, 1},
                               std::span<const float>()));
  bad.push_back(encode_message(WireHeader{.op = Op::kClock, .sender = 2, .clock = kMaxWireClock + 1}, {},
                               std::span<const float>()));
  std::vector<uint64_t> many(1025);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  bad.push_back(encode_message(WireHeader{.op = Op::kPull, .table = 2, .sender = 2}, many,
                               std::span<const float>()));  // a reply of 4 GiB + 4 MiB
  for (auto& b : bad) send_raw(b);
  size_t errors = 0;
  std::vector<std::string> texts;
  while (errors < bad.size()) {
    auto m = rogue.receive(std::chrono::seconds(10));
    ASSERT_TRUE(m) << "only " << errors << " error replies";
    DecodedMessage d;
    ASSERT_FALSE(decode_message(m->data, WireLimits{}, d));
    EXPECT_EQ(d.header.op, Op::kError);
    EXPECT_FALSE(d.error_text.empty());
    texts.push_back(d.error_text);
    ++errors;
  }
  EXPECT_EQ(job.server(0).stats().bad_messages, bad.size());
  auto said = [&](const std::string& what) {
    return std::any_of(texts.begin(), texts.end(), [&](const std::string& t) { return t.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(said("push at clock -1: a worker's clock is in [0, 1152921504606846976)"));
  EXPECT_TRUE(said("pull at clock 1152921504606846976"));
  EXPECT_TRUE(said("clock message at clock 1152921504606846977: a worker's clock is in [0, 1152921504606846976]"));
  EXPECT_TRUE(said("pull of 1025 rows of width 1048576 would need a reply of 4299161600 bytes, more than the "
                   "4294967296 a reply may carry"));
  EXPECT_EQ(job.server(0).sparse_table(0)->size(), 0u);  // no refused push was filed or applied
  // The other worker is served as before.
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE(job.worker(0).push(0, keys, g).get().ok());
  std::vector<float> out(4);
  ASSERT_TRUE(job.worker(0).pull(0, keys, out.data()).get().ok());
  EXPECT_EQ(out, (std::vector<float>{-1, -1, -1, -1}));
  // Non-finite gradients are refused by the updater, and counted.
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN(), 1};
  ASSERT_TRUE(job.worker(0).push(0, std::vector<uint64_t>{3}, nan).get().ok());
  ASSERT_TRUE(job.worker(0).pull(0, std::vector<uint64_t>{3}, out.data()).get().ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(job.server(0).stats().refused_non_finite, 1u);
}

// With two servers each owns half of the hashed keys: a push or pull of a
// key that the other server owns is refused with an error naming both, and
// a server that owns every key (the only one) accepts any.
TEST(PsValidation, KeysOfAnotherServerAreRefusedNamingIt) {
  Job job("tcp;ofi_rxm", 2, 2, {sgd_table(0, 1)}, {}, /*raw_workers=*/1);
  job.start();
  rdma::Endpoint& rogue = job.endpoint(3);  // worker 1's endpoint, speaking raw bytes
  const KeyPartition& part = job.map().partition();
  uint64_t theirs = 1;
  while (part.server_of(theirs) != 1) ++theirs;
  uint64_t ours = 1;
  while (part.server_of(ours) != 0) ++ours;
  const float one = 1.0f;
  const std::vector<uint64_t> keys = {ours, theirs};
  const std::vector<float> grads = {one, one};
  for (Op op : {Op::kPush, Op::kPull}) {
    const auto bytes = encode_message(WireHeader{.op = op, .table = 0, .sender = 3, .request_id = 5}, keys,
                                      op == Op::kPush ? std::span<const float>(grads) : std::span<const float>());
    ASSERT_TRUE(rogue.send(0, 0, bytes.data(), bytes.size()).get().ok());
    auto m = rogue.receive(std::chrono::seconds(10));
    ASSERT_TRUE(m);
    DecodedMessage d;
    ASSERT_FALSE(decode_message(m->data, WireLimits{}, d));
    EXPECT_EQ(d.header.op, Op::kError);
    EXPECT_NE(d.error_text.find("key " + std::to_string(theirs) + " belongs to server 1, not 0"), std::string::npos)
        << d.error_text;
  }
  EXPECT_EQ(job.server(0).stats().bad_messages, 2u);
  EXPECT_EQ(job.server(0).sparse_table(0)->size(), 0u);  // the refused push changed nothing
  Job alone("tcp;ofi_rxm", 1, 1, {sgd_table(0, 1)});
  alone.start();
  ASSERT_TRUE(alone.worker(0).push(0, keys, grads).get().ok());
  // A sparse push is answered before its apply; the pull is served after it.
  std::vector<float> pulled(2);
  ASSERT_TRUE(alone.worker(0).pull(0, keys, pulled.data()).get().ok());
  EXPECT_EQ(pulled, (std::vector<float>{-1, -1}));
  EXPECT_EQ(alone.server(0).sparse_table(0)->size(), 2u);
  EXPECT_EQ(alone.server(0).stats().bad_messages, 0u);
}

// A push sent again with the same request id (a worker retrying after a
// lost reply) is answered every time and applied once; a later id is
// applied, and so is an earlier one never seen (its first copy was lost).
// Sparse and dense alike; the count of retries is kept.
TEST(PsExactlyOnce, ARetriedPushIsAnsweredAndAppliedOnce) {
  // ASP: worker 0 reads worker 1's pushes without clocks (BSP: PsBspRounds).
  Job job("tcp;ofi_rxm", 1, 2, {sgd_table(0, 2), sgd_table(1, 2, TableKind::kDense, 10)},
          ConsistencyModel::parse("asp"), /*raw_workers=*/1);
  job.start();
  rdma::Endpoint& raw = job.endpoint(2);  // worker 1, numbering its own requests
  auto exchange = [&](const std::vector<std::byte>& bytes, Op want) {
    ASSERT_TRUE(raw.send(0, 0, bytes.data(), bytes.size()).get().ok());
    auto m = raw.receive(std::chrono::seconds(10));
    ASSERT_TRUE(m) << "no reply";
    DecodedMessage d;
    ASSERT_FALSE(decode_message(m->data, WireLimits{}, d));
    EXPECT_EQ(d.header.op, want) << d.error_text;
  };
  const uint64_t key = 42;
  const std::vector<float> g = {1, 2};
  const auto push = [&](uint64_t id) {
    return encode_message(WireHeader{.op = Op::kPush, .table = 0, .sender = 2, .request_id = id}, {&key, 1}, g);
  };
  const std::vector<float> dg = {1, 1, 1, 1};  // rows 3 and 4 of the dense table
  const auto dense_push = [&](uint64_t id) {
    return encode_message(WireHeader{.op = Op::kDensePush, .table = 1, .sender = 2, .request_id = id},
                          std::vector<uint64_t>{3, 2}, dg);
  };
  exchange(push(5), Op::kPushReply);
  exchange(push(5), Op::kPushReply);  // the retry: answered, not applied
  exchange(dense_push(6), Op::kDensePushReply);
  exchange(dense_push(6), Op::kDensePushReply);
  // Below the last applied and never seen: the first copy of a push the
  // transport lost, sent again after the worker's later requests. Applied
  // (late); its own retry is not.
  exchange(push(4), Op::kPushReply);
  exchange(push(4), Op::kPushReply);
  std::vector<float> out(2);
  ASSERT_TRUE(job.worker(0).pull(0, std::vector<uint64_t>{key}, out.data()).get().ok());
  EXPECT_EQ(out, (std::vector<float>{-2, -4}));  // SGD with rate 1: minus pushes 5 and 4
  std::vector<float> rows(4);
  ASSERT_TRUE(job.worker(0).dense_pull(1, 3, 2, rows.data()).get().ok());
  EXPECT_EQ(rows, (std::vector<float>{-1, -1, -1, -1}));
  exchange(push(9), Op::kPushReply);  // a new one is applied
  ASSERT_TRUE(job.worker(0).pull(0, std::vector<uint64_t>{key}, out.data()).get().ok());
  EXPECT_EQ(out, (std::vector<float>{-3, -6}));
  EXPECT_EQ(job.server(0).stats().duplicate_pushes, 3u);
  EXPECT_EQ(job.server(0).stats().late_requests, 1u);
  EXPECT_EQ(job.server(0).last_push_ids()[1], 9u);
  // The other worker's ids are its own: its pushes (ids from 1) are applied.
  ASSERT_TRUE(job.worker(0).push(0, std::vector<uint64_t>{key}, g).get().ok());
  ASSERT_TRUE(job.worker(0).pull(0, std::vector<uint64_t>{key}, out.data()).get().ok());
  EXPECT_EQ(out, (std::vector<float>{-4, -8}));
}

// A server that never answers: the request fails at the client's timeout,
// naming the server, saying the request itself went out, and what the
// worker's transport lost (nothing here). The other server's reply counts.
TEST(PsTimeout, AnUnansweredRequestNamesTheServerAndTheTransportsLosses) {
  KvClientOptions co;
  co.timeout = std::chrono::milliseconds(300);
  Job job("shm", 2, 1, {sgd_table(0, 1, TableKind::kDense, 8)}, {}, 0, co);
  std::atomic<bool> stop{false};
  std::thread only_server_0([&] { job.server(0).serve(stop); });  // server 1 never serves
  std::vector<float> rows(8);
  const rdma::Status s = job.worker(0).dense_pull(0, 0, 8, rows.data()).get();
  stop = true;
  only_server_0.join();
  EXPECT_EQ(s.code(), rdma::StatusCode::kTimedOut) << s.to_string();
  EXPECT_NE(s.message().find("no reply from server rank(s) 1 within 300 ms; this worker's transport: no losses counted"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("had not completed"), std::string::npos) << s.message();
}

// A large dense pull's reply that comes after the pull failed by its
// timeout (here the server's answer is made by hand from the request taken
// off its endpoint) does not land in the caller's array: the pull's landing
// ended with it. The reply is counted as unexpected.
TEST(PsTimeout, AReplyAfterItsPullTimedOutDoesNotLandInTheArray) {
  constexpr uint64_t kRows = 64;
  constexpr uint32_t kWidth = 1024;  // 4 KiB a row, 256 KiB in all
  KvClientOptions co;
  co.timeout = std::chrono::milliseconds(300);
  Job job("tcp;ofi_rxm", 1, 1, {sgd_table(0, kWidth, TableKind::kDense, kRows)}, {}, 0, co);
  std::vector<float> out(kRows * kWidth, 7.0f);
  auto pull = job.worker(0).dense_pull(0, 0, kRows, out.data());
  const auto request = job.endpoint(0).receive(std::chrono::seconds(10));
  ASSERT_TRUE(request) << "the pull never reached the server's endpoint";
  EXPECT_EQ(pull.get().code(), rdma::StatusCode::kTimedOut);
  // The server's reply, late: its header, then the rows (all 5).
  DecodedMessage d;
  ASSERT_FALSE(decode_message(request->data, WireLimits{}, d));
  WireHeader h{.op = Op::kDensePullReply, .table = 0, .sender = 0, .clock = 0, .request_id = d.header.request_id,
               .payload_bytes = kRows * kWidth * sizeof(float)};
  std::vector<std::byte> reply(kWireHeaderBytes);
  encode_header(h, reply.data());
  const std::vector<float> rows(kRows * kWidth, 5.0f);
  const rdma::ConstBuffer pieces[2] = {{reply.data(), reply.size()}, {rows.data(), rows.size() * sizeof(float)}};
  ASSERT_TRUE(job.endpoint(0).send(request->from, d.header.request_id, pieces).get().ok());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (job.worker(0).stats().unexpected_replies == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_EQ(job.worker(0).stats().unexpected_replies, 1u);
  EXPECT_EQ(job.endpoint(1).stats().messages_landed, 0u);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 7.0f; }));
}

// The client of the lost-message tests: resending after 200 ms within a
// 20 s timeout, or never, failing at 1 s.
KvClientOptions lost_message_options(bool resend) {
  KvClientOptions co;
  co.timeout = std::chrono::milliseconds(resend ? 20000 : 1000);
  co.resend_after = std::chrono::milliseconds(resend ? 200 : 0);
  return co;
}

// A pull the transport lost (here: taken off the server's endpoint before
// the server serves) is sent again after resend_after and answered;
// with resends off, the same loss fails the pull at the timeout.
TEST(PsTimeout, ALostPullIsSentAgainAndAnswered) {
  for (const bool resend : {true, false}) {
    SCOPED_TRACE(resend ? "resend" : "no resend");
    const KvClientOptions co = lost_message_options(resend);
    Job job("tcp;ofi_rxm", 1, 1, {sgd_table(0, 2)}, {}, 0, co);
    const std::vector<uint64_t> keys = {3, 7, 11};
    std::vector<float> out(6, 1.0f);
    auto pull = job.worker(0).pull(0, keys, out.data());
    ASSERT_TRUE(job.endpoint(0).receive(std::chrono::seconds(10))) << "the pull never reached the server's endpoint";
    job.start();  // serves from now on: only a pull sent again is answered
    const rdma::Status s = pull.get();
    if (resend) {
      EXPECT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(out, std::vector<float>(6, 0.0f));  // the table's initial values
      EXPECT_GE(job.worker(0).stats().overdue_resent, 1u);
      EXPECT_GE(job.server(0).stats().pulls, 1u);
    } else {
      EXPECT_EQ(s.code(), rdma::StatusCode::kTimedOut) << s.to_string();
      EXPECT_EQ(job.worker(0).stats().overdue_resent, 0u);
      EXPECT_EQ(job.server(0).stats().pulls, 0u);
    }
  }
}

// A push the transport lost (taken off the server's endpoint before the
// server serves) is sent again after resend_after and applied, although a
// later push of the worker got through first: the sum holds both, once.
// With resends off, the same loss fails the push at the timeout.
TEST(PsTimeout, ALostPushIsSentAgainAndAppliedOnceAfterALaterOne) {
  for (const bool resend : {true, false}) {
    SCOPED_TRACE(resend ? "resend" : "no resend");
    const KvClientOptions co = lost_message_options(resend);
    Job job("tcp;ofi_rxm", 1, 1, {sgd_table(0, 1)}, {}, 0, co);
    const std::vector<uint64_t> keys = {3, 7};
    auto lost = job.worker(0).push(0, keys, std::vector<float>{1, 2});
    ASSERT_TRUE(job.endpoint(0).receive(std::chrono::seconds(10))) << "the push never reached the server's endpoint";
    job.start();
    // A later push, applied before the lost one is sent again.
    ASSERT_TRUE(job.worker(0).push(0, keys, std::vector<float>{10, 20}).get().ok());
    const rdma::Status s = lost.get();
    std::vector<float> out(2, 1.0f);
    ASSERT_TRUE(job.worker(0).pull(0, keys, out.data()).get().ok());
    if (resend) {
      EXPECT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(out, (std::vector<float>{-11, -22}));  // SGD, rate 1: both pushes
      EXPECT_GE(job.worker(0).stats().overdue_resent, 1u);
      EXPECT_EQ(job.server(0).stats().late_requests, 1u);
      EXPECT_EQ(job.server(0).stats().pushes, 2u);
    } else {
      EXPECT_EQ(s.code(), rdma::StatusCode::kTimedOut) << s.to_string();
      EXPECT_EQ(out, (std::vector<float>{-10, -20}));
      EXPECT_EQ(job.worker(0).stats().overdue_resent, 0u);
      EXPECT_EQ(job.server(0).stats().pushes, 1u);
    }
  }
}

// Under BSP, a push the transport lost is still in the round its clock
// ends: the clock waits for the push's reply, which comes after the push is
// sent again, so the round's sum holds it. (Sent at once, the clock would
// end round 0 with worker 1's push alone: -10.)
TEST(PsTimeout, ALostPushIsInTheRoundItsClockEnds) {
  Job job("tcp;ofi_rxm", 1, 2, {sgd_table(0, 1)}, ConsistencyModel::parse("bsp"), 0, lost_message_options(true));
  const std::vector<uint64_t> key = {3};
  auto lost = job.worker(0).push(0, key, std::vector<float>{1});
  ASSERT_TRUE(job.endpoint(0).receive(std::chrono::seconds(10))) << "the push never reached the server's endpoint";
  auto tick = job.worker(0).clock();
  EXPECT_EQ(job.worker(0).stats().clocks_held, 1u);  // its push is unanswered
  job.start();
  ASSERT_TRUE(job.worker(1).push(0, key, std::vector<float>{10}).get().ok());
  ASSERT_TRUE(job.worker(1).clock().get().ok());
  std::vector<float> out(1, 1.0f);
  int64_t data_clock = -1;
  ASSERT_TRUE(job.worker(1).pull(0, key, out.data(), &data_clock).get().ok());  // at clock 1: after round 0
  EXPECT_EQ(out[0], -11.0f);
  EXPECT_EQ(data_clock, 1);
  EXPECT_TRUE(lost.get().ok());
  EXPECT_TRUE(tick.get().ok());
  EXPECT_GE(job.worker(0).stats().overdue_resent, 1u);
  // A clock after an answered push goes at once.
  ASSERT_TRUE(job.worker(0).push(0, key, std::vector<float>{100}).get().ok());
  ASSERT_TRUE(job.worker(0).clock().get().ok());
  EXPECT_EQ(job.worker(0).stats().clocks_held, 1u);
}

// Clocks held together behind one unanswered push (a trainer's last batch
// of an epoch and its idle clocks) go out in the order they were made: each
// ticks, none reaches the server after a later one as a stale copy. (Released
// in the client's table order, clock 3 arrived first and clocks 1 and 2 were
// answered as late copies: `scripts/demo`'s servers each reported 3 "retried
// clocks" and 3 "arrived late" on a run without a single loss.)
TEST(PsTimeout, ClocksHeldTogetherGoOutInTheirOrder) {
  Job job("tcp;ofi_rxm", 1, 1, {sgd_table(0, 1)}, {}, 0, lost_message_options(true));
  const std::vector<uint64_t> key = {3};
  auto lost = job.worker(0).push(0, key, std::vector<float>{1});
  ASSERT_TRUE(job.endpoint(0).receive(std::chrono::seconds(10))) << "the push never reached the server's endpoint";
  std::vector<std::future<rdma::Status>> ticks;
  for (int c = 0; c < 5; ++c) ticks.push_back(job.worker(0).clock());
  EXPECT_EQ(job.worker(0).stats().clocks_held, 5u);  // behind the unanswered push
  job.start();
  EXPECT_TRUE(lost.get().ok());
  for (auto& t : ticks) EXPECT_TRUE(t.get().ok());
  EXPECT_EQ(job.server(0).clocks().clock(0), 5);
  // Every one ticked, none came after a later one. (A copy sent again while
  // a reply was slow would count as a duplicate, legitimately: not checked.)
  EXPECT_EQ(job.server(0).stats().clocks, 5u);
  EXPECT_EQ(job.server(0).stats().late_requests, 0u);
}

// A clock made while an earlier one is being sent after its hold (the
// thread that got the push's reply sends it) waits for it, instead of
// overtaking it and turning it into a stale copy. The hook makes the new
// clock on the sending thread, between the release and the send.
TEST(PsTimeout, AClockMadeWhileHeldOnesAreBeingSentGoesAfterThem) {
  KvClientOptions co = lost_message_options(true);
  KvClient* client = nullptr;
  std::future<rdma::Status> second;
  int releases = 0;
  co.on_late_send = [&](bool overdue) {
    if (!overdue && releases++ == 0) second = client->clock();
  };
  Job job("tcp;ofi_rxm", 1, 1, {sgd_table(0, 1)}, {}, 0, co);
  client = &job.worker(0);
  const std::vector<uint64_t> key = {3};
  auto lost = job.worker(0).push(0, key, std::vector<float>{1});
  ASSERT_TRUE(job.endpoint(0).receive(std::chrono::seconds(10))) << "the push never reached the server's endpoint";
  auto first = job.worker(0).clock();
  EXPECT_EQ(job.worker(0).stats().clocks_held, 1u);  // behind the unanswered push
  job.start();  // the push goes again (overdue), its reply releases clock 1
  EXPECT_TRUE(lost.get().ok());
  EXPECT_TRUE(first.get().ok());
  ASSERT_GE(releases, 1);
  ASSERT_TRUE(second.valid());
  EXPECT_TRUE(second.get().ok());
  EXPECT_EQ(job.server(0).clocks().clock(0), 2);
  EXPECT_EQ(job.server(0).stats().clocks, 2u);  // both ticked: clock 2 did not arrive first
  EXPECT_EQ(job.server(0).stats().late_requests, 0u);
}

// Requests the transport lost go again in the order they were made: two
// lost clocks sent again both tick, the earlier first.
TEST(PsTimeout, LostClocksAreSentAgainInTheirOrder) {
  Job job("tcp;ofi_rxm", 1, 1, {sgd_table(0, 1)}, {}, 0, lost_message_options(true));
  std::vector<std::future<rdma::Status>> ticks;
  for (int c = 0; c < 4; ++c) {
    ticks.push_back(job.worker(0).clock());
    ASSERT_TRUE(job.endpoint(0).receive(std::chrono::seconds(10))) << "clock " << c << " never reached the server";
  }
  job.start();  // serves from now on: only the copies sent again arrive
  for (auto& t : ticks) EXPECT_TRUE(t.get().ok());
  EXPECT_GE(job.worker(0).stats().overdue_resent, 4u);
  EXPECT_EQ(job.server(0).clocks().clock(0), 4);
  EXPECT_EQ(job.server(0).stats().clocks, 4u);  // every one ticked: none came after a later one
  EXPECT_EQ(job.server(0).stats().late_requests, 0u);
}

// Worker 1 of a job with one raw worker (rank 2, its endpoint `raw`) sends
// server 0 a clock under the given request id: the reply's op and error text.
std::pair<Op, std::string> raw_clock(rdma::Endpoint& raw, int64_t clock, uint64_t id) {
  const auto bytes = encode_message(WireHeader{.op = Op::kClock, .sender = 2, .clock = clock, .request_id = id}, {},
                                    std::span<const std::byte>());
  EXPECT_TRUE(raw.send(0, 0, bytes.data(), bytes.size()).get().ok());
  auto m = raw.receive(std::chrono::seconds(10));
  DecodedMessage d;
  if (!m || decode_message(m->data, WireLimits{}, d)) return std::make_pair(Op::kError, std::string("no reply"));
  return std::make_pair(d.header.op, d.error_text);
}

// A started job of one server and two workers, worker 1 (rank 2) raw:
// exchange(c, id) sends the server its clock c under request id `id`.
struct RawClockJob {
  Job job{"tcp;ofi_rxm", 1, 2, {sgd_table(0, 1)}, {}, /*raw_workers=*/1};
  RawClockJob() { job.start(); }
  std::pair<Op, std::string> exchange(int64_t clock, uint64_t id) { return raw_clock(job.endpoint(2), clock, id); }
};

// A clock whose first copy was lost, arriving after the worker's next clock
// (sent again): answered, not refused as older; an older clock the server
// never saw the id of before is still refused (below).
TEST(PsExactlyOnce, AClockSentAgainAfterTheNextOneIsAnswered) {
  RawClockJob r;
  Job& job = r.job;
  auto exchange = [&](int64_t clock, uint64_t id) { return r.exchange(clock, id); };
  EXPECT_EQ(exchange(1, 4).first, Op::kClockReply);
  EXPECT_EQ(exchange(3, 9).first, Op::kClockReply);  // clock 2 (id 6) was lost on its way
  EXPECT_EQ(exchange(2, 6).first, Op::kClockReply);  // ... and comes again, late
  EXPECT_EQ(exchange(3, 9).first, Op::kClockReply);  // a lost reply: the same request again
  EXPECT_EQ(job.server(0).clocks().clock(1), 3);
  EXPECT_EQ(job.server(0).stats().duplicate_clocks, 2u);
  EXPECT_EQ(job.server(0).stats().late_requests, 1u);
  EXPECT_EQ(job.server(0).stats().bad_messages, 0u);
  const auto older = exchange(2, 10);  // a new request, behind the worker's clock: a bug of the sender
  EXPECT_EQ(older.first, Op::kError);
  EXPECT_NE(older.second.find("clock 2 is not past the worker's clock 3"), std::string::npos) << older.second;
}

// A reply the transport cannot deliver (here: the server's endpoint has
// marked the worker failed) is counted with its reason and peer, which the
// server command prints as its "transport:" line; the server goes on
// serving the other worker.
// The same for a large dense pull, whose reply lends the table's rows: the
// failed reply lets go of them, so a push to the table right after is
// applied at once, not held until some timeout.
TEST(PsTimeout, ALentReplyTheTransportCannotDeliverLetsPushesThrough) {
  constexpr uint64_t kRows = 64;
  constexpr uint32_t kWidth = 1024;  // 256 KiB: sent from the table in place
  KvClientOptions co;
  co.timeout = std::chrono::milliseconds(500);
  co.resend_after = std::chrono::milliseconds(0);
  Job job("tcp;ofi_rxm", 1, 2, {sgd_table(0, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("asp"), 0,
          co);
  job.endpoint(0).mark_peer_failed(1, "the test cut worker 0 off");  // rank 1: worker 0
  job.start();
  std::vector<float> rows(kRows * kWidth, 1.0f);
  const rdma::Status lost = job.worker(0).dense_pull(0, 0, kRows, rows.data()).get();
  EXPECT_EQ(lost.code(), rdma::StatusCode::kTimedOut) << lost.to_string();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> minus_two(kRows * kWidth, -2.0f);  // SGD lr 1: value += 2
  ASSERT_TRUE(job.worker(1).dense_push(0, 0, kRows, minus_two).get().ok());
  ASSERT_TRUE(job.worker(1).dense_pull(0, 0, kRows, rows.data()).get().ok());
  // Well inside the endpoint's 20 s timeout: nothing waited for the failed reply.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(rows, std::vector<float>(kRows * kWidth, 2.0f));
  EXPECT_EQ(job.server(0).stats().reply_failures, 1u);
}

// A lent reply to a worker that stopped reading (its endpoint makes no
// progress, so the send never ends before the 20 s timeout) holds a push to
// the table only until that worker is declared dead.
TEST(PsTimeout, ALentReplyToAWorkerDeclaredDeadNoLongerHoldsPushes) {
  constexpr uint64_t kRows = 64;
  constexpr uint32_t kWidth = 1024;  // 256 KiB: sent from the table in place
  Job job("shm", 1, 2, {sgd_table(0, kWidth, TableKind::kDense, kRows)}, ConsistencyModel::parse("asp"),
          /*raw_workers=*/1, {}, /*raw_progress=*/false);
  job.start();
  // Worker 1 (rank 2, raw) asks for the whole table, and never reads the reply.
  const uint64_t range[2] = {0, kRows};
  const auto pull = encode_message(WireHeader{.op = Op::kDensePull, .table = 0, .sender = 2, .request_id = 1}, range,
                                   std::span<const std::byte>());
  // Not waited for: waiting drives the raw endpoint's progress, which could
  // then read the server's reply too (it did once, under ASan) and end the
  // lent reply this test needs pending. A small message over shm reaches
  // the server's queue at the post.
  rdma::Completion sent = job.endpoint(2).send(0, 0, pull.data(), pull.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (job.server(0).stats().pulls == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(job.server(0).stats().pulls, 1u) << "the server never answered the raw worker's pull";
  // Worker 0's push to the table waits for that reply...
  const std::vector<float> minus_one(kRows * kWidth, -1.0f);  // SGD lr 1: value += 1
  auto push = job.worker(0).dense_push(0, 0, kRows, minus_one);
  EXPECT_EQ(push.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the push did not wait for the reply lending the rows it writes";
  // ...until worker 1 is declared dead, not until the 20 s timeout.
  const auto t0 = std::chrono::steady_clock::now();
  job.server(0).remove_worker_later(1);
  ASSERT_EQ(push.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_TRUE(push.get().ok());
  std::vector<float> rows(kRows * kWidth);
  ASSERT_TRUE(job.worker(0).dense_pull(0, 0, kRows, rows.data()).get().ok());
  EXPECT_EQ(rows, std::vector<float>(kRows * kWidth, 1.0f));
  // Worker 1 reads at last (its reply ends, and the server stops without
  // waiting out the timeout for it).
  EXPECT_TRUE(job.endpoint(2).receive(std::chrono::seconds(10)).has_value());
}

TEST(PsTimeout, AReplyTheTransportCannotDeliverIsCountedWithItsReason) {
  KvClientOptions co;
  co.timeout = std::chrono::milliseconds(500);
  co.resend_after = std::chrono::milliseconds(0);
  Job job("tcp;ofi_rxm", 1, 2, {sgd_table(0, 1, TableKind::kDense, 4)}, {}, 0, co);
  job.endpoint(0).mark_peer_failed(1, "the test cut worker 0 off");  // rank 1: worker 0
  job.start();
  std::vector<float> rows(4, 1.0f);
  const rdma::Status lost = job.worker(0).dense_pull(0, 0, 4, rows.data()).get();
  EXPECT_EQ(lost.code(), rdma::StatusCode::kTimedOut) << lost.to_string();
  EXPECT_TRUE(job.worker(1).dense_pull(0, 0, 4, rows.data()).get().ok());  // still serving
  EXPECT_EQ(rows, std::vector<float>(4, 0.0f));
  ServerStats st;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    st = job.server(0).stats();
  } while (st.reply_failures == 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(st.reply_failures, 1u);
  EXPECT_NE(st.last_reply_failure.find("the test cut worker 0 off"), std::string::npos) << st.last_reply_failure;
  EXPECT_EQ(st.pulls, 2u);
}

// A clock sent again (a worker retrying its unanswered clock to a rejoined
// server whose checkpoint already holds it) is answered like the first and
// counted; an older clock is still refused with an error naming both.
TEST(PsExactlyOnce, ARetriedClockIsAnsweredAndAnOlderOneRefused) {
  RawClockJob r;
  Job& job = r.job;
  auto exchange = [&](int64_t clock, uint64_t id) { return r.exchange(clock, id); };
  EXPECT_EQ(exchange(1, 1).first, Op::kClockReply);
  EXPECT_EQ(exchange(2, 2).first, Op::kClockReply);
  EXPECT_EQ(exchange(2, 2).first, Op::kClockReply);  // the retry
  EXPECT_EQ(job.server(0).clocks().clock(1), 2);
  EXPECT_EQ(job.server(0).stats().duplicate_clocks, 1u);
  EXPECT_EQ(job.server(0).stats().bad_messages, 0u);
  const auto older = exchange(1, 3);
  EXPECT_EQ(older.first, Op::kError);
  EXPECT_NE(older.second.find("clock 1 is not past the worker's clock 2"), std::string::npos) << older.second;
  EXPECT_EQ(job.server(0).stats().duplicate_clocks, 1u);
  EXPECT_EQ(job.server(0).clocks().clock(1), 2);
}

// A server that dies and comes back as a new process under its rank: the
// worker's client (told by the scheduler, here directly) sends the new one
// the push the old one never answered, and it lands on the checkpoint's
// state; what the old one applied after its checkpoint is gone.
TEST(PsRejoin, TheClientSendsAnUnansweredPushToTheServersNewProcess) {
  rdma::EndpointOptions o;
  o.provider = "tcp;ofi_rxm";
  o.node = "127.0.0.1";
  o.timeout = std::chrono::seconds(20);
  auto old_ep = std::make_unique<rdma::Endpoint>(o);
  rdma::Endpoint worker_ep(o);
  ClusterMap map;
  map.tables = {sgd_table(0, 1), sgd_table(1, 2, TableKind::kDense, 4)};
  map.server_rejoin_timeout = std::chrono::seconds(30);
  map.servers.push_back(NodeInfo{.role = Role::kServer, .rank = 0, .role_rank = 0, .host = "h",
                                 .fabric_address = old_ep->address()});
  map.workers.push_back(NodeInfo{.role = Role::kWorker, .rank = 1, .role_rank = 0, .host = "h",
                                 .fabric_address = worker_ep.address()});
  old_ep->add_peer(1, worker_ep.address());
  worker_ep.add_peer(0, old_ep->address());
  ServerOptions so;
  so.poll = std::chrono::milliseconds(5);
  auto old_server = std::make_unique<Server>(*old_ep, map, 0, so);
  std::atomic<bool> stop_old{false};
  std::thread serving([&] { old_server->serve(stop_old); });
  KvClient kv(worker_ep, map, 0);
  const std::vector<uint64_t> key = {7};
  auto push = [&](float g) { return kv.push(0, key, std::vector<float>{g}); };
  ASSERT_TRUE(push(1).get().ok());  // applied, then checkpointed
  const std::vector<float> dense_grad = {-1, -2, -3, -4, -5, -6, -7, -8};
  ASSERT_TRUE(kv.dense_push(1, 0, 4, dense_grad).get().ok());
  std::vector<float> dense(8);
  ASSERT_TRUE(kv.dense_read(1, 0, 4, dense.data()).ok());  // the old process's region, remembered
  stop_old = true;
  serving.join();
  const ShardCheckpoint c = old_server->checkpoint();  // the worker at clock 0 in it
  stop_old = false;
  serving = std::thread([&] { old_server->serve(stop_old); });
  ASSERT_TRUE(push(100).get().ok());  // applied after the checkpoint: lost with the process
  ASSERT_TRUE(kv.clock().get().ok());
  stop_old = true;
  serving.join();
  // The old process is gone: nothing answers this push.
  auto unanswered = push(10);
  old_server.reset();
  old_ep.reset();
  EXPECT_NE(unanswered.wait_for(std::chrono::milliseconds(300)), std::future_status::ready);
  // Its successor: the checkpoint, the worker's address, serving.
  rdma::Endpoint new_ep(o);
  new_ep.add_peer(1, worker_ep.address());
  // Another registration first, so that the new shard's key differs from
  // the old one's (as it may in a real new process). A stale read of it
  // would pass: version 0, a clock far ahead, zeros where the rows were.
  std::vector<uint64_t> other(512, 0);
  other[1] = 1000;
  const rdma::MemoryRegion other_region = new_ep.register_memory(other.data(), other.size() * sizeof(uint64_t),
                                                                  rdma::kRemoteRead);
  Server new_server(new_ep, map, 0, so);
  new_server.restore(c, "in-memory", Server::kCheckpointClocks);
  std::atomic<bool> stop_new{false};
  std::thread serving_new([&] { new_server.serve(stop_new); });
  kv.server_rejoined(0, new_ep.address(), new_server.last_push_ids()[0], new_server.worker_bytes_pushed()[0]);
  const rdma::Status s = unanswered.get();
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<float> out(1);
  ASSERT_TRUE(kv.pull(0, key, out.data()).get().ok());
  EXPECT_EQ(out[0], -11.0f);  // SGD, rate 1: the checkpoint's -1 and the resent push's -10; not the lost -100
  // One-sided reads go to the new process's shard, not the old one's region.
  std::fill(dense.begin(), dense.end(), 0.0f);
  const rdma::Status read = kv.dense_read(1, 0, 4, dense.data());
  ASSERT_TRUE(read.ok()) << read.to_string();
  for (size_t i = 0; i < dense.size(); ++i) EXPECT_EQ(dense[i], -dense_grad[i]) << "float " << i;
  EXPECT_EQ(kv.stats().rejoins, 1u);
  EXPECT_GE(kv.stats().resent, 1u);
  // The client counted what went with the old process: the one float of
  // the push of 100, acknowledged after the checkpoint (which holds the
  // first push's float and the dense push's eight).
  EXPECT_EQ(c.worker_bytes_pushed[0], sizeof(float) * (1 + dense_grad.size()));
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, sizeof(float));
  stop_new = true;
  serving_new.join();
  // The worker sent its clock along: the checkpoint had 0, the new server has 1.
  EXPECT_EQ(c.worker_clocks[0], 0);
  EXPECT_EQ(new_server.clocks().clock(0), 1);
}

// A push the transport lost before the server wrote its checkpoint (a
// later push got through), sent again after the server rejoined from that
// file: applied then, since the checkpoint holds which ids the server had
// seen, and not counted as lost. From a checkpoint without them (version
// 3: every id up to the last push counts as seen) it was taken for a copy
// and lost.
TEST(PsRejoin, APushLostBeforeTheCheckpointIsAppliedAfterTheRejoin) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pf_lost_push_" + std::to_string(::getpid()) + ".ckpt")).string();
  for (const bool with_seen_ids : {true, false}) {
    SCOPED_TRACE(with_seen_ids ? "checkpoint with the seen ids" : "checkpoint without them");
    rdma::EndpointOptions o;
    o.provider = "tcp;ofi_rxm";
    o.timeout = std::chrono::seconds(20);
    rdma::Endpoint old_ep(o), new_ep(o), worker_ep(o);
    ClusterMap map;
    map.tables = {sgd_table(0, 1)};
    map.server_rejoin_timeout = std::chrono::seconds(30);
    map.servers.push_back(NodeInfo{.role = Role::kServer, .rank = 0, .role_rank = 0, .host = "h",
                                   .fabric_address = old_ep.address()});
    map.workers.push_back(NodeInfo{.role = Role::kWorker, .rank = 1, .role_rank = 0, .host = "h",
                                   .fabric_address = worker_ep.address()});
    for (rdma::Endpoint* e : {&old_ep, &new_ep}) e->add_peer(1, worker_ep.address());
    worker_ep.add_peer(0, old_ep.address());
    ServerOptions so;
    so.poll = std::chrono::milliseconds(5);
    Server old_server(old_ep, map, 0, so);
    KvClient kv(worker_ep, map, 0);  // resends after 10 s: the rejoin sends it first
    const std::vector<uint64_t> key = {7};
    auto lost = kv.push(0, key, std::vector<float>{1});
    ASSERT_TRUE(old_ep.receive(std::chrono::seconds(10))) << "the push never reached the server's endpoint";
    std::atomic<bool> stop{false};
    std::thread serving([&] { old_server.serve(stop); });
    ASSERT_TRUE(kv.push(0, key, std::vector<float>{10}).get().ok());
    stop = true;
    serving.join();
    ShardCheckpoint written = old_server.checkpoint();
    if (!with_seen_ids) {
      written.seen_highest.clear();
      written.seen_windows.clear();
    }
    write_checkpoint(path, written);
    const ShardCheckpoint c = read_checkpoint(path);
    std::filesystem::remove(path);
    std::filesystem::remove(path + ".prev");
    EXPECT_EQ(c.seen_highest.size(), with_seen_ids ? 1u : 0u);
    Server new_server(new_ep, map, 0, so);
    new_server.restore(c, path, Server::kCheckpointClocks);
    stop = false;
    serving = std::thread([&] { new_server.serve(stop); });
    kv.server_rejoined(0, new_ep.address(), new_server.last_push_ids()[0], new_server.worker_bytes_pushed()[0]);
    EXPECT_TRUE(lost.get().ok());
    std::vector<float> out(1);
    ASSERT_TRUE(kv.pull(0, key, out.data()).get().ok());
    stop = true;
    serving.join();
    if (with_seen_ids) {
      EXPECT_EQ(out[0], -11.0f);  // SGD, rate 1: both pushes
      EXPECT_EQ(new_server.stats().late_requests, 1u);
      EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 0u);
    } else {
      EXPECT_EQ(out[0], -10.0f);
      EXPECT_EQ(new_server.stats().duplicate_pushes, 1u);
      EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, sizeof(float));
    }
  }
}

// What a rejoined server lost of a worker's pushes, as the client counts
// it: those it acknowledged that the restored checkpoint does not hold. A
// raw endpoint plays the server, so the test chooses which pushes were
// answered and which the checkpoint holds (the closed form: the bytes of
// the acknowledged pushes outside the checkpoint).
TEST(PsRejoin, TheClientCountsTheAcknowledgedPushesTheCheckpointLacks) {
  rdma::EndpointOptions o;
  o.provider = "tcp;ofi_rxm";
  o.node = "127.0.0.1";
  o.timeout = std::chrono::seconds(20);
  rdma::Endpoint worker_ep(o), first(o), second(o), third(o), fourth(o), fifth(o);
  ClusterMap map;
  map.tables = {sgd_table(0, 2)};  // 8 gradient bytes a key
  map.server_rejoin_timeout = std::chrono::seconds(30);
  map.servers.push_back(NodeInfo{.role = Role::kServer, .rank = 0, .role_rank = 0, .host = "h",
                                 .fabric_address = first.address()});
  map.workers.push_back(NodeInfo{.role = Role::kWorker, .rank = 1, .role_rank = 0, .host = "h",
                                 .fabric_address = worker_ep.address()});
  for (rdma::Endpoint* e : {&first, &second, &third, &fourth, &fifth}) e->add_peer(1, worker_ep.address());
  worker_ep.add_peer(0, first.address());
  KvClient kv(worker_ep, map, 0);
  // Push n has n keys: 8n bytes.
  auto push = [&](uint64_t n) {
    std::vector<uint64_t> keys(n);
    for (uint64_t k = 0; k < n; ++k) keys[k] = 100 * n + k;
    return kv.push(0, keys, std::vector<float>(2 * n, 1.0f));
  };
  // The server's side: takes the next push, answers it or not (as a copy
  // of one it held: kFlagAppliedBefore); its id.
  auto take = [](rdma::Endpoint& server, bool answer, uint8_t flags = kFlagNone) -> uint64_t {
    auto m = server.receive(std::chrono::seconds(10));
    EXPECT_TRUE(m) << "no push arrived";
    if (!m) return 0;
    DecodedMessage d;
    EXPECT_FALSE(decode_message(m->data, WireLimits{}, d));
    EXPECT_EQ(d.header.op, Op::kPush);
    if (answer) {
      const auto r = encode_message(
          WireHeader{.op = Op::kPushReply, .flags = flags, .sender = 0, .request_id = d.header.request_id}, {},
          std::span<const std::byte>());
      EXPECT_TRUE(server.send(1, 0, r.data(), r.size()).get().ok());
    }
    return d.header.request_id;
  };
  auto p1 = push(1), p2 = push(2), p3 = push(3), p4 = push(4);
  (void)take(first, true);
  (void)take(first, true);
  const uint64_t id3 = take(first, false);
  (void)take(first, false);
  ASSERT_TRUE(p1.get().ok());
  ASSERT_TRUE(p2.get().ok());
  // The first process dies; the second comes back from a checkpoint that
  // holds pushes 1 and 3 (3 applied, its answer lost): 8 + 24 bytes, last
  // id 3's. Push 2 was acknowledged and is not in it: 16 bytes lost.
  kv.server_rejoined(0, second.address(), id3, 8 + 24);
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 16u);
  EXPECT_EQ(kv.stats().resent, 2u);  // pushes 3 and 4
  EXPECT_EQ(take(second, true, kFlagAppliedBefore), id3);  // a copy of one it held
  (void)take(second, true);
  ASSERT_TRUE(p3.get().ok());
  ASSERT_TRUE(p4.get().ok());
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 16u);
  // The second dies too; the third holds everything but push 2 (lost in
  // the first death): the count stays 16, not 16 more.
  const uint64_t id5 = [&] {
    auto p5 = push(5);
    const uint64_t id = take(second, true);
    EXPECT_TRUE(p5.get().ok());
    return id;
  }();
  kv.server_rejoined(0, third.address(), id5, 8 + 24 + 32 + 40);
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 16u);
  // A third checkpoint that lacks push 5 as well: 40 bytes more.
  kv.server_rejoined(0, fourth.address(), id5 - 1, 8 + 24 + 32);
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 16u + 40u);
  // Pushes 6 and 7 unanswered, and a checkpoint that holds 7 but not 6 (the
  // transport lost 6 before it was written): counted as held at the
  // rejoin (48 bytes more), until the new process answers 6 as applied now.
  auto p6 = push(6), p7 = push(7);
  (void)take(fourth, false);
  const uint64_t id7 = take(fourth, false);
  kv.server_rejoined(0, fifth.address(), id7, 8 + 24 + 32 + 56);
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 16u + 40u + 48u);
  (void)take(fifth, true);                      // 6: applied now
  (void)take(fifth, true, kFlagAppliedBefore);  // 7: held
  ASSERT_TRUE(p6.get().ok());
  ASSERT_TRUE(p7.get().ok());
  EXPECT_EQ(kv.stats().bytes_lost_in_rejoins, 16u + 40u);
  EXPECT_EQ(kv.stats().rejoins, 4u);
}

}  // namespace
}  // namespace parafab::ps
