// A tiny real run of `parafab bench kv` over tcp;ofi_rxm on 127.0.0.1: every
// case produces a positive figure and the verification passes. No timing
// assertions.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/kv_bench.h"

namespace parafab::benchmarks {
namespace {

KvBenchOptions tiny() {
  KvBenchOptions o;
  o.providers = {"tcp;ofi_rxm"};
  o.dense_sizes = {size_t{4} << 10, size_t{64} << 10};
  o.sparse_keys = 2000;
  o.window = 2;
  o.case_seconds = 0.0;  // min_iterations each
  o.min_iterations = 3;
  o.max_iterations = 3;
  o.max_insert_pushes = 3;
  o.memory_keys = 100000;
  o.big_table_keys = 5000;  // two disjoint key sets of 2000
  o.fabric_iterations = 20;
  o.ceiling = false;  // fi_pingpong is not needed for the shape of the records
  o.timeout = std::chrono::milliseconds(20000);
  o.rounds = 1;
  return o;
}

std::string field_string(const BenchRecord& r, const std::string& key) {
  const BenchField* f = r.field(key);
  return f != nullptr && std::holds_alternative<std::string>(*f) ? std::get<std::string>(*f) : "";
}

void expect_all_cases(const BenchReport& report, const std::set<std::string>& want) {
  std::set<std::string> seen;
  for (const BenchRecord& r : report.records()) {
    seen.insert(r.case_name);
    EXPECT_EQ(r.bench, "kv");
    EXPECT_GT(r.value, 0.0) << r.case_name << " " << to_json(r);
    EXPECT_FALSE(r.unit.empty());
    EXPECT_EQ(field_string(r, "verified"), "yes") << to_json(r);
    if (r.case_name != "sparse_memory") {
      // The fabric's figure of the same run is every such record's ceiling.
      ASSERT_TRUE(r.ceiling.has_value()) << to_json(r);
      EXPECT_GT(*r.ceiling, 0.0);
      EXPECT_TRUE(r.ratio.has_value());
      EXPECT_EQ(r.ceiling_source.rfind("fabric ", 0), 0u) << to_json(r);
    }
  }
  EXPECT_EQ(seen, want);
}

TEST(KvBench, TinyRunVerifiesEveryCase) {
  const KvBenchOptions o = tiny();
  BenchReport report;
  std::ostringstream log;
  ASSERT_EQ(measure_kv_provider(o, o.providers[0], report, log), 0) << log.str();
  ASSERT_EQ(measure_kv_memory(o, report, log), 0) << log.str();
  expect_all_cases(report, {"dense_push", "dense_pull", "dense_push_window", "dense_pull_window", "dense_read", "sparse_push",
                            "sparse_push_window", "sparse_push_sorted", "sparse_push_insert", "sparse_pull",
                            "sparse_pull_sorted", "sparse_push_big_table", "push_latency", "pull_latency",
                            "sparse_memory"});
  size_t dense = 0;
  for (const BenchRecord& r : report.records()) {
    if (r.case_name.rfind("dense_", 0) == 0) ++dense;
    if (r.case_name == "sparse_memory") {
      EXPECT_EQ(r.unit, "B/key");
      EXPECT_EQ(r.ceiling, 24.0);
      EXPECT_EQ(r.ceiling_source, "goal");
      ASSERT_TRUE(r.ratio);
      EXPECT_DOUBLE_EQ(*r.ratio, 24.0 / r.value);
    }
    if (r.case_name == "dense_read") {
      // ASP and no push in flight: every shard was read one-sided.
      bool seen_fallbacks = false;
      for (const auto& [key, v] : r.fields) {
        if (key != "message_fallbacks") continue;
        seen_fallbacks = true;
        EXPECT_EQ(std::get<double>(v), 0.0);
      }
      EXPECT_TRUE(seen_fallbacks);
    }
    if (r.case_name == "push_latency") {
      EXPECT_EQ(r.unit, "us");
    }
  }
  EXPECT_EQ(dense, 2u * 5u);  // two sizes, five dense cases (tcp;ofi_rxm has FI_RMA)
}

// Two rounds, merged: every record says so and carries the spread of its
// rounds' ratios, in the table and in the JSON lines.
TEST(KvBench, TwoServersTwoWorkersThroughTheWholeCommand) {
  KvBenchOptions o = tiny();
  o.servers = 2;
  o.workers = 2;
  o.dense_sizes = {size_t{8} << 10};  // two rows: one on each server
  o.memory_keys = 0;
  o.rounds = 2;
  o.json_path = ::testing::TempDir() + "kv_bench_test.json";
  std::ostringstream out;
  ASSERT_EQ(run_kv_bench(o, out), 0) << out.str();
  EXPECT_NE(out.str().find("sparse_push"), std::string::npos);
  EXPECT_NE(out.str().find("round 2 of 2"), std::string::npos) << out.str();
  std::ifstream json(o.json_path);
  std::string line;
  int lines = 0;
  while (std::getline(json, line)) {
    ++lines;
    EXPECT_NE(line.find("\"rounds\": 2"), std::string::npos) << line;
    EXPECT_NE(line.find("\"ratio_min\": "), std::string::npos) << line;
    EXPECT_NE(line.find("\"ratio_max\": "), std::string::npos) << line;
    EXPECT_NE(line.find("\"verified\": \"yes\""), std::string::npos) << line;
  }
  EXPECT_GE(lines, 10);
}

TEST(KvBench, BadOptionsAreRefused) {
  KvBenchOptions o = tiny();
  o.dense_sizes = {1000};
  std::ostringstream out;
  EXPECT_EQ(run_kv_bench(o, out), 2);
  EXPECT_NE(out.str().find("multiple of 4 KiB"), std::string::npos) << out.str();
  o = tiny();
  o.big_table_keys = 1999;  // fewer than one push's 2000 keys
  std::ostringstream out2;
  EXPECT_EQ(run_kv_bench(o, out2), 2);
  EXPECT_NE(out2.str().find("--big-table-keys 1999 is below --sparse-keys 2000"), std::string::npos) << out2.str();
}

}  // namespace
}  // namespace parafab::benchmarks
