// `parafab train`: single-process training of a sparse linear model.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "apps/cluster_node.h"
#include "apps/commands.h"
#include "apps/data_loading.h"
#include "kernels/memory.h"
#include "worker/distributed_trainer.h"
#include "worker/kv_client.h"
#include "worker/linear_model_file.h"
#include "worker/local_trainer.h"
#include "worker/synthetic_data.h"

namespace parafab::apps {
namespace {

struct TrainFlags {
  std::string train, test, model = "lr", optimizer = "adagrad", cache, predictions, save_model, planted;
  DataFlags data;
  worker::TrainOptions opt;
  int hash_bits = 0;
  bool quiet = false;
  ClusterFlags cluster;           // distributed when a scheduler is given (flag or PARAFAB_SCHEDULER)
  bool no_pull_ahead = false;
  CLI::Option* batch_option = nullptr;
};

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

// Held-out metrics, predictions, planted loss and the model file: the same
// for a model trained here or pulled from the servers.
void report_model(const TrainFlags& flags, const worker::LocalTrainer& trainer, const worker::SlotMap& map,
                  const worker::SlotCsr* train_csr, int threads) {
  if (train_csr != nullptr) {
    const worker::Evaluation tr = trainer.evaluate(*train_csr);
    std::printf("train    (%llu examples): log loss %.6f  AUC %.6f  accuracy %.6f%s\n",
                static_cast<unsigned long long>(tr.examples), tr.log_loss, tr.auc, tr.accuracy,
                flags.model == "svm" ? fmt::format("  hinge {:.6f}", tr.hinge_loss).c_str() : "");
  }
  if (!flags.test.empty()) {
    const worker::Dataset test = load_data("test", flags.test, flags.data, threads, "");
    const worker::SlotCsr test_csr = worker::SlotCsr::build(test.view(), map, threads);
    std::vector<float> probs;
    const worker::Evaluation te = trainer.evaluate(test_csr, flags.predictions.empty() ? nullptr : &probs);
    std::printf("held-out (%llu examples): log loss %.6f  AUC %.6f  accuracy %.6f%s\n",
                static_cast<unsigned long long>(te.examples), te.log_loss, te.auc, te.accuracy,
                flags.model == "svm" ? fmt::format("  hinge {:.6f}", te.hinge_loss).c_str() : "");
    if (test_csr.dropped > 0)
      std::fprintf(stderr, "note: %llu test nonzeros have keys never seen in training (weight 0)\n",
                   static_cast<unsigned long long>(test_csr.dropped));
    if (!flags.planted.empty()) {
      const double pl = worker::read_planted_model(flags.planted).log_loss(test.view());
      std::printf("planted  (%llu examples): log loss %.6f  (learned / planted = %.4f)\n",
                  static_cast<unsigned long long>(te.examples), pl, te.log_loss / pl);
    }
    if (!flags.predictions.empty()) {
      write_probabilities(flags.predictions, probs);
      std::fprintf(stderr, "wrote %zu predictions to %s\n", probs.size(), flags.predictions.c_str());
    }
  }
  if (!flags.save_model.empty()) {
    worker::save_linear_model(flags.save_model, trainer.model());
    std::fprintf(stderr, "saved model to %s\n", flags.save_model.c_str());
  }
}

int run_distributed_train(TrainFlags flags);

int run_train(const TrainFlags& flags) {
  if (!flags.cluster.scheduler.empty() || std::getenv("PARAFAB_SCHEDULER") != nullptr) return run_distributed_train(flags);
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
  const worker::Dataset train = load_data("train", flags.train, flags.data, opt.threads, flags.cache);
  std::optional<worker::Dataset> test;
  if (!flags.test.empty()) test = load_data("test", flags.test, flags.data, opt.threads, "");

  const worker::SlotMap map = worker::SlotMap::for_data(train.view(), flags.hash_bits);
  const worker::SlotCsr train_csr = worker::SlotCsr::build(train.view(), map, opt.threads);
  std::fprintf(stderr, "model slots: %s\n", map.describe().c_str());

  worker::LocalTrainer trainer(opt, map);
  trainer.train(train_csr, progress_printer(flags, ""));
  report_model(flags, trainer, map, &train_csr, opt.threads);
  return 0;
}

// One worker of a distributed job: this worker's share of the batches
// against the servers; worker 0 then pulls the model and reports on it.
int run_distributed_train(TrainFlags flags) {
  resolve_cluster_flags(flags.cluster);
  const worker::TrainOptions& opt = flags.opt;
  if (!flags.predictions.empty() && flags.test.empty())
    throw std::invalid_argument("--predictions needs --test (the examples to predict)");
  kernels::set_host_threads(opt.threads);
  // Every worker reads the whole file, so all build the same slot map.
  const worker::Dataset train = load_data("train", flags.train, flags.data, opt.threads, flags.cache);
  const worker::SlotMap map = worker::SlotMap::for_data(train.view(), flags.hash_bits);
  const worker::SlotCsr train_csr = worker::SlotCsr::build(train.view(), map, opt.threads);

  ps::TableSchema table;
  table.id = 0;
  table.kind = ps::TableKind::kSparse;
  table.width = 1;
  table.updater.kind = flags.optimizer == "adagrad" ? ps::UpdaterKind::kAdaGrad : ps::UpdaterKind::kSgd;
  table.updater.learning_rate = opt.lr;
  ClusterNode node = join_cluster(flags.cluster, ps::Role::kWorker, {}, {table});
  const ps::TableSchema& held = node.map->table(0);
  if (held.kind != ps::TableKind::kSparse || held.width != 1) {
    throw std::invalid_argument("the job's table 0 is not a sparse table of width 1: a linear model needs one");
  }
  worker::KvClient kv(*node.endpoint, *node.map, node.role_rank);
  worker::DistributedTrainOptions dopt;
  dopt.loss = flags.model == "svm" ? kernels::Loss::kHinge : kernels::Loss::kLogistic;
  dopt.epochs = opt.epochs;
  dopt.batch_rows = flags.batch_option != nullptr && flags.batch_option->count() > 0 ? opt.batch_rows : 256;
  dopt.l2 = opt.l2;
  dopt.seed = opt.seed;
  dopt.shuffle = opt.shuffle;
  dopt.pull_ahead = !flags.no_pull_ahead;
  dopt.progress_seconds = opt.progress_seconds;
  const uint32_t w = node.role_rank, workers = node.map->num_workers();
  std::fprintf(stderr, "%s\n",
               fmt::format("parafab train: worker {} of {}: model {}, table 0 {} on {} servers, batch {}, epochs {}, "
                           "pull-ahead {}, backend {}",
                           w, workers, flags.model, ps::to_string(held.updater), node.map->num_servers(),
                           dopt.batch_rows, dopt.epochs, dopt.pull_ahead ? "on" : "off",
                           kernels::backend_description())
                   .c_str());
  worker::DistributedTrainer trainer(kv, map, dopt, w, workers);
  trainer.train(train_csr, progress_printer(flags, fmt::format("worker {}: ", w)));
  // Evaluation, predictions and the model file happen once, on worker 0,
  // after every worker's last push has been applied (pushes are answered
  // before train() returns; the barrier waits for the slowest worker).
  node.client->barrier("trained", join_timeout(flags.cluster), /*workers_only=*/true);
  if (w == 0) {
    const worker::LinearModel model = trainer.pull_model();
    worker::TrainOptions eval_opt = opt;
    eval_opt.loss = dopt.loss;
    const worker::LocalTrainer evaluator(model, eval_opt);
    report_model(flags, evaluator, map, &train_csr, opt.threads);
  }
  const worker::KvClientStats st = kv.stats();
  std::fprintf(stderr, "worker %u: pushed %.1f MB, pulled %.1f MB, %llu requests\n", w, st.push_bytes / 1e6,
               st.pull_bytes / 1e6, static_cast<unsigned long long>(st.requests));
  node.client->done();
  (void)node.client->wait_for_shutdown(join_timeout(flags.cluster));
  return 0;
}

}  // namespace

int default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

void add_train_command(CLI::App& root, CommandContext& ctx) {
  auto flags = std::make_shared<TrainFlags>();
  flags->opt.threads = default_threads();
  CLI::App* cmd = root.add_subcommand(
      "train", "Train a sparse linear model (lr or svm): in this process, or as a worker of a job when a scheduler is "
               "given (--scheduler or PARAFAB_SCHEDULER, as under parafab launch)");
  cmd->add_option("--train", flags->train, "Training data (libsvm or Criteo TSV)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--test", flags->test, "Held-out data: log loss, AUC and accuracy are reported on it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", flags->model, "lr (logistic regression) or svm (linear SVM, hinge loss)")
      ->check(CLI::IsMember({"lr", "svm"}))->capture_default_str();
  cmd->add_option("--format", flags->data.format, "Input format: libsvm, criteo or auto")
      ->check(CLI::IsMember({"libsvm", "criteo", "auto"}))->capture_default_str();
  cmd->add_option("--epochs", flags->opt.epochs, "Passes over the training data")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--threads", flags->opt.threads, "Host threads (parsing and Hogwild SGD)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--lr", flags->opt.lr, "Step size (AdaGrad base rate with --optimizer adagrad)")->capture_default_str();
  cmd->add_option("--l2", flags->opt.l2, "L2 regularization per step on touched weights")->capture_default_str();
  cmd->add_option("--optimizer", flags->optimizer, "adagrad (per-coordinate steps) or sgd (constant step)")
      ->check(CLI::IsMember({"adagrad", "sgd"}))->capture_default_str();
  flags->batch_option = cmd->add_option("--batch-size", flags->opt.batch_rows,
                                        "Rows per Hogwild batch (distributed: rows per pull/push/clock, default 256)")
                            ->check(CLI::PositiveNumber)
                            ->capture_default_str();
  cmd->add_option("--hash-bits", flags->hash_bits,
                  "Hash keys into 2^B weights; 0: exact indices when they are below 2^24, else 2^22 hashed")
      ->check(CLI::Range(0, 31))->capture_default_str();
  cmd->add_option("--seed", flags->opt.seed, "Seed of the batch order")->capture_default_str();
  cmd->add_flag("!--no-shuffle", flags->opt.shuffle, "Keep the batch order of the file in every epoch");
  cmd->add_option("--cache", flags->cache,
                  "Binary cache of --train: mapped when valid for the current file, else written after parsing");
  cmd->add_flag("--skip-bad-lines", flags->data.skip_bad_lines, "Count and skip malformed lines instead of stopping");
  cmd->add_option("--predictions", flags->predictions, "Write one probability per --test example, in input order");
  cmd->add_option("--save-model", flags->save_model, "Write the trained model (read by parafab predict)");
  cmd->add_option("--planted", flags->planted, "Planted weights from gen-data --weights-out: report their held-out log loss")
      ->check(CLI::ExistingFile);
  cmd->add_option("--progress-interval", flags->opt.progress_seconds, "Seconds between progress lines (0: per epoch only)")
      ->capture_default_str();
  cmd->add_flag("--quiet", flags->quiet, "Progress once per epoch only");
  add_cluster_flags(cmd, flags->cluster);
  cmd->add_flag("--no-pull-ahead", flags->no_pull_ahead,
                "Distributed: pull a batch's weights only after the previous batch was pushed");
  cmd->callback([flags, &ctx] { ctx.exit_code = run_guarded("train", [&] { return run_train(*flags); }); });
}

}  // namespace parafab::apps
