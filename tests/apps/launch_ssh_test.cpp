// `parafab launch --hostfile` over a real sshd on 127.0.0.1, and the pieces
// it is made of (hostfile, placement, quoting, the remote wrapper) without one.
//
// The sshd tests install openssh-server and openssh-client when missing
// (scripts/setup-sshd-test; PARAFAB_SSH_NO_INSTALL=1 forbids it), make a host
// key and a client key in a private directory, start `sshd -D` on
// 127.0.0.1:<free port> with its own configuration (root login by key only,
// no PAM, no strict modes), and stop it when the suite ends. They are
// skipped, saying why, when not root or when sshd cannot be installed or
// started. Both hostfile lines (127.0.0.1 and localhost) are this machine;
// ssh is told AddressFamily=inet so that localhost is 127.0.0.1.
// Nothing sleeps to synchronize: waits poll for a condition under a deadline.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "apps/ssh_hosts.h"
#include "benchmarks/child_process.h"
#include "tests/common/temp_dir.h"

namespace parafab {
namespace {

using apps::SshHost;
using benchmarks::ChildProcess;
using Clock = ChildProcess::Clock;
using namespace std::chrono_literals;

const std::string kBin = PARAFAB_BIN_PATH;
const std::string kSource = PARAFAB_SOURCE_DIR;
const std::string kTable = "id=0,kind=sparse,width=4,updater=sgd,lr=1";

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------- no sshd

TEST(Hostfile, ParsesHostsPortsUsersSlotsAndComments) {
  const std::vector<SshHost> h = apps::parse_hostfile(
      "# the job's hosts\n"
      "\n"
      "node01 slots=2\n"
      "  alice@node02:2222   # a comment\n"
      "[fe80::1]:23 slots=1\n"
      "10.0.0.7\n",
      "hosts.txt");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].destination, "node01");
  EXPECT_EQ(h[0].address, "node01");
  EXPECT_EQ(h[0].slots, 2u);
  EXPECT_FALSE(h[0].port);
  EXPECT_EQ(h[0].where, "hosts.txt:3");
  EXPECT_EQ(h[1].destination, "alice@node02");
  EXPECT_EQ(h[1].address, "node02");
  EXPECT_EQ(h[1].port, 2222);
  EXPECT_FALSE(h[1].slots);
  EXPECT_EQ(h[2].address, "fe80::1");
  EXPECT_EQ(h[2].port, 23);
  EXPECT_EQ(h[3].destination, "10.0.0.7");
}

TEST(Hostfile, ErrorsNameFileAndLine) {
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("a\nb slot=2\n", "H"); }), "H:2: unknown field 'slot=2'"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("a slots=0\n", "H"); }), "H:1: 'slots=0'"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("a slots=x\n", "H"); }), "H:1: 'slots=x'"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("a:0\n", "H"); }), "H:1: host 'a:0'"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("a:99999\n", "H"); }), "H:1: host 'a:99999'"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("fe80::1:22\n", "H"); }), "in brackets"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("-oProxyCommand=x\n", "H"); }), "H:1:"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("a\n# x\na\n", "H"); }), "H:3: host 'a' is already listed at H:1"));
  EXPECT_TRUE(contains(error_of([] { apps::parse_hostfile("# nothing\n\n", "H"); }), "H: no host"));
  EXPECT_TRUE(contains(error_of([] { apps::read_hostfile("/nonexistent/hosts"); }), "/nonexistent/hosts"));
}

TEST(Hostfile, RoundRobinPutsTheSchedulerFirstAndHonoursSlots) {
  const auto hosts = apps::parse_hostfile("a\nb\nc\n", "H");
  EXPECT_EQ(apps::place_round_robin(hosts, 7, "H"), (std::vector<size_t>{0, 1, 2, 0, 1, 2, 0}));
  const auto capped = apps::parse_hostfile("a slots=1\nb slots=3\n", "H");
  EXPECT_EQ(apps::place_round_robin(capped, 4, "H"), (std::vector<size_t>{0, 1, 1, 1}));
  EXPECT_TRUE(contains(error_of([&] { apps::place_round_robin(capped, 5, "H"); }),
                       "H: 4 slots on 2 hosts, but the job has 5 processes"));
  // One host without a cap takes what the others cannot.
  const auto mixed = apps::parse_hostfile("a slots=1\nb\n", "H");
  EXPECT_EQ(apps::place_round_robin(mixed, 4, "H"), (std::vector<size_t>{0, 1, 1, 1}));
}

