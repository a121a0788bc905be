// Synthetic Criteo display-ads TSV from a planted model with feature crosses
// (`parafab gen-data --format criteo`).
//
// Each line is "label \t I1..I13 \t C1..C26", the format worker/data_reader.h
// reads. Categorical column C(f+1) has a vocabulary of V_f values, drawn
// Zipf(s) by rank and empty with probability empty_rate; value id c is
// written as the 8 lowercase hex digits of a fixed bijection of (f, c) onto
// 32 bits, so no two values of a column share a string and the file alone
// names the ids again. Integer column Ij is floor(exp(mu_j + sigma_j z)),
// z ~ N(0, 1) clamped to [-6, 6] (a log-normal count), empty with
// probability int_empty_rate. The label is Bernoulli(sigmoid(margin)) with
//
//   margin = b + sum_f w_f[c_f] + sum_{(f,g) in P} <e_f[c_f], e_g[c_g]>
//              + sum_{j < int_terms} beta_j * clamp((ln(1 + v_j) - mu_j) / sigma_j, -3, 3)
//
// where an empty field adds nothing, w ~ N(0, main_sigma^2), the latent
// vectors e (dimension cross_dim, one per field value, shared by the pairs of
// that field) have entries ~ N(0, cross_sigma^2), beta_j = +-int_weight, and
// P is `crosses` distinct field pairs drawn from the seed among the fewest
// fields that have that many pairs (8 crosses: 8 of the 10 pairs of 5
// fields), so that a small factorization machine can represent them. The
// bias b is not an option: it is solved for so that the mean planted
// probability over a fixed calibration sample is label_rate.
//
// The crosses are what a logistic regression cannot fit: what it can take of
// them is, to first order, their main-effect (ANOVA) projection
//   <e_f[a], E e_g> + <E e_f, e_g[b]> - <E e_f, E e_g>
// (E over the field's value distribution, an empty field's vector being 0),
// which is small because E e_g averages many independent vectors. The
// "additive" model of this file is the planted one with every cross replaced
// by that projection and its own bias calibrated to the same label rate; its
// log loss beside the planted one says what the crosses are worth. It is an
// additive model, not the best one: a logistic regression fitted on 1M
// default examples comes within ~0.001 nats of it (and may pass it by that).
//
// Defaults (the CLI shows them): zipf 1.2, 8 crosses of dimension 4, cross
// sigma 0.55, main sigma 0.2, I1..I3 with weight 0.3, label rate 0.25. They put
// ~0.12 nats in the crosses: at 200k examples the planted held-out log loss
// is ~0.39, the additive one ~0.51, `parafab train --model lr` ~0.51 (AUC
// ~0.70), fm ~0.49 and dnn ~0.48 with their default settings.
//
// Output is a function of the options alone, not of the thread count:
// examples are generated in fixed blocks, each from its own seeded stream
// (as worker/synthetic_data.h does).
//
//   worker::CriteoSyntheticOptions o;  o.examples = 200000;  o.test_examples = 20000;
//   const auto r = worker::write_synthetic_criteo(o, "train.tsv", "test.tsv", "");
//   // r.test.planted_log_loss(): the floor for any learner on test.tsv
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parafab::worker {

inline constexpr int kSyntheticCriteoInts = 13;  // I1..I13
inline constexpr int kSyntheticCriteoCats = 26;  // C1..C26

// The default vocabulary sizes of C1..C26 (10 .. 2000, a few of each order
// of magnitude, as in the real logs' columns).
std::vector<uint32_t> default_criteo_vocab();

struct CriteoSyntheticOptions {
  uint64_t examples = 1'000'000;  // training examples
  uint64_t test_examples = 0;     // held-out examples (needs a test path)
  std::vector<uint32_t> vocab = default_criteo_vocab();  // 26 sizes, or one for every column
  double zipf_exponent = 1.2;     // of the value frequencies within a column
  double empty_rate = 0.02;       // P(a categorical field is empty)
  double int_empty_rate = 0.1;    // P(an integer field is empty)
  double label_rate = 0.25;       // the mean planted probability; the bias is solved for it
  int crosses = 8;                // planted crossed field pairs, at most 26*25/2
  int cross_dim = 4;              // dimension of the latent vectors
  double cross_sigma = 0.55;      // std of a latent vector's entries
  double main_sigma = 0.2;        // std of the per-value weights
  int int_terms = 3;              // I1..I(int_terms) enter the margin
  double int_weight = 0.3;        // |beta_j|
  uint64_t seed = 1;
  int threads = 1;
};

// One example by value ids: cat[f] in [0, V_f) or kEmpty, ints[j] >= 0 or -1
// for an empty field.
struct CriteoExample {
  static constexpr uint32_t kEmpty = 0xffffffffu;
  std::array<uint32_t, kSyntheticCriteoCats> cat{};
  std::array<int64_t, kSyntheticCriteoInts> ints{};
};

// Counts and log-loss sums over written examples; add() merges in file order.
struct CriteoFileStats {
  uint64_t examples = 0, positives = 0;
  uint64_t cat_empty = 0, int_empty = 0;  // empty fields, of 26 and 13 per example
  double planted_loss = 0;                // sum of -log P_planted(label)
  double additive_loss = 0;               // sum of -log P_additive(label)
  double planted_prob = 0;                // sum of P_planted(label = 1)

  double planted_log_loss() const { return examples ? planted_loss / static_cast<double>(examples) : 0; }
  double additive_log_loss() const { return examples ? additive_loss / static_cast<double>(examples) : 0; }
  double label_rate() const { return examples ? static_cast<double>(positives) / static_cast<double>(examples) : 0; }
  double cat_empty_rate() const;
  double int_empty_rate() const;
  void add(const CriteoFileStats& o);
};

// The planted model and the distribution of the examples. Construction
// validates the options (std::invalid_argument naming the flag), draws the
// parameters from the seed and calibrates the biases; copies share state.
class CriteoPlantedModel {
 public:
  explicit CriteoPlantedModel(const CriteoSyntheticOptions& options);

  const CriteoSyntheticOptions& options() const;
  double bias() const;
  double additive_bias() const;
  // The crossed field pairs, 0-based categorical fields (0 = C1), f < g.
  const std::vector<std::pair<int, int>>& crosses() const;

  double margin(const CriteoExample& x) const;
  double additive_margin(const CriteoExample& x) const;
  // The 32-bit value written for id `id` of categorical field f, and back
  // (kEmpty when `hash` is not a value of f's vocabulary).
  static uint32_t value_hash(int field, uint32_t id);
  uint32_t value_id(int field, uint32_t hash) const;

  // Parses one TSV line (without '\n') into x and label; on failure returns
  // false and sets *error (the field and what is wrong).
  bool parse_line(std::string_view line, CriteoExample& x, bool& label, std::string* error) const;

  // Writes the parameters as text: '#' comments, then "key value..." lines
  // (bias, crosses, integer terms, vocabularies, then one line per value
  // with its weight and, for crossed fields, its latent vector).
  void write_description(const std::string& path) const;

 private:
  struct Impl;
  friend class CriteoGenerator;  // the block generator of synthetic_criteo.cpp
  std::shared_ptr<const Impl> impl_;
};

struct CriteoGenerationReport {
  CriteoFileStats train, test;  // test is empty without a test file
  double bias = 0;              // the calibrated planted bias
  std::vector<std::pair<int, int>> crosses;  // as CriteoPlantedModel::crosses()
};

// Writes the train (and test, when test_path is non-empty and test_examples
// > 0) TSV files and, when description_path is non-empty, the planted model
// (CriteoPlantedModel::write_description). Throws std::invalid_argument on
// bad options, std::runtime_error naming the path on I/O errors.
CriteoGenerationReport write_synthetic_criteo(const CriteoSyntheticOptions& options, const std::string& train_path,
                                              const std::string& test_path, const std::string& description_path);

// The same statistics from a file written with the model's options: the
// planted (and additive) held-out log loss of any such file. Throws
// std::runtime_error naming path:line on a line that is not the model's.
CriteoFileStats measure_criteo_file(const CriteoPlantedModel& model, const std::string& path);

}  // namespace parafab::worker
