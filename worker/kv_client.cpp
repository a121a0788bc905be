#include "worker/kv_client.h"

#include <algorithm>
#include <limits>
#include <cstring>
#include <deque>
#include <functional>
#include <numeric>

#include "worker/key_dedup.h"

namespace parafab::worker {
namespace {

using Clock = std::chrono::steady_clock;

// dense_read reads the words before a shard's clock word with it, in one
// small read; a region that puts the clock further out is refused.
constexpr uint64_t kMaxClockOffset = 56;

// A dense pull's part of at least this many bytes is received straight into
// the caller's array (rdma::Endpoint::expect) rather than copied there from
// the reply: from here on the server sends it from its table in place too,
// as one large message.
constexpr uint64_t kLandBytes = 64 * 1024;

std::future<rdma::Status> ready(rdma::Status s) {
  std::promise<rdma::Status> p;
  p.set_value(std::move(s));
  return p.get_future();
}

}  // namespace

struct KvClient::Pending {
  uint64_t id = 0;
  ps::Op request_op = ps::Op::kPull;
  ps::Op reply_op = ps::Op::kPullReply;
  uint32_t table = 0;
  uint64_t width = 1;
  std::promise<rdma::Status> promise;
  rdma::Status error;
  Clock::time_point deadline;
  // Server rank -> the message for it; built before start(), sent by it.
  // Not zero-filled: push and pull write every byte of their messages.
  std::unordered_map<uint32_t, rdma::ByteBuffer> messages;
  std::unordered_map<uint32_t, bool> answered;
  // Pushes: server rank -> gradient bytes in its message (what the server
  // counts as applied).
  std::unordered_map<uint32_t, uint64_t> value_bytes;
  // Pushes: the servers whose rejoin counted this unanswered push as held
  // by their checkpoint (server_rejoined); an answer without
  // ps::kFlagAppliedBefore says it was not, and the count is mended.
  std::vector<uint32_t> counted_held;
  size_t remaining = 0;
  bool posting = true;  // start() is still sending: only it may finish the request
  struct Send {
    uint32_t server = 0;
    uint64_t epoch = 0;  // the server's epoch (KvClient::epochs_) when sent
    rdma::Completion done;
  };
  std::vector<Send> sends;
  // Clocks: the servers its message is not sent to yet, for an earlier push
  // of this worker they have not answered (clock()).
  std::vector<uint32_t> held;
  bool holds(uint32_t server) const { return std::find(held.begin(), held.end(), server) != held.end(); }
  bool unanswered = false;  // failed by the deadline with a server's reply missing
  Clock::time_point resend_at = Clock::time_point::max();  // reads: when unanswered servers get it again
  // Pulls: server rank -> output row of each key it was asked for, in order.
  std::unordered_map<uint32_t, std::vector<uint32_t>> rows;
  std::vector<std::pair<uint32_t, uint32_t>> duplicates;  // (row, copy of row)
  // Dense pulls: a landing for each part large enough to be received
  // straight into the caller's array (kLandBytes), from start() to finish().
  std::vector<rdma::LandingId> landings;
  float* out = nullptr;
  int64_t* data_clock = nullptr;  // pulls: min over the servers' reply clocks
  uint64_t pull_bytes = 0;
  std::vector<uint64_t> reply_keys;  // kDenseRegionReply
  std::shared_ptr<std::vector<uint64_t>> reply_keys_out;  // where finish() hands them
};

KvClient::KvClient(rdma::Endpoint& endpoint, const ps::ClusterMap& map, uint32_t worker_index,
                   KvClientOptions options)
    : endpoint_(endpoint),
      map_(map),
      worker_index_(worker_index),
      options_(options),
      acked_push_bytes_(map.num_servers(), 0),
      lost_push_bytes_(map.num_servers(), 0) {
  if (worker_index >= map.num_workers()) {
    throw std::invalid_argument("worker index " + std::to_string(worker_index) + " but the job has " +
                                std::to_string(map.num_workers()) + " workers");
  }
  receiver_ = std::thread([this] { receive_loop(); });
}

KvClient::~KvClient() {
  stop_ = true;
  if (receiver_.joinable()) receiver_.join();
  std::lock_guard lock(mu_);
  for (auto& [id, p] : pending_) {
    withdraw_landings(*p);
    p->promise.set_value(rdma::Status(rdma::StatusCode::kClosed, "KV client closed before the reply"));
    for (auto& s : p->sends) {
      if (s.done.valid()) (void)endpoint_.wait(s.done);
    }
  }
}

KvClientStats KvClient::stats() const {
  std::lock_guard lock(mu_);
  KvClientStats s = stats_;
  for (const uint64_t lost : lost_push_bytes_) s.bytes_lost_in_rejoins += lost;
  return s;
}

std::vector<uint64_t> KvClient::acked_push_bytes() const {
  std::lock_guard lock(mu_);
  return acked_push_bytes_;
}

// Sends every message of `p` and registers it for replies. Sends are waited
// on by the receive loop (their buffers live in `p` until then).
std::future<rdma::Status> KvClient::start(std::unique_ptr<Pending> p, std::shared_ptr<std::vector<uint64_t>> reply_keys) {
  // Numbered and sent under one lock: each server sees this worker's
  // requests in the order of their ids, which is how it tells a retried
  // push from a new one (ps::Server).
  std::lock_guard order(send_mu_);
  return start_locked(std::move(p), std::move(reply_keys));
}

std::future<rdma::Status> KvClient::start_locked(std::unique_ptr<Pending> p,
                                                 std::shared_ptr<std::vector<uint64_t>> reply_keys) {
  p->reply_keys_out = std::move(reply_keys);
  p->id = next_request_.fetch_add(1);
  // While a server may rejoin, a request waits for it too.
  const auto now = Clock::now();
  p->deadline = now + options_.timeout + map_.server_rejoin_timeout;
  if (options_.resend_after.count() > 0) p->resend_at = now + options_.resend_after;
  p->remaining = p->messages.size();
  std::future<rdma::Status> fut = p->promise.get_future();
  if (p->remaining == 0) {
    p->promise.set_value({});
    return fut;
  }
  Pending* raw = p.get();
  for (auto& [server, bytes] : raw->messages) {
    // The request id is known only now: patch it into each header.
    ps::set_request_id(bytes.data(), raw->id);
    raw->answered[server] = false;
  }
  // Before the requests go out: their replies may come at once. A reply is
  // tagged with its request's id (ps::Server::reply). A dense pull's part
  // is its server's consecutive rows of `out`, from rows[server][0] on.
  if (raw->request_op == ps::Op::kDensePull && options_.land_dense_pulls) {
    for (const auto& [server, rows] : raw->rows) {
      const uint64_t bytes = rows.size() * raw->width * sizeof(float);
      if (bytes < kLandBytes) continue;
      raw->landings.push_back(endpoint_.expect({.from = server, .tag = raw->id, .head_bytes = ps::kWireHeaderBytes,
                                                .tail = raw->out + uint64_t{rows[0]} * raw->width, .tail_bytes = bytes}));
    }
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.requests;
    if (raw->request_op == ps::Op::kClock) {
      for (const auto& [server, bytes] : raw->messages) {
        if (clock_waits_locked(raw->id, server)) raw->held.push_back(server);
      }
      if (!raw->held.empty()) ++holding_clocks_;
      stats_.clocks_held += raw->held.size();
    }
    pending_.emplace(raw->id, std::move(p));
  }
  // Registered first, since a reply can arrive before send() returns; but
  // while `posting` nobody else finishes or frees the request.
  std::vector<Pending::Send> sends;
  for (auto& [server, bytes] : raw->messages) {
    if (raw->holds(server)) continue;
    sends.push_back({server, epoch_of(server), endpoint_.send(server, 0, bytes.data(), bytes.size())});
  }
  std::unique_ptr<Pending> done;
  Sends released;
  {
    std::lock_guard lock(mu_);
    raw->sends = std::move(sends);
    raw->posting = false;
    if (raw->remaining == 0) {
      done = std::move(pending_.at(raw->id));
      pending_.erase(raw->id);
    } else if (!raw->held.empty()) {
      release_held_locked(*raw, released);  // the pushes may have been answered meanwhile
    }
  }
  if (done) finish(std::move(done));
  if (!released.empty()) send_late(released, /*overdue=*/false);
  return fut;
}

bool KvClient::clock_waits_locked(uint64_t id, uint32_t server) const {
  for (const auto& [other, p] : pending_) {
    if (other >= id) continue;
    if (ps::is_push(p->request_op)) {
      const auto a = p->answered.find(server);
      if (a != p->answered.end() && !a->second) return true;  // unanswered
    } else if (p->request_op == ps::Op::kClock) {
      if (p->holds(server) || (p->posting && p->messages.contains(server))) return true;
    }
  }
  return false;
}

void KvClient::release_held_locked(Pending& p, Sends& out) {
  if (p.posting || p.held.empty()) return;
  std::vector<uint32_t> go;
  std::erase_if(p.held, [&](uint32_t server) {
    if (clock_waits_locked(p.id, server)) return false;
    go.push_back(server);
    return true;
  });
  if (go.empty()) return;
  if (p.held.empty()) --holding_clocks_;
  // Sent only now: its wait for a reply starts now, or the next sweep would
  // take it for overdue and send a copy right behind it.
  if (options_.resend_after.count() > 0) p.resend_at = Clock::now() + options_.resend_after;
  p.posting = true;  // as in start(): nobody else finishes or frees it while it is sent
  out.emplace_back(&p, std::move(go));
}

void KvClient::release_held_locked(Sends& out) {
  if (holding_clocks_ == 0) return;
  for (auto& [id, p] : pending_) release_held_locked(*p, out);  // in no order: send_late sorts
}

void KvClient::withdraw_landings(Pending& p) {
  for (const rdma::LandingId id : p.landings) {
    if (!endpoint_.withdraw(id) && p.error.ok()) {
      p.error = rdma::Status(rdma::StatusCode::kTimedOut,
                             "dense pull request " + std::to_string(p.id) +
                                 ": a reply still being received into the caller's array did not end within the "
                                 "timeout; the transport may still write it");
    }
  }
  p.landings.clear();
}

void KvClient::finish(std::unique_ptr<Pending> done) {
  // Before the caller gets its array back: nothing may land in it after.
  withdraw_landings(*done);
  if (done->reply_keys_out) *done->reply_keys_out = std::move(done->reply_keys);
  if (done->error.ok() && done->out != nullptr) {
    for (auto [row, copy] : done->duplicates) {
      std::memcpy(done->out + uint64_t{copy} * done->width, done->out + uint64_t{row} * done->width,
                  done->width * sizeof(float));
    }
  }
  // The sends completed before their replies could arrive, but collect
  // their status (and keep the buffers until then).
  for (auto& send : done->sends) {
    if (!send.done.valid()) continue;  // sweep() already collected it
    const rdma::Status s = endpoint_.wait(send.done);
    // A send to a server's old process is superseded by the resend (and
    // ready: replace_peer ended it, server_rejoined).
    if (!s.ok() && done->error.ok() && send.epoch == epoch_of(send.server)) done->error = s;
  }
  done->promise.set_value(done->error);
}

// Builds one message per server straight from the caller's arrays: the
// keys (and values) are written once, into the buffers the transport sends.
struct KvClient::Split {
  std::vector<uint32_t> first;               // positions of first occurrences, in order
  std::vector<std::pair<uint32_t, uint32_t>> duplicates;  // (position, its first occurrence)
  std::vector<uint32_t> server;              // per entry of `first`
  std::vector<uint64_t> count;               // keys per server
  bool increasing = false;                   // the keys were strictly increasing (so is each server's share)
};

namespace {

// Writes each server's keys into its message's key section: 8 bytes a key,
// or (delta_varint, for strictly increasing keys) as ps::kFlagDeltaVarintKeys
// says. bytes(s) first, for the sizes; then at(s, section) once a server's
// section is allocated, put(s, key) in key order, and finish() pads.
class KeySections {
 public:
  KeySections(const std::vector<uint64_t>& count, bool delta_varint, std::span<const uint64_t> keys,
              const std::vector<uint32_t>& server)
      : varint_(delta_varint), bytes_(count.size()), at_(count.size()), end_(count.size()), prev_(count.size(), 0) {
    for (size_t s = 0; s < count.size(); ++s) bytes_[s] = count[s] * 8;
    if (!varint_) return;
    std::fill(bytes_.begin(), bytes_.end(), 0);
    for (size_t j = 0; j < keys.size(); ++j) {
      const uint32_t s = server[j];
      bytes_[s] += ps::varint_bytes(keys[j] - prev_[s]);
      prev_[s] = keys[j];
    }
    for (uint64_t& b : bytes_) b = ps::padded_varint_section(b);
    std::fill(prev_.begin(), prev_.end(), 0);
  }
  uint8_t flags() const { return varint_ ? ps::kFlagDeltaVarintKeys : ps::kFlagNone; }
  uint64_t bytes(uint32_t s) const { return bytes_[s]; }
  void at(uint32_t s, std::byte* section) {
    at_[s] = section;
    end_[s] = section + bytes_[s];
  }
  void put(uint32_t s, uint64_t key) {
    if (varint_) {
      at_[s] = ps::put_varint(at_[s], key - prev_[s]);
      prev_[s] = key;
    } else {
      std::memcpy(at_[s], &key, 8);
      at_[s] += 8;
    }
  }
  void finish() {
    for (size_t s = 0; s < at_.size(); ++s) {
      if (at_[s] != nullptr) std::memset(at_[s], 0, static_cast<size_t>(end_[s] - at_[s]));
    }
  }

