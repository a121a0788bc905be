// The scheduler and its clients, all as threads of this process over real
// TCP on 127.0.0.1: joining, the cluster map, barriers, heartbeats and
// death notices, shutdown, and refusals (bad token, another job, join
// timeout). Every wait is bounded.
#include "ps/scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "ps/checkpoint.h"
#include "ps/control_channel.h"
#include "ps/scheduler_client.h"
#include "tests/common/temp_dir.h"

namespace parafab::ps {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = 20s;  // generous bound for anything that should happen at once

std::vector<std::byte> random_blob(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// Two tables with every field set away from its default, so a dropped field shows.
std::vector<TableSchema> test_tables() {
  TableSchema sparse;
  sparse.id = 7;
  sparse.kind = TableKind::kSparse;
  sparse.width = 3;
  sparse.init = {.kind = InitializerKind::kNormal, .stddev = 0.125f, .seed = 0x1234567890abcdefull};
  sparse.updater.kind = UpdaterKind::kFtrl;
  sparse.updater.learning_rate = 0.0625f;
  sparse.updater.adagrad_epsilon = 3e-7f;
  sparse.updater.adagrad_initial_accumulator = 0.25f;
  sparse.updater.ftrl_alpha = 0.2f;
  sparse.updater.ftrl_beta = 1.5f;
  sparse.updater.ftrl_l1 = 0.75f;
  sparse.updater.ftrl_l2 = 2.5f;
  sparse.updater.adam_beta1 = 0.8f;
  sparse.updater.adam_beta2 = 0.99f;
  sparse.updater.adam_epsilon = 2e-8f;
  TableSchema dense;
  dense.id = 11;
  dense.kind = TableKind::kDense;
  dense.width = 16;
  dense.rows = 123457;
  dense.updater.kind = UpdaterKind::kAdam;
  dense.updater.learning_rate = 0.001f;
  dense.updater.l2 = 0.03f;
  return {sparse, dense};
}

void expect_same(const TableSchema& a, const TableSchema& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.init.kind, b.init.kind);
  EXPECT_EQ(a.init.stddev, b.init.stddev);
  EXPECT_EQ(a.init.seed, b.init.seed);
  const UpdaterConfig &x = a.updater, &y = b.updater;
  EXPECT_EQ(x.kind, y.kind);
  EXPECT_EQ(x.learning_rate, y.learning_rate);
  EXPECT_EQ(x.l1, y.l1);
  EXPECT_EQ(x.l2, y.l2);
  EXPECT_EQ(x.adagrad_epsilon, y.adagrad_epsilon);
  EXPECT_EQ(x.adagrad_initial_accumulator, y.adagrad_initial_accumulator);
  EXPECT_EQ(x.ftrl_alpha, y.ftrl_alpha);
  EXPECT_EQ(x.ftrl_beta, y.ftrl_beta);
  EXPECT_EQ(x.ftrl_l1, y.ftrl_l1);
  EXPECT_EQ(x.ftrl_l2, y.ftrl_l2);
  EXPECT_EQ(x.adam_beta1, y.adam_beta1);
  EXPECT_EQ(x.adam_beta2, y.adam_beta2);
  EXPECT_EQ(x.adam_epsilon, y.adam_epsilon);
}

SchedulerOptions scheduler_options(uint32_t servers, uint32_t workers, const std::string& token) {
  SchedulerOptions o;
  o.num_servers = servers;
  o.num_workers = workers;
  o.token = JobToken(token);
  o.tables = test_tables();
  o.join_timeout = 30s;
  o.heartbeat_timeout = 10s;
  return o;
}

// A scheduler running on its own thread; the destructor stops it and waits.
class RunningScheduler {
 public:
  explicit RunningScheduler(SchedulerOptions o) : scheduler_(std::move(o)) {
    result_ = std::async(std::launch::async, [this] { scheduler_.run(); });
  }
  ~RunningScheduler() {
    scheduler_.stop();
    if (result_.valid()) result_.wait_for(kWait);
  }
  Scheduler& operator*() { return scheduler_; }
  Scheduler* operator->() { return &scheduler_; }
  // Waits for run() to return; rethrows what it threw.
  void finish() {
    ASSERT_EQ(result_.wait_for(kWait), std::future_status::ready) << "scheduler run() did not return";
    result_.get();
  }
  std::future<void>& result() { return result_; }

