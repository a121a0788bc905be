// libsvm line parsing. The hot path is one pass of std::from_chars per token
// (index, then value) with no allocation; anything unusual falls to a cold
// diagnose_* function that re-reads the token and says precisely what is
// wrong. Every byte outside a comment ends up inside some token that
// from_chars must consume whole, so a stray byte (non-ASCII, '\r', NUL) can
// never slip through unreported.
#include "worker/libsvm_parser.h"

#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace parafab::worker::detail {
namespace {

constexpr bool is_blank(char c) { return c == ' ' || c == '\t'; }

const char* token_end(const char* p, const char* end) {
  while (p != end && !is_blank(*p)) ++p;
  return p;
}

}  // namespace

std::string quote_token(std::string_view tok) {
  std::string s = "'";
  size_t n = 0;
  for (unsigned char c : tok) {
    if (++n > 40) {
      s += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      s += static_cast<char>(c);
    } else {
      s += fmt::format("\\x{:02x}", c);
    }
  }
  return s + "'";
}

namespace {


uint64_t column_of(std::string_view line, const char* p) {
  return static_cast<uint64_t>(p - line.data()) + 1;
}

// Reports the first byte >= 0x80 of [b, e), if any.
bool find_non_ascii(std::string_view line, const char* b, const char* e, LineIssue* issue) {
  for (const char* p = b; p != e; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c >= 0x80) {
      fail_line(issue, column_of(line, p), fmt::format("non-ASCII byte 0x{:02x}", c));
      return true;
    }
  }
  return false;
}

// Parses a float that must fill [b, e) exactly. An optional leading '+' is
// accepted (from_chars rejects it); values that underflow float become the
// nearest float (0 or a denormal). Non-finite results are returned as they are
// for the caller to reject.
enum class FloatParse { kOk, kBad, kOutOfRange };
FloatParse parse_float_exact(const char* b, const char* e, float* out) {
  if (b != e && *b == '+') {
    ++b;
    if (b != e && (*b == '-' || *b == '+')) return FloatParse::kBad;
  }
  if (b == e) return FloatParse::kBad;
  auto [p, ec] = std::from_chars(b, e, *out);
  if (ec == std::errc::result_out_of_range) {
    double d = 0;
    auto [pd, ecd] = std::from_chars(b, e, d);
    if (ecd != std::errc{} || pd != e || !(std::fabs(d) < FLT_MIN)) return FloatParse::kOutOfRange;
    *out = static_cast<float>(d);
    return FloatParse::kOk;
  }
  if (ec != std::errc{} || p != e) return FloatParse::kBad;
  return FloatParse::kOk;
}

// Cold path: the label token [b, e) was not accepted.
LineStatus diagnose_label(std::string_view line, const char* b, const char* e, LineIssue* issue) {
  const uint64_t col = column_of(line, b);
  if (find_non_ascii(line, b, e, issue)) return LineStatus::kBad;
  const std::string_view tok(b, static_cast<size_t>(e - b));
  if (tok.starts_with("qid:")) {
    return fail_line(issue, col, fmt::format("missing label: line starts with {} (qid: ranking tokens are not supported)", quote_token(tok)));
  }
  if (tok.find(':') != std::string_view::npos) {
    return fail_line(issue, col, fmt::format("missing label: line starts with feature {}", quote_token(tok)));
  }
  return fail_line(issue, col,
              fmt::format("label must be one of +1, 1, -1, 0, 1.0, -1.0, 0.0; got {}", quote_token(tok)));
}