 private:
  bool varint_;
  std::vector<uint64_t> bytes_;
  std::vector<std::byte*> at_, end_;
  std::vector<uint64_t> prev_;
};

}  // namespace

KvClient::Split KvClient::split(std::span<const uint64_t> keys) const {
  Split sp;
  // Strictly increasing keys (a trainer's batch after sort and unique, the
  // order ps-lite requires) hold no duplicate: one sequential pass instead
  // of the hash table (~5 ns a key at 10^5 keys, most of a push's work on
  // the worker).
  if (std::adjacent_find(keys.begin(), keys.end(), std::greater_equal<uint64_t>()) == keys.end()) {
    sp.increasing = true;
    sp.first.resize(keys.size());
    std::iota(sp.first.begin(), sp.first.end(), uint32_t{0});
  } else {
    KeyDedup dedup(keys.size());
    sp.first.reserve(keys.size());
    dedup.insert_all(keys, sp.first, sp.duplicates);
  }
  sp.count.assign(map_.num_servers(), 0);
  if (map_.num_servers() == 1) {
    sp.server.assign(sp.first.size(), 0);
    sp.count[0] = sp.first.size();
    return sp;
  }
  const ps::KeyPartition part = map_.partition();
  sp.server.resize(sp.first.size());
  for (size_t j = 0; j < sp.first.size(); ++j) {
    sp.server[j] = part.server_of(keys[sp.first[j]]);
    ++sp.count[sp.server[j]];
  }
  return sp;
}

std::future<rdma::Status> KvClient::push(uint32_t table, std::span<const uint64_t> keys, std::span<const float> grads) {
  const ps::TableSchema& schema = map_.table(table);
  const uint64_t w = schema.width;
  if (schema.kind != ps::TableKind::kSparse) return ready({rdma::StatusCode::kInvalidArgument, "push to a dense table: use dense_push"});
  if (grads.size() != keys.size() * w) {
    return ready({rdma::StatusCode::kInvalidArgument,
                  "push of " + std::to_string(keys.size()) + " keys of width " + std::to_string(w) + " needs " +
                      std::to_string(keys.size() * w) + " gradients, got " + std::to_string(grads.size())});
  }
  if (keys.empty()) return ready({});  // nothing to send to any server
  const Split sp = split(keys);
  // Duplicates: their gradients are summed into the first occurrence's.
  const float* g = grads.data();
  std::vector<float> summed;
  if (!sp.duplicates.empty()) {
    summed.assign(grads.begin(), grads.end());
    for (auto [i, first] : sp.duplicates) {
      for (uint64_t c = 0; c < w; ++c) summed[first * w + c] += grads[i * w + c];
    }
    g = summed.data();
  }
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kPush;
  p->reply_op = ps::Op::kPushReply;
  p->table = table;
  p->width = w;
  const bool varint = options_.delta_varint_keys && sp.increasing;
  KeySections sections(sp.count, varint, keys, sp.server);
  std::vector<std::byte*> value_at(map_.num_servers(), nullptr);
  std::byte* only_keys = nullptr;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    if (sp.count[s] == 0) continue;
    ps::WireHeader h{.op = ps::Op::kPush, .flags = sections.flags(), .table = table, .sender = rank(),
                     .clock = clock_.load(), .key_count = sp.count[s], .payload_bytes = sp.count[s] * w * sizeof(float)};
    auto& bytes = p->messages[map_.server_rank(s)];
    p->value_bytes[map_.server_rank(s)] = h.payload_bytes;
    bytes.resize(ps::kWireHeaderBytes + sections.bytes(s) + h.payload_bytes);
    ps::encode_header(h, bytes.data());
    only_keys = bytes.data() + ps::kWireHeaderBytes;
    sections.at(s, only_keys);
    value_at[s] = only_keys + sections.bytes(s);
  }
  if (sp.first.size() == keys.size() && map_.num_servers() == 1 && !varint) {
    // No duplicate and one server: the keys and gradients as given.
    std::memcpy(only_keys, keys.data(), keys.size() * 8);
    std::memcpy(value_at[0], g, keys.size() * w * sizeof(float));
  } else {
    // A gradient row is w floats: width 1 copies one float, not a memcpy call.
    for (size_t j = 0; j < sp.first.size(); ++j) {
      const uint32_t s = sp.server[j], i = sp.first[j];
      sections.put(s, keys[i]);
      if (w == 1) {
        std::memcpy(value_at[s], g + i, sizeof(float));
      } else {
        std::memcpy(value_at[s], g + uint64_t{i} * w, w * sizeof(float));
      }
      value_at[s] += w * sizeof(float);
    }
    sections.finish();
  }
  {
    std::lock_guard lock(mu_);
    stats_.push_bytes += sp.first.size() * w * sizeof(float);
  }
  return start(std::move(p));
}

