// Private to worker/: the per-line parser of the Criteo display-ads TSV
// (label, I1..I13, C1..C26; 40 tab-separated fields). See data_reader.h for
// the key scheme.
#pragma once

#include <cstdint>
#include <string_view>

#include "worker/dataset.h"
#include "worker/libsvm_parser.h"

namespace parafab::worker::detail {

inline constexpr int kCriteoFields = 40;
inline constexpr int kCriteoIntColumns = 13;
inline constexpr int kCriteoCatColumns = 26;

// The log-square bucket of an integer feature: v for v <= 2 (negative values
// keep their two's-complement bit pattern), floor(ln(v)^2) above.
uint64_t criteo_bucket(int64_t v);

// One line without its '\n' or trailing '\r'. An empty line is kNoData.
// Appends one row with one key (value 1) per non-empty feature field, in
// column order. Never throws on bad input.
LineStatus parse_criteo_line(std::string_view line, DatasetArrays& out, LineIssue* issue);

}  // namespace parafab::worker::detail
