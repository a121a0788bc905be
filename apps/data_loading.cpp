#include "apps/data_loading.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <system_error>

namespace parafab::apps {

std::string human_count(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

void write_probabilities(const std::string& path, const std::vector<float>& p) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, &std::fclose);
  for (float x : p) std::fprintf(f, "%.7g\n", x);
  if (std::fflush(f) != 0) throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
}

namespace {

// Reads the data set and prints its summary and skipped-line report; what an
// empty one means is the caller's to say.
worker::Dataset read_and_summarize(const std::string& role, const std::string& path, const DataFlags& flags,
                                   int threads, const std::string& cache_path, int classes, uint32_t part,
                                   uint32_t parts) {
  worker::ReadOptions opt;
  opt.format = worker::parse_data_format(flags.format);
  opt.skip_bad_lines = flags.skip_bad_lines;
  opt.threads = threads;
  opt.classes = classes;
  opt.part = part;
  opt.parts = parts;
  worker::ReadStats stats;
  bool from_cache = false;
  std::string rebuilt_because;
  const auto t0 = std::chrono::steady_clock::now();
  worker::Dataset d = worker::load_dataset(path, opt, cache_path, &stats, &from_cache, &rebuilt_because);
  if (!rebuilt_because.empty()) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("{} {}: rebuilt the cache {}: {}", role, path, cache_path, rebuilt_because).c_str());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "%s\n",
               fmt::format("{} {} ({}): {} examples, {} nonzeros, {} in {:.2f} s", role, path,
                           from_cache ? "binary cache " + cache_path
                                      : std::string(worker::data_format_name(stats.format)),
                           d.rows(), human_count(static_cast<double>(d.nnz())),
                           from_cache ? "mapped" : (cache_path.empty() ? "parsed" : "parsed and cached"), s)
                   .c_str());
  if (stats.skipped_lines > 0) {
    std::fprintf(stderr, "%s: skipped %llu bad line(s) (--skip-bad-lines)%s\n", path.c_str(),
                 static_cast<unsigned long long>(stats.skipped_lines),
                 stats.first_errors.empty() ? " when its cache was built; parse without --cache to list them"
                                            : "; first:");
    for (const auto& e : stats.first_errors) std::fprintf(stderr, "  %s\n", e.c_str());
  }
  return d;
}

}  // namespace

worker::Dataset load_data(const std::string& role, const std::string& path, const DataFlags& flags,
                          int threads, const std::string& cache_path, int classes, uint32_t part,
                          uint32_t parts) {
  worker::Dataset d = read_and_summarize(role, path, flags, threads, cache_path, classes, part, parts);
  if (d.rows() == 0) std::fprintf(stderr, "warning: %s holds no examples\n", path.c_str());
  return d;
}

worker::Dataset load_training_data(const std::string& path, const DataFlags& flags, int threads,
                                   const std::string& cache_path, int classes) {
  // No "holds no examples" warning before the error that says the same.
  worker::Dataset d = read_and_summarize("train", path, flags, threads, cache_path, classes, 0, 1);
  if (d.rows() == 0) {
    throw std::runtime_error(fmt::format("{}: no examples to train on{}", path,
                                         flags.skip_bad_lines ? " (every line was empty, a comment or skipped)" : ""));
  }
  return d;
}

std::vector<std::string> cache_paths_for(const std::string& cache, const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  if (cache.empty()) return std::vector<std::string>(paths.size());
  std::error_code ec;
  const bool is_dir = fs::is_directory(cache, ec);
  if (paths.size() == 1 && !is_dir) return {cache};
  if (!is_dir && fs::exists(cache, ec)) {
    throw std::invalid_argument(fmt::format("--cache {}: a file, but {} --train files need a directory (one cache each)",
                                            cache, paths.size()));
  }
  std::map<std::string, std::string> by_name;
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    const std::string name = fs::path(p).filename().string();
    if (const auto [it, fresh] = by_name.emplace(name, p); !fresh) {
      throw std::invalid_argument(fmt::format("--cache {}: {} and {} are both named {}, and their caches would be one "
                                              "file; rename one, or train without --cache",
                                              cache, it->second, p, name));
    }
    out.push_back((fs::path(cache) / (name + ".pfc")).string());
  }
  if (!is_dir && !fs::create_directory(cache, ec) && ec) {
    throw std::runtime_error(fmt::format("--cache {}: cannot create the directory: {}", cache, ec.message()));
  }
  return out;
}

