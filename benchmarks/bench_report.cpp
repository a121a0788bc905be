#include "benchmarks/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace parafab::benchmarks {
namespace {

// Shortest form that reads back to the same double; null for NaN and infinities,
// which JSON cannot spell.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // 2244.0, not 2244: stays a real
  return s;
}

std::string json_value(const BenchField& f) {
  if (const auto* i = std::get_if<int64_t>(&f)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&f)) return json_number(*d);
  return json_quote(std::get<std::string>(f));
}

// For the table: 4 significant digits, no exponent below 1e9.
std::string human_number(double v) {
  if (!std::isfinite(v)) return fmt::format("{}", v);
  const double a = std::fabs(v);
  if (a != 0.0 && (a >= 1e9 || a < 1e-3)) return fmt::format("{:.3e}", v);
  if (a >= 1000.0) return fmt::format("{:.1f}", v);
  return fmt::format("{:.4g}", v);
}

std::string human_value(const BenchField& f) {
  if (const auto* i = std::get_if<int64_t>(&f)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&f)) return human_number(*d);
  return std::get<std::string>(f);
}

}  // namespace

BenchRecord& BenchRecord::with_ceiling(double ceiling_value, std::string source) {
  ceiling = ceiling_value;
  ceiling_source = std::move(source);
  if (ceiling_value > 0.0) {
    ratio = value / ceiling_value;
  } else {
    ratio.reset();
  }
  return *this;
}

const BenchField* BenchRecord::field(const std::string& key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

BenchRecord& BenchRecord::with(std::string key, BenchField v) {
  fields.emplace_back(std::move(key), std::move(v));
  return *this;
}

std::string json_quote(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(ch);  // UTF-8 passes through
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string to_json(const BenchRecord& r) {
  std::string out = "{";
  auto key = [&out](const char* k) {
    if (out.size() > 1) out += ", ";
    out += json_quote(k);
    out += ": ";
  };
  key("bench");
  out += json_quote(r.bench);
  key("case");
  out += json_quote(r.case_name);
  key("value");
  out += json_number(r.value);
  key("unit");
  out += json_quote(r.unit);
  if (r.ceiling) {
    key("ceiling");
    out += json_number(*r.ceiling);
    key("ceiling_source");
    out += json_quote(r.ceiling_source);
  }
  if (r.ratio) {
    key("ratio");
    out += json_number(*r.ratio);
  }
  for (const auto& [k, v] : r.fields) {
    key(k.c_str());
    out += json_value(v);
  }
  out += "}";
  return out;
}

void BenchReport::print_table(std::ostream& out) const {
  const std::vector<std::string> head{"bench",   "case",   "value", "unit",
                                      "ceiling", "source", "ratio"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : records_) {
    std::vector<std::string> row{r.bench,
                                 r.case_name,
                                 human_number(r.value),
                                 r.unit,
                                 r.ceiling ? human_number(*r.ceiling) : "",
                                 r.ceiling ? r.ceiling_source : "",
                                 r.ratio ? fmt::format("{:.3f}", *r.ratio) : ""};
    std::string extra;
    for (const auto& [k, v] : r.fields) {
      if (!extra.empty()) extra += ' ';
      extra += k + "=" + human_value(v);
    }
    row.push_back(std::move(extra));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(head.size(), 0);
  for (size_t c = 0; c < head.size(); ++c) width[c] = head[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < head.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  // Numbers right-aligned, text left-aligned; the free-form fields last.
  const auto is_numeric = [](size_t c) { return c == 2 || c == 4 || c == 6; };
  auto line = [&](const std::vector<std::string>& cells, const std::string& tail) {
    std::string s;
    for (size_t c = 0; c < head.size(); ++c) {
      if (c > 0) s += "  ";
      s += is_numeric(c) ? fmt::format("{:>{}}", cells[c], width[c])
                         : fmt::format("{:<{}}", cells[c], width[c]);
    }
    if (!tail.empty()) s += "  " + tail;
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << '\n';
  };
  line(head, "parameters");
  size_t total = 0;
  for (size_t c = 0; c < head.size(); ++c) total += width[c] + (c > 0 ? 2 : 0);
  out << std::string(total + 12, '-') << '\n';
  for (const auto& row : rows) line(row, row.back());
  out.flush();
}

void BenchReport::write_json_lines(std::ostream& out) const {
  for (const auto& r : records_) out << to_json(r) << '\n';
  out.flush();
}

void BenchReport::write_json_lines(const std::string& path) const {
  std::ofstream f(path, std::ios::out | std::ios::trunc);
  if (!f) {
    throw std::runtime_error(
        fmt::format("bench report: cannot open '{}' for writing: {}", path, std::strerror(errno)));
  }
  write_json_lines(f);
  if (!f) throw std::runtime_error(fmt::format("bench report: writing '{}' failed", path));
}

}  // namespace parafab::benchmarks
