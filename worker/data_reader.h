// Text readers: libsvm/svmlight and Criteo display-ads TSV.
//
//   worker::ReadOptions opt;  opt.format = worker::DataFormat::kAuto;
//   worker::ReadStats stats;
//   worker::Dataset d = worker::read_text_dataset("train.svm", opt, &stats);
//
// libsvm: "label idx:val idx:val ... # comment", labels +1/-1 or 1/0, indices
// are non-negative integers used as keys as they are; blank lines and lines
// starting with '#' are skipped. Criteo: "label \t I1..I13 \t C1..C26"
// (40 tab-separated fields, any but the label may be empty); integer columns
// become keys hash_feature(j, bucket(v)) with value 1, where bucket(v) = v for
// v <= 2 and floor(ln(v)^2) above (the log-square bucketing of the Criteo
// competition's winning libffm features); hex columns become
// hash_feature(13 + j, hex) with value 1.
//
// Every error throws DataError naming file:line:column (1-based; the column is
// the byte column of the offending token or field, or of the byte itself for a
// non-ASCII byte); the first bad line throws. With skip_bad_lines the line is
// skipped and counted in ReadStats instead, and nothing else is lost. A bad
// last line in a file that does not end with '\n' adds "(file ends mid-line:
// truncated?)". '\r\n' line endings are accepted in both formats, and so is
// a UTF-8 byte order mark opening the input (dropped: line 1's columns count
// from after it); anywhere else its bytes are non-ASCII bytes.
//
// libsvm details: tokens are separated by spaces or tabs; labels may be
// written +1, 1, 1.0 (-> 1) or -1, 0, -1.0, 0.0 (-> 0); values must be finite
// floats (a leading '+' is allowed, values below float's range become 0 or a
// denormal); indices need not be sorted and duplicates stay separate nonzeros;
// a line with only a label is an empty row. "qid:" tokens are rejected. Bytes
// >= 0x80 are an error outside a comment; a comment (from a '#' at the start
// of a token) may hold any valid UTF-8.
//
// Threads: with threads > 1 the input is split at newlines into up to that
// many chunks (at least 64 KiB each), parsed in parallel and joined in order;
// rows, arrays, errors and line numbers are exactly those of one thread.
// threads < 1 counts as 1.
//
// Compressed files (gzip, bzip2, xz: worker/compressed_input.h) are read
// as their decompressed text, held in memory as a pipe's bytes are; errors
// keep the text's line numbers.
//
// kAuto picks the format from the first line that is neither blank nor a '#'
// comment: 40 tab-separated fields means Criteo, anything else libsvm (also
// for an input with no such line).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "worker/dataset.h"

namespace parafab::worker {

enum class DataFormat { kAuto, kLibsvm, kCriteo };

// "libsvm", "criteo", "auto" -> DataFormat; throws std::invalid_argument otherwise.
DataFormat parse_data_format(const std::string& name);
const char* data_format_name(DataFormat f);

struct ReadOptions {
  DataFormat format = DataFormat::kAuto;  // auto: by the first data line
  bool skip_bad_lines = false;
  int threads = 1;                        // parser threads (chunks of the file)
  int classes = 2;                        // libsvm: > 2 reads labels as class ids 0 .. classes-1
  // Read only part `part` of `parts` newline-aligned byte ranges of equal
  // size (a worker's share of one file); errors keep the file's line numbers.
  uint32_t part = 0, parts = 1;
};

struct ReadStats {
  uint64_t lines = 0;            // lines in the input (or the part), a last one without '\n' included
  uint64_t examples = 0;         // rows read
  uint64_t skipped_lines = 0;    // bad lines skipped (skip_bad_lines)
  std::vector<std::string> first_errors;  // up to 10 messages of skipped lines, in file order
  DataFormat format = DataFormat::kAuto;  // the format actually read
};

// The format of a file as kAuto would pick it (from its first data line),
// or `format` itself when it is not kAuto. Reads only the file's start.
DataFormat detect_file_format(const std::string& path, DataFormat format);

Dataset read_text_dataset(const std::string& path, const ReadOptions& options,
                          ReadStats* stats = nullptr);

// The same from memory; `name` stands for the file in error messages.
Dataset parse_text_dataset(std::string_view text, const std::string& name,
                           const ReadOptions& options, ReadStats* stats = nullptr);

}  // namespace parafab::worker
