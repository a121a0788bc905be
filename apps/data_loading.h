// Loading a data set for a command, with the one-line summary users see
// ("train.svm (libsvm): 1000000 examples, 40.0M nonzeros, parsed in 2.1 s").
#pragma once

#include <string>
#include <vector>

#include "worker/binary_cache.h"
#include "worker/data_reader.h"
#include "worker/dataset.h"

namespace parafab::apps {

struct DataFlags {
  std::string format = "auto";
  bool skip_bad_lines = false;
};

// Reads path (through cache_path when not empty), prints the summary and the
// skipped-line report to stderr. Throws worker::DataError on bad input.
// classes > 2: libsvm labels are class ids 0 .. classes-1.
// part/parts: read only that newline-aligned byte range (a worker's share).
worker::Dataset load_data(const std::string& role, const std::string& path, const DataFlags& flags,
                          int threads, const std::string& cache_path, int classes = 2, uint32_t part = 0,
                          uint32_t parts = 1);

// load_data of a whole training file ("train"), which must hold at least
// one example: throws std::runtime_error naming the file when it holds none
// (empty, comments only, or every line skipped), rather than training on
// nothing and reporting metrics of no examples. (A worker's part of a file
// may be empty; it is read with load_data.)
worker::Dataset load_training_data(const std::string& path, const DataFlags& flags, int threads,
                                   const std::string& cache_path, int classes = 2);

// Several files (`--train day_0.gz day_1.gz`, a shell glob): each read as
// above, with its own summary line, and their rows joined in the order given;
// then one line for all of them. One file: exactly the single-file load.
// cache_path: empty (none), or --cache as cache_paths_for reads it. The
// caller checks first that the files are of one format (check_one_format).
// part/parts of several files: with at least as many files as parts, part
// p is the whole files files_of_part assigns it (a compressed file is
// decompressed by one worker, not by every one); with fewer, the byte range
// p of every file.
worker::Dataset load_data(const std::string& role, const std::vector<std::string>& paths, const DataFlags& flags,
                          int threads, const std::string& cache_path, int classes = 2, uint32_t part = 0,
                          uint32_t parts = 1);
worker::Dataset load_training_data(const std::vector<std::string>& paths, const DataFlags& flags, int threads,
                                   const std::string& cache_path, int classes = 2);

// The cache of each of `paths` under --cache `cache`: with one file and
// `cache` not an existing directory, `cache` itself; otherwise `cache` is a
// directory (created when missing) holding one cache per file, named after
// the file: DIR/day_0.gz.pfc. Throws std::invalid_argument when several files
// are given and `cache` is a regular file, or when two of them share a name
// (their caches would overwrite each other); std::runtime_error when the
// directory cannot be created. Empty `cache`: every path empty.
std::vector<std::string> cache_paths_for(const std::string& cache, const std::vector<std::string>& paths);

// After an evaluation or prediction of `role`'s data (nnz nonzeros in all):
// a note when `dropped` of them have keys (or fields) the model never saw
// in training (weight 0), and a warning when that is every one of them, so
// that each prediction is the bias alone (another format, other hashing, a
// model of other data).
void report_unseen_keys(const std::string& role, uint64_t dropped, uint64_t nnz);

// The files (indices into `paths`, in order) of part `part` of `parts`
// when every part takes whole files (paths.size() >= parts): largest file
// first, each to the part with the fewest bytes so far (the lowest index
// among equals), so every worker computes the same split from the files'
// sizes. Throws worker::DataError when a file cannot be read.
std::vector<size_t> files_of_part(const std::vector<std::string>& paths, uint32_t part, uint32_t parts);

// Throws std::invalid_argument naming two files of different formats (as
// --format, or auto-detection, reads them): one job trains on one format.
void check_one_format(const std::vector<std::string>& paths, const DataFlags& flags);

// Writes one probability per line ("%.7g"), in order. Throws
// std::runtime_error naming the path on I/O errors.
void write_probabilities(const std::string& path, const std::vector<float>& probabilities);

// "1.23M", "456.7k", "12".
std::string human_count(double v);

}  // namespace parafab::apps
