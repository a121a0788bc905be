// Endpoint completions: reading the CQ, dispatching to operations, the
// receive pool, reassembly of large messages, and deadlines.
#include "rdma/endpoint_impl.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "rdma/fabric_error.h"

namespace parafab::rdma {

// Called once every post of `op` has been attempted: records a post failure
// and completes the operation if nothing is outstanding.
Completion Endpoint::Impl::finish_posting(Operation* op, const Status& post_status) {
  Completion fut(op->completion);
  std::vector<Operation*> inbound_done;
  {
    std::lock_guard lock(mu_);
    if (!post_status.ok() && op->first_error.ok()) op->first_error = post_status;
    op->planned = op->posted;
    op->all_posted = true;
    if (op->completed == op->planned) finish_locked(op, inbound_done);
  }
  deliver(inbound_done);
  return fut;
}

// Completes `op` (mu_ held): fulfils its Completion or, for an inbound
// message, hands it to deliver(). Erases it from the table.
void Endpoint::Impl::finish_locked(Operation* op, std::vector<Operation*>& inbound_done) {
  if (op->kind == OpKind::kInbound) {
    if (op->landing != 0) {
      // Every receive into the tail has ended: withdraw() may return.
      op->message.landed = {op->tail, op->bytes - op->head_bytes};
      release_landing_locked(*op);
    }
    inbound_done.push_back(ops.release(op).release());  // deliver() takes ownership, failed or not
    return;
  }
  release_large_place_locked(*op);
  if (!op->fulfilled()) {
    if (op->first_error.ok()) {
      if (op->kind == OpKind::kSend) {
        ++stats.messages_sent;
        stats.bytes_sent += op->bytes;
      } else {
        stats.rma_bytes += op->bytes;
      }
    }
    op->complete_locked(op->first_error);
  }
  ops.erase(op);
}

void Endpoint::Impl::deliver(std::vector<Operation*>& inbound_done) {
  for (Operation* op : inbound_done) {
    std::unique_ptr<Operation> owned(op);
    const bool ok = owned->first_error.ok() && !owned->cancelled && !owned->draining;
    if (ok) {
      deliver_in_order(owned->peer, owned->incarnation, owned->sequence, std::move(owned->message));
    } else {
      deliver_in_order(owned->peer, owned->incarnation, owned->sequence, std::nullopt);
    }
  }
  inbound_done.clear();
}

void Endpoint::Impl::deliver_in_order(PeerId peer, uint64_t inc, uint64_t sequence, std::optional<Message> message) {
  std::vector<Message> ready;
  bool pushed = false;
  {
    // The inbox push happens under mu_: two threads delivering consecutive
    // messages of one sender (a progress thread and a polling caller) would
    // otherwise hand them to the inbox in either order.
    std::lock_guard lock(mu_);
    if (!message) ++stats.inbound_failed;
    if (inc != incarnation_locked(peer)) {
      // From the process replace_peer replaced: a stranger's now.
      if (message) ++stats.dropped_unknown_sender;
      return;
    }
    PeerOrder& po = order[peer];
    if (sequence < po.next_deliver) {
      // Its gap was already skipped by the timeout: too late to keep order.
      ++stats.dropped_out_of_order;
      return;
    }
    if (sequence == po.next_deliver && po.held.empty()) {
      // The usual case, the next in order with nothing held: no trip
      // through the map (a node allocated and freed per message) and no
      // vector for one message.
      ++po.next_deliver;
      if (!message) return;
      count_received_locked(*message);
      pushed = push_inbox_locked(std::span(&*message, 1));
    } else {
      const bool had_gap = !po.held.empty();
      po.held.emplace(sequence, std::move(message));
      drain_locked(po, ready);
      if (!po.held.empty() && (!had_gap || !ready.empty())) po.gap_since = Clock::now();
      pushed = push_inbox_locked(ready);
    }
  }
  if (pushed) inbox_cv_.notify_all();
}

void Endpoint::Impl::drain_locked(PeerOrder& po, std::vector<Message>& ready) {
  while (!po.held.empty() && po.held.begin()->first == po.next_deliver) {
    if (po.held.begin()->second) {
      count_received_locked(*po.held.begin()->second);
      ready.push_back(std::move(*po.held.begin()->second));
    }
    po.held.erase(po.held.begin());
    ++po.next_deliver;
  }
}

void Endpoint::Impl::count_received_locked(const Message& m) {
  ++stats.messages_received;
  stats.bytes_received += m.data.size() + m.landed.size();
  if (!m.landed.empty()) ++stats.messages_landed;
}

bool Endpoint::Impl::push_inbox_locked(std::span<Message> ready) {
  if (ready.empty()) return false;
  std::lock_guard lock(inbox_mu_);
  for (Message& m : ready) inbox.push_back(std::move(m));
  return true;
}

void Endpoint::Impl::on_pool_buffer(size_t slot, fi_addr_t src, size_t len, int err_code) {
  if (err_code != 0) {
    if (err_code != FI_ECANCELED) {
      std::lock_guard lock(mu_);
      // FI_ETRUNC: a frame larger than our eager buffers, which no parafab
      // sender makes.
      ++stats.dropped_malformed;
    }
    repost(slot);
    return;
  }
  const std::byte* frame = pool_memory.data() + slot * eager_limit;
  PeerId peer = 0;
  uint64_t inc = 0;
  {
    std::lock_guard lock(mu_);
    auto it = addr_peers.find(src);
    if (src == FI_ADDR_NOTAVAIL || it == addr_peers.end()) {
      ++stats.dropped_unknown_sender;
      src = FI_ADDR_NOTAVAIL;
    } else {
      peer = it->second;
      inc = incarnation_locked(peer);
    }
  }
  if (src == FI_ADDR_NOTAVAIL) {
    repost(slot);
    return;
  }
  std::string why;
  const auto header = decode_frame_header({frame, len}, options.max_inbound_bytes, max_chunk, why);
  if (!header) {
    std::lock_guard lock(mu_);
    ++stats.dropped_malformed;
  } else if ((header->flags & kFrameLarge) == 0) {
    Message m;
    m.from = peer;
    m.tag = header->user_tag;
    m.data = byte_buffer_of({frame + kFrameHeaderBytes, len - kFrameHeaderBytes});
    deliver_in_order(peer, inc, header->message_id, std::move(m));
  } else {
    std::unique_ptr<Operation> owned =
        make_op(OpKind::kInbound, peer, src, "receive", header->total_bytes, "message", header->message_id);
    Operation* op = owned.get();
    op->message.from = peer;
    op->message.tag = header->user_tag;
    op->sequence = header->message_id;
    op->incarnation = inc;
    // Set before withdraw() can see it (start_drain_locked sizes its scratch
    // by them); this thread holds its posting right from the start.
    op->chunk_bytes = header->chunk_bytes;
    op->chunks = chunk_count(header->total_bytes, header->chunk_bytes);
    op->chunk_poster = true;
    {
      std::lock_guard lock(mu_);
      bind_landing_locked(*op, *header);
      ops.insert(std::move(owned));
    }
    op->message.data.resize(op->landing != 0 ? op->head_bytes : header->total_bytes);
    // Repost first: the chunk posts may need progress, which needs buffers.
    repost(slot);
    post_inbound_chunks(op, *header);
    return;
  }
  repost(slot);
}

void Endpoint::Impl::bind_landing_locked(Operation& op, const FrameHeader& h) {
  if (waiting_landings.empty()) return;
  const auto w = waiting_landings.find({op.peer, h.user_tag});
  if (w == waiting_landings.end()) return;
  LandingSpot& spot = landings.at(w->second);
  const Landing& l = spot.spec;
  if (l.tail_bytes == 0 || l.head_bytes + l.tail_bytes != h.total_bytes) return;  // another message
  // A chunk that holds both the head's end and the tail's start is one
  // receive into two places: an iovec of two.
  if (l.head_bytes % h.chunk_bytes != 0 && rx_iov_limit < 2) return;
  op.landing = w->second;
  waiting_landings.erase(w);
  spot.bound = &op;
  op.head_bytes = l.head_bytes;
  op.tail = static_cast<std::byte*>(l.tail);
}

void Endpoint::Impl::post_inbound_chunks(Operation* op, const FrameHeader& h) {
  if (!(mr_mode & FI_MR_LOCAL)) {  // no registrations to make: no locks for them either
    post_more_chunks(op);
    return;
  }
  // Registrations (FI_MR_LOCAL) are made without mu_ (they may pin memory);
  // the tail only while its landing is not withdrawn (start_drain_locked):
  // it may be the caller's to free once withdraw has returned.
  bool tail_wanted;
  {
    std::lock_guard lock(mu_);
    tail_wanted = op->landing != 0 && !op->draining;
  }
  Status st;
  FidHandle<fid_mr> head_mr, tail_mr;
  try {
    head_mr = local_registration(op->message.data.data(), op->message.data.size(), FI_RECV);
    if (tail_wanted) tail_mr = local_registration(op->tail, h.total_bytes - op->head_bytes, FI_RECV);
  } catch (const FabricError& e) {
    st = Status(StatusCode::kPeerError, e.what());
  }
  {
    std::lock_guard lock(mu_);
    if (!st.ok()) op->first_error = st;
    op->head_desc = adopt_registration(*op, std::move(head_mr));
    if (!op->draining) op->tail_desc = adopt_registration(*op, std::move(tail_mr));
  }
  post_more_chunks(op);
}

void Endpoint::Impl::post_more_chunks(Operation* op) {
  // Message bytes [0, head) go to message.data, the rest to the landing's tail.
  const uint64_t head = op->landing != 0 ? op->head_bytes : op->bytes;
  std::vector<Operation*> inbound_done;
  for (;;) {
    PostContext* pc = nullptr;
    uint64_t k = 0, lo = 0, hi = 0;  // the chunk, and its bytes [lo, hi) of the message
    bool redone = false;             // k came from op->redo
    bool drain = false;
    {
      std::lock_guard lock(mu_);
      if (op->cancelled || !op->first_error.ok() || (op->next_chunk == op->chunks && op->redo.empty()) ||
          stopping) {
        // Timed out, its peer gone, a post failed, or all posted: post no
        // more; the last outstanding receive finishes it (or, drained, a
        // cancelled one reopens it: dispatch).
        op->chunk_poster = false;
        op->planned = op->posted;
        op->all_posted = true;
        if (op->completed == op->planned) finish_locked(op, inbound_done);
        break;
      }
      if (op->posted - op->completed >= chunk_window) {
        op->chunk_poster = false;  // a completion takes the right back (dispatch)
        break;
      }
      if (!take_slot_locked()) {
        park_chunks_locked(op);
        break;
      }
      redone = !op->redo.empty();
      if (redone) {
        k = op->redo.back();
        op->redo.pop_back();
      } else {
        k = op->next_chunk;
      }
      drain = op->draining;
      pc = op->unposted != nullptr ? std::exchange(op->unposted, nullptr) : add_context_locked(*op);
      pc->index = k;
      lo = k * op->chunk_bytes;
      hi = lo + std::min<uint64_t>(op->chunk_bytes, op->bytes - lo);
      // Counted before the post, under the lock: withdraw() releases the
      // landing only once no receive into it can still be posted or live.
      pc->into_tail = !drain && hi > head;
      if (pc->into_tail) ++op->tail_receives;
    }
    std::array<iovec, 2> iov;
    std::array<void*, 2> desc{};
    size_t parts = 0;
    if (drain) {
      // Only the chunk's bytes matter (they are thrown away); the scratch is
      // one chunk, shared by the draining receives in flight.
      iov[0] = {op->scratch.data(), static_cast<size_t>(hi - lo)};
      desc[0] = op->scratch_desc;
      parts = 1;
    } else {
      if (lo < head) {
        iov[parts] = {op->message.data.data() + lo, static_cast<size_t>(std::min(hi, head) - lo)};
        desc[parts++] = op->head_desc;
      }
      if (hi > head) {
        const uint64_t from = std::max(lo, head);
        iov[parts] = {op->tail + (from - head), static_cast<size_t>(hi - from)};
        desc[parts++] = op->tail_desc;
      }
    }
    const uint64_t tag = chunk_tag(op->sequence, k);
    const ssize_t rc =
        parts == 1 ? fi_trecv(ep.get(), iov[0].iov_base, iov[0].iov_len, desc[0], op->peer_addr, tag, 0, &pc->fi_ctx)
                   : fi_trecvv(ep.get(), iov.data(), desc.data(), parts, op->peer_addr, tag, 0, &pc->fi_ctx);
    std::lock_guard lock(mu_);
    if (rc == 0) {
      ++op->posted;
      ++stats.chunk_receives_posted;
      if (!redone) ++op->next_chunk;
      // Cancelled while this was posted (end_early_locked or
      // start_drain_locked may have run between the context's adding and its
      // post, and then cancelled nothing): cancel it now, or it would wait
      // for a sender that is gone until the endpoint closes, or write a
      // withdrawn landing.
      if (op->cancelled || (op->draining && pc->into_tail)) (void)fi_cancel(&ep.get()->fid, &pc->fi_ctx);
      continue;
    }
    release_slots_locked(1);
    if (pc->into_tail) {
      pc->into_tail = false;
      if (--op->tail_receives == 0 && op->draining) release_landing_locked(*op);
    }
    if (redone) op->redo.push_back(k);
    if (rc == -FI_EAGAIN) {
      // The provider's receive queue is full: try again from progress_step,
      // once completions have made room; the deadline ends it meanwhile.
      op->unposted = pc;
      park_chunks_locked(op);
      break;
    }
    op->first_error = Status(StatusCode::kPeerError, op->describe() + " from " + describe_peer_locked(op->peer) +
                                                         ": post failed: " + fi_strerror(static_cast<int>(-rc)));
  }
  slots_cv_.notify_all();
  deliver(inbound_done);
}

void Endpoint::Impl::park_chunks_locked(Operation* op) {
  chunk_pending.push_back(op);
  has_chunk_pending.store(true, std::memory_order_release);
}

void Endpoint::Impl::start_drain_locked(Operation& op, ByteBuffer scratch, FidHandle<fid_mr> mr, bool registered) {
  if (op.cancelled || op.draining) return;
  if (!registered) {
    // No scratch to drain into: end it instead; the sender's remaining
    // chunks then wait out its timeout.
    (void)end_early_locked(op, StatusCode::kTimedOut, ": its landing was withdrawn");
    return;
  }
  // Drained receives share this one chunk of scratch.
  op.scratch = std::move(scratch);
  op.scratch_desc = adopt_registration(op, std::move(mr));
  op.draining = true;
  op.for_each_context([&](PostContext& pc) {
    if (pc.into_tail) (void)fi_cancel(&ep.get()->fid, &pc.fi_ctx);
  });
  if (op.tail_receives == 0) release_landing_locked(op);
}

void Endpoint::Impl::release_landing_locked(Operation& op) {
  if (op.landing_released) return;
  op.landing_released = true;
  landings.erase(op.landing);
  landing_cv.notify_all();
}

void Endpoint::Impl::dispatch(PostContext* pc, fi_addr_t src, size_t len, const Status& err, int err_code) {
  Operation* op = pc->op;
  if (op->kind == OpKind::kPoolBuffer) {
    on_pool_buffer(pc->index, src, len, err_code);
    return;
  }
  std::vector<Operation*> inbound_done;
  bool post_more = false;
  {
    std::lock_guard lock(mu_);
    ++op->completed;
    if (op->kind == OpKind::kInbound && op->draining && !op->cancelled && err_code == FI_ECANCELED) {
      // Cancelled to withdraw its landing: drain the chunk instead, posting
      // again even if every chunk had been posted.
      op->redo.push_back(pc->index);
      op->all_posted = false;
    } else if (!err.ok() && op->first_error.ok()) {
      op->first_error = err;
    }
    if (pc->into_tail && --op->tail_receives == 0 && op->draining) release_landing_locked(*op);
    // A peer that keeps completing is not "stopped answering": the timeout
    // counts from the operation's last progress.
    if (op->all_posted && op->completed == op->planned) {
      finish_locked(op, inbound_done);  // a send or RMA is freed here: op and pc are gone
    } else {
      if (!op->cancelled) op->deadline = coarse_now() + options.timeout;
      // A chunk receive ended and its message has more to post (or must be
      // wound up, cancelled): take the posting right unless another thread has it.
      post_more = op->kind == OpKind::kInbound && !op->all_posted && !op->chunk_poster;
      if (post_more) op->chunk_poster = true;
    }
    release_slots_locked(1);  // under this lock, not one more
  }
  slots_cv_.notify_all();
  deliver(inbound_done);
  if (post_more) post_more_chunks(op);
}

int Endpoint::Impl::progress_once(bool block) {
  constexpr int kBatch = 16;
  fi_cq_tagged_entry entries[kBatch];
  fi_addr_t srcs[kBatch];
  ssize_t n = block && has_wait
                  ? fi_cq_sreadfrom(cq.get(), entries, kBatch, srcs, nullptr, 1)  // 1 ms
                  : fi_cq_readfrom(cq.get(), entries, kBatch, srcs);
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      dispatch(static_cast<PostContext*>(entries[i].op_context), srcs[i], entries[i].len, {}, 0);
    }
    return static_cast<int>(n);
  }
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry e{};
    if (fi_cq_readerr(cq.get(), &e, 0) != 1) return 0;
    auto* pc = static_cast<PostContext*>(e.op_context);
    if (pc == nullptr) return 0;
    char prov_text[256] = "";
    const char* s = fi_cq_strerror(cq.get(), e.prov_errno, e.err_data, prov_text, sizeof prov_text);
    std::string text;
    {
      std::lock_guard lock(mu_);
      ++stats.error_completions;
      if (pc->op->kind != OpKind::kPoolBuffer) {
        text = pc->op->describe() + " with " + describe_peer_locked(pc->op->peer) + ": " + fi_strerror(e.err) +
               " (provider errno " + std::to_string(e.prov_errno) + ": " + (s ? s : "") + ")";
      }
    }
    dispatch(pc, FI_ADDR_NOTAVAIL, e.len,
             Status(e.err == FI_ECANCELED ? StatusCode::kTimedOut : StatusCode::kPeerError, text), e.err);
    return 1;
  }
  return 0;
}

