// Endpoint operations: posting sends, receives and RMA with back-pressure
// and FT_POST's retry-with-progress on -FI_EAGAIN.
#include "rdma/endpoint_impl.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <thread>

#include "rdma/fabric_error.h"

namespace parafab::rdma {

bool Endpoint::Impl::acquire_slot(Clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (take_slot_locked()) return true;
    }
    if (stopping || Clock::now() >= deadline) return false;
    // Drive progress here rather than wait for the progress thread: this may
    // be the progress thread itself (posting a large message's chunk
    // receives), and completions are what free slots.
    if (progress_once(false) == 0) {
      std::unique_lock lock(mu_);
      slots_cv_.wait_for(lock, std::chrono::microseconds(200));
    }
  }
}

Status Endpoint::Impl::acquire_large_place(PeerId peer, uint64_t bytes, uint64_t tag) {
  Clock::time_point deadline;  // set when it first has to wait
  bool waited = false;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      auto what = [&] { return "send of " + std::to_string(bytes) + " bytes (tag " + std::to_string(tag) + ")"; };
      // Declared failed while this waited: the place the failure freed is
      // not for this send.
      if (const auto f = failed_peers.find(peer); f != failed_peers.end()) {
        return Status(StatusCode::kPeerError, what() + " to " + describe_peer_locked(peer) + ": " + f->second);
      }
      size_t& n = large_in_flight[peer];
      if (n < large_limit) {
        ++n;
        return {};
      }
      if (!waited) {
        ++stats.large_send_waits;
        deadline = coarse_now() + options.timeout;
      }
      if (stopping || coarse_now() >= deadline) {
        return Status(StatusCode::kTimedOut, what() + " to " + describe_peer_locked(peer) + ": " +
                                                 std::to_string(large_limit) +
                                                 " large messages to it still in flight after " +
                                                 std::to_string(options.timeout.count()) + " ms");
      }
    }
    waited = true;
    // Completions free places, so read the CQ here (this may be the
    // progress thread itself, replying); when it had nothing, poll again
    // where this thread drives progress, else sleep until the progress
    // thread frees a place (release_large_place_locked notifies).
    if (progress_once(false) != 0) continue;
    if (caller_drives_progress()) {
      std::this_thread::yield();
    } else {
      std::unique_lock lock(mu_);
      slots_cv_.wait_for(lock, std::chrono::microseconds(200), [&] { return large_in_flight[peer] < large_limit; });
    }
  }
}

void Endpoint::Impl::release_slots(size_t n) {
  if (n == 0) return;
  {
    std::lock_guard lock(mu_);
    release_slots_locked(n);
  }
  slots_cv_.notify_all();
}

PostContext* Endpoint::Impl::add_context_locked(Operation& op) {
  const size_t index = op.context_count();
  PostContext& pc = op.n_first_contexts < op.first_contexts.size() ? op.first_contexts[op.n_first_contexts++]
                                                                    : op.more_contexts.emplace_back();
  pc.op = &op;
  pc.index = index;
  return &pc;
}

// Posts one operation of `op` with FT_POST's discipline: on -FI_EAGAIN read
// the CQ (progress) and retry, until the deadline.
Status Endpoint::Impl::post(Operation* op, PostFn fn) {
  // One lock when there is room (the usual case): the deadline, the slot
  // and the context together.
  Clock::time_point deadline;
  PostContext* pc = nullptr;
  {
    std::lock_guard lock(mu_);
    deadline = op->deadline;
    if (take_slot_locked()) pc = add_context_locked(*op);
  }
  if (pc == nullptr) {
    if (!acquire_slot(deadline)) {
      std::lock_guard lock(mu_);
      return Status(StatusCode::kTimedOut, op->describe() + " to " + describe_peer_locked(op->peer) +
                                               ": no room to post within the timeout (" +
                                               std::to_string(options.max_in_flight) + " operations in flight)");
    }
    std::lock_guard lock(mu_);
    pc = add_context_locked(*op);
  }
  for (;;) {
    const ssize_t rc = fn(&pc->fi_ctx);
    if (rc == 0) {
      ++op->posted;  // only the posting thread reads it (finish_posting), no lock
      return {};
    }
    if (rc != -FI_EAGAIN || Clock::now() >= deadline || stopping) {
      release_slots(1);
      std::lock_guard lock(mu_);
      return Status(rc == -FI_EAGAIN ? StatusCode::kTimedOut : StatusCode::kPeerError,
                    op->describe() + " to " + describe_peer_locked(op->peer) + ": post failed: " +
                        fi_strerror(static_cast<int>(-rc)));
    }
    // A peer declared failed meanwhile (mark_peer_failed): the provider
    // may answer FI_EAGAIN for it until the deadline (tcp;ofi_rxm does,
    // reconnecting to a dead process); stop retrying now.
    std::optional<Status> failed;
    {
      std::lock_guard lock(mu_);
      if (const auto f = failed_peers.find(op->peer); f != failed_peers.end()) {
        failed = Status(StatusCode::kPeerError, op->describe() + " to " + describe_peer_locked(op->peer) + ": " + f->second);
      }
    }
    if (failed) {
      release_slots(1);
      return *failed;
    }
    (void)progress_once(false);
  }
}

