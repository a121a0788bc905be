// Fault injection, end to end with the real binary under parafab launch: a
// worker killed with SIGKILL (the job goes on, or stops naming it; with
// --partition a survivor trains the dead worker's part of the file), a
// server killed (the job restarts from its checkpoint set), the scheduler
// killed (a clear failure, then train --resume), a slowed worker, corrupt
// checkpoints (passed over to the one before, or refused naming the file),
// and a link cut across a LAN of network namespaces (the job stops naming
// the unreachable server, and launch restarts it from the checkpoints over
// ssh; or, with rejoin, launch starts the server again over ssh and the job
// goes on). Each job that
// finishes must reach a held-out log loss within 2% of the fault-free run.
// The suite ends with a summary line: faults injected and survived, and
// the bytes of model the restarts threw away. It runs as one ctest, so
// that the summary counts every test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/child_process.h"
#include "tests/common/netns_lan.h"
#include "tests/common/temp_dir.h"

namespace parafab {
namespace {

using benchmarks::ChildProcess;
using namespace std::chrono_literals;

const std::string kBin = PARAFAB_BIN_PATH;

struct Tally {
  int injected = 0, survived = 0;
  int restarts = 0;            // jobs started again from a checkpoint set
  uint64_t bytes_lost = 0;     // gradient bytes applied at the servers and thrown away by restarts
  int lower_bounds = 0;  // servers killed by SIGKILL: counted from what the workers saw them acknowledge
};
Tally tally;

double held_out(const std::string& out) {
  std::smatch m;
  const std::regex re(R"(held-out \(\d+ examples\): log loss ([0-9.]+))");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1.0;
}

// The value of NAME in /proc/PID/environ, or "".
std::string env_of(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::stringstream ss(all);
  for (std::string kv; std::getline(ss, kv, '\0');) {
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  }
  return "";
}

// The child of `parent` with this PARAFAB_ROLE and PARAFAB_RANK, or -1.
pid_t child_with_role(pid_t parent, const std::string& role, int rank) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    const pid_t pid = std::stoi(name);
    if (env_of(pid, "PARAFAB_ROLE") == role && env_of(pid, "PARAFAB_RANK") == std::to_string(rank)) return pid;
  }
  return -1;
}

// Pumps the child's output until `ready` holds or the deadline passes.
bool wait_until(ChildProcess& p, const std::function<bool()>& ready, std::chrono::seconds limit = 60s) {
  const auto deadline = ChildProcess::Clock::now() + limit;
  while (ChildProcess::Clock::now() < deadline) {
    p.pump();
    if (ready()) return true;
    if (p.try_reap()) return false;
    std::this_thread::sleep_for(10ms);  // polling a state, not waiting for one
  }
  return false;
}

