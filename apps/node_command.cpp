// `parafab node`: one process of a job started by someone else's launcher.
// Every process runs the same command line (srun, mpirun, a Kubernetes Job,
// a shell loop); each finds its global rank and the job's size in its
// environment (role_detection.h) and becomes, in place (exec, same pid, so
// the launcher's signals and exit status reach the real process):
//   rank 0       `parafab scheduler --port P --bind B ...`
//   rank 1..S    `parafab server --rank i ...`
//   rank S+1..   the command after --, as worker j, with PARAFAB_SCHEDULER,
//                PARAFAB_TOKEN_FILE, PARAFAB_ROLE, PARAFAB_RANK, ... set.
// Launchers start processes in no particular order, and a node's scheduler
// client retries a refused connection for only 10 s, so servers and workers
// first wait (bounded by --join-timeout) until the scheduler's port accepts
// a connection; the probe closes before the handshake, which the scheduler
// drops silently.
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "apps/cluster_flags.h"
#include "apps/commands.h"
#include "apps/flag_checks.h"
#include "apps/role_detection.h"
#include "apps/table_spec.h"
#include "ps/consistency.h"
#include "ps/job_token.h"

namespace parafab::apps {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kDefaultPort = 9737;

struct NodeFlags {
  std::optional<uint32_t> servers, workers;
  int port = kDefaultPort;
  bool port_given = false;
  std::string bind = "0.0.0.0";
  std::string scheduler_host;
  std::vector<std::string> tables;
  std::string consistency = "bsp";
  std::string launcher = "auto";
  std::string token_file, provider, node, iface;
  double join_timeout_s = 60, heartbeat_timeout_s = 10;
  std::string on_worker_failure = "fail";
  CheckpointFlags checkpoints;  // the servers'
  double server_rejoin_timeout_s = 0;  // the scheduler's
  bool recover = false;                // a server's: start from its checkpoint (rejoin a running job)
  bool dry_run = false;
  std::vector<std::string> command;
};

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe to run the scheduler or a server");
  return std::string(buf, static_cast<size_t>(n));
}

std::string env_or(const EnvMap& env, const char* var, const std::string& flag) {
  if (!flag.empty()) return flag;
  const auto it = env.find(var);
  return it == env.end() ? std::string() : it->second;
}

// The first IPv4 address of a network interface, for the fabric's bind address.
std::string interface_address(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw std::runtime_error(fmt::format("--iface {}: getifaddrs: {}", iface, std::strerror(errno)));
  std::string found;
  std::vector<std::string> names;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    names.emplace_back(a->ifa_name);
    if (found.empty() && iface == a->ifa_name) {
      char text[INET_ADDRSTRLEN] = "";
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      found = text;
    }
  }
  freeifaddrs(list);
  if (found.empty()) {
    throw std::invalid_argument(
        fmt::format("--iface {}: no IPv4 address on this interface (interfaces with one: {})", iface, fmt::join(names, ", ")));
  }
  return found;
}

// One connection attempt to any address of host:port, bounded by `limit`.
// Empty on success, else why not.
std::string try_connect(const std::string& host, uint16_t port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    return fmt::format("cannot resolve {}: {}", host, gai_strerror(rc));
  }
  std::string why = "no address";
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int n = poll(&p, 1, static_cast<int>(limit.count()));
      socklen_t len = sizeof err;
      if (n == 1) {
        (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    close(fd);
    if (err == 0) {
      freeaddrinfo(res);
      return {};
    }
    why = std::strerror(err);
  }
  freeaddrinfo(res);
  return why;
}

// Polls host:port until it accepts a connection or `deadline` passes; the
// wait between refused attempts grows from 20 ms to 500 ms.
void wait_for_scheduler(const std::string& host, uint16_t port, Clock::time_point deadline, double timeout_s) {
  std::chrono::milliseconds pause(20);
  std::string why;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    why = try_connect(host, port, std::min(left, std::chrono::milliseconds(2000)));
    if (why.empty()) return;
    const auto rest = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (rest.count() <= 0) break;
    (void)poll(nullptr, 0, static_cast<int>(std::min(pause, rest).count()));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  throw std::runtime_error(fmt::format(
      "the scheduler at {}:{} did not accept a connection within --join-timeout {} s (last: {}); is global rank 0 "
      "running `parafab node` with the same --port?",
      host, port, timeout_s, why));
}

