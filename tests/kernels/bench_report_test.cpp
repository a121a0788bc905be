// benchmarks/: the JSON-lines and table renderings of bench_report, and one
// small run of the kernel benchmark (which verifies the gradient itself).
// Nothing here asserts on a time.
#include "benchmarks/bench_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/kernel_bench.h"

namespace parafab::benchmarks {
namespace {

TEST(BenchReport, JsonLineHasTheDesignFormat) {
  BenchRecord r("kernels", "linear_gradient_logistic", 1122.0, "MB/s");
  r.with_ceiling(2244.0, "memcpy")
      .with("threads", 2)
      .with("provider", "tcp;ofi_rxm")
      .with("x", 0.25);
  EXPECT_EQ(
      to_json(r),
      "{\"bench\": \"kernels\", \"case\": \"linear_gradient_logistic\", \"value\": 1122.0, "
      "\"unit\": \"MB/s\", \"ceiling\": 2244.0, \"ceiling_source\": \"memcpy\", \"ratio\": 0.5, "
      "\"threads\": 2, \"provider\": \"tcp;ofi_rxm\", \"x\": 0.25}");
  BenchRecord plain("fabric", "rtt", 12.5, "us");
  EXPECT_EQ(to_json(plain),
            "{\"bench\": \"fabric\", \"case\": \"rtt\", \"value\": 12.5, \"unit\": \"us\"}");
}

TEST(BenchReport, NumbersRoundTripAndNonFiniteIsNull) {
  BenchRecord r("b", "c", 2150.3, "MB/s");
  r.with("big", int64_t{1} << 40)
      .with("tiny", 1e-7)
      .with("nan", std::numeric_limits<double>::quiet_NaN());
  r.with_ceiling(0.0, "none");  // no ratio for a zero ceiling
  const std::string j = to_json(r);
  EXPECT_NE(j.find("\"value\": 2150.3,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"big\": 1099511627776"), std::string::npos) << j;
  EXPECT_NE(j.find("\"tiny\": 1e-07"), std::string::npos) << j;
  EXPECT_NE(j.find("\"nan\": null"), std::string::npos) << j;
  EXPECT_EQ(j.find("\"ratio\""), std::string::npos) << j;
}

TEST(BenchReport, StringsAreEscaped) {
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01 é"), "\"a\\\"b\\\\c\\n\\t\\u0001 é\"");
  BenchRecord r("k", "q\"uote", 1.0, "u");
  EXPECT_NE(to_json(r).find("\"case\": \"q\\\"uote\""), std::string::npos);
}

TEST(BenchReport, WritesOneObjectPerLineAndAnAlignedTable) {
  BenchReport report;
  report.add(BenchRecord("kernels", "a", 1.0, "MB/s").with_ceiling(4.0, "memcpy"));
  report.add(BenchRecord("kernels", "a_much_longer_case", 12345.678, "MB/s").with("threads", 2));
  std::ostringstream json;
  report.write_json_lines(json);
  std::istringstream lines(json.str());
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
  }
  EXPECT_EQ(n, 2);

  std::ostringstream table;
  report.print_table(table);
  std::istringstream rows(table.str());
  std::vector<std::string> t;
  while (std::getline(rows, line)) t.push_back(line);
  ASSERT_EQ(t.size(), 4u);  // header, rule, two records
  // The unit column starts at the same offset on both records.
  EXPECT_EQ(t[2].find("MB/s"), t[3].find("MB/s")) << table.str();
  EXPECT_NE(t[2].find("0.250"), std::string::npos) << table.str();
  EXPECT_NE(t[3].find("threads=2"), std::string::npos) << table.str();
}

TEST(BenchReport, UnwritablePathThrowsNamingIt) {
  BenchReport report;
  EXPECT_THROW(report.write_json_lines(std::string("/nonexistent-dir/x.json")), std::runtime_error);
}

TEST(KernelBench, SmallRunVerifiesAndWritesJson) {
  KernelBenchOptions o;
  o.threads = 2;
  o.rows = 3000;
  o.nnz_per_row = 12;
  o.slots = 5000;
  o.local_slots = 1000;
  o.repeats = 1;
  o.ceiling_buffer_bytes = size_t{16} << 20;
  o.json_path = ::testing::TempDir() + "kernel_bench_test.json";
  std::ostringstream out;
  ASSERT_EQ(run_kernel_bench(o, out), 0) << out.str();
  EXPECT_NE(out.str().find("verified linear_gradient_logistic"), std::string::npos) << out.str();
  std::ifstream f(o.json_path);
  std::string line;
  std::vector<std::string> cases;
  while (std::getline(f, line)) {
    EXPECT_NE(line.find("\"bench\": \"kernels\""), std::string::npos) << line;
    EXPECT_NE(line.find("\"ceiling_source\": "), std::string::npos) << line;
    EXPECT_NE(line.find("\"ratio\": "), std::string::npos) << line;
    const auto at = line.find("\"case\": \"") + 9;
    cases.push_back(line.substr(at, line.find('"', at) - at));
  }
  std::remove(o.json_path.c_str());
  const std::vector<std::string> want{"linear_gradient_logistic",
                                      "linear_gradient_hinge",
                                      "linear_gradient_logistic_binary",
                                      "linear_gradient_logistic_local",
                                      "hogwild_sgd",
                                      "compact_keys",
                                      "compact_keys_w8",
                                      "metrics_log_loss",
                                      "metrics_roc_auc"};
  EXPECT_EQ(cases, want);
}

TEST(KernelBench, RejectsBadOptions) {
  KernelBenchOptions o;
  o.rows = 0;
  std::ostringstream out;
  EXPECT_EQ(run_kernel_bench(o, out), 2);
  EXPECT_NE(out.str().find("bad options"), std::string::npos);
}

}  // namespace
}  // namespace parafab::benchmarks
