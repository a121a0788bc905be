// The fm/dnn model file: a round trip keeps every field, and every kind of
// damage is refused naming the file.
#include "worker/model_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/common/temp_dir.h"
#include "worker/data_error.h"
#include "worker/feature_hashing.h"
#include "worker/linear_model_file.h"
#include "worker/saved_model_store.h"

namespace parafab::worker {
namespace {

SavedModel sample() {
  DatasetArrays a;
  a.keys = {hash_feature(3, 1), hash_feature(5, 2), 2};
  a.values = {1, 1, 0.5f};
  a.labels = {1};
  a.row_ptr = {0, 3};
  SavedModel m;
  m.spec = ModelSpec::dnn(Dataset(a).view(), 3, {4, 2}, 5, 2);
  m.map = SlotMap{SlotMode::kHashed, 1 << 10};
  m.keys = {3, 17, 900};
  for (size_t i = 0; i < m.keys.size() * 3; ++i) m.values.push_back(0.25f * static_cast<float>(i) - 1);
  m.mlp.resize(static_cast<size_t>(kernels::mlp_parameter_count(m.spec.mlp_shape())));
  for (size_t i = 0; i < m.mlp.size(); ++i) m.mlp[i] = static_cast<float>(i) / 7.0f;
  return m;
}

std::string error_of(const std::string& path) {
  try {
    (void)load_model_file(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelFile, RoundTripsEveryField) {
  testing::TempDir dir;
  const SavedModel m = sample();
  save_model_file(dir.file("m"), m);
  EXPECT_TRUE(is_model_file(dir.file("m")));
  const SavedModel b = load_model_file(dir.file("m"));
  EXPECT_EQ(b.spec.kind, ModelKind::kDnn);
  EXPECT_EQ(b.spec.embedding_dim, 3);
  EXPECT_EQ(b.spec.hidden, (std::vector<int>{4, 2}));
  EXPECT_EQ(b.spec.classes, 5);
  EXPECT_EQ(b.spec.dense_dim, 2u);
  EXPECT_EQ(b.spec.n_fields, m.spec.n_fields);
  EXPECT_EQ(b.spec.field_of_namespace, m.spec.field_of_namespace);
  EXPECT_EQ(b.map.mode, SlotMode::kHashed);
  EXPECT_EQ(b.map.dim, 1u << 10);
  EXPECT_EQ(b.keys, m.keys);
  EXPECT_EQ(b.values, m.values);
  EXPECT_EQ(b.mlp, m.mlp);
  // The store answers saved keys from the file and others with the initializer.
  SavedModelStore store(b);
  std::vector<float> out(6);
  const std::vector<uint64_t> q = {17, 18};
  ASSERT_TRUE(store.pull(0, q, out.data()).get().ok());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), std::vector<float>(m.values.begin() + 3, m.values.begin() + 6));
  std::vector<float> init(3);
  ps::initialize_value(store.table(0).init, 18, init.data(), 3);
  EXPECT_EQ(std::vector<float>(out.begin() + 3, out.end()), init);
  EXPECT_FALSE(store.push(0, q, out).get().ok());
}

TEST(ModelFile, DamageIsRefusedNamingTheFile) {
  testing::TempDir dir;
  const std::string p = dir.file("m");
  save_model_file(p, sample());
  const auto size = std::filesystem::file_size(p);
  auto patch = [&](size_t at, char c) {
    save_model_file(p, sample());
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  };
  patch(0, 'X');
  EXPECT_EQ(error_of(p), p + ": not a parafab model (bad magic)");
  patch(9, 7);
  EXPECT_EQ(error_of(p), p + ": model header checksum mismatch (corrupt file)");
  patch(size - 1, 0x11);
  EXPECT_EQ(error_of(p), p + ": model payload checksum mismatch (corrupt file)");
  save_model_file(p, sample());
  std::filesystem::resize_file(p, size - 8);
  EXPECT_NE(error_of(p).find("truncated or padded"), std::string::npos) << error_of(p);
  std::filesystem::resize_file(p, 20);
  EXPECT_EQ(error_of(p), p + ": truncated model file: header cut short");
  LinearModel lin;
  lin.map = SlotMap{SlotMode::kDirect, 4};
  lin.weights.assign(5, 0.5f);
  save_linear_model(p, lin);
  EXPECT_FALSE(is_model_file(p));
  EXPECT_EQ(error_of(p), p + ": a linear (lr/svm) model file, not an fm/dnn one");
  EXPECT_NE(error_of(dir.file("missing")).find("cannot open model"), std::string::npos);
  SavedModel bad = sample();
  bad.values.pop_back();
  EXPECT_THROW(save_model_file(p, bad), std::invalid_argument);
}

}  // namespace
}  // namespace parafab::worker
