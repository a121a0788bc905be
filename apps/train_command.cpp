// `parafab train`: training lr, svm, fm or dnn, in this process or as one
// worker of a job (under parafab launch, srun, ... or with --scheduler).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "apps/acknowledged_pushes_report.h"
#include "apps/cluster_node.h"
#include "apps/commands.h"
#include "apps/data_loading.h"
#include "apps/evaluation_line.h"
#include "apps/flag_checks.h"
#include "kernels/memory.h"
#include "ps/checkpoint.h"
#include "worker/batch_schedule.h"
#include "worker/distributed_trainer.h"
#include "worker/kv_client.h"
#include "worker/linear_model_file.h"
#include "worker/local_trainer.h"
#include "worker/model_file.h"
#include "worker/model_spec.h"
#include "worker/model_trainer.h"
#include "worker/parameter_store.h"
#include "worker/synthetic_data.h"

namespace parafab::apps {
namespace {

// "worker W: N examples/s; pushed ... MB, pulled ... MB, R requests, ... MB sent",
// the start of a distributed worker's summary line.
std::string worker_traffic(uint32_t w, double examples_per_second, const worker::KvClientStats& st,
                           uint64_t bytes_sent) {
  return fmt::format("worker {}: {:.0f} examples/s; pushed {:.1f} MB, pulled {:.1f} MB, {} requests, {:.1f} MB sent", w,
                     examples_per_second, st.push_bytes / 1e6, st.pull_bytes / 1e6, st.requests,
                     static_cast<double>(bytes_sent) / 1e6);
}

// What the job recovered from, when anything: servers that came back under
// their rank (and what this worker sent them again), reads sent again for
// want of a reply, and what this worker's transport lost.
void report_recoveries(uint32_t w, const worker::KvClientStats& st, const rdma::EndpointStats& transport) {
  if (st.rejoins > 0) {
    std::fprintf(stderr,
                 "worker %u: %llu server rejoin%s; %llu unanswered request%s sent again; %llu gradient bytes of this "
                 "worker's acknowledged pushes lost (applied after the checkpoints the servers rejoined from)\n",
                 w, static_cast<unsigned long long>(st.rejoins), st.rejoins == 1 ? "" : "s",
                 static_cast<unsigned long long>(st.resent), st.resent == 1 ? "" : "s",
                 static_cast<unsigned long long>(st.bytes_lost_in_rejoins));
  }
  const std::string losses = rdma::describe_losses(transport);
  if (st.overdue_resent > 0 || !losses.empty()) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("worker {}: {} request{} sent again for want of a reply (--resend-after); transport: {}",
                             w, st.overdue_resent, st.overdue_resent == 1 ? "" : "s",
                             losses.empty() ? "no losses counted" : losses)
                     .c_str());
  }
}

struct TrainFlags {
  std::vector<std::string> train, test;  // one file, or several read as one data set
  std::string model = "lr", optimizer = "adagrad", cache, predictions, save_model, planted;
  std::string resume;  // a checkpoint set's directory
  DataFlags data;
  worker::TrainOptions opt;
  int hash_bits = 0;
  bool quiet = false;
  ClusterFlags cluster;           // distributed when a scheduler is given (flag or PARAFAB_SCHEDULER)
  bool no_pull_ahead = false;
  bool partition = false;
  bool delta_keys = false;  // --delta-keys: KvClientOptions::delta_varint_keys
  double resend_after_s = 10;  // --resend-after: KvClientOptions::resend_after
  bool pull_ahead = false;  // fm, dnn: off unless asked (it breaks read-my-writes; see --help)
  CLI::Option* lr_option = nullptr;
  CLI::Option* batch_option = nullptr;
  CLI::Option* l2_option = nullptr;
  // fm and dnn
  int factors = 8, embedding_dim = 8, classes = 2;
  std::string hidden = "128,64";
  uint32_t dense_features = 0;
  float dense_lr = 1e-3f;
  bool staleness_aware = false;
  std::string dense_reads = "auto";  // dnn distributed: how the MLP is pulled
  std::string metrics_out;
  double eval_interval = 0;
  double slow_ms = 0;  // per batch, the last worker only: the staleness study's straggler

  float ftrl_alpha = 0.1f, ftrl_beta = 1.0f, ftrl_l1 = 1.0f, ftrl_l2 = 1.0f;

  // lr with FTRL-Proximal runs through the minibatch trainer (an fm of no
  // factors is logistic regression) against tables with the FTRL updater.
  bool ftrl() const { return optimizer == "ftrl"; }
  bool linear() const { return (model == "lr" || model == "svm") && !ftrl(); }
};

// JSON lines for tools (--metrics-out): one object per progress report and
// evaluation, and a summary at the end.
class MetricsOut {
 public:
  explicit MetricsOut(const std::string& path) {
    if (path.empty()) return;
    f_ = std::fopen(path.c_str(), "w");
    if (f_ == nullptr) throw std::runtime_error(fmt::format("--metrics-out {}: cannot open for writing", path));
  }
  ~MetricsOut() {
    if (f_ != nullptr) std::fclose(f_);
  }
  MetricsOut(const MetricsOut&) = delete;
  MetricsOut& operator=(const MetricsOut&) = delete;
  void line(const std::string& json) {
    if (f_ == nullptr) return;
    std::fprintf(f_, "%s\n", json.c_str());
    std::fflush(f_);
  }
  bool on() const { return f_ != nullptr; }

 private:
  std::FILE* f_ = nullptr;
};

void check_status(const rdma::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.to_string());
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

// --metrics-out's record of a held-out evaluation; a set of no examples has
// no metrics (null), not a log loss of 0.
std::string heldout_json(double seconds, const worker::Evaluation& e) {
  const bool none = e.examples == 0;
  return fmt::format(R"({{"event": "heldout", "seconds": {}, "examples": {}, "log_loss": {}, "auc": {}, "accuracy": {}}})",
                     json_number(seconds), e.examples, none ? "null" : json_number(e.log_loss),
                     none ? "null" : json_number(e.auc), none ? "null" : json_number(e.accuracy));
}

// With --partition no worker sees all keys: every worker hashes them into
// the same 2^bits slots (--hash-bits, else the default).
worker::SlotMap partition_slot_map(int hash_bits) {
  return worker::SlotMap{worker::SlotMode::kHashed,
                         uint64_t{1} << (hash_bits > 0 ? hash_bits : worker::SlotMap::kDefaultHashBits)};
}

// --dense-reads: whether the dnn's MLP is read one-sided from the servers'
// shards (KvClient::dense_read) rather than pulled with messages.
bool one_sided_dense_reads(const std::string& mode, const rdma::Endpoint& ep) {
  const std::string& name = ep.provider().provider;
  if (mode == "message") return false;
  if (mode == "one-sided") {
    if (!ep.supports_rma()) {
      throw std::invalid_argument("--dense-reads one-sided: provider '" + name + "' has no FI_RMA");
    }
    return true;
  }
  // auto: where the provider reads remote memory itself. tcp;ofi_rxm
  // emulates RMA with messages, two or three round trips a read.
  const bool native = name.starts_with("shm") || name.starts_with("verbs") || name.starts_with("efa");
  return native && ep.supports_rma();
}

