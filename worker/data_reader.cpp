// Text readers. The whole input is one contiguous buffer (a read-only mapping
// for files). With threads > 1 it is cut into chunks at newline boundaries;
// each chunk is parsed on its own thread into its own arrays with chunk-local
// line numbers, and the chunks are then joined in input order. Line numbers in
// errors become global by adding the line counts of the earlier chunks: in
// strict mode only the first failing chunk (in input order) reports, and every
// chunk before it was parsed to its end, so its count is complete and the
// error is the one a single thread would have raised.
#include "worker/data_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "worker/compressed_input.h"
#include "worker/criteo_parser.h"
#include "worker/data_error.h"
#include "worker/libsvm_parser.h"

namespace parafab::worker {
namespace {

constexpr size_t kMaxKeptErrors = 10;
// Below this a thread costs more than it saves.
constexpr size_t kMinChunkBytes = size_t{64} << 10;
constexpr const char* kTruncatedNote = " (file ends mid-line: truncated?)";

struct Failure {
  uint64_t line = 0;  // chunk-local until merged
  uint64_t column = 0;
  std::string message;
};

struct ChunkResult {
  DatasetArrays arrays;
  uint64_t lines = 0;
  uint64_t skipped = 0;
  std::vector<Failure> failures;  // strict: at most one; skipping: the first kMaxKeptErrors
  std::exception_ptr exception;   // e.g. std::bad_alloc on the chunk's thread
};

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

template <class LineParser>
void parse_chunk(std::string_view text, size_t reserve_bytes, bool skip_bad, LineParser parse_line,
                 ChunkResult& out) {
  const char* p = text.data();
  const char* const end = p + text.size();
  // A guess that saves most regrowth: ~16 bytes of text per nonzero, ~64 per
  // row. Capacity beyond what is written is never touched, so an overshoot
  // costs address space, not memory.
  out.arrays.keys.reserve(reserve_bytes / 16);
  out.arrays.values.reserve(reserve_bytes / 16);
  out.arrays.labels.reserve(reserve_bytes / 64);
  out.arrays.row_ptr.reserve(reserve_bytes / 64 + 1);
  uint64_t line_no = 0;
  detail::LineIssue issue;
  while (p != end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const char* le = nl ? nl : end;
    ++line_no;
    std::string_view line(p, static_cast<size_t>(le - p));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (parse_line(line, out.arrays, &issue) == detail::LineStatus::kBad) {
      // Only the last chunk can end without '\n': then so does the file.
      std::string message = std::move(issue.message);
      if (nl == nullptr) message += kTruncatedNote;
      if (!skip_bad) {
        out.failures.push_back({line_no, issue.column, std::move(message)});
        out.lines = line_no;
        return;
      }
      ++out.skipped;
      if (out.failures.size() < kMaxKeptErrors) {
        out.failures.push_back({line_no, issue.column, std::move(message)});
      }
    }
    p = nl ? nl + 1 : end;
  }
  out.lines = line_no;
}

// A UTF-8 byte order mark opening the file (editors and tools on Windows
// write one) carries no data: it is dropped, and columns on line 1 count from
// after it, as an editor shows them. Anywhere else it stays a non-ASCII byte.
std::string_view without_utf8_bom(std::string_view text) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.starts_with(kBom)) text.remove_prefix(kBom.size());
  return text;
}

DataFormat detect_format(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!detail::libsvm_line_is_empty(line)) {
      const auto tabs = std::count(line.begin(), line.end(), '\t');
      return tabs + 1 == detail::kCriteoFields ? DataFormat::kCriteo : DataFormat::kLibsvm;
    }
    pos = nl + 1;
  }
  return DataFormat::kLibsvm;
}

