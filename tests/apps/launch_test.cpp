// `parafab launch` end to end: the real binary starting real processes.
// Nothing here sleeps to synchronize: the tests read launch's output until
// the line they wait for, under a deadline.
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/child_process.h"
#include "tests/common/temp_dir.h"

namespace parafab {
namespace {

using benchmarks::ChildProcess;
using Clock = ChildProcess::Clock;
using namespace std::chrono_literals;

const std::string kBin = PARAFAB_BIN_PATH;
const std::string kTable = "id=0,kind=sparse,width=4,updater=sgd,lr=1";

struct LaunchRun {
  int status = -1;        // exit status; -1 when killed or timed out
  bool finished = false;  // exited by itself before the deadline
  std::string out;
  double seconds = 0;
};

LaunchRun run_launch(std::vector<std::string> args, std::chrono::seconds limit, std::vector<std::string> env = {}) {
  args.insert(args.begin(), {kBin, "launch"});
  const auto t0 = Clock::now();
  env.push_back("FI_TCP_IFACE=lo");
  ChildProcess p(args, env);
  LaunchRun r;
  r.finished = benchmarks::wait_for_exit({&p}, t0 + limit);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.status = p.exit_code().value_or(-1);
  r.out = p.output();
  return r;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The CPUs of this process's affinity mask, which launch and its children inherit.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> got;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) got.push_back(line);
  }
  return got;
}

// The pids in launch's "launch: started scheduler (pid N), ..." line.
std::vector<pid_t> started_pids(const std::string& out) {
  std::vector<pid_t> pids;
  for (const std::string& line : lines_starting(out, "launch: started ")) {
    static const std::regex pid_re(R"(\(pid (\d+)\))");
    for (std::sregex_iterator it(line.begin(), line.end(), pid_re), end; it != end; ++it) {
      pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
    }
  }
  return pids;
}

// Launch reaps every child before it exits, so none may still exist.
void expect_all_gone(const std::vector<pid_t>& pids, const std::string& out) {
  for (const pid_t pid : pids) {
    errno = 0;
    EXPECT_TRUE(kill(pid, 0) != 0 && errno == ESRCH) << "pid " << pid << " still exists\n" << out;
  }
}

class LaunchCluster : public ::testing::TestWithParam<const char*> {};

TEST_P(LaunchCluster, ServersAndWorkersCheckEveryValue) {
  const LaunchRun r = run_launch({"--servers", "2", "--workers", "3", "--provider", GetParam(), "--table", kTable,
                                  "--timeout", "120", "--", kBin, "worker", "--keys", "20000", "--rounds", "3"},
                                 150s);
  ASSERT_TRUE(r.finished) << r.out;
  ASSERT_EQ(r.status, 0) << r.out;
  for (int j = 0; j < 3; ++j) {
    const std::vector<std::string> lines = lines_starting(r.out, "[worker " + std::to_string(j) + "] ");
    int matching = 0;
    // The prefix is the worker's rank in the job: launch asks the scheduler for it.
    for (const std::string& l : lines) {
      matching += contains(l, "worker " + std::to_string(j) + ": ") && contains(l, "every value matches") ? 1 : 0;
    }
    EXPECT_EQ(matching, 1) << "worker " << j << "\n" << r.out;
  }
  EXPECT_FALSE(lines_starting(r.out, "[scheduler] ").empty()) << r.out;
  EXPECT_FALSE(lines_starting(r.out, "[server 0] ").empty()) << r.out;
  EXPECT_FALSE(lines_starting(r.out, "[server 1] ").empty()) << r.out;
  EXPECT_TRUE(contains(r.out, "launch: job done")) << r.out;
  // Every line is a child's (prefixed) or launch's own.
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    EXPECT_TRUE(line.rfind("[", 0) == 0 || line.rfind("launch: ", 0) == 0) << "unprefixed line: " << line;
  }
  expect_all_gone(started_pids(r.out), r.out);
}

INSTANTIATE_TEST_SUITE_P(Providers, LaunchCluster, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param) == "shm" ? std::string("shm") : std::string("tcp_rxm");
                         });