// Cold path: the feature token starting at b did not parse, or its value was
// not finite. Always reports something.
LineStatus diagnose_feature(std::string_view line, const char* b, LineIssue* issue) {
  const char* end = line.data() + line.size();
  const char* e = token_end(b, end);
  const uint64_t col = column_of(line, b);
  if (find_non_ascii(line, b, e, issue)) return LineStatus::kBad;
  const std::string_view tok(b, static_cast<size_t>(e - b));
  if (tok.starts_with("qid:")) {
    return fail_line(issue, col, fmt::format("qid: tokens (ranking queries) are not supported: {}", quote_token(tok)));
  }
  const size_t colon = tok.find(':');
  if (colon == std::string_view::npos) {
    return fail_line(issue, col, fmt::format("feature {} has no ':' (expected index:value)", quote_token(tok)));
  }
  if (colon == 0) return fail_line(issue, col, fmt::format("empty feature index in {}", quote_token(tok)));
  uint64_t idx = 0;
  auto [ip, iec] = std::from_chars(b, b + colon, idx);
  if (iec == std::errc::result_out_of_range && ip == b + colon) {
    return fail_line(issue, col, fmt::format("feature index in {} does not fit in 64 bits", quote_token(tok)));
  }
  if (iec != std::errc{} || ip != b + colon) {
    if (tok[0] == '-') {
      return fail_line(issue, col, fmt::format("feature index must be a non-negative integer, got {}", quote_token(tok)));
    }
    return fail_line(issue, col, fmt::format("bad feature index in {}", quote_token(tok)));
  }
  const char* vb = b + colon + 1;
  if (vb == e) return fail_line(issue, col, fmt::format("empty feature value in {}", quote_token(tok)));
  float v = 0;
  switch (parse_float_exact(vb, e, &v)) {
    case FloatParse::kOutOfRange:
      return fail_line(issue, col, fmt::format("feature value out of float range in {}", quote_token(tok)));
    case FloatParse::kBad: {
      // Distinguish "3:1.0x" (a number, then junk) from "3:abc".
      float lead = 0;
      const char* nb = (*vb == '+') ? vb + 1 : vb;
      auto [np, nec] = std::from_chars(nb, e, lead);
      if (nec == std::errc{} && np != nb && np != e) {
        return fail_line(issue, col, fmt::format("trailing characters after feature value in {}", quote_token(tok)));
      }
      return fail_line(issue, col, fmt::format("bad feature value in {}", quote_token(tok)));
    }
    case FloatParse::kOk:
      break;
  }
  if (!std::isfinite(v)) {
    return fail_line(issue, col, fmt::format("feature value is {} in {} (values must be finite)",
                                        std::isnan(v) ? "NaN" : "infinite", quote_token(tok)));
  }
  return fail_line(issue, col, fmt::format("bad feature {}", quote_token(tok)));
}

// The rest of the line from '#' on: any bytes, as long as they are UTF-8.
LineStatus check_comment(std::string_view line, const char* p, LineIssue* issue) {
  const char* end = line.data() + line.size();
  const char* q = p;
  while (q != end && static_cast<unsigned char>(*q) < 0x80) ++q;
  if (q == end) return LineStatus::kNoData;
  size_t bad = 0;
  if (valid_utf8(std::string_view(p, static_cast<size_t>(end - p)), &bad)) return LineStatus::kNoData;
  return fail_line(issue, column_of(line, p + bad),
              fmt::format("invalid UTF-8 in comment (byte 0x{:02x})", static_cast<unsigned char>(p[bad])));
}

// Clinger's fast path for the common short decimal "[-]ddd[.ddd]": when the
// digits form an integer m <= 2^24 and there are k <= 9 fraction digits, m
// and 10^k are exact floats, so one IEEE division gives the correctly rounded
// result that from_chars would. Anything else (exponents, long mantissas,
// inf/nan, junk) returns false for from_chars to handle. Accepts only a
// number followed by the end of the line or a blank.
constexpr float kPow10f[10] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f};
inline bool fast_decimal(const char* p, const char* end, float* out, const char** next) {
  const bool neg = p != end && *p == '-';
  if (neg) ++p;
  uint32_t m = 0;
  int digits = 0;
  while (p != end && static_cast<unsigned>(*p - '0') < 10u) {
    if (++digits > 9) return false;
    m = m * 10 + static_cast<uint32_t>(*p - '0');
    ++p;
  }
  if (digits == 0) return false;
  int frac = 0;
  if (p != end && *p == '.') {
    ++p;
    while (p != end && static_cast<unsigned>(*p - '0') < 10u) {
      if (++digits > 9) return false;
      m = m * 10 + static_cast<uint32_t>(*p - '0');
      ++frac;
      ++p;
    }
    if (frac == 0) return false;
  }
  if ((p != end && !is_blank(*p)) || m > (uint32_t{1} << 24)) return false;
  const float v = static_cast<float>(m) / kPow10f[frac];
  *out = neg ? -v : v;
  *next = p;
  return true;
}

