// The worker's side of the parameter server: asynchronous push, pull and
// clock against all servers of the cluster map, each returning a future.
//
//   worker::KvClient kv(endpoint, cluster_map, worker_index);
//   auto next = kv.pull(0, next_keys, next_values.data());   // pull-ahead
//   ... compute on the current batch ...
//   rdma::Status s = kv.push(0, keys, grads).get();
//   s = kv.clock().get();                                    // iteration done
//
// A request is split by the key partition into one message per server, sent
// concurrently, and its future is ready when every server has answered (or
// with the first error: a server's error reply names what was wrong, a
// lost server gives a timeout). A server answers a sparse push once it has
// checked it, before it applies it: answered means it will be applied
// before that server handles anything later (this worker's pulls included),
// so the next push can be prepared meanwhile. Duplicate keys are merged before a push
// (gradients summed) and fetched once in a pull; keys given in strictly
// increasing order skip that pass (they cannot repeat). Every request carries the
// worker's clock: under SSP a server holds a pull until the slowest worker
// is close enough. One thread of the client reads the endpoint's messages;
// the endpoint carries nothing else.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ps/cluster_map.h"
#include "ps/seen_requests.h"
#include "ps/wire_format.h"
#include "rdma/endpoint.h"

namespace parafab::worker {

struct KvClientOptions {
  // A request not answered by every server within this time fails.
  std::chrono::milliseconds timeout{60000};
  // Pulls and pushes of strictly increasing keys send them delta + varint
  // coded (ps::kFlagDeltaVarintKeys): 1 to 3 bytes a key for a small key
  // space instead of 8. Keys in any other order go as they are.
  bool delta_varint_keys = false;
  // A request still missing a server's reply after this long is sent to
  // that server again, with its id, and again each period until `timeout`:
  // a request or reply the transport lost no longer fails the job. Reads
  // are idempotent; a server applies a push or ticks a clock once however
  // many copies arrive (ps::SeenRequests), and a push whose first copy was
  // lost is applied late, after this worker's later pushes but before its
  // clock's tick (clock() waits for the push's reply). Only while fewer
  // than kResendWindow newer requests have been numbered: an older one
  // fails at the timeout. 0: never.
  std::chrono::milliseconds resend_after{10000};
  // A dense pull's part of 64 KiB or more is received straight into the
  // caller's array (rdma::Endpoint::expect), not copied there from the
  // reply. Off: copied, as smaller parts are (bench kv --no-landing, to
  // compare).
  bool land_dense_pulls = true;
  // Test hook: called on the thread that sends requests held back
  // (overdue false) or overdue ones again (true), each time just before it
  // sends them.
  std::function<void(bool overdue)> on_late_send;
};

struct KvClientStats {
  uint64_t push_bytes = 0, pull_bytes = 0;  // payload sent and received
  uint64_t pull_bytes_landed = 0;           // of pull_bytes, received straight into the caller's array
  uint64_t requests = 0, errors = 0, unexpected_replies = 0;
  uint64_t rejoins = 0, resent = 0;  // servers back under their rank; requests sent to them again
  uint64_t overdue_resent = 0;       // requests sent again for want of a reply (resend_after)
  // Clock messages held back until every earlier push of this worker to
  // their server was answered, and every earlier clock sent (clock()).
  uint64_t clocks_held = 0;
  // Gradient bytes of this worker's pushes that a server acknowledged, then
  // lost when it died (applied after the checkpoint it rejoined from), over
  // every rejoin (server_rejoined).
  uint64_t bytes_lost_in_rejoins = 0;
};

// Rows [first_row, first_row + rows) of dense table `table` into out (rows x width floats).
struct DenseSlice {
  uint32_t table = 0;
  uint64_t first_row = 0, rows = 0;
  float* out = nullptr;
};

class KvClient {
 public:
  KvClient(rdma::Endpoint& endpoint, const ps::ClusterMap& map, uint32_t worker_index, KvClientOptions options = {});
  ~KvClient();
  KvClient(const KvClient&) = delete;
  KvClient& operator=(const KvClient&) = delete;

