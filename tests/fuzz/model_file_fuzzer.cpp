// libFuzzer target: the model files `parafab predict --model FILE` reads,
// through predict's own dispatch: worker::is_model_file picks the fm/dnn
// reader (worker::load_model_file) or the linear one
// (worker::load_linear_model). The input is written to a temp file and both
// readers read it. Each must refuse it with a DataError naming that path
// (nothing else may escape), or come back consistent:
//   - at most one reader accepts a file, and the fm/dnn one only when
//     is_model_file says so (the linear one never then);
//   - fm/dnn: values = keys x the sparse width, keys sorted and unique, a
//     valid slot map; fm has no MLP, dnn's MLP has exactly the parameters of
//     its shape, every field of the field map is -1 or below n_fields (the
//     trainer indexes the field embeddings with it); the SavedModelStore
//     predict builds from it has a sparse table of that width and dense
//     tables that cover the MLP's parameters exactly;
//   - linear: a known loss, a valid slot map, one weight per slot and the bias;
// and an accepted model writes back and reads again to the same model.
//
// The checksums would stop almost every mutation at the header, so the
// first byte can ask the harness to make some fields right before writing:
//   bit 1  which header the other bits fix: 0 fm/dnn (48 bytes), 1 linear (64)
//   bit 0  magic and version
//   bit 2  sizes: fm/dnn the payload size; linear the weight count from the
//          file size, and dim = count - 1
//   bit 3  the payload and header checksums (recomputed last)
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <xxhash.h>

#include "kernels/mlp.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_temp_file.h"
#include "worker/data_error.h"
#include "worker/linear_model_file.h"
#include "worker/model_file.h"
#include "worker/saved_model_store.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::temp_path;
using parafab::fuzz::write_temp_file;
using parafab::worker::DataError;
using parafab::worker::LinearModel;
using parafab::worker::ModelKind;
using parafab::worker::SavedModel;
using parafab::worker::SlotMap;
using parafab::worker::SlotMode;

// fm/dnn header (model_file.cpp): magic 0, version 8, payload size 16,
// payload hash 24, header hash 40 (of the 40 bytes before it); 48 in all.
constexpr size_t kModelHeader = 48, kModelPayloadBytesAt = 16, kModelPayloadHashAt = 24, kModelHeaderHashAt = 40;
// Linear header (linear_model_file.cpp): magic 0, version 8, loss 12, slot
// mode 16, dim 24, weight count 32, weights hash 40, header hash 56; 64.
constexpr size_t kLinearHeader = 64, kLinearDimAt = 24, kLinearCountAt = 32, kLinearPayloadHashAt = 40,
                 kLinearHeaderHashAt = 56;

void put64(std::vector<unsigned char>& f, size_t at, uint64_t v) { std::memcpy(f.data() + at, &v, 8); }

void fix_up(std::vector<unsigned char>& f, uint8_t how) {
  const bool linear = how & 2;
  const size_t header = linear ? kLinearHeader : kModelHeader;
  if (f.size() < header) return;
  if (how & 1) {
    std::memcpy(f.data(), linear ? "PFABLIN1" : "PFABMDL1", 8);
    const uint32_t version = linear ? parafab::worker::kLinearModelVersion : parafab::worker::kModelFileVersion;
    std::memcpy(f.data() + 8, &version, 4);
  }
  if (how & 4) {
    if (linear) {
      const uint64_t n = (f.size() - header) / sizeof(float);
      put64(f, kLinearCountAt, n);
      put64(f, kLinearDimAt, n - 1);
    } else {
      put64(f, kModelPayloadBytesAt, f.size() - header);
    }
  }
  if (how & 8) {
    put64(f, linear ? kLinearPayloadHashAt : kModelPayloadHashAt, XXH64(f.data() + header, f.size() - header, 0));
    const size_t at = linear ? kLinearHeaderHashAt : kModelHeaderHashAt;
    put64(f, at, XXH64(f.data(), at, 0));
  }
}

void check_refusal(const DataError& e, const std::string& path) {
  check(e.file() == path, "DataError names another file");
  check(std::string(e.what()).rfind(path, 0) == 0, "DataError message does not start with the path");
}

bool valid_map(const SlotMap& m) {
  return (m.mode == SlotMode::kDirect || m.mode == SlotMode::kHashed) && m.dim >= 1 && m.dim <= (1ULL << 31) &&
         (m.mode == SlotMode::kDirect || (m.dim & (m.dim - 1)) == 0);
}

