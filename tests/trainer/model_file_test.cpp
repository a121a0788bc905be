// The fm/dnn model file: a round trip keeps every field, and every kind of
// damage is refused naming the file.
#include "worker/model_file.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#define XXH_INLINE_ALL  // the checksums of a patched file, without linking libxxhash
#include <xxhash.h>

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

// Rewrites the model file at `path` with its payload (after the 48-byte
// header) changed by `patch`, and the header's size and checksums made right.
void patch_payload(const std::string& path, const std::function<void(std::string&)>& patch) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string payload = bytes.substr(48);
  patch(payload);
  bytes.resize(48);
  const uint64_t size = payload.size(), payload_hash = XXH64(payload.data(), payload.size(), 0);
  std::memcpy(bytes.data() + 16, &size, 8);
  std::memcpy(bytes.data() + 24, &payload_hash, 8);
  const uint64_t header_hash = XXH64(bytes.data(), 40, 0);
  std::memcpy(bytes.data() + 40, &header_hash, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << payload;
}

void put_i32(std::string& b, size_t at, int32_t v) { std::memcpy(b.data() + at, &v, 4); }

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

// fuzz regressions/model_file/fm_without_mlp_memcpy_null: the reader
// handed memcpy the null data() of an empty MLP (UBSan), on every fm model.
TEST(ModelFile, AnFmModelWithoutKeysRoundTrips) {
  testing::TempDir dir;
  SavedModel m;
  m.spec = ModelSpec::fm(2);
  m.map = SlotMap{SlotMode::kDirect, 8};
  save_model_file(dir.file("m"), m);
  const SavedModel b = load_model_file(dir.file("m"));
  EXPECT_EQ(b.spec.factors, 2);
  EXPECT_TRUE(b.keys.empty() && b.values.empty() && b.mlp.empty());
}

// fuzz regressions/model_file/dnn_field_map_beyond_n_fields: a dnn whose
// field map names a field >= n_fields was accepted (the trainer's field
// embeddings have n_fields slots per row).
TEST(ModelFile, AFieldMapBeyondTheFieldsIsRefused) {
  testing::TempDir dir;
  const std::string p = dir.file("m");
  const SavedModel good = sample();
  for (int bad : {-2, good.spec.n_fields, 300}) {
    SavedModel m = good;
    m.spec.field_of_namespace[200] = static_cast<int16_t>(bad);
    save_model_file(p, m);
    EXPECT_EQ(error_of(p), p + ": model file is inconsistent: the field map names a field outside -1 .. " +
                               std::to_string(good.spec.n_fields - 1));
  }
}

// fuzz regressions/model_file/dnn_input_width_overflows_int and
// dnn_parameter_count_overflows_int64: sizes near 2^31 overflowed the int
// input width (ModelSpec::mlp_shape) or the int64_t parameter count
// (kernels::mlp_parameter_count) while the reader checked them (UBSan).
TEST(ModelFile, MlpSizesThatOverflowAreRefused) {
  testing::TempDir dir;
  const std::string p = dir.file("m");
  // Payload: kind, factors, embedding dim, classes, dense inputs at 16,
  // fields, hidden layer count, then the hidden sizes at 28 (sample: 4, 2).
  const std::vector<std::function<void(std::string&)>> patches = {
      [](std::string& b) { put_i32(b, 16, INT32_MAX); },
      [](std::string& b) {
        put_i32(b, 12, INT32_MAX);
        put_i32(b, 28, INT32_MAX);
        put_i32(b, 32, INT32_MAX);
      },
  };
  for (const auto& patch : patches) {
    save_model_file(p, sample());
    patch_payload(p, patch);
    EXPECT_EQ(error_of(p), p + ": model file is inconsistent: the MLP's shape needs more parameters than the file holds");
  }
  save_model_file(p, sample());
  patch_payload(p, [](std::string&) {});  // the patching itself leaves a valid file
  EXPECT_EQ(error_of(p), "(no error)");
}

}  // namespace
}  // namespace parafab::worker
