// A parameter server: holds shard `server_index` of every table of the
// cluster map, answers pulls, applies pushes with each table's updater, and
// enforces the consistency model with the workers' clocks.
//
//   ps::Server server(endpoint, cluster_map, /*server_index=*/0, options);
//   std::atomic<bool> stop{false};
//   server.serve(stop);      // until stop; every message validated first
//
// One thread serves: messages are handled in arrival order, and the
// transport keeps each worker's messages in send order, so a worker's
// pushes are applied before its later pulls (read-my-writes). A pull the
// SSP bound does not yet allow is parked and answered when the minimum
// clock has advanced far enough. Under BSP with more than one worker a push
// is not applied at once: each round's pushes are summed (MergedRounds) and
// applied as one step when the last live worker ends the round, before the
// pulls it releases are answered; a pull of a worker whose own push still
// waits in a round applies that round first, and so does a checkpoint. A bad message gets an error reply naming
// what was wrong, and a counter; the server keeps serving.
//
// A sparse push is answered once it has been checked, before it is applied:
// the reply says that the push will be applied before this server handles
// any later message (any worker's pull, clock or checkpoint sees it), not
// that it has been. The worker meanwhile dedups and encodes its next push,
// which would otherwise wait for the apply: 10^5 random keys one push at a
// time, `bench kv`, five alternating pairs: mean 29 M keys/s before, 39 M
// after. A dense push is still answered after its apply (under BSP rounds,
// after it is filed in its round: its region says so, ps::kRegionRounds,
// and the worker reads its own pushed rows by message until the round's
// clock is published), because one-sided readers do not pass through this
// thread (and, measured, answering a 1 MiB
// dense push first gained nothing here: with busy polling this thread also
// receives the next push, which waits for the apply either way; answering
// first with the shard version the apply leaves, for one-sided readers to
// wait for, while this thread drove the endpoint's progress and one helper
// applied, was slower on these 2 cores: five alternating pairs of `bench kv
// --sizes 1M`, 1.24-2.13 GB/s against 1.55-2.36 answering after). In-process
// callers that read a table or stats() right after a push's reply must first
// make a round trip through the server (a pull or clock) to be ordered after
// the apply.
//
// A dense pull of 64 KiB or more is answered without copying the rows: the
// reply sends the header and then the table's rows in place, and a write to
// that table (a push, a round's apply, a restore) first waits until every
// such reply still being sent has been (settle_lent). A trainer pulls, then
// computes, then pushes, so the wait is usually over before it starts; a
// reply to a peer that stopped reading holds pushes to that table until the
// peer is declared dead (remove_worker_later), or at most the endpoint's
// timeout. A reply to a dead peer is not waited for: whatever its transport
// still reads goes to a peer that is gone.
// `bench kv` dense_pull 1 MiB over tcp, three alternating pairs: 0.77-0.79
// of the fabric's ping-pong with the copy, 0.81-1.03 without.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ps/apply_pool.h"
#include "ps/checkpoint.h"
#include "ps/cluster_map.h"
#include "ps/consistency.h"
#include "ps/dense_table.h"
#include "ps/merged_rounds.h"
#include "ps/seen_requests.h"
#include "ps/sparse_table.h"
#include "ps/wire_format.h"
#include "rdma/endpoint.h"