// Scheduler, servers and workers each in a network namespace of its own
// (10.211.0.10 ... .14 on one bridge), started by launch --hostfile through
// an ssh stand-in that runs the command in the host's namespace. Placement
// is round-robin in file order: scheduler on host 0, servers 0 and 1 on
// hosts 1 and 2, workers on hosts 3 and 4.
class LanJob {
 public:
  // Its files are `prefix`-hosts, -ssh, -job and -ck. Null (and `why`)
  // without the rights to make network namespaces.
  static std::unique_ptr<LanJob> make(const std::string& prefix, std::string& why) {
    try {
      return std::unique_ptr<LanJob>(new LanJob(prefix));
    } catch (const testing::NetnsUnavailable& e) {
      why = e.what();
      return nullptr;
    }
  }
  std::vector<std::string> launch_args(const std::vector<std::string>& extra,
                                       const std::vector<std::string>& worker) const {
    std::vector<std::string> a = {kBin, "launch", "--hostfile", hosts_, "--ssh", ssh_, "--iface", "veth0",
                                  "--job-dir", prefix_ + "-job", "--servers", "2",
                                  "--workers", "2", "--consistency", "ssp:2", "--heartbeat-timeout", "2",
                                  "--timeout", "150", "--checkpoint-dir", checkpoint_dir(), "--checkpoint-clocks",
                                  "20"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("--");
    a.insert(a.end(), worker.begin(), worker.end());
    return a;
  }
  std::string checkpoint_dir() const { return prefix_ + "-ck"; }
  // Cuts server 1's link (host 2) for three heartbeat timeouts, then restores it.
  void cut_server_1(ChildProcess& launch) {
    lan_.set_link(2, false);
    wait_until(launch, [] { return false; }, 6s);
    lan_.set_link(2, true);
  }
  // Every node was on its own address: the fabric endpoints (fi_getname) on theirs.
  static void expect_own_addresses(const std::string& out) {
    for (const auto& [node, host] : {std::pair<std::string, int>{"server 0", 1}, {"server 1", 2}, {"worker 0", 3},
                                     {"worker 1", 4}}) {
      const std::string at = testing::NetnsLan::address(host);
      EXPECT_TRUE(std::regex_search(out, std::regex(node + R"( \(rank \d+\) joined job .* at \S*)" +
                                                        std::regex_replace(at, std::regex(R"(\.)"), R"(\.)"))))
          << node << " not at " << at << "\n" << out;
    }
  }

 private:
  explicit LanJob(const std::string& prefix) : lan_(5), prefix_(prefix), hosts_(prefix + "-hosts"), ssh_(prefix + "-ssh") {
    std::ofstream h(hosts_);
    for (int i = 0; i < 5; ++i) h << testing::NetnsLan::address(i) << " slots=1\n";
    std::ofstream s(ssh_);
    // launch runs `SSH [options] HOST COMMAND`; run COMMAND in HOST's namespace.
    s << "#!/bin/sh\neval host=\\${$(($# - 1))}\neval command=\\${$#}\ncase \"$host\" in\n";
    for (int i = 0; i < 5; ++i) s << "  " << testing::NetnsLan::address(i) << ") ns=" << lan_.host_ns(i) << " ;;\n";
    s << "  *) echo \"lan-ssh: unknown host $host\" >&2; exit 255 ;;\nesac\n"
      << "exec ip netns exec \"$ns\" /bin/sh -c \"$command\"\n";
    s.close();
    std::filesystem::permissions(ssh_, std::filesystem::perms::owner_all);
  }
  testing::NetnsLan lan_;
  std::string prefix_, hosts_, ssh_;
};

class FaultInjection : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ChildProcess gen({kBin, "gen-data", "--out", file("train.svm"), "--test-out", file("test.svm"), "--examples",
                      "30000", "--test-examples", "8000", "--features", "8192", "--nnz", "20", "--seed", "5"},
                     {});
    ASSERT_TRUE(benchmarks::wait_for_exit({&gen}, ChildProcess::Clock::now() + 120s));
    ASSERT_EQ(gen.exit_code(), 0) << gen.output();
    ChildProcess ref(launch_args("ref-ck", {}), {"FI_TCP_IFACE=lo"});
    ASSERT_TRUE(benchmarks::wait_for_exit({&ref}, ChildProcess::Clock::now() + 170s)) << ref.output();
    ASSERT_EQ(ref.exit_code(), 0) << ref.output();
    reference_ = held_out(ref.output());
    ASSERT_GT(reference_, 0) << ref.output();
    const std::string& out = ref.output();
    reference_by_server_ = applied_at_end(out);
    reference_bytes_ = 0;  // (again under --gtest_repeat)
    for (const auto& [server, bytes] : reference_by_server_) reference_bytes_ += bytes;
    ASSERT_GT(reference_bytes_, 0u) << out;
  }
  static void TearDownTestSuite() {
    std::printf("fault injection: %d faults injected, %d survived; %llu bytes of model lost in %d restarts from "
                "checkpoints (gradient bytes the servers had applied after the checkpoints restored%s; a fault-free "
                "job applies %llu); fault-free held-out log loss %.5f\n",
                tally.injected, tally.survived, static_cast<unsigned long long>(tally.bytes_lost), tally.restarts,
                tally.lower_bounds > 0
                    ? ("; for " + std::to_string(tally.lower_bounds) +
                       (tally.lower_bounds == 1 ? " server" : " servers") +
                       " killed by SIGKILL, the bytes the workers saw it acknowledge: a lower bound")
                          .c_str()
                    : "",
                static_cast<unsigned long long>(reference_bytes_), reference_);
    delete dir_;
  }
  static std::string file(const std::string& name) { return (dir_->path() / name).string(); }
  // 2 servers x 2 workers training fm; the last worker is slowed so that the
  // job lasts long enough to be hit mid-training.
  static std::vector<std::string> worker_args(const std::string& slow_ms = "10") {
    return {kBin,        "train", "--train", file("train.svm"), "--test", file("test.svm"), "--model", "fm",
            "--factors", "4",     "--epochs", "2",              "--threads", "1",          "--quiet", "--slow-ms",
            slow_ms};
  }
  static std::vector<std::string> launch_args(const std::string& ck, std::vector<std::string> extra,
                                              const std::vector<std::string>& worker = worker_args()) {
    std::vector<std::string> a = {kBin, "launch", "--servers", "2", "--workers", "2", "--consistency", "ssp:2",
                                  "--heartbeat-timeout", "2", "--timeout", "150", "--checkpoint-dir", file(ck),
                                  "--checkpoint-clocks", "20"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("--");
    a.insert(a.end(), worker.begin(), worker.end());
    return a;
  }
  // Waits for the job to have checkpointed (so it is mid-training), then kills one process.
  static void kill_mid_training(ChildProcess& launch, const std::string& ck, const std::string& role, int rank) {
    // Every server's: the one killed must have one to come back from.
    const std::filesystem::path dir = file(ck);
    ASSERT_TRUE(wait_until(launch, [&] {
      return std::filesystem::exists(dir / "server-0-of-2.ckpt") && std::filesystem::exists(dir / "server-1-of-2.ckpt");
    })) << launch.output();
    const pid_t pid = child_with_role(launch.pid(), role, rank);
    ASSERT_GT(pid, 0) << "no " << role << " " << rank << " under launch\n" << launch.output();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ++tally.injected;
  }
  static void finish(ChildProcess& p) {
    ASSERT_TRUE(benchmarks::wait_for_exit({&p}, ChildProcess::Clock::now() + 170s)) << p.output();
  }
  // Runs `lan`'s job (launch flags `extra`), cuts server 1's link once it
  // has a checkpoint, and returns the job's output once it ended, after
  // checking that it exited 0 and that the scheduler named server 1 dead.
  static std::string cut_server_1_mid_training(LanJob& lan, const std::vector<std::string>& extra) {
    ChildProcess p(lan.launch_args(extra, worker_args()), {"FI_TCP_IFACE=veth0"});
    const std::string first = lan.checkpoint_dir() + "/server-1-of-2.ckpt";
    if (!wait_until(p, [&] { return std::filesystem::exists(first); }, 90s)) {
      ADD_FAILURE() << "no checkpoint of server 1\n" << p.output();
      return "";
    }
    ++tally.injected;
    lan.cut_server_1(p);
    finish(p);
    const std::string out = p.output();
    EXPECT_EQ(p.exit_code(), 0) << out;
    EXPECT_TRUE(std::regex_search(out, std::regex(R"(scheduler: server 1 \(rank \d+, host [^)]*\) is dead: no heartbeat)")))
        << out;
    return out;
  }
  static void expect_close_to_reference(const std::string& out) {
    const double loss = held_out(out);
    std::printf("%s: held-out log loss %.5f, %.4f of the fault-free run's\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), loss, loss / reference_);
    EXPECT_GT(loss, 0) << out;
    EXPECT_LE(loss, reference_ * 1.02) << "fault-free " << reference_ << "\n" << out;
    EXPECT_GE(loss, reference_ * 0.98) << "fault-free " << reference_ << "\n" << out;
    if (loss > 0 && loss <= reference_ * 1.02 && loss >= reference_ * 0.98) ++tally.survived;
  }
  // Each server's "server I: N gradient bytes applied since the job began", by server.
  static std::map<int, uint64_t> applied_at_end(const std::string& out) {
    return by_server(out, std::regex(R"(\[server (\d+)\] server \d+: (\d+) gradient bytes applied since the job began)"));
  }
  // Each server's count in the lines `re` matches (group 1 the server,
  // group 2 the bytes); the last line of a server wins.
  static std::map<int, uint64_t> by_server(const std::string& out, const std::regex& re) {
    std::map<int, uint64_t> bytes;
    for (std::sregex_iterator m(out.begin(), out.end(), re), e; m != e; ++m) {
      bytes[std::stoi((*m)[1])] = std::stoull((*m)[2]);
    }
    return bytes;
  }
  // What a restart threw away: for each server, the gradient bytes it had
  // applied by the end of the attempt that failed (`before`: "server I: N
  // gradient bytes applied since the job began") minus those in the
  // checkpoint it was restored from (`after`: "... M gradient bytes pushed
  // into it)"). A server killed by SIGKILL prints no end count.
  static void count_model_lost(const std::string& before, const std::string& after) {
    const std::map<int, uint64_t> at_end = applied_at_end(before);
    const std::map<int, uint64_t> restored = restored_from(after);
    EXPECT_EQ(restored.size(), 2u) << after;
    ++tally.restarts;
    uint64_t lost = 0;
    for (const auto& [server, bytes] : restored) {
      const auto end = at_end.find(server);
      uint64_t had = 0;
      if (end != at_end.end()) {
        had = end->second;
      } else {
        // Killed by SIGKILL: at least what it started the attempt with
        // and what the workers saw it acknowledge.
        ++tally.lower_bounds;
        const auto started = restored_from(before);
        had = started.count(server) ? started.at(server) : 0;
        const std::map<int, uint64_t> acked = acknowledged(before);
        EXPECT_EQ(acked.count(server), 1u) << before;
        if (acked.count(server)) had += acked.at(server);
      }
      EXPECT_GE(had, bytes) << "server " << server << " restored more than it had applied\n" << before;
      if (had >= bytes) lost += had - bytes;
    }
    std::printf("%s: %llu bytes of model lost (%zu of %zu servers reported their count)\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                static_cast<unsigned long long>(lost), at_end.size(), restored.size());
    tally.bytes_lost += lost;
  }
  // Each server's "server I: restored from ... (..., N gradient bytes pushed into it)".
  static std::map<int, uint64_t> restored_from(const std::string& out) {
    return by_server(out, std::regex(R"(\[server (\d+)\] server \d+: restored from .* (\d+) gradient bytes pushed into it\))"));
  }
  // By server: the gradient bytes the workers saw it acknowledge, summed
  // over their last "worker W: gradient bytes of its pushes acknowledged,
  // by server: 0: N, 1: M" lines.
  static std::map<int, uint64_t> acknowledged(const std::string& out) {
    std::map<int, std::map<int, uint64_t>> by_worker;
    const std::regex line(R"(\[worker (\d+)\] worker \d+: gradient bytes of its pushes acknowledged, by server: ([0-9:, ]+))");
    const std::regex pair(R"((\d+): (\d+))");
    for (std::sregex_iterator m(out.begin(), out.end(), line), e; m != e; ++m) {
      const std::string list = (*m)[2];
      auto& mine = by_worker[std::stoi((*m)[1])];
      for (std::sregex_iterator p(list.begin(), list.end(), pair), pe; p != pe; ++p) {
        mine[std::stoi((*p)[1])] = std::stoull((*p)[2]);
      }
    }
    std::map<int, uint64_t> sum;
    for (const auto& [worker, servers] : by_worker) {
      for (const auto& [server, bytes] : servers) sum[server] += bytes;
    }
    return sum;
  }
  // After one server rejoin: the bytes of acknowledged pushes it lost, as
  // both workers count them ("worker W: 1 server rejoin; ...; N gradient
  // bytes of this worker's acknowledged pushes lost"), summed.
  static uint64_t lost_in_rejoin(const std::string& out) {
    uint64_t lost = 0;
    for (int w = 0; w < 2; ++w) {
      std::smatch m;
      EXPECT_TRUE(std::regex_search(out, m,
                                    std::regex("\\[worker " + std::to_string(w) +
                                               R"(\] worker \d: 1 server rejoin; \d+ unanswered requests? sent again; )"
                                               R"((\d+) gradient bytes of this worker's acknowledged pushes lost)")))
          << out;
      if (!m.empty()) lost += std::stoull(m[1]);
    }
    return lost;
  }
  static int64_t restart_clock(const std::string& out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex(R"(checkpoint set in \S+ (?:\(clock |at clock )(\d+))")) ? std::stoll(m[1]) : -1;
  }
  // By part: the N of this worker's "train part P/2 <file> (...): N examples" lines.
  static std::map<int, uint64_t> part_rows(const std::string& out, int worker) {
    std::map<int, uint64_t> rows;
    const std::regex re("\\[worker " + std::to_string(worker) + R"(\] train part (\d+)/2 \S+ \([a-z]+\): (\d+) examples)");
    for (std::sregex_iterator m(out.begin(), out.end(), re), e; m != e; ++m) rows[std::stoi((*m)[1])] = std::stoull((*m)[2]);
    return rows;
  }

  // Kills worker 1 of a --partition job under --on-worker-failure continue
  // and checks that worker 0 trained its part in the second epoch; returns
  // the job's output, or "" when it did not.
  static std::string expect_part_taken_over(const std::string& name, std::vector<std::string> worker) {
    worker.push_back("--partition");
    ChildProcess p(launch_args(name, {"--on-worker-failure", "continue"}, worker), {"FI_TCP_IFACE=lo"});
    kill_mid_training(p, name, "worker", 1);
    finish(p);
    const std::string& out = p.output();
    EXPECT_EQ(p.exit_code(), 0) << out;
    // Worker 1 dies in epoch 1 of 2 (SSP keeps worker 0 within a few clocks
    // of it), so worker 0 reads part 2 and trains it in epoch 2.
    EXPECT_NE(out.find("worker 0: takes over part 2/2 of --train from epoch 2 (worker 1 is dead)"), std::string::npos)
        << out;
    const std::map<int, uint64_t> own = part_rows(out, 1), read = part_rows(out, 0);
    EXPECT_EQ(read.size(), 2u) << out;
    EXPECT_EQ(own.size(), 1u) << out;
    if (read.size() != 2 || own.size() != 1) return "";
    EXPECT_EQ(read.at(2), own.at(2)) << "the part read again is not the one worker 1 read\n" << out;
    EXPECT_GT(read.at(1), 0u);
    EXPECT_GT(read.at(2), 0u);
    // The job's examples are worker 0's alone (worker 1 never reached the
    // barrier): its part in both epochs and worker 1's in the second.
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex(R"(job: (\d+) examples by 2 workers)"))) << out;
    if (m.empty()) return "";
    EXPECT_EQ(std::stoull(m[1]), 2 * read.at(1) + read.at(2)) << out;
    return ::testing::Test::HasFailure() ? "" : out;
  }
  static testing::TempDir* dir_;
  static double reference_;
  static uint64_t reference_bytes_;  // gradient bytes the fault-free job's servers applied
  static std::map<int, uint64_t> reference_by_server_;  // ... by server
};
testing::TempDir* FaultInjection::dir_ = nullptr;
double FaultInjection::reference_ = 0;
uint64_t FaultInjection::reference_bytes_ = 0;
std::map<int, uint64_t> FaultInjection::reference_by_server_;

