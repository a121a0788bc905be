// `parafab gen-data`: synthetic data from a planted model: libsvm from a
// logistic model (worker/synthetic_data.h) or Criteo TSV from a model with
// feature crosses (worker/synthetic_criteo.h).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "apps/commands.h"
#include "apps/flag_checks.h"
#include "worker/synthetic_criteo.h"
#include "worker/synthetic_data.h"

namespace parafab::apps {
namespace {

struct GenDataFlags {
  std::string format = "libsvm";
  worker::SyntheticOptions o;         // libsvm, and the shared counts, seed and threads
  worker::CriteoSyntheticOptions c;   // criteo
  double zipf = 0;
  std::string out, test_out, weights_out;
  CLI::Option* zipf_option = nullptr;
  std::vector<CLI::Option*> libsvm_only, criteo_only;
};

// A flag of the other format, given explicitly, is an error naming it.
void refuse_other_format(const GenDataFlags& f) {
  const bool criteo = f.format == "criteo";
  for (const CLI::Option* opt : criteo ? f.libsvm_only : f.criteo_only) {
    if (opt->count() > 0)
      throw std::invalid_argument(fmt::format("{} is a --format {} option (this is --format {})", opt->get_name(),
                                              criteo ? "libsvm" : "criteo", f.format));
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_libsvm(const GenDataFlags& f) {
  worker::SyntheticOptions o = f.o;
  if (f.zipf_option->count() > 0) o.zipf_exponent = f.zipf;
  const auto t0 = std::chrono::steady_clock::now();
  worker::write_synthetic_libsvm(o, f.out, f.test_out, f.weights_out);
  std::fprintf(stderr, "%s\n",
               fmt::format("gen-data: wrote {} training examples to {}{} ({} features, {} nonzeros each, zipf {}, "
                           "seed {}) in {:.1f} s",
                           o.examples, f.out,
                           f.test_out.empty() ? "" : fmt::format(" and {} held-out to {}", o.test_examples, f.test_out),
                           o.features, o.nnz, o.zipf_exponent, o.seed, seconds_since(t0))
                   .c_str());
  return 0;
}

int run_criteo(const GenDataFlags& f) {
  worker::CriteoSyntheticOptions c = f.c;
  c.examples = f.o.examples;
  c.test_examples = f.o.test_examples;
  c.seed = f.o.seed;
  c.threads = f.o.threads;
  if (f.zipf_option->count() > 0) c.zipf_exponent = f.zipf;
  const auto t0 = std::chrono::steady_clock::now();
  const worker::CriteoGenerationReport r = worker::write_synthetic_criteo(c, f.out, f.test_out, f.weights_out);
  std::string pairs;
  for (const auto& [a, b] : r.crosses) pairs += fmt::format("{}C{}xC{}", pairs.empty() ? "" : " ", a + 1, b + 1);
  std::fprintf(stderr, "%s\n",
               fmt::format("gen-data: wrote {} training examples to {}{} (criteo: {} crosses of dim {}{}, zipf {}, "
                           "label rate {}, empty rates {} / {}, seed {}) in {:.1f} s",
                           c.examples, f.out,
                           f.test_out.empty() ? "" : fmt::format(" and {} held-out to {}", c.test_examples, f.test_out),
                           c.crosses, c.cross_dim, pairs.empty() ? "" : " [" + pairs + "]", c.zipf_exponent,
                           c.label_rate, c.empty_rate, c.int_empty_rate, c.seed, seconds_since(t0))
                   .c_str());
  auto describe = [](const char* what, const worker::CriteoFileStats& s) {
    std::printf("%s\n", fmt::format("planted  {:<8} ({} examples): log loss {:.6f}  additive-only {:.6f} (crosses worth "
                                    "{:.4f} nats)  label rate {:.4f}  empty {:.2f}% categorical, {:.2f}% integer",
                                    what, s.examples, s.planted_log_loss(), s.additive_log_loss(),
                                    s.additive_log_loss() - s.planted_log_loss(), s.label_rate(),
                                    100 * s.cat_empty_rate(), 100 * s.int_empty_rate())
                            .c_str());
  };
  describe("train", r.train);
  if (r.test.examples > 0) describe("held-out", r.test);
  return 0;
}

}  // namespace

void add_gen_data_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<GenDataFlags>();
  f->o.threads = default_threads();
  f->zipf = f->o.zipf_exponent;
  CLI::App* cmd = root.add_subcommand(
      "gen-data",
      "Write a synthetic data set from a planted model: libsvm from a logistic model (power-law feature frequencies), "
      "or Criteo TSV (label, I1..I13, C1..C26) from a model with planted feature crosses that logistic regression "
      "cannot fit. Criteo prints the planted model's log loss on what it wrote: the floor for any learner");
  cmd->add_option("--format", f->format, "libsvm or criteo")
      ->check(CLI::IsMember({"libsvm", "criteo"}))->capture_default_str();
  cmd->add_option("--out", f->out, "Training examples")->required()->check(kWritableFile);
  cmd->add_option("--test-out", f->test_out, "Held-out examples from the same planted model")->check(kWritableFile);
  cmd->add_option("--weights-out", f->weights_out,
                  "The planted model as text. libsvm: 'bias B', then 'index weight' lines (train --planted reads "
                  "it). criteo: '#' comments, then bias, crosses, integer terms, vocabularies and one 'value' line "
                  "per column value with its weight and latent vector (train --planted does not read it)")
      ->check(kWritableFile);
  cmd->add_option("--examples", f->o.examples, "Training examples")->capture_default_str();
  cmd->add_option("--test-examples", f->o.test_examples, "Held-out examples (with --test-out)")->capture_default_str();
  f->zipf_option = cmd->add_option("--zipf", f->zipf,
                                   "Exponent of the power law of feature (libsvm) or column value (criteo) frequencies "
                                   "[default: " + fmt::format("{} libsvm, {} criteo]", f->o.zipf_exponent, f->c.zipf_exponent));
  cmd->add_option("--seed", f->o.seed, "Seed: the same seed and options give the same files")->capture_default_str();
  cmd->add_option("--threads", f->o.threads, "Generator threads (the output does not depend on them)")
      ->check(kPositiveNumber)->capture_default_str();

  const std::string libsvm = "libsvm options", criteo = "criteo options";
  f->libsvm_only = {
      cmd->add_option("--features", f->o.features, "Number of features (indices 1..F)")->capture_default_str(),
      cmd->add_option("--nnz", f->o.nnz, "Distinct features per example")->capture_default_str(),
      cmd->add_option("--weight-sigma", f->o.weight_sigma, "Standard deviation of the planted weights")
          ->capture_default_str(),
      cmd->add_option("--bias", f->o.bias, "Planted bias")->capture_default_str(),
  };
  for (CLI::Option* o : f->libsvm_only) o->group(libsvm);
  f->criteo_only = {
      cmd->add_option("--vocab", f->c.vocab, "Values of C1..C26: 26 sizes, or one for every column")
          ->delimiter(',')->expected(1, worker::kSyntheticCriteoCats)->capture_default_str(),
      cmd->add_option("--empty-rate", f->c.empty_rate, "Probability that a categorical field is empty")
          ->capture_default_str(),
      cmd->add_option("--int-empty-rate", f->c.int_empty_rate, "Probability that an integer field is empty")
          ->capture_default_str(),
      cmd->add_option("--label-rate", f->c.label_rate, "Mean planted click probability (the bias is solved for it)")
          ->capture_default_str(),
      cmd->add_option("--crosses", f->c.crosses,
                      "Planted crossed pairs of categorical columns, drawn among the fewest columns that have that "
                      "many pairs (at most 325)")
          ->capture_default_str(),
      cmd->add_option("--cross-dim", f->c.cross_dim, "Dimension of the planted latent vectors")->capture_default_str(),
      cmd->add_option("--cross-sigma", f->c.cross_sigma, "Standard deviation of a latent vector's entries")
          ->capture_default_str(),
      cmd->add_option("--main-sigma", f->c.main_sigma, "Standard deviation of the per-value weights")
          ->capture_default_str(),
      cmd->add_option("--int-terms", f->c.int_terms, "Integer columns I1..In that enter the margin (a clamped "
                                                     "log term each)")
          ->capture_default_str(),
      cmd->add_option("--int-weight", f->c.int_weight, "Weight of each integer term")->capture_default_str(),
  };
  for (CLI::Option* o : f->criteo_only) o->group(criteo);

  cmd->callback([f, &ctx] {
    ctx.exit_code = run_guarded("gen-data", [&] {
      refuse_other_format(*f);
      if (f->o.test_examples > 0 && f->test_out.empty())
        throw std::invalid_argument("--test-examples needs --test-out");
      if (!f->test_out.empty() && f->o.test_examples == 0)
        throw std::invalid_argument("--test-out needs --test-examples > 0");
      return f->format == "criteo" ? run_criteo(*f) : run_libsvm(*f);
    });
  });
}

}  // namespace parafab::apps
