#include "benchmarks/staleness_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "benchmarks/bench_report.h"
#include "benchmarks/child_process.h"

namespace parafab::benchmarks {
namespace {

using namespace std::chrono_literals;

struct Point {
  double seconds, log_loss;
};

// The "heldout" events of a --metrics-out file, in order.
std::vector<Point> heldout_points(const std::string& path) {
  std::ifstream in(path);
  std::vector<Point> pts;
  static const std::regex re(R"re("event": "heldout", "seconds": ([0-9.eE+-]+), .*"log_loss": ([0-9.eE+-]+))re");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) pts.push_back({std::stod(m[1]), std::stod(m[2])});
  }
  return pts;
}

std::string label_of(const std::string& setting) {
  if (setting == "bsp") return "BSP";
  if (setting == "asp") return "ASP";
  if (setting.rfind("ssp:", 0) == 0) return "SSP(" + setting.substr(4) + ")";
  return setting;
}

}  // namespace

int run_staleness_bench(const StalenessBenchOptions& o, std::ostream& out) {
  if (o.settings.empty()) throw std::invalid_argument("--settings: none given");
  if (o.workers < 2) throw std::invalid_argument("--workers must be >= 2 (one of them is the slow one)");
  const std::string bin = o.parafab.empty() ? self_executable() : o.parafab;
  std::filesystem::create_directories(o.out_dir);
  const std::string train = o.out_dir + "/train.svm", test = o.out_dir + "/test.svm";
  {
    ChildProcess gen({bin, "gen-data", "--out", train, "--test-out", test, "--examples", std::to_string(o.examples),
                      "--test-examples", std::to_string(o.test_examples), "--features", std::to_string(o.features),
                      "--nnz", std::to_string(o.nnz), "--seed", std::to_string(o.seed)},
                     {});
    if (!wait_for_exit({&gen}, ChildProcess::Clock::now() + 600s) || gen.exit_code() != 0) {
      out << "gen-data failed:\n" << gen.output();
      return 1;
    }
  }
  out << fmt::format("staleness: {} servers, {} workers (worker {} sleeps {} ms a batch), {} examples, {} epochs, {}\n",
                     o.servers, o.workers, o.workers - 1, o.slow_ms, o.examples, o.epochs, o.model_flags);
  BenchReport report;
  std::map<std::string, std::vector<Point>> curves;
  for (const std::string& setting : o.settings) {
    const std::string metrics = o.out_dir + "/metrics-" + setting.substr(0, setting.find(':')) +
                                (setting.find(':') == std::string::npos ? "" : setting.substr(setting.find(':') + 1)) +
                                ".jsonl";
    std::vector<std::string> argv = {bin,      "launch",  "--servers", std::to_string(o.servers), "--workers",
                                     std::to_string(o.workers), "--consistency", setting, "--timeout", "900", "--",
                                     bin,      "train",   "--train",   train, "--test", test, "--epochs",
                                     std::to_string(o.epochs), "--threads", "1", "--quiet", "--slow-ms",
                                     fmt::format("{}", o.slow_ms), "--eval-interval", fmt::format("{}", o.eval_interval),
                                     "--metrics-out", metrics};
    for (const std::string& w : split_words(o.model_flags)) argv.push_back(w);
    const auto t0 = ChildProcess::Clock::now();
    ChildProcess job(argv, {"FI_TCP_IFACE=lo"});
    const bool done = wait_for_exit({&job}, t0 + 960s);
    const double wall = std::chrono::duration<double>(ChildProcess::Clock::now() - t0).count();
    if (!done || job.exit_code() != 0) {
      out << fmt::format("{} failed ({}):\n{}", setting, job.describe_end(), job.output());
      return 1;
    }
    std::vector<Point> pts = heldout_points(metrics);
    if (pts.empty()) {
      out << fmt::format("{}: no held-out evaluation in {}\n", setting, metrics);
      return 1;
    }
    // Worker 0 is a fast one.
    static const std::regex stale_re(R"(worker 0: ([0-9.]+) examples/s.*staleness of its pulls \[0\.\.(\d+)\])");
    std::smatch m;
    double eps = 0;
    int64_t max_stale = -1;
    if (std::regex_search(job.output(), m, stale_re)) {
      eps = std::stod(m[1]);
      max_stale = std::stoll(m[2]);
    }
    out << fmt::format("  {:<7} final held-out log loss {:.5f} after {:.1f} s (job {:.1f} s), worker 0 {:.0f} ex/s, "
                       "its max staleness {}\n",
                       label_of(setting), pts.back().log_loss, pts.back().seconds, wall, eps, max_stale);
    report.add(BenchRecord("staleness", setting, pts.back().log_loss, "log loss")
                   .with("seconds", pts.back().seconds)
                   .with("job_seconds", wall)
                   .with("fast_worker_examples_per_second", eps)
                   .with("fast_worker_max_staleness", max_stale)
                   .with("slow_ms", o.slow_ms)
                   .with("workers", o.workers)
                   .with("servers", o.servers));
    curves[setting] = std::move(pts);
  }
  const std::string csv = o.out_dir + "/staleness.csv";
  {
    std::ofstream c(csv);
    c << "setting,seconds,heldout_log_loss\n";
    for (const std::string& s : o.settings) {
      for (const Point& p : curves[s]) c << s << "," << p.seconds << "," << p.log_loss << "\n";
    }
    if (!c) throw std::runtime_error(csv + ": write failed");
  }
  const std::string png = o.out_dir + "/staleness.png", gp = o.out_dir + "/staleness.gp";
  {
    std::ofstream g(gp);
    g << "set terminal pngcairo size 900,560 noenhanced\n"
      << "set output '" << png << "'\n"
      << "set datafile separator ','\n"
      << "set title 'held-out log loss against wall time; worker " << o.workers - 1 << " of " << o.workers << " sleeps " << o.slow_ms
      << " ms a batch'\n"
      << "set xlabel 'seconds since training started'\nset ylabel 'held-out log loss'\nset key top right\nset grid\n"
      << "plot ";
    for (size_t i = 0; i < o.settings.size(); ++i) {
      const std::string& s = o.settings[i];
      g << (i ? ", " : "") << "'" << csv << "' using 2:(stringcolumn(1) eq '" << s
        << "' ? $3 : 1/0) with linespoints title '" << label_of(s) << "'";
    }
    g << "\n";
  }
  out << "wrote " << csv << " and " << gp << "\n";
  ChildProcess plot({"gnuplot", gp}, {});
  if (wait_for_exit({&plot}, ChildProcess::Clock::now() + 60s) && plot.exit_code() == 0) {
    out << "wrote " << png << "\n";
  } else {
    out << "no PNG: gnuplot failed or is not installed (apt-get install gnuplot-nox): " << plot.output() << "\n";
  }
  report.print_table(out);
  if (!o.json_path.empty()) report.write_json_lines(o.json_path);
  return 0;
}

}  // namespace parafab::benchmarks
