// Checks of flags whose refusals read at a glance, made when the flags are
// parsed, before any work.
//
// Numbers. CLI11's own
// CLI::PositiveNumber and CLI::NonNegativeNumber refuse 0 with "Value 0 not
// in range 0.000000 to 1797693134862315708145274237317043567980...", the
// largest double written out in 309 digits, and let "nan" through; these say
// "--threads: 0 is not a positive number" (CLI11 puts the flag in front).
//
//   cmd->add_option("--threads", n, "Host threads")->check(apps::kPositiveNumber);
//
// The names in --help stay CLI11's: POSITIVE and NONNEGATIVE.
//
// Output files. A file written at the end of a run (a model, predictions,
// a benchmark's JSON) into a directory that does not exist, or cannot be
// written, used to fail after the training or the benchmark had run; this
// check refuses it up front: "--save-model: /no/such/m.pfm: directory
// /no/such does not exist".
//
//   cmd->add_option("--save-model", path, "...")->check(apps::kWritableFile);
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace parafab::apps {

namespace detail {

inline CLI::Validator number_check(bool zero_allowed, const char* help_name, const char* what) {
  return CLI::Validator(
      [zero_allowed, what](std::string& input) -> std::string {
        double x = 0.0;
        if (!CLI::detail::lexical_cast(input, x) || std::isnan(x)) return input + " is not a number";
        if (zero_allowed ? x >= 0.0 : x > 0.0) return {};
        return input + " is not " + what;
      },
      help_name);
}

// Why a file cannot be created (or replaced) at path, or "" when it can
// be: its directory must exist and be writable, and path must not be a
// directory itself.
inline std::string output_file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return "an empty path";
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path + " is a directory";
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) return path + ": directory " + dir.string() + " does not exist";
  if (!fs::is_directory(dir, ec)) return path + ": " + dir.string() + " is not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return path + ": directory " + dir.string() + " is not writable";
  return {};
}

// A file that is read when it exists and written otherwise (a binary
// cache), or a directory of such files: an existing file or directory
// passes as it is (a cache built once, in a directory this user cannot
// write, is still read), a new one must be creatable.
inline std::string cache_file_problem(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) || std::filesystem::is_directory(path, ec)) return {};
  return output_file_problem(path);
}

}  // namespace detail

// A file a command writes must be none of the files it reads, and no other
// file it writes: `train --test t.svm --predictions t.svm` would replace the
// test set, `--predictions x --save-model x` the predictions. Each pair is
// (flag, path); empty paths are skipped. Throws std::invalid_argument
// naming both flags and the file. Two paths are one file when both exist
// and are the same file (links included), or when they name the same place.
using NamedPath = std::pair<std::string, std::string>;
inline void check_distinct_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
  namespace fs = std::filesystem;
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
    const fs::path ca = fs::weakly_canonical(a, ec);
    if (ec) return a == b;
    const fs::path cb = fs::weakly_canonical(b, ec);
    return ec ? a == b : ca == cb;
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [out_flag, out] = outputs[i];
    if (out.empty()) continue;
    for (const auto& [in_flag, in] : inputs) {
      if (!in.empty() && same(in, out)) {
        throw std::invalid_argument(out_flag + " " + out + " is the file " + in_flag + " reads (" + in +
                                    "): it would be overwritten; write elsewhere");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      const auto& [other_flag, other] = outputs[j];
      if (!other.empty() && same(other, out)) {
        throw std::invalid_argument(out_flag + " " + out + " is also " + other_flag +
                                    "'s file: one would overwrite the other");
      }
    }
  }
}

inline const CLI::Validator kPositiveNumber = detail::number_check(false, "POSITIVE", "a positive number");
inline const CLI::Validator kNonNegativeNumber = detail::number_check(true, "NONNEGATIVE", "a number >= 0");
inline const CLI::Validator kWritableFile(detail::output_file_problem, "FILE");
inline const CLI::Validator kCacheFile(detail::cache_file_problem, "FILE");

}  // namespace parafab::apps