// Chunk boundaries: n+1 offsets, each after a '\n' (or 0 / the end).
std::vector<size_t> split_at_newlines(std::string_view text, size_t n) {
  std::vector<size_t> bounds{0};
  for (size_t i = 1; i < n; ++i) {
    size_t target = std::max(bounds.back(), static_cast<size_t>(text.size() * static_cast<double>(i) / n));
    size_t nl = text.find('\n', target);
    bounds.push_back(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  bounds.push_back(text.size());
  return bounds;
}

// Appends the chunks to the first one, whose arrays were reserved for the
// whole input: usually no regrowth, and chunk 0 is never copied.
DatasetArrays join_chunks(std::vector<ChunkResult>& chunks) {
  DatasetArrays all = std::move(chunks[0].arrays);
  if (chunks.size() == 1) return all;
  size_t rows = all.labels.size(), nnz = all.keys.size();
  for (size_t i = 1; i < chunks.size(); ++i) {
    rows += chunks[i].arrays.labels.size();
    nnz += chunks[i].arrays.keys.size();
  }
  all.labels.reserve(rows);
  all.row_ptr.reserve(rows + 1);
  all.keys.reserve(nnz);
  all.values.reserve(nnz);
  for (size_t i = 1; i < chunks.size(); ++i) {
    DatasetArrays& c = chunks[i].arrays;
    const uint64_t base = all.keys.size();
    all.labels.insert(all.labels.end(), c.labels.begin(), c.labels.end());
    for (size_t r = 1; r < c.row_ptr.size(); ++r) all.row_ptr.push_back(base + c.row_ptr[r]);
    all.keys.insert(all.keys.end(), c.keys.begin(), c.keys.end());
    all.values.insert(all.values.end(), c.values.begin(), c.values.end());
    c = DatasetArrays{};  // release as we go
  }
  return all;
}

template <class LineParser>
Dataset parse_with(std::string_view text, const std::string& name, const ReadOptions& options,
                   DataFormat format, LineParser parse_line, ReadStats* stats, uint64_t first_line_base) {
  const size_t want = static_cast<size_t>(std::max(1, options.threads));
  const size_t n = std::max<size_t>(1, std::min(want, text.size() / kMinChunkBytes));
  const std::vector<size_t> bounds = split_at_newlines(text, n);
  std::vector<ChunkResult> chunks(n);
  auto work = [&](size_t i) {
    try {
      const size_t bytes = bounds[i + 1] - bounds[i];
      parse_chunk(text.substr(bounds[i], bytes), i == 0 ? text.size() : bytes, options.skip_bad_lines,
                  parse_line, chunks[i]);
    } catch (...) {
      chunks[i].exception = std::current_exception();
    }
  };
  {
    std::vector<std::thread> threads;
    threads.reserve(n - 1);
    try {
      for (size_t i = 1; i < n; ++i) threads.emplace_back(work, i);
    } catch (...) {  // could not start a thread: parse what is left here
      for (size_t i = threads.size() + 1; i < n; ++i) work(i);
    }
    work(0);
    for (auto& t : threads) t.join();
  }
  for (auto& c : chunks) {
    if (c.exception) std::rethrow_exception(c.exception);
  }

  ReadStats st;
  st.format = format;
  uint64_t line_base = first_line_base;
  for (auto& c : chunks) {
    for (auto& f : c.failures) {
      if (!options.skip_bad_lines) throw DataError(name, line_base + f.line, f.column, f.message);
      if (st.first_errors.size() < kMaxKeptErrors) {
        st.first_errors.push_back(DataError(name, line_base + f.line, f.column, f.message).what());
      }
    }
    st.skipped_lines += c.skipped;
    line_base += c.lines;
  }
  st.lines = line_base - first_line_base;
  Dataset d(join_chunks(chunks));
  st.examples = d.rows();
  if (stats) *stats = std::move(st);
  return d;
}

struct UniqueFd {
  int fd = -1;
  UniqueFd() = default;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd >= 0) ::close(fd);
  }
};

// A read-only mapping, unmapped with its owner (UniqueFd's twin).
struct UniqueMapping {
  const char* data = nullptr;
  size_t size = 0;
  UniqueMapping() = default;
  UniqueMapping(const UniqueMapping&) = delete;
  UniqueMapping& operator=(const UniqueMapping&) = delete;
  ~UniqueMapping() { reset(); }
  void reset() {
    if (data) ::munmap(const_cast<char*>(data), size);
    data = nullptr;
    size = 0;
  }
};

// The bytes of a file: a read-only mapping of a regular file, else read();
// decompressed when they are gzip, bzip2 or xz (only the first `prefix`
// bytes of the text when prefix > 0).
class FileBytes {
 public:
  explicit FileBytes(const std::string& path, size_t prefix = 0) {
    read_raw(path);
    const Compression c = detect_compression(bytes());
    if (c == Compression::kNone) return;
    std::string text;
    decompress(c, bytes(), path, text, prefix);
    map_.reset();
    copy_ = std::move(text);
  }

