#include "ps/server.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

namespace parafab::ps {
namespace {

bool is_request(Op op) {
  return op == Op::kPull || op == Op::kPush || op == Op::kClock || op == Op::kDensePull || op == Op::kDensePush ||
         op == Op::kDenseRegion;
}

}  // namespace

Server::Server(rdma::Endpoint& endpoint, const ClusterMap& map, uint32_t server_index, ServerOptions options)
    : endpoint_(endpoint),
      map_(map),
      index_(server_index),
      options_(options),
      range_(map.partition().range(server_index)),
      clocks_(map.num_workers()),
      last_push_id_(map.num_workers(), 0),
      seen_(map.num_workers()),
      worker_bytes_pushed_(map.num_workers(), 0),
      merge_rounds_(options.consistency.kind == ConsistencyModel::Kind::kBsp && map.num_workers() > 1) {
  unsigned apply_threads = options.apply_threads;
  if (apply_threads == 0) apply_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  pool_ = std::make_unique<ApplyPool>(apply_threads);
  for (const TableSchema& t : map.tables) {
    t.validate();
    if (t.kind == TableKind::kSparse) {
      sparse_[t.id] = std::make_unique<SparseTable>(t);
    } else {
      const RowRange rows = dense_rows_of(t.rows, server_index, map.num_servers());
      if (rows.begin < rows.end) {
        auto table = std::make_unique<DenseTable>(t, rows.begin, rows.end);
        if (endpoint.supports_rma()) {
          // Workers read it one-sided (read-only: pushes go through this thread).
          dense_regions_[t.id] = endpoint.register_memory(const_cast<void*>(table->region()), table->region_bytes(),
                                                          rdma::kRemoteRead);
        }
        dense_[t.id] = std::move(table);
      }
    }
  }
}

SparseTable* Server::sparse_table(uint32_t id) {
  auto it = sparse_.find(id);
  return it == sparse_.end() ? nullptr : it->second.get();
}

DenseTable* Server::dense_table(uint32_t id) {
  auto it = dense_.find(id);
  return it == dense_.end() ? nullptr : it->second.get();
}

void Server::serve(const std::atomic<bool>& stop) {
  while (!stop) {
    if (auto m = endpoint_.receive(options_.poll)) handle(*m);
    reap_replies(false);
    std::vector<uint32_t> dead;
    {
      std::lock_guard lock(dead_mu_);
      dead.swap(dead_pending_);
    }
    for (uint32_t w : dead) remove_worker(w);
    checkpoint_if_due();
    publish_stats();
  }
  reap_replies(true);
  apply_rounds_before(std::numeric_limits<int64_t>::max(), /*early=*/true);
  if (!options_.checkpoint_path.empty()) write_checkpoint_now();
  publish_stats();
}

void Server::checkpoint_if_due() {
  if (options_.checkpoint_path.empty()) return;
  const bool by_time = options_.checkpoint_interval.count() > 0 &&
                       std::chrono::steady_clock::now() - last_checkpoint_ >= options_.checkpoint_interval;
  const bool by_clocks = options_.checkpoint_clocks > 0 &&
                         clocks_.min_clock() - last_checkpoint_clock_ >= options_.checkpoint_clocks;
  const bool first_of_run = first_checkpoint_past_ >= 0 && clocks_.min_clock() > first_checkpoint_past_;
  if (by_time || by_clocks || first_of_run) write_checkpoint_now();
}

void Server::write_checkpoint_now() {
  const auto t0 = std::chrono::steady_clock::now();
  // Every push answered is in the checkpoint (what a crash loses stays
  // "the updates since the last checkpoint"), so rounds not yet ended go
  // in as they stand.
  apply_rounds_before(std::numeric_limits<int64_t>::max(), /*early=*/true);
  ShardCheckpoint c = checkpoint();
  stats_.checkpoint_bytes = write_checkpoint(options_.checkpoint_path, c);
  ++stats_.checkpoints;
  last_checkpoint_ = std::chrono::steady_clock::now();
  last_checkpoint_clock_ = clocks_.min_clock();
  first_checkpoint_past_ = -1;
  stats_.checkpoint_seconds = std::chrono::duration<double>(last_checkpoint_ - t0).count();
  publish_stats();
}

ShardCheckpoint Server::checkpoint() const {
  ShardCheckpoint c;
  c.server_index = index_;
  c.num_servers = map_.num_servers();
  c.job_fingerprint = checkpoint_fingerprint(map_.tables);
  c.min_clock = clocks_.min_clock();
  c.written_unix_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  c.bytes_pushed = stats_.bytes_pushed_restored + stats_.bytes_pushed;
  c.last_push_ids = last_push_id_;
  c.worker_bytes_pushed = worker_bytes_pushed_;
  c.run_id = map_.job_id;
  for (uint32_t w = 0; w < clocks_.workers(); ++w) c.worker_clocks.push_back(clocks_.clock(w));
  for (const SeenRequests& seen : seen_) {
    c.seen_highest.push_back(seen.highest());
    c.seen_windows.insert(c.seen_windows.end(), seen.window().begin(), seen.window().end());
  }
  for (const auto& [id, t] : sparse_) {
    ShardCheckpoint::Sparse s;
    s.id = id;
    s.width = t->schema().width;
    s.state_floats = static_cast<uint32_t>(t->state_floats());
    s.keys.reserve(t->size());
    s.data.reserve(t->size() * (s.width + s.state_floats));
    t->for_each([&](uint64_t key, const float* value, const float* state) {
      s.keys.push_back(key);
      s.data.insert(s.data.end(), value, value + s.width);
      s.data.insert(s.data.end(), state, state + s.state_floats);
    });
    c.sparse.push_back(std::move(s));
  }
  for (const auto& [id, t] : dense_) {
    ShardCheckpoint::Dense d;
    d.id = id;
    d.width = t->schema().width;
    d.begin_row = t->begin_row();
    d.end_row = t->end_row();
    t->snapshot(d.values, d.state);
    c.dense.push_back(std::move(d));
  }
  return c;
}

void Server::restore(const ShardCheckpoint& c, const std::string& path, int64_t clock) {
  auto refuse = [&](const std::string& why) { throw CheckpointError(path + ": " + why); };
  if (c.server_index != index_ || c.num_servers != map_.num_servers()) {
    refuse("holds server " + std::to_string(c.server_index) + " of " + std::to_string(c.num_servers) + ", not " +
           std::to_string(index_) + " of " + std::to_string(map_.num_servers()));
  }
  if (c.job_fingerprint != checkpoint_fingerprint(map_.tables)) {
    refuse("was written for other tables than this job's (ids, widths, rows, updaters or initialisers differ)");
  }
  if (c.worker_clocks.size() != clocks_.workers()) {
    refuse("has the clocks of " + std::to_string(c.worker_clocks.size()) + " workers; this job has " +
           std::to_string(clocks_.workers()));
  }
  if (c.last_push_ids.size() != clocks_.workers()) {
    refuse("has the last push ids of " + std::to_string(c.last_push_ids.size()) + " workers; this job has " +
           std::to_string(clocks_.workers()));
  }
  if (c.worker_bytes_pushed.size() != clocks_.workers()) {
    refuse("has the gradient bytes of " + std::to_string(c.worker_bytes_pushed.size()) + " workers; this job has " +
           std::to_string(clocks_.workers()));
  }
  if (clock == kCheckpointClocks && c.run_id != map_.job_id) {
    refuse(c.run_id == 0 ? "names no run (an older version's checkpoint), so a server cannot rejoin the running job "
                           "from it"
                         : "was written by job " + job_hex(c.run_id) + ", not this run (job " +
                               job_hex(map_.job_id) + "): before the job was resumed, or by another job, so it "
                               "does not hold this run's pushes");
  }
  const bool has_seen = !c.seen_highest.empty();
  if (has_seen && (c.seen_highest.size() != clocks_.workers() ||
                   c.seen_windows.size() != clocks_.workers() * SeenRequests::kWindowWords)) {
    refuse("has the seen request ids of " + std::to_string(c.seen_highest.size()) + " workers; this job has " +
           std::to_string(clocks_.workers()));
  }
  if (c.sparse.size() != sparse_.size() || c.dense.size() != dense_.size()) refuse("holds other tables than this shard");
  for (const ShardCheckpoint::Sparse& s : c.sparse) {
    SparseTable* t = sparse_table(s.id);
    if (t == nullptr || s.width != t->schema().width || s.state_floats != t->state_floats()) {
      refuse("sparse table " + std::to_string(s.id) + " does not fit this job's");
    }
    const size_t stride = s.width + s.state_floats;
    for (size_t k = 0; k < s.keys.size(); ++k) {
      if (!range_.contains(mix64(s.keys[k]))) refuse("key " + std::to_string(s.keys[k]) + " is not this server's");
      t->restore(s.keys[k], s.data.data() + k * stride, s.data.data() + k * stride + s.width);
    }
  }
  for (const ShardCheckpoint::Dense& d : c.dense) {
    DenseTable* t = dense_table(d.id);
    if (t == nullptr || d.begin_row != t->begin_row() || d.end_row != t->end_row()) {
      refuse("dense table " + std::to_string(d.id) + " does not fit this shard's rows");
    }
    settle_lent(d.id);
    try {
      t->restore(d.values, d.state);
    } catch (const std::invalid_argument& e) {
      refuse(e.what());
    }
  }
  for (uint32_t w = 0; w < clocks_.workers(); ++w) {
    const int64_t to = clock == kCheckpointClocks ? c.worker_clocks[w] : clock;
    if (to > 0) (void)clocks_.tick(w, to);
  }
  last_checkpoint_clock_ = clocks_.min_clock();
  publish_min_clock();
  stats_.bytes_pushed_restored = c.bytes_pushed;
  publish_stats();
  // The same worker processes go on numbering their requests after a
  // rejoin; a resumed job's workers are new and number theirs from 1.
  if (clock == kCheckpointClocks) {
    last_push_id_ = c.last_push_ids;
    worker_bytes_pushed_ = c.worker_bytes_pushed;
    for (size_t w = 0; w < seen_.size(); ++w) {
      if (has_seen) {
        seen_[w].restore(c.seen_highest[w], std::span<const uint64_t>(c.seen_windows)
                                                .subspan(w * SeenRequests::kWindowWords, SeenRequests::kWindowWords));
      } else {
        seen_[w].restore(last_push_id_[w]);  // a version 3 file: every id up to its last push counts as seen
      }
    }
  } else {
    std::fill(last_push_id_.begin(), last_push_id_.end(), 0);
    seen_.assign(seen_.size(), SeenRequests{});
    std::fill(worker_bytes_pushed_.begin(), worker_bytes_pushed_.end(), 0);
    // A checkpoint of this run as soon as every worker has ticked past the
    // set's clock, so that this server can rejoin before its first periodic
    // one (the set's file is of the run before, and refused for a rejoin).
    // Not at once: the workers and the other servers may still be reading
    // the set, and rotating a file under them can change the set they find.
    // A worker ticks only after it has found its set and been answered by
    // the servers for its first batch.
    first_checkpoint_past_ = clocks_.min_clock();
  }
}

void Server::handle(const rdma::Message& message) {
  DecodedMessage d;
  if (auto err = decode_message(message.data, options_.limits, d)) {
    // The request id is unknown when the header itself is bad: reply with 0.
    reply_error(message.from, 0, "malformed message: " + *err);
    return;
  }
  if (const std::string err = check_request(message, d); !err.empty()) {
    reply_error(message.from, d.header.request_id, err);
    return;
  }
  handle_decoded(message, d);
}

std::string Server::check_reply_size(uint64_t rows, uint64_t width) const {
  // rows <= 2^32 (WireLimits::max_keys, or a table's rows) and width <= 2^20:
  // the product cannot wrap.
  const uint64_t bytes = rows * width * sizeof(float);
  if (bytes <= options_.limits.max_reply_bytes) return "";
  return std::to_string(rows) + " rows of width " + std::to_string(width) + " would need a reply of " +
         std::to_string(bytes) + " bytes, more than the " + std::to_string(options_.limits.max_reply_bytes) +
         " a reply may carry: pull fewer at a time";
}

std::string Server::check_request(const rdma::Message& message, const DecodedMessage& d) const {
  const WireHeader& h = d.header;
  const uint32_t first_worker = map_.num_servers();
  if (message.from < first_worker || message.from >= first_worker + map_.num_workers()) {
    return "peer " + std::to_string(message.from) + " is not a worker of this job";
  }
  if (h.sender != message.from) {
    return "sender field says rank " + std::to_string(h.sender) + " but the message came from rank " +
           std::to_string(message.from);
  }
  if (!is_request(h.op)) return std::string("op '") + to_string(h.op) + "' is not a request a server answers";
  if (h.clock < 0 || h.clock > kMaxWireClock || (h.op != Op::kClock && h.clock == kMaxWireClock)) {
    return std::string(h.op == Op::kClock ? "clock message" : to_string(h.op)) + " at clock " +
           std::to_string(h.clock) + ": a worker's clock is in [0, " +
           std::to_string(kMaxWireClock) + (h.op == Op::kClock ? "]" : ")");
  }
  if (h.op == Op::kClock) {
    if (h.key_count != 0 || h.payload_bytes != 0) return "clock message with keys or values";
    return "";
  }
  const TableSchema* schema = nullptr;
  for (const TableSchema& t : map_.tables) {
    if (t.id == h.table) schema = &t;
  }
  if (schema == nullptr) return "no table " + std::to_string(h.table);
  const uint64_t width = schema->width;
  if (h.op == Op::kPull || h.op == Op::kPush) {
    if (schema->kind != TableKind::kSparse) return "table " + std::to_string(h.table) + " is dense: use dense ops";
    const uint64_t want = h.op == Op::kPush ? h.key_count * width * sizeof(float) : 0;
    if (h.payload_bytes != want) {
      return std::string(to_string(h.op)) + " of " + std::to_string(h.key_count) + " keys of width " +
             std::to_string(width) + " needs " + std::to_string(want) + " payload bytes, not " +
             std::to_string(h.payload_bytes);
    }
    if (h.op == Op::kPull) {
      if (std::string err = check_reply_size(h.key_count, width); !err.empty()) return "pull of " + err;
    }
    // A server that owns every key (the only one) has nothing to check.
    const bool owns_all = range_.begin == 0 && range_.last;
    for (uint64_t key : owns_all ? std::span<const uint64_t>() : d.keys) {
      if (!range_.contains(mix64(key))) {
        return "key " + std::to_string(key) + " belongs to server " +
               std::to_string(map_.partition().server_of(key)) + ", not " + std::to_string(index_);
      }
    }
    return "";
  }
  if (schema->kind != TableKind::kDense) return "table " + std::to_string(h.table) + " is sparse: use pull/push";
  if (h.op == Op::kDenseRegion) {
    if (h.key_count != 0 || h.payload_bytes != 0) return "dense region request with keys or values";
    if (dense_regions_.count(h.table) == 0) {
      return "table " + std::to_string(h.table) + " has no one-sided region on server " + std::to_string(index_) +
             (endpoint_.supports_rma() ? " (no rows here)" : " (provider without FI_RMA)");
    }
    return "";
  }
  // Dense: keys = {first_row, rows}.
  if (h.key_count != 2) return "dense request needs 2 keys (first row, rows), not " + std::to_string(h.key_count);
  const uint64_t first = d.keys[0], rows = d.keys[1];
  const RowRange mine = dense_rows_of(schema->rows, index_, map_.num_servers());
  if (rows == 0 || first < mine.begin || first > mine.end || rows > mine.end - first) {
    return "rows [" + std::to_string(first) + ", +" + std::to_string(rows) + ") outside this server's rows [" +
           std::to_string(mine.begin) + ", " + std::to_string(mine.end) + ") of table " + std::to_string(h.table);
  }
  if (h.op == Op::kDensePull) {
    if (std::string err = check_reply_size(rows, width); !err.empty()) return "dense pull of " + err;
  }
  const uint64_t want = h.op == Op::kDensePush ? rows * width * sizeof(float) : 0;
  if (h.payload_bytes != want) {
    return std::string(to_string(h.op)) + " of " + std::to_string(rows) + " rows needs " + std::to_string(want) +
           " payload bytes, not " + std::to_string(h.payload_bytes);
  }
  return "";
}

bool Server::is_retried_push(uint32_t worker, uint64_t request_id) {
  const SeenRequests::Arrival a = seen_[worker].note(request_id);
  if (a == SeenRequests::Arrival::kSeen) return true;
  if (a == SeenRequests::Arrival::kLate) ++stats_.late_requests;
  last_push_id_[worker] = std::max(last_push_id_[worker], request_id);
  return false;
}

void Server::handle_decoded(const rdma::Message& message, const DecodedMessage& d) {
  const WireHeader& h = d.header;
  const uint32_t worker = message.from - map_.num_servers();
  const bool push = is_push(h.op);
  if (push && options_.drop_push_every > 0 && ++push_arrivals_ % options_.drop_push_every == 0) {
    ++stats_.pushes_dropped;  // fault injection: as if the transport had lost it
    return;
  }
  if (push && is_retried_push(worker, h.request_id)) {
    ++stats_.duplicate_pushes;
    reply_header(message.from, h, h.op == Op::kPush ? Op::kPushReply : Op::kDensePushReply, kFlagAppliedBefore);
    return;
  }
  switch (h.op) {
    case Op::kPush: {
      ++stats_.pushes;
      stats_.keys_pushed += d.keys.size();
      stats_.bytes_pushed += d.values.size() * sizeof(float);
      worker_bytes_pushed_[worker] += d.values.size() * sizeof(float);
      // A sparse push is answered before it is applied (see server.h): the
      // worker prepares its next push while this one is applied.
      reply_header(message.from, h, Op::kPushReply);
      if (merge_rounds_) {
        rounds_.add_sparse(h.clock, worker, h.table, d.keys, d.values.data(), map_.table(h.table).width);
      } else {
        stats_.refused_non_finite += sparse_.at(h.table)->push(d.keys, d.values.data(), pool_.get()).refused_non_finite;
      }
      return;
    }
    case Op::kDensePush: {
      if (merge_rounds_) {
        rounds_.add_dense(h.clock, worker, h.table, d.keys[0], d.keys[1], d.values.data(), map_.table(h.table).width);
      } else {
        apply_dense(h.table, d.keys[0], d.keys[1], d.values.data());
      }
      ++stats_.pushes;
      stats_.keys_pushed += d.keys[1];
      stats_.bytes_pushed += d.values.size() * sizeof(float);
      worker_bytes_pushed_[worker] += d.values.size() * sizeof(float);
      reply_header(message.from, h, Op::kDensePushReply);
      return;
    }
    case Op::kDenseRegion: {
      const DenseTable& t = *dense_.at(h.table);
      const rdma::RemoteKey key = dense_regions_.at(h.table).remote_key();
      uint64_t k[kRegionKeyCount];
      k[kRegionBeginRow] = t.begin_row();
      k[kRegionEndRow] = t.end_row();
      k[kRegionAddress] = key.address;
      k[kRegionKey] = key.key;
      k[kRegionLength] = key.length;
      k[kRegionValuesOffset] = static_cast<uint64_t>(reinterpret_cast<const std::byte*>(t.values()) -
                                                     static_cast<const std::byte*>(t.region()));
      k[kRegionClockOffset] = DenseTable::kClockWordOffset;
      k[kRegionStaleness] = options_.consistency.kind == ConsistencyModel::Kind::kAsp ? kRegionNoBound
                            : merge_rounds_                                          ? kRegionRounds
                                               : static_cast<uint64_t>(options_.consistency.staleness);
      WireHeader r;
      r.op = Op::kDenseRegionReply;
      r.table = h.table;
      r.sender = map_.server_rank(index_);
      r.request_id = h.request_id;
      reply(message.from, encode_message_as<rdma::ByteBuffer>(r, k));
      return;
    }
    case Op::kPull:
    case Op::kDensePull:
      if (!options_.consistency.allows(h.clock, clocks_.min_clock())) {
        ++stats_.parked;
        if (on_pull_parked) on_pull_parked(worker, h.clock, clocks_.min_clock());
        parked_.push_back({message, h.clock});
        stats_.parked_now = parked_.size();
        return;
      }
      answer_pull(message, d);
      return;
    case Op::kClock: {
      // Noted first; but a clock ahead of the worker's ticks whatever its id
      // (a rejoined server's checkpoint counts ids as seen that it has not
      // ticked).
      const SeenRequests::Arrival arrival = seen_[worker].note(h.request_id);
      const auto r = clocks_.tick(worker, h.clock);
      if (r == ClockTable::TickResult::kStale &&
          (h.clock == clocks_.clock(worker) || arrival != SeenRequests::Arrival::kFirst)) {
        // A clock this server has already passed, sent again: a worker
        // retries its unanswered clock to a server that rejoined, whose
        // checkpoint (written after the tick, before the reply got out) may
        // hold it; or sends again a clock whose request or reply the
        // transport lost, after its next clock got through. Ticking is
        // idempotent, so it is answered like the first.
        if (arrival == SeenRequests::Arrival::kLate) ++stats_.late_requests;
        ++stats_.duplicate_clocks;
        reply_header(message.from, h, Op::kClockReply);
        return;
      }
      if (r == ClockTable::TickResult::kStale) {
        reply_error(message.from, h.request_id,
                    "clock " + std::to_string(h.clock) + " is not past the worker's clock " +
                        std::to_string(clocks_.clock(worker)));
        return;
      }
      if (r == ClockTable::TickResult::kUnknownWorker) {
        reply_error(message.from, h.request_id, "worker " + std::to_string(worker) + " was removed from the job");
        return;
      }
      ++stats_.clocks;
      reply_header(message.from, h, Op::kClockReply);
      if (r == ClockTable::TickResult::kMinAdvanced) {
        // The rounds every live worker has now ended go in before the pulls
        // this tick releases read the table.
        apply_rounds_before(clocks_.min_clock());
        publish_min_clock();
        answer_parked();
      }
      return;
    }
    default:
      return;  // check_request let only requests through
  }
}

void Server::answer_pull(const rdma::Message& message, const DecodedMessage& d) {
  const WireHeader& h = d.header;
  if (merge_rounds_) {
    // Read-my-writes: the puller's own pushes are applied first, even when
    // the other workers have not ended their round (a worker that pulls
    // without ticking between, or a finished one evaluating).
    if (const auto newest = rounds_.newest_of(message.from - map_.num_servers())) {
      apply_rounds_before(*newest + 1, /*early=*/true);
    }
  }
  const bool dense = h.op == Op::kDensePull;
  const uint64_t width = map_.table(h.table).width;
  const uint64_t n = dense ? d.keys[1] : d.keys.size();
  WireHeader r;
  r.op = dense ? Op::kDensePullReply : Op::kPullReply;
  r.table = h.table;
  r.sender = map_.server_rank(index_);
  // The reply's clock is the data's: the minimum worker clock now, so the
  // values hold every worker's updates of iterations before it (SSP's
  // guarantee, and what a staleness-aware worker scales its step by).
  r.clock = clocks_.min_clock();
  r.request_id = h.request_id;
  r.payload_bytes = n * width * sizeof(float);
  // A large dense pull's rows are sent from the table itself, behind the
  // header: no copy (settle_lent keeps pushes off them until sent). Others
  // are written straight into the reply: one copy, from the table.
  constexpr uint64_t kLendBytes = 64 * 1024;
  const bool lend = dense && r.payload_bytes >= kLendBytes;
  rdma::ByteBuffer bytes(kWireHeaderBytes + (lend ? 0 : r.payload_bytes));  // not zero-filled: all is written
  encode_header(r, bytes.data());
  auto* out = reinterpret_cast<float*>(bytes.data() + kWireHeaderBytes);
  std::span<const float> lent;
  if (lend) {
    lent = dense_.at(h.table)->rows_in_place(d.keys[0], n);
  } else if (dense) {
    dense_.at(h.table)->pull(d.keys[0], n, out);
  } else {
    sparse_.at(h.table)->pull(d.keys, out, pool_.get());
  }
  ++stats_.pulls;
  stats_.keys_pulled += n;
  stats_.staleness.record(h.clock, clocks_.min_clock());
  if (on_pull_answered) on_pull_answered(message.from - map_.num_servers(), h.clock, clocks_.min_clock());
  reply(message.from, std::move(bytes), lent, h.table);
}

void Server::answer_parked() {
  // In arrival order: each worker's pulls stay in the order it sent them.
  std::deque<Parked> still;
  while (!parked_.empty()) {
    Parked p = std::move(parked_.front());
    parked_.pop_front();
    if (!options_.consistency.allows(p.clock, clocks_.min_clock())) {
      still.push_back(std::move(p));
      continue;
    }
    DecodedMessage d;
    (void)decode_message(p.message.data, options_.limits, d);  // validated when it arrived
    answer_pull(p.message, d);
  }
  parked_ = std::move(still);
  stats_.parked_now = parked_.size();
}

void Server::remove_worker(uint32_t worker_index) {
  clocks_.remove(worker_index);
  // Its pushes of the rounds it did not end stay in them.
  apply_rounds_before(clocks_.min_clock());
  publish_min_clock();
  answer_parked();
}

void Server::apply_rounds_before(int64_t clock, bool early) {
  if (rounds_.empty()) return;
  const MergedRounds::Sink sink{
      [&](uint32_t table, std::span<const uint64_t> keys, const float* grads) {
        stats_.refused_non_finite += sparse_.at(table)->push(keys, grads, pool_.get()).refused_non_finite;
      },
      [&](uint32_t table, uint64_t first_row, uint64_t rows, const float* grads) {
        apply_dense(table, first_row, rows, grads);
      }};
  const size_t n = rounds_.take_before(clock, sink);
  stats_.rounds_applied += n;
  if (early) stats_.rounds_applied_early += n;
}

void Server::publish_min_clock() {
  // After the updates it stands for (the rounds before it are applied, and
  // without rounds every push was applied when it arrived, before the ticks
  // that follow it): one-sided readers check their SSP bound against it.
  const int64_t m = clocks_.min_clock();
  for (auto& [id, t] : dense_) t->publish_clock(m);
}

void Server::remove_worker_later(uint32_t worker_index) {
  std::lock_guard lock(dead_mu_);
  dead_pending_.push_back(worker_index);
}

ServerStats Server::stats() const {
  std::lock_guard lock(stats_mu_);
  return published_stats_;
}

void Server::publish_stats() {
  std::lock_guard lock(stats_mu_);
  published_stats_ = stats_;  // assignment: the histogram's vector keeps its memory
}

void Server::reply(uint32_t to, rdma::ByteBuffer bytes, std::span<const float> lent, uint32_t lent_table) {
  publish_stats();  // before the reply: whoever it reaches sees what led to it
  InFlightReply r;
  r.to = to;
  // Tagged with its request's id: a worker may have a landing for it (its
  // dense pull's rows received straight into the caller's array).
  const uint64_t tag = bytes.size() >= kWireHeaderBytes ? request_id_of(bytes.data()) : 0;
  if (lent.empty()) {
    r.sent = endpoint_.send(to, tag, bytes.data(), bytes.size());
  } else {
    const rdma::ConstBuffer pieces[2] = {{bytes.data(), bytes.size()}, {lent.data(), lent.size_bytes()}};
    r.sent = endpoint_.send(to, tag, pieces);
    r.lent_table = lent_table;
  }
  r.bytes = std::move(bytes);
  in_flight_.push_back(std::move(r));
  if (in_flight_.size() > 1024) reap_replies(false);
}

void Server::reply_header(uint32_t to, const WireHeader& request, Op op, uint8_t flags) {
  WireHeader r;
  r.op = op;
  r.flags = flags;
  r.table = request.table;
  r.sender = map_.server_rank(index_);
  r.clock = request.clock;
  r.request_id = request.request_id;
  rdma::ByteBuffer bytes(kWireHeaderBytes);
  encode_header(r, bytes.data());
  reply(to, std::move(bytes));
}

void Server::reply_error(uint32_t to, uint64_t request_id, const std::string& what) {
  ++stats_.bad_messages;
  stats_.last_error = "from rank " + std::to_string(to) + ": " + what;
  WireHeader r;
  r.op = Op::kError;
  r.sender = map_.server_rank(index_);
  r.request_id = request_id;
  reply(to, encode_message_as<rdma::ByteBuffer>(r, {}, std::as_bytes(std::span(what.data(), what.size()))));
}

void Server::reap_replies(bool all) {
  while (!in_flight_.empty()) {
    InFlightReply& r = in_flight_.front();
    if (!all && !r.sent.is_ready()) break;
    if (const rdma::Status st = endpoint_.wait(r.sent); !st.ok()) {
      ++stats_.reply_failures;
      stats_.last_reply_failure = st.to_string();
    }
    in_flight_.pop_front();
  }
}

bool Server::worker_gone(uint32_t rank) {
  const uint32_t w = rank - map_.num_servers();
  if (!clocks_.live(w)) return true;
  std::lock_guard lock(dead_mu_);
  return std::find(dead_pending_.begin(), dead_pending_.end(), w) != dead_pending_.end();
}

void Server::settle_lent(uint32_t table) {
  // Until every reply lending the table has been sent, or has a peer that
  // was declared dead meanwhile (checked between short waits: such a send
  // may end only at the endpoint's timeout). A reply that fails ends too.
  const rdma::EndpointOptions& eo = endpoint_.options();
  const bool thread_progress = eo.progress_thread && !eo.busy_poll;
  for (;;) {
    InFlightReply* waiting = nullptr;
    for (InFlightReply& r : in_flight_) {
      if (r.lent_table != table || r.sent.is_ready()) continue;
      if (worker_gone(r.to)) {
        r.lent_table.reset();  // stays in in_flight_ until its send ends, lending nothing
        continue;
      }
      if (waiting == nullptr) waiting = &r;
    }
    if (waiting == nullptr) return;
    if (thread_progress) {
      (void)waiting->sent.wait_for(std::chrono::milliseconds(2));
    } else {
      endpoint_.progress();  // this thread drives the endpoint (busy polling, or no progress thread)
    }
  }
}

void Server::apply_dense(uint32_t table, uint64_t first_row, uint64_t rows, const float* grads) {
  settle_lent(table);
  stats_.refused_non_finite += dense_.at(table)->push(first_row, rows, grads, pool_.get()).refused_non_finite;
}

}  // namespace parafab::ps
