// Private to rdma/: the state behind Endpoint, shared by its three
// implementation files (endpoint_setup.cpp: opening and addressing;
// endpoint.cpp: posting operations; endpoint_progress.cpp: completions).
//
// The Endpoint's machinery. Threads and locks:
//
// - Any thread may post (send/read/write) and any thread may read the CQ:
//   the domain is opened FI_THREAD_SAFE. A poster that meets -FI_EAGAIN
//   drives progress itself (reads the CQ) before retrying, as fabtests'
//   FT_POST does; it never spins on the post alone.
// - The progress thread reads the CQ (blocking in fi_cq_sreadfrom with a
//   short timeout when the CQ has a wait object, so idle endpoints cost no
//   CPU), dispatches completions, reposts receive buffers and fails
//   operations whose deadline has passed.
// - `mu_` guards the operation table, the peer maps and the stats; it is
//   never held across a libfabric post or CQ read, so a dispatch that posts
//   (a large message's chunk receives) cannot deadlock with a poster.
//   `inbox_mu_` guards the queue of received messages. It is taken inside
//   mu_ (messages enter the inbox in their sender's order) and never the
//   other way round: receive() holds only inbox_mu_.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "rdma/endpoint.h"
#include "rdma/fid_handle.h"
#include "rdma/message_framing.h"

namespace parafab::rdma {

using Clock = std::chrono::steady_clock;
// Clock::now() as of the kernel's last tick (CLOCK_MONOTONIC_COARSE, the
// clock steady_clock reads, without the time since the tick: 4 ms here).
// For operation deadlines and the sweep's schedule, which a few
// milliseconds do not change, on paths every message takes: it costs 5 ns
// on this project's VM where Clock::now() costs 23, and a 64 KiB message
// read the clock about 16 times.
inline Clock::time_point coarse_now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                       std::chrono::nanoseconds(ts.tv_nsec)));
}
// Messages from this size on count against large_in_flight_per_peer. Over
// shm, streaming 8 in flight: 8 and 16 KiB 10% slower with the limit of 2,
// 32 KiB even, 64 KiB 1.7-2x faster.
inline constexpr uint64_t kLargeLimitMinBytes = 32 * 1024;
// At most this many chunk receives of one inbound message are posted at a
// time (and at most a quarter of max_in_flight): a header announcing chunks
// that never come holds no more slots than that.
inline constexpr size_t kChunkWindow = 16;
// How long a shm peer's process counts as alive after a check (lookup_locked).
inline constexpr std::chrono::milliseconds kShmAliveCheckEvery{1};