// --batch-size is the job's minibatch per clock, every model: W workers
// take 1/W of it each, so one clock of W workers moves the model as one
// batch of the single process does; under BSP the servers apply the round's
// pushes as one step (ps/merged_rounds.h). (Measured, dnn on 1M Criteo rows
// at 2 x 2: 256 rows a worker ended 1.8% above one process's held-out loss,
// 128 a worker 0.5%; lr/svm with a whole batch a worker at 3 workers under
// BSP 1.1% above, the round being three batches in one step.)
uint64_t job_batch_rows(const TrainFlags& flags) {
  return flags.batch_option != nullptr && flags.batch_option->count() > 0 ? flags.opt.batch_rows : 256;
}
uint64_t worker_batch_rows(const TrainFlags& flags, uint32_t workers) {
  return std::max<uint64_t>(1, (job_batch_rows(flags) + workers - 1) / workers);
}
std::string batch_text(const TrainFlags& flags, uint32_t workers) {
  return workers > 1 ? fmt::format("{} ({} for the job)", worker_batch_rows(flags, workers), job_batch_rows(flags))
                     : std::to_string(worker_batch_rows(flags, workers));
}

// The job's live workers (their indices), from the scheduler's notices of death.
worker::LiveWorkers live_workers_of(const ClusterNode& node) {
  return [&node] {
    const std::vector<uint32_t> dead = node.client->dead_ranks();
    std::vector<uint32_t> live;
    for (const ps::NodeInfo& n : node.map->workers) {
      if (std::find(dead.begin(), dead.end(), n.rank) == dead.end()) live.push_back(n.role_rank);
    }
    std::sort(live.begin(), live.end());
    return live;
  };
}

// The dead workers (under --on-worker-failure continue) whose batches this
// worker takes over (worker::adopted_parts), asked at each epoch's start:
// `take(dead, epoch, first)` gives their data, `first` the first time this
// worker takes `dead` over (it says so, and reads what it needs once).
template <class Rows>
using TakeOver = std::function<worker::AdoptedData<Rows>(uint32_t dead, int epoch, bool first)>;
template <class Rows>
worker::AdoptedSource<Rows> adopted_source(const ClusterNode& node, TakeOver<Rows> take) {
  auto taken = std::make_shared<std::set<uint32_t>>();
  return [&node, take = std::move(take), taken](int epoch) {
    std::vector<worker::AdoptedData<Rows>> out;
    for (const uint32_t dead : worker::adopted_parts(live_workers_of(node)(), node.map->num_workers(), node.role_rank)) {
      out.push_back(take(dead, epoch, taken->insert(dead).second));
    }
    return out;
  };
}

// --partition: the dead workers' parts of --train, each read with `read` on
// first need and kept for the later epochs.
template <class Rows>
worker::AdoptedSource<Rows> adopted_parts_of(const ClusterNode& node, std::function<Rows(uint32_t part)> read) {
  auto held = std::make_shared<std::map<uint32_t, Rows>>();
  return adopted_source<Rows>(node, [&node, read = std::move(read), held](uint32_t part, int epoch, bool first) {
    if (first) {
      const uint32_t workers = node.map->num_workers();
      std::fprintf(stderr, "%s\n",
                   fmt::format("worker {}: takes over part {}/{} of --train from epoch {} (worker {} is dead)",
                               node.role_rank, part + 1, workers, epoch, part)
                       .c_str());
      held->emplace(part, read(part));
    }
    return worker::AdoptedData<Rows>{part, &held->at(part)};
  });
}

// Without --partition: the dead workers' shares of --train, which every
// worker holds (`data`), trained in the clocks of this worker's own share.
template <class Rows>
worker::AdoptedSource<Rows> adopted_shares_of(const ClusterNode& node, const Rows& data) {
  return adopted_source<Rows>(node, [&node, &data](uint32_t dead, int epoch, bool first) {
    if (first) {
      std::fprintf(stderr, "%s\n",
                   fmt::format("worker {}: takes over worker {}'s batches of --train from epoch {} (worker {} is "
                               "dead), in the clocks of its own",
                               node.role_rank, dead, epoch, dead)
                       .c_str());
    }
    return worker::AdoptedData<Rows>{dead, &data, dead, node.map->num_workers()};
  });
}

// train --resume DIR: the clock up to which the checkpoint set in DIR holds
// every worker's iterations. This worker's clock continues from it and its
// first batches are skipped; the scheduler found the set (the cluster map
// carries its clock and files) and the servers load it. 0 without --resume.
uint64_t resume_clock(const std::string& dir, const ClusterNode& node, worker::KvClient& kv) {
  if (dir.empty()) return 0;
  if (node.map->resume_dir != dir || node.map->resume_paths.empty()) {
    throw std::runtime_error("worker " + std::to_string(node.role_rank) + ": --resume " + dir +
                             ", but the scheduler's map resumes from '" + node.map->resume_dir + "'");
  }
  const int64_t clock = node.map->resume_clock;
  kv.start_at_clock(clock);
  std::fprintf(stderr, "%s\n",
               fmt::format("worker {}: resuming from the checkpoint set in {} at clock {}", node.role_rank, dir, clock)
                   .c_str());
  return static_cast<uint64_t>(std::max<int64_t>(0, clock));
}

// After the workers' last barrier: the worker that evaluates and saves, the
// first live one (worker 0 unless it died under --on-worker-failure continue).
uint32_t evaluating_worker(const ClusterNode& node) {
  const std::vector<uint32_t> live = live_workers_of(node)();
  return live.empty() ? 0 : live.front();
}

// Worker 0 of a job prints (and writes to --metrics-out) the job's rate:
// every worker's examples, summed by the "trained" barrier, over the time
// from this worker's start to the barrier's release (the slowest worker's end).
void report_job_rate(bool reporter, uint32_t workers, uint64_t job_examples, double seconds, MetricsOut* metrics) {
  if (!reporter) return;
  const double rate = seconds > 0 ? static_cast<double>(job_examples) / seconds : 0.0;
  std::fprintf(stderr, "job: %llu examples by %u workers in %.2f s: %.0f examples/s in total\n",
               static_cast<unsigned long long>(job_examples), workers, seconds, rate);
  if (metrics != nullptr) {
    metrics->line(fmt::format(R"({{"event": "job", "workers": {}, "examples": {}, "seconds": {}, "examples_per_second": {}}})",
                              workers, job_examples, json_number(seconds), json_number(rate)));
  }
}