 private:
  Scheduler scheduler_;
  std::future<void> result_;
};

SchedulerClientOptions client_options(uint16_t port, const std::string& token, Role role, uint32_t index,
                                      uint64_t seed) {
  SchedulerClientOptions o;
  o.port = port;
  o.token = JobToken(token);
  o.role = role;
  o.host_name = std::string(to_string(role)) + "-host-" + std::to_string(index);
  // Distinct lengths and bytes per node: any mix-up of addresses shows.
  o.fabric_address = random_blob(16 + 3 * index + (role == Role::kWorker ? 1 : 0), seed);
  o.heartbeat_interval = 100ms;
  o.connect_timeout = 5s;
  return o;
}

TEST(SchedulerTest, FullJobJoinsGetsOneMapAndShutsDownInOrder) {
  constexpr uint32_t S = 2, W = 3;
  RunningScheduler sched(scheduler_options(S, W, "job-secret-a"));
  const uint16_t port = sched->port();

  struct Node {
    SchedulerClientOptions options;
    std::unique_ptr<SchedulerClient> client;
    ClusterMap map;
  };
  std::vector<Node> nodes;
  for (uint32_t i = 0; i < S + W; ++i) {
    const Role role = i < S ? Role::kServer : Role::kWorker;
    Node n;
    n.options = client_options(port, "job-secret-a", role, i, 1000 + i);
    n.client = std::make_unique<SchedulerClient>(n.options);
    nodes.push_back(std::move(n));
  }
  std::vector<std::future<void>> joins;
  for (Node& n : nodes) {
    joins.push_back(std::async(std::launch::async, [&n] {
      n.map = n.client->join(kWait);
      n.client->barrier("after-join", kWait);
      if (n.options.role == Role::kWorker) n.client->done();
      ASSERT_TRUE(n.client->wait_for_shutdown(kWait));
    }));
  }
  for (auto& j : joins) {
    ASSERT_EQ(j.wait_for(kWait * 2), std::future_status::ready);
    j.get();
  }
  sched.finish();

  std::set<uint32_t> ranks;
  const ClusterMap& m0 = nodes[0].map;
  EXPECT_EQ(m0.job_id, sched->job_id());
  ASSERT_EQ(m0.num_servers(), S);
  ASSERT_EQ(m0.num_workers(), W);
  for (const Node& n : nodes) {
    const uint32_t r = n.client->rank();
    ranks.insert(r);
    if (n.options.role == Role::kServer) {
      EXPECT_LT(r, S);
      EXPECT_EQ(n.client->role_rank(), r);
    } else {
      EXPECT_GE(r, S);
      EXPECT_LT(r, S + W);
      EXPECT_EQ(n.client->role_rank(), r - S);
    }
    // Everybody has the same map, and it lists this node at its rank with its address.
    EXPECT_EQ(n.map.job_id, m0.job_id);
    ASSERT_EQ(n.map.servers.size(), S);
    ASSERT_EQ(n.map.workers.size(), W);
    const auto& same_role = n.options.role == Role::kServer ? n.map.servers : n.map.workers;
    const NodeInfo& me = same_role[n.client->role_rank()];
    EXPECT_EQ(me.rank, r);
    EXPECT_EQ(me.host, n.options.host_name);
    EXPECT_EQ(me.fabric_address, n.options.fabric_address);
    for (uint32_t k = 0; k < S + W; ++k) {
      const NodeInfo& a = k < S ? n.map.servers[k] : n.map.workers[k - S];
      const NodeInfo& b = k < S ? m0.servers[k] : m0.workers[k - S];
      EXPECT_EQ(a.rank, k);
      EXPECT_EQ(a.rank, b.rank);
      EXPECT_EQ(a.role, b.role);
      EXPECT_EQ(a.host, b.host);
      EXPECT_EQ(a.fabric_address, b.fabric_address);
    }
    const std::vector<TableSchema> want = test_tables();
    ASSERT_EQ(n.map.tables.size(), want.size());
    for (size_t t = 0; t < want.size(); ++t) expect_same(n.map.tables[t], want[t]);
    EXPECT_EQ(n.client->shutdown_reason(), "all workers done");
    EXPECT_TRUE(n.client->dead_ranks().empty());
  }
  EXPECT_EQ(ranks.size(), S + W);
  EXPECT_EQ(sched->stats().joined, S + W);
  EXPECT_EQ(sched->stats().dead_nodes, 0u);
}

// Joins n clients concurrently (join blocks until all have joined).
std::vector<std::unique_ptr<SchedulerClient>> join_all(std::vector<SchedulerClientOptions> options) {
  std::vector<std::unique_ptr<SchedulerClient>> clients;
  for (auto& o : options) clients.push_back(std::make_unique<SchedulerClient>(std::move(o)));
  std::vector<std::future<void>> joins;
  for (auto& c : clients) joins.push_back(std::async(std::launch::async, [&c] { c->join(kWait); }));
  for (auto& j : joins) {
    EXPECT_EQ(j.wait_for(kWait * 2), std::future_status::ready);
    j.get();
  }
  return clients;
}

TEST(SchedulerTest, BarrierReleasesOnlyAfterAllArrive) {
  RunningScheduler sched(scheduler_options(1, 2, "tok"));
  auto clients = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1),
                           client_options(sched->port(), "tok", Role::kWorker, 1, 2),
                           client_options(sched->port(), "tok", Role::kWorker, 2, 3)});
  auto a = std::async(std::launch::async, [&] { clients[0]->barrier("b", kWait); });
  auto b = std::async(std::launch::async, [&] { clients[1]->barrier("b", kWait); });
  // Two of three have arrived: neither may be released (a bounded check of absence).
  EXPECT_EQ(a.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(b.wait_for(0ms), std::future_status::timeout);
  clients[2]->barrier("b", kWait);
  ASSERT_EQ(a.wait_for(kWait), std::future_status::ready);
  ASSERT_EQ(b.wait_for(kWait), std::future_status::ready);
  a.get();
  b.get();
  // The same name again is a new barrier, and a lone caller times out with its name.
  try {
    clients[0]->barrier("lonely", 200ms);
    FAIL() << "barrier released with one of three nodes";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'lonely'"), std::string::npos) << e.what();
  }
  // Each caller gets the sum of every caller's contribution (1 + 10 + 100).
  std::vector<std::future<uint64_t>> again;
  uint64_t contribution = 1;
  for (auto& c : clients) {
    again.push_back(std::async(std::launch::async, [&c, contribution] { return c->barrier("b", kWait, false, contribution); }));
    contribution *= 10;
  }
  for (auto& f : again) {
    ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
    EXPECT_EQ(f.get(), 111u);
  }
}

