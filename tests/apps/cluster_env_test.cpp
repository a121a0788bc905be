// `parafab node` under the variables of each launcher it understands: this
// test plays the launcher, starting the six processes of a job (1 scheduler,
// 2 servers, 3 workers) itself with only the environment telling them apart,
// exactly as srun, mpirun or a Kubernetes Job would. The workers run
// `parafab worker`, which checks every pulled value. Processes start in
// reverse rank order so that servers and workers must wait for the
// scheduler's port. Nothing sleeps: the test waits for the processes to
// exit, under a deadline.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
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
constexpr int kServers = 2, kWorkers = 3, kSize = 1 + kServers + kWorkers;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// A port free on 127.0.0.1 now (the kernel's pick; the scheduler reuses the address).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "cannot pick a free port";
  }
  close(fd);
  return ntohs(a.sin_port);
}

std::string write_token(const testing::TempDir& dir) {
  const std::string path = dir.file("job.token");
  std::random_device rd;
  std::string secret;
  for (int i = 0; i < 16; ++i) secret += "0123456789abcdef"[rd() % 16];
  {
    std::ofstream(path) << secret << "\n";
  }
  chmod(path.c_str(), 0600);
  return path;
}

// Every scheme's variables, empty: an empty variable counts as unset, so a
// test run inside a real Slurm or MPI job is not confused by the outer one.
std::vector<std::string> blank_launcher_variables() {
  return {"PARAFAB_ROLE=",        "PARAFAB_RANK=",         "PARAFAB_SCHEDULER=", "PARAFAB_NUM_SERVERS=",
          "PARAFAB_NUM_WORKERS=", "PARAFAB_NODE=",         "PARAFAB_IFACE=",     "PARAFAB_PROVIDER=",
          "SLURM_PROCID=",        "SLURM_STEP_NODELIST=",  "SLURM_JOB_NODELIST=", "OMPI_COMM_WORLD_RANK=",
          "PMI_RANK="};
}

// ChildProcess passes every entry on; with a name twice the first would win,
// so later entries replace earlier ones here.
std::vector<std::string> merged(std::vector<std::string> env) {
  std::vector<std::string> out;
  for (std::string& e : env) {
    const std::string name = e.substr(0, e.find('=') + 1);
    std::erase_if(out, [&](const std::string& o) { return o.rfind(name, 0) == 0; });
    out.push_back(std::move(e));
  }
  return out;
}

struct JobRun {
  std::vector<std::unique_ptr<ChildProcess>> procs;  // by global rank
  bool finished = false;
  std::string all_output() const {
    std::string s;
    for (size_t r = 0; r < procs.size(); ++r) {
      s += "---- rank " + std::to_string(r) + " (" + procs[r]->describe_end() + "): " + procs[r]->command() + "\n" +
           procs[r]->output();
    }
    return s;
  }
};

// Starts rank r with common_env + blanks + rank_env(r), highest rank first.
JobRun run_job(const std::vector<std::string>& node_flags,
               const std::function<std::vector<std::string>(int rank)>& rank_env, const std::string& token,
               std::chrono::seconds limit) {
  std::vector<std::string> argv = {kBin, "node"};
  argv.insert(argv.end(), node_flags.begin(), node_flags.end());
  for (const std::string& a : {std::string("--bind"), std::string("127.0.0.1"), std::string("--table"), kTable,
                               std::string("--join-timeout"), std::string("60"), std::string("--"), kBin,
                               std::string("worker"), std::string("--keys"), std::string("20000")}) {
    argv.push_back(a);
  }
  JobRun run;
  run.procs.resize(kSize);
  const auto t0 = Clock::now();
  for (int r = kSize - 1; r >= 0; --r) {
    std::vector<std::string> env = blank_launcher_variables();
    env.push_back("FI_TCP_IFACE=lo");
    env.push_back("PARAFAB_TOKEN_FILE=" + token);
    for (std::string& e : rank_env(r)) env.push_back(std::move(e));
    run.procs[r] = std::make_unique<ChildProcess>(argv, merged(std::move(env)));
  }
  std::vector<ChildProcess*> ptrs;
  for (auto& p : run.procs) ptrs.push_back(p.get());
  run.finished = benchmarks::wait_for_exit(ptrs, t0 + limit);
  return run;
}