std::vector<int> parse_hidden(const std::string& text) {
  std::vector<int> h;
  if (text.empty() || text == "none") return h;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t j = std::min(text.find(',', i), text.size());
    const std::string part = text.substr(i, j - i);
    int v = 0;
    const auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || p != part.data() + part.size() || v < 1) {
      throw std::invalid_argument(fmt::format("--hidden {}: expected layer sizes like 256,128 (or none); bad '{}'", text, part));
    }
    h.push_back(v);
    i = j + 1;
  }
  return h;
}

// What a progress line prints, for both trainers.
std::function<void(const worker::TrainProgress&)> progress_printer(const TrainFlags& flags, const std::string& who) {
  const bool tty = ::isatty(STDERR_FILENO);
  const char* loss_name = flags.model == "svm" ? "hinge" : "log loss";
  const int epochs = flags.opt.epochs;
  const bool quiet = flags.quiet;
  return [=](const worker::TrainProgress& p) {
    if (quiet && !p.epoch_done) return;
    const std::string line = fmt::format("{}epoch {}/{}  {:>10}/{}  {:>8} ex/s  progressive {} {:.5f}", who, p.epoch,
                                         epochs, p.examples, p.epoch_examples, human_count(p.examples_per_second),
                                         loss_name, p.progressive_loss);
    if (tty) std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), p.epoch_done ? "\n" : "");
    else if (p.epoch_done || !quiet) std::fprintf(stderr, "%s\n", line.c_str());
  };
}

// The model file, then held-out metrics, planted loss and predictions: the
// same for a model trained here or pulled from the servers. The held-out
// set is read here unless the caller read it already (loaded).
void report_model(const TrainFlags& flags, const worker::LocalTrainer& trainer, const worker::SlotMap& map,
                  const worker::SlotCsr* train_csr, int threads, const worker::Dataset* loaded = nullptr) {
  if (train_csr != nullptr) {
    const worker::Evaluation tr = trainer.evaluate(*train_csr);
    std::printf("%s%s\n", evaluation_line("train   ", tr).c_str(),
                flags.model == "svm" ? fmt::format("  hinge {:.6f}", tr.hinge_loss).c_str() : "");
  }
  // The model first: a failure below (a bad test line, a full disk for the
  // predictions) must not lose what took the training to make.
  if (!flags.save_model.empty()) {
    worker::save_linear_model(flags.save_model, trainer.model());
    std::fprintf(stderr, "saved model to %s\n", flags.save_model.c_str());
  }
  if (!flags.test.empty()) {
    std::optional<worker::Dataset> read;
    if (loaded == nullptr) read = load_data("test", flags.test, flags.data, threads, "");
    const worker::Dataset& test = loaded != nullptr ? *loaded : *read;
    const worker::SlotCsr test_csr = worker::SlotCsr::build(test.view(), map, threads);
    std::vector<float> probs;
    const worker::Evaluation te = trainer.evaluate(test_csr, flags.predictions.empty() ? nullptr : &probs);
    std::printf("%s%s\n", evaluation_line("held-out", te).c_str(),
                flags.model == "svm" ? fmt::format("  hinge {:.6f}", te.hinge_loss).c_str() : "");
    report_unseen_keys("test", test_csr.dropped, test.nnz());
    if (!flags.planted.empty() && te.examples == 0) {
      std::printf("planted  (0 examples): no metrics\n");
    } else if (!flags.planted.empty()) {
      const double pl = worker::read_planted_model(flags.planted).log_loss(test.view());
      std::printf("planted  (%llu examples): log loss %.6f  (learned / planted = %.4f)\n",
                  static_cast<unsigned long long>(te.examples), pl, te.log_loss / pl);
    }
    if (!flags.predictions.empty()) {
      write_probabilities(flags.predictions, probs);
      std::fprintf(stderr, "wrote %zu predictions to %s\n", probs.size(), flags.predictions.c_str());
    }
  }
}

worker::KvClientOptions kv_options(const TrainFlags& flags) {
  worker::KvClientOptions o;
  o.delta_varint_keys = flags.delta_keys;
  o.resend_after = std::chrono::milliseconds(static_cast<int64_t>(flags.resend_after_s * 1000));
  return o;
}

int run_distributed_train(TrainFlags flags);
int run_model_train(const TrainFlags& flags, bool distributed);

int run_train(const TrainFlags& flags) {
  worker::validate_train_options(flags.opt);  // before reading what may be gigabytes of data
  const bool distributed = !flags.cluster.scheduler.empty() || std::getenv("PARAFAB_SCHEDULER") != nullptr;
  if (flags.ftrl() && flags.model != "lr") {
    throw std::invalid_argument("--optimizer ftrl: for --model lr (FTRL-Proximal is a logistic-regression method)");
  }
  if (!flags.resume.empty() && !distributed) {
    throw std::invalid_argument("--resume: for the workers of a job (its servers wrote the checkpoints)");
  }
  if (flags.partition && !distributed) {
    throw std::invalid_argument("--partition: for a worker of a job (one process reads the whole --train)");
  }
  if (flags.partition && !flags.cache.empty()) {
    throw std::invalid_argument("--partition: --cache holds a whole file; give one or the other");
  }
  // Before a job is joined or a file parsed.
  {
    std::vector<NamedPath> inputs;
    for (const std::string& t : flags.train) inputs.emplace_back("--train", t);
    for (const std::string& t : flags.test) inputs.emplace_back("--test", t);
    inputs.emplace_back("--planted", flags.planted);
    std::error_code ec;
    // A --cache that is a file (one --train) is written; a directory holds caches by name.
    const bool cache_file = !flags.cache.empty() && !std::filesystem::is_directory(flags.cache, ec);
    check_distinct_files(inputs, {{"--save-model", flags.save_model},
                                  {"--predictions", flags.predictions},
                                  {"--metrics-out", flags.metrics_out},
                                  {"--cache", cache_file ? flags.cache : std::string()}});
  }
  check_one_format(flags.train, flags.data);
  check_one_format(flags.test, flags.data);
  (void)cache_paths_for(flags.cache, flags.train);
  if ((flags.model == "lr" || flags.model == "svm") && flags.classes != 2) {
    throw std::invalid_argument("--classes: lr and svm are binary; --model dnn takes --classes K");
  }
  if (!flags.linear()) return run_model_train(flags, distributed);
  if (distributed) return run_distributed_train(flags);
  worker::TrainOptions opt = flags.opt;
  opt.loss = flags.model == "svm" ? kernels::Loss::kHinge : kernels::Loss::kLogistic;
  opt.adagrad = flags.optimizer == "adagrad";
  if (!flags.predictions.empty() && flags.test.empty())
    throw std::invalid_argument("--predictions needs --test (the examples to predict)");
  if (!flags.planted.empty() && flags.test.empty())
    throw std::invalid_argument("--planted needs --test (the planted loss is measured on it)");

  kernels::set_host_threads(opt.threads);
  std::fprintf(stderr, "%s\n",
               fmt::format("parafab train: model {}, optimizer {}, lr {}, l2 {}, epochs {}, batch {}, "
                           "threads {}, seed {}, backend {}",
                           flags.model, flags.optimizer, opt.lr, opt.l2, opt.epochs, opt.batch_rows,
                           opt.threads, opt.seed, kernels::backend_description())
                   .c_str());
  const worker::Dataset train = load_training_data(flags.train, flags.data, opt.threads, flags.cache);
  std::optional<worker::Dataset> test;
  if (!flags.test.empty()) test = load_data("test", flags.test, flags.data, opt.threads, "");

  const worker::SlotMap map = worker::SlotMap::for_data(train.view(), flags.hash_bits);
  const worker::SlotCsr train_csr = worker::SlotCsr::build(train.view(), map, opt.threads);
  std::fprintf(stderr, "model slots: %s\n", map.describe().c_str());

  worker::LocalTrainer trainer(opt, map);
  const auto t0 = std::chrono::steady_clock::now();
  trainer.train(train_csr, progress_printer(flags, ""));
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "trained in %.2f s: %.0f examples/s\n", train_s,
               train_s > 0 ? static_cast<double>(train_csr.rows()) * opt.epochs / train_s : 0.0);
  report_model(flags, trainer, map, &train_csr, opt.threads, test ? &*test : nullptr);
  return 0;
}

