// Checks of numeric flags whose refusals read at a glance. CLI11's own
// CLI::PositiveNumber and CLI::NonNegativeNumber refuse 0 with "Value 0 not
// in range 0.000000 to 1797693134862315708145274237317043567980...", the
// largest double written out in 309 digits, and let "nan" through; these say
// "--threads: 0 is not a positive number" (CLI11 puts the flag in front).
//
//   cmd->add_option("--threads", n, "Host threads")->check(apps::kPositiveNumber);
//
// The names in --help stay CLI11's: POSITIVE and NONNEGATIVE.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

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

}  // namespace detail

inline const CLI::Validator kPositiveNumber = detail::number_check(false, "POSITIVE", "a positive number");
inline const CLI::Validator kNonNegativeNumber = detail::number_check(true, "NONNEGATIVE", "a number >= 0");

}  // namespace parafab::apps