void Endpoint::Impl::sweep_deadlines() {
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    ops.for_each([&](Operation& op) {
      if (now < op.deadline) return;
      const std::string why = " did not complete within " + std::to_string(options.timeout.count()) + " ms";
      if (end_early_locked(op, StatusCode::kTimedOut, why)) ++stats.timed_out;
    });
  }

  // A message that never came (its sender failed to post it) must not hold
  // back the ones after it forever. One still being received is not a gap:
  // its own deadline, which each chunk's arrival moves on, ends it if it
  // stops (a large message may take longer than the timeout in all).
  std::vector<Message> ready;
  bool pushed = false;
  {
    std::lock_guard lock(mu_);
    for (auto& [peer, po] : order) {
      if (po.held.empty() || now - po.gap_since < options.timeout) continue;
      if (receiving_locked(peer, po.next_deliver, po.held.begin()->first)) {
        po.gap_since = now;
        continue;
      }
      stats.skipped_in_order += po.held.begin()->first - po.next_deliver;
      po.next_deliver = po.held.begin()->first;
      drain_locked(po, ready);
      po.gap_since = now;
    }
    pushed = push_inbox_locked(ready);  // under mu_, in order (deliver_in_order)
  }
  if (pushed) inbox_cv_.notify_all();
}

bool Endpoint::Impl::receiving_locked(PeerId peer, uint64_t from, uint64_t to) {
  const uint64_t inc = incarnation_locked(peer);
  bool found = false;
  ops.for_each([&](Operation& op) {
    found = found || (op.kind == OpKind::kInbound && !op.cancelled && op.peer == peer && op.incarnation == inc &&
                      op.sequence >= from && op.sequence < to);
  });
  return found;
}

