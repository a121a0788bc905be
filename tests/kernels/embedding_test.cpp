// kernels::embedding_gather and embedding_scatter_add against float64 host
// references, on random field batches with empty rows, repeated slots within
// and across rows, several nonzeros of one field in a row, no values, an
// empty batch, a view whose row_ptr does not start at 0, on 1 to 3 host
// threads; and the adjoint identity <gather(E), D> = <E, scatter(D)> that
// makes the scatter the gather's transpose.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/memory.h"
#include "tests/kernels/kernel_test_util.h"

namespace parafab::kernels {
namespace {

using testing::kFloatU;

struct HostFieldBatch {
  std::vector<uint64_t> row_ptr{0};
  std::vector<uint32_t> cols;
  std::vector<float> vals;  // empty: every value is 1
  std::vector<uint8_t> fields;
  int n_fields = 0;
  int64_t n_rows() const { return static_cast<int64_t>(row_ptr.size()) - 1; }
  double value(uint64_t k) const { return vals.empty() ? 1.0 : static_cast<double>(vals[k]); }
};

struct FieldSpec {
  const char* name;
  int64_t rows;
  int64_t slots;
  int n_fields;
  int max_nnz;  // row lengths uniform in [0, max_nnz], plus 10% empty rows
};

void PrintTo(const FieldSpec& s, std::ostream* os) { *os << s.name; }

// Slots and fields drawn with replacement: few slots repeat within and across
// rows, and a row often has several nonzeros of one field.
HostFieldBatch random_field_batch(const FieldSpec& s, bool with_vals, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  HostFieldBatch b;
  b.n_fields = s.n_fields;
  for (int64_t i = 0; i < s.rows; ++i) {
    int len = static_cast<int>(rng() % static_cast<uint64_t>(s.max_nnz + 1));
    if (u(rng) < 0.1) len = 0;
    for (int k = 0; k < len; ++k) {
      b.cols.push_back(static_cast<uint32_t>(rng() % static_cast<uint64_t>(s.slots)));
      b.fields.push_back(static_cast<uint8_t>(rng() % static_cast<uint64_t>(s.n_fields)));
      if (with_vals) b.vals.push_back(static_cast<float>(2.0 * u(rng) - 1.0));
    }
    b.row_ptr.push_back(b.cols.size());
  }
  return b;
}

class DeviceFieldBatch {
 public:
  explicit DeviceFieldBatch(const HostFieldBatch& h)
      : row_ptr_(h.row_ptr), cols_(h.cols), vals_(h.vals), fields_(h.fields), host_(h) {}
  // Rows [r0, r1): row_ptr starts at row r0's offset, cols and friends stay
  // whole (the offsets index them), as the worker slices a batch.
  FieldCsr rows(int64_t r0, int64_t r1) const {
    return FieldCsr{row_ptr_.data() + r0, cols_.data(), host_.vals.empty() ? nullptr : vals_.data(),
                    fields_.data(),       r1 - r0,      host_.n_fields};
  }
  FieldCsr all() const { return rows(0, host_.n_rows()); }

