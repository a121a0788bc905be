// `parafab launch`: one whole job on this host. Starts the scheduler and S
// servers (this binary's `scheduler` and `server` commands) and W copies of
// the user's command as the workers, all on 127.0.0.1, with the scheduler's
// address and the path of a fresh job token in their environment; forwards
// their output with "[role rank] " prefixes, turns Ctrl-C into SIGTERM for
// all of them, and exits 0 only when every process did. Each worker gets
// PARAFAB_THREADS, its share of the CPUs (apps/host_threads.h).
//
// With --hostfile, the same job over ssh: each process is
// `ssh HOST ... parafab node -- COMMAND` on the host the round-robin
// placement gives it (ssh_hosts.h), with PARAFAB_ROLE and PARAFAB_RANK set,
// so `parafab node` becomes the scheduler (listening on the fixed --port),
// a server or the worker command, and servers and workers wait for the
// scheduler's port themselves (processes started over ssh come up in no
// set order, and no port file can be read back). The job token goes to a
// 0600 file in a fresh directory under --job-dir, which must be on storage
// every host sees. Each ssh client's stdin is one pipe that launch holds
// open; closing it (to stop the job, or launch dying) ends every remote
// process (ssh_hosts.cpp explains the remote wrapper).
//
// Launch itself opens no fabric: children are forked from a process that
// has registered no memory (DESIGN.md).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

#include "apps/cluster_flags.h"
#include "apps/commands.h"
#include "apps/flag_checks.h"
#include "apps/job_dir.h"
#include "benchmarks/child_process.h"
#include "apps/process_group.h"
#include "apps/signal_pipe.h"
#include "apps/ssh_hosts.h"
#include "apps/table_spec.h"
#include "ps/checkpoint.h"
#include "ps/consistency.h"
#include "ps/job_token.h"

namespace parafab::apps {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct LaunchFlags {
  int servers = 1;
  int workers = 1;
  std::string provider;  // else $PARAFAB_PROVIDER, else tcp;ofi_rxm
  std::string consistency = "bsp";
  std::vector<std::string> tables;
  double join_timeout_s = 60;
  double timeout_s = 0;  // whole job; 0: none
  double grace_s = 5;
  double heartbeat_timeout_s = 10;
  std::string on_worker_failure = "fail";
  CheckpointFlags checkpoints;  // the servers'
  int restart_failed = 0;  // whole-job restarts from the checkpoint set (or, with rejoin, of a server)
  double server_rejoin_timeout_s = 0;
  std::vector<std::string> command;
  // --hostfile mode only (ssh):
  std::string hostfile;
  int ssh_port = 0;  // 0: ssh's default (or the host's :PORT)
  std::vector<std::string> ssh_options;
  std::string ssh_program = "ssh";
  std::string remote_bin;  // else this binary's absolute path
  std::string job_dir;     // else ./.parafab
  int port = 9737;         // the scheduler's, fixed
  bool port_given = false;
  std::string bind;   // else the first host when it is an IP address, else 0.0.0.0
  std::string iface;  // the fabric's interface on every host (parafab node --iface)
  std::vector<std::string> env;  // NAME or NAME=VALUE, for the remote processes
};

extern "C" char** environ;

bool is_ip_address(const std::string& text) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

void say(const std::string& text) { std::fprintf(stderr, "launch: %s\n", text.c_str()); }

milliseconds seconds_ms(double s) { return milliseconds(static_cast<int64_t>(s * 1000)); }

void validate(LaunchFlags& f) {
  if (f.servers < 1)
    throw std::invalid_argument(fmt::format("--servers {}: a job needs at least one server", f.servers));
  if (f.workers < 1)
    throw std::invalid_argument(fmt::format("--workers {}: a job needs at least one worker", f.workers));
  if (f.command.empty()) {
    throw std::invalid_argument(
        "no worker command: give it after --, e.g. parafab launch --servers 1 --workers 2 -- parafab worker");
  }
  if (f.join_timeout_s <= 0)
    throw std::invalid_argument(fmt::format("--join-timeout {}: must be > 0", f.join_timeout_s));
  if (f.timeout_s < 0) throw std::invalid_argument(fmt::format("--timeout {}: must be >= 0 (0: none)", f.timeout_s));
  if (f.grace_s < 0) throw std::invalid_argument(fmt::format("--grace {}: must be >= 0", f.grace_s));
  (void)ps::ConsistencyModel::parse(f.consistency);
  for (const std::string& spec : f.tables) (void)parse_table_spec(spec);
  f.checkpoints.validate();
  if (f.server_rejoin_timeout_s < 0) {
    throw std::invalid_argument(fmt::format("--server-rejoin-timeout {}: must be >= 0", f.server_rejoin_timeout_s));
  }
  if (f.server_rejoin_timeout_s > 0 && f.checkpoints.dir.empty()) {
    throw std::invalid_argument("--server-rejoin-timeout needs --checkpoint-dir (a server rejoins from its checkpoint)");
  }
  if (f.restart_failed > 0 && f.checkpoints.dir.empty()) {
    throw std::invalid_argument("--restart-failed needs --checkpoint-dir (the job restarts from its checkpoints)");
  }
  if (f.hostfile.empty()) {
    const std::pair<bool, const char*> ssh_only[] = {
        {f.ssh_port != 0, "--ssh-port"}, {!f.ssh_options.empty(), "--ssh-option"}, {f.ssh_program != "ssh", "--ssh"},
        {!f.remote_bin.empty(), "--remote-bin"}, {!f.job_dir.empty(), "--job-dir"}, {f.port_given, "--port"},
        {!f.bind.empty(), "--bind"}, {!f.iface.empty(), "--iface"}, {!f.env.empty(), "--env"}};
    for (const auto& [given, name] : ssh_only) {
      if (given) throw std::invalid_argument(fmt::format("{} needs --hostfile (it is for jobs started over ssh)", name));
    }
  } else {
    for (std::string& e : f.env) {
      const size_t eq = e.find('=');
      const std::string name = e.substr(0, eq);
      if (name.empty() || name.find_first_of(" \t'\"$") != std::string::npos) {
        throw std::invalid_argument(fmt::format("--env '{}': expected NAME or NAME=VALUE", e));
      }
      if (eq == std::string::npos) {
        const char* v = std::getenv(name.c_str());
        if (v == nullptr) throw std::invalid_argument(fmt::format("--env {}: {} is not set here", name, name));
        e = name + "=" + v;
      }
    }
  }
  if (f.provider.empty()) {
    const char* v = std::getenv("PARAFAB_PROVIDER");
    f.provider = v != nullptr && *v != '\0' ? v : "tcp;ofi_rxm";
  }
}

std::string name_of(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(sig);
  }
}

