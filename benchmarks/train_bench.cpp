#include "benchmarks/train_bench.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "benchmarks/bench_report.h"
#include "worker/binary_cache.h"
#include "worker/data_reader.h"
#include "worker/local_trainer.h"
#include "worker/slot_map.h"
#include "worker/synthetic_data.h"

namespace parafab::benchmarks {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs a shell command, returns its wall time in seconds, or nullopt on failure.
std::optional<double> timed_system(const std::string& cmd, std::ostream& out) {
  const auto t0 = Clock::now();
  const int st = std::system(cmd.c_str());
  const double s = seconds_since(t0);
  if (st != 0) {
    out << "command failed (status " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1) << "): " << cmd << "\n";
    return std::nullopt;
  }
  return s;
}

bool on_path(const std::string& tool) {
  return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0;
}

double log_loss_of(const std::vector<double>& p_pos, const worker::DatasetView& test) {
  double sum = 0;
  for (size_t i = 0; i < test.rows(); ++i) {
    const double p = std::min(std::max(p_pos[i], 1e-15), 1 - 1e-15);
    sum -= test.labels[i] > 0.5 ? std::log(p) : std::log(1 - p);
  }
  return test.rows() ? sum / static_cast<double>(test.rows()) : 0;
}

// liblinear-predict -b 1 output: "labels 1 -1" then "label p1 p2" lines.
std::optional<double> liblinear_log_loss(const std::string& pred, const worker::DatasetView& test) {
  std::ifstream in(pred);
  std::string word;
  int first = 0, second = 0;
  if (!(in >> word >> first >> second) || word != "labels") return std::nullopt;
  std::vector<double> p(test.rows());
  for (size_t i = 0; i < test.rows(); ++i) {
    double label, p1, p2;
    if (!(in >> label >> p1 >> p2)) return std::nullopt;
    p[i] = first == 1 ? p1 : p2;
  }
  return log_loss_of(p, test);
}

// VW reads "label |namespace idx:val ..." lines; labels are -1/1 for logistic loss.
void write_vw_file(const worker::DatasetView& d, const std::string& path) {
  std::ofstream out(path);
  std::string line;
  for (size_t i = 0; i < d.rows(); ++i) {
    line = d.labels[i] > 0.5 ? "1 |f" : "-1 |f";
    const auto k = d.row_keys(i);
    const auto v = d.row_values(i);
    for (size_t j = 0; j < k.size(); ++j) line += fmt::format(" {}:{}", k[j], v[j]);
    line += '\n';
    out << line;
  }
  if (!out.flush()) throw std::runtime_error(fmt::format("{}: write failed", path));
}

std::optional<std::vector<double>> read_vw_predictions(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::vector<double> p(n);
  for (size_t i = 0; i < n; ++i) {
    if (!(in >> p[i])) return std::nullopt;
    std::string rest;
    std::getline(in, rest);
  }
  return p;
}

}  // namespace