TEST(SchedulerTest, RequestedRanksAreHonouredAndWorkersOnlyBarriersSkipServers) {
  RunningScheduler sched(scheduler_options(1, 2, "tok"));
  // Out of range and, later, taken: refused with the reason.
  {
    auto bad = client_options(sched->port(), "tok", Role::kWorker, 9, 9);
    bad.requested_role_rank = 5;
    SchedulerClient c(std::move(bad));
    try {
      (void)c.join(kWait);
      FAIL() << "worker rank 5 of 2 accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
  auto w1 = client_options(sched->port(), "tok", Role::kWorker, 1, 2);
  w1.requested_role_rank = 1;  // arrives first, asks for the second slot
  auto w0 = client_options(sched->port(), "tok", Role::kWorker, 0, 3);
  w0.requested_role_rank = 0;
  auto clients = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1), w1, w0});
  EXPECT_EQ(clients[1]->role_rank(), 1u);
  EXPECT_EQ(clients[2]->role_rank(), 0u);
  EXPECT_EQ(clients[1]->rank(), 2u);  // 1 server, then workers
  // Workers meet without the server.
  auto a = std::async(std::launch::async, [&] { return clients[1]->barrier("w", kWait, true, 5); });
  EXPECT_EQ(clients[2]->barrier("w", kWait, true, 7), 12u);
  ASSERT_EQ(a.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(a.get(), 12u);
}

// A node that asks for no rank takes the first free slot; a later node
// asking for that slot is refused with the reason, naming the host that has it.
TEST(SchedulerTest, ARankTakenByANodeThatAskedNoneIsNamed) {
  RunningScheduler sched(scheduler_options(1, 2, "tok"));
  SchedulerClient loose(client_options(sched->port(), "tok", Role::kWorker, 7, 7));
  auto loose_joined = std::async(std::launch::async, [&] { return loose.join(kWait); });
  const auto give_up = std::chrono::steady_clock::now() + kWait;
  while (sched->stats().joined < 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  ASSERT_EQ(sched->stats().joined, 1u);
  auto w0 = client_options(sched->port(), "tok", Role::kWorker, 0, 3);
  w0.requested_role_rank = 0;
  SchedulerClient ranked(std::move(w0));
  try {
    (void)ranked.join(kWait);
    ADD_FAILURE() << "worker rank 0 given twice";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("taken by host worker-host-7, which asked for no rank"), std::string::npos)
        << e.what();
  }
  // The job still forms with the others.
  auto w1 = client_options(sched->port(), "tok", Role::kWorker, 1, 4);
  w1.requested_role_rank = 1;
  auto clients = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1), w1});
  ASSERT_EQ(loose_joined.wait_for(kWait), std::future_status::ready);
  (void)loose_joined.get();
  EXPECT_EQ(loose.role_rank(), 0u);
}