TEST(Launch, WorkersSeeTheJobInTheirEnvironmentButNotTheToken) {
  // The workers never join, so the scheduler gives up after --join-timeout
  // and the job fails; what matters here is what the workers saw (the join
  // timeout too: a worker command's own --join-timeout defaults to it).
  const std::string script =
      "echo role=$PARAFAB_ROLE rank=$PARAFAB_RANK servers=$PARAFAB_NUM_SERVERS workers=$PARAFAB_NUM_WORKERS "
      "provider=$PARAFAB_PROVIDER threads=$PARAFAB_THREADS join=$PARAFAB_JOIN_TIMEOUT; "
      "case \"$PARAFAB_SCHEDULER\" in 127.0.0.1:[0-9]*) echo scheduler-ok;; *) echo bad-scheduler;; esac; "
      "stat -c mode=%a \"$PARAFAB_TOKEN_FILE\"; "
      "env | grep -c -F -f \"$PARAFAB_TOKEN_FILE\" || true; "
      "printf 'no newline at the end'";
  const LaunchRun r = run_launch({"--servers", "1", "--workers", "2", "--provider", "shm", "--join-timeout", "3",
                                  "--grace", "2", "--", "sh", "-c", script},
                                 60s);
  ASSERT_TRUE(r.finished) << r.out;
  for (int j = 0; j < 2; ++j) {
    const std::string p = "[worker " + std::to_string(j) + "] ";
    // Each of the 2 workers gets half of the CPUs this process may use (at least 1).
    EXPECT_TRUE(contains(r.out, p + "role=worker rank=" + std::to_string(j) +
                                    " servers=1 workers=2 provider=shm threads=" +
                                    std::to_string(std::max(1, usable_cpus() / 2)) + " join=3\n"))
        << r.out;
    EXPECT_TRUE(contains(r.out, p + "scheduler-ok\n")) << r.out;
    EXPECT_TRUE(contains(r.out, p + "mode=600\n")) << r.out;
    EXPECT_TRUE(contains(r.out, p + "0\n")) << "the token is in the environment\n" << r.out;
    EXPECT_TRUE(contains(r.out, p + "no newline at the end\n")) << r.out;
  }
  // The private directory (named in launch's first line) is gone.
  static const std::regex dir_re(R"(in (/\S*parafab-launch-\w+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, dir_re)) << r.out;
  EXPECT_FALSE(std::filesystem::exists(m[1].str())) << m[1].str();
  expect_all_gone(started_pids(r.out), r.out);
}

// PARAFAB_THREADS given to launch is the user's: passed on unchanged.
TEST(Launch, AThreadCountInLaunchsEnvironmentIsKept) {
  const LaunchRun r = run_launch({"--servers", "1", "--workers", "2", "--provider", "shm", "--join-timeout", "3",
                                  "--grace", "2", "--", "sh", "-c", "echo threads=$PARAFAB_THREADS"},
                                 60s, {"PARAFAB_THREADS=3"});
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_TRUE(contains(r.out, "[worker 0] threads=3\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[worker 1] threads=3\n")) << r.out;
}

TEST(Launch, AFailingWorkerFailsTheJobAndStopsTheRest) {
  const LaunchRun r = run_launch(
      {"--servers", "2", "--workers", "2", "--provider", "shm", "--grace", "2", "--", "sh", "-c", "exit 3"}, 60s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(launch: worker \d \(pid \d+\) failed: exit status 3)"))) << r.out;
  EXPECT_LT(r.seconds, 30) << r.out;
  expect_all_gone(started_pids(r.out), r.out);
}

TEST(Launch, AWorkerKilledByASignalIsNamed) {
  const LaunchRun r = run_launch(
      {"--servers", "1", "--workers", "1", "--provider", "shm", "--grace", "2", "--", "sh", "-c", "kill -9 $$"}, 60s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(launch: worker 0 \(pid \d+\) failed: killed by signal 9)")))
      << r.out;
  expect_all_gone(started_pids(r.out), r.out);
}

TEST(Launch, SigintStopsEverythingPromptly) {
  const auto t0 = Clock::now();
  ChildProcess p(
      {kBin, "launch", "--servers", "2", "--workers", "2", "--provider", "shm", "--grace", "3", "--", "sleep", "60"},
      {"FI_TCP_IFACE=lo"});
  // Wait for launch to say that every process has started.
  while (!contains(p.output(), "launch: started ") && Clock::now() < t0 + 60s) {
    pollfd fd{p.output_fd(), POLLIN, 0};
    if (p.output_fd() < 0) break;
    (void)poll(&fd, 1, 1000);
    p.pump();
  }
  ASSERT_TRUE(contains(p.output(), "launch: started ")) << p.output();
  const auto sent = Clock::now();
  ASSERT_EQ(kill(p.pid(), SIGINT), 0);
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, sent + 30s)) << p.output();
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  EXPECT_LT(took, 15) << p.output();
  ASSERT_TRUE(p.exit_code().has_value()) << p.describe_end() << "\n" << p.output();
  EXPECT_EQ(*p.exit_code(), 128 + SIGINT) << p.output();
  EXPECT_TRUE(contains(p.output(), "launch: got SIGINT")) << p.output();
  const std::vector<pid_t> pids = started_pids(p.output());
  EXPECT_EQ(pids.size(), 5u) << p.output();
  expect_all_gone(pids, p.output());
}

TEST(Launch, ASchedulerThatFailsBeforeListeningIsNamedWithItsOutput) {
  // Both specs parse, but a job cannot have table 0 twice: the scheduler refuses.
  const LaunchRun r = run_launch({"--table", kTable, "--table", kTable, "--", "true"}, 60s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(
          R"(launch: scheduler \(pid \d+\) failed before listening: exit status \d+; its last output:\n    .*table 0)")))
      << r.out;
}