FidHandle<fid_mr> Endpoint::Impl::local_registration(const void* p, size_t n, uint64_t access) {
  if (!(mr_mode & FI_MR_LOCAL) || n == 0) return {};
  FidHandle<fid_mr> mr = register_raw(const_cast<void*>(p), n, access, MemoryKind::kHost, 0);
  local_registrations.fetch_add(1, std::memory_order_relaxed);
  return mr;
}

void* Endpoint::Impl::adopt_registration(Operation& op, FidHandle<fid_mr> mr) {
  if (!mr) return nullptr;
  void* desc = fi_mr_desc(mr.get());
  op.registrations.push_back(std::move(mr));
  return desc;
}

void* Endpoint::Impl::local_desc(Operation& op, const void* p, size_t n, uint64_t access) {
  return adopt_registration(op, local_registration(p, n, access));
}

Completion Endpoint::Impl::rma(bool is_read, PeerId peer, void* local, size_t size, const RemoteKey& remote,
                               uint64_t offset, const MemoryRegion* local_region) {
  const char* verb = is_read ? "RMA read" : "RMA write";
  if (!has_rma) {
    return ready_future(Status(StatusCode::kUnsupported, std::string(verb) + ": provider '" +
                                                             provider_info.provider + "' has no FI_RMA"));
  }
  Status err;
  fi_addr_t addr;
  {
    std::lock_guard lock(mu_);
    addr = lookup_locked(peer, err);
  }
  if (!err.ok()) return ready_future(err);
  if (offset > remote.length || size > remote.length - offset) {
    return ready_future(Status(StatusCode::kInvalidArgument,
                               std::string(verb) + " of " + std::to_string(size) + " bytes at offset " +
                                   std::to_string(offset) + " outside the remote region of " +
                                   std::to_string(remote.length) + " bytes"));
  }
  if (local_region != nullptr && !local_region->contains(local, size)) {
    return ready_future(Status(StatusCode::kInvalidArgument,
                               std::string(verb) + ": the local buffer is not inside the given region"));
  }
  Operation* op = new_op(OpKind::kRma, peer, addr, verb, size, "offset", offset);
  Status st;
  void* desc = nullptr;
  if (local_region != nullptr) {
    desc = local_region->descriptor();
  } else {
    try {
      desc = local_desc(*op, local, size, is_read ? FI_READ : FI_WRITE);
    } catch (const FabricError& e) {
      st = Status(StatusCode::kInvalidArgument, e.what());
    }
  }
  auto* bytes = static_cast<std::byte*>(local);
  for (size_t done = 0; done < size && st.ok();) {
    const size_t len = std::min(max_chunk, size - done);
    const uint64_t raddr = remote.address + offset + done;
    st = post(op,
              [&](void* ctx) {
                if (is_read) return fi_read(ep.get(), bytes + done, len, desc, addr, raddr, remote.key, ctx);
                // A write completes only once the data is in the peer's
                // memory (FI_DELIVERY_COMPLETE), not when it has merely left
                // ours: a caller that then tells the peer "done" must not race it.
                iovec iov{bytes + done, len};
                fi_rma_iov rma_iov{raddr, len, remote.key};
                fi_msg_rma msg{};
                msg.msg_iov = &iov;
                msg.desc = &desc;
                msg.iov_count = 1;
                msg.addr = addr;
                msg.rma_iov = &rma_iov;
                msg.rma_iov_count = 1;
                msg.context = ctx;
                return fi_writemsg(ep.get(), &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
              });
    done += len;
  }
  return finish_posting(op, st);
}

Completion Endpoint::send(PeerId to, uint64_t tag, const void* data, size_t size) {
  const ConstBuffer piece{data, size};
  return send(to, tag, std::span<const ConstBuffer>(&piece, 1));
}

Completion Endpoint::send(PeerId to, uint64_t tag, std::span<const ConstBuffer> pieces) {
  Impl& m = *impl_;
  Status err;
  fi_addr_t addr;
  {
    std::lock_guard lock(m.mu_);
    addr = m.lookup_locked(to, err);
  }
  if (!err.ok()) return ready_future(err);
  uint64_t total = 0;
  for (const ConstBuffer& p : pieces) total += p.size;
  const bool eager = kFrameHeaderBytes + total <= m.eager_limit;
  const bool limited = !eager && m.large_limit != 0 && total >= kLargeLimitMinBytes;
  if (limited) {
    Status place = m.acquire_large_place(to, total, tag);
    if (!place.ok()) return ready_future(std::move(place));
  }
  std::unique_ptr<Operation> owned = m.make_op(OpKind::kSend, to, addr, "send", total, "tag", tag);
  Operation* op = owned.get();
  FrameHeader h;
  h.user_tag = tag;
  {
    std::lock_guard lock(m.mu_);
    op->counts_as_large = limited;
    m.ops.insert(std::move(owned));
    h.message_id = m.order[to].next_send++ & kMessageIdMask;  // the receiver's delivery order
  }
  h.total_bytes = total;
  if (!eager) {
    h.flags = kFrameLarge;
    h.chunk_bytes = m.max_chunk;
  }

  // The frame: the header, then the payload when eager. A small payload is
  // copied behind the header (one copy is cheaper than the provider handling
  // an iovec); from kEagerGatherBytes on, the send gathers header and pieces
  // itself when the provider takes that many iovec entries.
  size_t nonempty = 0;
  for (const ConstBuffer& p : pieces) nonempty += p.size != 0 ? 1 : 0;
  // The frame's iovec lives on this stack, no allocation per send.
  constexpr size_t kFrameIov = 4;
  const bool gather = eager && total >= kEagerGatherBytes && nonempty + 1 <= std::min(m.iov_limit, kFrameIov);
  const size_t frame_bytes = kFrameHeaderBytes + (eager && !gather ? total : 0);
  std::byte* frame = op->inline_frame.data();
  if (frame_bytes > op->inline_frame.size()) {
    op->bounce.resize(frame_bytes);
    frame = op->bounce.data();
  }
  encode_frame_header(h, frame);
  if (eager && !gather) {
    std::byte* out = frame + kFrameHeaderBytes;
    for (const ConstBuffer& p : pieces) {
      if (p.size != 0) std::memcpy(out, p.data, p.size);
      out += p.size;
    }
  }
  Status st;
  std::array<iovec, kFrameIov> frame_iov{iovec{frame, frame_bytes}};
  std::array<void*, kFrameIov> frame_desc{};
  size_t frame_parts = 1;
  try {
    frame_desc[0] = m.local_desc(*op, frame, frame_bytes, FI_SEND);
    if (gather) {
      for (const ConstBuffer& p : pieces) {
        if (p.size == 0) continue;
        frame_iov[frame_parts] = {const_cast<void*>(p.data), p.size};
        frame_desc[frame_parts++] = m.local_desc(*op, p.data, p.size, FI_SEND);
      }
    }
  } catch (const FabricError& e) {
    st = Status(StatusCode::kInvalidArgument, e.what());
  }
  if (st.ok()) {
    st = m.post(op, [&](void* ctx) {
      return frame_parts == 1
                 ? fi_send(m.ep.get(), frame_iov[0].iov_base, frame_iov[0].iov_len, frame_desc[0], addr, ctx)
                 : fi_sendv(m.ep.get(), frame_iov.data(), frame_desc.data(), frame_parts, addr, ctx);
    });
  }
  if (!eager && st.ok()) {
    // Chunk k is payload bytes [k*C, (k+1)*C): an iovec over the pieces it
    // spans, or a gathered copy when it spans more than iov_limit pieces.
    const uint64_t n = chunk_count(total, m.max_chunk);
    // Descriptors only where the provider wants local registrations.
    std::vector<void*> piece_desc;
    if (m.mr_mode & FI_MR_LOCAL) {
      try {
        for (const ConstBuffer& p : pieces) piece_desc.push_back(m.local_desc(*op, p.data, p.size, FI_SEND));
      } catch (const FabricError& e) {
        st = Status(StatusCode::kInvalidArgument, e.what());
      }
    }
    // A chunk's iovec on this stack (no allocation per chunk): at most
    // kChunkIov entries, fewer where the provider takes fewer.
    constexpr size_t kChunkIov = 4;
    const size_t iov_max = std::min(m.iov_limit, kChunkIov);
    size_t piece = 0;
    uint64_t piece_off = 0;  // offset inside pieces[piece]
    for (uint64_t k = 0; k < n && st.ok(); ++k) {
      const uint64_t len = std::min<uint64_t>(m.max_chunk, total - k * m.max_chunk);
      std::array<iovec, kChunkIov> iov;
      std::array<void*, kChunkIov> desc{};
      size_t parts = 0;
      std::vector<std::byte> copy;  // the chunk gathered, once it spans more than iov_max pieces
      bool gathered = false;
      uint64_t at = 0;  // bytes of the chunk placed so far
      while (at < len) {
        while (pieces[piece].size == piece_off) {
          ++piece;
          piece_off = 0;
        }
        const uint64_t take = std::min<uint64_t>(len - at, pieces[piece].size - piece_off);
        auto* src = const_cast<std::byte*>(static_cast<const std::byte*>(pieces[piece].data) + piece_off);
        if (!gathered && parts == iov_max) {
          copy.resize(len);
          uint64_t o = 0;
          for (size_t i = 0; i < parts; ++i) {
            std::memcpy(copy.data() + o, iov[i].iov_base, iov[i].iov_len);
            o += iov[i].iov_len;
          }
          gathered = true;
        }
        if (gathered) {
          std::memcpy(copy.data() + at, src, take);
        } else {
          iov[parts] = {src, take};
          desc[parts++] = piece_desc.empty() ? nullptr : piece_desc[piece];
        }
        at += take;
        piece_off += take;
      }
      if (gathered) {
        void* d = nullptr;
        try {
          d = m.local_desc(*op, copy.data(), copy.size(), FI_SEND);
        } catch (const FabricError& e) {
          st = Status(StatusCode::kInvalidArgument, e.what());
          break;
        }
        iov[0] = iovec{copy.data(), copy.size()};
        desc[0] = d;
        parts = 1;
        std::lock_guard lock(m.mu_);
        op->copies.push_back(std::move(copy));  // the heap buffer, and so iov, stays put
      }
      const uint64_t t = chunk_tag(h.message_id, k);
      st = m.post(op, [&](void* ctx) {
        return parts == 1 ? fi_tsend(m.ep.get(), iov[0].iov_base, iov[0].iov_len, desc[0], addr, t, ctx)
                          : fi_tsendv(m.ep.get(), iov.data(), desc.data(), parts, addr, t, ctx);
      });
    }
  }
  return m.finish_posting(op, st);
}

void Endpoint::Impl::caller_poll() {
  if (progress_step(!options.busy_poll) == 0 && (options.busy_poll || !has_wait)) std::this_thread::yield();
}

std::optional<Message> Endpoint::receive(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  if (m.caller_drives_progress()) {
    // Drive progress here: no progress thread to wait for, or none worth
    // the hand-off. The queue is polled at least once, so that a caller's
    // loop of receive(0ms) makes progress.
    const auto deadline = coarse_now() + timeout;  // a poll per loop: no fine clock read on each
    for (bool polled = false;; polled = true) {
      {
        std::lock_guard lock(m.inbox_mu_);
        if (!m.inbox.empty()) {
          Message msg = std::move(m.inbox.front());
          m.inbox.pop_front();
          return msg;
        }
      }
      if (polled && coarse_now() >= deadline) return std::nullopt;
      m.caller_poll();
    }
  }
  std::unique_lock lock(m.inbox_mu_);
  if (!m.inbox_cv_.wait_for(lock, timeout, [&] { return !m.inbox.empty(); })) return std::nullopt;
  Message msg = std::move(m.inbox.front());
  m.inbox.pop_front();
  return msg;
}

void Endpoint::wait_ready(Completion& operation) {
  Impl& m = *impl_;
  if (!m.caller_drives_progress()) {
    operation.wait();
    return;
  }
  // Every operation fails by its own deadline, so this loop ends.
  while (!operation.is_ready()) m.caller_poll();
}

Status Endpoint::wait(Completion& operation) {
  wait_ready(operation);
  return operation.get();
}

void Endpoint::progress() { impl_->progress_step(false); }

LandingId Endpoint::expect(const Landing& landing) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  const LandingId id = m.next_landing++;
  if (!m.waiting_landings.emplace(std::pair{landing.from, landing.tag}, id).second) return 0;
  m.landings.emplace(id, Impl::LandingSpot{landing, nullptr});
  return id;
}

