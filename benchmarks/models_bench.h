// `parafab bench models`: lr, fm and dnn trained in one process and by
// 2 servers x 2 workers under `parafab launch` (BSP and SSP(4)) on the same
// generated data, at full size: the held-out log loss of each job beside
// the one-process loss (ratio: the 1% goal), and the job's examples/s (the
// workers' sum) beside one process's. With batch_orders N > 1 every job
// runs N times, with `train --seed 1 … N` (the order of the minibatches),
// and the means are compared too: one process's own loss moves with the
// order (the dnn by about 1% on the default data), so one order alone
// cannot tell a 1% gap from chance.
//
//   benchmarks::ModelsBenchOptions o;   // 1M examples, Criteo sample with crosses
//   return benchmarks::run_models_bench(o, std::cout);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace parafab::benchmarks {

struct ModelsBenchOptions {
  std::string parafab;                 // the binary (default: this process's)
  std::string format = "criteo";       // gen-data format: criteo (planted crosses) or libsvm
  uint64_t examples = 1'000'000, test_examples = 100'000;
  int epochs = 2;
  int servers = 2, workers = 2;
  std::vector<std::string> models = {"lr", "fm", "dnn"};
  std::vector<std::string> consistency = {"bsp", "ssp:4"};
  std::string dnn_flags = "--hidden 64,32 --embedding-dim 8";
  std::string data_dir = "data/generated/bench-models";  // generated once, reused
  std::string json_path;
  uint64_t seed = 1;     // of the data set
  int batch_orders = 1;  // runs of every job, train --seed 1 .. batch_orders
};

// Returns 0, or 1 when a run failed (its output is printed).
int run_models_bench(const ModelsBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
