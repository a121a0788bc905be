#include "apps/cluster_flags.h"
#include "apps/flag_checks.h"

#include <fmt/format.h>

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace parafab::apps {
namespace {

void from_env(std::string& field, const char* var, const char* fallback) {
  if (!field.empty()) return;
  if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
    field = v;
  } else if (fallback != nullptr) {
    field = fallback;
  }
}

}  // namespace

void add_cluster_flags(CLI::App* cmd, ClusterFlags& f) {
  cmd->add_option("--scheduler", f.scheduler, "The scheduler's HOST:PORT or [IPV6]:PORT (else $PARAFAB_SCHEDULER)");
  cmd->add_option("--token-file", f.token_file, "File holding the job token (else $PARAFAB_TOKEN_FILE)");
  cmd->add_option("--provider", f.provider,
                  "libfabric provider: tcp;ofi_rxm, shm, verbs;ofi_rxm, efa (else $PARAFAB_PROVIDER, default tcp;ofi_rxm)");
  cmd->add_option("--node", f.node, "Address the fabric endpoint binds (else $PARAFAB_NODE, default 127.0.0.1)");
  cmd->add_option("--rank", f.role_rank, "This node's index among its role (else $PARAFAB_RANK; default: order of joining)");
  cmd->add_option("--join-timeout", f.join_timeout_s,
                  "Seconds to wait for the whole job to join (parafab launch and parafab node pass theirs to "
                  "their workers through the variable)")
      ->envname("PARAFAB_JOIN_TIMEOUT")
      ->check(kPositiveNumber)
      ->capture_default_str();
}

void add_worker_failure_flag(CLI::App* cmd, std::string& policy) {
  cmd->add_option("--on-worker-failure", policy,
                  "A worker that dies before it is done: fail (stop the job, naming it) or continue (the others go "
                  "on without it and take over its batches from the next epoch)")
      ->check(CLI::IsMember({"fail", "continue"}))
      ->capture_default_str();
}

void add_server_rejoin_flag(CLI::App* cmd, double& seconds, const std::string& more) {
  cmd->add_option("--server-rejoin-timeout", seconds,
                  "Seconds a dead server's rank waits for a server to rejoin under it (parafab server --recover "
                  "--rank R, from its checkpoint; the workers send it their unanswered requests again); past it "
                  "the job stops. 0: no rejoin" +
                      more)
      ->check(kNonNegativeNumber)
      ->capture_default_str();
}

std::vector<std::string> CheckpointFlags::server_args() const {
  if (dir.empty()) return {};
  return {"--checkpoint-dir", dir, "--checkpoint-interval", fmt::format("{}", interval_s), "--checkpoint-clocks",
          std::to_string(clocks)};
}

void CheckpointFlags::validate() const {
  if ((interval_s > 0 || clocks > 0) && dir.empty()) {
    throw std::invalid_argument("--checkpoint-interval and --checkpoint-clocks need --checkpoint-dir");
  }
}

void add_checkpoint_flags(CLI::App* cmd, CheckpointFlags& flags, const std::string& dir_help) {
  cmd->add_option("--checkpoint-dir", flags.dir, dir_help);
  cmd->add_option("--checkpoint-interval", flags.interval_s, "Seconds between the servers' checkpoints (0: not by time)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--checkpoint-clocks", flags.clocks,
                  "Checkpoint whenever the slowest worker's clock has advanced this much (0: not by clocks)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
}

void resolve_cluster_flags(ClusterFlags& f) {
  from_env(f.scheduler, "PARAFAB_SCHEDULER", nullptr);
  from_env(f.token_file, "PARAFAB_TOKEN_FILE", nullptr);
  from_env(f.provider, "PARAFAB_PROVIDER", "tcp;ofi_rxm");
  from_env(f.node, "PARAFAB_NODE", "127.0.0.1");
  if (!f.role_rank) {
    if (const char* v = std::getenv("PARAFAB_RANK"); v != nullptr && *v != '\0') {
      uint32_t r = 0;
      const auto [end, ec] = std::from_chars(v, v + std::strlen(v), r);
      if (ec != std::errc() || *end != '\0') throw std::invalid_argument(std::string("PARAFAB_RANK='") + v + "' is not a rank");
      f.role_rank = r;
    }
  }
  if (f.scheduler.empty()) throw std::invalid_argument("no scheduler: give --scheduler HOST:PORT (or [IPV6]:PORT) or set PARAFAB_SCHEDULER");
  if (f.token_file.empty()) throw std::invalid_argument("no job token: give --token-file FILE or set PARAFAB_TOKEN_FILE");
  (void)scheduler_address(f);
}

HostPort scheduler_address(const ClusterFlags& f) {
  return parse_host_port(f.scheduler, "scheduler address (--scheduler or PARAFAB_SCHEDULER) ", PortRule::kRequired);
}

rdma::EndpointOptions endpoint_options(const ClusterFlags& f) {
  rdma::EndpointOptions o;
  o.provider = f.provider;
  o.node = f.node;
  return o;
}

std::chrono::milliseconds join_timeout(const ClusterFlags& f) {
  return std::chrono::milliseconds(static_cast<int64_t>(f.join_timeout_s * 1000));
}

std::string this_host_name() {
  char buf[256] = "";
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace parafab::apps
