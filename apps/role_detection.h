// Which process of a job am I? `parafab node` runs as every process of a job
// started by an existing launcher (srun, mpirun, a Kubernetes Job, a shell
// loop) and reads its place from the variables that launcher sets. This is a
// pure function of an environment map, so every scheme is unit-tested without
// a launcher.
//
// Schemes, in order of precedence (the first whose rank variable is set and
// non-empty decides; an empty variable counts as unset):
//   parafab  PARAFAB_ROLE=scheduler|server|worker, PARAFAB_RANK (index among
//            the role; 0 for the scheduler when unset)
//   slurm    SLURM_PROCID, SLURM_NTASKS (else SLURM_NPROCS), scheduler host =
//            first host of SLURM_STEP_NODELIST, else SLURM_NODELIST, else
//            SLURM_JOB_NODELIST
//   ompi     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   pmi      PMI_RANK, PMI_SIZE (MPICH/Hydra, Intel MPI, Slurm's PMI)
// Global rank 0 is the scheduler, 1..S the servers, S+1..S+W the workers;
// the size must be 1+S+W.
//
// The scheduler's host: PARAFAB_SCHEDULER (HOST[:PORT], [IPV6][:PORT] or a
// bare IPV6, as host_port.h reads it) wins, then the
// Slurm node list; under ompi and pmi, where no variable names rank 0's host,
// a job that is all on this host (OMPI_COMM_WORLD_LOCAL_SIZE or
// MPI_LOCALNRANKS equal to the size) uses 127.0.0.1; otherwise the host is
// left empty and the caller must be given one (--scheduler-host).
//
//   const EnvMap env = current_environment();
//   const NodePlacement p = detect_placement(env, {.servers = 2, .workers = 3});
//   if (p.role == NodeRole::kWorker) ... p.role_rank, p.scheduler_host ...
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace parafab::apps {

using EnvMap = std::map<std::string, std::string>;

enum class NodeRole { kScheduler, kServer, kWorker };
enum class EnvScheme { kAuto, kParafab, kSlurm, kOmpi, kPmi };

const char* to_string(NodeRole role);
const char* to_string(EnvScheme scheme);
// "auto", "parafab", "slurm", "ompi", "pmi"; throws std::invalid_argument.
EnvScheme parse_env_scheme(const std::string& text);

struct JobShape {
  uint32_t servers = 0;
  uint32_t workers = 0;
  uint32_t size() const { return 1 + servers + workers; }
};

struct NodePlacement {
  EnvScheme scheme = EnvScheme::kAuto;  // the scheme that decided (never kAuto)
  NodeRole role = NodeRole::kWorker;
  uint32_t global_rank = 0;  // 0 scheduler, 1..S servers, S+1.. workers
  uint32_t role_rank = 0;    // index among the role (server i, worker j)
  uint32_t size = 0;         // 1+S+W
  std::string scheduler_host;            // empty: no variable names it
  std::optional<uint16_t> scheduler_port;  // only from PARAFAB_SCHEDULER with a port
  std::string evidence;  // the variables read, e.g. "SLURM_PROCID=3 SLURM_NTASKS=6", for logs
};

// The job's shape: each of --servers/--workers, else PARAFAB_NUM_SERVERS /
// PARAFAB_NUM_WORKERS; a flag and a variable that disagree, a missing count
// or a zero throw std::invalid_argument naming them.
JobShape resolve_job_shape(const EnvMap& env, std::optional<uint32_t> servers, std::optional<uint32_t> workers);

// Throws std::invalid_argument naming the variables (and their values) that
// are missing, malformed or inconsistent with `shape`.
// `forced`: read only that scheme (kAuto: the first one present).
NodePlacement detect_placement(const EnvMap& env, JobShape shape, EnvScheme forced = EnvScheme::kAuto);

// Slurm's compressed host list ("node[01-03,07],gpu-a[1-2]b[0-1],login"):
// comma-separated entries; in an entry every bracket group is a
// comma-separated set of numbers and ranges, zero padding kept from the
// lower bound ("[08-10]" -> 08 09 10), several groups multiply. Throws
// std::invalid_argument naming the list on bad syntax or more than
// `max_hosts` hosts.
std::vector<std::string> expand_slurm_nodelist(const std::string& list, size_t max_hosts = 1u << 20);

// This process's environment as a map.
EnvMap current_environment();

}  // namespace parafab::apps