TEST(SchedulerTest, WorkersBringTheTablesWhenTheSchedulerHasNone) {
  SchedulerOptions o = scheduler_options(1, 2, "tok");
  o.tables.clear();
  RunningScheduler sched(std::move(o));
  TableSchema t;
  t.id = 3;
  t.width = 8;
  t.updater.kind = UpdaterKind::kFtrl;
  TableSchema other = t;
  other.width = 9;
  {
    // A worker disagreeing with the first one's tables is refused, naming why.
    auto first = client_options(sched->port(), "tok", Role::kWorker, 0, 2);
    first.tables = {t};
    auto w0 = std::make_unique<SchedulerClient>(std::move(first));
    auto j0 = std::async(std::launch::async, [&] { (void)w0->join(kWait); });
    auto bad = client_options(sched->port(), "tok", Role::kWorker, 1, 3);
    bad.tables = {other};
    // Joins after the first has registered: its refusal is about the tables.
    for (int i = 0; i < 200 && sched->stats().joined < 1; ++i) std::this_thread::sleep_for(10ms);
    SchedulerClient refused(std::move(bad));
    try {
      (void)refused.join(kWait);
      FAIL() << "a worker with other tables joined";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("tables differ"), std::string::npos) << e.what();
    }
    auto agree = client_options(sched->port(), "tok", Role::kWorker, 1, 4);
    agree.tables = {t};
    auto rest = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1), agree});
    ASSERT_EQ(j0.wait_for(kWait), std::future_status::ready);
    j0.get();
    ASSERT_EQ(rest[0]->cluster_map().tables.size(), 1u);
    EXPECT_EQ(rest[0]->cluster_map().tables[0].width, 8u);
    EXPECT_EQ(rest[0]->cluster_map().tables[0].updater.kind, UpdaterKind::kFtrl);
  }
}

