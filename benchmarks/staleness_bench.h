// `parafab bench staleness`: the same job (2 servers, 3 workers, fm on a
// planted gen-data set) under BSP, SSP(1), SSP(4), SSP(16) and ASP, with
// worker 0 slowed by a fixed sleep after each of its batches; worker 0
// evaluates the held-out set every --eval-interval seconds. Writes a CSV of
// (setting, seconds, held-out log loss), a gnuplot script and, when gnuplot
// is installed, the PNG of held-out log loss against wall time, one line per
// setting: the picture to look at before choosing s.
//
//   benchmarks::StalenessBenchOptions o;  o.out_dir = "staleness";
//   benchmarks::run_staleness_bench(o, std::cout);   // staleness/staleness.csv, .png
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace parafab::benchmarks {

struct StalenessBenchOptions {
  std::string parafab;  // the binary (default: this process's)
  std::vector<std::string> settings = {"bsp", "ssp:1", "ssp:4", "ssp:16", "asp"};
  uint64_t examples = 60000, test_examples = 10000, features = 1 << 15;
  int nnz = 20;
  int epochs = 2;
  int servers = 2, workers = 3;
  double slow_ms = 4;          // worker 0's sleep after each batch
  double eval_interval = 0.5;  // seconds
  std::string model_flags = "--model fm --factors 4";
  std::string out_dir = "staleness";
  std::string json_path;
  uint64_t seed = 1;
};

// Returns 0, or 1 when a run failed (its output is printed).
int run_staleness_bench(const StalenessBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