// One worker of a distributed job: this worker's share of the batches
// against the servers; worker 0 then pulls the model and reports on it.
int run_distributed_train(TrainFlags flags) {
  resolve_cluster_flags(flags.cluster);
  const worker::TrainOptions& opt = flags.opt;
  if (!flags.predictions.empty() && flags.test.empty())
    throw std::invalid_argument("--predictions needs --test (the examples to predict)");
  if (!flags.planted.empty() && flags.test.empty())
    throw std::invalid_argument("--planted needs --test (the planted loss is measured on it)");
  kernels::set_host_threads(opt.threads);
  // Whole file: every worker reads all of --train, so all build the same
  // slot map, and trains on its batches. --partition: each reads only its
  // byte range and the slot map is hashed, so every worker agrees on it
  // without the others' data. The part is read after joining (the rank
  // names it).
  worker::SlotMap map;
  std::optional<worker::Dataset> train;
  if (flags.partition) {
    map = partition_slot_map(flags.hash_bits);
  } else {
    train = load_training_data(flags.train, flags.data, opt.threads, flags.cache);
    map = worker::SlotMap::for_data(train->view(), flags.hash_bits);
  }

  ps::TableSchema table;
  table.id = 0;
  table.kind = ps::TableKind::kSparse;
  table.width = 1;
  table.updater.kind = flags.optimizer == "adagrad" ? ps::UpdaterKind::kAdaGrad : ps::UpdaterKind::kSgd;
  table.updater.learning_rate = opt.lr;
  ClusterNode node = join_cluster(flags.cluster, ps::Role::kWorker, {}, {table}, flags.resume);
  const ps::TableSchema& held = node.map->table(0);
  if (held.kind != ps::TableKind::kSparse || held.width != 1) {
    throw std::invalid_argument("the job's table 0 is not a sparse table of width 1: a linear model needs one");
  }
  worker::KvClient kv(*node.endpoint, *node.map, node.role_rank, kv_options(flags));
  const auto attached = node.attach(kv);
  const AcknowledgedPushesReport acked(node.role_rank, kv);
  worker::DistributedTrainOptions dopt;
  dopt.skip_clocks = resume_clock(flags.resume, node, kv);
  dopt.loss = flags.model == "svm" ? kernels::Loss::kHinge : kernels::Loss::kLogistic;
  dopt.epochs = opt.epochs;
  dopt.batch_rows = worker_batch_rows(flags, node.map->num_workers());
  dopt.l2 = opt.l2;
  dopt.seed = opt.seed;
  dopt.shuffle = opt.shuffle;
  dopt.pull_ahead = !flags.no_pull_ahead;
  dopt.progress_seconds = opt.progress_seconds;
  // The straggler (--slow-ms) is the last worker, as for fm and dnn.
  if (flags.slow_ms > 0 && node.role_rank + 1 == node.map->num_workers() && node.map->num_workers() > 1) {
    dopt.after_batch = [ms = flags.slow_ms](uint64_t) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    };
  }
  // A dead worker's batches go to a survivor, trained in the clocks of its
  // own: its share of --train, or with --partition its part of the file.
  const uint32_t w = node.role_rank, workers = node.map->num_workers();
  auto read_part = [&](uint32_t part) {
    return load_data(fmt::format("train part {}/{}", part + 1, workers), flags.train, flags.data, opt.threads, "", 2,
                     part, workers);
  };
  if (flags.partition) {
    dopt.adopted_parts = adopted_parts_of<worker::SlotCsr>(node, [&](uint32_t part) {
      return worker::SlotCsr::build(read_part(part).view(), map, opt.threads);
    });
    train = read_part(w);
  }
  const worker::SlotCsr train_csr = worker::SlotCsr::build(train->view(), map, opt.threads);
  if (!flags.partition) dopt.adopted_parts = adopted_shares_of(node, train_csr);
  train.reset();
  // Worker 0 evaluates (unless it dies): it reads --test now, so that a bad
  // line there stops the job before training, not after.
  std::optional<worker::Dataset> test;
  if (!flags.test.empty() && w == 0) test = load_data("test", flags.test, flags.data, opt.threads, "");
  std::fprintf(stderr, "%s\n",
               fmt::format("parafab train: worker {} of {}: model {}, table 0 {} on {} servers, batch {}, epochs {}, "
                           "pull-ahead {}, {}, backend {}",
                           w, workers, flags.model, ps::to_string(held.updater), node.map->num_servers(),
                           batch_text(flags, workers), dopt.epochs, dopt.pull_ahead ? "on" : "off",
                           flags.partition ? "its part of --train" : "its batches of all of --train",
                           kernels::backend_description())
                   .c_str());
  // With --partition every row read is this worker's: it takes all batches.
  worker::DistributedTrainer trainer(kv, map, dopt, flags.partition ? 0 : w, flags.partition ? 1 : workers);
  const auto t0 = std::chrono::steady_clock::now();
  trainer.train(train_csr, progress_printer(flags, fmt::format("worker {}: ", w)));
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Leave the SSP minimum: with --partition the workers' batch counts differ.
  check_status(kv.finish().get(), "finish");
  const uint64_t my_examples = trainer.examples();
  // Evaluation, predictions and the model file happen once, on worker 0
  // (the first live worker), after every worker's last push has been
  // applied (pushes are answered before train() returns; the barrier waits
  // for the slowest worker).
  const uint64_t job_examples =
      node.client->barrier("trained", join_timeout(flags.cluster), /*workers_only=*/true, my_examples);
  const bool evaluates = w == evaluating_worker(node);
  report_job_rate(evaluates, workers, job_examples,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), nullptr);
  if (evaluates) {
    if (w != 0) std::fprintf(stderr, "worker %u: worker 0 is gone; this worker evaluates and saves\n", w);
    const worker::LinearModel model = trainer.pull_model();
    worker::TrainOptions eval_opt = opt;
    eval_opt.loss = dopt.loss;
    const worker::LocalTrainer evaluator(model, eval_opt);
    report_model(flags, evaluator, map, &train_csr, opt.threads, test ? &*test : nullptr);
  }
  const worker::KvClientStats st = kv.stats();
  std::fprintf(stderr, "%s\n",
               worker_traffic(w, train_s > 0 ? static_cast<double>(my_examples) / train_s : 0.0, st,
                              node.endpoint->stats().bytes_sent)
                   .c_str());
  report_recoveries(w, st, node.endpoint->stats());
  node.client->done();
  (void)node.client->wait_for_shutdown(join_timeout(flags.cluster));
  return 0;
}

