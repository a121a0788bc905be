#include "apps/role_detection.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <stdexcept>

#include "apps/host_port.h"

extern char** environ;

namespace parafab::apps {
namespace {

using std::invalid_argument;

std::optional<std::string> get(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

uint32_t parse_count(const std::string& name, const std::string& value) {
  uint32_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || !all_digits(value)) {
    throw invalid_argument(fmt::format("{}='{}' is not a non-negative integer", name, value));
  }
  return v;
}

// A rank/size pair of one launcher, checked against each other and the job.
struct RankSize {
  uint32_t rank = 0, size = 0;
};

RankSize read_rank_size(const EnvMap& env, const std::string& rank_var, const std::vector<std::string>& size_vars,
                        JobShape shape) {
  const std::optional<std::string> rank_text = get(env, rank_var);
  if (!rank_text) throw invalid_argument(fmt::format("{} is not set", rank_var));
  std::optional<std::string> size_text;
  std::string size_var;
  for (const std::string& v : size_vars) {
    if ((size_text = get(env, v))) {
      size_var = v;
      break;
    }
  }
  if (!size_text) {
    throw invalid_argument(fmt::format("{}={} is set but {} is not: cannot check the job's size", rank_var, *rank_text,
                                       fmt::join(size_vars, " or ")));
  }
  RankSize rs{parse_count(rank_var, *rank_text), parse_count(size_var, *size_text)};
  if (rs.size != shape.size()) {
    throw invalid_argument(fmt::format(
        "{}={} but the job needs 1 scheduler + {} servers + {} workers = {} processes (--servers/--workers, else "
        "PARAFAB_NUM_SERVERS/PARAFAB_NUM_WORKERS)",
        size_var, rs.size, shape.servers, shape.workers, shape.size()));
  }
  if (rs.rank >= rs.size) {
    throw invalid_argument(fmt::format("{}={} is not below {}={}", rank_var, rs.rank, size_var, rs.size));
  }
  return rs;
}

void place_global(NodePlacement& p, uint32_t global_rank, JobShape shape) {
  p.global_rank = global_rank;
  p.size = shape.size();
  if (global_rank == 0) {
    p.role = NodeRole::kScheduler;
    p.role_rank = 0;
  } else if (global_rank <= shape.servers) {
    p.role = NodeRole::kServer;
    p.role_rank = global_rank - 1;
  } else {
    p.role = NodeRole::kWorker;
    p.role_rank = global_rank - 1 - shape.servers;
  }
}

void place_parafab(const EnvMap& env, JobShape shape, NodePlacement& p) {
  const std::optional<std::string> role_text = get(env, "PARAFAB_ROLE");
  if (!role_text) throw invalid_argument("PARAFAB_ROLE is not set");
  const std::optional<std::string> rank_text = get(env, "PARAFAB_RANK");
  p.evidence = fmt::format("PARAFAB_ROLE={} PARAFAB_RANK={}", *role_text, rank_text.value_or("(unset)"));
  const uint32_t rank = rank_text ? parse_count("PARAFAB_RANK", *rank_text) : 0;
  if (*role_text == "scheduler") {
    if (rank != 0) throw invalid_argument(fmt::format("PARAFAB_ROLE=scheduler with PARAFAB_RANK={}: a job has one scheduler, rank 0", rank));
    place_global(p, 0, shape);
    return;
  }
  const bool server = *role_text == "server";
  if (!server && *role_text != "worker") {
    throw invalid_argument(fmt::format("PARAFAB_ROLE='{}': expected scheduler, server or worker", *role_text));
  }
  if (!rank_text) {
    throw invalid_argument(fmt::format("PARAFAB_ROLE={} needs PARAFAB_RANK (the {}'s index, from 0)", *role_text, *role_text));
  }
  const uint32_t count = server ? shape.servers : shape.workers;
  if (rank >= count) {
    throw invalid_argument(fmt::format("PARAFAB_ROLE={} PARAFAB_RANK={}: the job has {} {}s (--{}s, else {})",
                                       *role_text, rank, count, *role_text, *role_text,
                                       server ? "PARAFAB_NUM_SERVERS" : "PARAFAB_NUM_WORKERS"));
  }
  place_global(p, server ? 1 + rank : 1 + shape.servers + rank, shape);
}

// Under mpirun and Hydra no variable names rank 0's host; a job all on this
// host needs none.
void single_host_fallback(const EnvMap& env, const char* local_size_var, NodePlacement& p) {
  if (const std::optional<std::string> local = get(env, local_size_var)) {
    if (parse_count(local_size_var, *local) == p.size) {
      p.scheduler_host = "127.0.0.1";
      p.evidence += fmt::format(" {}={}", local_size_var, *local);
    }
  }
}

void place_by_launcher(const EnvMap& env, JobShape shape, EnvScheme scheme, NodePlacement& p) {
  switch (scheme) {
    case EnvScheme::kSlurm: {
      const RankSize rs = read_rank_size(env, "SLURM_PROCID", {"SLURM_NTASKS", "SLURM_NPROCS"}, shape);
      p.evidence = fmt::format("SLURM_PROCID={} SLURM_NTASKS={}", rs.rank, rs.size);
      place_global(p, rs.rank, shape);
      // The step's nodes first: task 0 runs on the first of them.
      for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
        if (const std::optional<std::string> list = get(env, var)) {
          const std::vector<std::string> hosts = expand_slurm_nodelist(*list);
          p.scheduler_host = hosts.front();
          p.evidence += fmt::format(" {}={}", var, *list);
          break;
        }
      }
      return;
    }
    case EnvScheme::kOmpi: {
      const RankSize rs = read_rank_size(env, "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}, shape);
      p.evidence = fmt::format("OMPI_COMM_WORLD_RANK={} OMPI_COMM_WORLD_SIZE={}", rs.rank, rs.size);
      place_global(p, rs.rank, shape);
      single_host_fallback(env, "OMPI_COMM_WORLD_LOCAL_SIZE", p);
      return;
    }
    case EnvScheme::kPmi: {
      const RankSize rs = read_rank_size(env, "PMI_RANK", {"PMI_SIZE"}, shape);
      p.evidence = fmt::format("PMI_RANK={} PMI_SIZE={}", rs.rank, rs.size);
      place_global(p, rs.rank, shape);
      single_host_fallback(env, "MPI_LOCALNRANKS", p);
      return;
    }
    case EnvScheme::kParafab:
      place_parafab(env, shape, p);
      return;
    case EnvScheme::kAuto:
      break;
  }
  throw std::logic_error("place_by_launcher: no scheme");
}

void apply_parafab_scheduler(const EnvMap& env, NodePlacement& p) {
  const std::optional<std::string> text = get(env, "PARAFAB_SCHEDULER");
  if (!text) return;
  // The grammar --scheduler has (host_port.h), the port optional: --port, or
  // the default, stands in for it.
  const HostPort hp = parse_host_port(*text, "PARAFAB_SCHEDULER=", PortRule::kOptional);
  p.scheduler_host = hp.host;
  p.scheduler_port = hp.port;
  p.evidence += fmt::format(" PARAFAB_SCHEDULER={}", *text);
}

}  // namespace

const char* to_string(NodeRole role) {
  switch (role) {
    case NodeRole::kScheduler:
      return "scheduler";
    case NodeRole::kServer:
      return "server";
    case NodeRole::kWorker:
      return "worker";
  }
  return "?";
}

const char* to_string(EnvScheme scheme) {
  switch (scheme) {
    case EnvScheme::kAuto:
      return "auto";
    case EnvScheme::kParafab:
      return "parafab";
    case EnvScheme::kSlurm:
      return "slurm";
    case EnvScheme::kOmpi:
      return "ompi";
    case EnvScheme::kPmi:
      return "pmi";
  }
  return "?";
}

EnvScheme parse_env_scheme(const std::string& text) {
  for (const EnvScheme s : {EnvScheme::kAuto, EnvScheme::kParafab, EnvScheme::kSlurm, EnvScheme::kOmpi, EnvScheme::kPmi}) {
    if (text == to_string(s)) return s;
  }
  throw invalid_argument(fmt::format("launcher '{}': expected auto, parafab, slurm, ompi or pmi", text));
}

JobShape resolve_job_shape(const EnvMap& env, std::optional<uint32_t> servers, std::optional<uint32_t> workers) {
  JobShape shape;
  const auto one = [&](std::optional<uint32_t> flag, const char* flag_name, const char* var) -> uint32_t {
    const std::optional<std::string> text = get(env, var);
    const std::optional<uint32_t> from_env =
        text ? std::optional<uint32_t>(parse_count(var, *text)) : std::nullopt;
    if (flag && from_env && *flag != *from_env) {
      throw invalid_argument(fmt::format("{} {} disagrees with {}={}", flag_name, *flag, var, *from_env));
    }
    const std::optional<uint32_t> v = flag ? flag : from_env;
    if (!v) throw invalid_argument(fmt::format("how many? give {} N or set {}", flag_name, var));
    if (*v == 0) throw invalid_argument(fmt::format("{} 0: a job needs at least one", flag ? flag_name : var));
    return *v;
  };
  shape.servers = one(servers, "--servers", "PARAFAB_NUM_SERVERS");
  shape.workers = one(workers, "--workers", "PARAFAB_NUM_WORKERS");
  return shape;
}

NodePlacement detect_placement(const EnvMap& env, JobShape shape, EnvScheme forced) {
  if (shape.servers == 0 || shape.workers == 0) {
    throw invalid_argument(fmt::format("a job needs at least one server and one worker (got {} and {})", shape.servers,
                                       shape.workers));
  }
  EnvScheme scheme = forced;
  if (scheme == EnvScheme::kAuto) {
    if (get(env, "PARAFAB_ROLE")) {
      scheme = EnvScheme::kParafab;
    } else if (get(env, "SLURM_PROCID")) {
      scheme = EnvScheme::kSlurm;
    } else if (get(env, "OMPI_COMM_WORLD_RANK")) {
      scheme = EnvScheme::kOmpi;
    } else if (get(env, "PMI_RANK")) {
      scheme = EnvScheme::kPmi;
    } else {
      throw invalid_argument(
          "cannot tell this process's place in the job: none of PARAFAB_ROLE, SLURM_PROCID, OMPI_COMM_WORLD_RANK, "
          "PMI_RANK is set (run under srun or mpirun, or set PARAFAB_ROLE and PARAFAB_RANK)");
    }
  }
  NodePlacement p;
  p.scheme = scheme;
  place_by_launcher(env, shape, scheme, p);
  apply_parafab_scheduler(env, p);
  return p;
}

std::vector<std::string> expand_slurm_nodelist(const std::string& list, size_t max_hosts) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument(fmt::format("node list '{}': {}", list, why));
  };
  // Entries are separated by commas outside brackets.
  std::vector<std::string> entries;
  std::string cur;
  int depth = 0;
  for (const char c : list) {
    if (c == '[') {
      if (depth++ != 0) throw bad("nested '['");
    } else if (c == ']') {
      if (--depth != 0) throw bad("']' without '['");
    } else if (c == ',' && depth == 0) {
      if (cur.empty()) throw bad("empty host name");
      entries.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (depth != 0) throw bad("'[' without ']'");
  if (cur.empty()) throw bad("empty host name");
  entries.push_back(std::move(cur));

  std::vector<std::string> hosts;
  // Expands the first bracket group of `entry` and recurses on the rest.
  const auto expand = [&](const auto& self, const std::string& entry) -> void {
    const size_t open = entry.find('[');
    if (open == std::string::npos) {
      if (hosts.size() >= max_hosts) throw bad(fmt::format("more than {} hosts", max_hosts));
      hosts.push_back(entry);
      return;
    }
    const size_t close = entry.find(']', open);
    const std::string prefix = entry.substr(0, open), group = entry.substr(open + 1, close - open - 1),
                      suffix = entry.substr(close + 1);
    if (group.empty()) throw bad("empty '[]'");
    size_t start = 0;
    while (start <= group.size()) {
      size_t comma = group.find(',', start);
      if (comma == std::string::npos) comma = group.size();
      const std::string item = group.substr(start, comma - start);
      const size_t dash = item.find('-');
      const std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
      if (!all_digits(lo) || !all_digits(hi)) throw bad(fmt::format("'{}' is not a number or a range N-M", item));
      if (lo.size() > 18 || hi.size() > 18) throw bad(fmt::format("'{}': number too long", item));
      const uint64_t a = std::stoull(lo), b = std::stoull(hi);
      if (a > b) throw bad(fmt::format("range '{}' runs backwards", item));
      if (b - a >= max_hosts) throw bad(fmt::format("more than {} hosts", max_hosts));
      for (uint64_t n = a; n <= b; ++n) self(self, fmt::format("{}{:0{}}{}", prefix, n, lo.size(), suffix));
      start = comma + 1;
    }
  };
  for (const std::string& e : entries) expand(expand, e);
  return hosts;
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace parafab::apps
