// Merging rounds of a benchmark (benchmarks/bench_rounds.h): medians worked
// out by hand for small sets, both ratio directions, the spread of the
// rounds' ratios, and the merging of fields by kind.
#include "benchmarks/bench_rounds.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/fabric_bench.h"

namespace parafab::benchmarks {
namespace {

TEST(BenchRounds, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({5.0}), 5.0);
  EXPECT_EQ(median_of({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 2.5);
}

// Throughput (higher is better): value and ceiling are the medians of the
// rounds, the ratio theirs, and the spread that of the rounds' own ratios.
TEST(BenchRounds, ThroughputIsTheMedianBesideTheMedianCeiling) {
  std::vector<BenchRecord> rounds;
  const double values[] = {2000.0, 2400.0, 1800.0};
  const double ceilings[] = {4000.0, 2000.0, 3000.0};
  for (int r = 0; r < 3; ++r) {
    rounds.push_back(BenchRecord("kv", "dense_push", values[r], "MB/s")
                         .with_ceiling(ceilings[r], "fabric tagged_pingpong")
                         .with("bytes", int64_t{1048576})
                         .with("iterations", int64_t{100 + 10 * r})
                         .with("client_mb_per_s", 5000.0 + r)
                         .with("provider", "tcp;ofi_rxm")
                         .with("verified", "yes"));
  }
  const BenchRecord m = merge_round_records(rounds);
  EXPECT_EQ(m.bench, "kv");
  EXPECT_EQ(m.case_name, "dense_push");
  EXPECT_EQ(m.unit, "MB/s");
  EXPECT_EQ(m.value, 2000.0);
  ASSERT_TRUE(m.ceiling.has_value());
  EXPECT_EQ(*m.ceiling, 3000.0);
  EXPECT_EQ(m.ceiling_source, "fabric tagged_pingpong");
  ASSERT_TRUE(m.ratio.has_value());
  EXPECT_DOUBLE_EQ(*m.ratio, 2000.0 / 3000.0);
  // The rounds' ratios: 0.5, 1.2, 0.6.
  ASSERT_NE(m.field("ratio_min"), nullptr);
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("ratio_min")), 0.5);
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("ratio_max")), 1.2);
  EXPECT_EQ(std::get<int64_t>(*m.field("rounds")), 3);
  EXPECT_EQ(std::get<int64_t>(*m.field("bytes")), 1048576);
  EXPECT_EQ(std::get<int64_t>(*m.field("iterations")), 110);
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("client_mb_per_s")), 5001.0);
  EXPECT_EQ(std::get<std::string>(*m.field("provider")), "tcp;ofi_rxm");
  EXPECT_EQ(std::get<std::string>(*m.field("verified")), "yes");
  // Fields keep their order, the round fields last.
  ASSERT_GE(m.fields.size(), 3u);
  EXPECT_EQ(m.fields.front().first, "bytes");
  EXPECT_EQ(m.fields.back().first, "ratio_max");
}

// Latency (better=lower, as with_latency_ceiling writes it): ceiling / value.
TEST(BenchRounds, LatencyRatioIsCeilingOverValue) {
  std::vector<BenchRecord> rounds;
  const double us[] = {30.0, 20.0};
  const double ceilings[] = {15.0, 25.0};
  for (int r = 0; r < 2; ++r) {
    BenchRecord rec("kv", "push_latency", us[r], "us");
    with_latency_ceiling(rec, ceilings[r], "fabric tagged_pingpong round trip");
    rounds.push_back(rec);
  }
  const BenchRecord m = merge_round_records(rounds);
  EXPECT_EQ(m.value, 25.0);
  EXPECT_EQ(*m.ceiling, 20.0);
  EXPECT_DOUBLE_EQ(*m.ratio, 20.0 / 25.0);
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("ratio_min")), 0.5);   // 15 / 30
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("ratio_max")), 1.25);  // 25 / 20
  EXPECT_EQ(std::get<std::string>(*m.field("better")), "lower");
}

