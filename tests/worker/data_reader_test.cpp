// read_text_dataset over files and the multi-threaded chunked parse: the same
// arrays and the same error (line numbers included) for any thread count.
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/worker/test_util.h"
#include "worker/data_reader.h"

namespace parafab::worker {
namespace {

using test::data_error_of;
using test::expect_same_view;

// A few MB of libsvm with every feature of the format: distinct values,
// unsorted and repeated indices, comments, blank lines, CRLF, empty rows.
std::string generate_libsvm(size_t lines, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s;
  s.reserve(lines * 64);
  for (size_t i = 0; i < lines; ++i) {
    const uint64_t r = rng();
    switch (r % 50) {
      case 0: s += "# comment " + std::to_string(i) + "\n"; continue;
      case 1: s += "\n"; continue;
      case 2: s += "1\n"; continue;  // empty row
      default: break;
    }
    s += (r & 64) ? "+1" : "-1";
    const int nnz = 1 + static_cast<int>((r >> 8) % 9);
    for (int k = 0; k < nnz; ++k) {
      s += ' ';
      s += std::to_string(rng() % 1000000);
      s += ':';
      s += std::to_string(static_cast<double>(rng() % 100000) / 1000.0 - 50.0);
    }
    s += (r & 128) ? "\r\n" : "\n";
  }
  return s;
}

// Replaces line `line` (1-based) with `replacement`.
std::string with_line(const std::string& text, size_t line, const std::string& replacement) {
  size_t pos = 0;
  for (size_t i = 1; i < line; ++i) pos = text.find('\n', pos) + 1;
  size_t end = text.find('\n', pos);
  return text.substr(0, pos) + replacement + text.substr(end);
}

Dataset parse(const std::string& text, int threads, bool skip = false, ReadStats* stats = nullptr) {
  ReadOptions opt;
  opt.threads = threads;
  opt.skip_bad_lines = skip;
  return parse_text_dataset(text, "big.svm", opt, stats);
}

constexpr size_t kLines = 60000;

std::string fmt_hex(uint64_t v) {
  char buf[17];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, 16);
  return std::string(buf, end);
}

TEST(DataReader, ThreadCountDoesNotChangeTheArrays) {
  const std::string text = generate_libsvm(kLines, 1);
  ASSERT_GT(text.size(), size_t{2} << 20);
  ReadStats s1;
  Dataset one = parse(text, 1, false, &s1);
  EXPECT_EQ(s1.lines, kLines);
  EXPECT_GT(one.rows(), kLines * 9 / 10);
  for (int threads : {2, 3, 4, 7, 16}) {
    SCOPED_TRACE(threads);
    ReadStats sn;
    Dataset many = parse(text, threads, false, &sn);
    expect_same_view(one.view(), many.view());
    EXPECT_EQ(sn.lines, s1.lines);
    EXPECT_EQ(sn.examples, s1.examples);
  }
}

// Parts of one input (a worker's share): together they are the whole, row
// for row in order, and a bad line names its line in the file.
TEST(DataReader, PartsCoverEveryRowOnceAndKeepFileLineNumbers) {
  const std::string text = generate_libsvm(kLines, 3);
  const Dataset whole = parse(text, 1);
  for (uint32_t parts : {2u, 3u, 5u}) {
    SCOPED_TRACE(parts);
    DatasetArrays joined;
    uint64_t lines = 0;
    for (uint32_t part = 0; part < parts; ++part) {
      ReadOptions opt;
      opt.threads = 2;
      opt.part = part;
      opt.parts = parts;
      ReadStats st;
      const Dataset d = parse_text_dataset(text, "big.svm", opt, &st);
      lines += st.lines;
      const DatasetView v = d.view();
      EXPECT_GT(v.rows(), whole.rows() / parts / 2);
      for (size_t i = 0; i < v.rows(); ++i) {
        joined.labels.push_back(v.labels[i]);
        for (size_t k = v.row_ptr[i]; k < v.row_ptr[i + 1]; ++k) {
          joined.keys.push_back(v.keys[k]);
          joined.values.push_back(v.values[k]);
        }
        joined.row_ptr.push_back(joined.keys.size());
      }
    }
    EXPECT_EQ(lines, kLines);
    expect_same_view(whole.view(), Dataset(std::move(joined)).view());
  }
  const std::string bad = with_line(text, kLines - 3, "1 5:1 6:1 7:oops");
  ReadOptions opt;
  opt.part = 2;
  opt.parts = 3;
  EXPECT_EQ(data_error_of([&] { parse_text_dataset(bad, "big.svm", opt); }),
            "big.svm:" + std::to_string(kLines - 3) + ":11: bad feature value in '7:oops'");
  opt.part = 3;
  EXPECT_THROW(parse_text_dataset(text, "big.svm", opt), std::invalid_argument);
}

TEST(DataReader, ThreadCountDoesNotChangeTheError) {
  const std::string base = generate_libsvm(kLines, 2);
  for (size_t bad_line : {size_t{7}, kLines / 3, kLines / 2 + 1, kLines * 3 / 4, kLines - 1, kLines}) {
    SCOPED_TRACE(bad_line);
    const std::string text = with_line(base, bad_line, "1 5:1 6:1 7:oops");
    const std::string want = "big.svm:" + std::to_string(bad_line) + ":11: bad feature value in '7:oops'";
    for (int threads : {1, 2, 3, 8}) {
      SCOPED_TRACE(threads);
      EXPECT_EQ(data_error_of([&] { parse(text, threads); }), want);
    }
  }
}

TEST(DataReader, ThreadCountDoesNotChangeSkippedLines) {
  std::string text = generate_libsvm(kLines, 3);
  // Bad lines spread over the whole input, so most chunks hold some.
  for (size_t line = 1000; line <= kLines; line += 4999) text = with_line(text, line, "-1 3:1 x");
  text += "1 2:";  // and a truncated last line
  ReadStats s1;
  Dataset one = parse(text, 1, true, &s1);
  EXPECT_EQ(s1.skipped_lines, 13u);
  ASSERT_EQ(s1.first_errors.size(), 10u);
  EXPECT_EQ(s1.first_errors[1], "big.svm:5999:8: feature 'x' has no ':' (expected index:value)");
  for (int threads : {2, 5, 8}) {
    SCOPED_TRACE(threads);
    ReadStats sn;
    Dataset many = parse(text, threads, true, &sn);
    expect_same_view(one.view(), many.view());
    EXPECT_EQ(sn.skipped_lines, s1.skipped_lines);
    EXPECT_EQ(sn.first_errors, s1.first_errors);
    EXPECT_EQ(sn.lines, s1.lines);
  }
  EXPECT_EQ(data_error_of([&] { parse(text, 4); }),
            "big.svm:1000:8: feature 'x' has no ':' (expected index:value)");
}

TEST(DataReader, TruncatedLastLineIsFlaggedWithThreads) {
  const std::string text = generate_libsvm(kLines, 4) + "1 3:0.5 12";
  const std::string want = "big.svm:" + std::to_string(kLines + 1) +
                           ":9: feature '12' has no ':' (expected index:value) (file ends mid-line: truncated?)";
  EXPECT_EQ(data_error_of([&] { parse(text, 1); }), want);
  EXPECT_EQ(data_error_of([&] { parse(text, 4); }), want);
}

TEST(DataReader, ReadsFilesLikeMemory) {
  test::TempDir dir;
  const std::string text = generate_libsvm(5000, 5);
  const std::string path = dir.file("a.svm");
  test::write_file(path, text);
  ReadOptions opt;
  opt.threads = 2;
  ReadStats stats;
  Dataset from_file = read_text_dataset(path, opt, &stats);
  Dataset from_memory = parse(text, 1);
  expect_same_view(from_file.view(), from_memory.view());
  EXPECT_EQ(stats.lines, 5000u);

  const std::string bad = dir.file("bad.svm");
  test::write_file(bad, "1 1:1\n0 2:2\n1 3:\xff\n");
  EXPECT_EQ(data_error_of([&] { read_text_dataset(bad, {}); }), bad + ":3:5: non-ASCII byte 0xff");

  const std::string empty = dir.file("empty.svm");
  test::write_file(empty, "");
  EXPECT_EQ(read_text_dataset(empty, {}).rows(), 0u);

  const std::string missing = dir.file("missing.svm");
  const std::string msg = data_error_of([&] { read_text_dataset(missing, {}); });
  EXPECT_EQ(msg.rfind(missing + ": cannot open", 0), 0u) << msg;
  const std::string dmsg = data_error_of([&] { read_text_dataset(dir.path().string(), {}); });
  EXPECT_NE(dmsg.find("is a directory"), std::string::npos) << dmsg;
}

TEST(DataReader, NonPositiveThreadCountMeansOne) {
  const std::string text = generate_libsvm(100, 6);
  expect_same_view(parse(text, 0).view(), parse(text, 1).view());
  expect_same_view(parse(text, -3).view(), parse(text, 1).view());
}

// Damaged input of any kind gives rows or a DataError, never a crash (this is
// what the sanitizer builds are for) and never a row with garbage in it.
TEST(DataReader, RandomDamageIsReportedNotFatal) {
  const std::string clean = generate_libsvm(3000, 8);
  std::string criteo;
  for (int i = 0; i < 300; ++i) {
    criteo += std::to_string(i % 2);
    for (int j = 0; j < 13; ++j) criteo += "\t" + (j % 3 ? std::to_string(i * 7 - j * 100) : std::string());
    for (int j = 0; j < 26; ++j) criteo += "\t" + (j % 4 ? fmt_hex(static_cast<uint64_t>(i * 31 + j)) : std::string());
    criteo += "\n";
  }
  std::mt19937_64 rng(9);
  const char alphabet[] = "0123456789:.+-eE# \t\r\nxq\x80\xc3\xff";
  for (const std::string* base : {&clean, static_cast<const std::string*>(&criteo)}) {
    for (int round = 0; round < 200; ++round) {
      std::string text = *base;
      const int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0: text[at] = alphabet[rng() % (sizeof alphabet - 1)]; break;
          case 1: text.erase(at, 1 + rng() % 5); break;
          default: text.resize(at); break;
        }
        if (text.empty()) text = "1";
      }
      for (bool skip : {false, true}) {
        ReadOptions opt;
        opt.skip_bad_lines = skip;
        opt.threads = 1 + round % 3;
        try {
          Dataset d = parse_text_dataset(text, "fuzz", opt);
          const DatasetView& v = d.view();
          ASSERT_EQ(v.row_ptr.size(), v.rows() + 1);
          ASSERT_EQ(v.row_ptr.back(), v.nnz());
          for (float l : v.labels) ASSERT_TRUE(l == 0.0f || l == 1.0f);
          for (float x : v.values) ASSERT_TRUE(std::isfinite(x));
        } catch (const DataError& e) {
          EXPECT_FALSE(skip) << e.what();
          EXPECT_EQ(std::string(e.what()).rfind("fuzz:", 0), 0u);
          EXPECT_GT(e.line(), 0u);
          EXPECT_GT(e.column(), 0u);
        }
      }
    }
  }
}

