// Criteo TSV parsing: keys per namespace, log-square bucketing against its
// closed form, empty fields, and malformed lines.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/worker/test_util.h"
#include "worker/criteo_parser.h"
#include "worker/data_reader.h"
#include "worker/feature_hashing.h"

namespace parafab::worker {
namespace {

using test::data_error_of;

struct Line {
  std::string label = "0";
  std::array<std::string, 13> ints;
  std::array<std::string, 26> cats;
  std::string str() const {
    std::string s = label;
    for (const auto& f : ints) s += "\t" + f;
    for (const auto& f : cats) s += "\t" + f;
    return s;
  }
};

Dataset parse(const std::string& text, ReadStats* stats = nullptr, bool skip = false,
              DataFormat format = DataFormat::kCriteo) {
  ReadOptions opt;
  opt.format = format;
  opt.skip_bad_lines = skip;
  return parse_text_dataset(text, "t.tsv", opt, stats);
}

template <class T>
std::vector<T> vec(std::span<const T> s) {
  return {s.begin(), s.end()};
}

// floor(ln(v)^2) is the k with e^sqrt(k) <= v < e^sqrt(k+1); found here by
// counting up instead of taking the logarithm.
uint64_t bucket_by_counting(int64_t v) {
  if (v <= 2) return static_cast<uint64_t>(v);
  uint64_t k = 0;
  while (std::exp(std::sqrt(static_cast<double>(k + 1))) <= static_cast<double>(v)) ++k;
  return k;
}

TEST(CriteoReader, BucketMatchesClosedForm) {
  // Hand-computed: ln(3)^2 = 1.207, ln(7)^2 = 3.787, ln(10)^2 = 5.302,
  // ln(100)^2 = 21.21, ln(1000)^2 = 47.72, ln(1e6)^2 = 190.9.
  EXPECT_EQ(detail::criteo_bucket(-7), static_cast<uint64_t>(int64_t{-7}));
  EXPECT_EQ(detail::criteo_bucket(0), 0u);
  EXPECT_EQ(detail::criteo_bucket(1), 1u);
  EXPECT_EQ(detail::criteo_bucket(2), 2u);
  EXPECT_EQ(detail::criteo_bucket(3), 1u);
  EXPECT_EQ(detail::criteo_bucket(7), 3u);
  EXPECT_EQ(detail::criteo_bucket(10), 5u);
  EXPECT_EQ(detail::criteo_bucket(100), 21u);
  EXPECT_EQ(detail::criteo_bucket(1000), 47u);
  EXPECT_EQ(detail::criteo_bucket(1000000), 190u);
  for (int64_t v = -50; v <= 20000; ++v) {
    ASSERT_EQ(detail::criteo_bucket(v), bucket_by_counting(v)) << v;
  }
}

TEST(CriteoReader, KeysPerColumnWithBucketsAndHex) {
  Line l;
  l.label = "1";
  l.ints[0] = "5";      // I1
  l.ints[2] = "-3";     // I3 (I2 empty)
  l.ints[3] = "0";      // I4
  l.ints[4] = "1000";   // I5
  l.ints[12] = "2";     // I13
  l.cats[0] = "68fd1e64";          // C1
  l.cats[2] = "0";                 // C3
  l.cats[3] = "ABCDEF01";          // C4: upper case
  l.cats[25] = "ffffffffffffffff"; // C26: 16 digits
  Line empty;  // label 0, no features at all
  Dataset d = parse(l.str() + "\n" + empty.str() + "\r\n");
  const DatasetView& v = d.view();
  EXPECT_EQ(vec(v.labels), (std::vector<float>{1, 0}));
  EXPECT_EQ(vec(v.row_ptr), (std::vector<uint64_t>{0, 9, 9}));
  const std::vector<uint64_t> want = {
      hash_feature(1, 2 /* ln(5)^2 = 2.59 */), hash_feature(3, static_cast<uint64_t>(int64_t{-3})),
      hash_feature(4, 0),          hash_feature(5, 47),
      hash_feature(13, 2),         hash_feature(14, 0x68fd1e64),
      hash_feature(16, 0),         hash_feature(17, 0xabcdef01),
      hash_feature(39, 0xffffffffffffffffULL)};
  EXPECT_EQ(vec(v.keys), want);
  EXPECT_EQ(vec(v.values), std::vector<float>(9, 1.0f));
}

TEST(CriteoReader, SameTokenInTwoColumnsGivesTwoKeys) {
  Line l;
  l.ints[0] = "17";
  l.ints[1] = "17";
  l.cats[0] = "11";  // hex 0x11 = 17 as well
  l.cats[1] = "11";
  Dataset d = parse(l.str() + "\n");
  const auto k = vec(d.view().keys);
  ASSERT_EQ(k.size(), 4u);
  EXPECT_NE(k[0], k[1]);
  EXPECT_NE(k[2], k[3]);
  EXPECT_NE(k[0], k[2]);
  EXPECT_EQ(k[0], hash_feature(1, 8));  // ln(17)^2 = 8.03
  EXPECT_EQ(k[1], hash_feature(2, 8));
  EXPECT_EQ(k[2], hash_feature(14, 0x11));
  EXPECT_EQ(k[3], hash_feature(15, 0x11));
}

TEST(CriteoReader, AutoDetectsByFieldCount) {
  Line l;
  l.ints[0] = "1";
  ReadStats stats;
  Dataset d = parse("\n" + l.str() + "\n", &stats, false, DataFormat::kAuto);
  EXPECT_EQ(stats.format, DataFormat::kCriteo);
  EXPECT_EQ(d.rows(), 1u);
  parse("1\t3:1\t4:1\n", &stats, false, DataFormat::kAuto);  // tabs, but 3 fields: libsvm
  EXPECT_EQ(stats.format, DataFormat::kLibsvm);
  // A UTF-8 byte order mark opening the file hides neither the format nor the label.
  l.label = "1";
  const Dataset marked = parse("\xef\xbb\xbf" + l.str() + "\n", &stats, false, DataFormat::kAuto);
  EXPECT_EQ(stats.format, DataFormat::kCriteo);
  EXPECT_EQ(vec(marked.view().labels), (std::vector<float>{1}));
  EXPECT_EQ(vec(marked.view().keys), vec(parse(l.str() + "\n").view().keys));
}

struct BadCase {
  const char* name;
  std::string line;
  std::string where;
  std::string message;
};

Line with_int(int j, const std::string& v) {
  Line l;
  l.ints[static_cast<size_t>(j - 1)] = v;
  return l;
}
Line with_cat(int j, const std::string& v) {
  Line l;
  l.cats[static_cast<size_t>(j - 1)] = v;
  return l;
}
Line with_label(const std::string& v) {
  Line l;
  l.label = v;
  return l;
}
// Column of field f (0 = label) when every field before it is as in l.
size_t column_of_field(const Line& l, int f) {
  const std::string s = l.str();
  size_t pos = 0;
  for (int i = 0; i < f; ++i) pos = s.find('\t', pos) + 1;
  return pos + 1;
}

class CriteoBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(CriteoBadInput, NamesFileLineColumnAndProblem) {
  const BadCase& c = GetParam();
  Line good;
  const std::string msg = data_error_of([&] { parse(good.str() + "\n" + c.line + "\n"); });
  EXPECT_EQ(msg.rfind(c.where + " ", 0), 0u) << msg;
  EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
}

const std::string kTooFew = Line{}.str().substr(0, Line{}.str().size() - 1);  // drops the last tab
INSTANTIATE_TEST_SUITE_P(
    Malformed, CriteoBadInput,
    ::testing::Values(
        BadCase{"TooFewFields", kTooFew, "t.tsv:2:1:", "expected 40 tab-separated fields, found 39"},
        BadCase{"TooManyFields", Line{}.str() + "\t", "t.tsv:2:1:", "expected 40 tab-separated fields, found 41"},
        BadCase{"OneField", "1", "t.tsv:2:1:", "expected 40 tab-separated fields, found 1"},
        BadCase{"BadLabel", with_label("2").str(), "t.tsv:2:1:", "label must be 0 or 1, got '2'"},
        BadCase{"EmptyLabel", with_label("").str(), "t.tsv:2:1:", "label must be 0 or 1, got ''"},
        BadCase{"BadInteger", with_int(2, "1.5").str(),
                "t.tsv:2:" + std::to_string(column_of_field(with_int(2, "1.5"), 2)) + ":", "bad integer '1.5' in I2"},
        BadCase{"IntegerOverflow", with_int(13, "99999999999999999999").str(),
                "t.tsv:2:" + std::to_string(column_of_field(Line{}, 13)) + ":", "does not fit in 64 bits"},
        BadCase{"BadHex", with_cat(3, "zz12").str(),
                "t.tsv:2:" + std::to_string(column_of_field(Line{}, 16)) + ":", "bad hex value 'zz12' in C3"},
        BadCase{"HexWithPrefix", with_cat(1, "0x12").str(),
                "t.tsv:2:" + std::to_string(column_of_field(Line{}, 14)) + ":", "bad hex value '0x12' in C1"},
        BadCase{"NegativeHex", with_cat(1, "-12").str(),
                "t.tsv:2:" + std::to_string(column_of_field(Line{}, 14)) + ":", "bad hex value '-12' in C1"},
        BadCase{"HexTooLong", with_cat(26, "12345678901234567").str(),
                "t.tsv:2:" + std::to_string(column_of_field(Line{}, 39)) + ":", "longer than 16 digits"},
        BadCase{"NonAsciiInHex", with_cat(2, "ab\xc3\xa9").str(),
                "t.tsv:2:" + std::to_string(column_of_field(Line{}, 15) + 2) + ":", "non-ASCII byte 0xc3"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(CriteoReader, TruncatedLastLine) {
  Line good;
  const std::string text = good.str() + "\n" + good.str().substr(0, 10);
  const std::string msg = data_error_of([&] { parse(text); });
  EXPECT_EQ(msg, "t.tsv:2:1: expected 40 tab-separated fields, found 10 (file ends mid-line: truncated?)");
}

TEST(CriteoReader, SkipBadLinesKeepsTheRest) {
  Line a = with_int(1, "4");
  Line b = with_cat(1, "q");  // bad
  Line c = with_cat(2, "beef");
  ReadStats stats;
  Dataset d = parse(a.str() + "\n" + b.str() + "\n" + c.str() + "\n", &stats, true);
  EXPECT_EQ(stats.skipped_lines, 1u);
  EXPECT_EQ(stats.examples, 2u);
  ASSERT_EQ(stats.first_errors.size(), 1u);
  EXPECT_NE(stats.first_errors[0].find("t.tsv:2:"), std::string::npos);
  EXPECT_EQ(vec(d.view().keys), (std::vector<uint64_t>{hash_feature(1, 1), hash_feature(15, 0xbeef)}));
}

}  // namespace
}  // namespace parafab::worker
