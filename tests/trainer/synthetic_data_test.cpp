#include "worker/synthetic_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "tests/common/temp_dir.h"
#include "worker/data_reader.h"

namespace parafab::worker {
namespace {

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

SyntheticOptions small() {
  SyntheticOptions o;
  o.examples = 20000;
  o.test_examples = 5000;
  o.features = 5000;
  o.nnz = 12;
  o.seed = 7;
  return o;
}

TEST(SyntheticData, OutputDependsOnSeedNotThreads) {
  testing::TempDir dir;
  SyntheticOptions o = small();
  o.threads = 1;
  write_synthetic_libsvm(o, dir.file("a.svm"), dir.file("a.test"), dir.file("a.w"));
  o.threads = 3;
  write_synthetic_libsvm(o, dir.file("b.svm"), dir.file("b.test"), dir.file("b.w"));
  EXPECT_EQ(read_file(dir.file("a.svm")), read_file(dir.file("b.svm")));
  EXPECT_EQ(read_file(dir.file("a.test")), read_file(dir.file("b.test")));
  EXPECT_EQ(read_file(dir.file("a.w")), read_file(dir.file("b.w")));
  o.seed = 8;
  write_synthetic_libsvm(o, dir.file("c.svm"), "", "");
  EXPECT_NE(read_file(dir.file("a.svm")), read_file(dir.file("c.svm")));
  EXPECT_NE(read_file(dir.file("a.svm")), read_file(dir.file("a.test"))) << "test set must be a different draw";
}

TEST(SyntheticData, RowsFollowThePlantedModel) {
  testing::TempDir dir;
  const SyntheticOptions o = small();
  write_synthetic_libsvm(o, dir.file("t.svm"), "", dir.file("t.w"));
  const Dataset d = read_text_dataset(dir.file("t.svm"), {});
  const auto v = d.view();
  ASSERT_EQ(v.rows(), o.examples);
  const PlantedModel planted = read_planted_model(dir.file("t.w"));
  const PlantedModel expected = make_planted_model(o);
  ASSERT_EQ(planted.weights.size(), expected.weights.size());
  EXPECT_NEAR(planted.bias, expected.bias, 1e-9);
  for (size_t j = 0; j < planted.weights.size(); ++j)
    ASSERT_NEAR(planted.weights[j], expected.weights[j], 1e-8 * (1 + std::fabs(expected.weights[j])));

  // Every row: nnz distinct ascending indices in [1, F], values 1.
  double label_sum = 0, prob_sum = 0, prob_var = 0;
  uint64_t first_feature_rows = 0;
  for (size_t i = 0; i < v.rows(); ++i) {
    const auto k = v.row_keys(i);
    ASSERT_EQ(k.size(), static_cast<size_t>(o.nnz));
    for (size_t t = 0; t < k.size(); ++t) {
      ASSERT_GE(k[t], 1u);
      ASSERT_LE(k[t], o.features);
      if (t) {
        ASSERT_LT(k[t - 1], k[t]);
      }
      ASSERT_EQ(v.row_values(i)[t], 1.0f);
    }
    first_feature_rows += k[0] == 1;
    const double m = planted.margin(k.data(), v.row_values(i).data(), k.size());
    const double p = 1 / (1 + std::exp(-m));
    label_sum += v.labels[i];
    prob_sum += p;
    prob_var += p * (1 - p);
  }
  // Labels are Bernoulli(sigmoid(margin)): their sum is within 5 sd of the
  // sum of the probabilities.
  EXPECT_NEAR(label_sum, prob_sum, 5 * std::sqrt(prob_var));
  // Power law: the most frequent feature is in far more rows than a uniform
  // draw would put it (nnz / F = 0.24%).
  EXPECT_GT(first_feature_rows, v.rows() / 20);
}

TEST(SyntheticData, BadOptionsAreRefused) {
  testing::TempDir dir;
  SyntheticOptions o = small();
  o.nnz = 0;
  EXPECT_THROW(write_synthetic_libsvm(o, dir.file("x"), "", ""), std::invalid_argument);
  o = small();
  o.nnz = static_cast<int>(o.features) + 1;
  EXPECT_THROW(write_synthetic_libsvm(o, dir.file("x"), "", ""), std::invalid_argument);
  o = small();
  EXPECT_THROW(write_synthetic_libsvm(o, "/nonexistent-dir/x.svm", "", ""), std::runtime_error);
}

TEST(SyntheticData, MalformedWeightsFileNamesTheLine) {
  testing::TempDir dir;
  std::ofstream(dir.file("w")) << "bias 0.5\n1 0.25\n2 zz\n";
  try {
    (void)read_planted_model(dir.file("w"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("w") + ":3"), std::string::npos) << e.what();
  }
}

// fuzz regressions/planted_weights/index_*: an index alone asked for a
// dense vector of that many doubles (8 GB for 10^9, 8 TiB for 2^40).
TEST(SyntheticData, AnIndexBeyondItsLineNumberIsRefused) {
  testing::TempDir dir;
  for (const char* index : {"1000000000", "1099511627776", "3"}) {
    std::ofstream(dir.file("w"), std::ios::trunc) << "bias 0\n" << index << " 1\n";
    try {
      (void)read_planted_model(dir.file("w"));
      FAIL() << index;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("w") + ":2: index " + index + " is beyond its line number"),
                std::string::npos)
          << e.what();
    }
  }
  // Gaps within the line numbers read as zeros, and the bias may come last.
  std::ofstream(dir.file("w"), std::ios::trunc) << "1 0.5\n\n\n4 -1\nbias 2\n";
  const PlantedModel m = read_planted_model(dir.file("w"));
  EXPECT_EQ(m.weights, (std::vector<double>{0.5, 0, 0, -1}));
  EXPECT_EQ(m.bias, 2);
}

}  // namespace
}  // namespace parafab::worker