  // keys.size() * width gradients; the spans are copied before return.
  std::future<rdma::Status> push(uint32_t table, std::span<const uint64_t> keys, std::span<const float> grads);
  // Writes keys.size() * width floats to `out`, which must stay valid until the future is ready.
  // data_clock (when not null, valid until then too) gets the smallest
  // clock the servers answered at: each server's minimum worker clock when
  // it read the values, so every update of iterations before it is in them
  // (this worker's clock minus it is the pull's staleness).
  std::future<rdma::Status> pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                 int64_t* data_clock = nullptr);
  std::future<rdma::Status> dense_push(uint32_t table, uint64_t first_row, uint64_t rows, std::span<const float> grads);
  // rows * width floats to `out`, valid until the future is ready (then
  // nothing writes it any more, whatever the outcome); data_clock as
  // pull's. Each server's part of 64 KiB or more is received straight into
  // `out` (land_dense_pulls), so a failed pull may have written some rows.
  std::future<rdma::Status> dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out,
                                       int64_t* data_clock = nullptr);
  // The same rows read one-sided, straight from the servers' registered
  // shards (providers with FI_RMA): no server thread takes part. Each shard
  // is read as {version, published clock}, rows, version, and read again
  // while a push was running (odd or changed version): a torn read is never
  // returned. The consistency is dense_pull's: a shard whose published
  // clock (the server's minimum worker clock, every update before it
  // applied) is below this worker's clock minus the server's bound, or to
  // which a dense push of this worker to the table is still unanswered
  // (read-my-writes), is pulled with a message instead, which the server
  // answers after that push and within the bound (dense_read_fallbacks()).
  // So is a shard that pushes changed during 64 rounds of reads in a row
  // (a hot table, or a slow reader), rather than retried without end.
  // data_clock as pull's. Blocking; kUnsupported without FI_RMA.
  rdma::Status dense_read(uint32_t table, uint64_t first_row, uint64_t rows, float* out,
                          int64_t* data_clock = nullptr);
  // Several slices, of one or several tables, read side by side: the same
  // three (for a shard within 64 KiB of its region's start: two) dependent
  // rounds of reads however many there are.
  rdma::Status dense_read(std::span<const DenseSlice> slices, int64_t* data_clock = nullptr);
  // Finishes this worker's current iteration: ticks its clock on every
  // server. The tick goes to a server only once it has answered every
  // earlier push of this worker (stats().clocks_held counts the waits): a
  // push the transport lost and resend_after sent again is applied in the
  // round its clock ends, not after it. It also waits for an earlier tick
  // still held, or still being sent by the thread that released it, so
  // ticks reach each server in the order they were made. finish() waits
  // the same way.
  std::future<rdma::Status> clock();
  // This worker will push no more: its clock on every server jumps to
  // kFinishedClock, so it leaves the SSP minimum (workers with fewer batches
  // than others do not hold them back). Its own later pulls still carry its
  // last clock, so they are answered. No clock() may follow.
  std::future<rdma::Status> finish();
  static constexpr int64_t kFinishedClock = ps::kMaxWireClock;
  // How far back (in request ids) resend_after still sends a request again:
  // half a server's window of ids it tells apart (ps::SeenRequests).
  static constexpr uint64_t kResendWindow = ps::SeenRequests::kWindow / 2;

  int64_t current_clock() const { return clock_.load(); }
  // A resumed job: this worker's clock continues from `clock` (the
  // checkpoint set's). Before the first request.
  void start_at_clock(int64_t clock) { clock_.store(clock); }
  uint32_t rank() const { return map_.worker_rank(worker_index_); }
  uint32_t worker_index() const { return worker_index_; }
  // Server `server` (its rank) is back as a new process at `address`,
  // restored from its checkpoint (the scheduler's NodeRejoined): later
  // requests go there, and every request it had not answered is sent to it
  // again with its old id (a push it already holds is not applied twice),
  // then this worker's clock. While the map's server_rejoin_timeout is set,
  // a request to a dead server waits for it that much longer instead of
  // failing on the first send error. restored_last_push_id and
  // restored_bytes are what the new process holds of this worker's pushes
  // (the last id applied and the gradient bytes applied, from its
  // checkpoint): with them the client counts what the server lost,
  // stats().bytes_lost_in_rejoins.
  void server_rejoined(uint32_t server, std::span<const std::byte> address, uint64_t restored_last_push_id,
                       uint64_t restored_bytes);
  KvClientStats stats() const;
  // By server rank: the gradient bytes of this worker's pushes each server
  // has acknowledged (the bytes it counts as applied from this worker).
  std::vector<uint64_t> acked_push_bytes() const;
  // Attempts of dense_read that met a concurrent push and were retried.
  uint64_t dense_read_retries() const { return dense_read_retries_.load(); }
  // Shards dense_read read one-sided, and those it pulled with a message
  // instead (bound or read-my-writes).
  uint64_t dense_read_shards() const { return dense_read_shards_.load(); }
  uint64_t dense_read_fallbacks() const { return dense_read_fallbacks_.load(); }

 private:
  struct Pending;
  struct Split;
  Split split(std::span<const uint64_t> keys) const;
  std::future<rdma::Status> start(std::unique_ptr<Pending> p,
                                  std::shared_ptr<std::vector<uint64_t>> reply_keys = nullptr);
  std::future<rdma::Status> start_locked(std::unique_ptr<Pending> p, std::shared_ptr<std::vector<uint64_t>> reply_keys);
  bool rejoin_enabled() const { return map_.server_rejoin_timeout.count() > 0; }
  uint64_t epoch_of(uint32_t server) const;
  void finish(std::unique_ptr<Pending> done);
  // Ends `p`'s landings (dense pulls): after it, nothing is received into
  // the caller's array.
  void withdraw_landings(Pending& p);
  void receive_loop();
  void on_reply(const rdma::Message& m);
  void sweep();
  // Sends each request to the servers listed with it, again (overdue:
  // counted in overdue_resent) or held until now (clocks), in the order the
  // requests were made (it sorts `list` by id). Outside mu_; the requests
  // are marked `posting` by whoever listed them.
  using Sends = std::vector<std::pair<Pending*, std::vector<uint32_t>>>;
  void send_late(Sends& list, bool overdue);
  // Whether clock request `id`'s message to `server` must wait: an earlier
  // push of this worker to it is unanswered, or an earlier clock to it is
  // still held or being sent by another thread (it would overtake that one,
  // which then arrives as a stale copy).
  bool clock_waits_locked(uint64_t id, uint32_t server) const;
  // Lists the held clock messages (Pending::held) now free to go: those
  // of `p`, or of every request not being posted.
  void release_held_locked(Pending& p, Sends& out);
  void release_held_locked(Sends& out);

  rdma::Endpoint& endpoint_;
  const ps::ClusterMap& map_;
  uint32_t worker_index_;
  KvClientOptions options_;
  std::atomic<int64_t> clock_{0};
  std::atomic<bool> finished_{false};  // finish() was called
  std::atomic<uint64_t> next_request_{1};
  std::mutex send_mu_;  // held from a request's id to its last send (start(), server_rejoined())
  mutable std::mutex epochs_mu_;
  std::map<uint32_t, uint64_t> epochs_;  // server rank -> its rejoins so far

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending_;
  size_t holding_clocks_ = 0;  // requests in pending_ with servers held
  KvClientStats stats_;
  // By server rank: gradient bytes of pushes it acknowledged (every life of
  // it), and of those, lost in its rejoins so far (stats() sums them).
  std::vector<uint64_t> acked_push_bytes_, lost_push_bytes_;

  struct DenseRegion {
    uint64_t begin_row = 0, end_row = 0, values_offset = 0, clock_offset = 0;
    uint64_t staleness = ps::kRegionNoBound;  // the server's bound s
    bool rounds = false;  // the server applies pushes by BSP rounds (ps::kRegionRounds; staleness 0)
    rdma::RemoteKey key;
  };
  // By dense table: this worker's clock at its last dense push to it (mu_),
  // for dense_read's read-my-writes under BSP rounds.
  std::map<uint32_t, int64_t> dense_push_clock_;
  rdma::Status dense_region(uint32_t table, uint32_t server, DenseRegion& out);
  std::mutex regions_mu_;
  std::map<std::pair<uint32_t, uint32_t>, DenseRegion> regions_;  // (table, server rank)
  std::atomic<uint64_t> dense_read_retries_{0};
  std::atomic<uint64_t> dense_read_shards_{0};
  std::atomic<uint64_t> dense_read_fallbacks_{0};
  // kInvalidArgument naming `op` unless `table` is dense and holds rows
  // [first_row, first_row + rows).
  rdma::Status check_dense_rows(const char* op, uint32_t table, uint64_t first_row, uint64_t rows) const;
  // The part of those rows each server holds (by server index), the empty ones left out.
  struct DensePart {
    uint32_t server = 0;
    uint64_t begin = 0, end = 0;
  };
  std::vector<DensePart> dense_parts(const ps::TableSchema& schema, uint64_t first_row, uint64_t rows) const;
  // A dense push of this worker to the table is unanswered (dense_read's read-my-writes).
  bool dense_push_in_flight(uint32_t table) const;
  std::optional<int64_t> last_dense_push_clock(uint32_t table) const;

  std::atomic<bool> stop_{false};
  std::thread receiver_;
};

}  // namespace parafab::worker