// Workers that resume (train --resume DIR) bring DIR; the scheduler finds
// the checkpoint set there once, for the job, and the map carries its clock
// and each server's file (a damaged newest one passed over to the one
// before). Without a usable set every node is told why and the job stops.
TEST(SchedulerTest, TheMapCarriesTheCheckpointSetTheWorkersResumeFrom) {
  testing::TempDir dir;
  const std::string d = dir.path().string();
  ShardCheckpoint c;
  c.num_servers = 2;
  c.job_fingerprint = checkpoint_fingerprint(test_tables());
  c.worker_clocks = {0};
  c.last_push_ids = {0};
  c.worker_bytes_pushed = {0};
  auto write_at = [&](uint32_t server, int64_t clock) {
    c.server_index = server;
    c.min_clock = clock;
    (void)write_checkpoint(checkpoint_path(d, server, 2), c);
  };
  auto resuming_job = [&] {
    RunningScheduler sched(scheduler_options(2, 1, "tok"));
    auto w = client_options(sched->port(), "tok", Role::kWorker, 0, 3);
    w.resume_dir = d;
    std::vector<std::unique_ptr<SchedulerClient>> clients;
    for (auto o : {client_options(sched->port(), "tok", Role::kServer, 0, 1),
                   client_options(sched->port(), "tok", Role::kServer, 1, 2), w}) {
      clients.push_back(std::make_unique<SchedulerClient>(std::move(o)));
    }
    std::vector<std::future<ClusterMap>> joins;
    for (auto& cl : clients) joins.push_back(std::async(std::launch::async, [&cl] { return cl->join(kWait); }));
    std::vector<std::string> got;  // each node's map summary, or its error
    for (auto& j : joins) {
      EXPECT_EQ(j.wait_for(kWait * 2), std::future_status::ready);
      try {
        const ClusterMap m = j.get();
        std::string paths;
        for (const std::string& p : m.resume_paths) paths += " " + p;
        got.push_back("clock " + std::to_string(m.resume_clock) + paths);
      } catch (const std::runtime_error& e) {
        got.push_back(e.what());
      }
    }
    return got;
  };
  write_at(0, 10);
  write_at(1, 10);
  write_at(0, 20);  // server 0's clock 10 is now its .prev
  const std::string newest0 = checkpoint_path(d, 0, 2), file1 = checkpoint_path(d, 1, 2);
  for (const std::string& g : resuming_job()) EXPECT_EQ(g, "clock 10 " + newest0 + ".prev " + file1);
  write_at(1, 20);
  for (const std::string& g : resuming_job()) EXPECT_EQ(g, "clock 20 " + newest0 + " " + file1);
  // Server 1's only file is damaged: no set, and every node says why.
  std::filesystem::remove(file1 + ".prev");
  {
    std::fstream f(file1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x55');
  }
  for (const std::string& g : resuming_job()) {
    EXPECT_NE(g.find("cannot resume from " + d), std::string::npos) << g;
    EXPECT_NE(g.find(file1), std::string::npos) << g;
  }
}

// A map that names a resume directory must name one checkpoint file per
// server, and a clock that is not negative; one without a directory none.
TEST(SchedulerTest, AMapsResumeFilesMustMatchItsServers) {
  ClusterMap m;
  for (uint32_t i = 0; i < 2; ++i) {
    m.servers.push_back(
        NodeInfo{.role = Role::kServer, .rank = i, .role_rank = i, .host = "h", .fabric_address = random_blob(8, i)});
  }
  m.resume_dir = "/ck";
  m.resume_clock = 7;
  m.resume_paths = {"/ck/server-0-of-2.ckpt", "/ck/server-1-of-2.ckpt"};
  proto::ClusterMap wire;
  to_proto(m, &wire);
  const ClusterMap back = from_proto(wire);
  EXPECT_EQ(back.resume_clock, 7);
  EXPECT_EQ(back.resume_paths, m.resume_paths);
  auto refusal = [](const proto::ClusterMap& w) {
    try {
      (void)from_proto(w);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  proto::ClusterMap one_file = wire;
  one_file.mutable_resume_paths()->RemoveLast();
  EXPECT_NE(refusal(one_file).find("1 checkpoint files to resume from for 2 servers"), std::string::npos)
      << refusal(one_file);
  proto::ClusterMap no_dir = wire;
  no_dir.clear_resume_dir();
  EXPECT_NE(refusal(no_dir).find("and no resume directory"), std::string::npos) << refusal(no_dir);
  proto::ClusterMap negative = wire;
  negative.set_resume_clock(-1);
  EXPECT_NE(refusal(negative).find("resume clock -1 is negative"), std::string::npos) << refusal(negative);
}

TEST(SchedulerTest, JoinTimeoutNamesTheMissingRoleAndCount) {
  SchedulerOptions o = scheduler_options(2, 1, "tok");
  o.join_timeout = 700ms;
  RunningScheduler sched(std::move(o));
  SchedulerClient server(client_options(sched->port(), "tok", Role::kServer, 0, 1));
  SchedulerClient worker(client_options(sched->port(), "tok", Role::kWorker, 0, 2));
  auto s = std::async(std::launch::async, [&] { server.join(kWait); });
  auto w = std::async(std::launch::async, [&] { worker.join(kWait); });
  for (auto* f : {&s, &w}) {
    ASSERT_EQ(f->wait_for(kWait), std::future_status::ready);
    try {
      f->get();
      FAIL() << "join succeeded with a server missing";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("join timeout"), std::string::npos) << what;
      EXPECT_NE(what.find("missing 1 of 2 servers and 0 of 1 workers"), std::string::npos) << what;
      EXPECT_NE(what.find("127.0.0.1:"), std::string::npos) << what;  // names the scheduler
    }
  }
  ASSERT_EQ(sched.result().wait_for(kWait), std::future_status::ready);
  try {
    sched.result().get();
    FAIL() << "run() returned normally after a join timeout";
  } catch (const SchedulerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing 1 of 2 servers"), std::string::npos) << what;
    EXPECT_NE(what.find("server 0 on server-host-0"), std::string::npos) << what;
  }
}

TEST(SchedulerTest, BadTokenIsRefusedAndGoodNodesAreStillServed) {
  RunningScheduler sched(scheduler_options(1, 1, "right-token"));
  SchedulerClient intruder(client_options(sched->port(), "wrong-token", Role::kWorker, 9, 99));
  try {
    intruder.join(kWait);
    FAIL() << "joined with a wrong token";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad token"), std::string::npos) << e.what();
    // The job named as every node's log names it: 16 hex digits.
    char job[17];
    std::snprintf(job, sizeof job, "%016llx", static_cast<unsigned long long>(sched->job_id()));
    EXPECT_NE(std::string(e.what()).find(std::string("job token of job ") + job + " "), std::string::npos) << e.what();
  }
  EXPECT_EQ(sched->stats().auth_failures, 1u);
  auto clients = join_all({client_options(sched->port(), "right-token", Role::kServer, 0, 1),
                           client_options(sched->port(), "right-token", Role::kWorker, 0, 2)});
  EXPECT_EQ(clients[1]->rank(), 1u);  // the refused worker took no slot
  clients[1]->done();
  EXPECT_TRUE(clients[0]->wait_for_shutdown(kWait));
  sched.finish();
  EXPECT_EQ(sched->stats().joined, 2u);
}

TEST(SchedulerTest, NodesOfAnotherJobCannotJoin) {
  RunningScheduler a(scheduler_options(1, 1, "token-of-job-a"));
  RunningScheduler b(scheduler_options(1, 1, "token-of-job-b"));
  EXPECT_NE(a->job_id(), b->job_id());
  // Job b's worker dialling job a's port, and the other way round.
  SchedulerClient b_in_a(client_options(a->port(), "token-of-job-b", Role::kWorker, 0, 5));
  SchedulerClient a_in_b(client_options(b->port(), "token-of-job-a", Role::kServer, 0, 6));
  for (SchedulerClient* c : {&b_in_a, &a_in_b}) {
    try {
      c->join(kWait);
      FAIL() << "a node of another job joined";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(a->stats().auth_failures, 1u);
  EXPECT_EQ(b->stats().auth_failures, 1u);
  EXPECT_EQ(a->stats().joined, 0u);
  EXPECT_EQ(b->stats().joined, 0u);
}

TEST(SchedulerTest, SilentNodeIsReportedDeadToTheOthers) {
  SchedulerOptions o = scheduler_options(1, 2, "tok");
  o.heartbeat_timeout = 1500ms;
  o.on_worker_failure = SchedulerOptions::OnWorkerFailure::kContinue;
  RunningScheduler sched(std::move(o));
  std::promise<std::pair<uint32_t, std::string>> seen_by_server, seen_by_worker;
  auto server_o = client_options(sched->port(), "tok", Role::kServer, 0, 1);
  server_o.on_node_dead = [&](const NodeInfo& n, const std::string& why) { seen_by_server.set_value({n.rank, why}); };
  auto worker_o = client_options(sched->port(), "tok", Role::kWorker, 0, 2);
  worker_o.on_node_dead = [&](const NodeInfo& n, const std::string& why) { seen_by_worker.set_value({n.rank, why}); };
  auto silent_o = client_options(sched->port(), "tok", Role::kWorker, 1, 3);
  silent_o.heartbeat_interval = 0ms;  // the test seam: never heartbeats
  auto clients = join_all({server_o, worker_o, silent_o});
  const uint32_t silent_rank = clients[2]->rank();

  auto f1 = seen_by_server.get_future(), f2 = seen_by_worker.get_future();
  ASSERT_EQ(f1.wait_for(kWait), std::future_status::ready);
  ASSERT_EQ(f2.wait_for(kWait), std::future_status::ready);
  const auto [rank1, why1] = f1.get();
  EXPECT_EQ(rank1, silent_rank);
  EXPECT_NE(why1.find("no heartbeat"), std::string::npos) << why1;
  EXPECT_EQ(f2.get().first, silent_rank);
  EXPECT_EQ(clients[0]->dead_ranks(), std::vector<uint32_t>{silent_rank});
  EXPECT_EQ(sched->stats().dead_nodes, 1u);

  // The live worker finishing ends the job: the dead one no longer counts.
  clients[1]->done();
  EXPECT_TRUE(clients[0]->wait_for_shutdown(kWait));
  EXPECT_NE(clients[0]->shutdown_reason().find("1 of 2 dead"), std::string::npos) << clients[0]->shutdown_reason();
  sched.finish();
}

TEST(SchedulerTest, ClosedConnectionCountsAsDeathAndUnblocksBarriers) {
  SchedulerOptions o = scheduler_options(1, 2, "tok");
  o.on_worker_failure = SchedulerOptions::OnWorkerFailure::kContinue;
  RunningScheduler sched(std::move(o));
  std::promise<uint32_t> seen;
  auto server_o = client_options(sched->port(), "tok", Role::kServer, 0, 1);
  server_o.on_node_dead = [&](const NodeInfo& n, const std::string&) { seen.set_value(n.rank); };
  auto clients = join_all({server_o, client_options(sched->port(), "tok", Role::kWorker, 0, 2),
                           client_options(sched->port(), "tok", Role::kWorker, 1, 3)});
  const uint32_t gone = clients[2]->rank();
  auto a = std::async(std::launch::async, [&] { clients[0]->barrier("x", kWait); });
  auto b = std::async(std::launch::async, [&] { clients[1]->barrier("x", kWait); });
  EXPECT_EQ(a.wait_for(200ms), std::future_status::timeout);  // worker 1 has not arrived
  clients[2].reset();  // worker 1 goes away without a word
  auto f = seen.get_future();
  ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(f.get(), gone);
  // The barrier no longer waits for the dead node.
  ASSERT_EQ(a.wait_for(kWait), std::future_status::ready);
  ASSERT_EQ(b.wait_for(kWait), std::future_status::ready);
  a.get();
  b.get();
  clients[1]->done();
  EXPECT_TRUE(clients[0]->wait_for_shutdown(kWait));
  EXPECT_TRUE(clients[1]->wait_for_shutdown(kWait));
  sched.finish();
}

// --on-worker-failure fail (the default): a worker that dies before it is
// done stops the job; every node hears which worker, and run() throws it.
TEST(SchedulerTest, DeadWorkerStopsTheJobUnderTheFailPolicy) {
  RunningScheduler sched(scheduler_options(1, 2, "tok"));
  // Ranks by request: the workers join concurrently, and by arrival order
  // host 1 is sometimes worker 0 (seen under the sanitizers' timing).
  auto w0 = client_options(sched->port(), "tok", Role::kWorker, 0, 2);
  auto w1 = client_options(sched->port(), "tok", Role::kWorker, 1, 3);
  w0.requested_role_rank = 0;
  w1.requested_role_rank = 1;
  auto clients = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1), w0, w1});
  clients[2].reset();  // worker 1 goes away before it is done
  for (int i = 0; i < 2; ++i) {
    try {
      (void)clients[i]->wait_for_shutdown(kWait);
      ADD_FAILURE() << "node " << i << " was not told the job failed";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("worker 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--on-worker-failure fail"), std::string::npos) << e.what();
    }
  }
  ASSERT_EQ(sched.result().wait_for(kWait), std::future_status::ready);
  EXPECT_THROW(sched.result().get(), SchedulerError);
  EXPECT_THROW((void)parse_worker_failure_policy("sometimes"), std::invalid_argument);
}

