// The fabric ceiling: libfabric's own `fi_pingpong` (Debian's libfabric-bin)
// run as a server and a client process on 127.0.0.1 with the same provider
// and message size, its result table parsed.
//
//   PingpongCeilingOptions o;
//   o.provider = "tcp;ofi_rxm";  o.bytes = 65536;  o.iterations = 1000;
//   PingpongCeiling c = measure_fi_pingpong(o);
//   if (c.figures) use(c.figures->mb_per_s, c.figures->usec_per_xfer);
//   else report(c.error);   // "fi_pingpong not installed ...": no ceiling, not a failure
//
// fi_pingpong's figures (util/pingpong.c, show_perf): with `iters` round
// trips of `bytes` each way, MB/sec = 2 * iters * bytes / elapsed_us (bytes
// moved in both directions, 10^6 bytes per MB) and usec/xfer = elapsed_us /
// (2 * iters), i.e. half a round trip. It does not warm up: its first round
// trip includes connection set-up.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parafab::benchmarks {

// One data row of fi_pingpong's table:
//   bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
//   64k     200     =200     25m         4.82s      5.44   12040.12       0.00
struct PingpongFigures {
  uint64_t bytes = 0;       // transfer size as printed ("64k": 65536; "1.5k" is rounded down by fi_pingpong)
  uint64_t sent = 0;        // round trips as printed ("2k": 2000..2999)
  double seconds = 0.0;     // elapsed time
  double mb_per_s = 0.0;    // both directions, 10^6 bytes per MB
  double usec_per_xfer = 0.0;  // one-way latency: half a round trip
};

// fi_pingpong's size notation: digits, an optional ".d", an optional k/m/g
// (powers of 1024): "64" -> 64, "4k" -> 4096, "1.5m" -> 1572864.
std::optional<uint64_t> parse_pingpong_size(std::string_view text);
// One table row (leading and trailing blanks allowed); nullopt for the
// header, blank lines and anything else.
std::optional<PingpongFigures> parse_pingpong_line(std::string_view line);
// Every data row of a whole output, in order.
std::vector<PingpongFigures> parse_pingpong_output(std::string_view text);

struct PingpongCeilingOptions {
  std::string executable = "fi_pingpong";  // looked up on PATH
  std::string provider = "tcp;ofi_rxm";
  std::string host = "127.0.0.1";
  size_t bytes = 4096;
  int iterations = 1000;
  // Both processes are killed after this; their output says how far they got.
  std::chrono::milliseconds timeout{60000};
};

struct PingpongCeiling {
  std::optional<PingpongFigures> figures;  // set on success
  std::string error;    // why there are no figures, with the processes' last output
  std::string command;  // the client's command line
};

// Runs the server (`-B port`) and the client (`-P port host`) with
// `-e rdm -m tagged -I iterations -S bytes`, FI_TCP_IFACE=lo in their
// environment, on a free port; waits for the server to listen before the
// client starts. Never throws for a missing or failing fi_pingpong: that is
// `error`.
PingpongCeiling measure_fi_pingpong(const PingpongCeilingOptions& options);

}  // namespace parafab::benchmarks
