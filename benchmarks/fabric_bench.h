// `parafab bench fabric`: rdma::Endpoint's tagged messages and RMA reads,
// per provider and message size, each figure beside fi_pingpong's figure for
// the same provider and size, measured in the same run.
//
//   FabricBenchOptions o;                       // both providers, 4 KiB .. 4 MiB
//   o.json_path = "bench_fabric.json";
//   int rc = run_fabric_bench(o, std::cout);    // table on stdout, JSON lines to the file
//
// Two endpoints in this process over 127.0.0.1, opened afresh for each size
// and round right after that round's fi_pingpong run, so that both figures
// of a ratio come from the same few seconds. By default the waiting threads poll the
// CQs themselves, as fi_pingpong does (busy_poll); with busy_poll off each
// endpoint has its adaptive progress thread. A runs on the calling thread,
// B on a thread of its own.
// Cases, each after a warm-up, per size S and N iterations:
//   tagged_pingpong  A sends S bytes, B answers with S bytes from its own
//                    buffer (as fi_pingpong does), N times. Two records:
//                    "us" = round trip / 2 and "MB/s" = 2 N S / elapsed,
//                    computed as fi_pingpong computes usec/xfer and MB/sec.
//   tagged_stream    A keeps `window` sends in flight, B receives N messages;
//                    MB/s = N S / (first send .. last receipt).
//   rma_read         A reads S bytes of B's registered region: "us" per
//                    read, one at a time; "MB/s" with `window` reads in flight.
// Ceilings: the pingpong records compare with fi_pingpong's figure of the
// same metric; tagged_stream and rma_read MB/s with fi_pingpong's MB/sec (a
// ping-pong figure, both directions counted: field ceiling_kind says so),
// rma_read us with its usec/xfer.
// Ratios: for MB/s value / ceiling; for us ceiling / value, since lower is
// better (field "better": "lower"). Either way >= 1 means as good as
// fi_pingpong. Records whose ceiling could not be measured have none.
// Rounds: each size is measured `rounds` times, fi_pingpong then ours each
// time; a record's value and ceiling are the medians over the rounds, and
// fields ratio_min and ratio_max give the spread of the rounds' own ratios.
// Verification (on unless `verify` is false): every payload word is distinct
// (word k of message i differs from its neighbours and between messages);
// the first and the last message of each timed loop are compared in full,
// the others by tag, size and a stamp of their iteration number; RMA reads
// of the first and last iteration land in a cleared buffer and are compared
// in full. Checking happens off the clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "benchmarks/bench_report.h"

namespace parafab::benchmarks {

struct FabricBenchOptions {
  std::vector<std::string> providers{"tcp;ofi_rxm", "shm"};
  std::vector<size_t> sizes{size_t{4} << 10,   size_t{16} << 10, size_t{64} << 10,
                            size_t{256} << 10, size_t{1} << 20,  size_t{4} << 20};
  // Timed iterations per case and size; 0: default_fabric_iterations(size).
  int iterations = 0;
  int window = 8;        // sends or reads in flight in tagged_stream and rma_read MB/s
  // Rounds per size, each fi_pingpong then our cases: every figure is the
  // median of its rounds (this machine's speed swings by a third between
  // runs a minute apart), with the rounds' lowest and highest ratio.
  int rounds = 3;
  bool verify = true;
  bool ceiling = true;   // run fi_pingpong
  // Our endpoints poll without sleeping, as fi_pingpong does (EndpointOptions::busy_poll);
  // false measures the default adaptive progress (poll, then sleep when idle).
  bool busy_poll = true;
  std::string fi_pingpong = "fi_pingpong";  // executable, looked up on PATH
  std::string node = "127.0.0.1";           // address of both endpoints (shm ignores it)
  std::chrono::milliseconds timeout{30000};  // endpoint operations and each fi_pingpong run
  std::string json_path;                     // JSON lines written here when not empty
};

// clamp(512 MiB / size, 200, 5000): a default run of both providers stays
// within about a minute each on 2 cores (shm 17 s, tcp 39 s). At least 50
// were needed so that the first-touch faults of the receive buffers at 4
// MiB leave the figure (shm 0.75 of fi_pingpong at 20 round trips,
// 0.90-0.92 at 50 and 100). From 64 MiB / size (64 at 1 MiB) to this, the
// shm ping-pong's rounds came closer together: 1 MiB from 0.82-1.15 of
// fi_pingpong to 0.94-1.03 (2000 iterations), 256 KiB from 0.81-0.99 to
// 0.89-1.08 (short runs' rounds mostly measured the host's swings).
int default_fabric_iterations(size_t bytes);

// For a latency record (lower is better): sets the ceiling and its source,
// ratio = ceiling / value (none when value <= 0), and the field
// "better": "lower". BenchRecord::with_ceiling keeps value / ceiling for
// every other record.
BenchRecord& with_latency_ceiling(BenchRecord& record, double ceiling_us, std::string source);

// Measures one provider: appends its records to `report` and progress and
// notes (skipped cases, missing ceilings) to `log`. Returns 0, 1 when a
// verification failed, 2 when the provider could not be opened or an
// operation failed (the reason on `log`).
int measure_fabric_provider(const FabricBenchOptions& options, const std::string& provider, BenchReport& report,
                            std::ostream& log);

// Every provider, then the table on `out` (and the JSON file). Returns 0 on
// success, 1 when a verification failed, 2 on bad options or when a
// provider could not be measured.
int run_fabric_bench(const FabricBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