void expect_job_passed(const JobRun& run, const std::string& scheme_evidence) {
  const std::string all = run.all_output();
  ASSERT_TRUE(run.finished) << all;
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(run.procs[r]->exit_code(), std::optional<int>(0)) << "rank " << r << "\n" << all;
    const std::string& out = run.procs[r]->output();
    EXPECT_TRUE(contains(out, "node: global rank " + std::to_string(r) + " of 6 (" + scheme_evidence))
        << "rank " << r << "\n" << all;
  }
  EXPECT_TRUE(contains(run.procs[0]->output(), "scheduler listening on 127.0.0.1:")) << all;
  for (int s = 0; s < kServers; ++s) {
    EXPECT_TRUE(contains(run.procs[1 + s]->output(), "server " + std::to_string(s) + " (rank")) << all;
  }
  for (int w = 0; w < kWorkers; ++w) {
    const std::string& out = run.procs[1 + kServers + w]->output();
    // The worker got the role rank node gave it.
    EXPECT_TRUE(contains(out, "worker " + std::to_string(w) + ": ")) << all;
    EXPECT_TRUE(contains(out, "every value matches")) << all;
  }
}

class ClusterEnv : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::string token_ = write_token(dir_);
  int port_ = free_port();
  std::string port_text_ = std::to_string(port_);
};

TEST_F(ClusterEnv, OpenMpiVariables) {
  const JobRun run = run_job(
      {"--servers", "2", "--workers", "3", "--port", port_text_},
      [](int r) {
        return std::vector<std::string>{"OMPI_COMM_WORLD_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_SIZE=6",
                                        "OMPI_COMM_WORLD_LOCAL_SIZE=6"};
      },
      token_, 150s);
  expect_job_passed(run, "ompi: OMPI_COMM_WORLD_RANK=");
}

TEST_F(ClusterEnv, PmiVariables) {
  // Hydra names no host for rank 0: PARAFAB_SCHEDULER (host only; --port) does.
  const JobRun run = run_job(
      {"--servers", "2", "--workers", "3", "--port", port_text_},
      [](int r) {
        return std::vector<std::string>{"PMI_RANK=" + std::to_string(r), "PMI_SIZE=6",
                                        "PARAFAB_SCHEDULER=127.0.0.1"};
      },
      token_, 150s);
  expect_job_passed(run, "pmi: PMI_RANK=");
}

TEST_F(ClusterEnv, SlurmVariables) {
  const JobRun run = run_job(
      {"--servers", "2", "--workers", "3", "--port", port_text_},
      [](int r) {
        return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=6",
                                        "SLURM_NODELIST=localhost"};
      },
      token_, 150s);
  expect_job_passed(run, "slurm: SLURM_PROCID=");
}

TEST_F(ClusterEnv, ParafabVariablesWithoutFlags) {
  // The shape and the scheduler's port from the environment alone, as a
  // Kubernetes Job's pod template would give them.
  const std::string port = port_text_;
  const JobRun run = run_job(
      {},
      [port](int r) {
        const std::string role = r == 0 ? "scheduler" : r <= kServers ? "server" : "worker";
        const int role_rank = r == 0 ? 0 : r <= kServers ? r - 1 : r - 1 - kServers;
        return std::vector<std::string>{"PARAFAB_ROLE=" + role, "PARAFAB_RANK=" + std::to_string(role_rank),
                                        "PARAFAB_NUM_SERVERS=2", "PARAFAB_NUM_WORKERS=3",
                                        "PARAFAB_SCHEDULER=127.0.0.1:" + port};
      },
      token_, 150s);
  expect_job_passed(run, "parafab: PARAFAB_ROLE=");
}

// A node that cannot be placed says which variables are wrong, and exits 2.
TEST_F(ClusterEnv, ASizeThatDoesNotFitIsNamed) {
  ChildProcess p({kBin, "node", "--servers", "2", "--workers", "3", "--", "true"},
                 [&] {
                   std::vector<std::string> env = blank_launcher_variables();
                   env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "SLURM_PROCID=1", "SLURM_NTASKS=5",
                                          "SLURM_NODELIST=localhost"});
                   return merged(std::move(env));
                 }());
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
  EXPECT_EQ(p.exit_code(), std::optional<int>(2)) << p.output();
  EXPECT_TRUE(contains(p.output(), "SLURM_NTASKS=5 but the job needs 1 scheduler + 2 servers + 3 workers = 6"))
      << p.output();
}

TEST_F(ClusterEnv, NoTokenIsNamed) {
  std::vector<std::string> env = blank_launcher_variables();
  env.insert(env.end(), {"PARAFAB_TOKEN_FILE=", "PMI_RANK=0", "PMI_SIZE=3"});
  ChildProcess p({kBin, "node", "--servers", "1", "--workers", "1", "--", "true"}, merged(env));
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
  EXPECT_EQ(p.exit_code(), std::optional<int>(2)) << p.output();
  EXPECT_TRUE(contains(p.output(), "--token-file FILE or set PARAFAB_TOKEN_FILE")) << p.output();
}

