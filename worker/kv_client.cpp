#include "worker/kv_client.h"

#include <algorithm>
#include <cstring>
#include <deque>

namespace parafab::worker {
namespace {

using Clock = std::chrono::steady_clock;

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
  std::unordered_map<uint32_t, std::vector<std::byte>> messages;
  std::unordered_map<uint32_t, bool> answered;
  size_t remaining = 0;
  std::vector<std::future<rdma::Status>> sends;
  // Pulls: server rank -> output row of each key it was asked for, in order.
  std::unordered_map<uint32_t, std::vector<uint32_t>> rows;
  std::vector<std::pair<uint32_t, uint32_t>> duplicates;  // (row, copy of row)
  float* out = nullptr;
  uint64_t pull_bytes = 0;
};

KvClient::KvClient(rdma::Endpoint& endpoint, const ps::ClusterMap& map, uint32_t worker_index,
                   KvClientOptions options)
    : endpoint_(endpoint), map_(map), worker_index_(worker_index), options_(options) {
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
    p->promise.set_value(rdma::Status(rdma::StatusCode::kClosed, "KV client closed before the reply"));
    for (auto& f : p->sends) {
      if (f.valid()) (void)endpoint_.wait(f);
    }
  }
}

KvClientStats KvClient::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// Sends every message of `p` and registers it for replies. Sends are waited
// on by the receive loop (their buffers live in `p` until then).
std::future<rdma::Status> KvClient::start(std::unique_ptr<Pending> p) {
  p->id = next_request_.fetch_add(1);
  p->deadline = Clock::now() + options_.timeout;
  p->remaining = p->messages.size();
  std::future<rdma::Status> fut = p->promise.get_future();
  if (p->remaining == 0) {
    p->promise.set_value({});
    return fut;
  }
  Pending* raw = p.get();
  for (auto& [server, bytes] : raw->messages) {
    // The request id is known only now: patch it into each header.
    for (int i = 0; i < 8; ++i) bytes[24 + i] = static_cast<std::byte>(raw->id >> (8 * i));
    raw->answered[server] = false;
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.requests;
    pending_.emplace(raw->id, std::move(p));
  }
  // After registration: a reply can arrive before send() returns.
  for (auto& [server, bytes] : raw->messages) raw->sends.push_back(endpoint_.send(server, 0, bytes.data(), bytes.size()));
  return fut;
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
  // Merge duplicates (sum), then split by server.
  std::unordered_map<uint64_t, uint32_t> slot;
  slot.reserve(keys.size() * 2);
  std::vector<uint64_t> ukeys;
  std::vector<float> ugrads;
  ukeys.reserve(keys.size());
  ugrads.reserve(grads.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = slot.try_emplace(keys[i], static_cast<uint32_t>(ukeys.size()));
    if (fresh) {
      ukeys.push_back(keys[i]);
      ugrads.insert(ugrads.end(), grads.begin() + i * w, grads.begin() + (i + 1) * w);
    } else {
      for (uint64_t c = 0; c < w; ++c) ugrads[it->second * w + c] += grads[i * w + c];
    }
  }
  const ps::KeyPartition part = map_.partition();
  std::vector<std::vector<uint64_t>> skeys(map_.num_servers());
  std::vector<std::vector<float>> sgrads(map_.num_servers());
  for (size_t i = 0; i < ukeys.size(); ++i) {
    const uint32_t s = part.server_of(ukeys[i]);
    skeys[s].push_back(ukeys[i]);
    sgrads[s].insert(sgrads[s].end(), ugrads.begin() + i * w, ugrads.begin() + (i + 1) * w);
  }
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kPush;
  p->reply_op = ps::Op::kPushReply;
  p->table = table;
  p->width = w;
  uint64_t bytes = 0;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    if (skeys[s].empty()) continue;
    ps::WireHeader h{.op = ps::Op::kPush, .table = table, .sender = rank(), .clock = clock_.load()};
    p->messages[map_.server_rank(s)] = ps::encode_message(h, skeys[s], sgrads[s]);
    bytes += sgrads[s].size() * sizeof(float);
  }
  {
    std::lock_guard lock(mu_);
    stats_.push_bytes += bytes;
  }
  return start(std::move(p));
}

