#include "worker/compressed_input.h"

#include <bzlib.h>
#include <fmt/format.h>
#include <lzma.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <stdexcept>

#include "worker/data_error.h"

namespace parafab::worker {
namespace {

constexpr size_t kPiece = size_t{1} << 30;  // zlib and bzip2 count bytes in 32 bits: feed them in pieces

// The decompressed bytes, appended to `out`, grown by doubling (at least 1
// MiB at a time) and cut to what was written at the end.
class Output {
 public:
  Output(std::string& out, const std::string& name) : out_(out), used_(out.size()), name_(name) {}
  ~Output() { out_.resize(used_); }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Free bytes after what was written: at least 64 KiB, at most kPiece.
  std::pair<char*, size_t> room() {
    if (out_.size() - used_ < 64 * 1024) {
      const size_t grow = std::max(out_.size(), size_t{1} << 20);
      try {
        out_.resize(used_ + grow);
      } catch (const std::bad_alloc&) {
        throw DataError(name_, too_big());
      } catch (const std::length_error&) {
        throw DataError(name_, too_big());
      }
    }
    return {out_.data() + used_, std::min(out_.size() - used_, kPiece)};
  }
  void wrote(size_t n) { used_ += n; }
  size_t size() const { return used_; }

 private:
  std::string too_big() const {
    return fmt::format("decompressed, it does not fit in memory (more than {} MiB): decompress it to a file first",
                       used_ >> 20);
  }

  std::string& out_;
  size_t used_;
  const std::string& name_;
};

[[noreturn]] void corrupt(const std::string& name, Compression c, uint64_t at, const std::string& why) {
  throw DataError(name, fmt::format("corrupt {} data at compressed byte {}: {}", compression_name(c), at, why));
}

[[noreturn]] void truncated(const std::string& name, Compression c, uint64_t size) {
  throw DataError(name, fmt::format("the {} data ends before its stream does, at byte {} (file truncated: an "
                                    "incomplete download or copy?)",
                                    compression_name(c), size));
}

[[noreturn]] void trailing(const std::string& name, Compression c, uint64_t at, uint64_t size) {
  throw DataError(name, fmt::format("{} bytes after the end of the {} data (at byte {}) are not another {} stream",
                                    size - at, compression_name(c), at, compression_name(c)));
}

// The next piece of `data` to hand a decoder, from byte `given` on (at
// most kPiece bytes); advances `given` past it.
std::pair<const char*, size_t> next_piece(std::string_view data, size_t& given) {
  const size_t n = std::min(data.size() - given, kPiece);
  const char* p = data.data() + given;
  given += n;
  return {p, n};
}

// Decodes `data` as one stream after another, as gzip and bzip2 files may
// hold several (pigz, pbzip2, `cat a.gz b.gz`): one(start) decodes the
// stream at byte `start` and returns the bytes it took, or npos once the
// output reached its limit. Bytes after the last stream that do not start
// another are an error.
template <class One>
void stream_after_stream(std::string_view data, Compression c, const std::string& name, One&& one) {
  for (size_t at = 0;;) {
    const size_t took = one(at);
    if (took == std::string_view::npos) return;
    at += took;
    if (at == data.size()) return;
    if (detect_compression(data.substr(at)) != c) trailing(name, c, at, data.size());
  }
}

void gunzip(std::string_view data, const std::string& name, Output& out, size_t limit) {
  stream_after_stream(data, Compression::kGzip, name, [&](size_t member) -> size_t {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) throw DataError(name, "gzip: zlib could not start (out of memory?)");
    struct End {
      z_stream& zs;
      ~End() { inflateEnd(&zs); }
    } end{zs};
    size_t given = member;  // bytes of data handed to zlib so far
    for (int rc = Z_OK; rc != Z_STREAM_END;) {
      if (zs.avail_in == 0 && given < data.size()) {
        const auto [in, in_n] = next_piece(data, given);
        zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in));
        zs.avail_in = static_cast<uInt>(in_n);
      }
      auto [p, n] = out.room();
      zs.next_out = reinterpret_cast<Bytef*>(p);
      zs.avail_out = static_cast<uInt>(n);
      rc = inflate(&zs, Z_NO_FLUSH);
      out.wrote(n - zs.avail_out);
      if (limit > 0 && out.size() >= limit) return std::string_view::npos;
      if (rc == Z_OK || rc == Z_STREAM_END) continue;
      if (rc == Z_BUF_ERROR && zs.avail_in == 0 && given == data.size()) {
        truncated(name, Compression::kGzip, data.size());
      }
      if (rc == Z_MEM_ERROR) throw DataError(name, "gzip: zlib ran out of memory");
      corrupt(name, Compression::kGzip, member + zs.total_in,
              zs.msg != nullptr ? zs.msg : fmt::format("zlib error {}", rc));
    }
    return zs.total_in;
  });
}

const char* bzip2_error(int rc) {
  switch (rc) {
    case BZ_DATA_ERROR: return "the data fails its integrity check";
    case BZ_DATA_ERROR_MAGIC: return "no bzip2 stream header";
    case BZ_MEM_ERROR: return "out of memory";
    default: return "libbz2 error";
  }
}