TEST(Launch, TheJobTimeoutStopsEverything) {
  const LaunchRun r = run_launch(
      {"--servers", "1", "--workers", "2", "--provider", "shm", "--timeout", "1", "--grace", "2", "--", "sleep", "60"},
      60s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "launch: the job ran past --timeout 1 s; still running: ")) << r.out;
  EXPECT_LT(r.seconds, 20) << r.out;
  expect_all_gone(started_pids(r.out), r.out);
}

// A process that is gone, or a zombie nobody has reaped yet (it runs no more).
bool dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

TEST(Launch, ChildrenDieWhenLaunchIsKilled) {
  ChildProcess p({kBin, "launch", "--servers", "1", "--workers", "2", "--provider", "shm", "--", "sleep", "60"},
                 {"FI_TCP_IFACE=lo"});
  const auto t0 = Clock::now();
  while (!contains(p.output(), "launch: started ") && p.output_fd() >= 0 && Clock::now() < t0 + 60s) {
    pollfd fd{p.output_fd(), POLLIN, 0};
    (void)poll(&fd, 1, 1000);
    p.pump();
  }
  ASSERT_TRUE(contains(p.output(), "launch: started ")) << p.output();
  const std::vector<pid_t> pids = started_pids(p.output());
  ASSERT_EQ(pids.size(), 4u) << p.output();
  p.kill_and_reap();  // SIGKILL: launch cannot forward anything
  // PR_SET_PDEATHSIG delivers SIGKILL to each child as launch dies; whoever
  // adopts them reaps them in its own time, so wait (bounded) for each to stop running.
  const auto deadline = Clock::now() + 20s;
  for (const pid_t pid : pids) {
    while (!dead(pid) && Clock::now() < deadline) (void)poll(nullptr, 0, 10);
    EXPECT_TRUE(dead(pid)) << "pid " << pid << " outlived launch\n" << p.output();
  }
}

