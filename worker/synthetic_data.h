// Synthetic libsvm data from a planted logistic model (`parafab gen-data`).
//
// Feature ranks follow a power law (Zipf with exponent s over F features), the
// way hashed click-log features do; each example draws `nnz` distinct features
// of value 1, and its label is Bernoulli(sigmoid(b + sum_j w*_j)) with planted
// weights w*_j ~ N(0, sigma^2). libsvm indices are 1-based (feature id + 1),
// ascending within a line, as liblinear requires. Output is a function of the
// options alone (not of the thread count): examples are generated in fixed
// blocks, each from its own seeded stream.
//
//   worker::SyntheticOptions o; o.examples = 100000; o.features = 1 << 20;
//   worker::write_synthetic_libsvm(o, "train.svm", "test.svm", "planted.weights");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/dataset.h"

namespace parafab::worker {

struct SyntheticOptions {
  uint64_t examples = 1'000'000;  // training examples
  uint64_t test_examples = 0;     // held-out examples (needs a test path)
  uint64_t features = 1 << 20;
  int nnz = 40;                   // distinct features per example
  double zipf_exponent = 1.0;
  double weight_sigma = 0.3;      // std of the planted weights
  double bias = -0.5;
  uint64_t seed = 1;
  int threads = 1;
};

struct PlantedModel {
  double bias = 0;
  std::vector<double> weights;  // by feature id; libsvm index = id + 1
  // Margin of a libsvm example with these keys (all values 1 are not assumed).
  double margin(const uint64_t* keys, const float* values, size_t n) const;
  // Mean log loss of the model's probabilities on data (libsvm keys): the
  // floor, in expectation, for any learner on data drawn from this model.
  double log_loss(const DatasetView& data) const;
};

// The planted model of the options (deterministic in seed).
PlantedModel make_planted_model(const SyntheticOptions& options);

// Writes train (and test, when test_path is non-empty and test_examples > 0)
// libsvm files and, when weights_path is non-empty, the planted weights as
// text ("bias B" then "index weight" lines). Throws std::runtime_error naming
// the path on I/O errors or std::invalid_argument on bad options.
void write_synthetic_libsvm(const SyntheticOptions& options, const std::string& train_path,
                            const std::string& test_path, const std::string& weights_path);

// Reads a weights file written by write_synthetic_libsvm. Throws
// std::runtime_error naming path:line on malformed input, which includes an
// index larger than its line number (so the weights are never more than the
// file has lines; missing indices read as 0).
PlantedModel read_planted_model(const std::string& path);

}  // namespace parafab::worker
