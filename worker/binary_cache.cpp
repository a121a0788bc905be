// The binary cache. Writing goes to a temp file in the same folder, is
// fsync'ed, then renamed over the target, so a reader sees the old cache or
// the new one, never a torn one. Opening maps the file read-only and checks,
// in this order, before any array is looked at: length >= header, magic,
// version, header checksum, the array layout the header implies against the
// file length (with overflow-safe arithmetic), the payload checksum, and the
// row offsets (monotone, 0 .. nnz) so that no row span can leave the mapping.
#include "worker/binary_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <xxhash.h>

#include "worker/data_error.h"

namespace parafab::worker {
namespace {

static_assert(std::endian::native == std::endian::little, "the cache layout is little-endian");

constexpr char kMagic[8] = {'P', 'F', 'A', 'B', 'C', 'S', 'H', '1'};
// 2: Criteo keys carry their namespace in the top byte; 3: the label mode
// (classes) is recorded, and the header is 72 bytes.
constexpr uint32_t kVersion = 3;

struct CacheHeader {
  char magic[8];
  uint32_t version;
  uint32_t skipped_lines;  // bad lines skipped when the cache was built (saturated)
  uint64_t rows;
  uint64_t nnz;
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint32_t classes;   // how the labels were read: 2 binary, K > 2 class ids 0..K-1
  uint32_t reserved;  // 0
  uint64_t payload_hash;  // xxHash64 (seed 0) of every byte after the header
  uint64_t header_hash;   // xxHash64 (seed 0) of the 64 bytes before this field
};
static_assert(sizeof(CacheHeader) == 72);
constexpr size_t kHashedHeaderBytes = offsetof(CacheHeader, header_hash);

constexpr uint64_t align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

// Byte offsets of the arrays; total is the file length.
struct Layout {
  uint64_t labels = 0, row_ptr = 0, keys = 0, values = 0, total = 0;
};

// False when rows/nnz are so large that no real file could hold them (this
// also keeps every product below from overflowing).
bool layout_for(uint64_t rows, uint64_t nnz, Layout* l) {
  constexpr uint64_t kLimit = uint64_t{1} << 56;
  if (rows >= kLimit || nnz >= kLimit) return false;
  l->labels = sizeof(CacheHeader);
  l->row_ptr = l->labels + align8(rows * sizeof(float));
  l->keys = l->row_ptr + (rows + 1) * sizeof(uint64_t);
  l->values = l->keys + nnz * sizeof(uint64_t);
  l->total = l->values + align8(nnz * sizeof(float));
  return true;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

struct UniqueFd {
  int fd = -1;
  explicit UniqueFd(int f) : fd(f) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw DataError(path, "cannot write cache: " + errno_text(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The dataset's arrays as the writer sees them, with the one normalization a
// zero-row view needs (row_ptr may be empty there).
struct Arrays {
  std::span<const float> labels;
  std::span<const uint64_t> row_ptr;
  std::span<const uint64_t> keys;
  std::span<const float> values;
};

constexpr uint64_t kZeroRowPtr[1] = {0};
constexpr char kZeros[8] = {};

Arrays checked_arrays(const Dataset& data, const std::string& path) {
  const DatasetView& v = data.view();
  Arrays a{v.labels, v.row_ptr, v.keys, v.values};
  if (a.labels.empty() && a.row_ptr.empty()) a.row_ptr = kZeroRowPtr;
  if (a.row_ptr.size() != a.labels.size() + 1 || a.keys.size() != a.values.size() ||
      a.row_ptr.front() != 0 || a.row_ptr.back() != a.keys.size()) {
    throw DataError(path, fmt::format("cannot write cache of an inconsistent dataset: {} labels, {} row "
                                      "offsets, {} keys, {} values",
                                      a.labels.size(), a.row_ptr.size(), a.keys.size(), a.values.size()));
  }
  return a;
}

// Calls f(bytes, n) on every payload piece in file order, padding included.
template <class F>
void for_each_payload_piece(const Arrays& a, F&& f) {
  const size_t lb = a.labels.size_bytes();
  f(a.labels.data(), lb);
  f(kZeros, align8(lb) - lb);
  f(a.row_ptr.data(), a.row_ptr.size_bytes());
  f(a.keys.data(), a.keys.size_bytes());
  const size_t vb = a.values.size_bytes();
  f(a.values.data(), vb);
  f(kZeros, align8(vb) - vb);
}

// Removes the temp file unless the rename happened.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

void fsync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the data itself is already durable
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

SourceStamp source_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw DataError(path, "cannot stat: " + errno_text(errno));
  return SourceStamp{static_cast<uint64_t>(st.st_size),
                     static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

void write_binary_cache(const std::string& path, const Dataset& data, const SourceStamp& source,
                        uint64_t skipped_lines, uint32_t classes) {
  if (classes < 2) throw DataError(path, fmt::format("cannot write a cache of {} classes (at least 2)", classes));
  const Arrays a = checked_arrays(data, path);

  CacheHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.rows = a.labels.size();
  h.nnz = a.keys.size();
  h.source_size = source.size;
  h.source_mtime_ns = source.mtime_ns;
  h.skipped_lines = static_cast<uint32_t>(std::min<uint64_t>(skipped_lines, UINT32_MAX));
  h.classes = classes;
  XXH64_state_t* state = XXH64_createState();
  if (state == nullptr) throw std::bad_alloc();
  XXH64_reset(state, 0);
  for_each_payload_piece(a, [&](const void* p, size_t n) {
    if (n) XXH64_update(state, p, n);
  });
  h.payload_hash = XXH64_digest(state);
  XXH64_freeState(state);
  h.header_hash = XXH64(&h, kHashedHeaderBytes, 0);

  TempFile tmp{path + ".tmp.XXXXXX"};
  int raw = ::mkstemp(tmp.path.data());
  if (raw < 0) {
    const int err = errno;
    tmp.path.clear();
    throw DataError(path, "cannot create temp file for cache: " + errno_text(err));
  }
  UniqueFd fd(raw);
  ::fchmod(fd.fd, 0644);  // mkstemp's 0600 would hide the cache from other users
  write_all(fd.fd, &h, sizeof h, path);
  for_each_payload_piece(a, [&](const void* p, size_t n) { write_all(fd.fd, p, n, path); });
  if (::fsync(fd.fd) != 0) throw DataError(path, "cannot fsync cache: " + errno_text(errno));
  if (::close(fd.release()) != 0) throw DataError(path, "cannot close cache: " + errno_text(errno));
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    throw DataError(path, "cannot rename temp file to cache: " + errno_text(errno));
  }
  tmp.keep = true;
  fsync_parent_dir(path);
}

Dataset open_binary_cache(const std::string& path, SourceStamp* source, uint64_t* skipped_lines, uint32_t* classes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) throw DataError(path, "cannot open cache: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw DataError(path, "cannot stat cache: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw DataError(path, "cache is not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < sizeof(CacheHeader)) {
    throw DataError(path, fmt::format("truncated cache: {} bytes, less than the {}-byte header", file_size,
                                      sizeof(CacheHeader)));
  }
  void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (m == MAP_FAILED) throw DataError(path, "cannot map cache: " + errno_text(errno));
  std::shared_ptr<const void> mapping(m, [file_size](const void* p) { ::munmap(const_cast<void*>(p), file_size); });
  const auto* base = static_cast<const unsigned char*>(m);

  CacheHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    throw DataError(path, "bad magic: not a parafab binary cache (expected \"PFABCSH1\")");
  }
  if (h.version != kVersion) {
    throw DataError(path, fmt::format("unsupported cache format version {} (this build reads version {})",
                                      h.version, kVersion));
  }
  if (XXH64(&h, kHashedHeaderBytes, 0) != h.header_hash) {
    throw DataError(path, "header checksum mismatch: the cache header is corrupt");
  }
  if (h.classes < 2 || h.reserved != 0) {
    throw DataError(path, fmt::format("inconsistent cache: {} classes (at least 2), reserved word {}", h.classes,
                                      h.reserved));
  }
  Layout l;
  if (!layout_for(h.rows, h.nnz, &l) || l.total > file_size) {
    throw DataError(path, fmt::format("truncated cache: the header describes {} rows and {} nonzeros, which "
                                      "need more than the file's {} bytes",
                                      h.rows, h.nnz, file_size));
  }
  if (l.total != file_size) {
    throw DataError(path, fmt::format("cache size mismatch: {} rows and {} nonzeros need {} bytes, the file "
                                      "has {} (trailing data)",
                                      h.rows, h.nnz, l.total, file_size));
  }
  if (XXH64(base + sizeof h, file_size - sizeof h, 0) != h.payload_hash) {
    throw DataError(path, "payload checksum mismatch: the cache data is corrupt");
  }
  // The arrays start 8-byte aligned in a page-aligned mapping.
  const auto* labels = reinterpret_cast<const float*>(base + l.labels);
  const auto* row_ptr = reinterpret_cast<const uint64_t*>(base + l.row_ptr);
  const auto* keys = reinterpret_cast<const uint64_t*>(base + l.keys);
  const auto* values = reinterpret_cast<const float*>(base + l.values);
  if (row_ptr[0] != 0 || row_ptr[h.rows] != h.nnz) {
    throw DataError(path, fmt::format("inconsistent cache: row offsets run from {} to {}, expected 0 to {}",
                                      row_ptr[0], row_ptr[h.rows], h.nnz));
  }
  for (uint64_t i = 0; i < h.rows; ++i) {
    if (row_ptr[i + 1] < row_ptr[i]) {
      throw DataError(path, fmt::format("inconsistent cache: row offsets decrease at row {}", i));
    }
  }
  if (source) *source = SourceStamp{h.source_size, h.source_mtime_ns};
  if (skipped_lines) *skipped_lines = h.skipped_lines;
  if (classes) *classes = h.classes;
  DatasetView view{{labels, h.rows}, {row_ptr, h.rows + 1}, {keys, h.nnz}, {values, h.nnz}};
  return Dataset(view, std::move(mapping));
}

namespace {

// Empty, or starting with the cache magic of any version ("PFABCSH" and a
// digit): a file a cache may replace. A damaged cache still starts so.
bool looks_like_cache(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return true;  // unreadable: open_binary_cache names why
  char head[sizeof kMagic] = {};
  const ssize_t n = ::read(fd.fd, head, sizeof head);
  if (n == 0) return true;
  return n == static_cast<ssize_t>(sizeof head) && std::memcmp(head, kMagic, sizeof kMagic - 1) == 0;
}

}  // namespace

Dataset load_dataset(const std::string& path, const ReadOptions& options, const std::string& cache_path,
                     ReadStats* stats, bool* from_cache, std::string* rebuilt_because) {
  if (from_cache) *from_cache = false;
  if (rebuilt_because) rebuilt_because->clear();
  if (cache_path.empty()) return read_text_dataset(path, options, stats);
  // Stamp before parsing: a source changed while being parsed then leaves a
  // cache that is already stale, never one that looks fresh.
  const SourceStamp now = source_stamp(path);
  std::string why;
  std::error_code ec;
  if (std::filesystem::exists(cache_path, ec)) {
    // A file at the cache path is replaced only if it is a cache (or
    // empty): --cache naming the data file itself, a test file or a model
    // by mistake must not cost the user that file.
    if (std::filesystem::equivalent(path, cache_path, ec)) {
      throw DataError(cache_path, "the cache path is the data file " + path + " itself; give the cache a path of its own");
    }
    if (!looks_like_cache(cache_path)) {
      throw DataError(cache_path, "this file is not a parafab binary cache, so it is not replaced by one; remove it "
                                  "or give the cache another path");
    }
    try {
      SourceStamp recorded;
      uint64_t skipped = 0;
      uint32_t classes = 0;
      Dataset cached = open_binary_cache(cache_path, &recorded, &skipped, &classes);
      // A cache built by skipping bad lines serves only runs that skip too;
      // without the flag the text is parsed again and its first bad line stops it.
      auto mode = [](uint32_t k) {
        return k == 2 ? std::string("binary labels") : fmt::format("labels as {} class ids", k);
      };
      if (recorded != now) {
        why = path + " changed since it was built";
      } else if (classes != static_cast<uint32_t>(options.classes)) {
        why = fmt::format("it was built reading {} and this run reads {}", mode(classes),
                          mode(static_cast<uint32_t>(options.classes)));
      } else if (skipped != 0 && !options.skip_bad_lines) {
        why = fmt::format("it was built skipping {} bad line(s) and this run does not skip them", skipped);
      } else {
        if (stats) {
          *stats = ReadStats{};
          stats->examples = cached.rows();
          stats->skipped_lines = skipped;
        }
        if (from_cache) *from_cache = true;
        return cached;
      }
    } catch (const DataError& e) {
      // Damaged, or not a cache at all: rebuilt below. The message without
      // its leading "<cache path>: ", which the caller names.
      std::string what = e.what();
      if (what.rfind(cache_path + ": ", 0) == 0) what.erase(0, cache_path.size() + 2);
      why = "it cannot be used: " + what;
    }
  }
  if (rebuilt_because) *rebuilt_because = why;
  ReadStats local;
  ReadStats* st = stats ? stats : &local;
  Dataset parsed = read_text_dataset(path, options, st);
  write_binary_cache(cache_path, parsed, now, st->skipped_lines, static_cast<uint32_t>(options.classes));
  return parsed;
}

}  // namespace parafab::worker
