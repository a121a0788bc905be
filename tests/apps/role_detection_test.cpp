// Finding a process's place in a job from its launcher's variables: every
// scheme, their precedence, Slurm's node-list syntax, and errors that name
// the variables at fault.
#include "apps/role_detection.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace parafab::apps {
namespace {

const JobShape k2x3{.servers = 2, .workers = 3};  // size 6

// The message of the std::invalid_argument `f` throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(expr, text)                                   \
  do {                                                                 \
    const std::string msg_ = error_of([&] { (void)(expr); });         \
    EXPECT_NE(msg_.find(text), std::string::npos) << "error: " << msg_; \
  } while (0)

TEST(RoleDetection, SlurmRanksMapToSchedulerServersWorkers) {
  const NodeRole want_role[] = {NodeRole::kScheduler, NodeRole::kServer, NodeRole::kServer,
                                NodeRole::kWorker,    NodeRole::kWorker, NodeRole::kWorker};
  const uint32_t want_role_rank[] = {0, 0, 1, 0, 1, 2};
  for (uint32_t r = 0; r < 6; ++r) {
    const NodePlacement p = detect_placement(
        {{"SLURM_PROCID", std::to_string(r)}, {"SLURM_NTASKS", "6"}, {"SLURM_NODELIST", "cn[07-09],gpu1"}}, k2x3);
    EXPECT_EQ(p.scheme, EnvScheme::kSlurm);
    EXPECT_EQ(p.global_rank, r);
    EXPECT_EQ(p.size, 6u);
    EXPECT_EQ(p.role, want_role[r]) << r;
    EXPECT_EQ(p.role_rank, want_role_rank[r]) << r;
    EXPECT_EQ(p.scheduler_host, "cn07");
    EXPECT_FALSE(p.scheduler_port.has_value());
    EXPECT_NE(p.evidence.find("SLURM_PROCID=" + std::to_string(r)), std::string::npos) << p.evidence;
  }
}

TEST(RoleDetection, SlurmPrefersTheStepNodeListAndAcceptsNprocs) {
  const NodePlacement p = detect_placement({{"SLURM_PROCID", "4"},
                                           {"SLURM_NPROCS", "6"},
                                           {"SLURM_JOB_NODELIST", "a[1-9]"},
                                           {"SLURM_NODELIST", "a[1-9]"},
                                           {"SLURM_STEP_NODELIST", "a[3-4]"}},
                                          k2x3);
  EXPECT_EQ(p.scheduler_host, "a3");
  EXPECT_EQ(p.role, NodeRole::kWorker);
  EXPECT_EQ(p.role_rank, 1u);
  EXPECT_EQ(detect_placement({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_JOB_NODELIST", "z"}}, k2x3)
                .scheduler_host,
            "z");
  // No node list at all: the host is left to the caller (--scheduler-host).
  EXPECT_EQ(detect_placement({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "6"}}, k2x3).scheduler_host, "");
}

TEST(RoleDetection, OpenMpi) {
  const NodePlacement p =
      detect_placement({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "6"}}, k2x3);
  EXPECT_EQ(p.scheme, EnvScheme::kOmpi);
  EXPECT_EQ(p.role, NodeRole::kServer);
  EXPECT_EQ(p.role_rank, 1u);
  EXPECT_EQ(p.scheduler_host, "") << "across hosts mpirun names no host for rank 0";
  // Every rank on this host: the scheduler is local.
  EXPECT_EQ(detect_placement({{"OMPI_COMM_WORLD_RANK", "5"},
                              {"OMPI_COMM_WORLD_SIZE", "6"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "6"}},
                             k2x3)
                .scheduler_host,
            "127.0.0.1");
  EXPECT_EQ(detect_placement({{"OMPI_COMM_WORLD_RANK", "5"},
                              {"OMPI_COMM_WORLD_SIZE", "6"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
                             k2x3)
                .scheduler_host,
            "");
}

TEST(RoleDetection, Pmi) {
  const NodePlacement p =
      detect_placement({{"PMI_RANK", "3"}, {"PMI_SIZE", "6"}, {"MPI_LOCALNRANKS", "6"}}, k2x3);
  EXPECT_EQ(p.scheme, EnvScheme::kPmi);
  EXPECT_EQ(p.role, NodeRole::kWorker);
  EXPECT_EQ(p.role_rank, 0u);
  EXPECT_EQ(p.global_rank, 3u);
  EXPECT_EQ(p.scheduler_host, "127.0.0.1");
}

TEST(RoleDetection, ParafabVariablesGiveTheRoleRank) {
  const EnvMap base = {{"PARAFAB_SCHEDULER", "head.example:9000"}};
  EnvMap e = base;
  e["PARAFAB_ROLE"] = "scheduler";
  NodePlacement p = detect_placement(e, k2x3);
  EXPECT_EQ(p.scheme, EnvScheme::kParafab);
  EXPECT_EQ(p.role, NodeRole::kScheduler);
  EXPECT_EQ(p.global_rank, 0u);
  e["PARAFAB_ROLE"] = "server";
  e["PARAFAB_RANK"] = "1";
  p = detect_placement(e, k2x3);
  EXPECT_EQ(p.role, NodeRole::kServer);
  EXPECT_EQ(p.role_rank, 1u);
  EXPECT_EQ(p.global_rank, 2u);
  EXPECT_EQ(p.scheduler_host, "head.example");
  EXPECT_EQ(p.scheduler_port, std::optional<uint16_t>(9000));
  e["PARAFAB_ROLE"] = "worker";
  e["PARAFAB_RANK"] = "2";
  p = detect_placement(e, k2x3);
  EXPECT_EQ(p.role, NodeRole::kWorker);
  EXPECT_EQ(p.role_rank, 2u);
  EXPECT_EQ(p.global_rank, 5u);
}

TEST(RoleDetection, PrecedenceParafabThenSlurmThenOmpiThenPmi) {
  EnvMap e = {{"PARAFAB_ROLE", "worker"}, {"PARAFAB_RANK", "0"},       {"SLURM_PROCID", "1"},
              {"SLURM_NTASKS", "6"},      {"SLURM_NODELIST", "s1"},    {"OMPI_COMM_WORLD_RANK", "2"},
              {"OMPI_COMM_WORLD_SIZE", "6"}, {"PMI_RANK", "0"},        {"PMI_SIZE", "6"}};
  EXPECT_EQ(detect_placement(e, k2x3).scheme, EnvScheme::kParafab);
  e["PARAFAB_ROLE"] = "";  // empty counts as unset
  EXPECT_EQ(detect_placement(e, k2x3).scheme, EnvScheme::kSlurm);
  EXPECT_EQ(detect_placement(e, k2x3).global_rank, 1u);
  e.erase("SLURM_PROCID");
  EXPECT_EQ(detect_placement(e, k2x3).scheme, EnvScheme::kOmpi);
  EXPECT_EQ(detect_placement(e, k2x3).global_rank, 2u);
  e.erase("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(detect_placement(e, k2x3).scheme, EnvScheme::kPmi);
  // A forced scheme reads only its own variables.
  e["SLURM_PROCID"] = "1";
  EXPECT_EQ(detect_placement(e, k2x3, EnvScheme::kPmi).global_rank, 0u);
  EXPECT_ERROR_HAS(detect_placement(e, k2x3, EnvScheme::kOmpi), "OMPI_COMM_WORLD_RANK is not set");
}

TEST(RoleDetection, ParafabSchedulerOverridesTheNodeListHost) {
  const NodePlacement p = detect_placement(
      {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "6"}, {"SLURM_NODELIST", "n[1-2]"}, {"PARAFAB_SCHEDULER", "10.1.2.3"}},
      k2x3);
  EXPECT_EQ(p.scheduler_host, "10.1.2.3");
  EXPECT_FALSE(p.scheduler_port.has_value());
}

// What launch writes for an IPv6 scheduler host: [ADDRESS]:PORT (a bare
// IPv6 address is a host without a port).
TEST(RoleDetection, ParafabSchedulerTakesIpv6InBrackets) {
  const EnvMap base = {{"PARAFAB_ROLE", "worker"}, {"PARAFAB_RANK", "0"}};
  auto placed = [&](const std::string& scheduler) {
    EnvMap e = base;
    e["PARAFAB_SCHEDULER"] = scheduler;
    return detect_placement(e, k2x3);
  };
  NodePlacement p = placed("[fe80::1]:9737");
  EXPECT_EQ(p.scheduler_host, "fe80::1");
  EXPECT_EQ(p.scheduler_port, std::optional<uint16_t>(9737));
  p = placed("[fe80::1]");
  EXPECT_EQ(p.scheduler_host, "fe80::1");
  EXPECT_FALSE(p.scheduler_port.has_value());
  p = placed("fe80::1");
  EXPECT_EQ(p.scheduler_host, "fe80::1");
  EXPECT_FALSE(p.scheduler_port.has_value());
  // As --scheduler reads it (host_port.h): a bare address, not fe80::1 port 9737.
  p = placed("fe80::1:9737");
  EXPECT_EQ(p.scheduler_host, "fe80::1:9737");
  EXPECT_FALSE(p.scheduler_port.has_value());
  for (const std::string bad : {"[fe80::1", "[fe80::1]9737", "[fe80::1]:", "[fe80::1]:0", "[fe80::1]:x"}) {
    EXPECT_ERROR_HAS(placed(bad), "PARAFAB_SCHEDULER='" + bad + "'");
  }
  EXPECT_ERROR_HAS(placed("[]:9737"), "no host");
}

TEST(RoleDetection, NothingSetNamesEveryScheme) {
  const std::string msg = error_of([] { (void)detect_placement({{"HOME", "/root"}}, k2x3); });
  for (const char* v : {"PARAFAB_ROLE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    EXPECT_NE(msg.find(v), std::string::npos) << msg;
  }
}

TEST(RoleDetection, BadValuesAreNamed) {
  EXPECT_ERROR_HAS(detect_placement({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "6"}}, k2x3), "SLURM_PROCID='x1'");
  EXPECT_ERROR_HAS(detect_placement({{"SLURM_PROCID", "-1"}, {"SLURM_NTASKS", "6"}}, k2x3), "SLURM_PROCID='-1'");
  EXPECT_ERROR_HAS(detect_placement({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "6 "}}, k2x3), "SLURM_NTASKS='6 '");
  EXPECT_ERROR_HAS(detect_placement({{"SLURM_PROCID", "1"}}, k2x3), "SLURM_NTASKS or SLURM_NPROCS");
  EXPECT_ERROR_HAS(detect_placement({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "6"}}, k2x3),
                   "SLURM_PROCID=6 is not below SLURM_NTASKS=6");
  EXPECT_ERROR_HAS(detect_placement({{"PMI_RANK", "0"}, {"PMI_SIZE", "5"}}, k2x3),
                   "PMI_SIZE=5 but the job needs 1 scheduler + 2 servers + 3 workers = 6 processes");
  EXPECT_ERROR_HAS(detect_placement({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "7"}}, k2x3),
                   "OMPI_COMM_WORLD_SIZE=7");
  EXPECT_ERROR_HAS(detect_placement({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "six"}},
                                    k2x3),
                   "OMPI_COMM_WORLD_LOCAL_SIZE='six'");
  EXPECT_ERROR_HAS(detect_placement({{"PARAFAB_ROLE", "boss"}}, k2x3), "PARAFAB_ROLE='boss'");
  EXPECT_ERROR_HAS(detect_placement({{"PARAFAB_ROLE", "worker"}}, k2x3), "PARAFAB_ROLE=worker needs PARAFAB_RANK");
  EXPECT_ERROR_HAS(detect_placement({{"PARAFAB_ROLE", "server"}, {"PARAFAB_RANK", "2"}}, k2x3),
                   "PARAFAB_ROLE=server PARAFAB_RANK=2: the job has 2 servers");
  EXPECT_ERROR_HAS(detect_placement({{"PARAFAB_ROLE", "scheduler"}, {"PARAFAB_RANK", "1"}}, k2x3),
                   "PARAFAB_RANK=1");
  EXPECT_ERROR_HAS(
      detect_placement({{"PARAFAB_ROLE", "worker"}, {"PARAFAB_RANK", "0"}, {"PARAFAB_SCHEDULER", "h:0"}}, k2x3),
      "PARAFAB_SCHEDULER='h:0'");
  EXPECT_ERROR_HAS(
      detect_placement({{"PARAFAB_ROLE", "worker"}, {"PARAFAB_RANK", "0"}, {"PARAFAB_SCHEDULER", ":9000"}}, k2x3),
      "no host");
  EXPECT_ERROR_HAS(
      detect_placement({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_NODELIST", "n[3-1]"}}, k2x3),
      "node list 'n[3-1]'");
  EXPECT_ERROR_HAS(parse_env_scheme("mpich"), "launcher 'mpich'");
}

TEST(RoleDetection, JobShapeFromFlagsOrVariables) {
  JobShape s = resolve_job_shape({}, 2u, 3u);
  EXPECT_EQ(s.servers, 2u);
  EXPECT_EQ(s.workers, 3u);
  s = resolve_job_shape({{"PARAFAB_NUM_SERVERS", "4"}, {"PARAFAB_NUM_WORKERS", "8"}}, std::nullopt, std::nullopt);
  EXPECT_EQ(s.size(), 13u);
  s = resolve_job_shape({{"PARAFAB_NUM_SERVERS", "4"}}, 4u, 1u);  // agreeing is fine
  EXPECT_EQ(s.servers, 4u);
  EXPECT_ERROR_HAS(resolve_job_shape({{"PARAFAB_NUM_SERVERS", "4"}}, 2u, 1u),
                   "--servers 2 disagrees with PARAFAB_NUM_SERVERS=4");
  EXPECT_ERROR_HAS(resolve_job_shape({}, 2u, std::nullopt), "--workers N or set PARAFAB_NUM_WORKERS");
  EXPECT_ERROR_HAS(resolve_job_shape({{"PARAFAB_NUM_WORKERS", "0"}}, 1u, std::nullopt), "PARAFAB_NUM_WORKERS 0");
  EXPECT_ERROR_HAS(resolve_job_shape({{"PARAFAB_NUM_WORKERS", "many"}}, 1u, std::nullopt),
                   "PARAFAB_NUM_WORKERS='many'");
}

TEST(SlurmNodeList, Expands) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("localhost"), V{"localhost"});
  EXPECT_EQ(expand_slurm_nodelist("node[01-03,07]"), (V{"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(expand_slurm_nodelist("a,b-1,c"), (V{"a", "b-1", "c"}));
  EXPECT_EQ(expand_slurm_nodelist("n[8-10]"), (V{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("n[08-10]"), (V{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("gpu-[1-2],cpu[5],login"), (V{"gpu-1", "gpu-2", "cpu5", "login"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[0-1]"), (V{"r1n0", "r1n1", "r2n0", "r2n1"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]-ib"), (V{"r1-ib", "r2-ib"}));
  EXPECT_EQ(expand_slurm_nodelist("[1-2]x"), (V{"1x", "2x"}));
  EXPECT_EQ(expand_slurm_nodelist("node[001-100]").size(), 100u);
  EXPECT_EQ(expand_slurm_nodelist("node[001-100]").back(), "node100");
}

TEST(SlurmNodeList, BadSyntaxIsNamed) {
  for (const char* bad : {"", "a,,b", "a,", "n[1-2", "n1-2]", "n[[1]]", "n[]", "n[1,]", "n[a-b]", "n[3-1]",
                          "n[1-2-3]"}) {
    const std::string msg = error_of([&] { (void)expand_slurm_nodelist(bad); });
    EXPECT_NE(msg.find(std::string("node list '") + bad + "'"), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_ERROR_HAS(expand_slurm_nodelist("n[1-1000000000]"), "more than");
  EXPECT_ERROR_HAS(expand_slurm_nodelist("a[1-100]b[1-100]", 1000), "more than 1000 hosts");
}

}  // namespace
}  // namespace parafab::apps
