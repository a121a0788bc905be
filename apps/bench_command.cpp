// `parafab bench kernels|train|fabric|kv`: throughput beside ceilings measured in the
// same run (DESIGN.md, "Benchmark output").
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "apps/flag_checks.h"
#include "benchmarks/fabric_bench.h"
#include "benchmarks/kernel_bench.h"
#include "benchmarks/kv_bench.h"
#include "benchmarks/models_bench.h"
#include "benchmarks/staleness_bench.h"
#include "benchmarks/train_bench.h"

namespace parafab::apps {

void add_bench_command(CLI::App& root, CommandContext& ctx) {
  CLI::App* bench = root.add_subcommand("bench", "Benchmarks: each figure beside a ceiling measured in the same run");
  bench->require_subcommand(1);

  auto k = std::make_shared<benchmarks::KernelBenchOptions>();
  k->threads = default_threads();
  CLI::App* kc = bench->add_subcommand("kernels", "Sparse gradient, Hogwild, key compaction and metric kernels vs a memory copy");
  kc->add_option("--threads", k->threads, "Host threads")->check(kPositiveNumber)->capture_default_str();
  kc->add_option("--rows", k->rows, "Rows of the CSR batch")->check(kPositiveNumber)->capture_default_str();
  kc->add_option("--nnz", k->nnz_per_row, "Nonzeros per row")->check(kPositiveNumber)->capture_default_str();
  kc->add_option("--slots", k->slots, "Model slots")->check(kPositiveNumber)->capture_default_str();
  kc->add_option("--repeats", k->repeats, "Timed repetitions (best is kept)")->check(kPositiveNumber)->capture_default_str();
  kc->add_option("--seed", k->seed, "Seed of the random batch")->capture_default_str();
  kc->add_option("--json", k->json_path, "Also write one JSON object per line to this file")->check(kWritableFile);
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
  tc->add_option("--json", t->json_path, "Also write one JSON object per line to this file")->check(kWritableFile);
  tc->callback([t, &ctx] {
    ctx.exit_code = run_guarded("bench train", [&] { return benchmarks::run_train_bench(*t, std::cout); });
  });

  auto f = std::make_shared<benchmarks::FabricBenchOptions>();
  auto f_timeout_ms = std::make_shared<int64_t>(f->timeout.count());
  CLI::App* fc = bench->add_subcommand(
      "fabric", "Tagged messages and RMA reads over rdma::Endpoint vs fi_pingpong, per provider and size");
  fc->add_option("--provider", f->providers, "libfabric providers (repeat, or a comma list)")
      ->delimiter(',')
      ->capture_default_str();
  fc->add_option("--sizes", f->sizes, "Message sizes in bytes (K, M suffixes: powers of 1024)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  fc->add_option("--iterations", f->iterations, "Timed iterations per case and size; 0: clamp(512 MiB / size, 200, 5000)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  fc->add_option("--rounds", f->rounds,
                 "Rounds per size, each fi_pingpong then ours: figures are the rounds' medians, with the lowest "
                 "and highest ratio of a round (ratio_min, ratio_max)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  fc->add_option("--window", f->window, "Sends or reads in flight in the bandwidth cases")
      ->check(kPositiveNumber)
      ->capture_default_str();
  fc->add_flag("!--no-verify", f->verify, "Skip the data verification");
  fc->add_flag("!--no-ceiling", f->ceiling, "Skip fi_pingpong");
  fc->add_flag("!--no-busy-poll", f->busy_poll, "Let the endpoints sleep when idle (the default progress) instead of polling like fi_pingpong");
  fc->add_option("--fi-pingpong", f->fi_pingpong, "fi_pingpong executable (looked up on PATH)")->capture_default_str();
  fc->add_option("--timeout-ms", *f_timeout_ms, "Timeout of each operation and each fi_pingpong run")
      ->check(kPositiveNumber)
      ->capture_default_str();
  fc->add_option("--json", f->json_path, "Also write one JSON object per line to this file")->check(kWritableFile);
  fc->callback([f, f_timeout_ms, &ctx] {
    f->timeout = std::chrono::milliseconds(*f_timeout_ms);
    ctx.exit_code = run_guarded("bench fabric", [&] { return benchmarks::run_fabric_bench(*f, std::cout); });
  });
  auto kv = std::make_shared<benchmarks::KvBenchOptions>();
  auto kv_timeout_ms = std::make_shared<int64_t>(kv->timeout.count());
  CLI::App* kvc = bench->add_subcommand(
      "kv", "Parameter-server push/pull throughput and latency vs the fabric's own figures; sparse table bytes per key");
  kvc->add_option("--provider", kv->providers, "libfabric providers (repeat, or a comma list)")
      ->delimiter(',')
      ->capture_default_str();
  kvc->add_option("--servers", kv->servers, "Servers (threads of this process)")->check(kPositiveNumber)->capture_default_str();
  kvc->add_option("--workers", kv->workers, "Workers (threads of this process)")->check(kPositiveNumber)->capture_default_str();
  kvc->add_option("--apply-threads", kv->apply_threads,
                  "Threads each server applies one large push (or answers one large pull) with; 0: one per hardware "
                  "thread, at most 4")
      ->capture_default_str();
  kvc->add_option("--sizes", kv->dense_sizes, "Dense request sizes in bytes, multiples of 4 KiB (K, M suffixes)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  kvc->add_option("--sparse-keys", kv->sparse_keys, "Keys per sparse push and pull")->check(kPositiveNumber)->capture_default_str();
  kvc->add_option("--window", kv->window, "Dense requests in flight in the *_window cases; 0 or 1 skips them")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  kvc->add_option("--seconds", kv->case_seconds, "Timed budget of each case")->check(kNonNegativeNumber)->capture_default_str();
  kvc->add_option("--min-iterations", kv->min_iterations, "Requests per worker and case, at least")
      ->check(kPositiveNumber)
      ->capture_default_str();
  kvc->add_option("--max-iterations", kv->max_iterations, "Requests per worker and case, at most")
      ->check(kPositiveNumber)
      ->capture_default_str();
  kvc->add_option("--max-insert-pushes", kv->max_insert_pushes, "Pushes of fresh keys per worker in sparse_push_insert")
      ->check(kPositiveNumber)
      ->capture_default_str();
  kvc->add_option("--memory-keys", kv->memory_keys, "Keys of the sparse_memory table; 0 skips it")->capture_default_str();
  kvc->add_option("--big-table-keys", kv->big_table_keys,
                  "Keys the servers hold in sparse_push_big_table, which pushes --sparse-keys of them at random; 0 skips it")
      ->capture_default_str();
  kvc->add_option("--rounds", kv->rounds,
                  "Rounds, each the fabric's figures then every case: figures are the rounds' medians, with the "
                  "lowest and highest ratio of a round (ratio_min, ratio_max)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  kvc->add_option("--fabric-iterations", kv->fabric_iterations, "bench fabric's iterations per size; 0: its default")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  kvc->add_flag("!--no-verify", kv->verify, "Skip the verification of pulled values");
  kvc->add_flag("!--no-ceiling", kv->ceiling, "Skip fi_pingpong (the fabric's in-process figures stay)");
  kvc->add_flag("!--no-busy-poll", kv->busy_poll, "Progress threads that sleep when idle instead of polling endpoints");
  kvc->add_flag("!--no-landing", kv->land,
                "Copy dense pull replies into the output array instead of receiving them straight into it");
  kvc->add_option("--fi-pingpong", kv->fi_pingpong, "fi_pingpong executable (looked up on PATH)")->capture_default_str();
  kvc->add_option("--timeout-ms", *kv_timeout_ms, "Timeout of each operation and each fi_pingpong run")
      ->check(kPositiveNumber)
      ->capture_default_str();
  kvc->add_option("--seed", kv->seed, "Seed of the keys")->capture_default_str();
  kvc->add_option("--json", kv->json_path, "Also write one JSON object per line to this file")->check(kWritableFile);
  kvc->callback([kv, kv_timeout_ms, &ctx] {
    kv->timeout = std::chrono::milliseconds(*kv_timeout_ms);
    ctx.exit_code = run_guarded("bench kv", [&] { return benchmarks::run_kv_bench(*kv, std::cout); });
  });

  auto mb = std::make_shared<benchmarks::ModelsBenchOptions>();
  CLI::App* mc = bench->add_subcommand(
      "models", "lr, fm and dnn in one process and by 2 servers x 2 workers (BSP, SSP(4)): held-out log loss and "
                "examples/s beside one process's");
  mc->add_option("--format", mb->format, "Generated data: criteo (planted crosses) or libsvm")
      ->check(CLI::IsMember({"criteo", "libsvm"}))
      ->capture_default_str();
  mc->add_option("--examples", mb->examples, "Training examples")->capture_default_str();
  mc->add_option("--test-examples", mb->test_examples, "Held-out examples")->capture_default_str();
  mc->add_option("--epochs", mb->epochs, "Epochs")->capture_default_str();
  mc->add_option("--servers", mb->servers, "Servers")->check(kPositiveNumber)->capture_default_str();
  mc->add_option("--workers", mb->workers, "Workers")->check(kPositiveNumber)->capture_default_str();
  mc->add_option("--models", mb->models, "Models")->delimiter(',')->capture_default_str();
  mc->add_option("--consistency", mb->consistency, "Consistency settings of the distributed runs")
      ->delimiter(',')
      ->capture_default_str();
  mc->add_option("--dnn-flags", mb->dnn_flags, "parafab train flags of the dnn")->capture_default_str();
  mc->add_option("--data-dir", mb->data_dir, "Where the generated data set is kept between runs")->capture_default_str();
  mc->add_option("--seed", mb->seed, "Seed of the data set")->capture_default_str();
  mc->add_option("--batch-orders", mb->batch_orders,
                 "Run every job this many times, with train --seed 1..N (the minibatch order), and compare the means "
                 "too: one process's loss itself moves with the order")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  mc->add_option("--json", mb->json_path, "Also write one JSON object per line to this file")->check(kWritableFile);
  mc->callback([mb, &ctx] {
    ctx.exit_code = run_guarded("bench models", [&] { return benchmarks::run_models_bench(*mb, std::cout); });
  });

  auto st = std::make_shared<benchmarks::StalenessBenchOptions>();
  CLI::App* sc = bench->add_subcommand(
      "staleness", "One job under BSP, SSP(1), SSP(4), SSP(16), ASP with a slowed worker: held-out log loss against "
                   "wall time (CSV and PNG)");
  sc->add_option("--settings", st->settings, "Consistency settings")->delimiter(',')->capture_default_str();
  sc->add_option("--examples", st->examples, "Training examples")->capture_default_str();
  sc->add_option("--test-examples", st->test_examples, "Held-out examples")->capture_default_str();
  sc->add_option("--features", st->features, "Features")->capture_default_str();
  sc->add_option("--nnz", st->nnz, "Nonzeros per example")->capture_default_str();
  sc->add_option("--epochs", st->epochs, "Epochs")->capture_default_str();
  sc->add_option("--servers", st->servers, "Servers")->check(kPositiveNumber)->capture_default_str();
  sc->add_option("--workers", st->workers, "Workers (the last one is the slow one; worker 0 evaluates)")->capture_default_str();
  sc->add_option("--slow-ms", st->slow_ms, "The last worker's sleep after each batch")->capture_default_str();
  sc->add_option("--eval-interval", st->eval_interval, "Seconds between held-out evaluations")->capture_default_str();
  sc->add_option("--model-flags", st->model_flags, "parafab train flags of the model")->capture_default_str();
  sc->add_option("--out-dir", st->out_dir, "Where the data, metrics, CSV and PNG go")->capture_default_str();
  sc->add_option("--seed", st->seed, "Seed of the data set")->capture_default_str();
  sc->add_option("--json", st->json_path, "Also write one JSON object per line to this file")->check(kWritableFile);
  sc->callback([st, &ctx] {
    ctx.exit_code = run_guarded("bench staleness", [&] { return benchmarks::run_staleness_bench(*st, std::cout); });
  });
}

}  // namespace parafab::apps