// --server-rejoin-timeout: a dead server's rank waits; a server asking for
// it gets the map (marked rejoin, with its new address) and, once it says
// it is ready, the workers hear of it at its new address. A live rank, or
// no rank, is refused; the job goes on.
TEST(SchedulerTest, ADeadServerRejoinsUnderItsRank) {
  SchedulerOptions so = scheduler_options(2, 1, "tok");
  so.server_rejoin_timeout = 30s;
  RunningScheduler sched(std::move(so));
  auto s0 = client_options(sched->port(), "tok", Role::kServer, 0, 1);
  auto s1 = client_options(sched->port(), "tok", Role::kServer, 1, 2);
  s0.requested_role_rank = 0;
  s1.requested_role_rank = 1;
  auto w = client_options(sched->port(), "tok", Role::kWorker, 0, 3);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<NodeInfo> rejoined;
  RestoredPushes told;
  bool dead = false;
  w.on_node_rejoined = [&](const NodeInfo& n, const RestoredPushes& r) {
    std::lock_guard lock(mu);
    rejoined.push_back(n);
    told = r;
    cv.notify_all();
  };
  w.on_node_dead = [&](const NodeInfo&, const std::string&) {
    std::lock_guard lock(mu);
    dead = true;
    cv.notify_all();
  };
  auto clients = join_all({s0, s1, w});
  EXPECT_EQ(clients[2]->cluster_map().server_rejoin_timeout, 30s);
  clients[1].reset();  // server 1 dies
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return dead; })) << "server 1's death was not announced";
  }
  // Not while server 0 lives, nor without a rank.
  auto taken = client_options(sched->port(), "tok", Role::kServer, 5, 9);
  taken.requested_role_rank = 0;
  SchedulerClient live(taken);
  EXPECT_THROW(live.join(kWait), std::runtime_error);
  SchedulerClient anyone(client_options(sched->port(), "tok", Role::kServer, 6, 10));
  EXPECT_THROW(anyone.join(kWait), std::runtime_error);
  // Server 1's rank, from a new process with a new address.
  auto back = client_options(sched->port(), "tok", Role::kServer, 7, 11);
  back.requested_role_rank = 1;
  SchedulerClient again(back);
  const ClusterMap& m = again.join(kWait);
  EXPECT_TRUE(m.rejoin);
  EXPECT_EQ(again.rank(), 1u);
  EXPECT_EQ(m.servers[1].fabric_address, back.fabric_address);
  EXPECT_EQ(m.servers[0].fabric_address, s0.fabric_address);
  {
    std::unique_lock lock(mu);
    EXPECT_FALSE(cv.wait_for(lock, 300ms, [&] { return !rejoined.empty(); })) << "told before the server was ready";
  }
  // Counts of the wrong number of workers: refused (counted), nobody told.
  const uint64_t invalid_before = sched->stats().invalid_messages;
  again.rejoin_ready(RestoredPushes{.last_push_ids = {41, 42}, .worker_bytes_pushed = {4096}});
  {
    std::unique_lock lock(mu);
    EXPECT_FALSE(cv.wait_for(lock, 300ms, [&] { return !rejoined.empty(); })) << "told of a malformed rejoin_ready";
  }
  EXPECT_EQ(sched->stats().invalid_messages, invalid_before + 1);
  again.rejoin_ready(RestoredPushes{.last_push_ids = {41}, .worker_bytes_pushed = {4096}});
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return !rejoined.empty(); })) << "the worker never heard of it";
    EXPECT_EQ(rejoined[0].rank, 1u);
    EXPECT_EQ(rejoined[0].fabric_address, back.fabric_address);
    // What the restored server holds of the worker's pushes came along.
    EXPECT_EQ(told.last_push_ids, (std::vector<uint64_t>{41}));
    EXPECT_EQ(told.worker_bytes_pushed, (std::vector<uint64_t>{4096}));
  }
  EXPECT_EQ(clients[2]->cluster_map().servers[1].fabric_address, back.fabric_address);
  EXPECT_EQ(sched->stats().rejoined, 1u);
  // The job finishes as usual.
  clients[2]->done();
  EXPECT_TRUE(clients[2]->wait_for_shutdown(kWait));
  EXPECT_TRUE(again.wait_for_shutdown(kWait));
  sched.finish();
}