// Held-out metrics of an fm or dnn model, and its predictions.
void report_model_eval(const TrainFlags& flags, worker::ModelTrainer& trainer, const worker::ModelRows& test,
                       const worker::ModelSpec& spec, MetricsOut& metrics, double seconds) {
  std::vector<float> probs;
  const worker::Evaluation te = trainer.evaluate(test, flags.predictions.empty() ? nullptr : &probs);
  std::printf("%s\n", evaluation_line("held-out", te).c_str());
  std::fflush(stdout);
  metrics.line(heldout_json(seconds, te));
  report_unseen_keys("test", test.dropped, test.sparse.cols.size() + test.dropped + test.dense.size());
  if (!flags.predictions.empty()) {
    const int k = spec.outputs();
    std::FILE* f = std::fopen(flags.predictions.c_str(), "w");
    if (f == nullptr) throw std::runtime_error(fmt::format("--predictions {}: cannot open for writing", flags.predictions));
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, &std::fclose);
    for (size_t i = 0; i < probs.size(); i += static_cast<size_t>(k)) {
      for (int c = 0; c < k; ++c) std::fprintf(f, c == 0 ? "%.7g" : " %.7g", probs[i + static_cast<size_t>(c)]);
      std::fputc('\n', f);
    }
    if (std::fflush(f) != 0) throw std::runtime_error(fmt::format("--predictions {}: write failed", flags.predictions));
    std::fprintf(stderr, "wrote %zu predictions to %s\n", probs.size() / static_cast<size_t>(k), flags.predictions.c_str());
  }
}

