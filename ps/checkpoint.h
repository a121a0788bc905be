// A server's checkpoint: its shard of every table with the optimizer state,
// and the workers' clocks, as of one point in the server's message order
// (the server writes it on its serving thread, between two messages, so no
// push is half in it).
//
//   ps::write_checkpoint(ps::checkpoint_path(dir, 0, 2), server.checkpoint());
//   ps::ShardCheckpoint c = ps::read_checkpoint(path);   // throws CheckpointError
//   ps::CheckpointSet set = ps::find_checkpoint_set(dir, /*servers=*/2);
//
// File (little-endian): a 80-byte header (magic "PFCKPT01", version,
// server index, servers, workers, job fingerprint, the server's minimum
// worker clock, the wall time written, payload size, xxHash64 of the
// payload, the gradient bytes pushed into the shard, xxHash64 of the
// header), then the workers' clocks, their last applied push ids, the
// gradient bytes applied from each, the run's job id, the request ids the
// server had seen from each worker (the highest, and a bitmap of the
// SeenRequests window below it) and, per table, its id, kind, width, state
// floats, and either the keys with their values and state (sparse) or the
// shard's rows, values and state (dense). Version 2 files (without
// per-worker bytes and run) and version 3 files (without the seen ids) are
// still read.
// Written with write_file_atomically: a crash leaves the previous checkpoint.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ps/table_schema.h"

namespace parafab::ps {

// 2: the workers' last push ids; 3: the bytes applied from each worker and
// the run (scheduler job id) that wrote it; 4: the request ids seen from
// each worker.
inline constexpr uint32_t kCheckpointVersion = 4;

// A checkpoint that cannot be used; what() names the file and what is wrong.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ShardCheckpoint {
  uint32_t server_index = 0, num_servers = 1;
  uint64_t job_fingerprint = 0;  // checkpoint_fingerprint of the job's tables
  int64_t min_clock = 0;         // the server's minimum worker clock
  uint64_t written_unix_ms = 0;
  // Gradient bytes (values of every push) applied into this shard since the
  // job began, restarts included: what a restart from this checkpoint loses
  // is a server's count at its end minus this.
  uint64_t bytes_pushed = 0;
  std::vector<int64_t> worker_clocks;  // by worker index
  // By worker index: the request id of the last push applied (0: none). A
  // push retried after a restore is applied only if it is newer.
  std::vector<uint64_t> last_push_ids;
  // By worker index: the gradient bytes applied from that worker in this
  // run (a worker compares them with its acknowledged pushes to measure what
  // a rejoined server lost). Zeros from a version 2 file.
  std::vector<uint64_t> worker_bytes_pushed;
  // The job id (ClusterMap::job_id, new with every scheduler start) of the
  // run whose workers the clocks, ids and per-worker bytes belong to; 0 from
  // a version 2 file. A server rejoining a running job takes only a
  // checkpoint of that run.
  uint64_t run_id = 0;
  // By worker index: the highest request id the server had seen, and
  // SeenRequests::kWindowWords words of the bitmap of the ids below it
  // (seen_windows holds the workers' windows one after another). A server
  // restored from it applies a push the transport lost before the
  // checkpoint when it comes again. Both empty (a version 2 or 3 file, or a
  // checkpoint written without them): a restore counts every id up to
  // last_push_ids as seen.
  std::vector<uint64_t> seen_highest;
  std::vector<uint64_t> seen_windows;
  struct Sparse {
    uint32_t id = 0, width = 0, state_floats = 0;
    std::vector<uint64_t> keys;
    std::vector<float> data;  // per key: width values, then state_floats state
  };
  struct Dense {
    uint32_t id = 0, width = 0;
    uint64_t begin_row = 0, end_row = 0;
    std::vector<float> values, state;
  };
  std::vector<Sparse> sparse;
  std::vector<Dense> dense;
  uint64_t bytes = 0;  // of the file, once written or read
};

// Of everything a checkpoint's contents depend on: ids, kinds, widths,
// rows, updaters and initialisers. A checkpoint only goes back into the job
// of the same tables.
uint64_t checkpoint_fingerprint(const std::vector<TableSchema>& tables);

// DIR/server-I-of-S.ckpt
std::string checkpoint_path(const std::string& dir, uint32_t server_index, uint32_t num_servers);

// Returns the file's size. Throws std::runtime_error naming the file.
uint64_t write_checkpoint(const std::string& path, const ShardCheckpoint& c);
// Throws CheckpointError naming the path: missing, truncated, bad magic,
// unsupported version, checksum mismatch, inconsistent sizes. Streams the
// file: the checkpoint is in memory once, not also as the file's bytes.
ShardCheckpoint read_checkpoint(const std::string& path);
// The header's fields only (server, servers, fingerprint, minimum clock,
// times, bytes pushed, file size; no clocks, ids or tables), after checking
// the whole file as read_checkpoint does except the payload's inner sizes
// (magic, version, sizes, both checksums), in a buffer's memory.
ShardCheckpoint read_checkpoint_header(const std::string& path);

// The newest complete set in dir: one readable checkpoint per server of the
// job (each server's newest or, its PATH.prev, the one before), all of one
// job fingerprint, at the newest minimum clock all servers have one of;
// when they have none in common, each server's newest. clock is the
// smallest of their minimum clocks: every server's shard holds at least
// the updates of every worker's first `clock` iterations (at most
// kMaxResumeClock). A corrupt newest file falls back to the one before it.
// A set's clock never reaches a finished worker's clock (2^60, see
// worker::KvClient::finish): a job resumed from a finished one can still finish.
inline constexpr int64_t kMaxResumeClock = (int64_t{1} << 60) - 1;

struct CheckpointSet {
  std::vector<std::string> paths;  // by server index
  uint64_t job_fingerprint = 0;
  int64_t clock = 0;
  std::vector<std::string> refused;  // files passed over, each with why (corrupt, truncated, ...)
};
// Throws CheckpointError naming the missing or unusable file.
CheckpointSet find_checkpoint_set(const std::string& dir, uint32_t num_servers);

// One server's readable checkpoints in dir, newest first: its file and,
// its PATH.prev, the one before (each with its path): both as
// read_checkpoint_header gives them (kHeaders), or only the newest usable
// one, whole (kNewestWhole: what a rejoining server restores; the one
// before is not read when the newest will do). Files that cannot be used
// are passed over into `refused`, each with why; a missing one is skipped.
// Empty when none is usable.
enum class CheckpointRead { kHeaders, kNewestWhole };
std::vector<std::pair<std::string, ShardCheckpoint>> read_server_checkpoints(const std::string& dir,
                                                                             uint32_t server_index,
                                                                             uint32_t num_servers,
                                                                             std::vector<std::string>& refused,
                                                                             CheckpointRead what);

}  // namespace parafab::ps