TEST(SchedulerTest, ADeadServerThatDoesNotRejoinInTimeStopsTheJob) {
  SchedulerOptions so = scheduler_options(1, 1, "tok");
  so.server_rejoin_timeout = 300ms;
  RunningScheduler sched(std::move(so));
  auto clients = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1),
                           client_options(sched->port(), "tok", Role::kWorker, 0, 2)});
  clients[0].reset();
  try {
    (void)clients[1]->wait_for_shutdown(kWait);
    ADD_FAILURE() << "the worker was not told the job failed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("server 0 died and did not rejoin within 300 ms"), std::string::npos)
        << e.what();
  }
  ASSERT_EQ(sched.result().wait_for(kWait), std::future_status::ready);
  EXPECT_THROW(sched.result().get(), SchedulerError);
}

TEST(SchedulerTest, StopBroadcastsShutdown) {
  RunningScheduler sched(scheduler_options(1, 1, "tok"));
  auto clients = join_all({client_options(sched->port(), "tok", Role::kServer, 0, 1),
                           client_options(sched->port(), "tok", Role::kWorker, 0, 2)});
  sched->stop();
  EXPECT_TRUE(clients[0]->wait_for_shutdown(kWait));
  EXPECT_EQ(clients[1]->wait_for_shutdown(kWait), true);
  EXPECT_EQ(clients[0]->shutdown_reason(), "scheduler stopped");
  sched.finish();
}

