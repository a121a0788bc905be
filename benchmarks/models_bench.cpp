#include "benchmarks/models_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "benchmarks/bench_report.h"
#include "benchmarks/child_process.h"

namespace parafab::benchmarks {
namespace {

using namespace std::chrono_literals;

struct Run {
  double log_loss = 0, auc = 0, examples_per_second = 0;
  bool ok = false;
};

// Parses what parafab train prints: the held-out line, and "trained in S s:
// N examples/s" (one process) or worker 0's "job: ... N examples/s in
// total" (every worker's examples over the job's wall time).
Run parse(const std::string& out) {
  Run r;
  std::smatch m;
  static const std::regex held(R"(held-out \(\d+ examples\): log loss ([0-9.]+)  AUC ([0-9.]+|n/a))");
  if (!std::regex_search(out, m, held)) return r;
  r.log_loss = std::stod(m[1]);
  r.auc = m[2] == "n/a" ? 0 : std::stod(m[2]);
  static const std::regex one(R"(trained in [0-9.]+ s: ([0-9.]+) examples/s)");
  static const std::regex job(R"(job: \d+ examples by \d+ workers in [0-9.]+ s: ([0-9.]+) examples/s in total)");
  if (std::regex_search(out, m, one) || std::regex_search(out, m, job)) r.examples_per_second = std::stod(m[1]);
  r.ok = true;
  return r;
}

}  // namespace

int run_models_bench(const ModelsBenchOptions& o, std::ostream& out) {
  if (o.format != "criteo" && o.format != "libsvm") throw std::invalid_argument("--format: criteo or libsvm");
  const std::string bin = o.parafab.empty() ? self_executable() : o.parafab;
  std::filesystem::create_directories(o.data_dir);
  const std::string ext = o.format == "criteo" ? ".tsv" : ".svm";
  const std::string stem = fmt::format("{}/{}-{}-{}", o.data_dir, o.format, o.examples, o.seed);
  const std::string train = stem + "-train" + ext, test = stem + "-test" + ext;
  if (!std::filesystem::exists(train) || !std::filesystem::exists(test)) {
    ChildProcess gen({bin, "gen-data", "--format", o.format, "--out", train, "--test-out", test, "--examples",
                      std::to_string(o.examples), "--test-examples", std::to_string(o.test_examples), "--seed",
                      std::to_string(o.seed)},
                     {});
    if (!wait_for_exit({&gen}, ChildProcess::Clock::now() + 1200s) || gen.exit_code() != 0) {
      out << "gen-data failed:\n" << gen.output();
      return 1;
    }
    out << gen.output();
  }
  if (o.batch_orders < 1) throw std::invalid_argument("--batch-orders: at least 1");
  out << fmt::format("models: {} {} examples ({} held-out), {} epochs; one process against {} servers x {} workers{}\n",
                     o.examples, o.format, o.test_examples, o.epochs, o.servers, o.workers,
                     o.batch_orders > 1 ? fmt::format(", {} batch orders each", o.batch_orders) : std::string());
  BenchReport report;
  for (const std::string& model : o.models) {
    std::vector<std::string> train_args = {bin,     "train",   "--train", train,   "--test", test, "--format",
                                           o.format, "--model", model,   "--epochs", std::to_string(o.epochs),
                                           "--threads", "1", "--quiet"};
    if (model == "dnn") {
      for (const std::string& w : split_words(o.dnn_flags)) train_args.push_back(w);
    }
    auto run = [&](std::vector<std::string> argv, int order, const std::string& what) -> Run {
      argv.insert(argv.end(), {"--seed", std::to_string(order)});
      ChildProcess p(argv, {"FI_TCP_IFACE=lo"});
      const bool done = wait_for_exit({&p}, ChildProcess::Clock::now() + 3600s);
      Run r = done && p.exit_code() == 0 ? parse(p.output()) : Run{};
      if (!r.ok) out << fmt::format("{} failed ({}):\n{}", what, p.describe_end(), p.output());
      return r;
    };
    auto order_text = [&](int order) { return o.batch_orders > 1 ? fmt::format(" order {}", order) : std::string(); };
    // A setting's record name: "" is one process.
    auto record_name = [&](const std::string& c) {
      return c.empty() ? model + "/one_process" : fmt::format("{}/{}x{}/{}", model, o.servers, o.workers, c);
    };
    // Held-out losses by setting ("" for one process), one per order.
    std::vector<std::pair<std::string, std::vector<double>>> losses = {{"", {}}};
    for (const std::string& c : o.consistency) losses.push_back({c, {}});
    for (int order = 1; order <= o.batch_orders; ++order) {
      const Run single = run(train_args, order, model + " in one process" + order_text(order));
      if (!single.ok) return 1;
      losses[0].second.push_back(single.log_loss);
      out << fmt::format("  {:<4} one process{:<9} held-out log loss {:.5f}  AUC {:.4f}  {:>9.0f} examples/s\n", model,
                         order_text(order), single.log_loss, single.auc, single.examples_per_second);
      BenchRecord one("models", record_name(""), single.log_loss, "log loss");
      one.with("auc", single.auc).with("examples_per_second", single.examples_per_second);
      if (o.batch_orders > 1) one.with("batch_order", order);
      report.add(std::move(one));
      for (size_t k = 0; k < o.consistency.size(); ++k) {
        const std::string& c = o.consistency[k];
        std::vector<std::string> argv = {bin, "launch", "--servers", std::to_string(o.servers), "--workers",
                                         std::to_string(o.workers), "--consistency", c, "--"};
        argv.insert(argv.end(), train_args.begin(), train_args.end());
        const Run d = run(argv, order, model + " under " + c + order_text(order));
        if (!d.ok) return 1;
        losses[k + 1].second.push_back(d.log_loss);
        out << fmt::format("  {:<4} {}x{} {:<8}{:<9}held-out log loss {:.5f}  AUC {:.4f}  {:>9.0f} examples/s "
                           "(loss ratio {:.4f}, speed ratio {:.2f})\n",
                           model, o.servers, o.workers, c, order_text(order), d.log_loss, d.auc, d.examples_per_second,
                           d.log_loss / single.log_loss, d.examples_per_second / single.examples_per_second);
        const std::string name = record_name(c);
        BenchRecord loss("models", name, d.log_loss, "log loss");
        loss.with_ceiling(single.log_loss, "one process").with("auc", d.auc);
        BenchRecord speed("models", name + "/speed", d.examples_per_second, "examples/s");
        speed.with_ceiling(single.examples_per_second, "one process");
        if (o.batch_orders > 1) {
          loss.with("batch_order", order);
          speed.with("batch_order", order);
        }
        report.add(std::move(loss));
        report.add(std::move(speed));
      }
    }
    if (o.batch_orders > 1) {
      // Means over the orders, each setting beside one process's mean.
      auto mean = [](const std::vector<double>& v) {
        return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
      };
      const double one_mean = mean(losses[0].second);
      for (const auto& [c, v] : losses) {
        const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
        const double m = mean(v);
        out << fmt::format("  {:<4} {:<20} mean held-out log loss {:.5f} over {} orders (from {:.5f} to {:.5f}){}\n",
                           model, c.empty() ? std::string("one process") : fmt::format("{}x{} {}", o.servers, o.workers, c),
                           m, v.size(), *lo, *hi,
                           c.empty() ? std::string() : fmt::format(", mean ratio {:.4f}", m / one_mean));
        BenchRecord r("models", record_name(c) + "/mean", m, "log loss");
        if (!c.empty()) r.with_ceiling(one_mean, "one process, mean");
        r.with("batch_orders", o.batch_orders).with("min", *lo).with("max", *hi);
        report.add(std::move(r));
      }
    }
  }
  report.print_table(out);
  if (!o.json_path.empty()) report.write_json_lines(o.json_path);
  return 0;
}

}  // namespace parafab::benchmarks
