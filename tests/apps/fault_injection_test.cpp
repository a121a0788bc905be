// Fault injection, end to end with the real binary under parafab launch: a
// worker killed with SIGKILL (the job goes on, or stops naming it), a
// server killed (the job restarts from its checkpoint set), the scheduler
// killed (a clear failure, then train --resume), a slowed worker, and
// corrupt checkpoints (passed over to the one before, or refused naming the
// file). Each job that finishes must reach a held-out log loss within 2% of
// the fault-free run. The suite ends with a summary line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/child_process.h"
#include "tests/common/temp_dir.h"

namespace parafab {
namespace {

using benchmarks::ChildProcess;
using namespace std::chrono_literals;

const std::string kBin = PARAFAB_BIN_PATH;

struct Tally {
  int injected = 0, survived = 0;
  int64_t clocks_rolled_back = 0;  // iterations redone after restarts from checkpoints
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
  }
  static void TearDownTestSuite() {
    std::printf("fault injection: %d faults injected, %d survived; model lost: the servers' updates after the last "
                "checkpoint, %lld iterations rolled back and redone in all; fault-free held-out log loss %.5f\n",
                tally.injected, tally.survived, static_cast<long long>(tally.clocks_rolled_back), reference_);
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
    const std::string first = (std::filesystem::path(file(ck)) / "server-0-of-2.ckpt").string();
    ASSERT_TRUE(wait_until(launch, [&] { return std::filesystem::exists(first); })) << launch.output();
    const pid_t pid = child_with_role(launch.pid(), role, rank);
    ASSERT_GT(pid, 0) << "no " << role << " " << rank << " under launch\n" << launch.output();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ++tally.injected;
  }
  static void finish(ChildProcess& p) {
    ASSERT_TRUE(benchmarks::wait_for_exit({&p}, ChildProcess::Clock::now() + 170s)) << p.output();
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
  static int64_t restart_clock(const std::string& out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex(R"(checkpoint set in \S+ (?:\(clock |at clock )(\d+))")) ? std::stoll(m[1]) : -1;
  }
  static testing::TempDir* dir_;
  static double reference_;
};
testing::TempDir* FaultInjection::dir_ = nullptr;
double FaultInjection::reference_ = 0;

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
  expect_close_to_reference(p.output());
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
  if (clock > 0) tally.clocks_rolled_back += clock;
  expect_close_to_reference(p.output());
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
  expect_close_to_reference(q.output());
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
  flip(newest + ".prev");
  ChildProcess r(launch_args("corrupt-3", {}, resumed), {"FI_TCP_IFACE=lo"});
  finish(r);
  EXPECT_NE(r.exit_code(), 0) << r.output();
  EXPECT_NE(r.output().find(newest), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("checksum mismatch"), std::string::npos) << r.output();
  ++tally.survived;  // the damage was found, and refused with the file's name
}

}  // namespace
}  // namespace parafab