TEST(DataReader, FormatNames) {
  for (DataFormat f : {DataFormat::kAuto, DataFormat::kLibsvm, DataFormat::kCriteo}) {
    EXPECT_EQ(parse_data_format(data_format_name(f)), f);
  }
  EXPECT_STREQ(data_format_name(DataFormat::kCriteo), "criteo");
  EXPECT_THROW(parse_data_format("csv"), std::invalid_argument);
  EXPECT_THROW(parse_data_format(""), std::invalid_argument);
}

// The format of a file whose first bytes are a UTF-8 byte order mark is
// that of the text after it (parafab train checks --train files this way).
TEST(DataReader, FileFormatDetectionSkipsAByteOrderMark) {
  test::TempDir dir;
  std::string criteo = "1";
  for (int j = 0; j < 39; ++j) criteo += "\t";
  const std::string tsv = dir.file("marked.tsv");
  // The comment after the mark is skipped, as without the mark: the format
  // is the Criteo line's (with the mark kept, the first line would decide).
  test::write_file(tsv, "\xef\xbb\xbf# exported\n" + criteo + "\n");
  EXPECT_EQ(detect_file_format(tsv, DataFormat::kAuto), DataFormat::kCriteo);
}

TEST(DataReader, AutoDetectSkipsCommentsAndBlankLines) {
  ReadStats stats;
  parse("# c\n\n1 1:1\n", 1, false, &stats);
  EXPECT_EQ(stats.format, DataFormat::kLibsvm);
  parse("", 1, false, &stats);
  EXPECT_EQ(stats.format, DataFormat::kLibsvm);
}

}  // namespace
}  // namespace parafab::worker