TEST_F(FaultInjection, KilledWorkerIsLeftBehindUnderContinue) {
  std::vector<std::string> w = worker_args();
  w.insert(w.end(), {"--metrics-out", file("continue-%r.jsonl")});
  ChildProcess p(launch_args("w-continue", {"--on-worker-failure", "continue"}, w), {"FI_TCP_IFACE=lo"});
  kill_mid_training(p, "w-continue", "worker", 1);
  finish(p);
  // The survivor names the dead worker (rank 3: after the 2 servers) in its metrics.
  std::ifstream metrics(file("continue-0.jsonl"));
  const std::string lines((std::istreambuf_iterator<char>(metrics)), {});
  EXPECT_NE(lines.find(R"("dead_ranks": [3])"), std::string::npos) << lines;
  EXPECT_EQ(p.exit_code(), 0) << p.output();
  EXPECT_NE(p.output().find("worker 1"), std::string::npos);
  EXPECT_NE(p.output().find("the job goes on without it (--on-worker-failure continue)"), std::string::npos)
      << p.output();
  EXPECT_NE(p.output().find("(1 lost, continued without)"), std::string::npos) << p.output();
  // Worker 1 dies in epoch 1 of 2; from epoch 2 worker 0 trains its share
  // beside its own, in the same clocks.
  EXPECT_NE(p.output().find("worker 0: takes over worker 1's batches of --train from epoch 2 (worker 1 is dead)"),
            std::string::npos)
      << p.output();
  expect_close_to_reference(p.output());
}