// The job token for a job over ssh: a fresh directory (mkdtemp, 0700) under
// `base`, which every host must see at the same path, holding the token in
// a 0600 file. Removed with its contents when the object goes.
class SharedJobDir {
 public:
  SharedJobDir(const std::string& base, const ps::JobToken& token) {
    std::error_code ec;
    if (!std::filesystem::exists(base, ec)) {
      std::filesystem::create_directories(base, ec);
      if (ec) throw std::runtime_error(fmt::format("--job-dir {}: cannot make it: {}", base, ec.message()));
      ::chmod(base.c_str(), 0700);
    }
    std::string tmpl = base + "/job-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error(fmt::format("--job-dir {}: cannot make a job directory in it: {}", base,
                                           std::strerror(errno)));
    }
    path_ = tmpl;
    const std::string file = token_file();
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && fchmod(fd, 0600) == 0;
    const std::string text = token.secret() + "\n";
    ok = ok && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const int err = errno;
    if (fd >= 0) ok = close(fd) == 0 && ok;
    if (!ok) {
      std::filesystem::remove_all(path_, ec);
      throw std::runtime_error(fmt::format("cannot write the job token to {}: {}", file, std::strerror(err)));
    }
  }
  ~SharedJobDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  SharedJobDir(const SharedJobDir&) = delete;
  SharedJobDir& operator=(const SharedJobDir&) = delete;

  const std::string& path() const { return path_; }
  std::string token_file() const { return path_ + "/token"; }

 private:
  std::string path_;
};

// The pipe every ssh client reads as its stdin. Launch never writes to it;
// closing the write end (stop, or launch's death) gives every ssh client
// EOF, which it passes to its remote side. The read end is inherited by the
// children (not close-on-exec) and closed here once they have started.
class SessionPipe {
 public:
  SessionPipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe2: {}", std::strerror(errno)));
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    fcntl(read_fd_, F_SETFD, 0);
  }
  ~SessionPipe() {
    close_read();
    close_write();
  }
  SessionPipe(const SessionPipe&) = delete;
  SessionPipe& operator=(const SessionPipe&) = delete;

  int read_fd() const { return read_fd_; }
  void close_read() {
    if (read_fd_ >= 0) close(read_fd_);
    read_fd_ = -1;
  }
  // True when it was open.
  bool close_write() {
    if (write_fd_ < 0) return false;
    close(write_fd_);
    write_fd_ = -1;
    return true;
  }

 private:
  int read_fd_ = -1, write_fd_ = -1;
};

class Launch {
 public:
  explicit Launch(LaunchFlags f) : f_(std::move(f)), signals_({SIGINT, SIGTERM, SIGCHLD}), group_(signals_.fd()) {}