TEST(SshCommand, QuotesAndOrdersTheArguments) {
  EXPECT_EQ(apps::shell_quote("plain/path-1.2:x=y"), "plain/path-1.2:x=y");
  EXPECT_EQ(apps::shell_quote(""), "''");
  EXPECT_EQ(apps::shell_quote("it's a $HOME"), "'it'\\''s a $HOME'");
  const auto hosts = apps::parse_hostfile("u@h1\nh2:2200\n", "H");
  apps::SshOptions o;
  o.port = 2222;
  o.options = {"IdentityFile=/k"};
  EXPECT_EQ(apps::ssh_argv(hosts[0], o, "CMD"),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-T", "-x", "-p", "2222", "-o", "IdentityFile=/k",
                                      "u@h1", "CMD"}));
  EXPECT_EQ(apps::ssh_argv(hosts[1], o, "CMD")[6], "2200");  // the host's own port wins
}

// Runs `sh -c REMOTE_COMMAND` here as the remote login shell would, with its
// stdin a pipe this test holds (as ssh's channel would be).
struct Wrapped {
  pid_t pid = -1;
  int stdin_w = -1;
  int out_r = -1;
  std::string out;

  explicit Wrapped(const std::string& command) {
    int in[2], o[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(o), 0);
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(o[1], 1);
      dup2(o[1], 2);
      for (int fd : {in[0], in[1], o[0], o[1]}) close(fd);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(o[1]);
    stdin_w = in[1];
    out_r = o[0];
  }
  ~Wrapped() {
    if (stdin_w >= 0) close(stdin_w);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out_r >= 0) close(out_r);
  }
  // Reads output until `needle` appears or the deadline passes.
  bool read_until(const std::string& needle, Clock::time_point deadline) {
    while (!contains(out, needle) && Clock::now() < deadline) {
      pollfd p{out_r, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(out_r, buf, sizeof buf);
        if (n <= 0) return contains(out, needle);
        out.append(buf, static_cast<size_t>(n));
      }
    }
    return contains(out, needle);
  }
  // The wrapper's exit status, or -1 when it did not end by the deadline.
  int wait_exit(Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      (void)poll(nullptr, 0, 10);
    }
    return -1;
  }
};

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

TEST(RemoteWrapper, RunsInTheDirectoryWithTheEnvironmentAndReturnsTheStatus) {
  testing::TempDir dir;
  Wrapped w(apps::remote_command(dir.path().string(), 1, {"PARAFAB_X=a b'c"},
                                 {"sh", "-c", "echo \"$PARAFAB_X in $(pwd)\"; exit 7"}));
  ASSERT_TRUE(w.read_until("a b'c in " + dir.path().string(), Clock::now() + 10s)) << w.out;
  EXPECT_EQ(w.wait_exit(Clock::now() + 10s), 7) << w.out;
}

TEST(RemoteWrapper, AMissingDirectoryExits126) {
  Wrapped w(apps::remote_command("/nonexistent/dir", 1, {}, {"true"}));
  EXPECT_EQ(w.wait_exit(Clock::now() + 10s), 126);
  w.read_until("cannot change to directory /nonexistent/dir", Clock::now() + 5s);
  EXPECT_TRUE(contains(w.out, "cannot change to directory /nonexistent/dir")) << w.out;
}

TEST(RemoteWrapper, EofOnStdinEndsTheCommandAndWhatItStarted) {
  // The command ignores SIGTERM, and so does the child it starts: both must
  // go (SIGKILL to the group after the grace).
  Wrapped w(apps::remote_command("/", 1, {}, {"sh", "-c", "trap '' TERM; sleep 300 & echo child=$!; wait"}));
  ASSERT_TRUE(w.read_until("\n", Clock::now() + 10s)) << w.out;
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(w.out, r, std::regex(R"(child=(\d+))"));
    return r;
  }();
  ASSERT_FALSE(m.empty()) << w.out;
  const pid_t child = static_cast<pid_t>(std::stol(m[1]));
  EXPECT_TRUE(alive(child));
  close(w.stdin_w);
  w.stdin_w = -1;
  EXPECT_NE(w.wait_exit(Clock::now() + 20s), -1) << "the wrapper did not end after EOF\n" << w.out;
  const auto deadline = Clock::now() + 10s;
  while (alive(child) && Clock::now() < deadline) (void)poll(nullptr, 0, 10);
  EXPECT_FALSE(alive(child)) << "pid " << child << " outlived its session";
}