// Fast label match; the rare spellings go through from_chars.
bool parse_label(const char* b, const char* e, float* label) {
  const size_t n = static_cast<size_t>(e - b);
  if (n == 1) {
    if (*b == '1') return *label = 1.0f, true;
    if (*b == '0') return *label = 0.0f, true;
  } else if (n == 2 && b[1] == '1') {
    if (*b == '-') return *label = 0.0f, true;
    if (*b == '+') return *label = 1.0f, true;
  }
  if (std::memchr(b, ':', n) != nullptr) return false;
  float v = 0;
  if (parse_float_exact(b, e, &v) != FloatParse::kOk) return false;
  if (v == 1.0f) return *label = 1.0f, true;
  if (v == 0.0f || v == -1.0f) return *label = 0.0f, true;
  return false;
}

}  // namespace

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = u[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;       // no overlong forms
      if (c == 0xed) hi = 0x9f;       // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;       // no overlong forms
      if (c == 0xf4) hi = 0x8f;       // nothing above U+10FFFF
    } else {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    if (i + len > n || u[i + 1] < lo || u[i + 1] > hi) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    for (size_t k = 2; k < len; ++k) {
      if (u[i + k] < 0x80 || u[i + k] > 0xbf) {
        if (bad_offset) *bad_offset = i;
        return false;
      }
    }
    i += len;
  }
  return true;
}

bool libsvm_line_is_empty(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && is_blank(line[i])) ++i;
  return i == line.size() || line[i] == '#';
}

LineStatus parse_libsvm_line(std::string_view line, DatasetArrays& out, LineIssue* issue, int classes) {
  const char* p = line.data();
  const char* end = p + line.size();
  while (p != end && is_blank(*p)) ++p;
  if (p == end) return LineStatus::kNoData;
  if (*p == '#') return check_comment(line, p, issue);

  const char* lb = p;
  const char* le = token_end(p, end);
  float label = 0;
  if (classes > 2) {
    // Class ids 0 .. classes-1, written as integers.
    uint64_t c = 0;
    const auto [ptr, ec] = std::from_chars(lb, le, c);
    if (ec != std::errc() || ptr != le || c >= static_cast<uint64_t>(classes)) {
      return fail_line(issue, static_cast<uint64_t>(lb - line.data()) + 1,
                       fmt::format("label must be a class id 0 .. {} (--classes {}); got {}", classes - 1, classes,
                                   quote_token(std::string_view(lb, static_cast<size_t>(le - lb)))));
    }
    label = static_cast<float>(c);
  } else if (!parse_label(lb, le, &label)) {
    return diagnose_label(line, lb, le, issue);
  }
  p = le;

  const size_t nnz0 = out.keys.size();
  for (;;) {
    while (p != end && is_blank(*p)) ++p;
    if (p == end) break;
    if (*p == '#') {
      if (check_comment(line, p, issue) == LineStatus::kBad) {
        out.keys.resize(nnz0);
        out.values.resize(nnz0);
        return LineStatus::kBad;
      }
      break;
    }
    const char* tok = p;
    uint64_t idx = 0;
    auto [q, iec] = std::from_chars(p, end, idx);
    float v = 0;
    bool ok = iec == std::errc{} && q != end && *q == ':';
    if (ok) {
      ++q;  // past ':'
      const char* vb = q;
      if (vb != end && *vb == '+') {
        ++vb;
        if (vb != end && (*vb == '-' || *vb == '+')) ok = false;
      }
      const char* r = nullptr;
      if (!ok || !fast_decimal(vb, end, &v, &r)) {
        auto [rr, vec] = std::from_chars(vb, end, v);
        r = rr;
        if (vec == std::errc::result_out_of_range) {  // rare: float underflow or overflow
          r = token_end(q, end);
          ok = ok && parse_float_exact(q, r, &v) == FloatParse::kOk;
        } else {
          ok = ok && vec == std::errc{};
        }
      }
      ok = ok && (r == end || is_blank(*r)) && std::isfinite(v);
      p = r;
    }
    if (!ok) {
      out.keys.resize(nnz0);
      out.values.resize(nnz0);
      return diagnose_feature(line, tok, issue);
    }
    out.keys.push_back(idx);
    out.values.push_back(v);
  }
  out.labels.push_back(label);
  out.row_ptr.push_back(out.keys.size());
  return LineStatus::kRow;
}

LineStatus fail_line(LineIssue* issue, uint64_t column, std::string message) {
  if (issue) {
    issue->column = column;
    issue->message = std::move(message);
  }
  return LineStatus::kBad;
}

}  // namespace parafab::worker::detail
