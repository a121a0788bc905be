// `parafab gen-data`: synthetic libsvm data from a planted logistic model.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "worker/synthetic_data.h"

namespace parafab::apps {

void add_gen_data_command(CLI::App& root, CommandContext& ctx) {
  struct Flags {
    worker::SyntheticOptions o;
    std::string out, test_out, weights_out;
  };
  auto f = std::make_shared<Flags>();
  f->o.threads = default_threads();
  CLI::App* cmd = root.add_subcommand(
      "gen-data", "Write a synthetic libsvm data set from a planted logistic model (power-law feature frequencies)");
  cmd->add_option("--out", f->out, "Training examples (libsvm)")->required();
  cmd->add_option("--test-out", f->test_out, "Held-out examples from the same planted model");
  cmd->add_option("--weights-out", f->weights_out, "Planted weights ('bias B', then 'index weight' lines)");
  cmd->add_option("--examples", f->o.examples, "Training examples")->capture_default_str();
  cmd->add_option("--test-examples", f->o.test_examples, "Held-out examples (with --test-out)")->capture_default_str();
  cmd->add_option("--features", f->o.features, "Number of features (indices 1..F)")->capture_default_str();
  cmd->add_option("--nnz", f->o.nnz, "Distinct features per example")->capture_default_str();
  cmd->add_option("--zipf", f->o.zipf_exponent, "Exponent of the power law of feature frequencies")->capture_default_str();
  cmd->add_option("--weight-sigma", f->o.weight_sigma, "Standard deviation of the planted weights")->capture_default_str();
  cmd->add_option("--bias", f->o.bias, "Planted bias")->capture_default_str();
  cmd->add_option("--seed", f->o.seed, "Seed: the same seed and options give the same files")->capture_default_str();
  cmd->add_option("--threads", f->o.threads, "Generator threads (the output does not depend on them)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->callback([f, &ctx] {
    ctx.exit_code = run_guarded("gen-data", [&] {
      if (f->o.test_examples > 0 && f->test_out.empty())
        throw std::invalid_argument("--test-examples needs --test-out");
      if (!f->test_out.empty() && f->o.test_examples == 0)
        throw std::invalid_argument("--test-out needs --test-examples > 0");
      const auto t0 = std::chrono::steady_clock::now();
      worker::write_synthetic_libsvm(f->o, f->out, f->test_out, f->weights_out);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "%s\n",
                   fmt::format("gen-data: wrote {} training examples to {}{} ({} features, {} nonzeros each, zipf {}, "
                               "seed {}) in {:.1f} s",
                               f->o.examples, f->out,
                               f->test_out.empty() ? "" : fmt::format(" and {} held-out to {}", f->o.test_examples, f->test_out),
                               f->o.features, f->o.nnz, f->o.zipf_exponent, f->o.seed, s)
                       .c_str());
      return 0;
    });
  });
}

}  // namespace parafab::apps
