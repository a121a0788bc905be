#include "worker/synthetic_criteo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "tests/common/temp_dir.h"
#include "worker/data_reader.h"

namespace parafab::worker {
namespace {

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// 10000 = two whole blocks of 4096 and a partial one.
CriteoSyntheticOptions small() {
  CriteoSyntheticOptions o;
  o.examples = 10000;
  o.test_examples = 3000;
  o.seed = 7;
  return o;
}

bool is_hex8(std::string_view s) {
  if (s.size() != 8) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string fmt_hex(uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof s, "%08x", v);
  return s;
}

bool is_count(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

TEST(SyntheticCriteo, FilesParseWithTheProjectReader) {
  testing::TempDir dir;
  const CriteoSyntheticOptions o = small();
  const CriteoGenerationReport r = write_synthetic_criteo(o, dir.file("train.tsv"), dir.file("test.tsv"), "");
  for (const auto& [name, expected, stats] :
       {std::tuple{"train.tsv", o.examples, r.train}, std::tuple{"test.tsv", o.test_examples, r.test}}) {
    ReadOptions ro;
    ro.format = DataFormat::kCriteo;
    ro.skip_bad_lines = true;
    ReadStats rs;
    const Dataset d = read_text_dataset(dir.file(name), ro, &rs);
    EXPECT_EQ(rs.skipped_lines, 0u) << name << ": " << (rs.first_errors.empty() ? "" : rs.first_errors[0]);
    ASSERT_EQ(d.rows(), expected) << name;
    ASSERT_EQ(stats.examples, expected);
    // One key per non-empty field, and the labels the generator counted.
    EXPECT_EQ(d.nnz(), expected * 39 - stats.cat_empty - stats.int_empty) << name;
    double positives = 0;
    for (float y : d.view().labels) positives += y;
    EXPECT_EQ(positives, static_cast<double>(stats.positives));
  }
  // The text itself: 40 fields, label 0/1, counts or nothing, 8 lowercase hex digits or nothing.
  std::istringstream in(read_file(dir.file("train.tsv")));
  std::string line;
  uint64_t lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    std::vector<std::string_view> f;
    size_t start = 0;
    for (size_t i = 0; i <= line.size(); ++i) {
      if (i == line.size() || line[i] == '\t') {
        f.emplace_back(line.data() + start, i - start);
        start = i + 1;
      }
    }
    ASSERT_EQ(f.size(), 40u) << "line " << lines;
    ASSERT_TRUE(f[0] == "0" || f[0] == "1") << "line " << lines;
    for (int j = 1; j <= 13; ++j) ASSERT_TRUE(f[j].empty() || is_count(f[j])) << "line " << lines << " I" << j;
    for (int j = 14; j < 40; ++j) ASSERT_TRUE(f[j].empty() || is_hex8(f[j])) << "line " << lines << " C" << j - 13;
  }
  EXPECT_EQ(lines, o.examples);
}

TEST(SyntheticCriteo, OutputDependsOnSeedNotThreads) {
  testing::TempDir dir;
  CriteoSyntheticOptions o = small();
  o.threads = 1;
  const auto a = write_synthetic_criteo(o, dir.file("a.tsv"), dir.file("a.test"), dir.file("a.model"));
  o.threads = 4;
  const auto b = write_synthetic_criteo(o, dir.file("b.tsv"), dir.file("b.test"), dir.file("b.model"));
  EXPECT_EQ(read_file(dir.file("a.tsv")), read_file(dir.file("b.tsv")));
  EXPECT_EQ(read_file(dir.file("a.test")), read_file(dir.file("b.test")));
  EXPECT_EQ(read_file(dir.file("a.model")), read_file(dir.file("b.model")));
  EXPECT_EQ(a.test.planted_loss, b.test.planted_loss);  // summed in block order either way
  EXPECT_EQ(a.crosses, b.crosses);
  o.seed = 8;
  const auto c = write_synthetic_criteo(o, dir.file("c.tsv"), "", dir.file("c.model"));
  EXPECT_NE(read_file(dir.file("a.tsv")), read_file(dir.file("c.tsv")));
  EXPECT_NE(read_file(dir.file("a.model")), read_file(dir.file("c.model")));
  EXPECT_NE(read_file(dir.file("a.tsv")).substr(0, 100000), read_file(dir.file("a.test")).substr(0, 100000))
      << "the test set must be a different draw";
  EXPECT_EQ(c.test.examples, 0u) << "no test path, no test file";
}

struct Rates {
  double empty, int_empty, label;
};
void PrintTo(const Rates& r, std::ostream* os) {
  *os << "empty " << r.empty << ", int empty " << r.int_empty << ", label " << r.label;
}

class SyntheticCriteoRates : public ::testing::TestWithParam<Rates> {};

// Binomial counts within 5 standard deviations (exact when the rate is 0 or 1).
TEST_P(SyntheticCriteoRates, FollowTheOptions) {
  testing::TempDir dir;
  CriteoSyntheticOptions o = small();
  o.examples = 20000;
  o.test_examples = 0;
  o.empty_rate = GetParam().empty;
  o.int_empty_rate = GetParam().int_empty;
  o.label_rate = GetParam().label;
  const CriteoPlantedModel model(o);
  write_synthetic_criteo(o, dir.file("t.tsv"), "", "");
  // Counted from the file, not from the generator.
  const CriteoFileStats s = measure_criteo_file(model, dir.file("t.tsv"));
  ASSERT_EQ(s.examples, o.examples);
  const double n = static_cast<double>(o.examples);
  auto within = [](double count, double trials, double p) {
    return std::fabs(count - trials * p) <= 5 * std::sqrt(trials * p * (1 - p)) + 1e-9;
  };
  EXPECT_TRUE(within(static_cast<double>(s.cat_empty), 26 * n, o.empty_rate)) << s.cat_empty_rate();
  EXPECT_TRUE(within(static_cast<double>(s.int_empty), 13 * n, o.int_empty_rate)) << s.int_empty_rate();
  // The bias is calibrated so that the mean planted probability is the label
  // rate (to the calibration sample's and this sample's noise, both < 0.002)...
  EXPECT_NEAR(s.planted_prob / n, o.label_rate, 0.01);
  // ... and the labels are Bernoulli draws of those probabilities: the sum's
  // variance, sum p(1-p), is at most n r (1 - r).
  EXPECT_LE(std::fabs(static_cast<double>(s.positives) - s.planted_prob),
            5 * std::sqrt(n * o.label_rate * (1 - o.label_rate)))
      << s.label_rate();
}

INSTANTIATE_TEST_SUITE_P(Options, SyntheticCriteoRates,
                         ::testing::Values(Rates{0.02, 0.1, 0.25}, Rates{0.3, 0.0, 0.6}, Rates{0.0, 1.0, 0.05},
                                           Rates{1.0, 0.5, 0.4}),
                         [](const ::testing::TestParamInfo<Rates>& info) {
                           auto pct = [](double r) { return std::to_string(static_cast<int>(std::lround(100 * r))); };
                           return "empty" + pct(info.param.empty) + "_int" + pct(info.param.int_empty) + "_label" +
                                  pct(info.param.label);
                         });

// -log P(label) of a logistic model with per-key weights: an additive fit of
// the training file by AdaGrad (the shape of `parafab train --model lr`).
double additive_fit_held_out_loss(const DatasetView& train, const DatasetView& test) {
  std::unordered_map<uint64_t, size_t> slot;
  for (uint64_t k : train.keys) slot.emplace(k, slot.size());
  std::vector<double> w(slot.size(), 0.0), g(slot.size(), 1e-8);
  double b = 0, gb = 1e-8;
  const double eta = 0.05;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (size_t i = 0; i < train.rows(); ++i) {
      const auto keys = train.row_keys(i);
      double z = b;
      for (uint64_t k : keys) z += w[slot[k]];
      const double grad = 1 / (1 + std::exp(-z)) - train.labels[i];
      gb += grad * grad;
      b -= eta * grad / std::sqrt(gb);
      for (uint64_t k : keys) {
        const size_t j = slot[k];
        g[j] += grad * grad;
        w[j] -= eta * grad / std::sqrt(g[j]);
      }
    }
  }
  double loss = 0;
  for (size_t i = 0; i < test.rows(); ++i) {
    double z = b;
    for (uint64_t k : test.row_keys(i)) {
      const auto it = slot.find(k);
      if (it != slot.end()) z += w[it->second];
    }
    const double s = test.labels[i] > 0.5f ? z : -z;
    loss += s >= 0 ? std::log1p(std::exp(-s)) : -s + std::log1p(std::exp(s));
  }
  return loss / static_cast<double>(test.rows());
}

TEST(SyntheticCriteo, CrossesCarryWhatAnAdditiveModelCannotFit) {
  testing::TempDir dir;
  CriteoSyntheticOptions o;  // the defaults the CLI shows
  o.examples = 60000;
  o.test_examples = 20000;
  const CriteoGenerationReport r = write_synthetic_criteo(o, dir.file("train.tsv"), dir.file("test.tsv"), "");
  const double planted = r.test.planted_log_loss();
  // The planted model with its crosses replaced by their main-effect
  // projection: the defaults put ~0.12 nats there, 0.05 leaves room for seeds.
  EXPECT_GT(r.test.additive_log_loss(), planted + 0.05)
      << "planted " << planted << " additive " << r.test.additive_log_loss();
  // A fitted additive model (per field value and integer bucket) does no better.
  ReadOptions ro;
  ro.format = DataFormat::kCriteo;
  const Dataset train = read_text_dataset(dir.file("train.tsv"), ro), test = read_text_dataset(dir.file("test.tsv"), ro);
  const double fitted = additive_fit_held_out_loss(train.view(), test.view());
  EXPECT_GT(fitted, planted + 0.05) << "planted " << planted << " fitted additive " << fitted;
  // ... while it still learns something: below the loss of the label rate alone.
  const double p = r.test.label_rate();
  EXPECT_LT(fitted, -(p * std::log(p) + (1 - p) * std::log(1 - p)) - 0.02) << fitted;
  std::printf("held-out log loss: planted %.4f, additive projection %.4f, fitted additive %.4f\n", planted,
              r.test.additive_log_loss(), fitted);

  // The held-out planted loss is also a function of the written file.
  const CriteoFileStats m = measure_criteo_file(CriteoPlantedModel(o), dir.file("test.tsv"));
  EXPECT_EQ(m.examples, r.test.examples);
  EXPECT_EQ(m.positives, r.test.positives);
  EXPECT_NEAR(m.planted_log_loss(), planted, 1e-12);
  EXPECT_NEAR(m.additive_log_loss(), r.test.additive_log_loss(), 1e-12);
}

TEST(SyntheticCriteo, WithoutCrossesTheAdditiveModelIsThePlantedOne) {
  testing::TempDir dir;
  CriteoSyntheticOptions o = small();
  o.crosses = 0;
  const CriteoGenerationReport r = write_synthetic_criteo(o, dir.file("t.tsv"), dir.file("t.test"), "");
  EXPECT_TRUE(r.crosses.empty());
  EXPECT_DOUBLE_EQ(r.test.planted_log_loss(), r.test.additive_log_loss());
}

TEST(SyntheticCriteo, CrossesAreDistinctPairsOfFewFields) {
  for (int crosses : {1, 8, 10, 45, 325}) {
    CriteoSyntheticOptions o = small();
    o.crosses = crosses;
    const CriteoPlantedModel m(o);
    const auto& p = m.crosses();
    ASSERT_EQ(p.size(), static_cast<size_t>(crosses));
    std::set<std::pair<int, int>> seen(p.begin(), p.end());
    EXPECT_EQ(seen.size(), p.size()) << "pairs repeat";
    std::set<int> fields;
    for (const auto& [f, g] : p) {
      ASSERT_LT(f, g);
      ASSERT_GE(f, 0);
      ASSERT_LT(g, kSyntheticCriteoCats);
      fields.insert(f);
      fields.insert(g);
    }
    size_t pool = 2;
    while (pool * (pool - 1) / 2 < static_cast<size_t>(crosses)) ++pool;
    EXPECT_LE(fields.size(), pool) << crosses << " crosses";
  }
}

TEST(SyntheticCriteo, ValueStringsRoundTripAndForeignOnesAreRejected) {
  CriteoSyntheticOptions o = small();
  o.vocab = {50};
  const CriteoPlantedModel m(o);
  ASSERT_EQ(m.options().vocab, std::vector<uint32_t>(26, 50));
  std::set<uint32_t> hashes;
  for (int f = 0; f < kSyntheticCriteoCats; ++f) {
    for (uint32_t id = 0; id < 50; ++id) {
      const uint32_t h = CriteoPlantedModel::value_hash(f, id);
      ASSERT_EQ(m.value_id(f, h), id);
      hashes.insert(h);
    }
    EXPECT_EQ(m.value_id(f, CriteoPlantedModel::value_hash(f, 50)), CriteoExample::kEmpty);
  }
  EXPECT_EQ(hashes.size(), 26u * 50u) << "columns should not share value strings";

  // A line of 40 fields, all empty but the label and those given (field 1 = I1, 14 = C1).
  auto line = [](std::string label, std::vector<std::pair<int, std::string>> set) {
    std::vector<std::string> f(40);
    f[0] = std::move(label);
    for (auto& [i, v] : set) f[static_cast<size_t>(i)] = std::move(v);
    std::string s = f[0];
    for (size_t i = 1; i < f.size(); ++i) s += "\t" + f[i];
    return s;
  };
  CriteoExample x;
  bool label = false;
  std::string error;
  const std::string c3 = fmt_hex(CriteoPlantedModel::value_hash(2, 17));
  ASSERT_TRUE(m.parse_line(line("1", {{2, "12"}, {16, c3}}), x, label, &error)) << error;
  EXPECT_TRUE(label);
  EXPECT_EQ(x.ints[0], -1);
  EXPECT_EQ(x.ints[1], 12);
  EXPECT_EQ(x.cat[0], CriteoExample::kEmpty);
  EXPECT_EQ(x.cat[2], 17u);
  EXPECT_FALSE(m.parse_line(line("1", {}) + "\t", x, label, &error));
  EXPECT_NE(error.find("40"), std::string::npos) << error;
  EXPECT_FALSE(m.parse_line(line("2", {}), x, label, &error));
  EXPECT_NE(error.find("label"), std::string::npos) << error;
  EXPECT_FALSE(m.parse_line(line("0", {{1, "-3"}}), x, label, &error));
  EXPECT_NE(error.find("I1"), std::string::npos) << error;
  EXPECT_FALSE(m.parse_line(line("0", {{15, fmt_hex(CriteoPlantedModel::value_hash(1, 50))}}), x, label, &error));
  EXPECT_NE(error.find("C2"), std::string::npos) << error;
  EXPECT_FALSE(m.parse_line(line("0", {{15, "abc"}}), x, label, &error));
  EXPECT_NE(error.find("C2"), std::string::npos) << error;

  testing::TempDir dir;
  write_synthetic_criteo(o, dir.file("t.tsv"), "", "");
  std::string text = read_file(dir.file("t.tsv"));
  const size_t second = text.find('\n') + 1;
  text.insert(second, line("0", {{1, "x"}}) + "\n");
  std::ofstream(dir.file("bad.tsv"), std::ios::binary) << text;
  try {
    (void)measure_criteo_file(m, dir.file("bad.tsv"));
    FAIL() << "a foreign line was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("bad.tsv") + ":2: I1"), std::string::npos) << e.what();
  }
}

TEST(SyntheticCriteo, DescriptionListsTheModel) {
  testing::TempDir dir;
  const CriteoSyntheticOptions o = small();
  write_synthetic_criteo(o, dir.file("t.tsv"), "", dir.file("t.model"));
  const CriteoPlantedModel m(o);
  std::istringstream in(read_file(dir.file("t.model")));
  std::string line;
  size_t crosses = 0, ints = 0;
  std::vector<size_t> values(26, 0);
  double bias = std::numeric_limits<double>::quiet_NaN();
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "bias") ls >> bias;
    if (key == "cross") ++crosses;
    if (key == "int") ++ints;
    if (key == "value") {
      std::string col, hex;
      uint32_t id = 0;
      ls >> col >> hex >> id;
      const int f = std::stoi(col.substr(1)) - 1;
      ASSERT_TRUE(f >= 0 && f < 26) << line;
      ASSERT_EQ(m.value_id(f, static_cast<uint32_t>(std::stoul(hex, nullptr, 16))), id) << line;
      ++values[static_cast<size_t>(f)];
    }
  }
  EXPECT_NEAR(bias, m.bias(), 1e-7);
  EXPECT_EQ(crosses, static_cast<size_t>(o.crosses));
  EXPECT_EQ(ints, 13u);
  for (int f = 0; f < 26; ++f) EXPECT_EQ(values[static_cast<size_t>(f)], o.vocab[static_cast<size_t>(f)]) << "C" << f + 1;
}

