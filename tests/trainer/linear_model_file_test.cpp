#include "worker/linear_model_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/common/temp_dir.h"
#include "worker/data_error.h"

namespace parafab::worker {
namespace {

LinearModel sample_model() {
  LinearModel m;
  m.loss = kernels::Loss::kHinge;
  m.map = SlotMap{SlotMode::kHashed, 16};
  for (uint64_t i = 0; i < m.map.slots_with_bias(); ++i) m.weights.push_back(0.25f * i - 1.0f);
  return m;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_file(const std::string& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

void expect_refused(const std::string& path, const std::string& needle) {
  try {
    (void)load_linear_model(path);
    FAIL() << "expected DataError containing '" << needle << "'";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LinearModelFile, RoundTripIsExact) {
  testing::TempDir dir;
  const LinearModel m = sample_model();
  save_linear_model(dir.file("m.pfm"), m);
  const LinearModel r = load_linear_model(dir.file("m.pfm"));
  EXPECT_EQ(r.loss, m.loss);
  EXPECT_EQ(r.map.mode, m.map.mode);
  EXPECT_EQ(r.map.dim, m.map.dim);
  EXPECT_EQ(r.weights, m.weights);
}

TEST(LinearModelFile, CorruptionIsRefusedWithThePath) {
  testing::TempDir dir;
  const std::string p = dir.file("m.pfm");
  save_linear_model(p, sample_model());
  const std::string good = read_file(p);

  std::string bad = good;
  bad[0] = 'X';
  write_file(p, bad);
  expect_refused(p, "bad magic");

  bad = good;
  bad[good.size() - 3] ^= 0x40;  // a weight byte
  write_file(p, bad);
  expect_refused(p, "weights checksum");

  bad = good;
  bad[20] ^= 0x01;  // dim, inside the checksummed header
  write_file(p, bad);
  expect_refused(p, "header checksum");

  write_file(p, good.substr(0, good.size() - 4));
  expect_refused(p, "truncated");

  write_file(p, good.substr(0, 10));
  expect_refused(p, "truncated");

  expect_refused(dir.file("missing.pfm"), "cannot open");
}

TEST(LinearModelFile, WeightCountMustMatchTheMap) {
  testing::TempDir dir;
  LinearModel m = sample_model();
  m.weights.pop_back();
  EXPECT_THROW(save_linear_model(dir.file("m.pfm"), m), std::invalid_argument);
}

}  // namespace
}  // namespace parafab::worker
