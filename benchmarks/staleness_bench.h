// `parafab bench staleness`: the same job (2 servers, 3 workers, logistic
// regression on a planted gen-data set) under BSP, SSP(1), SSP(4), SSP(16) and ASP, with
// the last worker slowed by a fixed sleep after each of its batches; worker
// 0 (a fast one) evaluates the held-out set every --eval-interval seconds
// and once more after every worker has finished. Writes a CSV of
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
  uint64_t examples = 100000, test_examples = 10000, features = 1 << 15;
  int nnz = 20;
  int epochs = 2;
  int servers = 2, workers = 3;
  double slow_ms = 20;          // the last worker's sleep after each batch
  double eval_interval = 0.2;  // seconds
  // fm with no factors is logistic regression through the minibatch trainer
  // (the planted data is linear: factors would only overfit the picture).
  std::string model_flags = "--model fm --factors 0 --lr 0.05";
  std::string out_dir = "staleness";
  std::string json_path;
  uint64_t seed = 1;
};

// Returns 0, or 1 when a run failed (its output is printed).
int run_staleness_bench(const StalenessBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
