// fi_pingpong's table parser on real output rows, and a tiny real run of
// the fabric benchmark over tcp;ofi_rxm on 127.0.0.1 (no timing assertions).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "benchmarks/fabric_bench.h"
#include "benchmarks/pingpong_ceiling.h"

namespace parafab::benchmarks {
namespace {

TEST(PingpongSize, PowersOf1024AndTenths) {
  EXPECT_EQ(parse_pingpong_size("64"), 64u);
  EXPECT_EQ(parse_pingpong_size("4k"), 4096u);
  EXPECT_EQ(parse_pingpong_size("64k"), 65536u);
  EXPECT_EQ(parse_pingpong_size("1m"), 1048576u);
  EXPECT_EQ(parse_pingpong_size("4m"), 4194304u);
  EXPECT_EQ(parse_pingpong_size("1.5m"), 1572864u);
  EXPECT_EQ(parse_pingpong_size("1.5g"), uint64_t{3} << 29);
  EXPECT_FALSE(parse_pingpong_size(""));
  EXPECT_FALSE(parse_pingpong_size("k"));
  EXPECT_FALSE(parse_pingpong_size("4x"));
  EXPECT_FALSE(parse_pingpong_size("1.25m"));
}

TEST(PingpongLine, RealRows) {
  // Rows printed by Debian's fi_pingpong 1.17 (-e rdm -m tagged -I 200 -S ...).
  auto r = parse_pingpong_line("64k     200     =200     25m         4.82s      5.44   12040.12       0.00");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, 65536u);
  EXPECT_EQ(r->sent, 200u);
  EXPECT_DOUBLE_EQ(r->seconds, 4.82);
  EXPECT_DOUBLE_EQ(r->mb_per_s, 5.44);
  EXPECT_DOUBLE_EQ(r->usec_per_xfer, 12040.12);

  r = parse_pingpong_line("4k      200     =200     1.5m        2.42s      0.68    6040.17       0.00");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, 4096u);
  EXPECT_DOUBLE_EQ(r->usec_per_xfer, 6040.17);

  r = parse_pingpong_line("4m      200     =200     1.5g        5.72s    293.30   14300.17       0.00");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, 4194304u);
  EXPECT_DOUBLE_EQ(r->mb_per_s, 293.30);

  r = parse_pingpong_line("1m      2k      =2k      3.9g        9.31s    450.51    2327.47       0.00");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, 1048576u);
  EXPECT_EQ(r->sent, 2000u);

  // Not data rows.
  EXPECT_FALSE(parse_pingpong_line("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec"));
  EXPECT_FALSE(parse_pingpong_line(""));
  EXPECT_FALSE(parse_pingpong_line("fi_getinfo(): util/pingpong.c:1234, ret=-61 (No data available)"));
  EXPECT_FALSE(parse_pingpong_line("64k 200 =200 25m 4.82 5.44 12040.12 0.00"));  // no 's'
}

TEST(PingpongOutput, HeaderAndRows) {
  const std::string out =
      "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n"
      "16k     1k      =1k      31m         0.52s     62.64     261.56       0.00\n"
      "256k    256     =256     128m        0.43s    309.12     848.07       0.00\n";
  const auto rows = parse_pingpong_output(out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].bytes, 16384u);
  EXPECT_EQ(rows[0].sent, 1000u);
  EXPECT_EQ(rows[1].bytes, 262144u);
  EXPECT_DOUBLE_EQ(rows[1].mb_per_s, 309.12);
}

TEST(LatencyCeiling, RatioIsCeilingOverValue) {
  BenchRecord r("fabric", "tagged_pingpong", 50.0, "us");
  with_latency_ceiling(r, 45.0, "fi_pingpong");
  ASSERT_TRUE(r.ratio);
  EXPECT_DOUBLE_EQ(*r.ratio, 0.9);
  ASSERT_TRUE(r.ceiling);
  EXPECT_DOUBLE_EQ(*r.ceiling, 45.0);
  EXPECT_NE(to_json(r).find("\"better\": \"lower\""), std::string::npos);
}

TEST(FiPingpong, MissingExecutableIsAnErrorNotAThrow) {
  PingpongCeilingOptions o;
  o.executable = "/nonexistent/parafab-no-such-fi_pingpong";
  o.timeout = std::chrono::milliseconds(10000);
  const PingpongCeiling c = measure_fi_pingpong(o);
  EXPECT_FALSE(c.figures);
  EXPECT_NE(c.error.find("not found"), std::string::npos) << c.error;
}

FabricBenchOptions tiny() {
  FabricBenchOptions o;
  o.providers = {"tcp;ofi_rxm"};
  o.sizes = {4096};
  o.iterations = 6;
  o.window = 3;
  o.rounds = 1;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}


