// libsvm parsing: exact arrays for hand-written inputs, and every kind of
// malformed line named by file:line:column and its message.
#include <gtest/gtest.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/worker/test_util.h"
#include "worker/data_reader.h"

namespace parafab::worker {
namespace {

using test::data_error_of;

Dataset parse(const std::string& text, ReadStats* stats = nullptr, bool skip = false) {
  ReadOptions opt;
  opt.format = DataFormat::kLibsvm;
  opt.skip_bad_lines = skip;
  return parse_text_dataset(text, "t.svm", opt, stats);
}

template <class T>
std::vector<T> vec(std::span<const T> s) {
  return {s.begin(), s.end()};
}

TEST(LibsvmReader, ParsesCommentsBlanksCrlfLabelsAndOddRows) {
  const std::string text =
      "# a header comment\n"
      "+1 3:1.5 1:2 # trailing comment\n"
      "\n"
      "-1 0:0.25\n"
      "   \t\n"
      "1 7:1 7:-2\n"  // duplicate index: two nonzeros
      "0\n"           // label only: an empty row
      "1.0 5:1e-3\t2:+4\r\n"
      "  -1.0\t9:3   \r\n"
      "0.0 18446744073709551615:1e-50\n"  // largest index; value underflows to 0
      "\t# indented comment with UTF-8: caf\xc3\xa9 \xe2\x9c\x93\n";
  ReadStats stats;
  Dataset d = parse(text, &stats);
  const DatasetView& v = d.view();
  EXPECT_EQ(vec(v.labels), (std::vector<float>{1, 0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(vec(v.row_ptr), (std::vector<uint64_t>{0, 2, 3, 5, 5, 7, 8, 9}));
  EXPECT_EQ(vec(v.keys),
            (std::vector<uint64_t>{3, 1, 0, 7, 7, 5, 2, 9, std::numeric_limits<uint64_t>::max()}));
  EXPECT_EQ(vec(v.values), (std::vector<float>{1.5f, 2, 0.25f, 1, -2, 1e-3f, 4, 3, 0}));
  EXPECT_EQ(stats.lines, 11u);
  EXPECT_EQ(stats.examples, 7u);
  EXPECT_EQ(stats.skipped_lines, 0u);
  EXPECT_TRUE(stats.first_errors.empty());
  EXPECT_EQ(stats.format, DataFormat::kLibsvm);
}

TEST(LibsvmReader, LastLineWithoutNewlineIsRead) {
  Dataset d = parse("1 3:1\n0 4:2.5");
  EXPECT_EQ(vec(d.view().labels), (std::vector<float>{1, 0}));
  EXPECT_EQ(vec(d.view().keys), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(vec(d.view().values), (std::vector<float>{1, 2.5f}));
}

// A UTF-8 byte order mark opening the input is dropped: the same rows as
// without it, in one part or split in two (each line read exactly once).
TEST(LibsvmReader, AByteOrderMarkOpeningTheInputIsDropped) {
  const std::string body = "1 3:1\n0 4:2.5 5:1\n1\n0 6:-1\n";
  const Dataset plain = parse(body);
  const Dataset marked = parse("\xef\xbb\xbf" + body);
  EXPECT_EQ(vec(marked.view().labels), vec(plain.view().labels));
  EXPECT_EQ(vec(marked.view().row_ptr), vec(plain.view().row_ptr));
  EXPECT_EQ(vec(marked.view().keys), vec(plain.view().keys));
  EXPECT_EQ(vec(marked.view().values), vec(plain.view().values));
  std::vector<uint64_t> keys;
  for (uint32_t part = 0; part < 2; ++part) {
    ReadOptions opt;
    opt.format = DataFormat::kAuto;
    opt.part = part;
    opt.parts = 2;
    const Dataset d = parse_text_dataset("\xef\xbb\xbf" + body, "t.svm", opt);
    keys.insert(keys.end(), d.view().keys.begin(), d.view().keys.end());
  }
  EXPECT_EQ(keys, vec(plain.view().keys));
  ReadStats stats;  // a mark alone: an empty input (found by fuzz_libsvm_reader)
  EXPECT_EQ(parse("\xef\xbb\xbf", &stats).rows(), 0u);
  EXPECT_EQ(stats.lines, 0u);
}

TEST(LibsvmReader, EmptyAndCommentOnlyInputsGiveNoRows) {
  for (const char* text : {"", "\n\n", "# only\n# comments", "\r\n \t\r\n"}) {
    ReadStats stats;
    Dataset d = parse(text, &stats);
    EXPECT_EQ(d.rows(), 0u) << text;
    EXPECT_EQ(d.nnz(), 0u);
    ASSERT_EQ(d.view().row_ptr.size(), 1u);
    EXPECT_EQ(d.view().row_ptr[0], 0u);
  }
}

TEST(LibsvmReader, AcceptsEveryLabelSpelling) {
  Dataset d = parse("+1\n1\n1.0\n-1\n0\n-1.0\n0.0\n");
  EXPECT_EQ(vec(d.view().labels), (std::vector<float>{1, 1, 1, 0, 0, 0, 0}));
}

struct BadCase {
  const char* name;
  std::string text;
  std::string where;    // "t.svm:line:col:"
  std::string message;  // a part of the message
};

class LibsvmBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(LibsvmBadInput, NamesFileLineColumnAndProblem) {
  const BadCase& c = GetParam();
  const std::string msg = data_error_of([&] { parse(c.text); });
  EXPECT_EQ(msg.rfind(c.where + " ", 0), 0u) << msg;
  EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, LibsvmBadInput,
    ::testing::Values(
        BadCase{"BadIndex", "1 3:1\n1 2:1 x:1\n", "t.svm:2:7:", "bad feature index in 'x:1'"},
        BadCase{"NegativeIndex", "1 -3:1\n", "t.svm:1:3:", "feature index must be a non-negative integer, got '-3:1'"},
        BadCase{"IndexOverflow", "1 18446744073709551616:1\n", "t.svm:1:3:", "does not fit in 64 bits"},
        BadCase{"EmptyIndex", "1 :1\n", "t.svm:1:3:", "empty feature index in ':1'"},
        BadCase{"EmptyValue", "1 4: 5:1\n", "t.svm:1:3:", "empty feature value in '4:'"},
        BadCase{"NoColon", "1 4\n", "t.svm:1:3:", "feature '4' has no ':'"},
        BadCase{"TrailingGarbage", "1 3:1.0x\n", "t.svm:1:3:", "trailing characters after feature value in '3:1.0x'"},
        BadCase{"BadValue", "1 3:abc\n", "t.svm:1:3:", "bad feature value in '3:abc'"},
        BadCase{"DoubleSign", "1 3:+-1\n", "t.svm:1:3:", "bad feature value in '3:+-1'"},
        BadCase{"MissingLabel", "1 1:1\n3:1 4:2\n", "t.svm:2:1:", "missing label: line starts with feature '3:1'"},
        BadCase{"BadLabel", "2 3:1\n", "t.svm:1:1:", "label must be one of +1, 1, -1, 0, 1.0, -1.0, 0.0; got '2'"},
        BadCase{"WordLabel", "yes 3:1\n", "t.svm:1:1:", "label must be one of"},
        BadCase{"NanValue", "1 2:1 3:nan\n", "t.svm:1:7:", "feature value is NaN in '3:nan'"},
        BadCase{"InfValue", "1 3:inf\n", "t.svm:1:3:", "feature value is infinite in '3:inf'"},
        BadCase{"MinusInfValue", "0 3:-Infinity\n", "t.svm:1:3:", "feature value is infinite"},
        BadCase{"FloatOverflow", "1 3:1e39\n", "t.svm:1:3:", "feature value out of float range in '3:1e39'"},
        BadCase{"Qid", "1 qid:7 1:2\n", "t.svm:1:3:", "qid: tokens (ranking queries) are not supported"},
        BadCase{"QidAsLabel", "qid:7 1:2\n", "t.svm:1:1:", "missing label"},
        BadCase{"TruncatedMidToken", "1 3:1\n0 4:", "t.svm:2:3:",
                "empty feature value in '4:' (file ends mid-line: truncated?)"},
        BadCase{"TruncatedMidIndex", "1 3:1\r\n0 4", "t.svm:2:3:", "has no ':' (expected index:value) (file ends mid-line: truncated?)"},
        BadCase{"NonAsciiInValue", "1 3:1\xc3\xa9\n", "t.svm:1:6:", "non-ASCII byte 0xc3"},
        BadCase{"NonAsciiInIndex", "1 \xff:1\n", "t.svm:1:3:", "non-ASCII byte 0xff"},
        BadCase{"Utf8BomOnLineTwo", "1 3:1\n\xef\xbb\xbf" "0 4:1\n", "t.svm:2:1:", "non-ASCII byte 0xef"},
        BadCase{"Utf8BomTwice", "\xef\xbb\xbf\xef\xbb\xbf" "1 3:1\n", "t.svm:1:1:", "non-ASCII byte 0xef"},
        BadCase{"ColumnsAfterABom", "\xef\xbb\xbf" "1 3:1 4:x\n", "t.svm:1:7:", "bad feature value in '4:x'"},
        BadCase{"Latin1InComment", "1 3:1 # caf\xe9\n", "t.svm:1:12:", "invalid UTF-8 in comment (byte 0xe9)"},
        BadCase{"OverlongUtf8InComment", "# \xc0\xaf\n", "t.svm:1:3:", "invalid UTF-8 in comment (byte 0xc0)"},
        BadCase{"CutUtf8InComment", "1 # \xe2\x9c", "t.svm:1:5:", "invalid UTF-8 in comment"},
        BadCase{"SurrogateInComment", "# \xed\xa0\x80\n", "t.svm:1:3:", "invalid UTF-8 in comment (byte 0xed)"},
        BadCase{"BareCarriageReturn", "1 3:1\r 4:1\n", "t.svm:1:3:", "trailing characters after feature value in '3:1\\x0d'"},
        BadCase{"ColumnsAfterCrlfLines", "1 1:1\r\n0 2:2\r\n1 3:3 3:?\r\n", "t.svm:3:7:", "bad feature value in '3:?'"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LibsvmReader, ErrorCarriesLineAndColumnFields) {
  try {
    parse("1 1:1\n\n1 2:2 3:x\n");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_EQ(e.file(), "t.svm");
    EXPECT_EQ(e.line(), 3u);
    EXPECT_EQ(e.column(), 7u);
  }
}

TEST(LibsvmReader, TruncationNoteOnlyWhenTheFileEndsMidLine) {
  const std::string with_nl = data_error_of([] { parse("1 3:1\n0 4:\n"); });
  EXPECT_EQ(with_nl.find("truncated"), std::string::npos) << with_nl;
  const std::string bad_middle = data_error_of([] { parse("1 3:\n0 4:1"); });
  EXPECT_EQ(bad_middle.find("truncated"), std::string::npos) << bad_middle;
}

TEST(LibsvmReader, SkipBadLinesDropsOnlyThoseLines) {
  std::string text;
  for (int i = 1; i <= 30; ++i) {
    if (i % 2 == 0) {
      text += "1 " + std::to_string(i) + ":1 " + std::to_string(i + 1000) + ":x\n";  // bad after a good token
    } else {
      text += "0 " + std::to_string(i) + ":" + std::to_string(i) + ".5\n";
    }
  }
  text += "1 99:";  // bad and truncated
  ReadStats stats;
  Dataset d = parse(text, &stats, /*skip=*/true);
  EXPECT_EQ(stats.lines, 31u);
  EXPECT_EQ(stats.skipped_lines, 16u);
  EXPECT_EQ(stats.examples, 15u);
  ASSERT_EQ(stats.first_errors.size(), 10u);
  EXPECT_EQ(stats.first_errors[0], "t.svm:2:7: bad feature value in '1002:x'");
  EXPECT_EQ(stats.first_errors[9], "t.svm:20:8: bad feature value in '1020:x'");
  std::vector<uint64_t> keys;
  std::vector<float> values;
  std::vector<uint64_t> row_ptr{0};
  for (int i = 1; i <= 30; i += 2) {
    keys.push_back(static_cast<uint64_t>(i));
    values.push_back(static_cast<float>(i) + 0.5f);
    row_ptr.push_back(keys.size());
  }
  EXPECT_EQ(vec(d.view().keys), keys);
  EXPECT_EQ(vec(d.view().values), values);
  EXPECT_EQ(vec(d.view().row_ptr), row_ptr);
  EXPECT_EQ(vec(d.view().labels), std::vector<float>(15, 0.0f));
}

TEST(LibsvmReader, WithoutSkipTheFirstBadLineThrows) {
  const std::string msg = data_error_of([] { parse("1 1:1\n1 2:x\n1 3:y\n"); });
  EXPECT_EQ(msg, "t.svm:2:3: bad feature value in '2:x'");
}

// The parser has its own fast path for short decimals; it must round exactly
// as std::from_chars does, on both sides of its limits (2^24, 9 digits).
TEST(LibsvmReader, ValuesRoundExactlyLikeFromChars) {
  std::vector<std::string> values = {"0", "-0", "-0.0", "1", "16777216", "16777217", "16777215.5",
                                     "0.1", "0.3", "3.14159265", "999999999", "1000000000", "0.000000001",
                                     "00012.50", "1.", ".5", "-.5", "1e3", "1E-3", "+2.5", "5e-40",
                                     "123456789.0", "0.123456789", "8388609.5", "33554431"};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t m = rng() % (i % 2 ? 100000000ULL : 20000000ULL);
    const int k = static_cast<int>(rng() % 11);
    std::string s = std::to_string(m);
    if (k > 0) {
      s.insert(0, std::string(k + 1 > static_cast<int>(s.size()) ? k + 1 - s.size() : 0, '0'));
      s.insert(s.size() - static_cast<size_t>(k), ".");
    }
    if (rng() & 1) s.insert(0, "-");
    values.push_back(s);
  }
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += "1 " + std::to_string(i) + ":" + values[i] + "\n";
  Dataset d = parse(text);
  ASSERT_EQ(d.nnz(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string& s = values[i];
    const char* b = s.data() + (s[0] == '+');
    float want = 0;
    auto [ptr, ec] = std::from_chars(b, s.data() + s.size(), want);
    if (ec == std::errc::result_out_of_range) want = static_cast<float>(std::stod(s));  // underflow
    else ASSERT_TRUE(ec == std::errc{} && ptr == s.data() + s.size()) << s;
    const float got = d.view().values[i];
    uint32_t gb, wb;
    std::memcpy(&gb, &got, 4);
    std::memcpy(&wb, &want, 4);
    EXPECT_EQ(gb, wb) << s << ": got " << got << ", from_chars " << want;
  }
}

TEST(LibsvmReader, LongTokensAreShortenedInMessages) {
  const std::string tok = "1:" + std::string(100, 'z');
  const std::string msg = data_error_of([&] { parse("1 " + tok + "\n"); });
  EXPECT_NE(msg.find("...'"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 120u) << msg;
}

}  // namespace
}  // namespace parafab::worker