std::future<rdma::Status> KvClient::pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                         int64_t* data_clock) {
  const ps::TableSchema& schema = map_.table(table);
  if (schema.kind != ps::TableKind::kSparse) return ready({rdma::StatusCode::kInvalidArgument, "pull from a dense table: use dense_pull"});
  const Split sp = split(keys);
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kPull;
  p->reply_op = ps::Op::kPullReply;
  p->table = table;
  p->width = schema.width;
  p->out = out;
  p->data_clock = data_clock;
  if (data_clock != nullptr) *data_clock = std::numeric_limits<int64_t>::max();
  p->duplicates.reserve(sp.duplicates.size());
  for (auto [i, first] : sp.duplicates) p->duplicates.emplace_back(first, i);
  KeySections sections(sp.count, options_.delta_varint_keys && sp.increasing, keys, sp.server);
  std::vector<std::vector<uint32_t>*> rows_of(map_.num_servers(), nullptr);
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    if (sp.count[s] == 0) continue;
    ps::WireHeader h{.op = ps::Op::kPull, .flags = sections.flags(), .table = table, .sender = rank(),
                     .clock = clock_.load(), .key_count = sp.count[s]};
    auto& bytes = p->messages[map_.server_rank(s)];
    bytes.resize(ps::kWireHeaderBytes + sections.bytes(s));
    ps::encode_header(h, bytes.data());
    sections.at(s, bytes.data() + ps::kWireHeaderBytes);
    rows_of[s] = &p->rows[map_.server_rank(s)];
    rows_of[s]->reserve(sp.count[s]);
  }
  for (size_t j = 0; j < sp.first.size(); ++j) {
    const uint32_t s = sp.server[j], i = sp.first[j];
    sections.put(s, keys[i]);
    rows_of[s]->push_back(i);
  }
  sections.finish();
  return start(std::move(p));
}