TEST(SyntheticCriteo, BadOptionsAreRefusedNamingTheFlag) {
  testing::TempDir dir;
  const std::vector<std::pair<std::function<void(CriteoSyntheticOptions&)>, std::string>> cases = {
      {[](auto& o) { o.examples = 0; }, "--examples"},
      {[](auto& o) { o.empty_rate = -0.1; }, "--empty-rate"},
      {[](auto& o) { o.empty_rate = 1.5; }, "--empty-rate"},
      {[](auto& o) { o.empty_rate = std::nan(""); }, "--empty-rate"},
      {[](auto& o) { o.int_empty_rate = 2; }, "--int-empty-rate"},
      {[](auto& o) { o.label_rate = 0; }, "--label-rate"},
      {[](auto& o) { o.label_rate = 1; }, "--label-rate"},
      {[](auto& o) { o.crosses = 326; }, "325"},
      {[](auto& o) { o.crosses = -1; }, "--crosses"},
      {[](auto& o) { o.cross_dim = 0; }, "--cross-dim"},
      {[](auto& o) { o.vocab = {10, 20, 30}; }, "--vocab needs 1 or 26"},
      {[](auto& o) { o.vocab = {0}; }, "--vocab"},
      {[](auto& o) { o.zipf_exponent = -1; }, "--zipf"},
      {[](auto& o) { o.cross_sigma = std::numeric_limits<double>::infinity(); }, "--cross-sigma"},
      {[](auto& o) { o.main_sigma = -1; }, "--main-sigma"},
      {[](auto& o) { o.int_terms = 14; }, "--int-terms"},
  };
  for (const auto& [mutate, flag] : cases) {
    CriteoSyntheticOptions o = small();
    mutate(o);
    try {
      write_synthetic_criteo(o, dir.file("x.tsv"), "", "");
      ADD_FAILURE() << "accepted bad options (" << flag << ")";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::ifstream(dir.file("x.tsv")).good()) << "a file was written for bad options (" << flag << ")";
  }
  EXPECT_THROW(write_synthetic_criteo(small(), "/nonexistent-dir/x.tsv", "", ""), std::runtime_error);
}

}  // namespace
}  // namespace parafab::worker