struct LaunchRun {
  int status = -1;
  bool finished = false;
  std::string out;
};

LaunchRun run_parafab(std::vector<std::string> args, std::chrono::seconds limit) {
  args.insert(args.begin(), kBin);
  ChildProcess p(args, {"FI_TCP_IFACE=lo"});
  LaunchRun r;
  r.finished = benchmarks::wait_for_exit({&p}, Clock::now() + limit);
  r.status = p.exit_code().value_or(-1);
  r.out = p.output();
  return r;
}

TEST(LaunchHostfile, BadFlagsAndHostfilesExitTwo) {
  testing::TempDir dir;
  LaunchRun r = run_parafab({"launch", "--ssh-port", "22", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--ssh-port needs --hostfile")) << r.out;
  const std::string hosts = dir.file("hosts");
  std::ofstream(hosts) << "a\nb slots=two\n";
  r = run_parafab({"launch", "--hostfile", hosts, "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, hosts + ":2: 'slots=two'")) << r.out;
  std::ofstream(hosts) << "a slots=1\nb slots=1\n";
  r = run_parafab({"launch", "--hostfile", hosts, "--servers", "1", "--workers", "1", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "2 slots on 2 hosts, but the job has 3 processes")) << r.out;
  r = run_parafab({"launch", "--hostfile", hosts, "--env", "PARAFAB_SURELY_UNSET_X", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--env PARAFAB_SURELY_UNSET_X")) << r.out;
  r = run_parafab({"launch", "--hostfile", hosts, "--server-rejoin-timeout", "30", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--server-rejoin-timeout needs --checkpoint-dir")) << r.out;
  r = run_parafab({"launch", "--hostfile", hosts, "--restart-failed", "1", "--", "true"}, 30s);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--restart-failed needs --checkpoint-dir")) << r.out;
}

// ---------------------------------------------------------------- real sshd

uint16_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

bool accepts(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

// Runs a set-up command; empty when it exited 0, else its output.
std::string setup_step(std::vector<std::string> argv, std::chrono::seconds limit) {
  ChildProcess p(std::move(argv), {"DEBIAN_FRONTEND=noninteractive"});
  const bool done = benchmarks::wait_for_exit({&p}, Clock::now() + limit);
  if (done && p.exit_code() == 0) return {};
  return p.command() + ": " + p.describe_end() + "\n" + p.output();
}

class SshLaunch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = start_sshd();
    if (!skip_.empty()) {
      sshd_.reset();
      dir_.reset();
    }
  }
  static void TearDownTestSuite() {
    sshd_.reset();  // SIGKILL and reap: the daemon stops in every case
    dir_.reset();
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // Empty when sshd runs; else why the tests are skipped.
  static std::string start_sshd() {
    if (geteuid() != 0) return "not root: this test starts an sshd that logs in as root (run it as root)";
    const bool have = std::filesystem::exists("/usr/sbin/sshd") && std::filesystem::exists("/usr/bin/ssh") &&
                      std::filesystem::exists("/usr/bin/ssh-keygen");
    if (!have) {
      const char* no = std::getenv("PARAFAB_SSH_NO_INSTALL");
      if (no != nullptr && std::string(no) == "1")
        return "PARAFAB_SSH_NO_INSTALL=1 and sshd or ssh is missing (scripts/setup-sshd-test installs them)";
      if (std::string e = setup_step({kSource + "/scripts/setup-sshd-test"}, 180s); !e.empty())
        return "cannot install openssh-server/openssh-client: " + e;
    }
    dir_ = std::make_unique<testing::TempDir>();
    const std::string d = dir_->path().string();
    for (const char* key : {"host_key", "client_key"}) {
      if (std::string e = setup_step({"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d + "/" + key}, 60s);
          !e.empty())
        return "ssh-keygen failed: " + e;
    }
    std::filesystem::copy_file(d + "/client_key.pub", d + "/authorized_keys");
    std::error_code ec;
    std::filesystem::create_directories("/run/sshd", ec);  // sshd's privilege separation directory
    port_ = free_port();
    if (port_ == 0) return "no free port on 127.0.0.1";
    std::ofstream(d + "/sshd_config") << "Port " << port_ << "\nListenAddress 127.0.0.1\nHostKey " << d
                                      << "/host_key\nAuthorizedKeysFile " << d
                                      << "/authorized_keys\nPermitRootLogin prohibit-password\n"
                                         "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                                         "StrictModes no\nPidFile "
                                      << d << "/sshd.pid\nLogLevel VERBOSE\n";
    sshd_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/usr/sbin/sshd", "-D", "-e", "-f", d + "/sshd_config"}, std::vector<std::string>{});
    const auto deadline = Clock::now() + 20s;
    while (!accepts(port_) && Clock::now() < deadline) {
      if (sshd_->try_reap()) break;
      sshd_->pump();
      (void)poll(nullptr, 0, 20);
    }
    sshd_->pump();
    if (!accepts(port_)) return "sshd did not start on 127.0.0.1:" + std::to_string(port_) + ": " + sshd_->output();
    return {};
  }

  // launch --hostfile against the test's sshd; `extra` before the --.
  LaunchRun launch(std::vector<std::string> extra, std::vector<std::string> command, std::chrono::seconds limit) {
    const std::string d = dir_->path().string();
    std::ofstream(d + "/hosts") << "# this machine twice\n127.0.0.1\nlocalhost  # 127.0.0.1 as well\n";
    std::vector<std::string> args = {"launch",
                                     "--hostfile",
                                     d + "/hosts",
                                     "--ssh-port",
                                     std::to_string(port_),
                                     "--ssh-option",
                                     "IdentityFile=" + d + "/client_key",
                                     "--ssh-option",
                                     "StrictHostKeyChecking=no",
                                     "--ssh-option",
                                     "UserKnownHostsFile=/dev/null",
                                     "--ssh-option",
                                     "AddressFamily=inet",
                                     "--ssh-option",
                                     "LogLevel=ERROR",
                                     "--port",
                                     std::to_string(free_port()),
                                     "--job-dir",
                                     job_dir()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("--");
    args.insert(args.end(), command.begin(), command.end());
    return run_parafab(args, limit);
  }

  static std::string job_dir() { return dir_->path().string() + "/jobs"; }

  // Processes (other than this one) whose command line or environment names
  // the job directory: the remote wrappers, parafab node and what it became.
  static std::vector<std::string> job_processes() {
    std::vector<std::string> found;
    const std::string needle = job_dir();
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string pid = entry.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(getpid())) continue;
      for (const char* what : {"cmdline", "environ"}) {
        std::ifstream in(entry.path() / what, std::ios::binary);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (contains(text, needle) && alive(std::stoi(pid))) {
          std::ifstream c(entry.path() / "cmdline", std::ios::binary);
          std::string cmd((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
          std::replace(cmd.begin(), cmd.end(), '\0', ' ');
          found.push_back(pid + ": " + cmd.substr(0, 300));
          break;
        }
      }
    }
    return found;
  }

  // Every remote process of the job ends (bounded wait), and its token
  // directory is gone.
  static void expect_nothing_left(const std::string& out) {
    const auto deadline = Clock::now() + 20s;
    std::vector<std::string> left = job_processes();
    while (!left.empty() && Clock::now() < deadline) {
      (void)poll(nullptr, 0, 50);
      left = job_processes();
    }
    std::string list;
    for (const std::string& l : left) list += "\n  " + l;
    EXPECT_TRUE(left.empty()) << "processes of the job still running:" << list << "\n" << out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(job_dir(), ec)) {
      ADD_FAILURE() << "job directory left behind: " << e.path();
    }
  }

  static inline std::string skip_;
  static inline uint16_t port_ = 0;
  static inline std::unique_ptr<testing::TempDir> dir_;
  static inline std::unique_ptr<ChildProcess> sshd_;
};

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> got;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) got.push_back(line);
  }
  return got;
}

TEST_F(SshLaunch, ServersAndWorkersOnTwoHostsCheckEveryValue) {
  const LaunchRun r = launch({"--servers", "1", "--workers", "2", "--table", kTable, "--timeout", "120"},
                       {kBin, "worker", "--keys", "10000"}, 150s);
  ASSERT_TRUE(r.finished) << r.out;
  ASSERT_EQ(r.status, 0) << r.out;
  // Round-robin: scheduler and worker 0 on the first line's host, server 0 and worker 1 on the second's.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(launch: started scheduler on 127\.0\.0\.1 \(pid \d+\), )"
                                                  R"(server 0 on localhost \(pid \d+\), worker 0 on 127\.0\.0\.1 )"
                                                  R"(\(pid \d+\), worker 1 on localhost \(pid \d+\))")))
      << r.out;
  for (int j = 0; j < 2; ++j) {
    int matching = 0;
    for (const std::string& l : lines_starting(r.out, "[worker " + std::to_string(j) + "] ")) {
      matching += contains(l, "worker " + std::to_string(j) + ": ") && contains(l, "every value matches") ? 1 : 0;
    }
    EXPECT_EQ(matching, 1) << "worker " << j << "\n" << r.out;
  }
  EXPECT_FALSE(lines_starting(r.out, "[scheduler] ").empty()) << r.out;
  EXPECT_FALSE(lines_starting(r.out, "[server 0] ").empty()) << r.out;
  EXPECT_TRUE(contains(r.out, "launch: job done")) << r.out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    EXPECT_TRUE(line.rfind("[", 0) == 0 || line.rfind("launch: ", 0) == 0) << "unprefixed line: " << line;
  }
  expect_nothing_left(r.out);
}

TEST_F(SshLaunch, AFailingWorkerNamesItsHostAndRoleAndNothingIsLeft) {
  const LaunchRun r = launch({"--servers", "1", "--workers", "2", "--grace", "2"}, {"false"}, 90s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(launch: worker \d on (127\.0\.0\.1|localhost) \(pid \d+\) failed: exit status 1\n)")))
      << r.out;
  expect_nothing_left(r.out);
}

TEST_F(SshLaunch, SigintStopsTheRemoteProcesses) {
  const std::string d = dir_->path().string();
  std::ofstream(d + "/hosts") << "127.0.0.1\nlocalhost\n";
  // Workers that ignore SIGTERM, and say when they run: SIGKILL after the grace.
  ChildProcess p({kBin, "launch", "--hostfile", d + "/hosts", "--ssh-port", std::to_string(port_), "--ssh-option",
                  "IdentityFile=" + d + "/client_key", "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option",
                  "UserKnownHostsFile=/dev/null", "--ssh-option", "AddressFamily=inet", "--ssh-option",
                  "LogLevel=ERROR", "--port", std::to_string(free_port()), "--job-dir", job_dir(), "--grace", "2",
                  "--servers", "1", "--workers", "2", "--", "sh", "-c", "trap '' TERM; echo running; sleep 120"},
                 {"FI_TCP_IFACE=lo"});
  const auto t0 = Clock::now();
  auto running = [&] {
    return static_cast<int>(contains(p.output(), "[worker 0] running\n")) +
           static_cast<int>(contains(p.output(), "[worker 1] running\n"));
  };
  while (running() < 2 && p.output_fd() >= 0 && Clock::now() < t0 + 60s) {
    pollfd fd{p.output_fd(), POLLIN, 0};
    (void)poll(&fd, 1, 1000);
    p.pump();
  }
  ASSERT_EQ(running(), 2) << p.output();
  ASSERT_FALSE(job_processes().empty()) << p.output();
  const auto sent = Clock::now();
  ASSERT_EQ(kill(p.pid(), SIGINT), 0);
  ASSERT_TRUE(benchmarks::wait_for_exit({&p}, sent + 30s)) << p.output();
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  EXPECT_LT(took, 15) << p.output();
  EXPECT_GE(took, 1.5) << "the workers ignore SIGTERM: only SIGKILL, 2 s later, ends them\n" << p.output();
  EXPECT_EQ(p.exit_code(), 128 + SIGINT) << p.output();
  EXPECT_TRUE(contains(p.output(), "launch: got SIGINT")) << p.output();
  expect_nothing_left(p.output());
}

TEST_F(SshLaunch, AHostWithoutSshdIsNamed) {
  const std::string d = dir_->path().string();
  const uint16_t closed = free_port();
  std::ofstream(d + "/dead-hosts") << "127.0.0.1:" << closed << "\n";
  const LaunchRun r = run_parafab({"launch", "--hostfile", d + "/dead-hosts", "--ssh-option", "AddressFamily=inet",
                             "--ssh-option", "ConnectTimeout=10", "--job-dir", job_dir(), "--grace", "1", "--", "true"},
                            60s);
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(launch: \w+( \d)? on 127\.0\.0\.1 \(pid \d+\) failed: exit status 255 \(ssh failed)")))
      << r.out;
}

}  // namespace
}  // namespace parafab