namespace parafab::ps {

struct ServerOptions {
  ConsistencyModel consistency;  // BSP by default
  WireLimits limits;
  std::chrono::milliseconds poll{50};  // how often serve() looks at `stop`
  // Threads that apply one large push or answer one large sparse pull side
  // by side (ps/apply_pool.h): the serving thread and apply_threads - 1
  // helpers, asleep between requests. 0: one per hardware thread, at most 4.
  unsigned apply_threads = 0;
  // Checkpoints (ps/checkpoint.h) to this file, when not empty: every
  // checkpoint_interval (0: not by time) and whenever the minimum worker
  // clock has advanced checkpoint_clocks since the last (0: not by clocks),
  // and once more when serve() stops.
  std::string checkpoint_path;
  std::chrono::milliseconds checkpoint_interval{0};
  int64_t checkpoint_clocks = 0;
  // Fault injection, for tests of a job's recovery (ps-lite's PS_DROP_MSG):
  // every Nth push that arrives (copies sent again included) is discarded
  // unanswered and unnoted, as if the transport had lost it. 0: never.
  uint32_t drop_push_every = 0;
};

struct ServerStats {
  uint64_t pulls = 0, pushes = 0, clocks = 0;
  uint64_t keys_pulled = 0, keys_pushed = 0;
  uint64_t bytes_pushed = 0;           // gradient values applied, this run
  uint64_t bytes_pushed_restored = 0;  // ... before it, as the restored checkpoint says
  uint64_t refused_non_finite = 0;  // keys whose gradient was refused by the updater
  uint64_t duplicate_pushes = 0;    // retries of pushes already applied: answered, not applied
  uint64_t duplicate_clocks = 0;    // retries of a clock already ticked (a lost reply, a rejoin): answered
  uint64_t late_requests = 0;       // pushes and clocks first seen after a later one: sent again after a loss
  uint64_t pushes_dropped = 0;      // discarded by ServerOptions::drop_push_every
  uint64_t rounds_applied = 0;      // BSP rounds applied as one step (merged pushes)
  uint64_t rounds_applied_early = 0;  // ... of them before every worker ended it (a pull or a checkpoint)
  uint64_t bad_messages = 0;        // answered with an error
  uint64_t parked = 0;              // pulls parked by the SSP bound, in all
  uint64_t parked_now = 0;
  uint64_t reply_failures = 0;      // replies the transport could not deliver
  std::string last_reply_failure;   // ... the last one's reason, with its peer
  uint64_t checkpoints = 0;         // written
  uint64_t checkpoint_bytes = 0;    // of the last one
  double checkpoint_seconds = 0;    // the last one took (serving paused meanwhile)
  StalenessHistogram staleness;
  std::string last_error;           // the last bad message's reason, with its sender
};

class Server {
 public:
  Server(rdma::Endpoint& endpoint, const ClusterMap& map, uint32_t server_index, ServerOptions options);

  void serve(const std::atomic<bool>& stop);
  // Handles one received message (serve() calls it; tests may too).
  void handle(const rdma::Message& message);
  // A worker declared dead leaves the SSP minimum; parked pulls it held back
  // are answered. On the serving thread (or before serve()).
  void remove_worker(uint32_t worker_index);
  // The same from any other thread (the scheduler client's): applied by serve().
  void remove_worker_later(uint32_t worker_index);

  // This server's shards and the workers' clocks, now (on the serving
  // thread, or before serve()): what is applied, so without BSP rounds not
  // yet ended (write_checkpoint_now applies those first).
  ShardCheckpoint checkpoint() const;
  // Puts a checkpoint's shards back, before serve(), and sets every
  // worker's clock to `clock` (the set's, where the resumed workers start),
  // or with kCheckpointClocks to the checkpoint's own (a server rejoining
  // a running job: the workers then send theirs). Throws CheckpointError
  // naming `path` when it is not this server's shard of this job's tables.
  // The workers' last push ids and per-worker byte counts come back only
  // with kCheckpointClocks (the same worker processes); a resumed job's new
  // workers start afresh. With kCheckpointClocks the checkpoint must be of
  // this run (its run_id the map's job id): one written before the job was
  // resumed, or by another job, does not hold this run's pushes, and is
  // refused.
  static constexpr int64_t kCheckpointClocks = -1;
  void restore(const ShardCheckpoint& c, const std::string& path, int64_t clock);
  // Writes checkpoint() to options.checkpoint_path now.
  void write_checkpoint_now();

  // A copy of the counters, from any thread: what the serving thread had
  // counted when it last sent a reply or ended a turn of its loop. Counts
  // a message makes before its reply (bad messages, pushes, pulls) are
  // there once the reply has arrived; those it makes after (a sparse
  // push's refused gradients, counted as it is applied) once a later reply
  // has.
  ServerStats stats() const;
  // By worker index: the request id of the last push applied, and the
  // gradient bytes applied from it in this run (restored ones included). A
  // rejoined server hands both to the workers (SchedulerClient::rejoin_ready),
  // which tell from them what it lost.
  const std::vector<uint64_t>& last_push_ids() const { return last_push_id_; }
  const std::vector<uint64_t>& worker_bytes_pushed() const { return worker_bytes_pushed_; }
  const ClockTable& clocks() const { return clocks_; }
  SparseTable* sparse_table(uint32_t id);
  DenseTable* dense_table(uint32_t id);
  // Called for every pull answered: the puller, its clock, the minimum then.
  std::function<void(uint32_t worker_index, int64_t pull_clock, int64_t min_clock)> on_pull_answered;
  // Called on the serving thread when a pull is parked (the same arguments).
  std::function<void(uint32_t worker_index, int64_t pull_clock, int64_t min_clock)> on_pull_parked;

 private:
  struct Parked {
    rdma::Message message;
    int64_t clock;
  };