TEST_F(FaultInjection, KilledWorkersPartIsTakenOverUnderPartition) {
  const std::string out = expect_part_taken_over("w-partition", worker_args());
  if (!out.empty()) expect_close_to_reference(out);
}

// The same with the linear trainer (worker/distributed_trainer.h).
TEST_F(FaultInjection, KilledWorkersPartIsTakenOverByTheLinearTrainer) {
  std::vector<std::string> w = worker_args();
  w[std::find(w.begin(), w.end(), "fm") - w.begin()] = "lr";
  w.erase(std::find(w.begin(), w.end(), "--factors"), std::find(w.begin(), w.end(), "--factors") + 2);
  if (!expect_part_taken_over("w-partition-lr", w).empty()) ++tally.survived;
}

TEST_F(FaultInjection, KilledWorkerStopsTheJobUnderFail) {
  ChildProcess p(launch_args("w-fail", {}), {"FI_TCP_IFACE=lo"});
  kill_mid_training(p, "w-fail", "worker", 1);
  finish(p);
  EXPECT_EQ(p.exit_code(), 1) << p.output();
  EXPECT_TRUE(std::regex_search(p.output(), std::regex(R"(launch: worker 1 \(pid \d+\) failed: killed by signal 9)")))
      << p.output();
  ++tally.survived;  // stopped cleanly, naming the worker, as the policy says
}

