// Benchmark records and their two renderings: an aligned table for people
// and JSON lines for tools (DESIGN.md, "Benchmark output").
//
//   BenchReport report;
//   report.add(BenchRecord("kernels", "linear_gradient_logistic", 2150.3, "MB/s")
//                  .with_ceiling(2244.0, "memcpy")
//                  .with("threads", 2));
//   report.print_table(std::cout);
//   report.write_json_lines("bench.json");
//   // {"bench": "kernels", "case": "linear_gradient_logistic", "value": 2150.3,
//   //  "unit": "MB/s", "ceiling": 2244.0, "ceiling_source": "memcpy",
//   //  "ratio": 0.958, "threads": 2}
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace parafab::benchmarks {

// A further parameter of a case: an integer, a real number or a string.
using BenchField = std::variant<int64_t, double, std::string>;

struct BenchRecord {
  std::string bench;      // the suite: "kernels", "fabric", "train"
  std::string case_name;  // written as "case"
  double value = 0.0;
  std::string unit;
  std::optional<double> ceiling;  // same unit as value
  std::string ceiling_source;     // what the ceiling measured, e.g. "memcpy"
  std::optional<double> ratio;    // value / ceiling
  std::vector<std::pair<std::string, BenchField>> fields;  // in insertion order

  BenchRecord() = default;
  BenchRecord(std::string bench_, std::string case_, double value_, std::string unit_)
      : bench(std::move(bench_)),
        case_name(std::move(case_)),
        value(value_),
        unit(std::move(unit_)) {}

  // Sets ceiling and source, and ratio = value / ceiling (none when ceiling <= 0).
  BenchRecord& with_ceiling(double ceiling_value, std::string source);
  BenchRecord& with(std::string key, BenchField v);
  // Integers of any width become int64_t fields (not double, not bool).
  template <typename I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) BenchRecord& with(std::string key,
                                                                                I v) {
    return with(std::move(key), BenchField(static_cast<int64_t>(v)));
  }
  BenchRecord& with(std::string key, const char* v) {
    return with(std::move(key), BenchField(std::string(v)));
  }
  // The first field named `key`, or null.
  const BenchField* field(const std::string& key) const;
};

class BenchReport {
 public:
  void add(BenchRecord record) { records_.push_back(std::move(record)); }
  const std::vector<BenchRecord>& records() const { return records_; }

  // One row per record: case, value, unit, ceiling (source), ratio, fields.
  void print_table(std::ostream& out) const;
  // One JSON object per line, keys in the order bench, case, value, unit,
  // ceiling, ceiling_source, ratio, then the fields. Non-finite numbers are null.
  void write_json_lines(std::ostream& out) const;
  // Same, to a file (truncated); throws std::runtime_error naming the path.
  void write_json_lines(const std::string& path) const;

 private:
  std::vector<BenchRecord> records_;
};

// One record as a single-line JSON object (no newline).
std::string to_json(const BenchRecord& record);
// s as a JSON string literal, quotes included.
std::string json_quote(const std::string& s);

}  // namespace parafab::benchmarks