TEST_F(ClusterEnv, AWorkerWithoutASchedulerGivesUpAtTheJoinTimeout) {
  std::vector<std::string> env = blank_launcher_variables();
  env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "PMI_RANK=2", "PMI_SIZE=3"});
  const auto t0 = Clock::now();
  ChildProcess p({kBin, "node", "--servers", "1", "--workers", "1", "--port", port_text_, "--scheduler-host",
                  "127.0.0.1", "--join-timeout", "1.5", "--", "true"},
                 merged(env));
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, t0 + 30s)) << p.output();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(p.exit_code(), std::optional<int>(1)) << p.output();
  EXPECT_TRUE(contains(p.output(), "did not accept a connection within --join-timeout 1.5 s")) << p.output();
  EXPECT_GE(took, 1.4) << p.output();
  EXPECT_LT(took, 15) << p.output();
}

TEST_F(ClusterEnv, DryRunShowsTheWorkersEnvironment) {
  std::vector<std::string> env = blank_launcher_variables();
  // Two workers on this host (launch --hostfile says so): each gets half of
  // the CPUs; a thread count already in the environment is left alone.
  env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "SLURM_PROCID=4", "SLURM_NTASKS=6",
                         "SLURM_NODELIST=localhost,other[1-2]", "PARAFAB_LOCAL_WORKERS=2", "PARAFAB_THREADS="});
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  const std::string threads = "PARAFAB_THREADS=" + std::to_string(std::max(1, CPU_COUNT(&cpus) / 2)) + "\n";
  // The job's join timeout reaches the worker command as a variable (its
  // own --join-timeout would win over it).
  ChildProcess p({kBin, "node", "--servers", "2", "--workers", "3", "--iface", "lo", "--join-timeout", "90",
                  "--dry-run", "--", "echo", "hi"},
                 merged(env));
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
  EXPECT_EQ(p.exit_code(), std::optional<int>(0)) << p.output();
  for (const std::string line : {"PARAFAB_ROLE=worker\n", "PARAFAB_RANK=1\n", "PARAFAB_SCHEDULER=localhost:9737\n",
                                 "PARAFAB_NODE=127.0.0.1\n", "PARAFAB_NUM_SERVERS=2\n", "PARAFAB_JOIN_TIMEOUT=90\n",
                                 "exec echo hi\n"}) {
    EXPECT_TRUE(contains(p.output(), line)) << line << "\n" << p.output();
  }
  EXPECT_TRUE(contains(p.output(), threads)) << threads << p.output();
  env.push_back("PARAFAB_THREADS=5");
  ChildProcess kept({kBin, "node", "--servers", "2", "--workers", "3", "--iface", "lo", "--dry-run", "--", "echo", "hi"},
                    merged(env));
  ASSERT_TRUE(benchmarks::wait_for_exit({&kept}, Clock::now() + 30s)) << kept.output();
  EXPECT_FALSE(contains(kept.output(), "PARAFAB_THREADS=")) << kept.output();
}

// An IPv6 scheduler host goes to the others in brackets, so that its port
// stays apart from the address (launch --hostfile with an IPv6 first host).
TEST_F(ClusterEnv, DryRunWritesAnIpv6SchedulerInBrackets) {
  std::vector<std::string> env = blank_launcher_variables();
  env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "SLURM_PROCID=4", "SLURM_NTASKS=6",
                         "SLURM_NODELIST=localhost,other[1-2]", "PARAFAB_SCHEDULER=[fe80::1]:9800"});
  ChildProcess p({kBin, "node", "--servers", "2", "--workers", "3", "--iface", "lo", "--dry-run", "--", "echo", "hi"},
                 merged(env));
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
  EXPECT_EQ(p.exit_code(), std::optional<int>(0)) << p.output();
  EXPECT_TRUE(contains(p.output(), "PARAFAB_SCHEDULER=[fe80::1]:9800\n")) << p.output();
}

