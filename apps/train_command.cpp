// `parafab train`: single-process training of a sparse linear model.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "apps/commands.h"
#include "apps/data_loading.h"
#include "kernels/memory.h"
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
};

int run_train(const TrainFlags& flags) {
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
  const bool tty = ::isatty(STDERR_FILENO);
  const char* loss_name = flags.model == "svm" ? "hinge" : "log loss";
  trainer.train(train_csr, [&](const worker::TrainProgress& p) {
    if (flags.quiet && !p.epoch_done) return;
    const std::string line = fmt::format(
        "epoch {}/{}  {:>10}/{}  {:>8} ex/s  progressive {} {:.5f}", p.epoch, opt.epochs, p.examples,
        p.epoch_examples, human_count(p.examples_per_second), loss_name, p.progressive_loss);
    if (tty) std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), p.epoch_done ? "\n" : "");
    else if (p.epoch_done || !flags.quiet) std::fprintf(stderr, "%s\n", line.c_str());
  });

  const worker::Evaluation tr = trainer.evaluate(train_csr);
  std::printf("train    (%llu examples): log loss %.6f  AUC %.6f  accuracy %.6f%s\n",
              static_cast<unsigned long long>(tr.examples), tr.log_loss, tr.auc, tr.accuracy,
              flags.model == "svm" ? fmt::format("  hinge {:.6f}", tr.hinge_loss).c_str() : "");
  if (test) {
    const worker::SlotCsr test_csr = worker::SlotCsr::build(test->view(), map, opt.threads);
    std::vector<float> probs;
    const worker::Evaluation te = trainer.evaluate(test_csr, flags.predictions.empty() ? nullptr : &probs);
    std::printf("held-out (%llu examples): log loss %.6f  AUC %.6f  accuracy %.6f%s\n",
                static_cast<unsigned long long>(te.examples), te.log_loss, te.auc, te.accuracy,
                flags.model == "svm" ? fmt::format("  hinge {:.6f}", te.hinge_loss).c_str() : "");
    if (test_csr.dropped > 0)
      std::fprintf(stderr, "note: %llu test nonzeros have keys never seen in training (weight 0)\n",
                   static_cast<unsigned long long>(test_csr.dropped));
    if (!flags.planted.empty()) {
      const double pl = worker::read_planted_model(flags.planted).log_loss(test->view());
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
  return 0;
}

}  // namespace

int default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

void add_train_command(CLI::App& root, CommandContext& ctx) {
  auto flags = std::make_shared<TrainFlags>();
  flags->opt.threads = default_threads();
  CLI::App* cmd = root.add_subcommand("train", "Train a sparse linear model (lr or svm) in this process");
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
  cmd->add_option("--batch-size", flags->opt.batch_rows, "Rows per Hogwild batch")->check(CLI::PositiveNumber)->capture_default_str();
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
  cmd->callback([flags, &ctx] { ctx.exit_code = run_guarded("train", [&] { return run_train(*flags); }); });
}

}  // namespace parafab::apps