bool Endpoint::withdraw(LandingId id) {
  Impl& m = *impl_;
  uint64_t scratch_bytes = 0;
  {
    std::lock_guard lock(m.mu_);
    const auto it = m.landings.find(id);
    if (it == m.landings.end()) return true;  // 0, or its message has ended
    if (it->second.bound == nullptr) {
      m.waiting_landings.erase({it->second.spec.from, it->second.spec.tag});
      m.landings.erase(it);
      return true;
    }
    const Operation& op = *it->second.bound;
    scratch_bytes = op.cancelled || op.draining ? 0 : std::min<uint64_t>(op.chunk_bytes, op.bytes);
  }
  if (scratch_bytes != 0) {
    // Its message is being received into the tail: cancel those receives,
    // and receive the rest of the message into scratch (its sender's chunks
    // must all find a receive); the landing is released once each receive
    // into it has ended, cancelled or not. The scratch is allocated (and,
    // under FI_MR_LOCAL, registered) without the lock.
    ByteBuffer scratch;
    scratch.resize(scratch_bytes);
    FidHandle<fid_mr> mr;
    bool registered = true;
    try {
      mr = m.local_registration(scratch.data(), scratch.size(), FI_RECV);
    } catch (const FabricError&) {
      registered = false;
    }
    std::lock_guard lock(m.mu_);
    // Still bound, to the same operation: a landing binds once, and is
    // erased when its operation ends.
    const auto it = m.landings.find(id);
    if (it != m.landings.end() && it->second.bound != nullptr) {
      m.start_drain_locked(*it->second.bound, std::move(scratch), std::move(mr), registered);
    }
  }
  const auto deadline = Clock::now() + m.options.timeout;
  for (;;) {
    {
      std::unique_lock lock(m.mu_);
      if (!m.landings.contains(id)) return true;
      if (Clock::now() >= deadline) return false;
      if (!m.caller_drives_progress()) {
        m.landing_cv.wait_for(lock, std::chrono::milliseconds(1));
        continue;
      }
    }
    m.caller_poll();
  }
}

Completion Endpoint::read(PeerId from, void* local, size_t size, const RemoteKey& remote, uint64_t offset,
                          const MemoryRegion* local_region) {
  return impl_->rma(true, from, local, size, remote, offset, local_region);
}

Completion Endpoint::write(PeerId to, const void* local, size_t size, const RemoteKey& remote, uint64_t offset,
                           const MemoryRegion* local_region) {
  return impl_->rma(false, to, const_cast<void*>(local), size, remote, offset, local_region);
}

EndpointStats Endpoint::stats() const {
  std::lock_guard lock(impl_->mu_);
  EndpointStats s = impl_->stats;
  s.local_registrations = impl_->local_registrations.load(std::memory_order_relaxed);
  return s;
}

}  // namespace parafab::rdma