void check_saved(const SavedModel& m) {
  const auto& s = m.spec;
  check(s.kind == ModelKind::kFm || s.kind == ModelKind::kDnn, "an unknown model kind");
  check(valid_map(m.map), "an invalid slot map");
  const uint64_t width = s.sparse_width();
  check(width >= 1, "a sparse width of 0");
  check(m.values.size() == m.keys.size() * width, "values != keys x sparse width");
  check(std::adjacent_find(m.keys.begin(), m.keys.end(), [](uint64_t a, uint64_t b) { return a >= b; }) ==
            m.keys.end(),
        "keys not sorted and unique");
  if (s.kind == ModelKind::kFm) {
    check(m.mlp.empty(), "an fm model with MLP parameters");
  } else {
    check(s.n_fields >= 0 && s.n_fields <= 256, "a dnn with more than 256 fields");
    for (int16_t f : s.field_of_namespace) {
      check(f >= -1 && f < s.n_fields, "the field map names a field beyond n_fields");
    }
    check(static_cast<int64_t>(m.mlp.size()) == parafab::kernels::mlp_parameter_count(s.mlp_shape()),
          "the MLP's parameters do not fit its shape");
  }
  // What predict does next: a store over the model, and its description.
  const parafab::worker::SavedModelStore store(m);
  check(store.table(0).width == width, "the store's sparse table has another width");
  uint64_t dense = 0;
  for (uint32_t id = 1;; ++id) {
    const parafab::ps::TableSchema* t = nullptr;
    try {
      t = &store.table(id);
    } catch (const std::out_of_range&) {
      break;
    }
    dense += t->rows * t->width;
  }
  check(dense == m.mlp.size(), "the store's dense tables do not cover the MLP's parameters");
  check(!s.describe().empty() && !m.map.describe().empty(), "an empty description");
}

bool same(const SavedModel& a, const SavedModel& b) {
  using parafab::fuzz::bytes_equal;
  const auto &x = a.spec, &y = b.spec;
  return x.kind == y.kind && x.factors == y.factors && x.embedding_dim == y.embedding_dim && x.hidden == y.hidden &&
         x.classes == y.classes && x.dense_dim == y.dense_dim && x.field_of_namespace == y.field_of_namespace &&
         x.n_fields == y.n_fields &&
         bytes_equal<float>(std::span(&x.hyper.init_stddev, 1), std::span(&y.hyper.init_stddev, 1)) &&
         x.hyper.seed == y.hyper.seed && x.hyper.sparse_updater == y.hyper.sparse_updater &&
         bytes_equal<float>(std::span(&x.hyper.ftrl_alpha, 1), std::span(&y.hyper.ftrl_alpha, 1)) &&
         bytes_equal<float>(std::span(&x.hyper.ftrl_beta, 1), std::span(&y.hyper.ftrl_beta, 1)) &&
         bytes_equal<float>(std::span(&x.hyper.ftrl_l1, 1), std::span(&y.hyper.ftrl_l1, 1)) &&
         bytes_equal<float>(std::span(&x.hyper.ftrl_l2, 1), std::span(&y.hyper.ftrl_l2, 1)) &&
         a.map.mode == b.map.mode && a.map.dim == b.map.dim && a.keys == b.keys &&
         bytes_equal<float>(a.values, b.values) && bytes_equal<float>(a.mlp, b.mlp);
}

void check_linear(const LinearModel& m) {
  check(m.loss == parafab::kernels::Loss::kLogistic || m.loss == parafab::kernels::Loss::kHinge, "an unknown loss");
  check(valid_map(m.map), "an invalid slot map");
  check(m.weights.size() == m.map.slots_with_bias(), "weights != slots + bias");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace parafab::worker;
  std::vector<unsigned char> file(data + 1, data + size);
  fix_up(file, data[0]);
  static const std::string path = temp_path("model.pfm"), again = temp_path("again.pfm");
  write_temp_file(path, file);
  const bool fm_dnn = is_model_file(path);
  bool accepted = false;
  try {
    const SavedModel m = load_model_file(path);
    accepted = true;
    check(fm_dnn, "the fm/dnn reader accepted a file is_model_file does not recognize");
    check_saved(m);
    save_model_file(again, m);
    check(same(m, load_model_file(again)), "an accepted fm/dnn model writes back and reads again differently");
  } catch (const DataError& e) {
    check_refusal(e, path);
  }
  try {
    const LinearModel m = load_linear_model(path);
    check(!accepted, "both readers accepted the same file");
    check(!fm_dnn, "the linear reader accepted a file is_model_file takes for fm/dnn");
    check_linear(m);
    save_linear_model(again, m);
    const LinearModel back = load_linear_model(again);
    check(back.loss == m.loss && back.map.mode == m.map.mode && back.map.dim == m.map.dim &&
              parafab::fuzz::bytes_equal<float>(back.weights, m.weights),
          "an accepted linear model writes back and reads again differently");
  } catch (const DataError& e) {
    check_refusal(e, path);
  }
  ::unlink(path.c_str());
  ::unlink(again.c_str());
  return 0;
}