int run_train_bench(const TrainBenchOptions& o, std::ostream& out) {
  BenchReport report;
  const std::string dir =
      fmt::format("{}/e{}-t{}-f{}-n{}-s{}", o.data_dir, o.examples, o.test_examples, o.features, o.nnz, o.seed);
  fs::create_directories(dir);
  const std::string train_svm = dir + "/train.svm", test_svm = dir + "/test.svm", weights = dir + "/planted.weights";
  const int max_threads = *std::max_element(o.threads.begin(), o.threads.end());

  if (!fs::exists(train_svm) || !fs::exists(test_svm) || !fs::exists(weights)) {
    worker::SyntheticOptions g;
    g.examples = o.examples;
    g.test_examples = o.test_examples;
    g.features = o.features;
    g.nnz = o.nnz;
    g.seed = o.seed;
    g.threads = max_threads;
    out << "generating " << dir << " ...\n" << std::flush;
    worker::write_synthetic_libsvm(g, train_svm + ".tmp", test_svm + ".tmp", weights + ".tmp");
    fs::rename(train_svm + ".tmp", train_svm);
    fs::rename(test_svm + ".tmp", test_svm);
    fs::rename(weights + ".tmp", weights);
  }
  const auto text_bytes = static_cast<double>(fs::file_size(train_svm));

  worker::ReadOptions ropt;
  ropt.format = worker::DataFormat::kLibsvm;
  const worker::Dataset test = worker::read_text_dataset(test_svm, ropt);
  const double planted = worker::read_planted_model(weights).log_loss(test.view());
  report.add(BenchRecord("train", "planted_model", planted, "log loss").with("examples", test.rows()));

  // From text: parse + map + one epoch, the pass VW makes from text.
  double parafab_text_eps = 0;
  {
    ropt.threads = max_threads;
    const auto t0 = Clock::now();
    const worker::Dataset train = worker::read_text_dataset(train_svm, ropt);
    const double parse_s = seconds_since(t0);
    const worker::SlotMap map = worker::SlotMap::for_data(train.view(), 0);
    const worker::SlotCsr csr = worker::SlotCsr::build(train.view(), map, max_threads);
    worker::TrainOptions topt;
    topt.threads = max_threads;
    topt.epochs = 1;
    topt.progress_seconds = 0;
    worker::LocalTrainer t(topt, map);
    t.train(csr);
    const double s = seconds_since(t0);
    parafab_text_eps = static_cast<double>(train.rows()) / s;
    report.add(BenchRecord("train", "parse_libsvm", text_bytes / parse_s / 1e6, "MB/s").with("threads", max_threads));
    report.add(BenchRecord("train", "one_pass_from_text", parafab_text_eps, "examples/s").with("threads", max_threads));
    worker::write_binary_cache(dir + "/train.pfc", train, worker::source_stamp(train_svm));
    // VW's input, from the rows parsed above rather than a second parse.
    if (o.vw && on_path("vw") && !fs::exists(dir + "/train.vw")) {
      write_vw_file(train.view(), dir + "/train.vw");
      write_vw_file(test.view(), dir + "/test.vw");
    }
  }

  // From the binary cache, for each thread count: map + slots + epochs. On
  // more than one thread also plain Hogwild (--hot-slots 0), every weight
  // shared, as the reference for the per-thread copies of the hot weights.
  double best_loss = 0, parafab_cache_eps_1pass = 0;
  for (int threads : o.threads) {
    std::vector<uint64_t> hot_settings{worker::TrainOptions{}.hot_slots};
    if (threads > 1) hot_settings.push_back(0);
    double with_copies_eps = 0;
    for (const uint64_t hot_slots : hot_settings) {
      const auto t0 = Clock::now();
      const worker::Dataset train = worker::open_binary_cache(dir + "/train.pfc");
      const worker::SlotMap map = worker::SlotMap::for_data(train.view(), 0);
      const worker::SlotCsr csr = worker::SlotCsr::build(train.view(), map, threads);
      const double load_s = seconds_since(t0);
      worker::TrainOptions topt;
      topt.threads = threads;
      topt.epochs = o.epochs;
      topt.progress_seconds = 0;
      topt.hot_slots = hot_slots;
      worker::LocalTrainer t(topt, map);
      const auto t1 = Clock::now();
      t.train(csr);
      const double train_s = seconds_since(t1);
      const worker::Evaluation e = t.evaluate(worker::SlotCsr::build(test.view(), map, threads));
      const double eps = static_cast<double>(train.rows()) * o.epochs / (load_s + train_s);
      const bool plain = threads > 1 && hot_slots == 0;
      if (plain) {
        report.add(BenchRecord("train", "train_from_cache_plain_hogwild", eps, "examples/s")
                       .with("threads", threads).with("epochs", o.epochs).with("hot_slots", 0)
                       .with("load_s", load_s).with("train_s", train_s)
                       .with("heldout_log_loss", e.log_loss)
                       .with("with_hot_copies_ratio", eps > 0 ? with_copies_eps / eps : 0.0));
        continue;
      }
      with_copies_eps = eps;
      if (threads == max_threads) {
        best_loss = e.log_loss;
        parafab_cache_eps_1pass = static_cast<double>(train.rows()) / (load_s + train_s / o.epochs);
      }
      report.add(BenchRecord("train", "train_from_cache", eps, "examples/s")
                     .with("threads", threads).with("epochs", o.epochs).with("hot_slots", threads > 1 ? hot_slots : 0)
                     .with("load_s", load_s).with("train_s", train_s));
      report.add(BenchRecord("train", "heldout_log_loss", e.log_loss, "log loss")
                     .with_ceiling(planted, "planted model").with("threads", threads).with("auc", e.auc));
    }
  }

  // liblinear: the accuracy reference (best held-out log loss over the C grid).
  if (o.liblinear) {
    if (!on_path("liblinear-train")) {
      out << "liblinear-train not found (scripts/setup installs liblinear-tools); accuracy reference skipped\n";
    } else {
      double best = INFINITY, best_c = 0, best_s = 0;
      for (double c : o.liblinear_c) {
        const std::string model = fmt::format("{}/liblinear-c{}.model", dir, c), pred = model + ".pred";
        const auto s = timed_system(fmt::format("liblinear-train -q -s 0 -B 1 -c {} {} {} >/dev/null", c, train_svm, model), out);
        if (!s) return 1;
        if (!timed_system(fmt::format("liblinear-predict -q -b 1 {} {} {} >/dev/null", test_svm, model, pred), out)) return 1;
        const auto ll = liblinear_log_loss(pred, test.view());
        if (!ll) { out << "cannot read " << pred << "\n"; return 1; }
        report.add(BenchRecord("train", "liblinear_heldout_log_loss", *ll, "log loss").with("C", c).with("train_s", *s));
        if (*ll < best) { best = *ll; best_c = c; best_s = *s; }
      }
      // Ratio below 1.01 is the goal: ours / liblinear's best.
      report.add(BenchRecord("train", "parafab_vs_liblinear_log_loss", best_loss, "log loss")
                     .with_ceiling(best, "liblinear best C").with("C", best_c).with("liblinear_train_s", best_s));
    }
  }

  // Vowpal Wabbit: the speed reference, one logistic pass from text and from its cache.
  if (o.vw) {
    if (!on_path("vw")) {
      out << "vw not found on PATH (scripts/setup-vw installs a vw command from PyPI); speed reference skipped\n";
    } else {
      const std::string vw_train = dir + "/train.vw", vw_test = dir + "/test.vw", cache = dir + "/train.vw.cache";
      fs::remove(cache);
      const std::string common = fmt::format("--loss_function logistic -b {} --quiet", std::max(18, static_cast<int>(std::ceil(std::log2(o.features + 1)))));
      const auto text_s = timed_system(fmt::format("vw {} -d {} -c --cache_file {} -f {}/vw.model", common, vw_train, cache, dir), out);
      const auto cache_s = timed_system(fmt::format("vw {} -d {} -c --cache_file {} -f {}/vw.model", common, vw_train, cache, dir), out);
      if (!text_s || !cache_s) return 1;
      const double n = static_cast<double>(o.examples);
      report.add(BenchRecord("train", "one_pass_from_text_vs_vw", parafab_text_eps, "examples/s")
                     .with_ceiling(n / *text_s, "vw from text"));
      report.add(BenchRecord("train", "one_pass_from_cache_vs_vw", parafab_cache_eps_1pass, "examples/s")
                     .with_ceiling(n / *cache_s, "vw from its cache"));
      if (timed_system(fmt::format("vw --quiet -t -i {}/vw.model -d {} --link logistic -p {}/vw.pred", dir, vw_test, dir), out)) {
        if (const auto p = read_vw_predictions(dir + "/vw.pred", test.rows()))
          report.add(BenchRecord("train", "vw_one_pass_heldout_log_loss", log_loss_of(*p, test.view()), "log loss"));
      }
    }
  }

  report.print_table(out);
  if (!o.json_path.empty()) report.write_json_lines(o.json_path);
  return 0;
}

}  // namespace parafab::benchmarks