struct Plan {
  NodePlacement placement;
  uint16_t port = 0;
  std::string token_file;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of ours
};

Plan make_plan(const NodeFlags& f, const EnvMap& env) {
  if (f.command.empty()) {
    throw std::invalid_argument(
        "no worker command: give it after --, e.g. parafab node --servers 2 --workers 3 -- parafab worker");
  }
  const JobShape shape = resolve_job_shape(env, f.servers, f.workers);
  Plan plan;
  plan.placement = detect_placement(env, shape, parse_env_scheme(f.launcher));
  NodePlacement& p = plan.placement;
  if (!f.scheduler_host.empty()) {
    // A host, read as PARAFAB_SCHEDULER is (host_port.h); the port is --port's.
    const HostPort hp = parse_host_port(f.scheduler_host, "--scheduler-host ", PortRule::kOptional);
    if (hp.port) {
      throw std::invalid_argument(
          fmt::format("--scheduler-host '{}': a host, without a port (give the port with --port)", f.scheduler_host));
    }
    p.scheduler_host = hp.host;
  }
  if (p.scheduler_host.empty() && p.role != NodeRole::kScheduler) {
    throw std::invalid_argument(fmt::format(
        "no scheduler host: under {} no variable names global rank 0's host; give --scheduler-host HOST or set "
        "PARAFAB_SCHEDULER=HOST (the same for every process)",
        to_string(p.scheme)));
  }
  plan.port = static_cast<uint16_t>(f.port);
  if (!f.port_given && p.scheduler_port) plan.port = *p.scheduler_port;
  if (plan.port == 0) throw std::invalid_argument("--port 0: every process must know the scheduler's port in advance");

  plan.token_file = env_or(env, "PARAFAB_TOKEN_FILE", f.token_file);
  if (plan.token_file.empty()) {
    throw std::invalid_argument(
        "no job token: give --token-file FILE or set PARAFAB_TOKEN_FILE (a file every node of the job can read, "
        "mode 0600)");
  }
  (void)ps::JobToken::from_file(plan.token_file);  // unreadable or bad: say so on every node, before anything starts
  (void)ps::ConsistencyModel::parse(f.consistency);
  for (const std::string& spec : f.tables) (void)parse_table_spec(spec);
  // Every process of a job gets the same flags: refuse on each what the
  // servers could not do, before anything starts.
  f.checkpoints.validate();
  if (f.server_rejoin_timeout_s > 0 && f.checkpoints.dir.empty()) {
    throw std::invalid_argument("--server-rejoin-timeout needs --checkpoint-dir (a server rejoins from its checkpoint)");
  }
  if (f.recover && f.checkpoints.dir.empty()) {
    throw std::invalid_argument("--recover needs --checkpoint-dir (where the server's checkpoint is)");
  }
  if (!f.node.empty() && !f.iface.empty()) throw std::invalid_argument("give --node or --iface, not both");
  const std::string iface = env_or(env, "PARAFAB_IFACE", f.iface);
  const std::string node = !f.node.empty() ? f.node : !iface.empty() ? interface_address(iface) : std::string();
  const std::string provider = f.provider;

  const std::string scheduler = format_host_port(p.scheduler_host, plan.port);
  const std::string join = fmt::format("{}", f.join_timeout_s);
  plan.env = {{"PARAFAB_TOKEN_FILE", plan.token_file},
              {"PARAFAB_NUM_SERVERS", std::to_string(shape.servers)},
              {"PARAFAB_NUM_WORKERS", std::to_string(shape.workers)},
              {"PARAFAB_ROLE", to_string(p.role)},
              {"PARAFAB_RANK", std::to_string(p.role_rank)}};
  if (p.role != NodeRole::kScheduler) plan.env.emplace_back("PARAFAB_SCHEDULER", scheduler);
  if (!provider.empty()) plan.env.emplace_back("PARAFAB_PROVIDER", provider);
  if (!node.empty()) plan.env.emplace_back("PARAFAB_NODE", node);

  switch (p.role) {
    case NodeRole::kScheduler:
      plan.argv = {self_exe(), "scheduler", "--servers", std::to_string(shape.servers), "--workers",
                   std::to_string(shape.workers), "--port", std::to_string(plan.port), "--bind", f.bind,
                   "--token-file", plan.token_file, "--join-timeout", join, "--heartbeat-timeout",
                   fmt::format("{}", f.heartbeat_timeout_s), "--on-worker-failure", f.on_worker_failure};
      if (f.server_rejoin_timeout_s > 0) {
        plan.argv.insert(plan.argv.end(), {"--server-rejoin-timeout", fmt::format("{}", f.server_rejoin_timeout_s)});
      }
      for (const std::string& t : f.tables) {
        plan.argv.push_back("--table");
        plan.argv.push_back(t);
      }
      break;
    case NodeRole::kServer:
      plan.argv = {self_exe(), "server", "--rank", std::to_string(p.role_rank), "--consistency", f.consistency,
                   "--join-timeout", join};
      for (const std::string& a : f.checkpoints.server_args()) plan.argv.push_back(a);
      if (f.recover) plan.argv.push_back("--recover");
      break;
    case NodeRole::kWorker:
      plan.argv = f.command;
      // parafab launch --hostfile says how many workers share this host:
      // each takes its share of the CPUs (apps/host_threads.h), unless the
      // environment already says how many threads.
      if (env_or(env, kThreadsEnv, "").empty()) {
        if (const std::optional<int> n = parse_positive_int(env_or(env, "PARAFAB_LOCAL_WORKERS", ""))) {
          plan.env.emplace_back(kThreadsEnv, std::to_string(cpu_share(*n)));
        }
      }
      // The job's join timeout, for a worker command that does not give
      // its own --join-timeout (apps/cluster_flags.cpp reads the variable).
      plan.env.emplace_back("PARAFAB_JOIN_TIMEOUT", join);
      break;
  }
  return plan;
}