void bunzip2(std::string_view data, const std::string& name, Output& out, size_t limit) {
  stream_after_stream(data, Compression::kBzip2, name, [&](size_t stream) -> size_t {
    bz_stream bs{};
    if (BZ2_bzDecompressInit(&bs, 0, 0) != BZ_OK) {
      throw DataError(name, "bzip2: libbz2 could not start (out of memory?)");
    }
    struct End {
      bz_stream& bs;
      ~End() { BZ2_bzDecompressEnd(&bs); }
    } end{bs};
    size_t given = stream;
    auto consumed = [&] { return (uint64_t{bs.total_in_hi32} << 32) | bs.total_in_lo32; };
    for (int rc = BZ_OK; rc != BZ_STREAM_END;) {
      if (bs.avail_in == 0 && given < data.size()) {
        const auto [in, in_n] = next_piece(data, given);
        bs.next_in = const_cast<char*>(in);
        bs.avail_in = static_cast<unsigned>(in_n);
      }
      auto [p, n] = out.room();
      bs.next_out = p;
      bs.avail_out = static_cast<unsigned>(n);
      rc = BZ2_bzDecompress(&bs);
      const size_t wrote = n - bs.avail_out;
      out.wrote(wrote);
      if (limit > 0 && out.size() >= limit) return std::string_view::npos;
      if (rc == BZ_OK) {
        // All input taken, room left, and nothing came out: the stream needs
        // bytes the file does not have.
        if (bs.avail_in == 0 && given == data.size() && wrote == 0) truncated(name, Compression::kBzip2, data.size());
        continue;
      }
      if (rc != BZ_STREAM_END) corrupt(name, Compression::kBzip2, stream + consumed(), bzip2_error(rc));
    }
    return static_cast<size_t>(consumed());
  });
}

const char* xz_error(lzma_ret rc) {
  switch (rc) {
    case LZMA_FORMAT_ERROR: return "not xz data";
    case LZMA_OPTIONS_ERROR: return "unsupported compression options";
    case LZMA_DATA_ERROR: return "the data fails its integrity check";
    case LZMA_MEM_ERROR: return "out of memory";
    default: return "liblzma error";
  }
}

// The most memory an xz decoder may take. Decoding needs the dictionary the
// file's header names (up to 4 GiB), allocated before any data is checked,
// so a 77-byte file could ask for 4 GiB. Every xz preset decodes in at most
// 65 MiB, and the xz tool writes no dictionary past 1.5 GiB: 1600 MiB lets
// every file the xz tool makes through and refuses the rest.
constexpr uint64_t kXzMemoryLimit = uint64_t{1600} << 20;

// liblzma reads concatenated streams (and their padding) itself.
void unxz(std::string_view data, const std::string& name, Output& out, size_t limit) {
  lzma_stream s = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&s, kXzMemoryLimit, LZMA_CONCATENATED) != LZMA_OK) {
    throw DataError(name, "xz: liblzma could not start (out of memory?)");
  }
  struct End {
    lzma_stream& s;
    ~End() { lzma_end(&s); }
  } end{s};
  s.next_in = reinterpret_cast<const uint8_t*>(data.data());
  s.avail_in = data.size();
  for (lzma_ret rc = LZMA_OK; rc != LZMA_STREAM_END;) {
    auto [p, n] = out.room();
    s.next_out = reinterpret_cast<uint8_t*>(p);
    s.avail_out = n;
    rc = lzma_code(&s, LZMA_FINISH);  // all the input is there
    out.wrote(n - s.avail_out);
    if (limit > 0 && out.size() >= limit) return;
    if (rc == LZMA_OK || rc == LZMA_STREAM_END) continue;
    if (rc == LZMA_BUF_ERROR) truncated(name, Compression::kXz, data.size());
    if (rc == LZMA_MEMLIMIT_ERROR) {
      throw DataError(name, fmt::format("xz: its header asks for {} MiB of memory to decompress, more than the "
                                        "{} MiB parafab allows (the xz tool's presets need at most 65 MiB): a "
                                        "damaged or hostile file",
                                        (lzma_memusage(&s) + (1 << 20) - 1) >> 20, kXzMemoryLimit >> 20));
    }
    corrupt(name, Compression::kXz, s.total_in, xz_error(rc));
  }
}

}  // namespace

Compression detect_compression(std::string_view head) {
  auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts("\x1f\x8b")) return Compression::kGzip;
  if (head.size() >= 4 && starts("BZh") && head[3] >= '1' && head[3] <= '9') return Compression::kBzip2;
  if (starts(std::string_view("\xfd" "7zXZ\0", 6))) return Compression::kXz;
  if (starts("\x28\xb5\x2f\xfd")) return Compression::kZstd;
  return Compression::kNone;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "uncompressed";
    case Compression::kGzip: return "gzip";
    case Compression::kBzip2: return "bzip2";
    case Compression::kXz: return "xz";
    case Compression::kZstd: return "zstd";
  }
  return "unknown";
}

void decompress(Compression c, std::string_view data, const std::string& name, std::string& out, size_t limit) {
  Output o(out, name);
  switch (c) {
    case Compression::kNone: throw std::invalid_argument("decompress: " + name + " is not compressed");
    case Compression::kGzip: return gunzip(data, name, o, limit);
    case Compression::kBzip2: return bunzip2(data, name, o, limit);
    case Compression::kXz: return unxz(data, name, o, limit);
    case Compression::kZstd:
      throw DataError(name, "zstd-compressed: parafab reads gzip, bzip2 and xz; decompress it first (zstd -d "
                            "FILE), or stream it (zstdcat FILE | parafab ..., with /dev/stdin as the file)");
  }
}

}  // namespace parafab::worker