// fm and dnn: the minibatch trainer against a store in this process, or
// against the job's servers.
int run_model_train(const TrainFlags& flags_in, bool distributed) {
  TrainFlags flags = flags_in;
  if (distributed) resolve_cluster_flags(flags.cluster);
  const worker::TrainOptions& opt = flags.opt;
  if (!flags.predictions.empty() && flags.test.empty())
    throw std::invalid_argument("--predictions needs --test (the examples to predict)");
  if (!flags.planted.empty()) throw std::invalid_argument("--planted: planted weights are linear (lr, svm)");
  if (flags.model == "fm" && flags.classes != 2) throw std::invalid_argument("--classes: fm is binary; use --model dnn");
  // Refused rather than ignored: these trainers have no such step.
  if (flags.optimizer == "sgd") {
    throw std::invalid_argument("--optimizer sgd: for lr and svm; fm and dnn step their sparse tables with adagrad "
                                "(dnn its MLP with Adam), lr with ftrl with FTRL");
  }
  if (flags.l2_option != nullptr && flags.l2_option->count() > 0 && flags.model != "fm") {
    throw std::invalid_argument(flags.ftrl() ? "--l2: lr with ftrl takes --ftrl-l2"
                                             : "--l2: --model dnn has no L2 term (fm, lr and svm do)");
  }
  if (flags.eval_interval > 0 && flags.test.empty()) throw std::invalid_argument("--eval-interval needs --test");
  kernels::set_host_threads(opt.threads);
  DataFlags data = flags.data;
  // Whole file: every worker reads all of --train (so the slot map and the
  // dnn's fields come from all of it, as in one process) and trains on its
  // batches. --partition: each reads only its byte range; the slot map is
  // hashed and the fields are the format's, so every worker agrees without
  // seeing the others' data.
  std::optional<worker::Dataset> train;
  worker::SlotMap map;
  const std::vector<int> hidden = flags.model == "dnn" ? parse_hidden(flags.hidden) : std::vector<int>{};
  auto make_spec = [&](const worker::DatasetView* all) {
    worker::ModelSpec sp;
    if (flags.model == "fm" || flags.ftrl()) {
      sp = worker::ModelSpec::fm(flags.ftrl() ? 0 : flags.factors);
    } else if (all != nullptr) {
      sp = worker::ModelSpec::dnn(*all, flags.embedding_dim, hidden, flags.classes, flags.dense_features);
    } else {
      const bool criteo = worker::detect_file_format(flags.train.front(), worker::parse_data_format(data.format)) ==
                          worker::DataFormat::kCriteo;
      sp = worker::ModelSpec::dnn_with_fields(worker::ModelSpec::fields_of_format(criteo), flags.embedding_dim, hidden,
                                              flags.classes, flags.dense_features);
    }
    // fm's factors multiply: a smaller AdaGrad step than the linear models'
    // (measured on the Criteo sample: 0.464 at 0.02 against 0.473 at 0.05,
    // and within 1% of one process at 2 x 2).
    sp.hyper.sparse_lr =
        flags.model == "fm" && (flags.lr_option == nullptr || flags.lr_option->count() == 0) ? 0.02f : opt.lr;
    sp.hyper.dense_lr = flags.dense_lr;
    if (flags.ftrl()) {
      sp.hyper.sparse_updater = ps::UpdaterKind::kFtrl;
      sp.hyper.ftrl_alpha = flags.ftrl_alpha;
      sp.hyper.ftrl_beta = flags.ftrl_beta;
      sp.hyper.ftrl_l1 = flags.ftrl_l1;
      sp.hyper.ftrl_l2 = flags.ftrl_l2;
      sp.hyper.init_stddev = 0.0f;  // FTRL starts from w = 0
    }
    sp.hyper.seed = opt.seed;
    return sp;
  };
  worker::ModelSpec spec;
  if (flags.partition) {
    map = partition_slot_map(flags.hash_bits);
    spec = make_spec(nullptr);
  } else {
    train = load_training_data(flags.train, data, opt.threads, flags.cache, flags.classes);
    map = worker::SlotMap::for_data(train->view(), flags.hash_bits);
    spec = make_spec(&train->view());
  }
  std::optional<ClusterNode> node;
  std::unique_ptr<worker::KvClient> kv;
  std::shared_ptr<void> attached;  // kv hears of rejoined servers (goes before it)
  std::optional<AcknowledgedPushesReport> acked;  // printed however this ends (goes before kv)
  std::unique_ptr<worker::ParameterStore> store;
  uint32_t w = 0, workers = 1;
  uint64_t skip_clocks = 0;
  bool one_sided_mlp = false;  // --dense-reads
  if (distributed) {
    node.emplace(join_cluster(flags.cluster, ps::Role::kWorker, {}, spec.tables(map), flags.resume));
    const std::vector<ps::TableSchema> want = spec.tables(map);
    for (const ps::TableSchema& t : want) {
      const ps::TableSchema& held = node->map->table(t.id);
      if (held.kind != t.kind || held.width != t.width || held.rows != t.rows) {
        throw std::invalid_argument(fmt::format("the job's table {} does not fit this {} (width {} rows {}, the model needs "
                                                "width {} rows {})",
                                                t.id, spec.describe(), held.width, held.rows, t.width, t.rows));
      }
    }
    kv = std::make_unique<worker::KvClient>(*node->endpoint, *node->map, node->role_rank, kv_options(flags));
    attached = node->attach(*kv);
    acked.emplace(node->role_rank, *kv);
    skip_clocks = resume_clock(flags.resume, *node, *kv);
    one_sided_mlp = flags.model == "dnn" && one_sided_dense_reads(flags.dense_reads, *node->endpoint);
    store = std::make_unique<worker::RemoteStore>(*kv, *node->map, one_sided_mlp);
    w = node->role_rank;
    workers = node->map->num_workers();
  } else {
    store = std::make_unique<worker::LocalStore>(spec.tables(map));
  }
  auto read_part = [&](uint32_t part) {
    return load_data(fmt::format("train part {}/{}", part + 1, workers), flags.train, data, opt.threads, "",
                     flags.classes, part, workers);
  };
  if (flags.partition) train = read_part(w);
  const worker::ModelRows rows = worker::build_model_rows(train->view(), map, spec, opt.threads);
  train.reset();  // the rows are what training reads
  std::optional<worker::ModelRows> test;
  if (!flags.test.empty() && w == 0) {
    const worker::Dataset t = load_data("test", flags.test, data, opt.threads, "", flags.classes);
    test = worker::build_model_rows(t.view(), map, spec, opt.threads);
  }
  worker::ModelTrainOptions mo;
  mo.epochs = opt.epochs;
  mo.batch_rows = worker_batch_rows(flags, workers);
  mo.l2 = flags.model == "fm" ? opt.l2 : 0.0f;  // FTRL has its own L2
  mo.seed = opt.seed;
  mo.shuffle = opt.shuffle;
  // A pull issued before this worker's previous push misses it (no
  // read-my-writes): for fm on the Criteo sample that cost 0.04 nats at
  // 2 x 2, so fm and dnn read after their own push unless asked.
  if (flags.pull_ahead && flags.no_pull_ahead) throw std::invalid_argument("--pull-ahead and --no-pull-ahead: pick one");
  mo.pull_ahead = flags.pull_ahead;
  mo.staleness_aware = flags.staleness_aware;
  mo.progress_seconds = opt.progress_seconds;
  // Under a job, "%r" in --metrics-out is the worker's index; without it
  // only worker 0 writes the file (the one that evaluates).
  std::string metrics_path = flags.metrics_out;
  if (const size_t at = metrics_path.find("%r"); at != std::string::npos) {
    metrics_path.replace(at, 2, std::to_string(w));
  } else if (w != 0) {
    metrics_path.clear();
  }
  MetricsOut metrics(metrics_path);
  std::fprintf(stderr, "%s\n",
               fmt::format("parafab train: {}{}: {}, lr {}{}, batch {}, epochs {}, {}, backend {}",
                           distributed ? fmt::format("worker {} of {}", w, workers) : std::string("one process"),
                           distributed ? fmt::format(" on {} servers", node->map->num_servers()) : std::string(),
                           spec.describe(), spec.hyper.sparse_lr, flags.model == "dnn" ? fmt::format(", MLP Adam {}", flags.dense_lr) : "",
                           batch_text(flags, workers),
                           mo.epochs,
                           distributed ? fmt::format("pull-ahead {}, staleness-aware {}{}", mo.pull_ahead ? "on" : "off",
                                                     mo.staleness_aware ? "on" : "off",
                                                     flags.model != "dnn" ? ""
                                                     : one_sided_mlp       ? ", MLP read one-sided"
                                                                           : ", MLP read by message")
                                       : std::string("sequential minibatches"),
                           kernels::backend_description())
                   .c_str());
  std::fprintf(stderr, "model slots: %s\n", map.describe().c_str());
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  worker::ModelTrainer* self = nullptr;
  // Periodic held-out evaluation on worker 0 (--eval-interval), between its batches.
  auto last_eval = t0;
  // The straggler is the last worker, so worker 0 (the evaluator) shows the model's progress in wall time.
  const bool slow = flags.slow_ms > 0 && distributed && w + 1 == workers && workers > 1;
  std::function<void(uint64_t)> after = [&](uint64_t) {
    if (slow) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(flags.slow_ms));
    if (flags.eval_interval > 0 && w == 0 && test) {
      const auto now = Clock::now();
      if (std::chrono::duration<double>(now - last_eval).count() >= flags.eval_interval) {
        last_eval = now;
        const worker::Evaluation e = self->evaluate(*test);
        metrics.line(heldout_json(std::chrono::duration<double>(now - t0).count(), e));
      }
    }
  };
  mo.after_batch = after;
  // A dead worker's batches go to a survivor, trained in the clocks of its
  // own: its share of --train, or with --partition its part of the file.
  if (distributed && !flags.partition) mo.adopted_parts = adopted_shares_of(*node, rows);
  if (distributed && flags.partition) {
    mo.adopted_parts = adopted_parts_of<worker::ModelRows>(*node, [&](uint32_t part) {
      return worker::build_model_rows(read_part(part).view(), map, spec, opt.threads);
    });
  }
  mo.skip_clocks = skip_clocks;
  // With --partition every row read is this worker's: it takes all batches.
  worker::ModelTrainer run(*store, spec, map, mo, flags.partition ? 0 : w, flags.partition ? 1 : workers, distributed);
  self = &run;
  auto printer = progress_printer(flags, distributed ? fmt::format("worker {}: ", w) : "");
  run.train(rows, [&](const worker::TrainProgress& p) {
    printer(p);
    metrics.line(fmt::format(R"({{"event": "progress", "worker": {}, "epoch": {}, "examples": {}, "progressive_loss": {}, "examples_per_second": {}, "seconds": {}, "epoch_done": {}}})",
                             w, p.epoch, p.examples, json_number(p.progressive_loss), json_number(p.examples_per_second),
                             json_number(p.seconds), p.epoch_done ? "true" : "false"));
  });
  const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Leave the SSP minimum: with --partition the workers' batch counts differ.
  check_status(store->finish().get(), "finish");
  const uint64_t my_examples = run.examples();
  bool evaluator = w == 0;
  if (distributed) {
    const uint64_t job_examples =
        node->client->barrier("trained", join_timeout(flags.cluster), /*workers_only=*/true, my_examples);
    evaluator = w == evaluating_worker(*node);
    report_job_rate(evaluator, workers, job_examples, std::chrono::duration<double>(Clock::now() - t0).count(), &metrics);
    if (evaluator && w != 0 && !flags.test.empty()) {
      std::fprintf(stderr, "worker %u: worker 0 is gone; this worker evaluates and saves\n", w);
      const worker::Dataset t = load_data("test", flags.test, data, opt.threads, "", flags.classes);
      test = worker::build_model_rows(t.view(), map, spec, opt.threads);
    }
  }
  if (evaluator && test) report_model_eval(flags, run, *test, spec, metrics, std::chrono::duration<double>(Clock::now() - t0).count());
  if (evaluator && !flags.save_model.empty()) {
    const worker::SavedModel saved = flags.partition ? run.gather_all_slots(map) : run.gather(rows, map);
    worker::save_model_file(flags.save_model, saved);
    std::fprintf(stderr, "saved model to %s (%zu keys, %zu MLP parameters)\n", flags.save_model.c_str(),
                 saved.keys.size(), saved.mlp.size());
  }
  const worker::StalenessStats& st = run.staleness();
  std::string hist;
  size_t last = 0;
  for (size_t i = 0; i < st.histogram.size(); ++i) if (st.histogram[i] > 0) last = i;
  for (size_t i = 0; i <= last; ++i) hist += (i ? ", " : "") + std::to_string(st.histogram[i]);
  const double eps = train_s > 0 ? static_cast<double>(my_examples) / train_s : 0;
  if (distributed) {
    const worker::KvClientStats ks = kv->stats();
    std::fprintf(stderr, "%s; staleness of its pulls [0..%zu]: %s; mean step scale %.3f\n",
                 worker_traffic(w, eps, ks, node->endpoint->stats().bytes_sent).c_str(), last, hist.c_str(),
                 st.mean_scale);
    if (one_sided_mlp) {
      std::fprintf(stderr, "worker %u: MLP shards read one-sided %llu times, pulled by message %llu times (beyond the "
                   "bound, or its own push not yet answered), %llu reads retried under a push\n",
                   w, static_cast<unsigned long long>(kv->dense_read_shards()),
                   static_cast<unsigned long long>(kv->dense_read_fallbacks()),
                   static_cast<unsigned long long>(kv->dense_read_retries()));
    }
    report_recoveries(w, ks, node->endpoint->stats());
    // Nodes the scheduler declared dead during the job, by rank.
    std::string dead;
    for (const uint32_t r : node->client->dead_ranks()) dead += (dead.empty() ? "" : ", ") + std::to_string(r);
    metrics.line(fmt::format(R"({{"event": "done", "worker": {}, "seconds": {}, "examples_per_second": {}, "push_bytes": {}, "pull_bytes": {}, "staleness_histogram": [{}], "mean_step_scale": {}, "dead_ranks": [{}]}})",
                             w, json_number(train_s), json_number(eps), ks.push_bytes, ks.pull_bytes, hist,
                             json_number(st.mean_scale), dead));
    node->client->done();
    (void)node->client->wait_for_shutdown(join_timeout(flags.cluster));
  } else {
    std::fprintf(stderr, "trained in %.2f s: %.0f examples/s\n", train_s, eps);
    metrics.line(fmt::format(R"({{"event": "done", "worker": 0, "seconds": {}, "examples_per_second": {}}})",
                             json_number(train_s), json_number(eps)));
  }
  return 0;
}

}  // namespace

