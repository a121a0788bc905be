// Compressed data files (worker/compressed_input.h): a gzip, bzip2 or xz file
// reads as exactly the rows of its text, with the text's line numbers in
// errors; concatenated streams read one after another; a truncated,
// corrupt or padded file is a DataError naming the file and the byte. The
// files are written with the libraries' own encoders.
#include <bzlib.h>
#include <gtest/gtest.h>
#include <lzma.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/worker/test_util.h"
#include "worker/compressed_input.h"
#include "worker/data_reader.h"

namespace parafab::worker {
namespace {

using test::data_error_of;
using test::expect_same_view;
using test::TempDir;
using test::write_file;

std::string gzip(const std::string& text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string bzip2(const std::string& text) {
  std::string out(text.size() + text.size() / 100 + 1024, '\0');
  unsigned len = static_cast<unsigned>(out.size());
  EXPECT_EQ(BZ2_bzBuffToBuffCompress(out.data(), &len, const_cast<char*>(text.data()),
                                     static_cast<unsigned>(text.size()), 1, 0, 30),
            BZ_OK);
  out.resize(len);
  return out;
}

std::string xz(const std::string& text) {
  std::string out(lzma_stream_buffer_bound(text.size()), '\0');
  size_t pos = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(text.data()),
                                    text.size(), reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()),
            LZMA_OK);
  out.resize(pos);
  return out;
}

struct Codec {
  const char* name;
  const char* suffix;
  std::string (*encode)(const std::string&);
};
const Codec kCodecs[] = {{"gzip", ".gz", gzip}, {"bzip2", ".bz2", bzip2}, {"xz", ".xz", xz}};

// Distinct labels, indices and values on every line; more than a few MiB
// of text, so that the output grows past its first buffers.
std::string libsvm_text(size_t lines, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s;
  for (size_t i = 0; i < lines; ++i) {
    if (i % 97 == 5) s += "# a comment\n";
    s += (rng() & 1) ? "1" : "-1";
    for (int k = 0; k < 1 + static_cast<int>(i % 7); ++k) {
      s += " " + std::to_string(rng() % 1000000) + ":" + std::to_string(static_cast<double>(i * 7 + k) / 8.0);
    }
    s += '\n';
  }
  return s;
}

std::string hex8(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string h(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) h[static_cast<size_t>(i)] = kDigits[v & 15];
  return h;
}

// Criteo TSV: label, 13 integer columns and 26 hex columns, some empty.
std::string criteo_text(size_t lines) {
  std::string s;
  for (size_t i = 0; i < lines; ++i) {
    s += (i % 3 == 0) ? "1" : "0";
    for (int j = 0; j < 13; ++j) s += (i + j) % 5 == 0 ? "\t" : "\t" + std::to_string(i * 13 + j);
    for (int j = 0; j < 26; ++j) {
      s += "\t";
      if ((i + j) % 7 != 0) s += hex8(i * 26 + j + 0x9e3779b1);
    }
    s += '\n';
  }
  return s;
}

class CompressedInput : public ::testing::TestWithParam<Codec> {
 protected:
  // The rows of `bytes` written to name + the codec's suffix.
  Dataset read(const std::string& name, const std::string& bytes, ReadOptions opt = {}) {
    const std::string path = dir_.file(name + GetParam().suffix);
    write_file(path, bytes);
    return read_text_dataset(path, opt);
  }
  Dataset read_plain(const std::string& text, ReadOptions opt = {}) {
    const std::string path = dir_.file("plain.txt");
    write_file(path, text);
    return read_text_dataset(path, opt);
  }
  std::string path_of(const std::string& name) const { return dir_.file(name + GetParam().suffix); }