[[noreturn]] void exec_plan(const Plan& plan, const EnvMap& env) {
  EnvMap merged = env;
  for (const auto& [k, v] : plan.env) merged[k] = v;
  std::vector<std::string> env_text;
  for (const auto& [k, v] : merged) env_text.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (std::string& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = plan.argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execvpe(argv[0], argv.data(), envp.data());
  const int err = errno;
  throw std::runtime_error(fmt::format("cannot execute '{}': {}", plan.argv[0], std::strerror(err)));
}

int run_node(const NodeFlags& f) {
  const auto t0 = Clock::now();
  const EnvMap env = current_environment();
  const Plan plan = make_plan(f, env);
  const NodePlacement& p = plan.placement;
  const std::string what = p.role == NodeRole::kScheduler
                               ? std::string("scheduler")
                               : fmt::format("{} {}", to_string(p.role), p.role_rank);
  std::fprintf(stderr, "%s\n",
               fmt::format("node: global rank {} of {} ({}: {}) is {}; scheduler {}", p.global_rank, p.size,
                           to_string(p.scheme), p.evidence, what,
                           format_host_port(p.role == NodeRole::kScheduler ? f.bind : p.scheduler_host, plan.port))
                   .c_str());
  if (f.dry_run) {
    for (const auto& [k, v] : plan.env) std::printf("%s=%s\n", k.c_str(), v.c_str());
    std::printf("exec %s\n", fmt::format("{}", fmt::join(plan.argv, " ")).c_str());
    return 0;
  }
  if (p.role != NodeRole::kScheduler) {
    wait_for_scheduler(p.scheduler_host, plan.port, t0 + std::chrono::milliseconds(static_cast<int64_t>(f.join_timeout_s * 1000)),
                       f.join_timeout_s);
  }
  exec_plan(plan, env);
}

}  // namespace