TEST_F(FaultInjection, KilledServerRestartsTheJobFromItsCheckpoints) {
  ChildProcess p(launch_args("s-restart", {"--restart-failed", "1"}), {"FI_TCP_IFACE=lo"});
  kill_mid_training(p, "s-restart", "server", 1);
  finish(p);
  EXPECT_EQ(p.exit_code(), 0) << p.output();
  EXPECT_TRUE(std::regex_search(p.output(), std::regex(R"(launch: server 1 \(pid \d+\) failed: killed by signal 9)")))
      << p.output();
  EXPECT_NE(p.output().find("restart 1 of 1"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("restored from"), std::string::npos) << p.output();
  const int64_t clock = restart_clock(p.output());
  EXPECT_GE(clock, 20) << p.output();
  const size_t restart = p.output().find("restart 1 of 1");
  if (restart != std::string::npos) count_model_lost(p.output().substr(0, restart), p.output().substr(restart));
  expect_close_to_reference(p.output());
}

// The same fault with --server-rejoin-timeout: launch starts only the
// killed server again, under its rank; it restores its own checkpoint and
// rejoins the running job; the workers send it what it had not answered
// (it answers a push it already holds without applying it again) and
// their clocks, and the job goes on and finishes.
TEST_F(FaultInjection, KilledServerRejoinsUnderItsRankAndTheJobGoesOn) {
  ChildProcess p(launch_args("s-rejoin", {"--restart-failed", "1", "--server-rejoin-timeout", "60"}),
                 {"FI_TCP_IFACE=lo"});
  kill_mid_training(p, "s-rejoin", "server", 1);
  finish(p);
  const std::string& out = p.output();
  EXPECT_EQ(p.exit_code(), 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(launch: server 1 \(pid \d+\) failed: killed by signal 9; starting it )"
                                                R"(again under its rank from its checkpoint)")))
      << out;
  EXPECT_EQ(out.find("restart 1 of 1: the whole job"), std::string::npos) << out;  // only the server
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(scheduler: server 1 \(rank 1, host [^)]*\) rejoined from)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[server 1\] server 1: rejoined the running job, restored from \S+)")))
      << out;
  // What the killed server had applied after its checkpoint went with it:
  // each worker counts the bytes of its acknowledged pushes the restored
  // server does not hold. The other server lost nothing.
  const uint64_t lost = lost_in_rejoin(out);
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[server 1\] server 1: .* \d+ retried pushes answered without applying)")))
      << out;
  // The workers push the same keys as in the fault-free job (the same
  // batches; a rejoin redoes none), so what the servers hold at the end
  // plus what the workers counted lost is the fault-free job's count.
  const std::map<int, uint64_t> at_end = applied_at_end(out);
  ASSERT_EQ(at_end.size(), 2u) << out;
  EXPECT_EQ(at_end.at(0), reference_by_server_.at(0)) << out;
  EXPECT_EQ(at_end.at(1) + lost, reference_by_server_.at(1)) << "lost " << lost << "\n" << out;
  // And the workers' own sums: every push acknowledged once, by server 1
  // either lost or held at the end.
  const std::map<int, uint64_t> acked = acknowledged(out);
  ASSERT_EQ(acked.size(), 2u) << out;
  EXPECT_EQ(acked.at(0), at_end.at(0)) << out;
  EXPECT_EQ(acked.at(1), at_end.at(1) + lost) << out;
  std::printf("%s: %llu bytes of model lost (counted by the workers)\n",
              ::testing::UnitTest::GetInstance()->current_test_info()->name(), static_cast<unsigned long long>(lost));
  ++tally.restarts;
  tally.bytes_lost += lost;
  expect_close_to_reference(out);
}

