// libFuzzer target: the server checkpoint reader (ps::read_checkpoint). The
// input is written to a temp file and read. It must be refused with a
// CheckpointError naming that path, or come back consistent (one last push
// id per worker clock, every sparse table's floats = keys x (width + state),
// every dense shard's values = rows x width) and write back and read again
// to the same checkpoint.
//
// The checksums would stop almost every mutation at the header, so the
// first byte can ask the harness to make some fields right before writing:
//   bit 0  magic and version
//   bit 1  the payload size in the header
//   bit 2  the payload and header checksums (recomputed last)
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <xxhash.h>

#include "ps/checkpoint.h"
#include "ps/seen_requests.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_temp_file.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::temp_path;
using parafab::fuzz::write_temp_file;
using parafab::ps::CheckpointError;
using parafab::ps::ShardCheckpoint;

// The header (checkpoint.cpp): magic 0, version 8, payload size 48, payload
// hash 56, header hash 72 (of the 72 bytes before it); 80 bytes in all.
constexpr size_t kHeader = 80, kVersionAt = 8, kPayloadBytesAt = 48, kPayloadHashAt = 56, kHeaderHashAt = 72;

void fix_up(std::vector<unsigned char>& f, uint8_t how) {
  if (f.size() < kHeader) return;
  if (how & 1) {
    std::memcpy(f.data(), "PFCKPT01", 8);
    const uint32_t version = parafab::ps::kCheckpointVersion;
    std::memcpy(f.data() + kVersionAt, &version, 4);
  }
  if (how & 2) {
    const uint64_t payload = f.size() - kHeader;
    std::memcpy(f.data() + kPayloadBytesAt, &payload, 8);
  }
  if (how & 4) {
    const uint64_t payload = XXH64(f.data() + kHeader, f.size() - kHeader, 0);
    std::memcpy(f.data() + kPayloadHashAt, &payload, 8);
    const uint64_t header = XXH64(f.data(), kHeaderHashAt, 0);
    std::memcpy(f.data() + kHeaderHashAt, &header, 8);
  }
}

void check_consistent(const ShardCheckpoint& c) {
  check(c.last_push_ids.size() == c.worker_clocks.size(), "one last push id per worker clock");
  check(c.worker_bytes_pushed.size() == c.worker_clocks.size(), "one byte count per worker clock");
  check((c.seen_highest.empty() && c.seen_windows.empty()) ||
            (c.seen_highest.size() == c.worker_clocks.size() &&
             c.seen_windows.size() == c.worker_clocks.size() * parafab::ps::SeenRequests::kWindowWords),
        "no seen ids, or a highest id and a window per worker clock");
  for (const auto& t : c.sparse) {
    check(t.data.size() == t.keys.size() * (uint64_t{t.width} + t.state_floats), "sparse floats = keys x stride");
  }
  for (const auto& t : c.dense) {
    check(t.end_row >= t.begin_row && t.values.size() == (t.end_row - t.begin_row) * t.width,
          "dense values = rows x width");
  }
}

bool same_floats(const std::vector<float>& x, const std::vector<float>& y) {
  return parafab::fuzz::bytes_equal<float>(x, y);
}

bool same(const ShardCheckpoint& a, const ShardCheckpoint& b) {
  if (a.server_index != b.server_index || a.num_servers != b.num_servers || a.job_fingerprint != b.job_fingerprint ||
      a.min_clock != b.min_clock || a.written_unix_ms != b.written_unix_ms || a.bytes_pushed != b.bytes_pushed ||
      a.worker_clocks != b.worker_clocks || a.last_push_ids != b.last_push_ids ||
      a.worker_bytes_pushed != b.worker_bytes_pushed || a.run_id != b.run_id || a.seen_highest != b.seen_highest ||
      a.seen_windows != b.seen_windows || a.sparse.size() != b.sparse.size() ||
      a.dense.size() != b.dense.size()) {
    return false;
  }
  for (size_t i = 0; i < a.sparse.size(); ++i) {
    const auto &x = a.sparse[i], &y = b.sparse[i];
    if (x.id != y.id || x.width != y.width || x.state_floats != y.state_floats || x.keys != y.keys ||
        !same_floats(x.data, y.data)) {
      return false;
    }
  }
  for (size_t i = 0; i < a.dense.size(); ++i) {
    const auto &x = a.dense[i], &y = b.dense[i];
    if (x.id != y.id || x.width != y.width || x.begin_row != y.begin_row || x.end_row != y.end_row ||
        !same_floats(x.values, y.values) || !same_floats(x.state, y.state)) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<unsigned char> file(data + 1, data + size);
  fix_up(file, data[0]);
  static const std::string path = temp_path("in.ckpt"), again = temp_path("again.ckpt");
  write_temp_file(path, file);
  // The header-only read (finding a set) refuses whatever the whole read's
  // checks of magic, version, sizes and checksums refuse.
  bool header_ok = true;
  ShardCheckpoint header;
  try {
    header = parafab::ps::read_checkpoint_header(path);
  } catch (const CheckpointError& e) {
    check(std::string(e.what()).find(path) != std::string::npos, "a header refusal names the file");
    header_ok = false;
  }
  ShardCheckpoint c;
  try {
    c = parafab::ps::read_checkpoint(path);
  } catch (const CheckpointError& e) {
    check(std::string(e.what()).find(path) != std::string::npos, "a refusal names the file");
    return 0;
  }
  check(header_ok, "a checkpoint read whole passes the header-only read");
  check(header.min_clock == c.min_clock && header.job_fingerprint == c.job_fingerprint &&
            header.server_index == c.server_index && header.bytes == c.bytes,
        "the header-only read gives the whole read's header fields");
  check_consistent(c);
  (void)parafab::ps::write_checkpoint(again, c);
  const ShardCheckpoint back = parafab::ps::read_checkpoint(again);
  check(same(c, back), "an accepted checkpoint writes back and reads again the same");
  return 0;
}
