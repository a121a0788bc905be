// libFuzzer target: compressed data files (worker/compressed_input.h:
// detect_compression and decompress, gzip, bzip2 and xz) and the file
// reader that puts them in front of the text parsers
// (worker::read_text_dataset). Besides "no crash, no hang, no sanitizer
// report" it checks:
//   - decompress returns the text or throws a DataError naming the file
//     (nothing else escapes); with a limit it returns a prefix of that same
//     text, at least `limit` bytes long or all of it;
//   - reading the bytes as a file gives the rows of parsing the text they
//     stand for: plain bytes unchanged (decompress refuses them with
//     invalid_argument: they are not compressed), compressed ones
//     decompressed; a refusal there is the same DataError;
//   - a valid stream (the libraries' own encoders) round-trips; cut short it
//     is a DataError saying the file is truncated; followed by a byte that
//     starts no stream it is a DataError; two of them read as the text
//     twice; with a byte changed it is the text or a DataError.
// Every decompress call costs a 1 MiB output buffer, so each input makes
// only one or two of these checks (picked by its first byte).
//
//   byte 0: bits 0-1 mode: 0 the rest is a file's bytes, as they are;
//           1, 2, 3: the rest (after bytes 1-2) is a text to encode with
//           gzip, bzip2, xz
//           bits 2-4 the check besides the round trip: mode 0: even the
//           file read, odd the limited read; modes 1-3: (value % 6) cut
//           short, a byte after the stream, two streams, a byte changed,
//           a limited read, the file read
//   bytes 1-2 (modes 1-3): where to cut or change a byte, and the limit;
//           byte 2 | 1 is what a changed byte is xor'ed with
#include <bzlib.h>
#include <lzma.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_temp_file.h"
#include "worker/compressed_input.h"
#include "worker/data_error.h"
#include "worker/data_reader.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::temp_path;
using parafab::fuzz::write_temp_file;
using parafab::fuzz::violated;
using parafab::worker::Compression;
using parafab::worker::DataError;

// Texts longer than this (a small input can decompress to megabytes) are not
// parsed: that is the text readers' fuzzers' work, and slow under ASan.
constexpr size_t kParseAtMost = size_t{1} << 20;

void check_names(const DataError& e, const std::string& name) {
  check(e.file() == name, "DataError names another file");
  check(std::string(e.what()).rfind(name + ": ", 0) == 0, "DataError message does not start with the file name");
}

// The decompression of `data`, or nothing when it is refused (a DataError
// naming `name`, whose message goes to *error).
std::optional<std::string> decompressed(Compression c, std::string_view data, const std::string& name,
                                        std::string* error = nullptr, size_t limit = 0) {
  std::string out;
  try {
    parafab::worker::decompress(c, data, name, out, limit);
  } catch (const DataError& e) {
    check_names(e, name);
    if (error != nullptr) *error = e.what();
    return std::nullopt;
  }
  return out;
}

std::string gzip(std::string_view text) {
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) violated("deflateInit2");
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) violated("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string bzip2(std::string_view text) {
  std::string out(text.size() + text.size() / 100 + 1024, '\0');
  unsigned len = static_cast<unsigned>(out.size());
  if (BZ2_bzBuffToBuffCompress(out.data(), &len, const_cast<char*>(text.data()), static_cast<unsigned>(text.size()),
                               1, 0, 30) != BZ_OK) {
    violated("BZ2_bzBuffToBuffCompress");
  }
  out.resize(len);
  return out;
}

std::string xz(std::string_view text) {
  std::string out(lzma_stream_buffer_bound(text.size()), '\0');
  size_t pos = 0;
  if (lzma_easy_buffer_encode(0, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(text.data()),
                              text.size(), reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()) != LZMA_OK) {
    violated("lzma_easy_buffer_encode");
  }
  out.resize(pos);
  return out;
}

bool same_view(const parafab::worker::DatasetView& a, const parafab::worker::DatasetView& b) {
  using parafab::fuzz::bytes_equal;
  return bytes_equal(a.labels, b.labels) && bytes_equal(a.row_ptr, b.row_ptr) && bytes_equal(a.keys, b.keys) &&
         bytes_equal(a.values, b.values);
}