 private:
  DeviceArray<uint64_t> row_ptr_;
  DeviceArray<uint32_t> cols_;
  DeviceArray<float> vals_;
  DeviceArray<uint8_t> fields_;
  const HostFieldBatch& host_;
};

// A reference value and the bound on the kernel's float32 error: each of its
// c terms rounded once or twice (product, scale), then summed recursively:
// (c + 2) u sum |t| (Higham, eq. 4.4), doubled.
struct RefArray {
  std::vector<double> value;
  std::vector<double> abs_sum;
  std::vector<double> count;
  explicit RefArray(size_t n) : value(n, 0.0), abs_sum(n, 0.0), count(n, 0.0) {}
  void add(size_t at, double t) {
    value[at] += t;
    abs_sum[at] += std::fabs(t);
    count[at] += 1.0;
  }
  double tol(size_t at) const { return 2.0 * (count[at] + 2.0) * kFloatU * abs_sum[at] + 1e-30; }
};

RefArray reference_gather(const HostFieldBatch& b, int64_t r0, int64_t r1,
                          const std::vector<float>& E, int d) {
  const int64_t width = int64_t{b.n_fields} * d;
  RefArray out(static_cast<size_t>((r1 - r0) * width));
  for (int64_t i = r0; i < r1; ++i) {
    for (uint64_t k = b.row_ptr[static_cast<size_t>(i)]; k < b.row_ptr[static_cast<size_t>(i) + 1];
         ++k) {
      for (int j = 0; j < d; ++j) {
        const double e = E[static_cast<size_t>(int64_t{b.cols[k]} * d + j)];
        out.add(static_cast<size_t>((i - r0) * width + int64_t{b.fields[k]} * d + j),
                b.value(k) * e);
      }
    }
  }
  return out;
}

RefArray reference_scatter(const HostFieldBatch& b, int64_t r0, int64_t r1,
                           const std::vector<float>& d_out, int d, int64_t n_slots, float scale) {
  const int64_t width = int64_t{b.n_fields} * d;
  RefArray g(static_cast<size_t>(n_slots * d));
  for (int64_t i = r0; i < r1; ++i) {
    for (uint64_t k = b.row_ptr[static_cast<size_t>(i)]; k < b.row_ptr[static_cast<size_t>(i) + 1];
         ++k) {
      for (int j = 0; j < d; ++j) {
        const double x =
            d_out[static_cast<size_t>((i - r0) * width + int64_t{b.fields[k]} * d + j)];
        g.add(static_cast<size_t>(int64_t{b.cols[k]} * d + j),
              static_cast<double>(scale) * b.value(k) * x);
      }
    }
  }
  return g;
}

void expect_matches(const std::vector<float>& got, const RefArray& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  int bad = 0;
  for (size_t t = 0; t < got.size() && bad < 5; ++t) {
    if (!(std::fabs(static_cast<double>(got[t]) - want.value[t]) <= want.tol(t))) {
      ++bad;
      ADD_FAILURE() << what << ": [" << t << "] = " << got[t] << ", want " << want.value[t]
                    << " +- " << want.tol(t);
    }
  }
}

std::vector<float> nan_array(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// Gather and scatter of rows [r0, r1) of hb, with NaN-poisoned outputs (the
// kernels must overwrite every entry).
void expect_gather_and_scatter(const HostFieldBatch& hb, const DeviceFieldBatch& db, int64_t r0,
                               int64_t r1, int64_t n_slots, int d, uint64_t seed,
                               const std::string& what) {
  const FieldCsr b = db.rows(r0, r1);
  const int64_t width = int64_t{hb.n_fields} * d;
  const std::vector<float> E = testing::random_weights(n_slots * d, 1.0, seed);
  const DeviceArray<float> dE(E);
  DeviceArray<float> out(nan_array(static_cast<size_t>((r1 - r0) * width)));
  embedding_gather(b, dE.data(), d, out.data());
  expect_matches(out.to_host(), reference_gather(hb, r0, r1, E, d), what + " gather");

  const std::vector<float> d_out = testing::random_weights((r1 - r0) * width, 1.0, seed + 1);
  const DeviceArray<float> dd(d_out);
  const float scale = 0.75f;
  DeviceArray<float> grad(nan_array(static_cast<size_t>(n_slots * d)));
  embedding_scatter_add(b, dd.data(), d, n_slots, scale, grad.data());
  expect_matches(grad.to_host(), reference_scatter(hb, r0, r1, d_out, d, n_slots, scale),
                 what + " scatter");
}

constexpr FieldSpec kSpecs[] = {
    {"no_rows", 0, 5, 3, 4},          {"one_row", 1, 9, 2, 8},
    {"all_empty", 40, 6, 3, 0},       {"one_slot", 50, 1, 2, 6},
    {"one_field", 200, 30, 1, 10},    {"few_slots", 300, 7, 3, 12},
    {"many_fields", 150, 60, 26, 30}, {"many_slots", 200, 50000, 4, 10},
};

using Param = std::tuple<FieldSpec, int /*d*/, bool /*vals*/>;

class EmbeddingTest : public ::testing::TestWithParam<Param> {
 protected:
  void TearDown() override { set_host_threads(2); }
};

TEST_P(EmbeddingTest, GatherAndScatterMatchFloat64Reference) {
  const auto& [spec, d, vals] = GetParam();
  const uint64_t seed = static_cast<uint64_t>(spec.rows * 131 + spec.slots * 7 + d);
  const HostFieldBatch hb = random_field_batch(spec, vals, seed);
  const DeviceFieldBatch db(hb);
  for (const int threads : {1, 2, 3}) {
    set_host_threads(threads);
    expect_gather_and_scatter(
        hb, db, 0, hb.n_rows(), spec.slots, d, seed + 3,
        std::string(spec.name) + " d=" + std::to_string(d) + " threads=" + std::to_string(threads));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingTest,
                         ::testing::Combine(::testing::ValuesIn(kSpecs),
                                            ::testing::Values(1, 4, 13), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(std::get<0>(info.param).name) + "_d" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_vals" : "_ones");
                         });

TEST(Embedding, ViewOfRowsWhoseOffsetsDoNotStartAtZero) {
  const HostFieldBatch hb = random_field_batch({"view", 120, 11, 3, 9}, true, 5);
  const DeviceFieldBatch db(hb);
  ASSERT_GT(hb.row_ptr[40], 0u);
  expect_gather_and_scatter(hb, db, 40, 95, 11, 5, 6, "rows [40, 95)");
  expect_gather_and_scatter(hb, db, 119, 120, 11, 5, 7, "the last row");
  expect_gather_and_scatter(hb, db, 60, 60, 11, 5, 8, "no rows at 60");
}

TEST(Embedding, ScatterIsTheTransposeOfGather) {
  // <gather(E), D> = sum_i sum_k v_k <E[c_k], D[i, f_k]> = <E, scatter(D)>.
  const HostFieldBatch hb = random_field_batch({"adjoint", 500, 40, 5, 15}, true, 9);
  const DeviceFieldBatch db(hb);
  const int d = 6;
  const int64_t slots = 40;
  const int64_t width = int64_t{hb.n_fields} * d;
  const std::vector<float> E = testing::random_weights(slots * d, 1.0, 10);
  const std::vector<float> D = testing::random_weights(hb.n_rows() * width, 1.0, 11);
  const DeviceArray<float> dE(E);
  const DeviceArray<float> dD(D);
  DeviceArray<float> out(static_cast<size_t>(hb.n_rows() * width));
  DeviceArray<float> grad(static_cast<size_t>(slots * d));
  embedding_gather(db.all(), dE.data(), d, out.data());
  embedding_scatter_add(db.all(), dD.data(), d, slots, 1.0f, grad.data());
  const std::vector<float> x = out.to_host();
  const std::vector<float> g = grad.to_host();
  double lhs = 0.0;
  double rhs = 0.0;
  double mag = 0.0;
  for (size_t t = 0; t < x.size(); ++t) {
    lhs += static_cast<double>(x[t]) * D[t];
    mag += std::fabs(static_cast<double>(x[t]) * D[t]);
  }
  for (size_t t = 0; t < g.size(); ++t) rhs += static_cast<double>(g[t]) * E[t];
  EXPECT_NEAR(lhs, rhs, 1e-5 * mag);
}

TEST(Embedding, EmptyBatchClearsTheGradient) {
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  const FieldCsr empty{row_ptr.data(), nullptr, nullptr, nullptr, 0, 3};
  DeviceArray<float> grad(nan_array(4 * 7));
  embedding_scatter_add(empty, nullptr, 7, 4, 1.0f, grad.data());
  for (const float g : grad.to_host()) EXPECT_EQ(g, 0.0f);
  embedding_gather(empty, nullptr, 7, nullptr);  // nothing to write
}

TEST(Embedding, BadSizesThrow) {
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  const FieldCsr ok{row_ptr.data(), nullptr, nullptr, nullptr, 0, 3};
  FieldCsr too_many_fields = ok;
  too_many_fields.n_fields = 257;
  FieldCsr negative_rows = ok;
  negative_rows.n_rows = -1;
  DeviceArray<float> buf(16);
  EXPECT_THROW(embedding_gather(ok, buf.data(), 0, buf.data()), std::invalid_argument);
  EXPECT_THROW(embedding_gather(too_many_fields, buf.data(), 2, buf.data()), std::invalid_argument);
  EXPECT_THROW(embedding_gather(negative_rows, buf.data(), 2, buf.data()), std::invalid_argument);
  EXPECT_THROW(embedding_scatter_add(ok, buf.data(), 2, -1, 1.0f, buf.data()),
               std::invalid_argument);
  EXPECT_THROW(embedding_scatter_add(ok, buf.data(), -3, 4, 1.0f, buf.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace parafab::kernels