void add_node_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<NodeFlags>();
  CLI::App* cmd = root.add_subcommand(
      "node",
      "Be one process of a job started by another launcher (srun, mpirun, Kubernetes, a script): global rank 0 "
      "becomes the scheduler, 1..S the servers, the rest run the command after -- as workers");
  cmd->add_option("--servers", f->servers, "Servers in the job (else $PARAFAB_NUM_SERVERS)");
  cmd->add_option("--workers", f->workers, "Workers in the job (else $PARAFAB_NUM_WORKERS)");
  CLI::Option* port = cmd->add_option("--port", f->port,
                  "The scheduler's TCP port, fixed: every process must know it (else the port of $PARAFAB_SCHEDULER)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  cmd->add_option("--bind", f->bind, "Address the scheduler (rank 0) listens on")->capture_default_str();
  cmd->add_option("--scheduler-host", f->scheduler_host,
                  "Host of global rank 0 (HOST or an IPv6 address, bare or in brackets; no port: see --port), "
                  "overriding the environment (needed under mpirun/PMI across hosts)");
  cmd->add_option("--launcher", f->launcher,
                  "Which variables give the rank: auto (PARAFAB_ROLE, then SLURM_PROCID, OMPI_COMM_WORLD_RANK, "
                  "PMI_RANK), parafab, slurm, ompi, pmi")
      ->capture_default_str();
  cmd->add_option("--token-file", f->token_file,
                  "The job token, a file every node can read (else $PARAFAB_TOKEN_FILE; required)");
  cmd->add_option("--provider", f->provider,
                  "libfabric provider: tcp;ofi_rxm, verbs;ofi_rxm, efa, shm (else $PARAFAB_PROVIDER, default "
                  "tcp;ofi_rxm)");
  cmd->add_option("--node", f->node, "Address the servers' and workers' fabric endpoints bind (else $PARAFAB_NODE)");
  cmd->add_option("--iface", f->iface,
                  "Bind the fabric to this interface's IPv4 address, looked up on each host (else $PARAFAB_IFACE)");
  cmd->add_option("--table", f->tables,
                  "A table of the job, e.g. id=0,kind=sparse,width=1,updater=adagrad,lr=0.05 (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--consistency", f->consistency, kConsistencyHelp)->capture_default_str();
  cmd->add_option("--join-timeout", f->join_timeout_s,
                  "Seconds for the scheduler to come up and every node to join")
      ->check(kPositiveNumber)
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", f->heartbeat_timeout_s, "Seconds of silence before a node is declared dead")
      ->check(kPositiveNumber)
      ->capture_default_str();
  add_worker_failure_flag(cmd, f->on_worker_failure);
  add_checkpoint_flags(cmd, f->checkpoints,
                       "Servers checkpoint their shards to DIR (storage every host sees); rerun with train --resume DIR");
  add_server_rejoin_flag(cmd, f->server_rejoin_timeout_s,
                         "; start the dead server again with parafab node --recover under its role and rank, on any host");
  cmd->add_flag("--recover", f->recover,
                "Servers: start from this server's shard of the newest complete checkpoint set in --checkpoint-dir; "
                "in a running job whose scheduler keeps the rank (--server-rejoin-timeout), rejoin it. Other roles "
                "ignore it (every role still needs --checkpoint-dir with it)");
  cmd->add_flag("--dry-run", f->dry_run, "Print this process's role, environment and command, and exit");
  cmd->add_option("command", f->command,
                  "The worker command and its arguments, after --; it finds the job in PARAFAB_SCHEDULER, "
                  "PARAFAB_TOKEN_FILE, PARAFAB_ROLE, PARAFAB_RANK, PARAFAB_NUM_SERVERS, PARAFAB_NUM_WORKERS, "
                  "PARAFAB_PROVIDER, PARAFAB_NODE, PARAFAB_JOIN_TIMEOUT (the default of its --join-timeout)");
  cmd->footer(
      "Rank and size come from, in order: PARAFAB_ROLE + PARAFAB_RANK (rank among the role); SLURM_PROCID + "
      "SLURM_NTASKS or SLURM_NPROCS (scheduler host: first host of SLURM_STEP_NODELIST, SLURM_NODELIST or "
      "SLURM_JOB_NODELIST); OMPI_COMM_WORLD_RANK + "
      "OMPI_COMM_WORLD_SIZE; PMI_RANK + PMI_SIZE. The size must be 1 + servers + workers. PARAFAB_SCHEDULER=HOST[:PORT] "
      "(or [IPV6][:PORT], or a bare IPV6 without a port) names the scheduler under any launcher. See docs/cluster.md.");
  cmd->callback([f, port, &ctx] {
    ctx.exit_code = run_guarded("node", [&] {
      NodeFlags flags = *f;
      flags.port_given = port->count() > 0;
      return run_node(flags);
    });
  });
}

}  // namespace parafab::apps