// The file at `path` (holding `bytes`) reads as the rows of `text`, or, when
// the bytes do not decompress (`error`), is refused with that same error.
void check_file_reads_as(const std::string& path, std::string_view bytes, const std::optional<std::string>& text,
                         const std::string& error) {
  if (text && text->size() > kParseAtMost) return;
  write_temp_file(path, bytes);
  parafab::worker::ReadOptions opt;
  opt.skip_bad_lines = true;  // rows to compare, not the first bad line
  std::optional<parafab::worker::Dataset> want;
  std::string want_error = error;
  parafab::worker::ReadStats want_stats, got_stats;
  if (text) {
    try {
      want = parafab::worker::parse_text_dataset(*text, path, opt, &want_stats);
    } catch (const DataError& e) {
      check_names(e, path);
      want_error = e.what();
    }
  }
  try {
    const parafab::worker::Dataset got = parafab::worker::read_text_dataset(path, opt, &got_stats);
    check(want.has_value(), "a file read where its bytes are refused");
    check(same_view(got.view(), want->view()), "a file reads other rows than its text");
    check(got_stats.lines == want_stats.lines && got_stats.examples == want_stats.examples &&
              got_stats.skipped_lines == want_stats.skipped_lines && got_stats.first_errors == want_stats.first_errors,
          "a file reads with other stats than its text");
  } catch (const DataError& e) {
    check_names(e, path);
    check(!want.has_value(), "a file refused whose text reads");
    check(e.what() == want_error, "a file refused with another error than its bytes");
  }
  ::unlink(path.c_str());
}

void as_they_are(std::string_view bytes, uint8_t which, const std::string& path) {
  const Compression c = parafab::worker::detect_compression(bytes);
  if (c == Compression::kNone) {
    std::string out;
    try {
      parafab::worker::decompress(c, bytes, path, out);
      violated("decompress took bytes that are not compressed");
    } catch (const std::invalid_argument&) {
    }
    check_file_reads_as(path, bytes, std::string(bytes), "");
    return;
  }
  std::string error;
  const std::optional<std::string> text = decompressed(c, bytes, path, &error);
  if (which % 2 == 0) {
    check_file_reads_as(path, bytes, text, error);
  } else if (text && !text->empty()) {
    const size_t limit = 1 + bytes.size() % text->size();
    const std::optional<std::string> prefix = decompressed(c, bytes, path, nullptr, limit);
    check(prefix.has_value(), "a limited read refused what the whole read takes");
    check(prefix->size() >= limit && text->compare(0, prefix->size(), *prefix) == 0,
          "a limited read is not a prefix of the text at least the limit long");
  }
}

void encoded(Compression c, uint8_t which, uint32_t where, uint8_t flip, std::string_view text,
             const std::string& path) {
  const std::string packed = c == Compression::kGzip ? gzip(text) : c == Compression::kBzip2 ? bzip2(text) : xz(text);
  check(parafab::worker::detect_compression(packed) == c, "an encoder's stream is not detected as its codec");
  const std::optional<std::string> back = decompressed(c, packed, path);
  check(back.has_value() && *back == text, "a valid stream does not round-trip");
  switch (which % 6) {
    case 0: {
      std::string error;
      check(!decompressed(c, std::string_view(packed).substr(0, where % packed.size()), path, &error),
            "a stream cut short is accepted");
      check(error.find("truncated") != std::string::npos, "a stream cut short is not called truncated");
      break;
    }
    case 1:
      check(!decompressed(c, packed + "x", path), "a byte after the stream is accepted");
      break;
    case 2: {
      const std::optional<std::string> twice = decompressed(c, packed + packed, path);
      check(twice.has_value() && *twice == std::string(text) + std::string(text),
            "two streams do not read one after another");
      break;
    }
    case 3: {
      std::string changed = packed;
      changed[where % changed.size()] ^= static_cast<char>(flip);
      (void)decompressed(c, changed, path);  // the text or a DataError: both fine
      break;
    }
    case 4:
      if (!text.empty()) {
        const size_t limit = 1 + where % text.size();
        const std::optional<std::string> prefix = decompressed(c, packed, path, nullptr, limit);
        check(prefix.has_value() && prefix->size() >= limit && text.substr(0, prefix->size()) == *prefix,
              "a limited read is not a prefix of the text at least the limit long");
      }
      break;
    default:
      check_file_reads_as(path, packed, std::string(text), "");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string path = temp_path("input");
  const uint8_t opt = data[0], which = static_cast<uint8_t>((opt >> 2) & 7);
  const auto* bytes = reinterpret_cast<const char*>(data);
  if ((opt & 3) == 0) {
    as_they_are(std::string_view(bytes + 1, size - 1), which, path);
    return 0;
  }
  if (size < 3) return 0;
  constexpr Compression kCodec[4] = {Compression::kNone, Compression::kGzip, Compression::kBzip2, Compression::kXz};
  const uint32_t where = static_cast<uint32_t>(data[1]) | static_cast<uint32_t>(data[2]) << 8;
  encoded(kCodec[opt & 3], which, where, static_cast<uint8_t>(data[2] | 1), std::string_view(bytes + 3, size - 3),
          path);
  return 0;
}