TEST_F(FaultInjection, KilledSchedulerFailsClearlyAndTheJobResumes) {
  ChildProcess p(launch_args("sched", {}), {"FI_TCP_IFACE=lo"});
  kill_mid_training(p, "sched", "scheduler", 0);
  finish(p);
  EXPECT_EQ(p.exit_code(), 1) << p.output();
  EXPECT_TRUE(std::regex_search(p.output(), std::regex(R"(launch: scheduler \(pid \d+\) failed: killed by signal 9)")))
      << p.output();
  std::vector<std::string> resumed = worker_args();
  resumed.insert(resumed.end(), {"--resume", file("sched")});
  ChildProcess q(launch_args("sched", {}, resumed), {"FI_TCP_IFACE=lo"});
  finish(q);
  EXPECT_EQ(q.exit_code(), 0) << q.output();
  EXPECT_NE(q.output().find("resuming from the checkpoint set"), std::string::npos) << q.output();
  count_model_lost(p.output(), q.output());
  expect_close_to_reference(q.output());
}

// A server that dies in a resumed job before its first periodic
// checkpoint rejoins from the one it wrote once the workers had ticked past
// the set's clock (the set's own files hold the request ids of the run
// before, whose workers are gone: taking them would drop the new workers'
// pushes as retries).
TEST_F(FaultInjection, ServerKilledEarlyInAResumedJobRejoins) {
  ChildProcess p(launch_args("resume-rejoin", {}), {"FI_TCP_IFACE=lo"});
  kill_mid_training(p, "resume-rejoin", "scheduler", 0);
  finish(p);
  ASSERT_EQ(p.exit_code(), 1) << p.output();
  std::vector<std::string> resumed = worker_args();
  resumed.insert(resumed.end(), {"--resume", file("resume-rejoin")});
  const std::filesystem::path own = std::filesystem::path(file("resume-rejoin")) / "server-1-of-2.ckpt";
  const auto before_run = std::filesystem::last_write_time(own);
  ChildProcess q(launch_args("resume-rejoin", {"--restart-failed", "1", "--server-rejoin-timeout", "60"}, resumed),
                 {"FI_TCP_IFACE=lo"});
  // Its first checkpoint of this run, long before the periodic one (20 clocks on).
  ASSERT_TRUE(wait_until(q, [&] {
    std::error_code ec;
    return std::filesystem::last_write_time(own, ec) != before_run && !ec;
  })) << q.output();
  const pid_t pid = child_with_role(q.pid(), "server", 1);
  ASSERT_GT(pid, 0) << q.output();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ++tally.injected;
  finish(q);
  const std::string& out = q.output();
  EXPECT_EQ(q.exit_code(), 0) << out;
  EXPECT_NE(out.find("resuming from the checkpoint set"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[server 1\] server 1: rejoined the running job, restored from \S+)")))
      << out;
  // Only the requests it had not answered come back as retries, not the
  // new workers' pushes.
  uint64_t resent = 0;
  const std::regex resent_re(R"(\] worker \d: 1 server rejoin; (\d+) unanswered requests? sent again)");
  for (std::sregex_iterator m(out.begin(), out.end(), resent_re), e; m != e; ++m) resent += std::stoull((*m)[1]);
  std::smatch retried;
  ASSERT_TRUE(std::regex_search(out, retried, std::regex(R"(\[server 1\] server 1: .*, (\d+) retried pushes answered)")))
      << out;
  EXPECT_LE(std::stoull(retried[1]), resent) << out;
  count_model_lost(p.output(), out);
  const uint64_t lost = lost_in_rejoin(out);
  std::printf("%s: %llu more bytes of model lost in the rejoin (counted by the workers)\n",
              ::testing::UnitTest::GetInstance()->current_test_info()->name(), static_cast<unsigned long long>(lost));
  ++tally.restarts;
  tally.bytes_lost += lost;
  if (q.exit_code() == 0) ++tally.survived;  // the scheduler's death: a clear failure, then resumed
  expect_close_to_reference(out);
}

TEST_F(FaultInjection, SlowWorkerOnlySlowsTheJob) {
  ++tally.injected;
  ChildProcess p(launch_args("slow", {}, worker_args("40")), {"FI_TCP_IFACE=lo"});
  finish(p);
  EXPECT_EQ(p.exit_code(), 0) << p.output();
  expect_close_to_reference(p.output());
}

TEST_F(FaultInjection, CorruptCheckpointIsPassedOverOrRefusedWithItsPath) {
  ChildProcess p(launch_args("corrupt", {}), {"FI_TCP_IFACE=lo"});
  finish(p);
  ASSERT_EQ(p.exit_code(), 0) << p.output();
  const std::string newest = (std::filesystem::path(file("corrupt")) / "server-0-of-2.ckpt").string();
  ASSERT_TRUE(std::filesystem::exists(newest + ".prev"));
  auto flip = [](const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x55');
  };
  ++tally.injected;
  flip(newest);
  std::vector<std::string> resumed = worker_args();
  resumed.insert(resumed.end(), {"--resume", file("corrupt")});
  ChildProcess q(launch_args("corrupt-2", {}, resumed), {"FI_TCP_IFACE=lo"});
  finish(q);
  EXPECT_EQ(q.exit_code(), 0) << q.output();
  EXPECT_NE(q.output().find("passed over " + newest + ": checkpoint payload checksum mismatch"), std::string::npos)
      << q.output();
  count_model_lost(p.output(), q.output());  // server 0 went back to the checkpoint before its corrupt one
  flip(newest + ".prev");
  ChildProcess r(launch_args("corrupt-3", {}, resumed), {"FI_TCP_IFACE=lo"});
  finish(r);
  EXPECT_NE(r.exit_code(), 0) << r.output();
  EXPECT_NE(r.output().find(newest), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("checksum mismatch"), std::string::npos) << r.output();
  ++tally.survived;  // the damage was found, and refused with the file's name
}

// Server 1's link cut for longer than the heartbeat timeout: the scheduler
// names it dead and the job stops; launch (--restart-failed) starts the
// whole job again over ssh on the same hosts from its checkpoints (the
// workers with train --resume), and it finishes within 2% of the
// fault-free run.
TEST_F(FaultInjection, CutLinkStopsTheJobNamingTheServerAndItRestarts) {
  std::string why;
  const std::unique_ptr<LanJob> lan = LanJob::make(file("lan"), why);
  if (!lan) GTEST_SKIP() << "no network namespaces: " << why;
  const std::string out = cut_server_1_mid_training(*lan, {"--restart-failed", "1"});
  const size_t restart = out.find("restart 1 of 1: the whole job again");
  ASSERT_NE(restart, std::string::npos) << out;
  LanJob::expect_own_addresses(out.substr(0, restart));
  const std::string after = out.substr(restart);
  EXPECT_NE(after.find("resuming from the checkpoint set"), std::string::npos) << after;
  LanJob::expect_own_addresses(after);
  const int64_t clock = restart_clock(after);
  EXPECT_GE(clock, 20) << after;
  count_model_lost(out.substr(0, restart), after);
  expect_close_to_reference(after);
}

// The same cut with --server-rejoin-timeout and --restart-failed: the job
// does not stop. Server 1, cut off, is named dead; once its link is back
// it learns it lost the scheduler and exits; launch starts it again over
// ssh on its host (parafab node --recover), it rejoins under its rank from
// its checkpoint, and the job finishes within 2% of the fault-free run.
TEST_F(FaultInjection, CutLinkServerRejoinsOverSshAndTheJobFinishes) {
  std::string why;
  const std::unique_ptr<LanJob> lan = LanJob::make(file("lan-rejoin"), why);
  if (!lan) GTEST_SKIP() << "no network namespaces: " << why;
  const std::string out = cut_server_1_mid_training(*lan, {"--server-rejoin-timeout", "60", "--restart-failed", "1"});
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(launch: server 1 on \S+ \(pid \d+\) failed: .*; starting it )"
                                                R"(again under its rank from its checkpoint)")))
      << out;
  EXPECT_EQ(out.find("restart 1 of 1: the whole job"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[server 1\] server 1: rejoined the running job, restored from \S+)")))
      << out;
  // The new server 1 is on its host's address again.
  LanJob::expect_own_addresses(out);
  const uint64_t lost = lost_in_rejoin(out);
  std::printf("%s: %llu bytes of model lost (counted by the workers)\n",
              ::testing::UnitTest::GetInstance()->current_test_info()->name(), static_cast<unsigned long long>(lost));
  ++tally.restarts;
  tally.bytes_lost += lost;
  expect_close_to_reference(out);
}

}  // namespace
}  // namespace parafab