bool Endpoint::Impl::end_early_locked(Operation& op, StatusCode code, const std::string& why) {
  if (op.cancelled) return false;
  if (op.kind == OpKind::kInbound) {
    // Receives can be cancelled; their FI_ECANCELED completions then
    // finish the operation. Under mu_: the operation cannot end (and its
    // contexts be freed and reused) meanwhile.
    op.cancelled = true;
    op.for_each_context([&](PostContext& pc) { (void)fi_cancel(&ep.get()->fid, &pc.fi_ctx); });
    return true;
  }
  if (op.fulfilled()) return false;
  // A send ended here gives its large-message place back now: a peer that
  // never completes it (dead, or replaced under the same rank) must not
  // hold back the sends after it.
  release_large_place_locked(op);
  // Sends and RMA stay until their completion or the close.
  // Ended before its completions: the provider may still hold its memory.
  op.complete_locked(Status(code, op.describe() + " to " + describe_peer_locked(op.peer) + why), /*lent=*/true);
  op.cancelled = true;
  return true;
}

void Endpoint::Impl::release_large_place_locked(Operation& op) {
  if (!op.counts_as_large) return;
  op.counts_as_large = false;
  --large_in_flight[op.peer];
  slots_cv_.notify_all();  // acquire_large_place may be waiting
}

