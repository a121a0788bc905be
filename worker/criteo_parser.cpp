// Criteo TSV line parsing: count the tabs first (a wrong field count is the
// usual damage, and it decides the message before any field is looked at),
// then walk the fields once: std::from_chars for the integers, a table for
// the hex digits, each field ending at the '\t' the count promised.
#include "worker/criteo_parser.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "worker/feature_hashing.h"

namespace parafab::worker::detail {
namespace {


// Cold path shared by every field: a byte >= 0x80 is reported as such, before
// whatever else is wrong with the field.
LineStatus fail_field(std::string_view line, std::string_view field, LineIssue* issue,
                      std::string message) {
  for (size_t i = 0; i < field.size(); ++i) {
    const auto c = static_cast<unsigned char>(field[i]);
    if (c >= 0x80) {
      return fail_line(issue, static_cast<uint64_t>(field.data() + i - line.data()) + 1,
                  fmt::format("non-ASCII byte 0x{:02x}", c));
    }
  }
  return fail_line(issue, static_cast<uint64_t>(field.data() - line.data()) + 1, std::move(message));
}

// The number of '\t' bytes, eight at a time: a byte of x is zero exactly
// where the top bit of t stays clear (the exact "has zero byte" test, no
// false positives from borrows).
size_t count_tabs(std::string_view s) {
  constexpr uint64_t kOnes7f = 0x7f7f7f7f7f7f7f7fULL;
  constexpr uint64_t kTabs = 0x0909090909090909ULL;
  size_t n = 0, i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    const uint64_t x = w ^ kTabs;
    const uint64_t t = ((x & kOnes7f) + kOnes7f) | x;
    n += static_cast<size_t>(std::popcount(~t & ~kOnes7f));
  }
  for (; i < s.size(); ++i) n += s[i] == '\t';
  return n;
}

constexpr std::array<int8_t, 256> kHexDigit = [] {
  std::array<int8_t, 256> t{};
  for (auto& d : t) d = -1;
  for (int c = '0'; c <= '9'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c) t[static_cast<size_t>(c)] = static_cast<int8_t>(c - 'A' + 10);
  return t;
}();

uint64_t log_square_bucket(int64_t v) {
  const double l = std::log(static_cast<double>(v));
  return static_cast<uint64_t>(std::floor(l * l));
}

// Most Criteo integers are small counts: their buckets come from a 4 KiB
// table filled by the same formula (ln(4095)^2 < 70 fits a byte).
constexpr int64_t kBucketTableSize = 4096;
const std::array<uint8_t, kBucketTableSize>& bucket_table() {
  static const std::array<uint8_t, kBucketTableSize> table = [] {
    std::array<uint8_t, kBucketTableSize> t{};
    for (int64_t v = 0; v < kBucketTableSize; ++v) {
      t[static_cast<size_t>(v)] = static_cast<uint8_t>(v <= 2 ? v : static_cast<int64_t>(log_square_bucket(v)));
    }
    return t;
  }();
  return table;
}

const char* field_end(const char* p, const char* end) {
  const void* t = std::memchr(p, '\t', static_cast<size_t>(end - p));
  return t ? static_cast<const char*>(t) : end;
}

}  // namespace

uint64_t criteo_bucket(int64_t v) {
  if (v <= 2) return static_cast<uint64_t>(v);
  if (v < kBucketTableSize) return bucket_table()[static_cast<size_t>(v)];
  return log_square_bucket(v);
}

LineStatus parse_criteo_line(std::string_view line, DatasetArrays& out, LineIssue* issue) {
  if (line.empty()) return LineStatus::kNoData;
  const char* p = line.data();
  const char* const end = p + line.size();

  const size_t tabs = count_tabs(line);
  if (tabs + 1 != kCriteoFields) {
    return fail_line(issue, 1, fmt::format("expected {} tab-separated fields, found {}", kCriteoFields, tabs + 1));
  }
  // From here every field but the last ends at a '\t'; `p` steps past it.
  auto whole_field = [&](const char* b) { return std::string_view(b, static_cast<size_t>(field_end(b, end) - b)); };
  auto step = [&](const char* q) { return q == end ? end : q + 1; };

  float label = 0;
  if (end - p >= 2 && (p[0] == '0' || p[0] == '1') && p[1] == '\t') {
    label = p[0] == '1' ? 1.0f : 0.0f;
    p += 2;
  } else {
    const std::string_view f = whole_field(p);
    return fail_field(line, f, issue, fmt::format("label must be 0 or 1, got {}", quote_token(f)));
  }

  const size_t nnz0 = out.keys.size();
  auto reject = [&](const char* b, auto make_message) {
    out.keys.resize(nnz0);
    out.values.resize(nnz0);
    const std::string_view f = whole_field(b);
    return fail_field(line, f, issue, make_message(f));
  };

  for (int j = 1; j <= kCriteoIntColumns; ++j) {
    if (p == end || *p == '\t') {  // empty (cannot be the end: 39 tabs)
      ++p;
      continue;
    }
    const char* b = p;
    int64_t v = 0;
    auto [q, ec] = std::from_chars(b, end, v);
    if (ec != std::errc{} || (q != end && *q != '\t')) {
      const bool range = ec == std::errc::result_out_of_range;
      return reject(b, [&](std::string_view f) {
        return range ? fmt::format("integer {} in I{} does not fit in 64 bits", quote_token(f), j)
                     : fmt::format("bad integer {} in I{}", quote_token(f), j);
      });
    }
    out.keys.push_back(hash_feature(static_cast<uint32_t>(j), criteo_bucket(v)));
    out.values.push_back(1.0f);
    p = step(q);
  }
  for (int j = 1; j <= kCriteoCatColumns; ++j) {
    if (p == end || *p == '\t') {  // empty (C26 may end the line)
      p = step(p);
      continue;
    }
    const char* b = p;
    uint64_t v = 0;
    const char* q = b;
    int8_t d;
    while (q != end && (d = kHexDigit[static_cast<unsigned char>(*q)]) >= 0) {
      v = (v << 4) | static_cast<uint64_t>(d);
      ++q;
    }
    if ((q != end && *q != '\t') || q - b > 16) {
      const bool too_long = (q == end || *q == '\t');
      return reject(b, [&](std::string_view f) {
        return too_long ? fmt::format("hex value {} in C{} is longer than 16 digits", quote_token(f), j)
                        : fmt::format("bad hex value {} in C{}", quote_token(f), j);
      });
    }
    out.keys.push_back(hash_feature(static_cast<uint32_t>(kCriteoIntColumns + j), v));
    out.values.push_back(1.0f);
    p = step(q);
  }
  out.labels.push_back(label);
  out.row_ptr.push_back(out.keys.size());
  return LineStatus::kRow;
}

}  // namespace parafab::worker::detail
