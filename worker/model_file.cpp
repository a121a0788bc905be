#include "worker/model_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "kernels/mlp.h"
#include "worker/data_error.h"

namespace parafab::worker {
namespace {

constexpr char kMagic[8] = {'P', 'F', 'A', 'B', 'M', 'D', 'L', '1'};
constexpr char kLinearMagic[8] = {'P', 'F', 'A', 'B', 'L', 'I', 'N', '1'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved0;
  uint64_t payload_bytes;
  uint64_t payload_hash;
  uint64_t reserved1;
  uint64_t header_hash;  // of the 40 bytes before it
};
static_assert(sizeof(Header) == 48);
static_assert(std::endian::native == std::endian::little, "model files are little-endian");

uint64_t header_hash(const Header& h) { return XXH64(&h, offsetof(Header, header_hash), 0); }

template <class T>
void put(std::string& b, const T& v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
void put_array(std::string& b, const std::vector<T>& v) {
  b.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Reads the payload front to back; every read is bounds-checked.
class Cursor {
 public:
  Cursor(const std::string& bytes, const std::string& path) : b_(bytes), path_(path) {}
  template <class T>
  T get(const char* what) {
    T v;
    need(sizeof v, what);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  template <class T>
  void get_array(std::vector<T>& out, uint64_t n, const char* what) {
    if (n > (b_.size() - at_) / sizeof(T)) fail(what);
    out.resize(n);
    // An empty vector's data() may be null, which memcpy must never see
    // (an fm model has no MLP parameters).
    if (n > 0) std::memcpy(out.data(), b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void need(size_t n, const char* what) {
    if (n > b_.size() - at_) fail(what);
  }
  [[noreturn]] void fail(const char* what) const {
    throw DataError(path_, fmt::format("model file is inconsistent: {} runs past the payload", what));
  }
  const std::string& b_;
  const std::string& path_;
  size_t at_ = 0;
};

std::string payload_of(const SavedModel& m) {
  const ModelSpec& s = m.spec;
  std::string b;
  put(b, static_cast<uint32_t>(s.kind));
  put(b, static_cast<int32_t>(s.factors));
  put(b, static_cast<int32_t>(s.embedding_dim));
  put(b, static_cast<int32_t>(s.classes));
  put(b, static_cast<uint32_t>(s.dense_dim));
  put(b, static_cast<int32_t>(s.n_fields));
  put(b, static_cast<uint32_t>(s.hidden.size()));
  for (int h : s.hidden) put(b, static_cast<int32_t>(h));
  for (int16_t f : s.field_of_namespace) put(b, f);
  put(b, s.hyper.init_stddev);
  put(b, static_cast<uint64_t>(s.hyper.seed));
  put(b, static_cast<uint32_t>(s.hyper.sparse_updater));
  put(b, s.hyper.ftrl_alpha);
  put(b, s.hyper.ftrl_beta);
  put(b, s.hyper.ftrl_l1);
  put(b, s.hyper.ftrl_l2);
  put(b, static_cast<uint32_t>(m.map.mode));
  put(b, static_cast<uint64_t>(m.map.dim));
  put(b, static_cast<uint64_t>(m.keys.size()));
  put_array(b, m.keys);
  put_array(b, m.values);
  put(b, static_cast<uint64_t>(m.mlp.size()));
  put_array(b, m.mlp);
  return b;
}

void check_arrays(const SavedModel& m, const std::string& where) {
  const uint64_t width = m.spec.sparse_width();
  if (m.values.size() != m.keys.size() * width) {
    throw std::invalid_argument(fmt::format("{}: {} values for {} keys of width {}", where, m.values.size(),
                                            m.keys.size(), width));
  }
  const uint64_t mlp = m.spec.kind == ModelKind::kDnn
                           ? static_cast<uint64_t>(kernels::mlp_parameter_count(m.spec.mlp_shape()))
                           : 0;
  if (m.mlp.size() != mlp) {
    throw std::invalid_argument(fmt::format("{}: {} MLP parameters, the spec needs {}", where, m.mlp.size(), mlp));
  }
  if (!std::is_sorted(m.keys.begin(), m.keys.end()) ||
      std::adjacent_find(m.keys.begin(), m.keys.end()) != m.keys.end()) {
    throw std::invalid_argument(where + ": keys are not sorted and unique");
  }
}

}  // namespace

void save_model_file(const std::string& path, const SavedModel& m) {
  check_arrays(m, "save_model_file");
  const std::string payload = payload_of(m);
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kModelFileVersion;
  h.payload_bytes = payload.size();
  h.payload_hash = XXH64(payload.data(), payload.size(), 0);
  h.header_hash = header_hash(h);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw DataError(tmp, fmt::format("cannot create: {}", std::strerror(errno)));
  auto write_all = [&](const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = errno;
        ::close(fd);
        throw DataError(tmp, fmt::format("write failed: {}", std::strerror(e)));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  write_all(reinterpret_cast<const char*>(&h), sizeof h);
  write_all(payload.data(), payload.size());
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw DataError(tmp, fmt::format("fsync failed: {}", std::strerror(e)));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw DataError(path, fmt::format("cannot rename {} into place: {}", tmp, std::strerror(errno)));
  }
}

bool is_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in && std::memcmp(magic, kMagic, sizeof kMagic) == 0;
}

SavedModel load_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path, fmt::format("cannot open model: {}", std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (bytes.size() < sizeof(Header)) throw DataError(path, "truncated model file: header cut short");
  Header h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kLinearMagic, sizeof kLinearMagic) == 0) {
    throw DataError(path, "a linear (lr/svm) model file, not an fm/dnn one");
  }
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) throw DataError(path, "not a parafab model (bad magic)");
  if (h.header_hash != header_hash(h)) throw DataError(path, "model header checksum mismatch (corrupt file)");
  if (h.version != kModelFileVersion) {
    throw DataError(path, fmt::format("model format version {} is not supported (this build reads {})", h.version,
                                      kModelFileVersion));
  }
  if (bytes.size() - sizeof(Header) != h.payload_bytes) {
    throw DataError(path, fmt::format("model file has {} payload bytes, header says {} (truncated or padded)",
                                      bytes.size() - sizeof(Header), h.payload_bytes));
  }
  const std::string payload = bytes.substr(sizeof(Header));
  if (XXH64(payload.data(), payload.size(), 0) != h.payload_hash) {
    throw DataError(path, "model payload checksum mismatch (corrupt file)");
  }
  Cursor c(payload, path);
  SavedModel m;
  ModelSpec& s = m.spec;
  const uint32_t kind = c.get<uint32_t>("kind");
  if (kind > 1) throw DataError(path, fmt::format("model file names an unknown model kind {}", kind));
  s.kind = static_cast<ModelKind>(kind);
  s.factors = c.get<int32_t>("factors");
  s.embedding_dim = c.get<int32_t>("embedding dim");
  s.classes = c.get<int32_t>("classes");
  s.dense_dim = c.get<uint32_t>("dense inputs");
  s.n_fields = c.get<int32_t>("fields");
  const uint32_t n_hidden = c.get<uint32_t>("hidden layer count");
  if (n_hidden > 64) throw DataError(path, fmt::format("model file is inconsistent: {} hidden layers", n_hidden));
  for (uint32_t i = 0; i < n_hidden; ++i) s.hidden.push_back(c.get<int32_t>("hidden sizes"));
  for (int16_t& f : s.field_of_namespace) f = c.get<int16_t>("field map");
  s.hyper.init_stddev = c.get<float>("initializer");
  s.hyper.seed = c.get<uint64_t>("initializer seed");
  const uint32_t updater = c.get<uint32_t>("updater");
  if (updater > static_cast<uint32_t>(ps::UpdaterKind::kAdam)) {
    throw DataError(path, fmt::format("model file names an unknown updater {}", updater));
  }
  s.hyper.sparse_updater = static_cast<ps::UpdaterKind>(updater);
  s.hyper.ftrl_alpha = c.get<float>("FTRL alpha");
  s.hyper.ftrl_beta = c.get<float>("FTRL beta");
  s.hyper.ftrl_l1 = c.get<float>("FTRL l1");
  s.hyper.ftrl_l2 = c.get<float>("FTRL l2");
  const uint32_t mode = c.get<uint32_t>("slot mode");
  const uint64_t dim = c.get<uint64_t>("slot dim");
  if (mode > 1 || dim == 0 || dim > (1ULL << 31) ||
      (mode == static_cast<uint32_t>(SlotMode::kHashed) && (dim & (dim - 1)) != 0)) {
    throw DataError(path, fmt::format("model file is inconsistent: slot mode {} dim {}", mode, dim));
  }
  m.map = SlotMap{static_cast<SlotMode>(mode), dim};
  const bool spec_ok = (s.kind == ModelKind::kFm ? s.factors >= 0 && s.factors <= 256
                                                 : s.embedding_dim >= 1 && s.embedding_dim <= 1024 && s.classes >= 2 &&
                                                       s.n_fields >= 0 && s.n_fields <= 256 &&
                                                       std::all_of(s.hidden.begin(), s.hidden.end(),
                                                                   [](int x) { return x >= 1; }) &&
                                                       (s.n_fields > 0 || s.dense_dim > 0));
  if (!spec_ok) throw DataError(path, "model file is inconsistent: the model's sizes are out of range");
  if (s.kind == ModelKind::kDnn) {
    // The trainer indexes a row's field embeddings with these (kernels/embedding.h).
    if (!std::all_of(s.field_of_namespace.begin(), s.field_of_namespace.end(),
                     [&](int16_t f) { return f >= -1 && f < s.n_fields; })) {
      throw DataError(path, fmt::format("model file is inconsistent: the field map names a field outside -1 .. {}",
                                        s.n_fields - 1));
    }
    // The MLP's shape counted here in 64 bits, before ModelSpec::mlp_shape
    // (an int input width) and kernels::mlp_parameter_count (an int64_t
    // count) see it: sizes near 2^31 would overflow both.
    const uint64_t floats = payload.size() / sizeof(float);
    uint64_t in = static_cast<uint64_t>(s.n_fields) * static_cast<uint64_t>(s.embedding_dim) + s.dense_dim;
    uint64_t count = 0;
    bool fits = in <= INT32_MAX;
    std::vector<int> outs = s.hidden;
    outs.push_back(s.outputs());
    for (size_t l = 0; l < outs.size() && fits; ++l) {
      const uint64_t out = static_cast<uint64_t>(outs[l]);  // >= 1: spec_ok
      count += out * in + out;                             // < 2^62 + 2^31 + the count so far
      fits = count <= floats;
      in = out;
    }
    if (!fits) {
      throw DataError(path, "model file is inconsistent: the MLP's shape needs more parameters than the file holds");
    }
  }
  const uint64_t n_keys = c.get<uint64_t>("key count");
  c.get_array(m.keys, n_keys, "keys");
  if (n_keys > UINT64_MAX / s.sparse_width()) throw DataError(path, "model file is inconsistent: key count");
  c.get_array(m.values, n_keys * s.sparse_width(), "values");
  const uint64_t n_mlp = c.get<uint64_t>("MLP size");
  c.get_array(m.mlp, n_mlp, "MLP parameters");
  if (!c.done()) throw DataError(path, "model file is inconsistent: bytes after the MLP parameters");
  try {
    check_arrays(m, "model file");
  } catch (const std::invalid_argument& e) {
    throw DataError(path, e.what());
  }
  return m;
}

}  // namespace parafab::worker