TEST(Launch, BadFlagsExitTwoWithAMessage) {
  LaunchRun r = run_launch({"--servers", "1", "--workers", "2"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no worker command")) << r.out;
  r = run_launch({"--servers", "1", "--workers", "2", "--"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no worker command")) << r.out;
  r = run_launch({"--servers", "1", "--workers", "0", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--workers 0")) << r.out;
  r = run_launch({"--servers", "0", "--workers", "1", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--servers 0")) << r.out;
  r = run_launch({"--consistency", "nope", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "consistency 'nope'")) << r.out;
  r = run_launch({"--table", "id=0,kind=nope", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "nope")) << r.out;
}

TEST(Launch, AWorkerCommandThatCannotRunIsNamed) {
  const LaunchRun r = run_launch(
      {"--servers", "1", "--workers", "1", "--provider", "shm", "--grace", "2", "--", "/nonexistent/parafab-worker"},
      60s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "[worker 0] cannot execute '/nonexistent/parafab-worker'")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(launch: worker 0 \(pid \d+\) failed: exit status 127)"))) << r.out;
}


// Distributed `parafab train` (2 servers, 2 workers, SSP) reaches the held-out
// log loss of single-process training on the same planted data, within 2%,
// and worker 0 alone reports it. The workers send their batches' sorted keys
// delta + varint coded (--delta-keys), which the servers decode.
TEST(Launch, DistributedTrainMatchesSingleProcessOnAPlantedProblem) {
  testing::TempDir dir;
  const std::string train = dir.file("train.svm"), test = dir.file("test.svm");
  auto run = [](std::vector<std::string> argv) {
    benchmarks::ChildProcess p(std::move(argv), {});
    EXPECT_TRUE(benchmarks::wait_for_exit({&p}, benchmarks::ChildProcess::Clock::now() + 120s)) << p.output();
    EXPECT_EQ(p.exit_code(), 0) << p.output();
    return p.output();
  };
  run({kBin, "gen-data", "--out", train, "--test-out", test, "--examples", "40000", "--test-examples", "10000",
       "--features", "16384", "--nnz", "30", "--seed", "5"});
  auto held_out = [](const std::string& out) {
    std::smatch m;
    const std::regex re(R"(held-out \(\d+ examples\): log loss ([0-9.]+))");
    EXPECT_TRUE(std::regex_search(out, m, re)) << out;
    return m.empty() ? 0.0 : std::stod(m[1]);
  };
  const double single = held_out(run({kBin, "train", "--train", train, "--test", test, "--quiet"}));
  const LaunchRun r = run_launch({"--servers", "2", "--workers", "2", "--consistency", "ssp:2", "--timeout", "150",
                                  "--", kBin, "train", "--train", train, "--test", test, "--quiet", "--delta-keys"},
                                 170s);
  ASSERT_TRUE(r.finished) << r.out;
  ASSERT_EQ(r.status, 0) << r.out;
  const double distributed = held_out(r.out);
  EXPECT_LE(distributed, single * 1.02) << r.out;
  EXPECT_EQ(lines_starting(r.out, "[worker 1] held-out").size(), 0u) << "only worker 0 evaluates\n" << r.out;
  EXPECT_EQ(lines_starting(r.out, "[worker 0] held-out").size(), 1u) << r.out;
}

// A bad line in --test stops a distributed job before it trains: worker 0,
// which evaluates, reads the held-out set first (it used to read it after
// the whole training, and the job then failed with nothing saved).
TEST(Launch, ABadHeldOutFileStopsTheJobBeforeTraining) {
  testing::TempDir dir;
  const std::string train = dir.file("train.svm"), bad = dir.file("bad.svm");
  benchmarks::ChildProcess g({kBin, "gen-data", "--out", train, "--examples", "2000", "--features", "1024", "--seed", "5"},
                             {});
  ASSERT_TRUE(benchmarks::wait_for_exit({&g}, Clock::now() + 60s)) << g.output();
  ASSERT_EQ(g.exit_code(), 0) << g.output();
  std::ofstream(bad) << "1 1:1\n1 x:1\n";
  const LaunchRun r = run_launch({"--servers", "1", "--workers", "2", "--timeout", "100", "--", kBin, "train",
                                  "--train", train, "--test", bad, "--epochs", "1", "--quiet"},
                                 120s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, bad + ":2:")) << r.out;
  EXPECT_FALSE(contains(r.out, "examples by 2 workers")) << "the job trained first\n" << r.out;
}

}  // namespace
}  // namespace parafab
