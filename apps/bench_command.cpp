// `parafab bench kernels|train`: throughput beside ceilings measured in the
// same run (DESIGN.md, "Benchmark output").
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "benchmarks/kernel_bench.h"
#include "benchmarks/train_bench.h"

namespace parafab::apps {

void add_bench_command(CLI::App& root, CommandContext& ctx) {
  CLI::App* bench = root.add_subcommand("bench", "Benchmarks: each figure beside a ceiling measured in the same run");
  bench->require_subcommand(1);

  auto k = std::make_shared<benchmarks::KernelBenchOptions>();
  k->threads = default_threads();
  CLI::App* kc = bench->add_subcommand("kernels", "Sparse gradient, Hogwild, key compaction and metric kernels vs a memory copy");
  kc->add_option("--threads", k->threads, "Host threads")->check(CLI::PositiveNumber)->capture_default_str();
  kc->add_option("--rows", k->rows, "Rows of the CSR batch")->check(CLI::PositiveNumber)->capture_default_str();
  kc->add_option("--nnz", k->nnz_per_row, "Nonzeros per row")->check(CLI::PositiveNumber)->capture_default_str();
  kc->add_option("--slots", k->slots, "Model slots")->check(CLI::PositiveNumber)->capture_default_str();
  kc->add_option("--repeats", k->repeats, "Timed repetitions (best is kept)")->check(CLI::PositiveNumber)->capture_default_str();
  kc->add_option("--seed", k->seed, "Seed of the random batch")->capture_default_str();
  kc->add_option("--json", k->json_path, "Also write one JSON object per line to this file");
  kc->callback([k, &ctx] {
    ctx.exit_code = run_guarded("bench kernels", [&] { return benchmarks::run_kernel_bench(*k, std::cout); });
  });

  auto t = std::make_shared<benchmarks::TrainBenchOptions>();
  CLI::App* tc = bench->add_subcommand("train", "Training examples/s and held-out log loss vs liblinear and Vowpal Wabbit");
  tc->add_option("--examples", t->examples, "Training examples")->capture_default_str();
  tc->add_option("--test-examples", t->test_examples, "Held-out examples")->capture_default_str();
  tc->add_option("--features", t->features, "Features")->capture_default_str();
  tc->add_option("--nnz", t->nnz, "Nonzeros per example")->capture_default_str();
  tc->add_option("--epochs", t->epochs, "Epochs of parafab train")->capture_default_str();
  tc->add_option("--threads", t->threads, "Thread counts to measure")->delimiter(',')->capture_default_str();
  tc->add_option("--data-dir", t->data_dir, "Where the generated data set is kept between runs")->capture_default_str();
  tc->add_option("--liblinear-c", t->liblinear_c, "Grid of C for liblinear")->delimiter(',')->capture_default_str();
  tc->add_flag("!--no-liblinear", t->liblinear, "Skip the liblinear reference");
  tc->add_flag("!--no-vw", t->vw, "Skip the Vowpal Wabbit reference");
  tc->add_option("--seed", t->seed, "Seed of the data set")->capture_default_str();
  tc->add_option("--json", t->json_path, "Also write one JSON object per line to this file");
  tc->callback([t, &ctx] {
    ctx.exit_code = run_guarded("bench train", [&] { return benchmarks::run_train_bench(*t, std::cout); });
  });
}

}  // namespace parafab::apps