rdma::Status KvClient::check_dense_rows(const char* op, uint32_t table, uint64_t first_row, uint64_t rows) const {
  const ps::TableSchema& schema = map_.table(table);
  if (schema.kind != ps::TableKind::kDense) {
    return {rdma::StatusCode::kInvalidArgument, std::string(op) + ": table " + std::to_string(table) + " is sparse"};
  }
  if (first_row > schema.rows || rows > schema.rows - first_row) {
    return {rdma::StatusCode::kInvalidArgument, std::string(op) + " of rows [" + std::to_string(first_row) + ", +" +
                                                    std::to_string(rows) + ") on table " + std::to_string(table) +
                                                    " of " + std::to_string(schema.rows) + " rows"};
  }
  return {};
}

std::vector<KvClient::DensePart> KvClient::dense_parts(const ps::TableSchema& schema, uint64_t first_row,
                                                       uint64_t rows) const {
  std::vector<DensePart> parts;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    const ps::RowRange r = ps::dense_rows_of(schema.rows, s, map_.num_servers());
    const uint64_t b = std::max(r.begin, first_row), e = std::min(r.end, first_row + rows);
    if (b < e) parts.push_back({s, b, e});
  }
  return parts;
}

std::future<rdma::Status> KvClient::dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                               std::span<const float> grads) {
  if (rdma::Status st = check_dense_rows("dense_push", table, first_row, rows); !st.ok()) return ready(st);
  const ps::TableSchema& schema = map_.table(table);
  if (grads.size() != rows * schema.width) {
    return ready({rdma::StatusCode::kInvalidArgument, "dense_push of rows [" + std::to_string(first_row) + ", +" +
                                                          std::to_string(rows) + ") with " +
                                                          std::to_string(grads.size()) + " floats, not rows x " +
                                                          std::to_string(schema.width)});
  }
  if (rows > 0) {
    std::lock_guard lock(mu_);
    int64_t& c = dense_push_clock_[table];
    c = std::max(c, clock_.load());
  }
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kDensePush;
  p->reply_op = ps::Op::kDensePushReply;
  p->table = table;
  p->width = schema.width;
  for (const auto [s, b, e] : dense_parts(schema, first_row, rows)) {
    const uint64_t range[2] = {b, e - b};
    ps::WireHeader h{.op = ps::Op::kDensePush, .table = table, .sender = rank(), .clock = clock_.load()};
    p->value_bytes[map_.server_rank(s)] = (e - b) * schema.width * sizeof(float);
    const auto rows_of_part = grads.subspan((b - first_row) * schema.width, (e - b) * schema.width);
    p->messages[map_.server_rank(s)] = ps::encode_message_as<rdma::ByteBuffer>(h, range, std::as_bytes(rows_of_part));
  }
  return start(std::move(p));
}

std::optional<int64_t> KvClient::last_dense_push_clock(uint32_t table) const {
  std::lock_guard lock(mu_);
  const auto it = dense_push_clock_.find(table);
  if (it == dense_push_clock_.end()) return std::nullopt;
  return it->second;
}

bool KvClient::dense_push_in_flight(uint32_t table) const {
  // A request stays in pending_ from before its first send until it is
  // answered, failed or timed out.
  std::lock_guard lock(mu_);
  return std::any_of(pending_.begin(), pending_.end(), [&](const auto& p) {
    return p.second->request_op == ps::Op::kDensePush && p.second->table == table;
  });
}

std::future<rdma::Status> KvClient::dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out,
                                               int64_t* data_clock) {
  if (rdma::Status st = check_dense_rows("dense_pull", table, first_row, rows); !st.ok()) return ready(st);
  const ps::TableSchema& schema = map_.table(table);
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kDensePull;
  p->reply_op = ps::Op::kDensePullReply;
  p->table = table;
  p->width = schema.width;
  p->out = out;
  p->data_clock = data_clock;
  if (data_clock != nullptr) *data_clock = std::numeric_limits<int64_t>::max();
  for (const auto [s, b, e] : dense_parts(schema, first_row, rows)) {
    const uint64_t range[2] = {b, e - b};
    // Output rows of this server's part: consecutive, starting at b - first_row.
    auto& out_rows = p->rows[map_.server_rank(s)];
    for (uint64_t row = b; row < e; ++row) out_rows.push_back(static_cast<uint32_t>(row - first_row));
    ps::WireHeader h{.op = ps::Op::kDensePull, .table = table, .sender = rank(), .clock = clock_.load()};
    p->messages[map_.server_rank(s)] = ps::encode_message_as<rdma::ByteBuffer>(h, range);
  }
  return start(std::move(p));
}