void report_unseen_keys(const std::string& role, uint64_t dropped, uint64_t nnz) {
  if (dropped == 0) return;
  if (dropped >= nnz) {
    std::fprintf(stderr,
                 "warning: none of the %llu %s nonzeros has a key or field seen in training: every prediction is "
                 "the model's bias alone (is it data of another format, hashing or source than the model's?)\n",
                 static_cast<unsigned long long>(nnz), role.c_str());
    return;
  }
  std::fprintf(stderr, "note: %llu of the %llu %s nonzeros have keys or fields never seen in training (weight 0)\n",
               static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(nnz), role.c_str());
}

void check_one_format(const std::vector<std::string>& paths, const DataFlags& flags) {
  if (paths.size() < 2) return;
  const worker::DataFormat asked = worker::parse_data_format(flags.format);
  const worker::DataFormat first = worker::detect_file_format(paths[0], asked);
  for (size_t i = 1; i < paths.size(); ++i) {
    const worker::DataFormat f = worker::detect_file_format(paths[i], asked);
    if (f != first) {
      throw std::invalid_argument(fmt::format("{} reads as {} but {} as {}: the files of one run must be of one format",
                                              paths[0], worker::data_format_name(first), paths[i],
                                              worker::data_format_name(f)));
    }
  }
}

std::vector<size_t> files_of_part(const std::vector<std::string>& paths, uint32_t part, uint32_t parts) {
  std::vector<uint64_t> size(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) size[i] = worker::source_stamp(paths[i]).size;
  std::vector<size_t> order(paths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return size[a] > size[b]; });
  std::vector<uint64_t> load(parts, 0);
  std::vector<size_t> mine;
  for (const size_t i : order) {
    const auto least = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[least] += size[i];
    if (least == part) mine.push_back(i);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

namespace {

// The files one after another, each summarized by read_and_summarize (or
// the single load when there is one), joined; `training` refuses a set with
// no example at all.
worker::Dataset load_files(const std::string& role, const std::vector<std::string>& paths, const DataFlags& flags,
                           int threads, const std::string& cache, int classes, uint32_t part, uint32_t parts,
                           bool training) {
  if (paths.empty()) throw std::invalid_argument(role + ": no file given");
  const std::vector<std::string> caches = cache_paths_for(cache, paths);
  if (paths.size() == 1) {
    return training ? load_training_data(paths[0], flags, threads, caches[0], classes)
                    : load_data(role, paths[0], flags, threads, caches[0], classes, part, parts);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Whole files per part when there are enough, else a range of each.
  const bool whole_files = parts > 1 && paths.size() >= parts;
  std::vector<size_t> files(paths.size());
  std::iota(files.begin(), files.end(), size_t{0});
  if (whole_files) files = files_of_part(paths, part, parts);
  worker::DatasetArrays all;
  const uint32_t file_part = whole_files ? 0 : part, file_parts = whole_files ? 1 : parts;
  for (const size_t i : files) {
    const worker::Dataset d = load_data(role, paths[i], flags, threads, caches[i], classes, file_part, file_parts);
    worker::append_rows(all, d.view());
  }
  worker::Dataset joined(std::move(all));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "%s\n",
               fmt::format("{}: {} file{}{}, {} examples, {} nonzeros in {:.2f} s", role, files.size(),
                           files.size() == 1 ? "" : "s",
                           whole_files ? fmt::format(" (whole, of {})", paths.size()) : std::string(), joined.rows(),
                           human_count(static_cast<double>(joined.nnz())), s)
                   .c_str());
  if (training && joined.rows() == 0) {
    throw std::runtime_error(fmt::format("{} ... {}: no examples to train on in any of the {} files{}", paths.front(),
                                         paths.back(), paths.size(),
                                         flags.skip_bad_lines ? " (every line was empty, a comment or skipped)" : ""));
  }
  return joined;
}

}  // namespace

worker::Dataset load_data(const std::string& role, const std::vector<std::string>& paths, const DataFlags& flags,
                          int threads, const std::string& cache_path, int classes, uint32_t part, uint32_t parts) {
  return load_files(role, paths, flags, threads, cache_path, classes, part, parts, false);
}

worker::Dataset load_training_data(const std::vector<std::string>& paths, const DataFlags& flags, int threads,
                                   const std::string& cache_path, int classes) {
  return load_files("train", paths, flags, threads, cache_path, classes, 0, 1, true);
}

}  // namespace parafab::apps
