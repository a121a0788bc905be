// Private to worker/: the per-line libsvm/svmlight parser behind
// read_text_dataset. One call parses one line (without its '\n'; a trailing
// '\r' is the caller's to strip) and appends one row to the arrays.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "worker/dataset.h"

namespace parafab::worker::detail {

enum class LineStatus {
  kRow,     // one row appended
  kNoData,  // blank or comment-only line: nothing appended
  kBad,     // malformed: *issue says where and why, the arrays are unchanged
};

// What is wrong with a line: 1-based byte column and the message (without the
// file:line:column prefix, which the reader adds).
struct LineIssue {
  uint64_t column = 0;
  std::string message;
};

// A token as messages show it: quoted, at most 40 bytes, other bytes than
// printable ASCII as \xNN.
std::string quote_token(std::string_view tok);

// `label idx:val idx:val ... [# comment]`. Labels +1/1/1.0 -> 1 and
// -1/0/-1.0/0.0 -> 0; indices are uint64 keys as written (0 allowed, any order,
// duplicates kept); values finite floats. With classes > 2 the label is a
// class id, an integer in [0, classes). Never throws on bad input.
// Records column and message in issue (when not null) and returns kBad.
LineStatus fail_line(LineIssue* issue, uint64_t column, std::string message);

LineStatus parse_libsvm_line(std::string_view line, DatasetArrays& out, LineIssue* issue, int classes = 2);

// True for a line that a libsvm reader skips (blank, or '#' after blanks).
bool libsvm_line_is_empty(std::string_view line);

// Checks that a comment's bytes are valid UTF-8; on failure sets *bad_offset
// to the offset of the first byte of the bad sequence.
bool valid_utf8(std::string_view s, size_t* bad_offset);

}  // namespace parafab::worker::detail