std::future<rdma::Status> KvClient::finish() {
  finished_ = true;
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kClock;
  p->reply_op = ps::Op::kClockReply;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    ps::WireHeader h{.op = ps::Op::kClock, .sender = rank(), .clock = kFinishedClock};
    p->messages[map_.server_rank(s)] = ps::encode_message_as<rdma::ByteBuffer>(h, {});
  }
  return start(std::move(p));
}

std::future<rdma::Status> KvClient::clock() {
  const int64_t next = clock_.fetch_add(1) + 1;
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kClock;
  p->reply_op = ps::Op::kClockReply;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    ps::WireHeader h{.op = ps::Op::kClock, .sender = rank(), .clock = next};
    p->messages[map_.server_rank(s)] = ps::encode_message_as<rdma::ByteBuffer>(h, {});
  }
  return start(std::move(p));
}

rdma::Status KvClient::dense_region(uint32_t table, uint32_t server, DenseRegion& out) {
  {
    std::lock_guard lock(regions_mu_);
    if (auto it = regions_.find({table, server}); it != regions_.end()) {
      out = it->second;
      return {};
    }
  }
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kDenseRegion;
  p->reply_op = ps::Op::kDenseRegionReply;
  p->table = table;
  ps::WireHeader h{.op = ps::Op::kDenseRegion, .table = table, .sender = rank(), .clock = clock_.load()};
  p->messages[server] = ps::encode_message_as<rdma::ByteBuffer>(h, {});
  // finish() hands the reply's keys over through a shared slot before it
  // sets the promise.
  auto keys = std::make_shared<std::vector<uint64_t>>();
  std::future<rdma::Status> f = start(std::move(p), keys);
  const rdma::Status s = f.get();
  if (!s.ok()) return s;
  if (keys->size() != ps::kRegionKeyCount) {
    return rdma::Status(rdma::StatusCode::kPeerError, "server " + std::to_string(server) + " sent a region of " +
                                                          std::to_string(keys->size()) + " fields");
  }
  out.begin_row = (*keys)[ps::kRegionBeginRow];
  out.end_row = (*keys)[ps::kRegionEndRow];
  out.values_offset = (*keys)[ps::kRegionValuesOffset];
  out.key = rdma::RemoteKey{(*keys)[ps::kRegionAddress], (*keys)[ps::kRegionKey], (*keys)[ps::kRegionLength]};
  out.clock_offset = (*keys)[ps::kRegionClockOffset];
  out.staleness = (*keys)[ps::kRegionStaleness];
  out.rounds = out.staleness == ps::kRegionRounds;
  if (out.rounds) out.staleness = 0;
  if (out.clock_offset % 8 != 0 || out.clock_offset < 8 || out.clock_offset > kMaxClockOffset ||
      out.clock_offset + 8 > out.values_offset || out.values_offset > out.key.length) {
    return rdma::Status(rdma::StatusCode::kPeerError,
                        "server " + std::to_string(server) + " sent a region whose clock word (byte " +
                            std::to_string(out.clock_offset) + ") or values (byte " +
                            std::to_string(out.values_offset) + ") do not fit its " +
                            std::to_string(out.key.length) + " bytes");
  }
  std::lock_guard lock(regions_mu_);
  regions_[{table, server}] = out;
  return {};
}

rdma::Status KvClient::dense_read(uint32_t table, uint64_t first_row, uint64_t rows, float* out,
                                  int64_t* data_clock) {
  const DenseSlice one{table, first_row, rows, out};
  return dense_read(std::span(&one, 1), data_clock);
}