// The port of a scheduler that was opened and closed again.
uint16_t a_port_nobody_listens_on() {
  Scheduler gone(scheduler_options(1, 1, "tok"));
  return gone.port();
}

TEST(SchedulerTest, ConnectFailureNamesTheSchedulerAddress) {
  const uint16_t port = a_port_nobody_listens_on();
  SchedulerClientOptions o = client_options(port, "tok", Role::kWorker, 0, 1);
  o.connect_timeout = 500ms;
  SchedulerClient c(o);
  try {
    c.join(kWait);
    FAIL() << "joined a scheduler that is not there";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tries within 500 ms"), std::string::npos) << e.what();
  }
  EXPECT_GT(c.connect_attempts(), 1u);  // refused, then tried again until the deadline
}

// A node started before its scheduler (as srun starts every task at once)
// keeps trying the refused connection and joins once the scheduler listens.
TEST(SchedulerTest, ANodeStartedBeforeItsSchedulerJoinsOnceItListens) {
  const uint16_t port = a_port_nobody_listens_on();
  SchedulerClientOptions o = client_options(port, "tok", Role::kWorker, 0, 1);
  o.connect_timeout = kWait;
  SchedulerClient worker(o);
  auto joined = std::async(std::launch::async, [&] { return worker.join(kWait).num_workers(); });
  // Start the scheduler only after a connection was refused.
  const auto give_up = std::chrono::steady_clock::now() + kWait;
  while (worker.connect_attempts() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  ASSERT_GE(worker.connect_attempts(), 2u);
  SchedulerOptions so = scheduler_options(1, 1, "tok");
  so.port = port;
  RunningScheduler sched(so);
  SchedulerClient server(client_options(sched->port(), "tok", Role::kServer, 0, 2));
  auto server_joined = std::async(std::launch::async, [&] { return server.join(kWait).num_servers(); });
  ASSERT_EQ(joined.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(joined.get(), 1u);
  EXPECT_EQ(server_joined.get(), 1u);
}

}  // namespace
}  // namespace parafab::ps
