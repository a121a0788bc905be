// `parafab launch`: one whole job on this host. Starts the scheduler and S
// servers (this binary's `scheduler` and `server` commands) and W copies of
// the user's command as the workers, all on 127.0.0.1, with the scheduler's
// address and the path of a fresh job token in their environment; forwards
// their output with "[role rank] " prefixes, turns Ctrl-C into SIGTERM for
// all of them, and exits 0 only when every process did.
//
// Launch itself opens no fabric: children are forked from a process that
// has registered no memory (DESIGN.md).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "apps/commands.h"
#include "apps/job_dir.h"
#include "apps/process_group.h"
#include "apps/signal_pipe.h"
#include "apps/table_spec.h"
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
  std::vector<std::string> command;
};

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
  if (f.provider.empty()) {
    const char* v = std::getenv("PARAFAB_PROVIDER");
    f.provider = v != nullptr && *v != '\0' ? v : "tcp;ofi_rxm";
  }
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe to start the scheduler and servers");
  return std::string(buf, static_cast<size_t>(n));
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

std::string who(const ProcessGroup::Child& c) { return fmt::format("{} (pid {})", c.label, c.pid); }

// The processes still running, for a message.
std::string still_running(const ProcessGroup& g) {
  std::string s;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g.child(i).exited) s += (s.empty() ? "" : ", ") + who(g.child(i));
  }
  return s;
}

class Launch {
 public:
  explicit Launch(LaunchFlags f)
      : f_(std::move(f)), signals_({SIGINT, SIGTERM, SIGCHLD}), dir_(token_), group_(signals_.fd()) {}

  int run() {
    const ps::ConsistencyModel consistency = ps::ConsistencyModel::parse(f_.consistency);
    say(fmt::format("{} servers ({}), {} workers, provider {}, job token {} in {}, join timeout {} s, timeout {}",
                    f_.servers, consistency.to_string(), f_.workers, f_.provider, token_.fingerprint(), dir_.path(),
                    f_.join_timeout_s, f_.timeout_s > 0 ? fmt::format("{} s", f_.timeout_s) : "none"));
    const std::string self = self_exe();
    const std::string join = fmt::format("{}", f_.join_timeout_s);
    std::vector<std::string> env = {"PARAFAB_TOKEN_FILE=" + dir_.token_file(), "PARAFAB_PROVIDER=" + f_.provider,
                                    fmt::format("PARAFAB_NUM_SERVERS={}", f_.servers),
                                    fmt::format("PARAFAB_NUM_WORKERS={}", f_.workers)};

    std::vector<std::string> sched = {
        self,     "scheduler", "--servers",   std::to_string(f_.servers), "--workers",      std::to_string(f_.workers),
        "--port", "0",         "--port-file", dir_.port_file(),           "--join-timeout", join};
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

    for (int i = 0; i < f_.servers; ++i) {
      group_.start(fmt::format("server {}", i),
                   {self, "server", "--consistency", f_.consistency, "--join-timeout", join},
                   with(env, {"PARAFAB_ROLE=server", fmt::format("PARAFAB_RANK={}", i)}));
    }
    for (int j = 0; j < f_.workers; ++j) {
      workers_.push_back(group_.start(fmt::format("worker {}", j), f_.command,
                                      with(env, {"PARAFAB_ROLE=worker", fmt::format("PARAFAB_RANK={}", j)})));
    }
    std::string started;
    for (size_t i = 0; i < group_.size(); ++i) started += (i == 0 ? "" : ", ") + who(group_.child(i));
    say(fmt::format("started {}", started));
    return supervise();
  }