void expect_records(const BenchReport& report) {
  ASSERT_GE(report.records().size(), 3u);  // pingpong us and MB/s, stream MB/s (+ rma when supported)
  for (const auto& r : report.records()) {
    EXPECT_EQ(r.bench, "fabric");
    EXPECT_GT(r.value, 0.0) << r.case_name << " " << r.unit;
    if (r.ratio) {
      EXPECT_GT(*r.ratio, 0.0) << r.case_name;
      EXPECT_EQ(r.ceiling_source, "fi_pingpong");
    }
  }
}

TEST(FabricBench, TinyVerifiedRunWithoutCeiling) {
  FabricBenchOptions o = tiny();
  o.ceiling = false;
  BenchReport report;
  std::ostringstream log;
  ASSERT_EQ(measure_fabric_provider(o, "tcp;ofi_rxm", report, log), 0) << log.str();
  expect_records(report);
  for (const auto& r : report.records()) EXPECT_FALSE(r.ceiling);
  // The bandwidth cases carry one thread's memcpy of their working set, and
  // their figure over it; the ping-pong does not.
  for (const auto& r : report.records()) {
    const BenchField* copy = r.field("copy_mb_s");
    const bool bandwidth = r.unit == "MB/s" && r.case_name != "tagged_pingpong";
    ASSERT_EQ(copy != nullptr, bandwidth) << r.case_name << " " << r.unit;
    if (!bandwidth) continue;
    EXPECT_GT(std::get<double>(*copy), 0.0) << r.case_name;
    const BenchField* ratio = r.field("copy_ratio");
    ASSERT_NE(ratio, nullptr) << r.case_name;
    EXPECT_DOUBLE_EQ(std::get<double>(*ratio), r.value / std::get<double>(*copy)) << r.case_name;
  }
}

TEST(FabricBench, TinyRunWithCeilingWhenFiPingpongRuns) {
  FabricBenchOptions o = tiny();
  BenchReport report;
  std::ostringstream log;
  ASSERT_EQ(measure_fabric_provider(o, "tcp;ofi_rxm", report, log), 0) << log.str();
  expect_records(report);
  // Without libfabric-bin the run still succeeds, and says why there is no ratio.
  if (!report.records().front().ceiling) {
    EXPECT_NE(log.str().find("no fi_pingpong ceiling"), std::string::npos) << log.str();
  }
}

// Two rounds: every record says so, and where fi_pingpong ran, the rounds'
// own ratios bound the spread (a two-round median is the mean, whose ratio
// lies between the rounds').
TEST(FabricBench, RoundsGiveMediansAndTheSpreadOfTheRatios) {
  FabricBenchOptions o = tiny();
  o.rounds = 2;
  BenchReport report;
  std::ostringstream log;
  ASSERT_EQ(measure_fabric_provider(o, "tcp;ofi_rxm", report, log), 0) << log.str();
  expect_records(report);
  EXPECT_NE(log.str().find("2 rounds"), std::string::npos) << log.str();
  for (const auto& r : report.records()) {
    const BenchField* rounds = r.field("rounds");
    ASSERT_NE(rounds, nullptr) << r.case_name;
    EXPECT_EQ(std::get<int64_t>(*rounds), 2);
    if (!r.ratio) continue;
    const BenchField* lo = r.field("ratio_min");
    const BenchField* hi = r.field("ratio_max");
    if (lo == nullptr) {  // fi_pingpong failed in a round: said so, no spread
      EXPECT_NE(log.str().find("no fi_pingpong ceiling"), std::string::npos) << r.case_name << "\n" << log.str();
      continue;
    }
    ASSERT_NE(hi, nullptr) << r.case_name;
    EXPECT_LE(std::get<double>(*lo), std::get<double>(*hi)) << r.case_name;
    // Value and ceiling are both means of two rounds: their ratio is the
    // mediant of the rounds' ratios, so it lies between them.
    EXPECT_GE(*r.ratio, std::get<double>(*lo) * (1 - 1e-9)) << r.case_name;
    EXPECT_LE(*r.ratio, std::get<double>(*hi) * (1 + 1e-9)) << r.case_name;
  }
}

TEST(FabricBench, MissingFiPingpongLeavesNoCeiling) {
  FabricBenchOptions o = tiny();
  o.fi_pingpong = "/nonexistent/parafab-no-such-fi_pingpong";
  std::ostringstream out;
  ASSERT_EQ(run_fabric_bench(o, out), 0) << out.str();
  EXPECT_NE(out.str().find("not available"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("tagged_pingpong"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace parafab::benchmarks
