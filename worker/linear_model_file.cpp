#include "worker/linear_model_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <stdexcept>
#include <cstring>
#include <fmt/format.h>

#include "worker/data_error.h"

namespace parafab::worker {
namespace {

constexpr char kMagic[8] = {'P', 'F', 'A', 'B', 'L', 'I', 'N', '1'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t loss;
  uint32_t slot_mode;
  uint32_t reserved0;
  uint64_t dim;
  uint64_t n_weights;
  uint64_t payload_hash;
  uint64_t reserved1;
  uint64_t header_hash;  // of the 56 bytes before it
};
static_assert(sizeof(Header) == 64);
static_assert(std::endian::native == std::endian::little, "model files are little-endian");

uint64_t header_hash(const Header& h) { return XXH64(&h, offsetof(Header, header_hash), 0); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
 private:
  int fd_;
};

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw DataError(path, fmt::format("write failed: {}", std::strerror(errno)));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* p, size_t n, const std::string& path, const char* what) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(path, fmt::format("read failed: {}", std::strerror(errno)));
    if (r == 0) throw DataError(path, fmt::format("truncated model file: {} cut short", what));
    c += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace

void save_linear_model(const std::string& path, const LinearModel& m) {
  if (m.weights.size() != m.map.slots_with_bias())
    throw std::invalid_argument(fmt::format("save_linear_model: {} weights for {} slots",
                                            m.weights.size(), m.map.slots_with_bias()));
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kLinearModelVersion;
  h.loss = static_cast<uint32_t>(m.loss);
  h.slot_mode = static_cast<uint32_t>(m.map.mode);
  h.dim = m.map.dim;
  h.n_weights = m.weights.size();
  h.payload_hash = XXH64(m.weights.data(), m.weights.size() * sizeof(float), 0);
  h.header_hash = header_hash(h);

  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw DataError(tmp, fmt::format("cannot create: {}", std::strerror(errno)));
  write_all(fd.get(), &h, sizeof h, tmp);
  write_all(fd.get(), m.weights.data(), m.weights.size() * sizeof(float), tmp);
  if (::fsync(fd.get()) != 0) throw DataError(tmp, fmt::format("fsync failed: {}", std::strerror(errno)));
  ::close(fd.release());
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw DataError(path, fmt::format("cannot rename {} into place: {}", tmp, std::strerror(errno)));
}

LinearModel load_linear_model(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw DataError(path, fmt::format("cannot open model: {}", std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) throw DataError(path, fmt::format("cannot stat: {}", std::strerror(errno)));
  Header h{};
  read_all(fd.get(), &h, sizeof h, path, "header");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw DataError(path, "not a parafab linear model (bad magic)");
  if (h.header_hash != header_hash(h)) throw DataError(path, "model header checksum mismatch (corrupt file)");
  if (h.version != kLinearModelVersion)
    throw DataError(path, fmt::format("model format version {} is not supported (this build reads {})",
                                      h.version, kLinearModelVersion));
  if (h.loss > 1 || h.slot_mode > 1) throw DataError(path, "model header names an unknown loss or slot mode");
  if (h.dim == 0 || h.dim > (1ULL << 31) || h.n_weights != h.dim + 1 ||
      (h.slot_mode == static_cast<uint32_t>(SlotMode::kHashed) && (h.dim & (h.dim - 1)) != 0))
    throw DataError(path, fmt::format("model header is inconsistent (dim {}, {} weights)", h.dim, h.n_weights));
  const uint64_t expect = sizeof(Header) + h.n_weights * sizeof(float);
  if (static_cast<uint64_t>(st.st_size) != expect)
    throw DataError(path, fmt::format("model file has {} bytes, header says {} (truncated or padded)",
                                      st.st_size, expect));
  LinearModel m;
  m.loss = static_cast<kernels::Loss>(h.loss);
  m.map = SlotMap{static_cast<SlotMode>(h.slot_mode), h.dim};
  m.weights.resize(h.n_weights);
  read_all(fd.get(), m.weights.data(), m.weights.size() * sizeof(float), path, "weights");
  if (XXH64(m.weights.data(), m.weights.size() * sizeof(float), 0) != h.payload_hash)
    throw DataError(path, "model weights checksum mismatch (corrupt file)");
  return m;
}

}  // namespace parafab::worker