 private:
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
  // second Ctrl-C).
  void stop_all() {
    const size_t n = group_.running();
    if (n > 0)
      say(fmt::format("stopping {} process{} (SIGTERM, then SIGKILL after {} s)", n, n == 1 ? "" : "es", f_.grace_s));
    group_.stop(seconds_ms(f_.grace_s), [this] {
      if (const int s = take_interrupt()) {
        say(fmt::format("{} again: killing {}", name_of(s), still_running(group_)));
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
      port = dir_.read_port();
      if (port) return std::nullopt;
      if (const int s = take_interrupt()) return interrupted(s);
      const ProcessGroup::Child& c = group_.child(scheduler);
      if (c.exited) {
        say(fmt::format("{} failed before listening: {}; its last output:{}", who(c), c.describe_end(),
                        group_.tail(scheduler)));
        return 1;
      }
      if (Clock::now() >= deadline) {
        say(fmt::format("{} did not write its port file within {} s; its last output:{}", who(c), f_.join_timeout_s,
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
        if (!c.succeeded()) {
          say(fmt::format("{} failed: {}", who(c), c.describe_end()));
          failed = true;
        }
      }
      if (failed) {
        stop_all();
        return 1;
      }
      if (const int s = take_interrupt()) return interrupted(s);
      if (group_.running() == 0) {
        say(fmt::format("job done: the scheduler, {} server{} and {} worker{} exited 0 in {:.1f} s", f_.servers,
                        f_.servers == 1 ? "" : "s", f_.workers, f_.workers == 1 ? "" : "s",
                        std::chrono::duration<double>(Clock::now() - started).count()));
        return 0;
      }
      const auto now = Clock::now();
      if (others_deadline == kNever &&
          std::all_of(workers_.begin(), workers_.end(), [&](size_t w) { return group_.child(w).exited; })) {
        others_deadline = now + seconds_ms(f_.join_timeout_s);
      }
      if (now >= others_deadline) {
        say(fmt::format("every worker exited 0, but {} still running {} s later", still_running(group_),
                        f_.join_timeout_s));
        stop_all();
        return 1;
      }
      if (now >= job_deadline) {
        say(fmt::format("the job ran past --timeout {} s; still running: {}", f_.timeout_s, still_running(group_)));
        stop_all();
        return 1;
      }
    }
  }

  LaunchFlags f_;
  // Destroyed in reverse: the children are killed and reaped (group_)
  // before the token's directory goes, and both before the handlers.
  SignalPipe signals_;
  ps::JobToken token_ = ps::JobToken::generate();
  JobDir dir_;
  ProcessGroup group_;
  std::vector<size_t> workers_;
};

}  // namespace

void add_launch_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<LaunchFlags>();
  CLI::App* cmd = root.add_subcommand(
      "launch",
      "Run a whole job on this host: the scheduler, --servers servers and --workers copies of the command after --");
  cmd->add_option("--servers", f->servers, "Parameter servers to start")->capture_default_str();
  cmd->add_option("--workers", f->workers, "Copies of the worker command to start")->capture_default_str();
  cmd->add_option("--provider", f->provider,
                  "libfabric provider for every node: tcp;ofi_rxm, shm, verbs;ofi_rxm, efa (else $PARAFAB_PROVIDER, "
                  "default tcp;ofi_rxm)");
  cmd->add_option("--consistency", f->consistency, "Servers' consistency: bsp, ssp:S or asp")->capture_default_str();
  cmd->add_option("--table", f->tables,
                  "A table of the job, e.g. id=0,kind=sparse,width=1,updater=adagrad,lr=0.05 (repeatable)")
      // One value per --table: else CLI11 lets the option swallow the "--"
      // and the worker command's own flags become launch's.
      ->allow_extra_args(false);
  cmd->add_option("--join-timeout", f->join_timeout_s,
                  "Seconds for the scheduler to listen and every node to join; also how long the scheduler and "
                  "servers may take to exit once every worker has")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds the whole job may run (0: no limit)")->capture_default_str();
  cmd->add_option("--grace", f->grace_s, "Seconds between SIGTERM and SIGKILL when stopping the job")
      ->capture_default_str();
  cmd->add_option("command", f->command,
                  "The worker command and its arguments, after --; it finds the job in PARAFAB_SCHEDULER, "
                  "PARAFAB_TOKEN_FILE, PARAFAB_PROVIDER, PARAFAB_ROLE, PARAFAB_RANK, PARAFAB_NUM_SERVERS, "
                  "PARAFAB_NUM_WORKERS");
  cmd->footer(
      "Each line of a process's output is printed with its role and rank: [scheduler], [server 0], [worker 2]. "
      "SIGINT or SIGTERM stops every process (SIGTERM, then SIGKILL after --grace). Exit status: 0 when every "
      "process exited 0; 1 when one failed (it is named); 2 for bad flags; 128+N after signal N.");
  cmd->callback([f, &ctx] {
    ctx.exit_code = run_guarded("launch", [&] {
      LaunchFlags flags = *f;
      validate(flags);
      Launch launch(std::move(flags));
      return launch.run();
    });
  });
}

}  // namespace parafab::apps