  TempDir dir_;
};

TEST_P(CompressedInput, ReadsTheRowsOfItsText) {
  const std::string text = libsvm_text(60000, 7);  // ~4 MB of text
  ASSERT_GT(text.size(), size_t{3} << 20);
  const std::string packed = GetParam().encode(text);
  EXPECT_EQ(detect_compression(packed), detect_compression(packed.substr(0, 6)));
  EXPECT_STREQ(compression_name(detect_compression(packed)), GetParam().name);
  for (int threads : {1, 3}) {
    ReadOptions opt;
    opt.threads = threads;
    ReadStats st;
    const std::string path = dir_.file(std::string("train.svm") + GetParam().suffix);
    write_file(path, packed);
    const Dataset got = read_text_dataset(path, opt, &st);
    const Dataset want = read_plain(text, opt);
    expect_same_view(got.view(), want.view());
    EXPECT_EQ(st.examples, 60000u);
    EXPECT_EQ(st.format, DataFormat::kLibsvm);
  }
}

TEST_P(CompressedInput, ConcatenatedStreamsReadOneAfterAnother) {
  const std::string a = libsvm_text(3000, 1), b = libsvm_text(2000, 2);
  const Dataset got = read("two", GetParam().encode(a) + GetParam().encode(b));
  expect_same_view(got.view(), read_plain(a + b).view());
}

TEST_P(CompressedInput, CriteoIsDetectedThroughTheCompression) {
  const std::string text = criteo_text(500);
  const std::string path = path_of("day_0");
  write_file(path, GetParam().encode(text));
  EXPECT_EQ(detect_file_format(path, DataFormat::kAuto), DataFormat::kCriteo);
  ReadStats st;
  const Dataset got = read_text_dataset(path, ReadOptions{}, &st);
  EXPECT_EQ(st.format, DataFormat::kCriteo);
  expect_same_view(got.view(), read_plain(text).view());
}

TEST_P(CompressedInput, AnEmptyTextHasNoRows) {
  EXPECT_EQ(read("empty", GetParam().encode("")).rows(), 0u);
}

TEST_P(CompressedInput, ABadLineIsNamedByItsLineInTheText) {
  std::string text = libsvm_text(100, 3);
  size_t pos = 0;
  for (int i = 1; i < 40; ++i) pos = text.find('\n', pos) + 1;  // the start of line 40
  text.insert(pos, "1 x:2\n");
  const std::string path = path_of("bad");
  write_file(path, GetParam().encode(text));
  const std::string msg = data_error_of([&] { read_text_dataset(path, ReadOptions{}); });
  EXPECT_NE(msg.find(path + ":40:"), std::string::npos) << msg;
  ReadOptions skip;
  skip.skip_bad_lines = true;
  ReadStats st;
  EXPECT_EQ(read_text_dataset(path, skip, &st).rows(), 100u);
  EXPECT_EQ(st.skipped_lines, 1u);
}

TEST_P(CompressedInput, ATruncatedFileIsAnErrorNamingIt) {
  const std::string packed = GetParam().encode(libsvm_text(5000, 4));
  const std::string path = path_of("cut");
  write_file(path, packed.substr(0, packed.size() * 2 / 3));
  const std::string msg = data_error_of([&] { read_text_dataset(path, ReadOptions{}); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(GetParam().name), std::string::npos) << msg;
}

TEST_P(CompressedInput, CorruptDataIsAnErrorNamingTheByte) {
  std::string packed = GetParam().encode(libsvm_text(5000, 5));
  for (size_t i = packed.size() / 2; i < packed.size() / 2 + 64; ++i) packed[i] = static_cast<char>(packed[i] ^ 0x5a);
  const std::string path = path_of("flipped");
  write_file(path, packed);
  const std::string msg = data_error_of([&] { read_text_dataset(path, ReadOptions{}); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(std::string("corrupt ") + GetParam().name + " data at compressed byte"), std::string::npos)
      << msg;
}

TEST_P(CompressedInput, BytesAfterTheLastStreamAreAnError) {
  const std::string path = path_of("padded");
  write_file(path, GetParam().encode(libsvm_text(100, 6)) + "garbage after the stream\n");
  const std::string msg = data_error_of([&] { read_text_dataset(path, ReadOptions{}); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
}

TEST_P(CompressedInput, APrefixIsTheStartOfTheText) {
  const std::string text = libsvm_text(40000, 8);
  std::string prefix;
  decompress(detect_compression(GetParam().encode("x")), GetParam().encode(text), "t", prefix, 100000);
  ASSERT_GE(prefix.size(), 100000u);
  EXPECT_EQ(prefix, text.substr(0, prefix.size()));
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressedInput, ::testing::ValuesIn(kCodecs),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CompressedInputZstd, IsRefusedWithTheCommandThatDecompressesIt) {
  TempDir dir;
  const std::string path = dir.file("train.svm.zst");
  write_file(path, std::string("\x28\xb5\x2f\xfd\x04\x00", 6));
  const std::string msg = data_error_of([&] { read_text_dataset(path, ReadOptions{}); });
  EXPECT_EQ(msg.rfind(path + ": zstd-compressed", 0), 0u) << msg;
  EXPECT_NE(msg.find("zstd -d"), std::string::npos) << msg;
}

// `packed` (one xz stream of one block, as lzma_easy_buffer_encode writes
// it) with the LZMA2 dictionary-size byte of its block header set to `prop`
// and the header's CRC32 made right again: a valid file that asks its
// decoder for that dictionary (prop 28: 64 MiB, 40: 4 GiB - 1).
std::string with_xz_dictionary(std::string packed, uint8_t prop) {
  const size_t header = 12;  // the stream header
  const size_t header_size = (static_cast<uint8_t>(packed.at(header)) + 1u) * 4u;
  const auto flags = static_cast<uint8_t>(packed.at(header + 1));
  size_t p = header + 2;
  auto skip_varint = [&] {
    while (static_cast<uint8_t>(packed.at(p++)) & 0x80u) {
    }
  };
  if (flags & 0x40u) skip_varint();  // compressed size
  if (flags & 0x80u) skip_varint();  // uncompressed size
  EXPECT_EQ(static_cast<uint8_t>(packed.at(p)), 0x21u) << "the first filter is LZMA2";
  EXPECT_EQ(static_cast<uint8_t>(packed.at(p + 1)), 1u) << "LZMA2 has one property byte";
  packed.at(p + 2) = static_cast<char>(prop);
  const size_t crc_at = header + header_size - 4;
  uint32_t crc = lzma_crc32(reinterpret_cast<const uint8_t*>(packed.data() + header), header_size - 4, 0);
  for (size_t i = 0; i < 4; ++i, crc >>= 8) packed.at(crc_at + i) = static_cast<char>(crc & 0xffu);
  return packed;
}

TEST(CompressedInputXz, AHeaderThatAsksForAHugeDictionaryIsRefusedNamingTheMemory) {
  const std::string text = libsvm_text(200, 11);
  const std::string packed = xz(text);
  std::string out;
  // A dictionary as large as the biggest preset's is decoded as before.
  decompress(Compression::kXz, with_xz_dictionary(packed, 28), "big.xz", out);
  EXPECT_EQ(out, text);
  // 4 GiB is refused before liblzma allocates it.
  out.clear();
  const std::string msg =
      data_error_of([&] { decompress(Compression::kXz, with_xz_dictionary(packed, 40), "huge.xz", out); });
  const std::string head = "huge.xz: xz: its header asks for ";
  ASSERT_EQ(msg.rfind(head, 0), 0u) << msg;
  const long mib = std::stol(msg.substr(head.size()));  // the dictionary plus the decoder's own few KiB
  EXPECT_GE(mib, 4096) << msg;
  EXPECT_LE(mib, 4100) << msg;
  EXPECT_NE(msg.find("more than the 1600 MiB parafab allows"), std::string::npos) << msg;
  EXPECT_TRUE(out.empty());
}

TEST(CompressedInputDetect, TextIsNotTakenForCompressedData) {
  for (const char* s : {"", "1 2:3\n", "BZh", "BZhx 1:2", "\x1f", "0\t1\t2"}) {
    EXPECT_EQ(detect_compression(s), Compression::kNone) << s;
  }
  EXPECT_EQ(detect_compression("BZh9"), Compression::kBzip2);
}

}  // namespace
}  // namespace parafab::worker