  int run() {
    // --restart-failed: when a server or the scheduler fails (or a worker,
    // under --on-worker-failure fail), stop the job and start it again,
    // every process, from the newest complete checkpoint set; the workers
    // find it in PARAFAB_RESUME_DIR (train --resume). Over ssh the same,
    // on the same hosts (the set is on storage every host sees).
    bool resume = false;
    for (int restart = 0;; ++restart) {
      restartable_ = false;
      const int code = f_.hostfile.empty() ? run_local(resume) : run_ssh(resume);
      if (code == 0 || !restartable_ || restart >= f_.restart_failed) {
        if (restartable_ && f_.restart_failed > 0) say(fmt::format("gave up after {} restarts (--restart-failed)", restart));
        return code;
      }
      try {
        const ps::CheckpointSet set = ps::find_checkpoint_set(f_.checkpoints.dir, static_cast<uint32_t>(f_.servers));
        for (const std::string& why : set.refused) say("passed over " + why);
        say(fmt::format("restart {} of {}: the whole job again from the checkpoint set in {} (clock {}); what the "
                        "servers learned after it is lost",
                        restart + 1, f_.restart_failed, f_.checkpoints.dir, set.clock));
      } catch (const ps::CheckpointError& e) {
        say(fmt::format("cannot restart: {}", e.what()));
        return code;
      }
      resume = true;
    }
  }

 private:
  std::string who(size_t i) const {
    const ProcessGroup::Child& c = group_.child(i);
    if (i < host_of_.size()) return fmt::format("{} on {} (pid {})", c.label, host_of_[i], c.pid);
    return fmt::format("{} (pid {})", c.label, c.pid);
  }

  // How child i ended; for an ssh client, what its exit status means.
  std::string end_of(size_t i) const {
    const ProcessGroup::Child& c = group_.child(i);
    if (i < host_of_.size() && c.exited && WIFEXITED(c.wait_status)) return describe_ssh_exit(WEXITSTATUS(c.wait_status));
    return c.describe_end();
  }

  // The processes still running, for a message.
  std::string still_running() const {
    std::string s;
    for (size_t i = 0; i < group_.size(); ++i) {
      if (!group_.child(i).exited) s += (s.empty() ? "" : ", ") + who(i);
    }
    return s;
  }

  int run_ssh(bool resume) {
    workers_.clear();
    lost_workers_ = 0;
    server_child_.clear();
    restart_server_ = nullptr;
    const std::vector<SshHost> hosts = read_hostfile(f_.hostfile);
    const size_t processes = 1 + static_cast<size_t>(f_.servers) + static_cast<size_t>(f_.workers);
    const std::vector<size_t> at = place_round_robin(hosts, processes, f_.hostfile);
    std::map<std::string, int> workers_on;  // by host destination
    for (size_t g = 1 + static_cast<size_t>(f_.servers); g < processes; ++g) ++workers_on[hosts[at[g]].destination];
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    if (ec) throw std::runtime_error("cannot read the current directory: " + ec.message());
    const std::string job_base = f_.job_dir.empty() ? cwd + "/.parafab" : std::filesystem::absolute(f_.job_dir).string();
    if (!shared_) shared_.emplace(job_base, token_);  // a restart keeps the job's token
    const SshHost& first = hosts[0];
    const std::string bind = !f_.bind.empty() ? f_.bind : is_ip_address(first.address) ? first.address : "0.0.0.0";
    const std::string scheduler = format_host_port(first.address, static_cast<uint16_t>(f_.port));
    const std::string remote_bin = f_.remote_bin.empty() ? benchmarks::self_executable() : f_.remote_bin;
    const ps::ConsistencyModel consistency = ps::ConsistencyModel::parse(f_.consistency);
    say(fmt::format("{} servers ({}), {} workers on {} host{} from {}, provider {}, scheduler {} (bind {}), job token "
                    "{} in {} (must be shared with every host), join timeout {} s, timeout {}",
                    f_.servers, consistency.to_string(), f_.workers, hosts.size(), hosts.size() == 1 ? "" : "s",
                    f_.hostfile, f_.provider, scheduler, bind, token_.fingerprint(), shared_->path(), f_.join_timeout_s,
                    f_.timeout_s > 0 ? fmt::format("{} s", f_.timeout_s) : "none"));

    // sshd starts the remote command with a fresh environment: the job's
    // variables, libfabric's (FI_*, so every process configures the fabric
    // alike) and --env travel on its command line.
    std::vector<std::string> env = {"PARAFAB_TOKEN_FILE=" + shared_->token_file(), "PARAFAB_PROVIDER=" + f_.provider,
                                    fmt::format("PARAFAB_NUM_SERVERS={}", f_.servers),
                                    fmt::format("PARAFAB_NUM_WORKERS={}", f_.workers),
                                    "PARAFAB_SCHEDULER=" + scheduler};
    for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
      if (std::strncmp(*p, "FI_", 3) == 0) env.emplace_back(*p);
    }
    env.insert(env.end(), f_.env.begin(), f_.env.end());
    std::vector<std::string> node = {remote_bin,
                                     "node",
                                     "--launcher",
                                     "parafab",
                                     "--servers",
                                     std::to_string(f_.servers),
                                     "--workers",
                                     std::to_string(f_.workers),
                                     "--port",
                                     std::to_string(f_.port),
                                     "--bind",
                                     bind,
                                     "--consistency",
                                     f_.consistency,
                                     "--join-timeout",
                                     fmt::format("{}", f_.join_timeout_s),
                                     "--heartbeat-timeout",
                                     fmt::format("{}", f_.heartbeat_timeout_s),
                                     "--on-worker-failure",
                                     f_.on_worker_failure};
    if (!f_.iface.empty()) node.insert(node.end(), {"--iface", f_.iface});
    for (const std::string& t : f_.tables) node.insert(node.end(), {"--table", t});
    // The servers' checkpoints go to one directory that every host sees at
    // the same path (as the job token's); train --resume reads it.
    for (const std::string& a : f_.checkpoints.server_args()) node.push_back(a);
    if (f_.server_rejoin_timeout_s > 0) {
      node.insert(node.end(), {"--server-rejoin-timeout", fmt::format("{}", f_.server_rejoin_timeout_s)});
    }
    const size_t node_options_end = node.size();  // where a restarted server's --recover goes
    node.push_back("--");
    node.insert(node.end(), f_.command.begin(), f_.command.end());