rdma::Status KvClient::dense_read(std::span<const DenseSlice> slices, int64_t* data_clock) {
  for (const DenseSlice& sl : slices) {
    if (rdma::Status st = check_dense_rows("dense_read", sl.table, sl.first_row, sl.rows); !st.ok()) return st;
  }
  if (!endpoint_.supports_rma()) {
    return {rdma::StatusCode::kUnsupported, "dense_read: provider '" + endpoint_.provider().provider + "' has no FI_RMA"};
  }
  if (data_clock != nullptr) *data_clock = std::numeric_limits<int64_t>::max();
  const int64_t my_clock = clock_.load();
  // One per (slice, server holding some of its rows); all are read side by
  // side, a phase at a time.
  struct Shard {
    uint32_t table = 0, server = 0;
    uint64_t begin = 0, end = 0;
    float* dst = nullptr;
    DenseRegion region;
    uint64_t offset = 0, bytes = 0;  // the rows' place in the region
    bool read = false, by_message = false;
    std::optional<int64_t> pushed_at;  // this worker's clock at its last dense push to the table
    // A small shard is read with the words before it in one read: `whole`
    // holds [0, offset + bytes); otherwise head holds the words up to the clock.
    std::vector<uint64_t> whole;
    alignas(8) uint64_t head[kMaxClockOffset / 8 + 1] = {};
    alignas(8) uint64_t v2 = 0;
    rdma::Completion op;                // the current RMA read
    std::future<rdma::Status> pulled;   // the message pull, by_message
    const uint64_t* words() const { return whole.empty() ? head : whole.data(); }
    uint64_t version() const { return words()[0]; }
    int64_t published() const { return static_cast<int64_t>(words()[region.clock_offset / 8]); }
  };
  std::vector<Shard> shards;
  for (const DenseSlice& sl : slices) {
    const ps::TableSchema& schema = map_.table(sl.table);
    const uint64_t row_bytes = uint64_t{schema.width} * sizeof(float);
    // Read-my-writes: a dense push of this worker to the table not
    // answered yet may not be applied; a message pull is answered after it.
    // Under BSP rounds an answered one may still wait in its round (below).
    const bool pushing = dense_push_in_flight(sl.table);
    const std::optional<int64_t> pushed_at = last_dense_push_clock(sl.table);
    for (const auto [s, b, e] : dense_parts(schema, sl.first_row, sl.rows)) {
      Shard& sh = shards.emplace_back();
      sh.table = sl.table;
      sh.server = map_.server_rank(s);
      sh.begin = b;
      sh.end = e;
      sh.dst = sl.out + (b - sl.first_row) * schema.width;
      if (rdma::Status st = dense_region(sl.table, sh.server, sh.region); !st.ok()) return st;
      if (b < sh.region.begin_row || e > sh.region.end_row) {
        return {rdma::StatusCode::kPeerError, "server " + std::to_string(s) + " holds rows [" +
                                                  std::to_string(sh.region.begin_row) + ", " +
                                                  std::to_string(sh.region.end_row) + ") of table " +
                                                  std::to_string(sl.table) + ", not the map's"};
      }
      sh.offset = sh.region.values_offset + (b - sh.region.begin_row) * row_bytes;
      sh.bytes = (e - b) * row_bytes;
      sh.by_message = pushing;
      sh.pushed_at = pushed_at;
    }
  }
  auto wait_all = [&](auto&& which) -> rdma::Status {
    rdma::Status first;
    for (Shard& sh : shards) {
      if (!which(sh) || !sh.op.valid()) continue;
      const rdma::Status st = endpoint_.wait(sh.op);
      if (!st.ok() && first.ok()) first = st;
    }
    return first;
  };
  // Seqlock reads: {version, clock} (with the values, for a small shard),
  // the values, the version again, each phase completed before the next
  // starts (DenseTable's pairing); a shard's values are kept only if its
  // version was even and did not move. The clock is read no later than the
  // values, so they hold every update it stands for.
  constexpr uint64_t kOneReadBytes = 64 * 1024;
  constexpr int kMaxTornReads = 64;  // rounds with a changed shard before the rest go by message
  auto reading = [](const Shard& sh) { return !sh.read && !sh.by_message; };
  for (int attempt = 0;; ++attempt) {
    for (Shard& sh : shards) {
      if (!reading(sh)) continue;
      if (sh.offset + sh.bytes <= kOneReadBytes) {
        sh.whole.resize((sh.offset + sh.bytes + 7) / 8);
        sh.op = endpoint_.read(sh.server, sh.whole.data(), sh.offset + sh.bytes, sh.region.key, 0);
      } else {
        sh.op = endpoint_.read(sh.server, sh.head, sh.region.clock_offset + 8, sh.region.key, 0);
      }
    }
    if (rdma::Status st = wait_all(reading); !st.ok()) return st;
    for (Shard& sh : shards) {
      if (!reading(sh)) continue;
      const uint64_t s = sh.region.staleness;
      if (s != ps::kRegionNoBound &&
          sh.published() < my_clock - static_cast<int64_t>(std::min<uint64_t>(s, uint64_t{1} << 62))) {
        sh.by_message = true;  // beyond the bound: the server parks a message pull until it holds
      }
      if (sh.region.rounds && sh.pushed_at && *sh.pushed_at >= sh.published()) {
        // Its push of round *pushed_at is applied once the published clock
        // is past it; a message pull is answered after it (read-my-writes).
        sh.by_message = true;
      }
    }
    auto even = [&](const Shard& sh) { return reading(sh) && (sh.version() & 1) == 0; };
    auto separate = [&](const Shard& sh) { return even(sh) && sh.whole.empty(); };
    for (Shard& sh : shards) {
      if (separate(sh)) sh.op = endpoint_.read(sh.server, sh.dst, sh.bytes, sh.region.key, sh.offset);
    }
    if (rdma::Status st = wait_all(separate); !st.ok()) return st;
    for (Shard& sh : shards) {
      if (even(sh)) sh.op = endpoint_.read(sh.server, &sh.v2, sizeof sh.v2, sh.region.key, 0);
    }
    if (rdma::Status st = wait_all(even); !st.ok()) return st;
    bool retry = false;
    for (Shard& sh : shards) {
      if (!reading(sh)) continue;
      if (even(sh) && sh.version() == sh.v2) {
        if (!sh.whole.empty()) {
          std::memcpy(sh.dst, reinterpret_cast<const std::byte*>(sh.whole.data()) + sh.offset, sh.bytes);
        }
        sh.read = true;
        dense_read_shards_.fetch_add(1);
        if (data_clock != nullptr) *data_clock = std::min(*data_clock, sh.published());
      } else {
        retry = true;
        dense_read_retries_.fetch_add(1);
      }
    }
    if (!retry) break;
    if (attempt + 1 >= kMaxTornReads) {
      // Pushes keep landing during every read of these shards (a hot table,
      // or a reader slowed down, as under TSan): a message pull, which the
      // server answers between pushes, instead of failing or spinning on.
      for (Shard& sh : shards) {
        if (reading(sh)) sh.by_message = true;
      }
      break;
    }
    std::this_thread::yield();
  }
  // What a server would answer a message pull with: by message, side by side.
  std::vector<int64_t> clocks(shards.size(), 0);
  for (size_t k = 0; k < shards.size(); ++k) {
    Shard& sh = shards[k];
    if (!sh.by_message) continue;
    dense_read_fallbacks_.fetch_add(1);
    sh.pulled = dense_pull(sh.table, sh.begin, sh.end - sh.begin, sh.dst, &clocks[k]);
  }
  rdma::Status first;
  for (size_t k = 0; k < shards.size(); ++k) {
    if (!shards[k].by_message) continue;
    const rdma::Status st = shards[k].pulled.get();
    if (!st.ok() && first.ok()) first = st;
    if (data_clock != nullptr) *data_clock = std::min(*data_clock, clocks[k]);
  }
  return first;
}

void KvClient::receive_loop() {
  auto next_sweep = Clock::now();
  while (!stop_) {
    if (auto m = endpoint_.receive(std::chrono::milliseconds(20))) on_reply(*m);
    if (Clock::now() >= next_sweep) {
      sweep();
      next_sweep = Clock::now() + std::chrono::milliseconds(10);
    }
  }
}

