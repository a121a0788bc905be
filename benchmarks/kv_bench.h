// `parafab bench kv`: the parameter server's push and pull throughput and
// latency over real endpoints, each figure beside the fabric's own figure
// for the same provider and size measured in the same run, and the resident
// memory of a sparse AdaGrad table per key.
//
//   KvBenchOptions o;                         // 1 server, 1 worker, tcp;ofi_rxm
//   o.json_path = "bench_kv.json";
//   int rc = run_kv_bench(o, std::cout);      // table on stdout, JSON lines to the file
//
// Servers and workers are threads of this process, each with its own
// rdma::Endpoint on 127.0.0.1, meshed by hand (no scheduler): ps::Server
// serves on a thread per server, worker::KvClient runs on a thread per
// worker. Every case warms up first, then runs for `case_seconds` (at least
// `min_iterations`, at most `max_iterations` operations per worker); with W
// workers they all run the case at once and the figure is their total over
// the common elapsed time.
//
// Cases (value, unit; ceiling and its source):
//   dense_push, dense_pull   one dense table, width 1024 floats (4 KiB a row),
//                            SGD lr 1; a request of `bytes` is bytes / 4 KiB
//                            rows from row 0, one request at a time: MB/s of
//                            payload (10^6 B per MB; field keys_per_s counts
//                            rows). Ceiling: bench fabric's tagged_pingpong
//                            MB/s of the same size between two endpoints of
//                            this process (bytes / one-way time, the rate of
//                            one transfer at a time). dense_push's breakdown
//                            fields: client_mb_per_s (time inside
//                            KvClient::dense_push) and apply_mb_per_s (a
//                            DenseTable of this thread applying the same rows).
//   dense_push_window, dense_pull_window   the same with `window` requests
//                            in flight; ceiling: bench fabric's tagged_stream
//                            MB/s (its own window) of the same size.
//   sparse_push              `sparse_keys` distinct random uint64 keys of a
//                            width-1 AdaGrad table, all present (inserted by
//                            the warm-up): keys/s. Ceiling: the fabric's
//                            tagged_pingpong MB/s at 1 MiB divided by the 12
//                            bytes a key costs on the wire (key + gradient),
//                            at the power of two nearest to 12 x keys bytes
//                            (measured by bench fabric in the same run).
//                            Fields: goal 4e7 keys/s and goal_ratio; the
//                            breakdown client_keys_per_s (time inside
//                            KvClient::push: merge, split, encode, post) and
//                            apply_keys_per_s (one SparseTable::push of the
//                            same keys in this thread, timed during the
//                            reference replay). One push at a time; a
//                            server answers a sparse push before it applies
//                            it (ps/server.h), so the client's next push
//                            overlaps that apply, and each worker's timed
//                            loop ends with a pull from every server, which
//                            waits for the last apply: keys/s are keys
//                            applied.
//   sparse_push_window       the same with `window` pushes in flight.
//   sparse_push_sorted       sparse_push with the same (key, gradient) pairs
//                            in increasing key order, one at a time: what a
//                            trainer's sorted, unique batch costs, and the
//                            order ps-lite requires (the client skips its
//                            dedup pass); field key_order.
//   sparse_push_insert       sparse_push with fresh keys in every push (first insert).
//   sparse_pull              the keys of sparse_push: keys/s, same ceiling
//                            (8 bytes a key out, 4 back).
//   sparse_pull_sorted       the same keys in increasing order.
//   push_latency, pull_latency   a 1 KiB request (256 floats of a dense table
//                            of width 256), one at a time, worker 0 alone:
//                            mean round trip in us (fields p50_us, p99_us).
//                            Ceiling: the fabric's 1 KiB tagged_pingpong round
//                            trip (twice its one-way figure); ratio = ceiling
//                            / value as for every latency (>= 1 is as fast).
//   sparse_memory            a SparseTable (ps/sparse_table.h) of
//                            `memory_keys` keys, width 1, AdaGrad, built in
//                            this process: (resident after - resident
//                            before) / keys from /proc/self/statm, B/key.
//                            Ceiling: the goal, 24 B/key (ceiling_source
//                            "goal"); ratio = goal / value, so >= 1 meets it.
// Every fabric ceiling record also carries fi_pingpong's figure for the same
// size (fields fi_pingpong and fi_pingpong_ratio) when it could be run.
//
// Rounds (`rounds`, 3 by default): the fabric's figures and every case are
// measured that many times, in turn, and each record is the median of its
// rounds (value, ceiling and their ratio), with fields rounds, ratio_min and
// ratio_max (the lowest and highest of the rounds' own ratios). This
// machine's tcp ping-pong at 1 MiB swings between about 1.9 and 4.2 GB/s
// from one minute to the next: measured once, tens of seconds before the
// case, the ceiling made one binary's dense_push ratio read 0.44 in one run
// and 1.05 in the next.
//
// Verification (on unless `verify` is false), off the clock: dense pushes
// carry distinct small integers, so the table must hold exactly minus the
// number of pushes of each row times its gradient; the first and last pull
// of every worker and case are compared in full with that. Sparse values are
// compared bit for bit with a SparseTable of this thread fed the same pushes
// (identical pushes of one key commute, so W workers give one answer). The
// latency table is compared the same way as the dense one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "benchmarks/bench_report.h"

