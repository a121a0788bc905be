// `parafab bench train`: training throughput and accuracy on a planted data
// set, beside references run in the same session: liblinear (accuracy: best
// held-out log loss over a grid of C) and, when `vw` is on PATH, Vowpal
// Wabbit (speed: examples/s of one logistic pass from its cache and from text).
//
//   benchmarks::TrainBenchOptions o;   // 1M examples, 2^20 features, 40 nnz
//   return benchmarks::run_train_bench(o, std::cout);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace parafab::benchmarks {

struct TrainBenchOptions {
  uint64_t examples = 1'000'000;
  uint64_t test_examples = 100'000;
  uint64_t features = 1 << 20;
  int nnz = 40;
  int epochs = 3;
  std::vector<int> threads = {1, 2};
  std::string data_dir = "data/generated/bench-train";  // generated once, reused
  std::string json_path;
  bool liblinear = true;
  std::vector<double> liblinear_c = {0.01, 0.03, 0.1, 0.3};
  bool vw = true;
  uint64_t seed = 1;
};

// Returns 0, or 1 when a run failed (the reason is printed).
int run_train_bench(const TrainBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
