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

// Writes one probability per line ("%.7g"), in order. Throws
// std::runtime_error naming the path on I/O errors.
void write_probabilities(const std::string& path, const std::vector<float>& probabilities);

// "1.23M", "456.7k", "12".
std::string human_count(double v);

}  // namespace parafab::apps
