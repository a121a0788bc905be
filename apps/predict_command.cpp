// `parafab predict`: probabilities from a saved model (lr, svm, fm or dnn).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/data_loading.h"
#include "apps/evaluation_line.h"
#include "apps/flag_checks.h"
#include "kernels/memory.h"
#include "worker/linear_model_file.h"
#include "worker/local_trainer.h"
#include "worker/model_file.h"
#include "worker/model_trainer.h"
#include "worker/saved_model_store.h"

namespace parafab::apps {
namespace {

struct PredictFlags {
  std::string model, out;
  std::vector<std::string> data;  // one file, or several predicted in order
  DataFlags data_flags;
  int threads = 1;
};

// fm and dnn: the trainer's evaluation against the saved parameters; K
// probabilities a line for a softmax dnn.
int run_predict_model(const PredictFlags& f) {
  worker::SavedModelStore store(worker::load_model_file(f.model));
  const worker::SavedModel& m = store.model();
  std::fprintf(stderr, "model %s: %s, %s, %zu keys\n", f.model.c_str(), m.spec.describe().c_str(),
               m.map.describe().c_str(), m.keys.size());
  kernels::set_host_threads(f.threads);
  const worker::Dataset data = load_data("data", f.data, f.data_flags, f.threads, "",
                                         m.spec.kind == worker::ModelKind::kDnn ? m.spec.classes : 2);
  const worker::ModelRows rows = worker::build_model_rows(data.view(), m.map, m.spec, f.threads);
  worker::ModelTrainOptions o;
  o.progress_seconds = 0;
  worker::ModelTrainer t(store, m.spec, m.map, o, 0, 1, false);
  std::vector<float> probs;
  const worker::Evaluation e = t.evaluate(rows, &probs);
  report_unseen_keys("--data", rows.dropped, data.nnz());
  const size_t k = static_cast<size_t>(m.spec.outputs());
  std::FILE* out = std::fopen(f.out.c_str(), "w");
  if (out == nullptr) throw std::runtime_error(fmt::format("--out {}: cannot open for writing", f.out));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(out, &std::fclose);
  for (size_t i = 0; i < probs.size(); i += k) {
    for (size_t c = 0; c < k; ++c) std::fprintf(out, c == 0 ? "%.7g" : " %.7g", probs[i + c]);
    std::fputc('\n', out);
  }
  if (std::fflush(out) != 0) throw std::runtime_error(fmt::format("--out {}: write failed", f.out));
  std::printf("%s\n", evaluation_line("data", e).c_str());
  std::fprintf(stderr, "wrote %zu predictions to %s\n", probs.size() / k, f.out.c_str());
  return 0;
}

int run_predict(const PredictFlags& f) {
  std::vector<NamedPath> inputs{{"--model", f.model}};
  for (const std::string& d : f.data) inputs.emplace_back("--data", d);
  check_distinct_files(inputs, {{"--out", f.out}});
  check_one_format(f.data, f.data_flags);
  if (worker::is_model_file(f.model)) return run_predict_model(f);
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
  report_unseen_keys("--data", csr.dropped, data.nnz());
  write_probabilities(f.out, probs);
  std::printf("%s\n", evaluation_line("data", e).c_str());
  std::fprintf(stderr, "wrote %zu predictions to %s\n", probs.size(), f.out.c_str());
  return 0;
}

}  // namespace

void add_predict_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<PredictFlags>();
  f->threads = default_threads();
  CLI::App* cmd = root.add_subcommand("predict", "Write one probability per example from a saved model");
  cmd->add_option("--model", f->model, "Model file from train --save-model")->required()->check(CLI::ExistingFile);
  cmd->add_option("--data", f->data,
                  "Examples to predict (libsvm or Criteo TSV, plain or gzip, bzip2 or xz compressed; labels are read "
                  "for the metrics); several files are predicted one after another, into one --out")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", f->out, "Output: one probability per line, in input order")->required()->check(kWritableFile);
  cmd->add_option("--format", f->data_flags.format, "Input format: libsvm, criteo or auto")
      ->check(CLI::IsMember({"libsvm", "criteo", "auto"}))->capture_default_str();
  cmd->add_flag("--skip-bad-lines", f->data_flags.skip_bad_lines, "Count and skip malformed lines");
  cmd->add_option("--threads", f->threads, "Host threads")->check(kPositiveNumber)->capture_default_str();
  cmd->callback([f, &ctx] { ctx.exit_code = run_guarded("predict", [&] { return run_predict(*f); }); });
}

}  // namespace parafab::apps