// --scheduler-host is read as PARAFAB_SCHEDULER's host (apps/host_port.h):
// an IPv6 address bare or in brackets goes on in brackets once; a port in
// it is refused, naming --port.
TEST_F(ClusterEnv, SchedulerHostTakesIpv6BareOrInBracketsAndNoPort) {
  std::vector<std::string> env = blank_launcher_variables();
  env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "PMI_RANK=2", "PMI_SIZE=3"});
  for (const std::string host : {"fe80::1", "[fe80::1]"}) {
    ChildProcess p({kBin, "node", "--servers", "1", "--workers", "1", "--port", "9800", "--scheduler-host", host,
                    "--iface", "lo", "--dry-run", "--", "echo", "hi"},
                   merged(env));
    ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
    EXPECT_EQ(p.exit_code(), std::optional<int>(0)) << host << "\n" << p.output();
    EXPECT_TRUE(contains(p.output(), "PARAFAB_SCHEDULER=[fe80::1]:9800\n")) << host << "\n" << p.output();
  }
  for (const auto& [host, why] : {std::pair<std::string, std::string>{"head:9000", "give the port with --port"},
                                  {"[fe80::1]:9000", "give the port with --port"},
                                  {"head::9000", "not an IPv6 address"}}) {
    ChildProcess p({kBin, "node", "--servers", "1", "--workers", "1", "--scheduler-host", host, "--dry-run", "--",
                    "echo", "hi"},
                   merged(env));
    ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
    EXPECT_EQ(p.exit_code(), std::optional<int>(2)) << host << "\n" << p.output();
    EXPECT_TRUE(contains(p.output(), "--scheduler-host '" + host + "'")) << p.output();
    EXPECT_TRUE(contains(p.output(), why)) << why << "\n" << p.output();
  }
}

// A server's command carries the checkpoint flags (and --recover, for one
// started again to rejoin); the scheduler's the worker-failure policy and
// the rejoin timeout.
TEST_F(ClusterEnv, DryRunPassesCheckpointsToServersAndThePolicyToTheScheduler) {
  for (const auto& [procid, want] :
       {std::pair<const char*, const char*>{"1", "--checkpoint-dir /shared/ck --checkpoint-interval 0 --checkpoint-clocks 50 "
                                                 "--recover\n"},
        {"0", "--on-worker-failure continue --server-rejoin-timeout 30"}}) {
    std::vector<std::string> env = blank_launcher_variables();
    env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, std::string("SLURM_PROCID=") + procid, "SLURM_NTASKS=6",
                           "SLURM_NODELIST=localhost,other[1-2]"});
    ChildProcess p({kBin, "node", "--servers", "2", "--workers", "3", "--iface", "lo", "--checkpoint-dir", "/shared/ck",
                    "--checkpoint-clocks", "50", "--on-worker-failure", "continue", "--server-rejoin-timeout", "30",
                    "--recover", "--dry-run", "--", "echo", "hi"},
                   merged(env));
    ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
    EXPECT_EQ(p.exit_code(), std::optional<int>(0)) << p.output();
    EXPECT_TRUE(contains(p.output(), want)) << want << "\n" << p.output();
  }
  // Without --checkpoint-dir neither can work, and every process says so.
  for (const char* flag : {"--server-rejoin-timeout", "--recover"}) {
    std::vector<std::string> env = blank_launcher_variables();
    env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "SLURM_PROCID=3", "SLURM_NTASKS=6",
                           "SLURM_NODELIST=localhost,other[1-2]"});
    std::vector<std::string> argv = {kBin, "node", "--servers", "2", "--workers", "3", "--iface", "lo", flag};
    if (std::string(flag) == "--server-rejoin-timeout") argv.push_back("30");
    argv.insert(argv.end(), {"--dry-run", "--", "echo", "hi"});
    ChildProcess p(argv, merged(env));
    ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
    EXPECT_EQ(p.exit_code(), std::optional<int>(2)) << p.output();
    EXPECT_TRUE(contains(p.output(), std::string(flag) + " needs --checkpoint-dir")) << p.output();
  }
  // Nor can checkpoints by clocks or time, as launch and server refuse too.
  std::vector<std::string> env = blank_launcher_variables();
  env.insert(env.end(), {"PARAFAB_TOKEN_FILE=" + token_, "SLURM_PROCID=4", "SLURM_NTASKS=6",
                         "SLURM_NODELIST=localhost,other[1-2]"});
  ChildProcess p({kBin, "node", "--servers", "2", "--workers", "3", "--iface", "lo", "--checkpoint-clocks", "50",
                  "--dry-run", "--", "echo", "hi"},
                 merged(env));
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, Clock::now() + 30s)) << p.output();
  EXPECT_EQ(p.exit_code(), std::optional<int>(2)) << p.output();
  EXPECT_TRUE(contains(p.output(), "--checkpoint-clocks need --checkpoint-dir")) << p.output();
}

}  // namespace
}  // namespace parafab
