// How many host threads a command uses when --threads is not given.
//
//   int t = apps::default_threads();   // PARAFAB_THREADS, else usable_cpus()
//
// usable_cpus() counts the CPUs of this process's affinity mask (a Slurm
// task's or a taskset's CPUs, not every CPU of the node). parafab launch
// sets PARAFAB_THREADS in each local worker's environment to its share,
// usable_cpus() / workers (at least 1): W workers of a job on one host that
// each took every CPU ran OpenMP's spinning threads W times over the cores
// (2 workers of lr on 2 cores: 29K examples/s for the job against 158K with
// one thread each).
#pragma once

#include <optional>
#include <string_view>

namespace parafab::apps {

inline constexpr const char* kThreadsEnv = "PARAFAB_THREADS";

// CPUs this process may run on, at least 1.
int usable_cpus();
// PARAFAB_THREADS when it holds a positive integer (anything else is
// ignored with a warning on stderr), else usable_cpus().
int default_threads();
// Each of `workers` workers' share of usable_cpus(), at least 1.
int cpu_share(int workers);
// text as a positive int (all of it, decimal), or nullopt.
std::optional<int> parse_positive_int(std::string_view text);

}  // namespace parafab::apps
