// The flags every node of a distributed job shares (`parafab server`,
// `worker`, `train` under `launch`), with their environment fallbacks: a
// flag given wins, else the variable, else the default.
//
//   --scheduler HOST:PORT   PARAFAB_SCHEDULER    (or [IPV6]:PORT: apps/host_port.h)
//   --token-file FILE       PARAFAB_TOKEN_FILE   (the job token; never on the command line)
//   --provider NAME         PARAFAB_PROVIDER     (default tcp;ofi_rxm)
//   --node ADDRESS          PARAFAB_NODE         (fabric bind address, default 127.0.0.1)
//   --rank N                PARAFAB_RANK         (this node's index among its role; default: order of joining)
//   --join-timeout SECONDS  PARAFAB_JOIN_TIMEOUT (default 60; launch and node set it for their workers)
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/host_port.h"
#include "ps/cluster_map.h"
#include "ps/job_token.h"
#include "rdma/endpoint_options.h"

namespace parafab::apps {

// --consistency of parafab server, node and launch.
inline constexpr const char* kConsistencyHelp =
    "Servers' consistency: bsp (wait for every worker each clock, and apply the clock's pushes of all workers as "
    "one step), ssp:S (bounded staleness S, each push applied as it arrives), or asp";

struct ClusterFlags {
  std::string scheduler;
  std::string token_file;
  std::string provider;
  std::string node;
  double join_timeout_s = 60;
  // --rank, else PARAFAB_RANK: the role rank to ask the scheduler for.
  std::optional<uint32_t> role_rank;
};

void add_cluster_flags(CLI::App* cmd, ClusterFlags& flags);
// The job's worker-failure policy (scheduler, node, launch): fail or continue.
void add_worker_failure_flag(CLI::App* cmd, std::string& policy);
// --server-rejoin-timeout S, for scheduler, node and launch.
void add_server_rejoin_flag(CLI::App* cmd, double& seconds, const std::string& more = "");

// The servers' checkpoint flags, as node and launch take them and pass them
// on to parafab server.
struct CheckpointFlags {
  std::string dir;
  double interval_s = 0;
  int64_t clocks = 0;
  // The flags for parafab server ({} without a directory).
  std::vector<std::string> server_args() const;
  // Throws std::invalid_argument for an interval or clocks without a directory.
  void validate() const;
};
void add_checkpoint_flags(CLI::App* cmd, CheckpointFlags& flags, const std::string& dir_help);
// Fills what the flags left empty from the environment, then defaults.
// Throws std::invalid_argument naming the flag and variable that are missing.
void resolve_cluster_flags(ClusterFlags& flags);

// The scheduler's address the flags or variables give (host_port.h;
// a port is required). Throws std::invalid_argument naming the text.
HostPort scheduler_address(const ClusterFlags& flags);

rdma::EndpointOptions endpoint_options(const ClusterFlags& flags);
std::chrono::milliseconds join_timeout(const ClusterFlags& flags);
std::string this_host_name();

}  // namespace parafab::apps