void KvClient::on_reply(const rdma::Message& m) {
  ps::DecodedMessage d;
  // A landed reply must be the one its landing was for: the tag the
  // landing matched is the request id the header names.
  if (ps::decode_message(m.data, ps::WireLimits{}, d, m.landed) ||
      (!m.landed.empty() && d.header.request_id != m.tag)) {
    std::lock_guard lock(mu_);
    ++stats_.unexpected_replies;
    return;
  }
  std::unique_ptr<Pending> done;
  Sends released;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(d.header.request_id);
    if (it == pending_.end() || m.from >= map_.num_servers() || !it->second->answered.count(m.from) ||
        it->second->answered[m.from]) {
      ++stats_.unexpected_replies;
      if (d.header.op == ps::Op::kError && it == pending_.end()) ++stats_.errors;
      return;
    }
    Pending& p = *it->second;
    p.answered[m.from] = true;
    --p.remaining;
    const std::string who = "server " + std::to_string(m.from);
    if (d.header.op == ps::Op::kError) {
      ++stats_.errors;
      if (p.error.ok()) p.error = rdma::Status(rdma::StatusCode::kInvalidArgument, who + ": " + d.error_text);
    } else if (d.header.op != p.reply_op) {
      if (p.error.ok()) p.error = rdma::Status(rdma::StatusCode::kPeerError, who + " answered with op " + ps::to_string(d.header.op));
    } else if (const auto vb = p.value_bytes.find(m.from); vb != p.value_bytes.end()) {
      acked_push_bytes_[m.from] += vb->second;  // a push acknowledged: the server holds it
      if ((d.header.flags & ps::kFlagAppliedBefore) == 0 &&
          std::find(p.counted_held.begin(), p.counted_held.end(), m.from) != p.counted_held.end()) {
        // Counted as in the checkpoint at the rejoin, but applied only now:
        // the transport had lost it before the checkpoint. Not lost.
        lost_push_bytes_[m.from] -= std::min(lost_push_bytes_[m.from], vb->second);
      }
    } else if (d.header.op == ps::Op::kDenseRegionReply) {
      p.reply_keys.assign(d.keys.begin(), d.keys.end());
    } else if (p.out != nullptr) {
      const auto& rows = p.rows[m.from];
      if (d.values.size() != rows.size() * p.width) {
        if (p.error.ok()) {
          p.error = rdma::Status(rdma::StatusCode::kPeerError,
                                 who + " sent " + std::to_string(d.values.size()) + " values for " +
                                     std::to_string(rows.size()) + " keys of width " + std::to_string(p.width));
        }
      } else {
        // Landed in place (a dense pull's rows are consecutive), or copied.
        const bool landed = !rows.empty() && d.values.data() == p.out + uint64_t{rows[0]} * p.width;
        if (landed) {
          stats_.pull_bytes_landed += d.values.size_bytes();
        } else if (p.width == 1) {  // one float a key: a move, not a memcpy call
          for (size_t j = 0; j < rows.size(); ++j) std::memcpy(p.out + rows[j], d.values.data() + j, sizeof(float));
        } else {
          for (size_t j = 0; j < rows.size(); ++j) {
            std::memcpy(p.out + uint64_t{rows[j]} * p.width, d.values.data() + j * p.width, p.width * sizeof(float));
          }
        }
        if (p.data_clock != nullptr) *p.data_clock = std::min(*p.data_clock, d.header.clock);
        stats_.pull_bytes += d.values.size_bytes();
      }
    }
    const bool push = ps::is_push(p.request_op);
    if (p.remaining == 0 && !p.posting) {
      done = std::move(it->second);
      pending_.erase(it);
    }
    if (push) release_held_locked(released);
  }
  if (done) finish(std::move(done));
  if (!released.empty()) send_late(released, /*overdue=*/false);
}

void KvClient::sweep() {
  std::vector<std::unique_ptr<Pending>> failed;
  Sends resend, released;
  const auto now = Clock::now();
  const uint64_t newest = next_request_.load() - 1;  // the last id numbered
  {
    std::lock_guard lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      Pending& p = *it->second;
      if (p.posting) {  // start() still owns it
        ++it;
        continue;
      }
      // A send that failed will never be answered: the request fails,
      // unless the server may rejoin (then it is sent again when it does,
      // server_rejoined) or this was a send to its old process.
      for (auto& send : p.sends) {
        if (send.done.valid() && send.done.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
          const rdma::Status s = send.done.get();
          const bool superseded = send.epoch != epoch_of(send.server);
          if (!s.ok() && p.error.ok() && !superseded && !rejoin_enabled()) p.error = s;
        }
      }
      const bool send_failed = !p.error.ok() && p.error.code() != rdma::StatusCode::kInvalidArgument;
      if (now >= p.deadline || send_failed) {
        if (p.error.ok()) {
          std::string missing;
          for (const auto& [rank, ok] : p.answered) {
            if (ok) continue;
            // Sent (the transport completed it) and unanswered, or never out.
            const uint32_t server = rank;  // a lambda cannot capture a structured binding (clang)
            const bool unsent = std::any_of(p.sends.begin(), p.sends.end(), [&](const Pending::Send& s) {
              return s.server == server && s.done.valid() && !s.done.is_ready();
            });
            const bool held = p.holds(server);
            missing += (missing.empty() ? "" : ", ") + std::to_string(server) +
                       (held     ? " (never sent: an earlier push to it had no reply)"
                        : unsent ? " (a send of the request had not completed)"
                                 : "");
          }
          p.error = rdma::Status(rdma::StatusCode::kTimedOut,
                                 std::string(ps::to_string(p.request_op)) + " request " + std::to_string(p.id) +
                                     ": no reply from server rank(s) " + missing + " within " +
                                     std::to_string(options_.timeout.count()) + " ms");
          p.unanswered = true;
        }
        if (!p.held.empty()) --holding_clocks_;
        failed.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        if (now >= p.resend_at) {
          // Overdue: the servers that have not answered get it again, while
          // they can still tell it from a new request (kResendWindow).
          std::vector<uint32_t> servers;
          if (p.id > newest || newest - p.id < kResendWindow) {
            for (auto& [server, ok] : p.answered) {
              if (!ok && !p.holds(server)) servers.push_back(server);
            }
          }
          p.resend_at = now + options_.resend_after;
          if (!servers.empty()) {
            p.posting = true;  // as in start(): nobody else finishes or frees it meanwhile
            resend.emplace_back(&p, std::move(servers));
          }
        }
        ++it;
      }
    }
    release_held_locked(released);  // a failed push is answered no more
  }
  if (!resend.empty()) send_late(resend, /*overdue=*/true);
  if (!released.empty()) send_late(released, /*overdue=*/false);
  for (auto& p : failed) {
    for (auto& s : p->sends) {
      if (s.done.valid()) (void)endpoint_.wait(s.done);  // keep buffers until the transport lets go
    }
    withdraw_landings(*p);  // before the caller gets its array back
    if (p->unanswered) {
      // A loss the transport saw names itself (outside mu_: stats() locks the endpoint).
      const std::string losses = rdma::describe_losses(endpoint_.stats());
      p->error = rdma::Status(p->error.code(), p->error.message() + "; this worker's transport: " +
                                                   (losses.empty() ? "no losses counted" : losses));
    }
    p->promise.set_value(p->error);
  }
}