    SshOptions ssh;
    ssh.program = f_.ssh_program;
    if (f_.ssh_port != 0) ssh.port = static_cast<uint16_t>(f_.ssh_port);
    ssh.options = f_.ssh_options;
    session_.emplace();  // a restart's processes get a session of their own
    // ProcessGroup gives every child /dev/null as stdin; a local shell moves
    // the inherited read end of the session pipe there before exec'ing ssh.
    const std::string fd = std::to_string(session_->read_fd());
    const std::string to_stdin = "exec 0<&" + fd + " " + fd + "<&-; exec \"$@\"";

    // Process g of the job, on host h; `recover`: a server started again
    // (parafab node --recover), which rejoins under its rank.
    auto start = [=, this](size_t g, const SshHost& h, bool recover) {
      const bool is_scheduler = g == 0, is_server = g >= 1 && g <= static_cast<size_t>(f_.servers);
      const size_t rank = is_scheduler ? 0 : is_server ? g - 1 : g - 1 - static_cast<size_t>(f_.servers);
      const std::string role = is_scheduler ? "scheduler" : is_server ? "server" : "worker";
      std::vector<std::string> e = env;
      e.push_back("PARAFAB_ROLE=" + role);
      e.push_back(fmt::format("PARAFAB_RANK={}", rank));
      if (resume && !is_scheduler && !is_server) e.push_back("PARAFAB_RESUME_DIR=" + f_.checkpoints.dir);
      // How many workers share the host: parafab node gives each its share
      // of that host's CPUs (PARAFAB_THREADS).
      if (!is_scheduler && !is_server) e.push_back(fmt::format("PARAFAB_LOCAL_WORKERS={}", workers_on.at(h.destination)));
      std::vector<std::string> n = node;
      if (recover) n.insert(n.begin() + static_cast<std::ptrdiff_t>(node_options_end), "--recover");
      std::vector<std::string> argv = {"/bin/sh", "-c", to_stdin, "parafab-ssh"};
      const std::vector<std::string> s = ssh_argv(h, ssh, remote_command(cwd, f_.grace_s, e, n));
      argv.insert(argv.end(), s.begin(), s.end());
      host_of_.push_back(h.destination);
      const size_t i = group_.start(is_scheduler ? role : fmt::format("{} {}", role, rank), argv, {});
      if (is_server) server_child_[i] = static_cast<int>(rank);
      if (!is_scheduler && !is_server) workers_.push_back(i);
    };
    const size_t first_child = group_.size();  // after a restart, the children of earlier attempts come first
    for (size_t g = 0; g < processes; ++g) start(g, hosts[at[g]], false);
    // A server started again later needs the session pipe's read end (its
    // ssh's stdin); else nothing more is started: close ours now.
    if (f_.server_rejoin_timeout_s > 0 && f_.restart_failed > 0) {
      restart_server_ = [start, hosts, at](int rank) {
        const size_t g = 1 + static_cast<size_t>(rank);
        start(g, hosts[at[g]], true);
      };
    } else {
      session_->close_read();
    }
    std::string started;
    for (size_t i = first_child; i < group_.size(); ++i) started += (i == first_child ? "" : ", ") + who(i);
    say(fmt::format("started {}", started));
    return supervise();
  }

  int run_local(bool resume) {
    if (!dir_) dir_.emplace(token_);
    const JobDir& dir = *dir_;
    std::error_code ec;
    std::filesystem::remove(dir.port_file(), ec);  // a restart's scheduler writes a new one
    workers_.clear();
    lost_workers_ = 0;
    const ps::ConsistencyModel consistency = ps::ConsistencyModel::parse(f_.consistency);
    say(fmt::format("{} servers ({}), {} workers, provider {}, job token {} in {}, join timeout {} s, timeout {}",
                    f_.servers, consistency.to_string(), f_.workers, f_.provider, token_.fingerprint(), dir.path(),
                    f_.join_timeout_s, f_.timeout_s > 0 ? fmt::format("{} s", f_.timeout_s) : "none"));
    const std::string self = benchmarks::self_executable();
    const std::string join = fmt::format("{}", f_.join_timeout_s);
    std::vector<std::string> env = {"PARAFAB_TOKEN_FILE=" + dir.token_file(), "PARAFAB_PROVIDER=" + f_.provider,
                                    fmt::format("PARAFAB_NUM_SERVERS={}", f_.servers),
                                    fmt::format("PARAFAB_NUM_WORKERS={}", f_.workers)};

    std::vector<std::string> sched = {
        self,     "scheduler", "--servers",   std::to_string(f_.servers), "--workers",      std::to_string(f_.workers),
        "--port", "0",         "--port-file", dir.port_file(),           "--join-timeout", join,
        "--heartbeat-timeout", fmt::format("{}", f_.heartbeat_timeout_s), "--on-worker-failure", f_.on_worker_failure,
        "--server-rejoin-timeout", fmt::format("{}", f_.server_rejoin_timeout_s)};
    for (const std::string& t : f_.tables) {
      sched.push_back("--table");
      sched.push_back(t);
    }
    const size_t scheduler = group_.start("scheduler", sched, with(env, {"PARAFAB_ROLE=scheduler", "PARAFAB_RANK=0"}));
    std::optional<uint16_t> port;
    if (const std::optional<int> code = wait_for_port(scheduler, port)) return *code;
    const std::string address = fmt::format("127.0.0.1:{}", *port);
    say(fmt::format("scheduler (pid {}) listening on {}", group_.child(scheduler).pid, address));
    env.push_back("PARAFAB_SCHEDULER=" + address);

    std::vector<std::string> server_argv = {self, "server", "--consistency", f_.consistency, "--join-timeout", join};
    for (const std::string& a : f_.checkpoints.server_args()) server_argv.push_back(a);
    server_child_.clear();
    // Server i; `recover`: started again, it rejoins under its rank.
    auto start_server = [this, server_argv, env](int i, bool recover) {
      std::vector<std::string> argv = server_argv;
      if (recover) argv.push_back("--recover");
      server_child_[group_.start(fmt::format("server {}", i), argv,
                                 with(env, {"PARAFAB_ROLE=server", fmt::format("PARAFAB_RANK={}", i)}))] = i;
    };
    for (int i = 0; i < f_.servers; ++i) start_server(i, false);
    restart_server_ = [start_server](int rank) { start_server(rank, true); };
    std::vector<std::string> worker_env = env;
    if (resume) worker_env.push_back("PARAFAB_RESUME_DIR=" + f_.checkpoints.dir);
    // The job's join timeout, for a worker command that does not give its
    // own --join-timeout (apps/cluster_flags.cpp reads the variable).
    worker_env.push_back("PARAFAB_JOIN_TIMEOUT=" + join);
    // Every worker on this host: each takes its share of the CPUs, unless
    // the user's environment says otherwise (apps/host_threads.h).
    if (std::getenv(kThreadsEnv) == nullptr) {
      worker_env.push_back(fmt::format("{}={}", kThreadsEnv, cpu_share(f_.workers)));
    }
    for (int j = 0; j < f_.workers; ++j) {
      workers_.push_back(group_.start(fmt::format("worker {}", j), f_.command,
                                      with(worker_env, {"PARAFAB_ROLE=worker", fmt::format("PARAFAB_RANK={}", j)})));
    }
    std::string started;
    for (size_t i = scheduler; i < group_.size(); ++i) started += (i == scheduler ? "" : ", ") + who(i);
    say(fmt::format("started {}", started));
    return supervise();
  }

  static std::vector<std::string> with(std::vector<std::string> env, std::initializer_list<std::string> more) {
    env.insert(env.end(), more);
    return env;
  }

  // The first SIGINT or SIGTERM taken from the signal pipe, or 0.
  int take_interrupt() {
    int got = 0;
    for (const int s : signals_.take()) {
      if ((s == SIGINT || s == SIGTERM) && got == 0) got = s;
    }
    return got;
  }

  // SIGTERM to everything still running, SIGKILL after the grace (or at a
  // second Ctrl-C). Over ssh, the remote processes are stopped first by
  // closing the ssh clients' stdin (their wrappers then send SIGTERM and,
  // after the grace, SIGKILL, and ssh exits with the status); only ssh
  // clients still running kSshMargin after that are signalled here.
  void stop_all() {
    bool hurried = false;
    if (session_ && session_->close_write()) {
      const size_t n = group_.running();
      if (n > 0) {
        say(fmt::format("stopping {} remote process{}: closing their ssh sessions (SIGTERM, then SIGKILL after {} s)",
                        n, n == 1 ? "" : "es", f_.grace_s));
      }
      const auto deadline = Clock::now() + seconds_ms(f_.grace_s) + kSshMargin;
      while (group_.running() > 0 && Clock::now() < deadline) {
        (void)group_.wait(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()) + milliseconds(1));
        if (const int s = take_interrupt()) {
          say(fmt::format("{} again: killing the ssh clients of {}", name_of(s), still_running()));
          hurried = true;
          break;
        }
      }
    }
    const milliseconds grace = hurried ? milliseconds(0) : session_ ? milliseconds(1000) : seconds_ms(f_.grace_s);
    const size_t n = group_.running();
    if (n > 0 && !hurried) {
      say(fmt::format("stopping {} {}process{} (SIGTERM, then SIGKILL after {} s)", n, session_ ? "ssh " : "",
                      n == 1 ? "" : "es", grace.count() / 1000.0));
    }
    group_.stop(grace, [this] {
      if (const int s = take_interrupt()) {
        say(fmt::format("{} again: killing {}", name_of(s), still_running()));
        return true;
      }
      return false;
    });
  }

  int interrupted(int sig) {
    say(fmt::format("got {}", name_of(sig)));
    stop_all();
    return 128 + sig;
  }

  // nullopt once the port is known; else the exit status to return.
  std::optional<int> wait_for_port(size_t scheduler, std::optional<uint16_t>& port) {
    const auto deadline = Clock::now() + seconds_ms(f_.join_timeout_s);
    for (;;) {
      port = dir_->read_port();
      if (port) return std::nullopt;
      if (const int s = take_interrupt()) return interrupted(s);
      const ProcessGroup::Child& c = group_.child(scheduler);
      if (c.exited) {
        say(fmt::format("{} failed before listening: {}; its last output:{}", who(scheduler), c.describe_end(),
                        group_.tail(scheduler)));
        return 1;
      }
      if (Clock::now() >= deadline) {
        say(fmt::format("{} did not write its port file within {} s; its last output:{}", who(scheduler), f_.join_timeout_s,
                        group_.tail(scheduler)));
        stop_all();
        return 1;
      }
      // The scheduler writes the file once listening; polled at 20 ms
      // (its output and its exit wake this sooner).
      (void)group_.wait(milliseconds(20));
    }
  }

  int supervise() {
    const auto started = Clock::now();
    constexpr Clock::time_point kNever = Clock::time_point::max();
    const Clock::time_point job_deadline = f_.timeout_s > 0 ? started + seconds_ms(f_.timeout_s) : kNever;
    Clock::time_point others_deadline = kNever;  // set once every worker has exited 0
    for (;;) {
      const auto next = std::min({Clock::now() + std::chrono::seconds(1), job_deadline, others_deadline});
      const std::vector<size_t> ended =
          group_.wait(std::chrono::duration_cast<milliseconds>(next - Clock::now()) + milliseconds(1));
      bool failed = false;
      for (const size_t i : ended) {
        const ProcessGroup::Child& c = group_.child(i);
        if (c.succeeded()) continue;
        if (f_.on_worker_failure == "continue" && is_worker(i)) {
          ++lost_workers_;
          say(fmt::format("{} failed: {}; the job goes on without it (--on-worker-failure continue)", who(i),
                          end_of(i)));
          continue;
        }
        if (const auto s = server_child_.find(i);
            s != server_child_.end() && f_.server_rejoin_timeout_s > 0 && server_restarts_ < f_.restart_failed) {
          ++server_restarts_;
          say(fmt::format("{} failed: {}; starting it again under its rank from its checkpoint (server restart {} of "
                          "{}); the job goes on",
                          who(i), end_of(i), server_restarts_, f_.restart_failed));
          restart_server_(s->second);
          continue;
        }
        say(fmt::format("{} failed: {}", who(i), end_of(i)));
        failed = true;
        restartable_ = true;  // any process but a worker let go under continue
      }
      if (failed) {
        // A death takes others down within moments (the scheduler stops
        // the job when a worker dies): name every process that has ended,
        // so the first cause is in the log whichever was reaped first.
        const auto settle = Clock::now() + milliseconds(300);
        for (auto now = Clock::now(); now < settle && group_.running() > 0; now = Clock::now()) {
          for (const size_t i : group_.wait(std::chrono::duration_cast<milliseconds>(settle - now) + milliseconds(1))) {
            if (!group_.child(i).succeeded()) say(fmt::format("{} failed: {}", who(i), end_of(i)));
          }
        }
        stop_all();
        return 1;
      }
      if (const int s = take_interrupt()) return interrupted(s);
      if (group_.running() == 0) {
        const int ok_workers = f_.workers - lost_workers_;
        say(fmt::format("job done: the scheduler, {} server{} and {} worker{} exited 0 in {:.1f} s{}", f_.servers,
                        f_.servers == 1 ? "" : "s", ok_workers, ok_workers == 1 ? "" : "s",
                        std::chrono::duration<double>(Clock::now() - started).count(),
                        lost_workers_ > 0 ? fmt::format(" ({} lost, continued without)", lost_workers_) : ""));
        return 0;
      }
      const auto now = Clock::now();
      if (others_deadline == kNever &&
          std::all_of(workers_.begin(), workers_.end(), [&](size_t w) { return group_.child(w).exited; })) {
        others_deadline = now + seconds_ms(f_.join_timeout_s);
      }
      if (now >= others_deadline) {
        say(fmt::format("every worker exited 0, but {} still running {} s later", still_running(),
                        f_.join_timeout_s));
        stop_all();
        return 1;
      }
      if (now >= job_deadline) {
        say(fmt::format("the job ran past --timeout {} s; still running: {}", f_.timeout_s, still_running()));
        stop_all();
        return 1;
      }
    }
  }

  // Over ssh, how long past the grace the ssh clients get to report the
  // remote side's end before they are signalled.
  static constexpr milliseconds kSshMargin{5000};

  bool is_worker(size_t i) const { return std::find(workers_.begin(), workers_.end(), i) != workers_.end(); }

  LaunchFlags f_;
  int lost_workers_ = 0;  // workers that failed under --on-worker-failure continue
  // Starts a dead server again under its rank (--server-rejoin-timeout with
  // --restart-failed): locally, or over ssh on its host.
  std::function<void(int rank)> restart_server_;
  std::map<size_t, int> server_child_;  // child index -> server rank
  int server_restarts_ = 0;
  bool restartable_ = false;  // this run ended with a failed process (--restart-failed may start it again)
  // Destroyed in reverse: the ssh sessions' stdin closes first (the remote
  // processes begin to stop), then the children are killed and reaped
  // (group_) before the token's directory goes, and all before the handlers.
  SignalPipe signals_;
  ps::JobToken token_ = ps::JobToken::generate();
  std::optional<JobDir> dir_;            // local
  std::optional<SharedJobDir> shared_;  // over ssh
  ProcessGroup group_;
  std::vector<size_t> workers_;
  std::vector<std::string> host_of_;  // over ssh: each child's host
  std::optional<SessionPipe> session_;
};

}  // namespace

