// `parafab scheduler`: the rendezvous of one job.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "apps/cluster_flags.h"
#include "apps/commands.h"
#include "apps/flag_checks.h"
#include "apps/table_spec.h"
#include "ps/scheduler.h"

namespace parafab::apps {
namespace {

struct SchedulerFlags {
  std::string bind = "127.0.0.1";
  int port = 0;
  uint32_t servers = 1, workers = 1;
  std::string token_file, port_file;
  std::vector<std::string> tables;
  double join_timeout_s = 60, heartbeat_timeout_s = 10, server_rejoin_timeout_s = 0;
  std::string on_worker_failure = "fail";
};

constexpr size_t kShortTokenBytes = 16;

int run_scheduler(const SchedulerFlags& f) {
  ps::SchedulerOptions o;
  o.bind = f.bind;
  o.port = static_cast<uint16_t>(f.port);
  o.num_servers = f.servers;
  o.num_workers = f.workers;
  std::string token_file = f.token_file;
  if (token_file.empty()) {
    if (const char* v = std::getenv("PARAFAB_TOKEN_FILE")) token_file = v;
  }
  if (token_file.empty()) throw std::invalid_argument("no job token: give --token-file FILE or set PARAFAB_TOKEN_FILE");
  o.token = ps::JobToken::from_file(token_file);
  // The MAC's inputs cross the wire in clear: one captured registration lets
  // anyone try short tokens offline. Said once per job, by its scheduler.
  if (o.token->secret().size() < kShortTokenBytes) {
    std::fprintf(stderr,
                 "warning: the job token in %s is %zu bytes: one captured registration is enough to guess a short "
                 "token offline; use %zu bytes or more (launch makes 64 random hex digits)\n",
                 token_file.c_str(), o.token->secret().size(), kShortTokenBytes);
  }
  for (const std::string& spec : f.tables) o.tables.push_back(parse_table_spec(spec));
  o.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.join_timeout_s * 1000));
  o.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.heartbeat_timeout_s * 1000));
  o.on_worker_failure = ps::parse_worker_failure_policy(f.on_worker_failure);
  o.server_rejoin_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.server_rejoin_timeout_s * 1000));
  ps::Scheduler scheduler(std::move(o));
  std::fprintf(stderr, "%s\n",
               fmt::format("scheduler listening on {}:{} for {} servers and {} workers, job {:016x}, token {}",
                           f.bind, scheduler.port(), f.servers, f.workers, scheduler.job_id(),
                           ps::JobToken::from_file(token_file).fingerprint())
                   .c_str());
  for (const std::string& spec : f.tables) std::fprintf(stderr, "  %s\n", describe_table(parse_table_spec(spec)).c_str());
  if (!f.port_file.empty()) {
    // Written whole, then renamed: a reader never sees half a number.
    const std::string tmp = f.port_file + ".tmp";
    std::ofstream(tmp) << scheduler.port() << "\n";
    if (std::rename(tmp.c_str(), f.port_file.c_str()) != 0) {
      throw std::runtime_error("cannot write the port file " + f.port_file);
    }
  }
  scheduler.run();
  const ps::SchedulerStats st = scheduler.stats();
  std::fprintf(stderr, "%s\n",
               fmt::format("scheduler: job done; {} joined, {} dead, {} refused (bad token), {} bad messages",
                           st.joined, st.dead_nodes, st.auth_failures,
                           st.malformed_frames + st.invalid_messages + st.unauthenticated_messages)
                   .c_str());
  return 0;
}

}  // namespace

void add_scheduler_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<SchedulerFlags>();
  CLI::App* cmd = root.add_subcommand("scheduler", "Run the scheduler of a job: rendezvous, cluster map, barriers, heartbeats");
  cmd->add_option("--bind", f->bind, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", f->port, "TCP port (0: any free port; see --port-file)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--port-file", f->port_file, "Write the port chosen to this file once listening")->check(kWritableFile);
  cmd->add_option("--servers", f->servers, "Servers in the job")->check(kPositiveNumber)->capture_default_str();
  cmd->add_option("--workers", f->workers, "Workers in the job")->check(kPositiveNumber)->capture_default_str();
  cmd->add_option("--token-file", f->token_file, "File holding the job token (else $PARAFAB_TOKEN_FILE)");
  cmd->add_option("--table", f->tables,
                  "A table of the job, e.g. id=0,kind=sparse,width=1,updater=adagrad,lr=0.05 (repeatable)");
  cmd->add_option("--join-timeout", f->join_timeout_s, "Seconds for every node to join")->capture_default_str();
  cmd->add_option("--heartbeat-timeout", f->heartbeat_timeout_s, "Seconds of silence before a node is declared dead")
      ->capture_default_str();
  add_worker_failure_flag(cmd, f->on_worker_failure);
  add_server_rejoin_flag(cmd, f->server_rejoin_timeout_s);
  cmd->callback([f, &ctx] { ctx.exit_code = run_guarded("scheduler", [&] { return run_scheduler(*f); }); });
}

}  // namespace parafab::apps