  std::string_view bytes() const {
    return map_.data ? std::string_view(map_.data, map_.size) : std::string_view(copy_);
  }

 private:
  void read_raw(const std::string& path) {
    fd_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_.fd < 0) throw DataError(path, "cannot open: " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd_.fd, &st) != 0) throw DataError(path, "cannot stat: " + errno_text(errno));
    if (S_ISDIR(st.st_mode)) throw DataError(path, "is a directory, not a data file");
    if (S_ISREG(st.st_mode)) {
      const auto size = static_cast<size_t>(st.st_size);
      if (size == 0) return;
      void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd_.fd, 0);
      if (m == MAP_FAILED) throw DataError(path, "cannot map: " + errno_text(errno));
      ::madvise(m, size, MADV_SEQUENTIAL);
      map_.data = static_cast<const char*>(m);
      map_.size = size;
      return;
    }
    // A pipe or device: read to the end.
    char buf[1 << 16];
    for (;;) {
      ssize_t r = ::read(fd_.fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw DataError(path, "read failed: " + errno_text(errno));
      if (r == 0) break;
      copy_.append(buf, static_cast<size_t>(r));
    }
  }

  UniqueFd fd_;
  std::string copy_;
  UniqueMapping map_;
};

}  // namespace

DataFormat parse_data_format(const std::string& name) {
  if (name == "auto") return DataFormat::kAuto;
  if (name == "libsvm") return DataFormat::kLibsvm;
  if (name == "criteo") return DataFormat::kCriteo;
  throw std::invalid_argument("unknown data format '" + name + "' (expected auto, libsvm or criteo)");
}

const char* data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto: return "auto";
    case DataFormat::kLibsvm: return "libsvm";
    case DataFormat::kCriteo: return "criteo";
  }
  return "unknown";
}

Dataset parse_text_dataset(std::string_view text, const std::string& name, const ReadOptions& options,
                           ReadStats* stats) {
  text = without_utf8_bom(text);
  DataFormat format = options.format == DataFormat::kAuto ? detect_format(text) : options.format;
  // A part of the input: the same newline-aligned split on every reader, so
  // the parts cover every line exactly once; errors keep the file's line numbers.
  if (options.parts == 0 || options.part >= options.parts) {
    throw std::invalid_argument(fmt::format("{}: part {} of {} does not exist", name, options.part, options.parts));
  }
  uint64_t line_base = 0;
  if (options.parts > 1) {
    const std::vector<size_t> bounds = split_at_newlines(text, options.parts);
    const std::string_view before = text.substr(0, bounds[options.part]);
    line_base = static_cast<uint64_t>(std::count(before.begin(), before.end(), '\n'));
    text = text.substr(bounds[options.part], bounds[options.part + 1] - bounds[options.part]);
  }
  if (format == DataFormat::kCriteo) {
    if (options.classes > 2) {
      throw std::invalid_argument(fmt::format("{}: Criteo data has two classes (labels 0/1), not {}", name, options.classes));
    }
    return parse_with(text, name, options, format, detail::parse_criteo_line, stats, line_base);
  }
  if (format == DataFormat::kLibsvm) {
    const int classes = options.classes;
    return parse_with(
        text, name, options, format,
        [classes](std::string_view line, DatasetArrays& out, detail::LineIssue* issue) {
          return detail::parse_libsvm_line(line, out, issue, classes);
        },
        stats, line_base);
  }
  throw std::invalid_argument(fmt::format("parse_text_dataset: bad DataFormat value {}", static_cast<int>(format)));
}

DataFormat detect_file_format(const std::string& path, DataFormat format) {
  if (format != DataFormat::kAuto) return format;
  // A mapping: only the pages read are touched; of a compressed file, the
  // first MiB of its text.
  FileBytes file(path, size_t{1} << 20);
  return detect_format(without_utf8_bom(file.bytes()));
}

Dataset read_text_dataset(const std::string& path, const ReadOptions& options, ReadStats* stats) {
  FileBytes file(path);
  return parse_text_dataset(file.bytes(), path, options, stats);
}

}  // namespace parafab::worker
