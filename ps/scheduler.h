// The scheduler: rendezvous of one job (DESIGN.md, "Processes and roles").
// Servers and workers connect over TCP, prove they hold the job token
// (challenge-response, ps/job_token.h), and get a rank: servers 0 … S−1,
// workers S … S+W−1, in order of arrival within their role. Once all S + W
// have joined, every node gets the ClusterMap (job id, every node's fabric
// address, the key ranges, the tables). Then the scheduler runs barriers,
// watches heartbeats (a node silent past heartbeat_timeout, or whose
// connection drops, is declared dead and the others are told its rank), and
// broadcasts Shutdown once every worker has said done().
//
//   ps::Scheduler scheduler({.port = 9000, .num_servers = 2, .num_workers = 4,
//                            .token = ps::JobToken::from_file(path), .tables = tables});
//   scheduler.run();   // returns after an orderly shutdown; throws SchedulerError on failure
//
// Every control message is validated before use (frame length, required
// fields, enum ranges); a bad one is answered with an error, counted in
// stats(), and never crashes or stalls the scheduler. One io thread (the
// caller of run()) does all the work; stop() and stats() may be called
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ps/cluster_map.h"
#include "ps/job_token.h"
#include "ps/table_schema.h"

namespace parafab::ps {

struct SchedulerOptions {
  std::string bind = "127.0.0.1";
  uint16_t port = 0;  // 0: an ephemeral port, see Scheduler::port()
  uint32_t num_servers = 1;
  uint32_t num_workers = 1;
  std::optional<JobToken> token;  // required: every node of the job must hold the same token
  std::vector<TableSchema> tables;
  // All S + W nodes must have joined within this of run(); otherwise every
  // joined node gets an error naming who is missing and run() throws it.
  std::chrono::milliseconds join_timeout{60000};
  // A joined node not heard from for this long is declared dead.
  std::chrono::milliseconds heartbeat_timeout{10000};
  // A connection that has not registered within this is closed.
  std::chrono::milliseconds auth_timeout{10000};
  size_t max_frame_bytes = 64u << 20;
  // A worker that dies before it is done: kFail ends the job (every node
  // gets an error naming it, run() throws); kContinue lets the others go on
  // (it leaves barriers and the servers' SSP minimum).
  enum class OnWorkerFailure { kFail, kContinue } on_worker_failure = OnWorkerFailure::kFail;
  // A server that dies after the map: with 0 the job goes on without it
  // (its workers' requests fail); else its slot waits this long for a
  // server that registers asking for its rank (parafab server --recover
  // --rank R). That one gets the map with `rejoin` set, every other node a
  // NodeRejoined with its new address; if none comes in time the job stops
  // with ERROR_NODE_FAILED naming it.
  std::chrono::milliseconds server_rejoin_timeout{0};
};

// "fail" or "continue"; throws std::invalid_argument naming the text.
SchedulerOptions::OnWorkerFailure parse_worker_failure_policy(const std::string& text);

// run() failed: join timeout, or the listening socket broke.
class SchedulerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Counters of refused and failed traffic (monotonic; any thread may read).
struct SchedulerStats {
  uint64_t joined = 0;               // successful registrations
  uint64_t auth_failures = 0;        // registrations with a wrong MAC ("bad token")
  uint64_t malformed_frames = 0;     // oversized length or unparsable body
  uint64_t invalid_messages = 0;     // parsed, but failed validation or came at the wrong time
  uint64_t unauthenticated_messages = 0;  // anything but Register before registering
  uint64_t refused_full = 0;         // registrations when the role was full
  uint64_t auth_timeouts = 0;        // connections that never registered
  uint64_t dead_nodes = 0;           // joined nodes declared dead
  uint64_t rejoined = 0;             // dead servers back under their rank
};

class Scheduler {
 public:
  // Binds the listening socket (so port() is known at once). Throws
  // std::invalid_argument on bad options (no servers or workers, an invalid
  // or duplicate table), SchedulerError when the address cannot be bound.
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  uint16_t port() const;
  uint64_t job_id() const;
  // Serves until every worker is done (or dead) and Shutdown has gone out,
  // or stop() is called. Throws SchedulerError with the reason on failure.
  // Call once.
  void run();
  // Any thread: broadcast Shutdown ("scheduler stopped") and make run() return.
  void stop();
  SchedulerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parafab::ps