void Endpoint::Impl::fail_ops_of(PeerId peer, fi_addr_t addr, const std::string& why) {
  std::lock_guard lock(mu_);
  ops.for_each([&](Operation& op) {
    if (op.kind == OpKind::kPoolBuffer || op.peer != peer) return;
    if (addr != FI_ADDR_UNSPEC && op.peer_addr != addr) return;
    (void)end_early_locked(op, StatusCode::kPeerError, ": " + why);
  });
}

int Endpoint::Impl::progress_step(bool may_block) {
  const int n = progress_once(may_block && has_wait);
  if (has_repost_pending.load(std::memory_order_acquire)) {
    std::vector<size_t> retry;
    {
      std::lock_guard lock(mu_);
      retry.swap(repost_pending);
      has_repost_pending.store(false, std::memory_order_relaxed);
    }
    for (size_t slot : retry) repost(slot);
  }
  if (has_chunk_pending.load(std::memory_order_acquire)) {
    std::vector<Operation*> retry;
    {
      std::lock_guard lock(mu_);
      retry.swap(chunk_pending);
      has_chunk_pending.store(false, std::memory_order_relaxed);
    }
    for (Operation* op : retry) post_more_chunks(op);  // each holds its posting right
  }
  const auto now = coarse_now();
  if (now >= next_sweep.load()) {
    next_sweep = now + std::chrono::milliseconds(5);
    sweep_deadlines();
  }
  return n;
}

// Polls while there is traffic, and for `idle_spin` after the last
// completion (yielding the core between polls); then blocks in the CQ's wait
// object, one millisecond at a time, so an idle endpoint costs no CPU.
// With busy_poll it never blocks.
void Endpoint::Impl::progress_loop() {
  auto last_activity = Clock::now();
  while (!stopping) {
    const bool may_block = !options.busy_poll && Clock::now() - last_activity > options.idle_spin;
    const int n = progress_step(may_block);
    if (n > 0) {
      last_activity = Clock::now();
    } else if (!may_block) {
      std::this_thread::yield();
    } else if (!has_wait) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace parafab::rdma
