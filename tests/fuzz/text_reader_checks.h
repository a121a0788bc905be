// What the text-reader fuzzers (libsvm_reader_fuzzer.cpp,
// criteo_reader_fuzzer.cpp) ask of worker::parse_text_dataset on any input:
//
// - it returns a dataset or throws DataError naming the file; any other
//   exception, a crash or a sanitizer report is a bug;
// - an accepted dataset is well formed: row_ptr runs 0 .. nnz and never
//   decreases, keys and values have one length, labels are 0/1 (or class ids
//   below `classes`), values are finite, the stats agree with the arrays;
// - a strict parse that succeeds reads the same as one that skips bad lines
//   (and skips none), and a strict parse fails exactly when a skipping one
//   skips something;
// - the parts of a split read (ReadOptions::part/parts) are together the
//   whole read, row for row, and fail together with it.
//
// A violated check aborts (libFuzzer reports it as a crash with the input).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "worker/data_error.h"
#include "worker/data_reader.h"

namespace parafab::fuzz {

inline constexpr const char* kFuzzFileName = "fuzz-input";


struct Outcome {
  std::optional<worker::Dataset> data;  // empty: refused with a DataError
  worker::ReadStats stats;
  std::string error;
};

// One parse; everything but a DataError naming the file escapes and crashes.
inline Outcome parse(std::string_view text, const worker::ReadOptions& opt) {
  Outcome o;
  try {
    o.data = worker::parse_text_dataset(text, kFuzzFileName, opt, &o.stats);
  } catch (const worker::DataError& e) {
    o.error = e.what();
    check(e.file() == kFuzzFileName, "DataError names another file");
    check(o.error.rfind(kFuzzFileName, 0) == 0, "DataError message does not start with the file name");
    check(e.line() >= 1, "DataError of a line has no line number");
    check(e.column() >= 1, "DataError of a line has no column");
  }
  return o;
}

// Lines as the readers count them: a UTF-8 byte order mark opening the
// input is dropped first (a mark alone is an empty input, no line).
inline uint64_t line_count(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  uint64_t n = 0;
  for (char c : text) n += c == '\n';
  return n + (!text.empty() && text.back() != '\n');
}

inline void check_dataset(const worker::Dataset& d, const worker::ReadStats& st, const worker::ReadOptions& opt,
                          std::string_view text) {
  const worker::DatasetView& v = d.view();
  check(v.row_ptr.size() == v.rows() + 1, "row_ptr has not rows + 1 entries");
  check(v.row_ptr.front() == 0, "row_ptr does not start at 0");
  check(v.row_ptr.back() == v.nnz(), "row_ptr does not end at nnz");
  check(v.keys.size() == v.values.size(), "keys and values differ in length");
  for (size_t i = 0; i < v.rows(); ++i) {
    check(v.row_ptr[i] <= v.row_ptr[i + 1], "row_ptr decreases");
    const float y = v.labels[i];
    if (opt.classes > 2 && opt.format != worker::DataFormat::kCriteo) {
      check(y >= 0 && y < static_cast<float>(opt.classes) && y == std::floor(y), "label is not a class id");
    } else {
      check(y == 0.0f || y == 1.0f, "label is not 0 or 1");
    }
  }
  for (float x : v.values) check(std::isfinite(x), "value is not finite");
  check(st.examples == v.rows(), "stats.examples differs from the rows");
  check(st.format == worker::DataFormat::kLibsvm || st.format == worker::DataFormat::kCriteo,
        "stats.format is not a concrete format");
  check(st.skipped_lines <= st.lines, "more lines skipped than read");
  check(st.examples + st.skipped_lines <= st.lines, "more rows and skips than lines");
  check(st.first_errors.size() <= 10 && st.first_errors.size() <= st.skipped_lines, "too many kept errors");
  if (!opt.skip_bad_lines) check(st.skipped_lines == 0, "a strict read skipped lines");
  if (opt.parts == 1) check(st.lines == line_count(text), "stats.lines is not the input's line count");
}

inline bool same_rows(const worker::DatasetView& a, const worker::DatasetView& b) {
  return std::equal(a.labels.begin(), a.labels.end(), b.labels.begin(), b.labels.end()) &&
         std::equal(a.row_ptr.begin(), a.row_ptr.end(), b.row_ptr.begin(), b.row_ptr.end()) &&
         std::equal(a.keys.begin(), a.keys.end(), b.keys.begin(), b.keys.end()) &&
         std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end(),
                    [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); });
}

// Every check above for `text` read with `opt` (skip_bad_lines and parts
// are varied here; format, classes and threads are the caller's).
inline void check_text_reader(std::string_view text, worker::ReadOptions opt, uint32_t parts) {
  opt.parts = 1;
  opt.part = 0;
  opt.skip_bad_lines = false;
  const Outcome strict = parse(text, opt);
  if (strict.data) check_dataset(*strict.data, strict.stats, opt, text);

  opt.skip_bad_lines = true;
  const Outcome skipping = parse(text, opt);
  check(skipping.data.has_value(), "a read that skips bad lines failed");
  check_dataset(*skipping.data, skipping.stats, opt, text);
  check(strict.data.has_value() == (skipping.stats.skipped_lines == 0),
        "strict read and skipped lines disagree");
  if (strict.data) check(same_rows(strict.data->view(), skipping.data->view()), "strict and skipping reads differ");

  if (parts <= 1) return;
  // The parts, strict: all succeed exactly when the whole does; skipping:
  // their rows in order are the whole's rows.
  for (const bool skip : {false, true}) {
    opt.skip_bad_lines = skip;
    opt.parts = parts;
    const Outcome& whole = skip ? skipping : strict;
    worker::DatasetArrays joined;
    bool all_ok = true;
    uint64_t skipped = 0;
    for (uint32_t p = 0; p < parts; ++p) {
      opt.part = p;
      const Outcome o = parse(text, opt);
      if (!o.data) {
        check(!skip, "a part that skips bad lines failed");
        all_ok = false;
        if (whole.data) violated("a part failed where the whole read succeeded");
        // Parts keep the file's line numbers: the first failing part fails
        // on the whole's first bad line.
        check(o.error == whole.error, "a part's error differs from the whole's");
        break;
      }
      check_dataset(*o.data, o.stats, opt, text);
      skipped += o.stats.skipped_lines;
      const worker::DatasetView& v = o.data->view();
      const uint64_t base = joined.keys.size();
      joined.labels.insert(joined.labels.end(), v.labels.begin(), v.labels.end());
      for (size_t r = 1; r < v.row_ptr.size(); ++r) joined.row_ptr.push_back(base + v.row_ptr[r]);
      joined.keys.insert(joined.keys.end(), v.keys.begin(), v.keys.end());
      joined.values.insert(joined.values.end(), v.values.begin(), v.values.end());
    }
    if (!all_ok) continue;
    check(whole.data.has_value(), "every part succeeded where the whole read failed");
    check(skipped == whole.stats.skipped_lines, "the parts skipped other lines than the whole");
    const worker::Dataset j(std::move(joined));
    check(same_rows(j.view(), whole.data->view()), "the parts together differ from the whole");
  }
}

}  // namespace parafab::fuzz