void KvClient::send_late(Sends& list, bool overdue) {
  // In the order the requests were made: the lists come from pending_,
  // which is unordered, and several clocks released (or sent again) at once
  // must reach a server in order, or the later one ticks first and the
  // earlier ones arrive as stale copies. The Pendings stay put while
  // posting, and ids never change.
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first->id < b.first->id; });
  if (options_.on_late_send) options_.on_late_send(overdue);
  std::vector<std::vector<Pending::Send>> sent(list.size());
  uint64_t messages = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    for (const uint32_t server : list[i].second) {
      const rdma::ByteBuffer& bytes = list[i].first->messages.at(server);
      sent[i].push_back({server, epoch_of(server), endpoint_.send(server, 0, bytes.data(), bytes.size())});
      ++messages;
    }
  }
  std::vector<std::unique_ptr<Pending>> done;
  Sends released;
  {
    std::lock_guard lock(mu_);
    if (overdue) stats_.overdue_resent += messages;
    for (size_t i = 0; i < list.size(); ++i) {
      Pending* p = list[i].first;
      for (auto& send : sent[i]) p->sends.push_back(std::move(send));
      p->posting = false;
      if (p->remaining == 0) {  // answered while it was being sent again
        done.push_back(std::move(pending_.at(p->id)));
        pending_.erase(p->id);
      }
    }
    // Those whose pushes were answered while they were being sent, and
    // later clocks that waited for these to go first.
    release_held_locked(released);
  }
  for (auto& d : done) finish(std::move(d));
  // Each round sends at least one held message: this ends.
  if (!released.empty()) send_late(released, /*overdue=*/false);
}

uint64_t KvClient::epoch_of(uint32_t server) const {
  std::lock_guard lock(epochs_mu_);
  const auto it = epochs_.find(server);
  return it == epochs_.end() ? 0 : it->second;
}

void KvClient::server_rejoined(uint32_t server, std::span<const std::byte> address, uint64_t restored_last_push_id,
                               uint64_t restored_bytes) {
  if (server >= map_.num_servers()) {
    throw std::invalid_argument("server_rejoined: rank " + std::to_string(server) + " is not a server of this job");
  }
  // Under the send lock: no request is numbered or sent meanwhile, so each
  // one went either to the old process (and is sent again below) or goes
  // to the new one.
  std::lock_guard order(send_mu_);
  endpoint_.replace_peer(server, address);
  uint64_t epoch = 0;
  {
    std::lock_guard lock(epochs_mu_);
    epoch = ++epochs_[server];
  }
  {
    std::lock_guard lock(regions_mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      it = it->first.second == server ? regions_.erase(it) : std::next(it);
    }
  }
  // The new process starts from its checkpoint: every request it has not
  // answered goes to it again, in the order of the ids (a push it already
  // holds is answered, not applied again).
  // `posting` again while they are resent: as in start(), nobody else
  // finishes or frees them meanwhile.
  std::vector<std::pair<uint64_t, Pending*>> again;
  bool clock_pending = false;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : pending_) {
      const auto a = p->answered.find(server);
      if (p->posting || a == p->answered.end() || a->second) continue;
      if (p->holds(server)) {
        clock_pending = true;  // goes once the pushes sent again below are answered
        continue;
      }
      p->posting = true;
      again.emplace_back(id, p.get());
      clock_pending = clock_pending || p->request_op == ps::Op::kClock;
    }
    stats_.resent += again.size();
    ++stats_.rejoins;
    // What the server lost of this worker's pushes: those it acknowledged
    // (A) but its checkpoint (C) does not hold. C's bytes are the restored
    // count; C is in A or among the unanswered pushes (U) with an id up to
    // the restored last one, so |A \ C| = |A| - |C| + |U and C|. |U and C|
    // is first taken as every push of U up to that id; one the checkpoint
    // lacks after all (the transport lost it before the checkpoint was
    // written) is applied when sent again below, answered without
    // ps::kFlagAppliedBefore, and the count mended then (on_reply). Over
    // every life of the server: the pushes lost in an earlier rejoin are in
    // A and in no later checkpoint, so this is the running total.
    uint64_t unanswered_held = 0;
    for (const auto& [id, p] : again) {
      std::erase(p->counted_held, server);
      if (const auto vb = p->value_bytes.find(server); vb != p->value_bytes.end() && id <= restored_last_push_id) {
        unanswered_held += vb->second;
        p->counted_held.push_back(server);
      }
    }
    const uint64_t held = acked_push_bytes_[server] + unanswered_held;
    lost_push_bytes_[server] = held > restored_bytes ? held - restored_bytes : 0;
  }
  std::sort(again.begin(), again.end());
  std::vector<Pending::Send> sent;
  for (auto& [id, p] : again) {
    const rdma::ByteBuffer& bytes = p->messages.at(server);
    sent.push_back(Pending::Send{server, epoch, endpoint_.send(server, 0, bytes.data(), bytes.size())});
  }
  std::vector<std::unique_ptr<Pending>> done;
  Sends released;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < again.size(); ++i) {
      Pending* p = again[i].second;
      p->sends.push_back(std::move(sent[i]));
      p->posting = false;
      if (p->remaining == 0) {
        done.push_back(std::move(pending_.at(p->id)));
        pending_.erase(p->id);
      }
    }
    release_held_locked(released);
  }
  for (auto& d : done) finish(std::move(d));
  if (!released.empty()) send_late(released, /*overdue=*/false);
  // Its clocks of this worker are the checkpoint's: bring them to ours (a
  // clock request sent again does that itself); a finished worker's is
  // kFinishedClock, so that it does not hold back the others.
  const int64_t mine = finished_ ? kFinishedClock : clock_.load();
  if (!clock_pending && mine > 0) {
    auto p = std::make_unique<Pending>();
    p->request_op = ps::Op::kClock;
    p->reply_op = ps::Op::kClockReply;
    ps::WireHeader h{.op = ps::Op::kClock, .sender = rank(), .clock = mine};
    p->messages[server] = ps::encode_message_as<rdma::ByteBuffer>(h, {});
    (void)start_locked(std::move(p), nullptr);  // nobody waits for it; an error reply is counted
  }
}

}  // namespace parafab::worker