void add_launch_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<LaunchFlags>();
  CLI::App* cmd = root.add_subcommand(
      "launch",
      "Run a whole job on this host (or over ssh on the hosts of --hostfile): the scheduler, --servers servers and "
      "--workers copies of the command after --");
  cmd->add_option("--servers", f->servers, "Parameter servers to start")->capture_default_str();
  cmd->add_option("--workers", f->workers, "Copies of the worker command to start")->capture_default_str();
  cmd->add_option("--provider", f->provider,
                  "libfabric provider for every node: tcp;ofi_rxm, shm, verbs;ofi_rxm, efa (else $PARAFAB_PROVIDER, "
                  "default tcp;ofi_rxm)");
  cmd->add_option("--consistency", f->consistency, kConsistencyHelp)->capture_default_str();
  cmd->add_option("--table", f->tables,
                  "A table of the job, e.g. id=0,kind=sparse,width=1,updater=adagrad,lr=0.05 (repeatable)")
      // One value per --table: else CLI11 lets the option swallow the "--"
      // and the worker command's own flags become launch's.
      ->allow_extra_args(false);
  cmd->add_option("--join-timeout", f->join_timeout_s,
                  "Seconds for the scheduler to listen and every node to join (the workers get it as "
                  "PARAFAB_JOIN_TIMEOUT); also how long the scheduler and servers may take to exit once every "
                  "worker has")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds the whole job may run (0: no limit)")->capture_default_str();
  cmd->add_option("--heartbeat-timeout", f->heartbeat_timeout_s,
                  "Seconds of silence before the scheduler declares a node dead")
      ->check(kPositiveNumber)
      ->capture_default_str();
  add_worker_failure_flag(cmd, f->on_worker_failure);
  add_server_rejoin_flag(cmd, f->server_rejoin_timeout_s,
                         "; with --restart-failed N, launch starts a dead server again itself (under --hostfile on "
                         "its host, over ssh), up to N times, and the job goes on");
  add_checkpoint_flags(cmd, f->checkpoints,
                       "The servers checkpoint their shards to DIR (parafab server --checkpoint-dir; under --hostfile "
                       "on storage every host sees); train --resume DIR starts a job from them");
  cmd->add_option("--restart-failed", f->restart_failed,
                  "Up to N times, when a process fails (the scheduler, a server, or a worker under "
                  "--on-worker-failure fail), start the whole job again from the newest "
                  "complete checkpoint set in --checkpoint-dir (under --hostfile on the same hosts); with "
                  "--server-rejoin-timeout, start only a dead server again, under its rank")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--grace", f->grace_s, "Seconds between SIGTERM and SIGKILL when stopping the job")
      ->capture_default_str();
  cmd->add_option("--hostfile", f->hostfile,
                  "Start the processes over ssh on the hosts of FILE (a line: [user@]HOST[:SSH_PORT] [slots=N]; # "
                  "comments), round-robin, the scheduler on the first; see docs/cluster.md");
  cmd->add_option("--ssh-port", f->ssh_port, "With --hostfile: sshd's port on hosts without :PORT in the file")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--ssh-option", f->ssh_options, "With --hostfile: an ssh -o option, e.g. IdentityFile=~/.ssh/k (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--ssh", f->ssh_program, "With --hostfile: the ssh client to run")->capture_default_str();
  cmd->add_option("--remote-bin", f->remote_bin,
                  "With --hostfile: the parafab binary on the hosts (default: this binary's absolute path)");
  cmd->add_option("--job-dir", f->job_dir,
                  "With --hostfile: where the job token goes (a fresh 0600 file in a new directory), on storage every "
                  "host sees at the same path (default: ./.parafab)");
  CLI::Option* port = cmd->add_option("--port", f->port, "With --hostfile: the scheduler's TCP port on the first host")
                          ->check(CLI::Range(1, 65535))
                          ->capture_default_str();
  cmd->add_option("--bind", f->bind,
                  "With --hostfile: the address the scheduler listens on (default: the first host when it is an IP "
                  "address, else 0.0.0.0)");
  cmd->add_option("--iface", f->iface,
                  "With --hostfile: bind servers' and workers' fabric endpoints to this interface's address on each "
                  "host (parafab node --iface)");
  cmd->add_option("--env", f->env,
                  "With --hostfile: a variable for the remote processes, NAME=VALUE or NAME (its value here) "
                  "(repeatable; FI_* variables go along by default)")
      ->allow_extra_args(false);
  cmd->add_option("command", f->command,
                  "The worker command and its arguments, after --; it finds the job in PARAFAB_SCHEDULER, "
                  "PARAFAB_TOKEN_FILE, PARAFAB_PROVIDER, PARAFAB_ROLE, PARAFAB_RANK, PARAFAB_NUM_SERVERS, "
                  "PARAFAB_NUM_WORKERS, PARAFAB_JOIN_TIMEOUT (the default of its --join-timeout); also "
                  "PARAFAB_THREADS, its share of its host's CPUs (the default of parafab train --threads), unless "
                  "set already");
  cmd->footer(
      "Each line of a process's output is printed with its role and rank: [scheduler], [server 0], [worker 2]. "
      "SIGINT or SIGTERM stops every process (SIGTERM, then SIGKILL after --grace). Exit status: 0 when every "
      "process exited 0 (a worker lost under --on-worker-failure continue is reported, not failed); 1 when one "
      "failed (it is named, with its host under --hostfile); 2 for bad flags; 128+N "
      "after signal N. Under --hostfile each process is `ssh HOST ... parafab node -- COMMAND` in the same working "
      "directory, and ends when its ssh session does.");
  cmd->callback([f, port, &ctx] {
    ctx.exit_code = run_guarded("launch", [&] {
      LaunchFlags flags = *f;
      flags.port_given = port->count() > 0;
      validate(flags);
      Launch launch(std::move(flags));
      return launch.run();
    });
  });
}

}  // namespace parafab::apps