namespace parafab::benchmarks {

struct KvBenchOptions {
  std::vector<std::string> providers{"tcp;ofi_rxm"};
  uint32_t servers = 1;
  unsigned apply_threads = 0;  // per server (ps::ServerOptions::apply_threads); 0: auto
  uint32_t workers = 1;
  // Dense request sizes in bytes: multiples of 4 KiB (one row of 1024 floats).
  std::vector<size_t> dense_sizes{size_t{4} << 10,   size_t{16} << 10, size_t{64} << 10,
                                  size_t{256} << 10, size_t{1} << 20,  size_t{4} << 20};
  size_t sparse_keys = 100000;  // keys per sparse request
  int window = 4;               // requests in flight in the *_window cases; 0 skips them
  double case_seconds = 0.6;    // timed budget of each case
  int min_iterations = 3;       // per worker and case, whatever the budget
  int max_iterations = 5000;    // per worker and case
  int max_insert_pushes = 40;   // per worker in sparse_push_insert (keys are generated beforehand)
  size_t memory_keys = 10000000;  // keys of the sparse_memory table; 0 skips the case
  // Keys the servers hold in sparse_push_big_table (pushes of sparse_keys of
  // them at random); 0 skips the case, else at least sparse_keys.
  size_t big_table_keys = 10000000;
  bool verify = true;
  bool ceiling = true;          // run fi_pingpong for the secondary ceiling
  // Endpoints poll without sleeping and without progress threads, as bench
  // fabric's do by default, so the ceiling and the figure share a progress mode.
  bool busy_poll = true;
  bool land = true;  // worker::KvClientOptions::land_dense_pulls
  int fabric_iterations = 0;    // bench fabric's iterations per size; 0: its default
  // Rounds, each the fabric's figures then every case (sparse_memory once,
  // after them): a record is the median of its rounds, beside the median of
  // their ceilings, with the spread of the rounds' own ratios
  // (benchmarks/bench_rounds.h).
  int rounds = 3;
  std::string fi_pingpong = "fi_pingpong";
  std::string node = "127.0.0.1";
  std::chrono::milliseconds timeout{30000};
  uint64_t seed = 1;
  std::string json_path;        // JSON lines written here when not empty
};

// Resident set size of this process from /proc/self/statm, in bytes (0 when unreadable).
size_t resident_bytes();

// One provider, round by round: the fabric ceilings (bench fabric at 1 KiB,
// the sparse size and every dense size), then every KV case; the rounds'
// records merged. Returns 0, 1 when a verification failed, 2 on an error
// (the reason on `log`); a failed round ends the run, and the rounds before
// it are reported (or, for the first, what it measured).
int measure_kv_provider(const KvBenchOptions& options, const std::string& provider, BenchReport& report,
                        std::ostream& log);

// sparse_memory alone. Returns 0, or 1 when the table lost a key.
int measure_kv_memory(const KvBenchOptions& options, BenchReport& report, std::ostream& log);

// Every provider, then sparse_memory, then the table on `out` (and the JSON
// file). Returns 0, 1 when a verification failed, 2 on bad options or errors.
int run_kv_bench(const KvBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