  void handle_decoded(const rdma::Message& message, const DecodedMessage& d);
  void answer_pull(const rdma::Message& message, const DecodedMessage& d);
  void answer_parked();
  // `lent`: rows of dense table `lent_table` sent in place after `bytes`
  // (a large dense pull's values, not copied into the reply).
  void reply(uint32_t to, rdma::ByteBuffer bytes, std::span<const float> lent = {}, uint32_t lent_table = 0);
  void reply_header(uint32_t to, const WireHeader& request, Op op, uint8_t flags = kFlagNone);
  void reply_error(uint32_t to, uint64_t request_id, const std::string& what);
  void reap_replies(bool all);
  // Waits until no reply in flight still reads dense table `table`'s rows
  // in place: before anything writes them. A reply to a worker declared
  // dead is not waited for (its send may never end before the endpoint's
  // timeout; whatever it still reads goes to a peer that is gone).
  void settle_lent(uint32_t table);
  // Whether worker peer `rank` was declared dead (removed from clocks_, or
  // waiting in dead_pending_ to be).
  bool worker_gone(uint32_t rank);
  // A dense push of rows [first_row, first_row + rows), applied now (after
  // settle_lent), its refusals counted.
  void apply_dense(uint32_t table, uint64_t first_row, uint64_t rows, const float* grads);
  // BSP: applies the merged rounds before `clock` (every one: INT64_MAX);
  // `early`: before every live worker ended them (counted).
  void apply_rounds_before(int64_t clock, bool early = false);
  // Writes the minimum worker clock into every dense shard's clock word
  // (DenseTable::publish_clock), for one-sided readers.
  void publish_min_clock();
  void checkpoint_if_due();
  // A push this server has seen before (SeenRequests); else notes it, and
  // its id as the last applied when it is the highest.
  bool is_retried_push(uint32_t worker, uint64_t request_id);
  // Checks table, kind, sizes and clock; returns an error text or "".
  std::string check_request(const rdma::Message& message, const DecodedMessage& d) const;
  // "" when a reply of `rows` x `width` floats fits options_.limits.max_reply_bytes, else why not.
  std::string check_reply_size(uint64_t rows, uint64_t width) const;

  rdma::Endpoint& endpoint_;
  const ClusterMap& map_;
  uint32_t index_;
  ServerOptions options_;
  KeyRange range_;
  std::map<uint32_t, std::unique_ptr<SparseTable>> sparse_;
  std::map<uint32_t, std::unique_ptr<DenseTable>> dense_;
  std::unique_ptr<ApplyPool> pool_;  // options_.apply_threads, resolved
  // Dense shards registered for one-sided reads (providers with FI_RMA).
  std::map<uint32_t, rdma::MemoryRegion> dense_regions_;
  ClockTable clocks_;
  // By worker index: the highest request id of a push applied (what a
  // checkpoint keeps), and the ids of its pushes and clocks seen lately. A
  // worker's requests arrive in the order of their ids (the client numbers
  // and sends them under one lock; the transport keeps each sender's order),
  // except a request the client sent again: one seen before (its reply was
  // lost, or the server rejoined from a checkpoint that holds it) is
  // answered and changes nothing; one never seen (the transport lost it) is
  // applied, late.
  std::vector<uint64_t> last_push_id_;
  std::vector<SeenRequests> seen_;
  std::vector<uint64_t> worker_bytes_pushed_;  // by worker index, this run
  uint64_t push_arrivals_ = 0;                 // for ServerOptions::drop_push_every
  std::deque<Parked> parked_;
  bool merge_rounds_ = false;  // BSP with more than one worker
  MergedRounds rounds_;
  // Replies in flight: the transport reads their bytes until the send
  // completes, and, for a reply that lends them, rows of a dense table.
  struct InFlightReply {
    rdma::Completion sent;
    rdma::ByteBuffer bytes;
    std::optional<uint32_t> lent_table;
    uint32_t to = 0;  // the peer's rank
  };
  std::deque<InFlightReply> in_flight_;  // sent ones taken off the front after every message
  ServerStats stats_;  // the serving thread's own
  void publish_stats();
  mutable std::mutex stats_mu_;
  ServerStats published_stats_;  // under stats_mu_: what stats() returns
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  int64_t last_checkpoint_clock_ = 0;
  // After a whole-job restore: checkpoint once the minimum clock passes
  // this (-1: no such checkpoint due). See restore().
  int64_t first_checkpoint_past_ = -1;
  std::mutex dead_mu_;
  std::vector<uint32_t> dead_pending_;
};

}  // namespace parafab::ps