struct InfoDeleter {
  void operator()(fi_info* p) const { fi_freeinfo(p); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

inline Completion ready_future(Status s) { return Completion::ready(std::move(s)); }

struct Operation;

// The context of one posted libfabric operation: fi_context2 first, so the
// completion's op_context is this struct (Mooncake's efa_endpoint habit).
struct PostContext {
  fi_context2 fi_ctx;
  Operation* op = nullptr;
  size_t index = 0;  // receive-pool slot, or chunk number
  bool into_tail = false;  // a chunk receive writing into a landing's tail
};

enum class OpKind { kSend, kRma, kInbound, kPoolBuffer };

struct Operation {
  OpKind kind = OpKind::kSend;
  PeerId peer = 0;
  fi_addr_t peer_addr = FI_ADDR_UNSPEC;
  // What it is, for messages; formatted only when one is needed (describe()).
  const char* verb = "";          // "send", "RMA read", ...
  const char* detail_name = "";   // "tag", "offset", "message"
  uint64_t detail = 0;
  std::string describe() const {  // "send of 1048576 bytes (tag 7)"
    return std::string(verb) + " of " + std::to_string(bytes) + " bytes (" + detail_name + " " +
           std::to_string(detail) + ")";
  }
  Clock::time_point deadline;

  // Fulfilled once (complete_locked); a kInbound operation has none.
  std::shared_ptr<detail::CompletionState> completion;
  bool fulfilled() const { return completion && completion->done.load(std::memory_order_relaxed); }
  // Sends and RMA: gives the operation's future its Status, once (mu_ held).
  void complete_locked(Status s, bool lent = false) { completion->set(std::move(s), lent); }
  Status first_error;
  size_t planned = 0;    // posts this operation makes in all
  size_t posted = 0;
  size_t completed = 0;  // completions (success or error) read so far
  bool all_posted = false;
  bool cancelled = false;

  bool counts_as_large = false;  // holds one of its peer's large_in_flight places
  // The frame as sent: the header, plus a small eager payload copied behind
  // it. In `inline_frame` when it fits (no allocation; left uninitialised,
  // see make_op), else in `bounce`.
  static constexpr size_t kInlineFrameBytes = 256;
  std::array<std::byte, kInlineFrameBytes> inline_frame;
  ByteBuffer bounce;
  // Chunks gathered from more pieces than iov_limit (their heap buffers stay put).
  std::vector<std::vector<std::byte>> copies;
  std::vector<FidHandle<fid_mr>> registrations;  // FI_MR_LOCAL, for the operation's life
  // One context per post, at stable addresses: the first two in place (a
  // large message's header and chunk, or one chunk receive), more in a list.
  // An allocation per post before (list nodes; a std::deque allocates two
  // blocks even when empty).
  std::array<PostContext, 2> first_contexts;
  size_t n_first_contexts = 0;
  std::list<PostContext> more_contexts;
  size_t context_count() const { return n_first_contexts + more_contexts.size(); }
  template <typename F>
  void for_each_context(F&& f) {
    for (size_t i = 0; i < n_first_contexts; ++i) f(first_contexts[i]);
    for (PostContext& pc : more_contexts) f(pc);
  }

  // kInbound: the message being reassembled, and its place in its sender's
  // order; `incarnation` the sender's process (Impl::incarnation) it came from.
  Message message;
  uint64_t sequence = 0;
  uint64_t incarnation = 0;
  size_t bytes = 0;
  // kInbound into a landing (Endpoint::expect): the message's first
  // head_bytes go to message.data, the rest to tail.
  LandingId landing = 0;
  size_t head_bytes = 0;
  std::byte* tail = nullptr;
  // kInbound: its chunk receives, posted a window at a time (post_more_chunks),
  // more as they complete, so that a header announcing chunks that never
  // come holds a few slots, not all of them, and no thread waits for room.
  uint64_t chunk_bytes = 0;
  uint64_t chunks = 0;      // in all
  uint64_t next_chunk = 0;  // the next to post (mu_)
  void* head_desc = nullptr;  // FI_MR_LOCAL descriptors of message.data and tail
  void* tail_desc = nullptr;
  // Whether one thread has the right to post its chunks: it is posting, or
  // the operation waits in chunk_pending for room (mu_). Only the holder
  // sets all_posted, so an operation with the right is never finished.
  bool chunk_poster = false;
  PostContext* unposted = nullptr;  // a context whose post met -FI_EAGAIN, for the retry
  // Withdrawn from its landing while its sender still sends (withdraw(),
  // start_drain_locked): the receives into the tail are cancelled, and the
  // chunks not yet received, those cancelled included (`redo`), go to
  // `scratch`, so that the sender's chunks all find a receive and its send
  // completes; the message is then dropped as failed.
  bool draining = false;
  std::vector<uint64_t> redo;
  ByteBuffer scratch;
  void* scratch_desc = nullptr;  // its FI_MR_LOCAL descriptor
  size_t tail_receives = 0;  // receives into the landing's tail not yet ended
  bool landing_released = false;  // release_landing_locked has run

  // Links of OpTable (mu_).
  Operation* prev_op = nullptr;
  Operation* next_op = nullptr;
};

// The operations in flight, owned: an intrusive doubly linked list, so that
// adding and removing one allocates nothing (a hash table keyed by the
// operation's address cost a node allocation and a free per operation).
class OpTable {
 public:
  OpTable() = default;
  OpTable(const OpTable&) = delete;
  OpTable& operator=(const OpTable&) = delete;
  ~OpTable() { clear(); }

  void insert(std::unique_ptr<Operation> owned) {
    Operation* op = owned.release();
    op->prev_op = nullptr;
    op->next_op = head_;
    if (head_ != nullptr) head_->prev_op = op;
    head_ = op;
  }
  // Unlinks `op` (which must be in the table) and hands it over.
  std::unique_ptr<Operation> release(Operation* op) {
    if (op->prev_op != nullptr) {
      op->prev_op->next_op = op->next_op;
    } else {
      head_ = op->next_op;
    }
    if (op->next_op != nullptr) op->next_op->prev_op = op->prev_op;
    op->prev_op = op->next_op = nullptr;
    return std::unique_ptr<Operation>(op);
  }
  void erase(Operation* op) { release(op).reset(); }
  // f(Operation&) for each; f must not add or remove operations.
  template <typename F>
  void for_each(F&& f) {
    for (Operation* op = head_; op != nullptr; op = op->next_op) f(*op);
  }
  void clear() {
    while (head_ != nullptr) erase(head_);
  }

 private:
  Operation* head_ = nullptr;
};

// A non-owning reference to a callable `ssize_t(void* ctx)` that posts one
// libfabric operation: std::function would allocate for a lambda of more
// than two captures, once per post.
class PostFn {
 public:
  template <typename F>
    requires(!std::is_same_v<std::decay_t<F>, PostFn>)
  PostFn(F&& f)  // NOLINT: converts from any such lambda, like std::function
      : obj_(static_cast<void*>(&f)),
        call_([](void* obj, void* ctx) -> ssize_t { return (*static_cast<std::remove_reference_t<F>*>(obj))(ctx); }) {}
  ssize_t operator()(void* ctx) const { return call_(obj_, ctx); }

 private:
  void* obj_;
  ssize_t (*call_)(void*, void*);
};

struct Endpoint::Impl {
  EndpointOptions options;
  ProviderInfo provider_info;
  InfoPtr info;
  size_t max_chunk = 0;
  size_t eager_limit = 0;  // frame bytes (header included) sent in one message
  size_t iov_limit = 1;     // iovec entries per send
  size_t rx_iov_limit = 1;  // and per receive
  bool has_rma = false;
  bool has_hmem = false;
  bool has_wait = false;
  // The provider's FI_MR_* bits, plus FI_MR_LOCAL with
  // options.register_local_buffers (provider_info.mr_mode keeps the provider's).
  uint64_t mr_mode = 0;
  std::atomic<uint64_t> next_mr_key{1};
  std::atomic<uint64_t> local_registrations{0};  // EndpointStats::local_registrations

  // libfabric objects: reverse destruction closes ep, pool MR, AV, CQ,
  // domain, fabric, in that order.
  FidHandle<fid_fabric> fabric;
  FidHandle<fid_domain> domain;
  FidHandle<fid_cq> cq;
  FidHandle<fid_av> av;
  std::vector<std::byte> pool_memory;
  FidHandle<fid_mr> pool_mr;
  std::vector<Operation> pool_ops;
  FidHandle<fid_ep> ep;

  mutable std::mutex mu_;
  std::condition_variable slots_cv_;
  size_t in_flight = 0;
  OpTable ops;
  std::unordered_map<PeerId, fi_addr_t> peer_addrs;
  std::unordered_map<fi_addr_t, PeerId> addr_peers;
  std::unordered_map<PeerId, std::string> peer_names;  // fi_av_straddr of each peer
  std::unordered_map<PeerId, pid_t> shm_pid;           // shm peers: the process behind the address
  // When each shm peer's process was last seen alive (lookup_locked).
  mutable std::unordered_map<PeerId, Clock::time_point> shm_alive_at;
  std::unordered_map<PeerId, std::string> failed_peers;  // mark_peer_failed: why (until replace_peer)
  // Per-peer FIFO: a sender numbers its messages to each peer (the frame's
  // message id); the receiver hands them out in that order, holding a small
  // message that overtook a large one still being reassembled. A gap that
  // stays open past the timeout (a failed message) is skipped.
  struct PeerOrder {
    uint64_t next_send = 0;
    uint64_t next_deliver = 0;
    std::map<uint64_t, std::optional<Message>> held;  // nullopt: failed, skip
    Clock::time_point gap_since;
  };
  std::unordered_map<PeerId, PeerOrder> order;
  // By peer: how many times replace_peer gave it a new process (absent: 0).
  // A message is delivered into its sender's order only while the process
  // it came from is still the peer's: one of an old process that ends (a
  // cancelled receive, a late eager message) must not take or fill a place
  // in the new process's numbering, which starts again from 0.
  std::unordered_map<PeerId, uint64_t> incarnation;
  uint64_t incarnation_locked(PeerId peer) const {
    const auto it = incarnation.find(peer);
    return it == incarnation.end() ? 0 : it->second;
  }
  std::vector<size_t> repost_pending;  // pool slots whose repost met -FI_EAGAIN
  // Whether repost_pending may be non-empty: read without mu_ on every
  // progress step, so an empty list costs no lock.
  std::atomic<bool> has_repost_pending{false};
  // Inbound messages whose next chunk receive found no room (no slot, or
  // -FI_EAGAIN): progress_step posts more of them. They hold their posting
  // right (Operation::chunk_poster) while here.
  std::vector<Operation*> chunk_pending;
  std::atomic<bool> has_chunk_pending{false};
  // Chunk receives of one inbound message posted at a time: kChunkWindow,
  // or a quarter of max_in_flight when that is less (at least one).
  size_t chunk_window = 1;
  // Large sends in flight per peer, and the most allowed (0: no limit).
  std::unordered_map<PeerId, size_t> large_in_flight;
  size_t large_limit = 0;
  EndpointStats stats;

  // Landings (Endpoint::expect) by id (mu_): waiting for their message,
  // or bound to the inbound operation receiving it until that ends
  // (finish_locked erases it and notifies landing_cv).
  struct LandingSpot {
    Landing spec;
    Operation* bound = nullptr;
  };
  std::unordered_map<LandingId, LandingSpot> landings;
  std::map<std::pair<PeerId, uint64_t>, LandingId> waiting_landings;  // by (peer, tag)
  LandingId next_landing = 1;
  std::condition_variable landing_cv;

  // Endpoint::retain_until_close (mu_): freed after ep, before the domain.
  std::vector<std::shared_ptr<void>> retained;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<Message> inbox;

  std::atomic<bool> stopping{false};
  std::atomic<Clock::time_point> next_sweep{Clock::now()};
  std::thread progress_thread;

  explicit Impl(EndpointOptions opts);
  ~Impl();

  std::string context() const {
    return "provider '" + options.provider + "' at node '" + options.node + "'";
  }
  std::string describe_peer_locked(PeerId peer) const;

  // Progress.
  int progress_once(bool block);
  int progress_step(bool may_block);  // CQ, reposts, and deadlines when due
  void progress_loop();
  // Whether waits here drive progress themselves (no progress thread, or
  // busy_poll), rather than sleep until the progress thread's completions.
  bool caller_drives_progress() const { return options.busy_poll || !options.progress_thread; }
  // Caller-driven progress: poll (or, unless busy_poll, block briefly) once.
  void caller_poll();
  void dispatch(PostContext* pc, fi_addr_t src, size_t len, const Status& err, int err_code);
  void on_pool_buffer(size_t slot, fi_addr_t src, size_t len, int err_code);
  void finish_locked(Operation* op, std::vector<Operation*>& inbound_done);
  void deliver(std::vector<Operation*>& inbound_done);
  // Hands `message` (nullopt: the message failed) to the inbox in its
  // sender's order; takes mu_, and inbox_mu_ inside it. One from an earlier
  // incarnation of the peer is only counted.
  void deliver_in_order(PeerId peer, uint64_t incarnation, uint64_t sequence, std::optional<Message> message);
  // Moves `ready` to the inbox (mu_ held; takes inbox_mu_). True when it
  // moved any: the caller notifies inbox_cv_ once the locks are let go.
  bool push_inbox_locked(std::span<Message> ready);
  // A message handed out: messages_received, bytes_received, messages_landed.
  void count_received_locked(const Message& m);
  // Moves the messages now in order out of `po` into `ready` (mu_ held).
  void drain_locked(PeerOrder& po, std::vector<Message>& ready);
  void sweep_deadlines();
  // The operations in flight with `peer` (at `addr`, or at any address when
  // FI_ADDR_UNSPEC) end now, failed with `why`: the peer's process is gone.
  // As after a timeout, a send or RMA stays with the provider until its
  // completion or the close; an inbound message's receives are cancelled.
  void fail_ops_of(PeerId peer, fi_addr_t addr, const std::string& why);
  // Ends `op` before its completions (mu_ held), for a timeout or a gone
  // peer: an inbound message's posted receives are cancelled (fi_cancel
  // under mu_, so that no operation can end and free its contexts, or a new
  // one take their addresses, in between; a receive posted after this sees
  // `cancelled` and cancels itself, see post_more_chunks()); a send's or RMA's future
  // gets `code` and "<op> to <peer>" + why. False when it had ended already.
  bool end_early_locked(Operation& op, StatusCode code, const std::string& why);
  // Whether a message of `peer` (its current process) numbered in [from,
  // to) is being received (mu_ held): a gap in its order that is not one.
  bool receiving_locked(PeerId peer, uint64_t from, uint64_t to);
  void repost(size_t slot);
  int enable_endpoint();
  // Addresses: throws FabricError naming `who` when the blob is not one of
  // this provider's; fi_av_insert; the peer's entries in the maps (mu_ held).
  void check_address_shape(std::span<const std::byte> address, const std::string& who) const;
  fi_addr_t insert_address(std::span<const std::byte> address, const std::string& who, std::string& name);
  void map_peer_locked(PeerId peer, fi_addr_t addr, const std::string& name);  // fi_enable, past a stale shm region of a dead process with our pid
  int post_pool_buffer(size_t slot);

  // Posting.
  bool acquire_slot(Clock::time_point deadline);
  // Takes one of `peer`'s large-message places (large_limit), driving
  // progress while all are taken. Fails after the timeout (kTimedOut), or
  // when the peer is declared failed meanwhile (kPeerError, its reason),
  // naming the send ("send of N bytes (tag T)").
  Status acquire_large_place(PeerId peer, uint64_t bytes, uint64_t tag);
  // Gives op's place back, once (mu_ held): at its finish, or when it ends early.
  void release_large_place_locked(Operation& op);
  void release_slots(size_t n);
  // One of max_in_flight, if free; gives n back (mu_ held; the caller
  // notifies slots_cv_ once the lock is let go).
  bool take_slot_locked() {
    if (in_flight >= options.max_in_flight) return false;
    ++in_flight;
    return true;
  }
  void release_slots_locked(size_t n) { in_flight -= std::min(in_flight, n); }
  // Posts one libfabric operation of `op`, retrying on -FI_EAGAIN until the
  // operation's deadline as it stands when the post starts (read under mu_:
  // completions of its earlier posts move it on, on another thread).
  Status post(Operation* op, PostFn fn);
  // A new context for one post of `op` (mu_ held).
  PostContext* add_context_locked(Operation& op);
  // A registration of [p, p+n) where the provider wants local buffers
  // registered (FI_MR_LOCAL, or register_local_buffers), else none. Throws
  // FabricError. Takes no lock.
  FidHandle<fid_mr> local_registration(const void* p, size_t n, uint64_t access);
  // Gives `mr` to `op` for its life; returns its descriptor (null for none).
  void* adopt_registration(Operation& op, FidHandle<fid_mr> mr);
  // Both: the descriptor of a registration owned by `op`.
  void* local_desc(Operation& op, const void* p, size_t n, uint64_t access);
  FidHandle<fid_mr> register_raw(void* base, size_t length, uint64_t access, MemoryKind kind, int device);
  // An operation, not yet in the table (make_op), or added to it (new_op).
  std::unique_ptr<Operation> make_op(OpKind kind, PeerId peer, fi_addr_t addr, const char* verb, uint64_t bytes,
                                     const char* detail_name, uint64_t detail) const;
  Operation* new_op(OpKind kind, PeerId peer, fi_addr_t addr, const char* verb, uint64_t bytes,
                    const char* detail_name, uint64_t detail);
  Completion finish_posting(Operation* op, const Status& post_status);
  fi_addr_t lookup_locked(PeerId peer, Status& err) const;
  Completion rma(bool is_read, PeerId peer, void* local, size_t size, const RemoteKey& remote, uint64_t offset,
                 const MemoryRegion* local_region);
  // Prepares `op` (a large message announced by `h`) for its chunk
  // receives and posts the first window of them.
  void post_inbound_chunks(Operation* op, const FrameHeader& h);
  // Posts more of `op`'s chunk receives, while fewer than chunk_window are
  // outstanding and slots are free, never waiting: without room it parks
  // the operation in chunk_pending. Once every chunk is posted, or the
  // operation is cancelled or a post failed, marks it all_posted (finishing
  // it when nothing is outstanding). The caller holds op's posting right.
  void post_more_chunks(Operation* op);
  // Puts `op`, which keeps its posting right, in chunk_pending (mu_ held).
  void park_chunks_locked(Operation* op);
  // Binds `op` (a large message announced by `h`) to the landing waiting
  // for it, if there is one it fits (mu_ held).
  void bind_landing_locked(Operation& op, const FrameHeader& h);
  // Withdraws `op`'s landing while the message goes on (mu_ held): cancels
  // its receives and drains the rest into `scratch` (one chunk, registered
  // as `mr` where the provider wants it; `registered` false when that
  // failed, and the message is ended instead) (Operation::draining). The
  // landing is released once no receive into its tail is left
  // (release_landing_locked).
  void start_drain_locked(Operation& op, ByteBuffer scratch, FidHandle<fid_mr> mr, bool registered);
  // Erases op's landing, waking withdraw() (mu_ held); once.
  void release_landing_locked(Operation& op);
};

}  // namespace parafab::rdma
