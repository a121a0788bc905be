// `parafab predict`: probabilities from a saved linear model.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/data_loading.h"
#include "worker/linear_model_file.h"
#include "worker/local_trainer.h"

namespace parafab::apps {
namespace {

struct PredictFlags {
  std::string model, data, out;
  DataFlags data_flags;
  int threads = 1;
};

int run_predict(const PredictFlags& f) {
  const worker::LinearModel model = worker::load_linear_model(f.model);
  std::fprintf(stderr, "model %s: %s, %s\n", f.model.c_str(),
               model.loss == kernels::Loss::kHinge ? "svm" : "lr", model.map.describe().c_str());
  const worker::Dataset data = load_data("data", f.data, f.data_flags, f.threads, "");
  worker::TrainOptions opt;
  opt.threads = f.threads;
  const worker::LocalTrainer predictor(model, opt);
  const worker::SlotCsr csr = worker::SlotCsr::build(data.view(), model.map, f.threads);
  std::vector<float> probs;
  const worker::Evaluation e = predictor.evaluate(csr, &probs);
  write_probabilities(f.out, probs);
  std::printf("data (%llu examples): log loss %.6f  AUC %.6f  accuracy %.6f\n",
              static_cast<unsigned long long>(e.examples), e.log_loss, e.auc, e.accuracy);
  std::fprintf(stderr, "wrote %zu predictions to %s\n", probs.size(), f.out.c_str());
  return 0;
}

}  // namespace

void add_predict_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<PredictFlags>();
  f->threads = default_threads();
  CLI::App* cmd = root.add_subcommand("predict", "Write one probability per example from a saved model");
  cmd->add_option("--model", f->model, "Model file from train --save-model")->required()->check(CLI::ExistingFile);
  cmd->add_option("--data", f->data, "Examples to predict (libsvm or Criteo TSV; labels are read for the metrics)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", f->out, "Output: one probability per line, in input order")->required();
  cmd->add_option("--format", f->data_flags.format, "Input format: libsvm, criteo or auto")
      ->check(CLI::IsMember({"libsvm", "criteo", "auto"}))->capture_default_str();
  cmd->add_flag("--skip-bad-lines", f->data_flags.skip_bad_lines, "Count and skip malformed lines");
  cmd->add_option("--threads", f->threads, "Host threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->callback([f, &ctx] { ctx.exit_code = run_guarded("predict", [&] { return run_predict(*f); }); });
}

}  // namespace parafab::apps