std::future<rdma::Status> KvClient::pull(uint32_t table, std::span<const uint64_t> keys, float* out) {
  const ps::TableSchema& schema = map_.table(table);
  if (schema.kind != ps::TableKind::kSparse) return ready({rdma::StatusCode::kInvalidArgument, "pull from a dense table: use dense_pull"});
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kPull;
  p->reply_op = ps::Op::kPullReply;
  p->table = table;
  p->width = schema.width;
  p->out = out;
  const ps::KeyPartition part = map_.partition();
  std::unordered_map<uint64_t, uint32_t> first_row;
  first_row.reserve(keys.size() * 2);
  std::vector<std::vector<uint64_t>> skeys(map_.num_servers());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = first_row.try_emplace(keys[i], static_cast<uint32_t>(i));
    if (!fresh) {
      p->duplicates.emplace_back(it->second, static_cast<uint32_t>(i));
      continue;
    }
    const uint32_t s = part.server_of(keys[i]);
    skeys[s].push_back(keys[i]);
    p->rows[map_.server_rank(s)].push_back(static_cast<uint32_t>(i));
  }
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    if (skeys[s].empty()) continue;
    ps::WireHeader h{.op = ps::Op::kPull, .table = table, .sender = rank(), .clock = clock_.load()};
    p->messages[map_.server_rank(s)] = ps::encode_message(h, skeys[s], std::span<const std::byte>());
  }
  return start(std::move(p));
}

std::future<rdma::Status> KvClient::dense_push(uint32_t table, uint64_t first_row, uint64_t rows,
                                               std::span<const float> grads) {
  const ps::TableSchema& schema = map_.table(table);
  if (schema.kind != ps::TableKind::kDense) return ready({rdma::StatusCode::kInvalidArgument, "dense_push to a sparse table"});
  if (first_row > schema.rows || rows > schema.rows - first_row || grads.size() != rows * schema.width) {
    return ready({rdma::StatusCode::kInvalidArgument, "dense_push of rows [" + std::to_string(first_row) + ", +" +
                                                          std::to_string(rows) + ") with " +
                                                          std::to_string(grads.size()) + " floats on a table of " +
                                                          std::to_string(schema.rows) + " rows"});
  }
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kDensePush;
  p->reply_op = ps::Op::kDensePushReply;
  p->table = table;
  p->width = schema.width;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    const ps::RowRange r = ps::dense_rows_of(schema.rows, s, map_.num_servers());
    const uint64_t b = std::max(r.begin, first_row), e = std::min(r.end, first_row + rows);
    if (b >= e) continue;
    const uint64_t range[2] = {b, e - b};
    ps::WireHeader h{.op = ps::Op::kDensePush, .table = table, .sender = rank(), .clock = clock_.load()};
    p->messages[map_.server_rank(s)] =
        ps::encode_message(h, range, grads.subspan((b - first_row) * schema.width, (e - b) * schema.width));
  }
  return start(std::move(p));
}