void add_train_command(CLI::App& root, CommandContext& ctx) {
  auto flags = std::make_shared<TrainFlags>();
  flags->opt.threads = default_threads();
  CLI::App* cmd = root.add_subcommand(
      "train", "Train lr, svm, fm or dnn: in this process, or as a worker of a job when a scheduler is given "
               "(--scheduler or PARAFAB_SCHEDULER, as under parafab launch)");
  cmd->add_option("--train", flags->train,
                  "Training data (libsvm or Criteo TSV, plain or gzip, bzip2 or xz compressed); several files "
                  "(--train day_0.gz day_1.gz, or a glob) are read one after another as one data set, all of one "
                  "format")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--test", flags->test,
                  "Held-out data: log loss, AUC and accuracy are reported on it (several files: as one set, "
                  "--predictions in their order)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", flags->model,
                  "lr (logistic regression), svm (linear SVM, hinge loss), fm (factorization machine) or dnn "
                  "(per-field embeddings + MLP)")
      ->check(CLI::IsMember({"lr", "svm", "fm", "dnn"}))->capture_default_str();
  cmd->add_option("--factors", flags->factors, "fm: factors per feature (k)")->check(CLI::Range(0, 256))->capture_default_str();
  cmd->add_option("--embedding-dim", flags->embedding_dim, "dnn: embedding width per field")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--hidden", flags->hidden, "dnn: hidden layer sizes, e.g. 256,128 (none: no hidden layer)")
      ->capture_default_str();
  cmd->add_option("--classes", flags->classes,
                  "dnn: classes; > 2 reads libsvm labels as class ids 0..K-1 (softmax) and --predictions writes K "
                  "probabilities a line")
      ->check(CLI::Range(2, 1 << 16))->capture_default_str();
  cmd->add_option("--dense-features", flags->dense_features,
                  "dnn: libsvm indices 1..N are dense MLP inputs (images); the others are embedded")
      ->capture_default_str();
  cmd->add_option("--dense-lr", flags->dense_lr, "dnn: Adam step of the MLP")->capture_default_str();
  cmd->add_flag("--staleness-aware", flags->staleness_aware,
                "fm, dnn distributed: scale each gradient by 1/staleness of the parameters it used (Zhang et al. 2016)");
  cmd->add_option("--dense-reads", flags->dense_reads,
                  "dnn distributed: how workers read the MLP: one-sided (RMA reads of the servers' shards, no server "
                  "thread involved, the same consistency), message, or auto (one-sided where the provider reads "
                  "remote memory itself: shm, verbs, efa; messages over tcp, whose RMA is emulated)")
      ->check(CLI::IsMember({"auto", "one-sided", "message"}))
      ->capture_default_str();
  cmd->add_option("--metrics-out", flags->metrics_out,
                  "fm, dnn: JSON lines of progress, held-out evaluations and a summary (under a job: worker 0's, or "
                  "each worker's where the path holds %r, the worker index)")
      ->check(kWritableFile);
  cmd->add_option("--eval-interval", flags->eval_interval,
                  "fm, dnn: seconds between held-out evaluations during training (worker 0; 0: at the end only)")
      ->capture_default_str();
  cmd->add_option("--slow-ms", flags->slow_ms,
                  "Under a job: the last worker sleeps this long after each batch (a straggler, for staleness studies)")
      ->capture_default_str();
  cmd->add_option("--format", flags->data.format, "Input format: libsvm, criteo or auto")
      ->check(CLI::IsMember({"libsvm", "criteo", "auto"}))->capture_default_str();
  cmd->add_option("--epochs", flags->opt.epochs, "Passes over the training data")->check(kNonNegativeNumber)->capture_default_str();
  cmd->add_option("--threads", flags->opt.threads,
                  "Host threads (parsing and Hogwild SGD); default: PARAFAB_THREADS, else the CPUs this process may "
                  "use (parafab launch gives each local worker its share)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  flags->lr_option = cmd->add_option("--lr", flags->opt.lr,
                                     "Step size (AdaGrad base rate with --optimizer adagrad; fm, dnn: of the sparse "
                                     "table; fm's default is 0.02)")
                         ->capture_default_str();
  flags->l2_option = cmd->add_option("--l2", flags->opt.l2,
                                     "L2 regularization per step on touched weights (lr, svm, fm; ftrl has "
                                     "--ftrl-l2, dnn none)")
                         ->capture_default_str();
  cmd->add_option("--ftrl-alpha", flags->ftrl_alpha, "--optimizer ftrl: per-coordinate rate alpha / (beta + sqrt(n))")
      ->capture_default_str();
  cmd->add_option("--ftrl-beta", flags->ftrl_beta, "--optimizer ftrl: beta")->capture_default_str();
  cmd->add_option("--ftrl-l1", flags->ftrl_l1, "--optimizer ftrl: L1 strength (exact zeros: a sparse model)")
      ->capture_default_str();
  cmd->add_option("--ftrl-l2", flags->ftrl_l2, "--optimizer ftrl: L2 strength")->capture_default_str();
  cmd->add_option("--optimizer", flags->optimizer,
                  "adagrad (per-coordinate steps), sgd (constant step) or, for lr, ftrl (FTRL-Proximal with L1, "
                  "McMahan et al. 2013; trained by minibatches, saved as an fm/dnn-format model). On a GPU, lr/svm "
                  "in one process: adagrad steps a whole batch's rows at once, sgd only 16 at a time (more diverge)")
      ->check(CLI::IsMember({"adagrad", "sgd", "ftrl"}))->capture_default_str();
  flags->batch_option = cmd->add_option("--batch-size", flags->opt.batch_rows,
                                        "Rows per minibatch. lr/svm in one process: per Hogwild batch (default "
                                        "16384); fm, dnn, lr with ftrl, and any job: rows per clock of the whole "
                                        "job, split among its workers (default 256)")
                            ->check(kPositiveNumber)
                            ->capture_default_str();
  cmd->add_option("--hash-bits", flags->hash_bits,
                  "Hash keys into 2^B weights; 0: exact indices when they are below 2^24, else 2^22 hashed")
      ->check(CLI::Range(0, 31))->capture_default_str();
  cmd->add_option("--hot-slots", flags->opt.hot_slots,
                  "lr/svm in one process, --threads > 1: each thread keeps its own copies of the bias and of "
                  "the N-1 most frequent weights, and their changes are summed (averaged with --optimizer sgd) "
                  "into the model every 2048 rows a thread, so the threads do not trade those weights' cache "
                  "lines on every row (0: plain Hogwild, every weight shared)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--seed", flags->opt.seed, "Seed of the batch order")->capture_default_str();
  cmd->add_flag("!--no-shuffle", flags->opt.shuffle, "Keep the batch order of the file in every epoch");
  cmd->add_option("--cache", flags->cache,
                  "Binary cache of --train: mapped when valid for the current file, else written after parsing. "
                  "A directory (created for several --train files) holds one cache per file, NAME.pfc")
      ->check(kCacheFile);
  cmd->add_flag("--skip-bad-lines", flags->data.skip_bad_lines, "Count and skip malformed lines instead of stopping");
  cmd->add_option("--predictions", flags->predictions, "Write one probability per --test example, in input order")
      ->check(kWritableFile);
  cmd->add_option("--save-model", flags->save_model, "Write the trained model (read by parafab predict)")->check(kWritableFile);
  cmd->add_option("--resume", flags->resume,
                  "Distributed: resume the job from the checkpoint set in DIR (the servers' --checkpoint-dir): the "
                  "servers load their shards, the workers skip the batches it holds")
      ->envname("PARAFAB_RESUME_DIR");
  cmd->add_option("--planted", flags->planted, "Planted weights from gen-data --weights-out: report their held-out log loss")
      ->check(CLI::ExistingFile);
  cmd->add_option("--progress-interval", flags->opt.progress_seconds, "Seconds between progress lines (0: per epoch only)")
      ->capture_default_str();
  cmd->add_flag("--quiet", flags->quiet, "Progress once per epoch only");
  add_cluster_flags(cmd, flags->cluster);
  cmd->add_flag("--partition", flags->partition,
                "Distributed: each worker reads only its share of --train: whole files when there are at least as "
                "many as workers, else its byte range of each (the slot map is then hashed, --hash-bits or 2^22, "
                "and the dnn's fields are the format's)");
  cmd->add_flag("--delta-keys", flags->delta_keys,
                "Distributed: send each batch's sorted keys to the servers delta + varint coded (1-3 bytes a key "
                "for a small key space instead of 8; less on the wire, a little more work on both sides)");
  cmd->add_option("--resend-after,--resend-reads-after", flags->resend_after_s,
                  "Distributed: a request still missing a server's reply after this many seconds is sent to it again, "
                  "each such period, until the 60 s request timeout: a message the transport lost then costs a delay, "
                  "not the job (a server applies a push, or ticks a clock, once; a clock waits for the replies to this "
                  "worker's pushes, so a push whose first copy was lost is still in its round); 0: never")
      ->check(CLI::Range(0.0, 3600.0))
      ->default_val(flags->resend_after_s);
  cmd->add_flag("--pull-ahead", flags->pull_ahead,
                "fm, dnn distributed: pull the next batch before pushing this one (faster; the pull misses this "
                "worker's own last push)");
  cmd->add_flag("--no-pull-ahead", flags->no_pull_ahead,
                "Distributed lr, svm: pull a batch's weights only after the previous batch was pushed (fm and dnn "
                "always do, unless --pull-ahead)");
  cmd->callback([flags, &ctx] { ctx.exit_code = run_guarded("train", [&] { return run_train(*flags); }); });
}

}  // namespace parafab::apps