// A round without a ceiling (fi_pingpong missing then) leaves the others'
// median; texts that differ are kept, joined; the worst verification wins.
TEST(BenchRounds, MissingCeilingsDifferingTextsAndTheWorstVerification) {
  std::vector<BenchRecord> rounds;
  rounds.push_back(BenchRecord("fabric", "x", 10.0, "MB/s").with_ceiling(20.0, "a").with("verified", "yes")
                       .with("note", "p"));
  rounds.push_back(BenchRecord("fabric", "x", 12.0, "MB/s").with("verified", "failed").with("note", "q"));
  rounds.push_back(BenchRecord("fabric", "x", 14.0, "MB/s").with_ceiling(40.0, "b").with("verified", "no")
                       .with("note", "p").with("late", int64_t{7}));
  const BenchRecord m = merge_round_records(rounds);
  EXPECT_EQ(m.value, 12.0);
  EXPECT_EQ(*m.ceiling, 30.0);
  EXPECT_EQ(m.ceiling_source, "a|b");
  EXPECT_DOUBLE_EQ(*m.ratio, 12.0 / 30.0);
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("ratio_min")), 0.35);
  EXPECT_DOUBLE_EQ(std::get<double>(*m.field("ratio_max")), 0.5);
  EXPECT_EQ(std::get<std::string>(*m.field("verified")), "failed");
  EXPECT_EQ(std::get<std::string>(*m.field("note")), "p|q");
  EXPECT_EQ(std::get<int64_t>(*m.field("late")), 7);  // only the round that had it

  std::vector<BenchRecord> none;
  none.push_back(BenchRecord("fabric", "y", 1.0, "us"));
  none.push_back(BenchRecord("fabric", "y", 3.0, "us"));
  const BenchRecord n = merge_round_records(none);
  EXPECT_EQ(n.value, 2.0);
  EXPECT_FALSE(n.ceiling.has_value());
  EXPECT_FALSE(n.ratio.has_value());
  EXPECT_EQ(n.field("ratio_min"), nullptr);
}

TEST(BenchRounds, ReportsMergeRecordByRecordAndDifferentCasesAreRefused) {
  std::vector<BenchReport> reports(3);
  for (int r = 0; r < 3; ++r) {
    reports[r].add(BenchRecord("kv", "a", 1.0 + r, "MB/s"));
    reports[r].add(BenchRecord("kv", "b", 10.0 * (3 - r), "keys/s"));
  }
  const BenchReport m = merge_rounds(reports);
  ASSERT_EQ(m.records().size(), 2u);
  EXPECT_EQ(m.records()[0].case_name, "a");
  EXPECT_EQ(m.records()[0].value, 2.0);
  EXPECT_EQ(m.records()[1].value, 20.0);

  // One report comes back as it was (no round fields).
  const BenchReport one = merge_rounds({reports[0]});
  ASSERT_EQ(one.records().size(), 2u);
  EXPECT_EQ(one.records()[0].field("rounds"), nullptr);
  EXPECT_TRUE(merge_rounds({}).records().empty());

  std::vector<BenchReport> uneven = reports;
  uneven[1].add(BenchRecord("kv", "c", 1.0, "MB/s"));
  try {
    (void)merge_rounds(uneven);
    ADD_FAILURE() << "uneven rounds merged";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("round 2 has 3 records, round 1 has 2"), std::string::npos) << e.what();
  }
  std::vector<BenchReport> swapped(2);
  swapped[0].add(BenchRecord("kv", "a", 1.0, "MB/s"));
  swapped[1].add(BenchRecord("kv", "b", 1.0, "MB/s"));
  EXPECT_THROW((void)merge_rounds(swapped), std::invalid_argument);
  EXPECT_THROW((void)merge_round_records({}), std::invalid_argument);
}

}  // namespace
}  // namespace parafab::benchmarks