std::future<rdma::Status> KvClient::dense_pull(uint32_t table, uint64_t first_row, uint64_t rows, float* out) {
  const ps::TableSchema& schema = map_.table(table);
  if (schema.kind != ps::TableKind::kDense) return ready({rdma::StatusCode::kInvalidArgument, "dense_pull from a sparse table"});
  if (first_row > schema.rows || rows > schema.rows - first_row) {
    return ready({rdma::StatusCode::kInvalidArgument, "dense_pull of rows [" + std::to_string(first_row) + ", +" +
                                                          std::to_string(rows) + ") on a table of " +
                                                          std::to_string(schema.rows) + " rows"});
  }
  auto p = std::make_unique<Pending>();
  p->request_op = ps::Op::kDensePull;
  p->reply_op = ps::Op::kDensePullReply;
  p->table = table;
  p->width = schema.width;
  p->out = out;
  for (uint32_t s = 0; s < map_.num_servers(); ++s) {
    const ps::RowRange r = ps::dense_rows_of(schema.rows, s, map_.num_servers());
    const uint64_t b = std::max(r.begin, first_row), e = std::min(r.end, first_row + rows);
    if (b >= e) continue;
    const uint64_t range[2] = {b, e - b};
    // Output rows of this server's part: consecutive, starting at b - first_row.
    auto& out_rows = p->rows[map_.server_rank(s)];
    for (uint64_t row = b; row < e; ++row) out_rows.push_back(static_cast<uint32_t>(row - first_row));
    ps::WireHeader h{.op = ps::Op::kDensePull, .table = table, .sender = rank(), .clock = clock_.load()};
    p->messages[map_.server_rank(s)] = ps::encode_message(h, range, std::span<const std::byte>());
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
    p->messages[map_.server_rank(s)] = ps::encode_message(h, {}, std::span<const std::byte>());
  }
  return start(std::move(p));
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
  if (auto err = ps::decode_message(m.data, ps::WireLimits{}, d)) {
    std::lock_guard lock(mu_);
    ++stats_.unexpected_replies;
    return;
  }
  std::unique_ptr<Pending> done;
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
    } else if (p.out != nullptr) {
      const auto& rows = p.rows[m.from];
      if (d.values.size() != rows.size() * p.width) {
        if (p.error.ok()) {
          p.error = rdma::Status(rdma::StatusCode::kPeerError,
                                 who + " sent " + std::to_string(d.values.size()) + " values for " +
                                     std::to_string(rows.size()) + " keys of width " + std::to_string(p.width));
        }
      } else {
        for (size_t j = 0; j < rows.size(); ++j) {
          std::memcpy(p.out + uint64_t{rows[j]} * p.width, d.values.data() + j * p.width, p.width * sizeof(float));
        }
        stats_.pull_bytes += d.values.size_bytes();
      }
    }
    if (p.remaining == 0) {
      done = std::move(it->second);
      pending_.erase(it);
    }
  }
  if (done) {
    if (done->error.ok() && done->out != nullptr) {
      for (auto [row, copy] : done->duplicates) {
        std::memcpy(done->out + uint64_t{copy} * done->width, done->out + uint64_t{row} * done->width,
                    done->width * sizeof(float));
      }
    }
    // The sends completed before their replies could arrive, but collect
    // their status (and keep the buffers until then).
    for (auto& f : done->sends) {
      if (!f.valid()) continue;  // sweep() already collected it
      const rdma::Status s = endpoint_.wait(f);
      if (!s.ok() && done->error.ok()) done->error = s;
    }
    done->promise.set_value(done->error);
  }
}

void KvClient::sweep() {
  std::vector<std::unique_ptr<Pending>> failed;
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      Pending& p = *it->second;
      // A send that failed will never be answered.
      for (auto& f : p.sends) {
        if (f.valid() && f.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
          const rdma::Status s = f.get();
          if (!s.ok() && p.error.ok()) p.error = s;
        }
      }
      const bool send_failed = !p.error.ok() && p.error.code() != rdma::StatusCode::kInvalidArgument;
      if (now >= p.deadline || send_failed) {
        if (p.error.ok()) {
          std::string missing;
          for (auto& [server, ok] : p.answered) {
            if (!ok) missing += (missing.empty() ? "" : ", ") + std::to_string(server);
          }
          p.error = rdma::Status(rdma::StatusCode::kTimedOut,
                                 std::string(ps::to_string(p.request_op)) + " request " + std::to_string(p.id) +
                                     ": no reply from server rank(s) " + missing + " within " +
                                     std::to_string(options_.timeout.count()) + " ms");
        }
        failed.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& p : failed) {
    for (auto& f : p->sends) {
      if (f.valid()) (void)endpoint_.wait(f);  // keep buffers until the transport lets go
    }
    p->promise.set_value(p->error);
  }
}

}  // namespace parafab::worker
