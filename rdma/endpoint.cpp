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
//   `inbox_mu_` guards the queue of received messages; it is taken after
//   `mu_` when both are needed.
#include "rdma/endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "rdma/fabric_error.h"
#include "rdma/fid_handle.h"
#include "rdma/message_framing.h"

namespace parafab::rdma {
namespace {

using Clock = std::chrono::steady_clock;

struct InfoDeleter {
  void operator()(fi_info* p) const { fi_freeinfo(p); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

std::future<Status> ready_future(Status s) {
  std::promise<Status> p;
  p.set_value(std::move(s));
  return p.get_future();
}

std::string hex_prefix(std::span<const std::byte> blob, size_t max_bytes = 16) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < blob.size() && i < max_bytes; ++i) {
    const auto b = static_cast<unsigned>(blob[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  if (blob.size() > max_bytes) out += "...";
  return out;
}

}  // namespace

struct Operation;

// The context of one posted libfabric operation: fi_context2 first, so the
// completion's op_context is this struct (Mooncake's efa_endpoint habit).
struct PostContext {
  fi_context2 fi_ctx;
  Operation* op = nullptr;
  size_t index = 0;  // receive-pool slot, or chunk number
};

enum class OpKind { kSend, kRma, kInbound, kPoolBuffer };

struct Operation {
  OpKind kind = OpKind::kSend;
  PeerId peer = 0;
  fi_addr_t peer_addr = FI_ADDR_UNSPEC;
  std::string what;  // "send of 1048576 bytes (tag 7)"
  Clock::time_point deadline;

  std::promise<Status> promise;
  bool promise_set = false;
  Status first_error;
  size_t planned = 0;    // posts this operation makes in all
  size_t posted = 0;
  size_t completed = 0;  // completions (success or error) read so far
  bool all_posted = false;
  bool cancelled = false;

  std::vector<std::byte> bounce;  // the frame: header, plus the payload when eager
  std::deque<std::vector<std::byte>> copies;  // chunks gathered from more pieces than iov_limit
  std::vector<FidHandle<fid_mr>> registrations;  // FI_MR_LOCAL, for the operation's life
  std::deque<PostContext> contexts;              // stable addresses

  // kInbound: the message being reassembled.
  Message message;
  size_t bytes = 0;
};

struct Endpoint::Impl {
  EndpointOptions options;
  ProviderInfo provider_info;
  InfoPtr info;
  size_t max_chunk = 0;
  size_t eager_limit = 0;  // frame bytes (header included) sent in one message
  size_t iov_limit = 1;
  bool has_rma = false;
  bool has_hmem = false;
  bool has_wait = false;
  uint64_t mr_mode = 0;
  std::atomic<uint64_t> next_mr_key{1};
  std::atomic<uint64_t> next_message_id{0};

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
  std::unordered_map<Operation*, std::unique_ptr<Operation>> ops;
  std::unordered_map<PeerId, fi_addr_t> peer_addrs;
  std::unordered_map<fi_addr_t, PeerId> addr_peers;
  std::unordered_map<PeerId, std::string> peer_names;  // fi_av_straddr of each peer
  std::vector<size_t> repost_pending;  // pool slots whose repost met -FI_EAGAIN
  EndpointStats stats;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<Message> inbox;

  std::atomic<bool> stopping{false};
  std::thread progress_thread;

  explicit Impl(EndpointOptions opts);
  ~Impl();

  std::string context() const {
    return "provider '" + options.provider + "' at node '" + options.node + "'";
  }
  std::string describe_peer_locked(PeerId peer) const;

  // Progress.
  int progress_once(bool block);
  void progress_loop();
  void dispatch(PostContext* pc, fi_addr_t src, size_t len, const Status& err, int err_code);
  void on_pool_buffer(size_t slot, fi_addr_t src, size_t len, int err_code);
  void finish_locked(Operation* op, std::vector<Operation*>& inbound_done);
  void deliver(std::vector<Operation*>& inbound_done);
  void sweep_deadlines();
  void repost(size_t slot);
  int post_pool_buffer(size_t slot);

  // Posting.
  bool acquire_slot(Clock::time_point deadline);
  void release_slots(size_t n);
  Status post(Operation* op, const std::function<ssize_t(void* ctx)>& fn, Clock::time_point deadline);
  void* local_desc(Operation& op, const void* p, size_t n, uint64_t access);
  FidHandle<fid_mr> register_raw(void* base, size_t length, uint64_t access, MemoryKind kind, int device);
  Operation* new_op(OpKind kind, PeerId peer, fi_addr_t addr, std::string what);
  std::future<Status> finish_posting(Operation* op, const Status& post_status);
  fi_addr_t lookup_locked(PeerId peer, Status& err) const;
  std::future<Status> rma(bool is_read, PeerId peer, void* local, size_t size, const RemoteKey& remote,
                          uint64_t offset, const MemoryRegion* local_region);
  void post_inbound_chunks(Operation* op, const FrameHeader& h);
};

Endpoint::Impl::Impl(EndpointOptions opts) : options(std::move(opts)) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) throw FabricError("fi_allocinfo", -FI_ENOMEM, context());
  hints->ep_attr->type = FI_EP_RDM;
  const uint64_t base_caps = FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV | (options.hmem ? FI_HMEM : 0);
  const uint64_t rma_caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // Every registration mode we honour; FI_MR_RAW keys are not supported.
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_HMEM;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (!options.provider.empty()) hints->fabric_attr->prov_name = strdup(options.provider.c_str());
  const char* node = options.node.empty() || options.provider == "shm" ? nullptr : options.node.c_str();

  fi_info* raw = nullptr;
  hints->caps = base_caps | rma_caps;
  int rc = fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints.get(), &raw);
  if (rc == -FI_ENODATA) {  // no FI_RMA: messages only, RMA calls answer kUnsupported
    hints->caps = base_caps;
    rc = fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints.get(), &raw);
  }
  check(rc, "fi_getinfo", context() + " (tagged RDM with FI_SOURCE and FI_DIRECTED_RECV)");
  info.reset(raw);
  fi_info* fi = info.get();
  has_rma = (fi->caps & FI_RMA) != 0;
  has_hmem = (fi->caps & FI_HMEM) != 0;
  mr_mode = static_cast<uint64_t>(fi->domain_attr->mr_mode);

  provider_info.provider = fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "";
  provider_info.fabric = fi->fabric_attr->name ? fi->fabric_attr->name : "";
  provider_info.domain = fi->domain_attr->name ? fi->domain_attr->name : "";
  provider_info.max_msg_size = fi->ep_attr->max_msg_size;
  provider_info.inject_size = fi->tx_attr->inject_size;
  provider_info.mr_mode = mr_mode;
  provider_info.rma = has_rma;
  provider_info.tagged = true;
  provider_info.manual_progress = fi->domain_attr->data_progress == FI_PROGRESS_MANUAL;

  max_chunk = fi->ep_attr->max_msg_size;
  if (options.max_message_bytes != 0) max_chunk = std::min(max_chunk, options.max_message_bytes);
  if (max_chunk < kMinChunkBytes) {
    throw FabricError("max_msg_size", -FI_EINVAL,
                      context() + ": message limit " + std::to_string(max_chunk) + " is below " +
                          std::to_string(kMinChunkBytes) + " bytes");
  }
  eager_limit = std::max(kFrameHeaderBytes, std::min(options.eager_bytes, max_chunk));
  iov_limit = std::max<size_t>(1, fi->tx_attr->iov_limit);

  check(fi_fabric(fi->fabric_attr, fabric.out(), nullptr), "fi_fabric", context());
  check(fi_domain(fabric.get(), fi, domain.out(), nullptr), "fi_domain", context());

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = fi->tx_attr->size + fi->rx_attr->size;
  // A file-descriptor wait lets an idle progress thread sleep in the kernel;
  // FI_WAIT_UNSPEC may give FI_WAIT_YIELD, which spins (and under shm did not
  // honour the sread timeout).
  cq_attr.wait_obj = FI_WAIT_FD;
  if (fi_cq_open(domain.get(), &cq_attr, cq.out(), nullptr) == 0) {
    has_wait = true;
  } else {
    cq_attr.wait_obj = FI_WAIT_NONE;
    check(fi_cq_open(domain.get(), &cq_attr, cq.out(), nullptr), "fi_cq_open", context());
  }
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_UNSPEC;
  check(fi_av_open(domain.get(), &av_attr, av.out(), nullptr), "fi_av_open", context());
  check(fi_endpoint(domain.get(), fi, ep.out(), nullptr), "fi_endpoint", context());
  check(fi_ep_bind(ep.get(), &av.get()->fid, 0), "fi_ep_bind(av)", context());
  check(fi_ep_bind(ep.get(), &cq.get()->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)", context());
  check(fi_enable(ep.get()), "fi_enable", context());

  // The receive pool: one registration for all buffers (FI_MR_LOCAL), posted
  // before the progress thread starts (no fi_enable/fi_cq_read race).
  const size_t nbuf = std::max<size_t>(1, options.receive_buffers);
  pool_memory.resize(nbuf * eager_limit);
  pool_ops.resize(nbuf);
  if (mr_mode & FI_MR_LOCAL) {
    pool_mr = register_raw(pool_memory.data(), pool_memory.size(), FI_RECV, MemoryKind::kHost, 0);
  }
  for (size_t i = 0; i < nbuf; ++i) {
    Operation& op = pool_ops[i];
    op.kind = OpKind::kPoolBuffer;
    op.contexts.emplace_back();
    op.contexts.back().op = &op;
    op.contexts.back().index = i;
    check(post_pool_buffer(i), "fi_trecv(receive pool)", context());
  }
  progress_thread = std::thread([this] { progress_loop(); });
}

Endpoint::Impl::~Impl() {
  stopping = true;
  if (progress_thread.joinable()) progress_thread.join();
  // Close the endpoint first: after that no completion can touch the
  // operations, so their promises can be failed and their memory freed.
  ep.reset();
  pool_mr.reset();
  std::lock_guard lock(mu_);
  for (auto& [raw, op] : ops) {
    if (!op->promise_set && op->kind != OpKind::kInbound) {
      op->promise.set_value(Status(StatusCode::kClosed, op->what + ": endpoint closed"));
      op->promise_set = true;
    }
  }
  ops.clear();
}

FidHandle<fid_mr> Endpoint::Impl::register_raw(void* base, size_t length, uint64_t access, MemoryKind kind,
                                               int device) {
  FidHandle<fid_mr> mr;
  fi_mr_attr attr{};
  iovec iov{base, length};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.requested_key = (mr_mode & FI_MR_PROV_KEY) ? 0 : next_mr_key.fetch_add(1);
  if (kind == MemoryKind::kCuda) {
    attr.iface = FI_HMEM_CUDA;
    attr.device.cuda = device;
  }
  check(fi_mr_regattr(domain.get(), &attr, 0, mr.out()), "fi_mr_regattr",
        context() + " (" + std::to_string(length) + " bytes)");
  if (mr_mode & FI_MR_ENDPOINT) {
    check(fi_mr_bind(mr.get(), &ep.get()->fid, 0), "fi_mr_bind", context());
    check(fi_mr_enable(mr.get()), "fi_mr_enable", context());
  }
  return mr;
}

int Endpoint::Impl::post_pool_buffer(size_t slot) {
  PostContext& pc = pool_ops[slot].contexts.front();
  void* desc = pool_mr ? fi_mr_desc(pool_mr.get()) : nullptr;
  return static_cast<int>(fi_trecv(ep.get(), pool_memory.data() + slot * eager_limit, eager_limit, desc,
                                   FI_ADDR_UNSPEC, kHeaderTag, 0, &pc.fi_ctx));
}

void Endpoint::Impl::repost(size_t slot) {
  if (stopping) return;
  const int rc = post_pool_buffer(slot);
  if (rc == -FI_EAGAIN) {
    std::lock_guard lock(mu_);
    repost_pending.push_back(slot);
  }
  // Any other failure leaves the pool one buffer smaller; the endpoint
  // keeps working with the rest.
}

std::string Endpoint::Impl::describe_peer_locked(PeerId peer) const {
  auto it = peer_names.find(peer);
  return "peer " + std::to_string(peer) + (it == peer_names.end() ? std::string() : " (" + it->second + ")");
}

fi_addr_t Endpoint::Impl::lookup_locked(PeerId peer, Status& err) const {
  auto it = peer_addrs.find(peer);
  if (it == peer_addrs.end()) {
    err = Status(StatusCode::kInvalidArgument, "peer " + std::to_string(peer) + " was never added (add_peer)");
    return FI_ADDR_UNSPEC;
  }
  return it->second;
}

Operation* Endpoint::Impl::new_op(OpKind kind, PeerId peer, fi_addr_t addr, std::string what) {
  auto op = std::make_unique<Operation>();
  op->kind = kind;
  op->peer = peer;
  op->peer_addr = addr;
  op->what = std::move(what);
  op->deadline = Clock::now() + options.timeout;
  Operation* raw = op.get();
  std::lock_guard lock(mu_);
  ops.emplace(raw, std::move(op));
  return raw;
}

bool Endpoint::Impl::acquire_slot(Clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (in_flight < options.max_in_flight) {
        ++in_flight;
        return true;
      }
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

void Endpoint::Impl::release_slots(size_t n) {
  if (n == 0) return;
  {
    std::lock_guard lock(mu_);
    in_flight -= std::min(in_flight, n);
  }
  slots_cv_.notify_all();
}

// Posts one operation of `op` with FT_POST's discipline: on -FI_EAGAIN read
// the CQ (progress) and retry, until the deadline.
Status Endpoint::Impl::post(Operation* op, const std::function<ssize_t(void* ctx)>& fn, Clock::time_point deadline) {
  if (!acquire_slot(deadline)) {
    std::lock_guard lock(mu_);
    return Status(StatusCode::kTimedOut, op->what + " to " + describe_peer_locked(op->peer) +
                                             ": no room to post within the timeout (" +
                                             std::to_string(options.max_in_flight) + " operations in flight)");
  }
  PostContext* pc;
  {
    std::lock_guard lock(mu_);
    op->contexts.emplace_back();
    pc = &op->contexts.back();
    pc->op = op;
    pc->index = op->contexts.size() - 1;
  }
  for (;;) {
    const ssize_t rc = fn(&pc->fi_ctx);
    if (rc == 0) {
      std::lock_guard lock(mu_);
      ++op->posted;
      return {};
    }
    if (rc != -FI_EAGAIN || Clock::now() >= deadline || stopping) {
      release_slots(1);
      std::lock_guard lock(mu_);
      return Status(rc == -FI_EAGAIN ? StatusCode::kTimedOut : StatusCode::kPeerError,
                    op->what + " to " + describe_peer_locked(op->peer) + ": post failed: " +
                        fi_strerror(static_cast<int>(-rc)));
    }
    (void)progress_once(false);
  }
}

void* Endpoint::Impl::local_desc(Operation& op, const void* p, size_t n, uint64_t access) {
  if (!(mr_mode & FI_MR_LOCAL) || n == 0) return nullptr;
  op.registrations.push_back(register_raw(const_cast<void*>(p), n, access, MemoryKind::kHost, 0));
  return fi_mr_desc(op.registrations.back().get());
}

// Called once every post of `op` has been attempted: records a post failure
// and completes the operation if nothing is outstanding.
std::future<Status> Endpoint::Impl::finish_posting(Operation* op, const Status& post_status) {
  std::future<Status> fut = op->promise.get_future();
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

// Completes `op` (mu_ held): fulfils the promise or, for an inbound
// message, hands it to deliver(). Erases it from the table.
void Endpoint::Impl::finish_locked(Operation* op, std::vector<Operation*>& inbound_done) {
  if (op->kind == OpKind::kInbound) {
    if (op->first_error.ok() && !op->cancelled) {
      inbound_done.push_back(op);
      ops.at(op).release();  // deliver() takes ownership
    } else {
      ++stats.inbound_failed;
    }
    ops.erase(op);
    return;
  }
  if (!op->promise_set) {
    if (op->first_error.ok()) {
      if (op->kind == OpKind::kSend) {
        ++stats.messages_sent;
        stats.bytes_sent += op->bytes;
      } else {
        stats.rma_bytes += op->bytes;
      }
    }
    op->promise.set_value(op->first_error);
    op->promise_set = true;
  }
  ops.erase(op);
}

void Endpoint::Impl::deliver(std::vector<Operation*>& inbound_done) {
  for (Operation* op : inbound_done) {
    std::unique_ptr<Operation> owned(op);
    {
      std::lock_guard lock(mu_);
      ++stats.messages_received;
      stats.bytes_received += owned->message.data.size();
    }
    {
      std::lock_guard lock(inbox_mu_);
      inbox.push_back(std::move(owned->message));
    }
    inbox_cv_.notify_one();
  }
  inbound_done.clear();
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
  {
    std::lock_guard lock(mu_);
    auto it = addr_peers.find(src);
    if (src == FI_ADDR_NOTAVAIL || it == addr_peers.end()) {
      ++stats.dropped_unknown_sender;
      src = FI_ADDR_NOTAVAIL;
    } else {
      peer = it->second;
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
    m.data.assign(frame + kFrameHeaderBytes, frame + len);
    {
      std::lock_guard lock(mu_);
      ++stats.messages_received;
      stats.bytes_received += m.data.size();
    }
    {
      std::lock_guard lock(inbox_mu_);
      inbox.push_back(std::move(m));
    }
    inbox_cv_.notify_one();
  } else {
    Operation* op = new_op(OpKind::kInbound, peer, src,
                           "receive of " + std::to_string(header->total_bytes) + " bytes (message " +
                               std::to_string(header->message_id) + ")");
    op->message.from = peer;
    op->message.tag = header->user_tag;
    op->message.data.resize(header->total_bytes);
    // Repost first: the chunk posts may need progress, which needs buffers.
    repost(slot);
    post_inbound_chunks(op, *header);
    return;
  }
  repost(slot);
}

void Endpoint::Impl::post_inbound_chunks(Operation* op, const FrameHeader& h) {
  const uint64_t n = chunk_count(h.total_bytes, h.chunk_bytes);
  Status st;
  void* desc = nullptr;
  try {
    desc = local_desc(*op, op->message.data.data(), op->message.data.size(), FI_RECV);
  } catch (const FabricError& e) {
    st = Status(StatusCode::kPeerError, e.what());
  }
  for (uint64_t k = 0; k < n && st.ok(); ++k) {
    std::byte* p = op->message.data.data() + k * h.chunk_bytes;
    const size_t len = static_cast<size_t>(std::min<uint64_t>(h.chunk_bytes, h.total_bytes - k * h.chunk_bytes));
    const uint64_t tag = chunk_tag(h.message_id, k);
    st = post(op, [&](void* ctx) { return fi_trecv(ep.get(), p, len, desc, op->peer_addr, tag, 0, ctx); },
              op->deadline);
  }
  (void)finish_posting(op, st);
}

void Endpoint::Impl::dispatch(PostContext* pc, fi_addr_t src, size_t len, const Status& err, int err_code) {
  Operation* op = pc->op;
  if (op->kind == OpKind::kPoolBuffer) {
    on_pool_buffer(pc->index, src, len, err_code);
    return;
  }
  std::vector<Operation*> inbound_done;
  {
    std::lock_guard lock(mu_);
    ++op->completed;
    if (!err.ok() && op->first_error.ok()) op->first_error = err;
    // A peer that keeps completing is not "stopped answering": the timeout
    // counts from the operation's last progress.
    if (!op->cancelled) op->deadline = Clock::now() + options.timeout;
    if (op->all_posted && op->completed == op->planned) finish_locked(op, inbound_done);
  }
  release_slots(1);
  deliver(inbound_done);
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
        text = pc->op->what + " with " + describe_peer_locked(pc->op->peer) + ": " + fi_strerror(e.err) +
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
  std::vector<PostContext*> to_cancel;
  {
    std::lock_guard lock(mu_);
    for (auto& [raw, op] : ops) {
      if (now < op->deadline || op->cancelled) continue;
      if (op->kind == OpKind::kInbound) {
        op->cancelled = true;
        ++stats.timed_out;
        for (auto& pc : op->contexts) to_cancel.push_back(&pc);
      } else if (!op->promise_set) {
        ++stats.timed_out;
        op->promise.set_value(Status(StatusCode::kTimedOut,
                                     op->what + " to " + describe_peer_locked(op->peer) + " did not complete within " +
                                         std::to_string(options.timeout.count()) + " ms"));
        op->promise_set = true;
        op->cancelled = true;
      }
    }
  }
  // Receives can be cancelled; their FI_ECANCELED completions then finish
  // the operation. Sends and RMA stay until their completion or the close.
  for (PostContext* pc : to_cancel) (void)fi_cancel(&ep.get()->fid, &pc->fi_ctx);
}

void Endpoint::Impl::progress_loop() {
  auto next_sweep = Clock::now();
  int idle = 0;
  while (!stopping) {
    const int n = progress_once(idle > 64);
    idle = n > 0 ? 0 : idle + 1;
    if (!has_wait && idle > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::vector<size_t> retry;
    {
      std::lock_guard lock(mu_);
      retry.swap(repost_pending);
    }
    for (size_t slot : retry) repost(slot);
    if (Clock::now() >= next_sweep) {
      sweep_deadlines();
      next_sweep = Clock::now() + std::chrono::milliseconds(5);
    }
  }
}

std::future<Status> Endpoint::Impl::rma(bool is_read, PeerId peer, void* local, size_t size, const RemoteKey& remote,
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
  Operation* op = new_op(OpKind::kRma, peer, addr,
                         std::string(verb) + " of " + std::to_string(size) + " bytes at offset " +
                             std::to_string(offset));
  op->bytes = size;
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
              },
              op->deadline);
    done += len;
  }
  return finish_posting(op, st);
}

// --- Endpoint -----------------------------------------------------------

Endpoint::Endpoint(EndpointOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Endpoint::~Endpoint() = default;

const EndpointOptions& Endpoint::options() const { return impl_->options; }
const ProviderInfo& Endpoint::provider() const { return impl_->provider_info; }
size_t Endpoint::max_chunk_bytes() const { return impl_->max_chunk; }
bool Endpoint::supports_rma() const { return impl_->has_rma; }
bool Endpoint::supports_hmem() const { return impl_->has_hmem; }

std::vector<std::byte> Endpoint::address() const {
  size_t len = 0;
  (void)fi_getname(&impl_->ep.get()->fid, nullptr, &len);  // -FI_ETOOSMALL, sets len
  std::vector<std::byte> blob(len);
  check(fi_getname(&impl_->ep.get()->fid, blob.data(), &len), "fi_getname", impl_->context());
  blob.resize(len);
  return blob;
}

std::string Endpoint::address_string() const {
  const auto blob = address();
  char buf[256];
  size_t len = sizeof buf;
  fi_av_straddr(impl_->av.get(), blob.data(), buf, &len);
  return buf;
}

std::string Endpoint::peer_address_string(PeerId peer) const {
  std::lock_guard lock(impl_->mu_);
  return impl_->describe_peer_locked(peer);
}

void Endpoint::add_peer(PeerId peer, std::span<const std::byte> address) {
  Impl& m = *impl_;
  const std::string who = "peer " + std::to_string(peer) + ", address blob of " + std::to_string(address.size()) +
                          " bytes [" + hex_prefix(address) + "], " + m.context();
  // libfabric reads as many bytes as its address format needs, whatever the
  // blob's length: check the blob's shape before it sees it.
  const uint32_t format = m.info->addr_format;
  bool shape_ok = !address.empty();
  if (format == FI_SOCKADDR_IN) {
    sockaddr_in sin{};
    shape_ok = address.size() == sizeof sin;
    if (shape_ok) std::memcpy(&sin, address.data(), sizeof sin);
    shape_ok = shape_ok && sin.sin_family == AF_INET && sin.sin_port != 0;
  } else if (format == FI_SOCKADDR_IN6) {
    sockaddr_in6 sin6{};
    shape_ok = address.size() == sizeof sin6;
    if (shape_ok) std::memcpy(&sin6, address.data(), sizeof sin6);
    shape_ok = shape_ok && sin6.sin6_family == AF_INET6 && sin6.sin6_port != 0;
  } else if (format == FI_ADDR_STR) {
    // "prov://..." and NUL-terminated.
    const auto* c = reinterpret_cast<const char*>(address.data());
    shape_ok = address.size() <= 512 && address.back() == std::byte{0} &&
               std::string_view(c).find("://") != std::string_view::npos &&
               std::all_of(c, c + std::strlen(c), [](char ch) { return ch >= 0x20 && ch < 0x7f; });
  } else {
    shape_ok = address.size() == m.info->src_addrlen;
  }
  if (!shape_ok) throw FabricError("fi_av_insert", -FI_EINVAL, who + ": not an address of this provider");
  {
    std::lock_guard lock(m.mu_);
    if (m.peer_addrs.count(peer) != 0) {
      throw FabricError("fi_av_insert", -FI_EALREADY, who + ": peer already added");
    }
  }
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  const int rc = fi_av_insert(m.av.get(), address.data(), 1, &addr, 0, nullptr);
  if (rc != 1) throw FabricError("fi_av_insert", rc < 0 ? rc : -FI_EINVAL, who);
  char name[256] = "";
  size_t name_len = sizeof name;
  fi_av_straddr(m.av.get(), address.data(), name, &name_len);
  std::lock_guard lock(m.mu_);
  m.peer_addrs[peer] = addr;
  m.addr_peers[addr] = peer;
  m.peer_names[peer] = name;
}

bool Endpoint::has_peer(PeerId peer) const {
  std::lock_guard lock(impl_->mu_);
  return impl_->peer_addrs.count(peer) != 0;
}

std::future<Status> Endpoint::send(PeerId to, uint64_t tag, const void* data, size_t size) {
  const ConstBuffer piece{data, size};
  return send(to, tag, std::span<const ConstBuffer>(&piece, 1));
}

std::future<Status> Endpoint::send(PeerId to, uint64_t tag, std::span<const ConstBuffer> pieces) {
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

  Operation* op = m.new_op(OpKind::kSend, to, addr,
                           "send of " + std::to_string(total) + " bytes (tag " + std::to_string(tag) + ")");
  op->bytes = total;
  FrameHeader h;
  h.user_tag = tag;
  h.message_id = m.next_message_id.fetch_add(1) & kMessageIdMask;
  h.total_bytes = total;
  const bool eager = kFrameHeaderBytes + total <= m.eager_limit;
  if (!eager) {
    h.flags = kFrameLarge;
    h.chunk_bytes = m.max_chunk;
  }

  // The frame: header, plus the payload itself when eager (one copy of a
  // small message is cheaper than the provider handling an iovec).
  op->bounce.resize(kFrameHeaderBytes + (eager ? total : 0));
  encode_frame_header(h, op->bounce.data());
  if (eager) {
    std::byte* out = op->bounce.data() + kFrameHeaderBytes;
    for (const ConstBuffer& p : pieces) {
      if (p.size != 0) std::memcpy(out, p.data, p.size);
      out += p.size;
    }
  }
  Status st;
  void* frame_desc = nullptr;
  try {
    frame_desc = m.local_desc(*op, op->bounce.data(), op->bounce.size(), FI_SEND);
  } catch (const FabricError& e) {
    st = Status(StatusCode::kInvalidArgument, e.what());
  }
  if (st.ok()) {
    st = m.post(op,
                [&](void* ctx) {
                  return fi_tsend(m.ep.get(), op->bounce.data(), op->bounce.size(), frame_desc, addr, kHeaderTag,
                                  ctx);
                },
                op->deadline);
  }
  if (!eager && st.ok()) {
    // Chunk k is payload bytes [k*C, (k+1)*C): an iovec over the pieces it
    // spans, or a gathered copy when it spans more than iov_limit pieces.
    const uint64_t n = chunk_count(total, m.max_chunk);
    std::vector<void*> piece_desc(pieces.size(), nullptr);
    try {
      for (size_t i = 0; i < pieces.size(); ++i) {
        piece_desc[i] = m.local_desc(*op, pieces[i].data, pieces[i].size, FI_SEND);
      }
    } catch (const FabricError& e) {
      st = Status(StatusCode::kInvalidArgument, e.what());
    }
    size_t piece = 0;
    uint64_t piece_off = 0;  // offset inside pieces[piece]
    for (uint64_t k = 0; k < n && st.ok(); ++k) {
      const uint64_t len = std::min<uint64_t>(m.max_chunk, total - k * m.max_chunk);
      std::vector<iovec> iov;
      std::vector<void*> desc;
      uint64_t need = len;
      while (need > 0) {
        while (pieces[piece].size == piece_off) {
          ++piece;
          piece_off = 0;
        }
        const uint64_t take = std::min<uint64_t>(need, pieces[piece].size - piece_off);
        iov.push_back({const_cast<std::byte*>(static_cast<const std::byte*>(pieces[piece].data) + piece_off), take});
        desc.push_back(piece_desc[piece]);
        piece_off += take;
        need -= take;
      }
      if (iov.size() > m.iov_limit) {
        std::vector<std::byte> copy(len);
        size_t at = 0;
        for (const iovec& v : iov) {
          std::memcpy(copy.data() + at, v.iov_base, v.iov_len);
          at += v.iov_len;
        }
        void* d = nullptr;
        try {
          d = m.local_desc(*op, copy.data(), copy.size(), FI_SEND);
        } catch (const FabricError& e) {
          st = Status(StatusCode::kInvalidArgument, e.what());
          break;
        }
        iov.assign(1, iovec{copy.data(), copy.size()});
        desc.assign(1, d);
        std::lock_guard lock(m.mu_);
        op->copies.push_back(std::move(copy));  // the heap buffer, and so iov, stays put
      }
      const uint64_t t = chunk_tag(h.message_id, k);
      st = m.post(op,
                  [&](void* ctx) {
                    return iov.size() == 1
                               ? fi_tsend(m.ep.get(), iov[0].iov_base, iov[0].iov_len, desc[0], addr, t, ctx)
                               : fi_tsendv(m.ep.get(), iov.data(), desc.data(), iov.size(), addr, t, ctx);
                  },
                  op->deadline);
    }
  }
  return m.finish_posting(op, st);
}

std::optional<Message> Endpoint::receive(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  std::unique_lock lock(m.inbox_mu_);
  if (!m.inbox_cv_.wait_for(lock, timeout, [&] { return !m.inbox.empty(); })) return std::nullopt;
  Message msg = std::move(m.inbox.front());
  m.inbox.pop_front();
  return msg;
}

MemoryRegion Endpoint::register_memory(void* base, size_t length, uint64_t access, MemoryKind kind,
                                       int cuda_device) {
  Impl& m = *impl_;
  if (kind == MemoryKind::kCuda && !m.has_hmem) {
    throw FabricError("fi_mr_regattr", -FI_EOPNOTSUPP,
                      m.context() + ": no FI_HMEM for CUDA memory (open the endpoint with hmem, or stage "
                                    "through pinned host memory)");
  }
  if ((access & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0 && !m.has_rma) {
    throw FabricError("fi_mr_regattr", -FI_EOPNOTSUPP, m.context() + ": no FI_RMA for remote access");
  }
  FidHandle<fid_mr> mr = m.register_raw(base, length, access, kind, cuda_device);
  const uint64_t advertised = (m.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(base) : 0;
  return MemoryRegion(std::move(mr), base, length, advertised, kind);
}

std::future<Status> Endpoint::read(PeerId from, void* local, size_t size, const RemoteKey& remote, uint64_t offset,
                                   const MemoryRegion* local_region) {
  return impl_->rma(true, from, local, size, remote, offset, local_region);
}

std::future<Status> Endpoint::write(PeerId to, const void* local, size_t size, const RemoteKey& remote,
                                    uint64_t offset, const MemoryRegion* local_region) {
  return impl_->rma(false, to, const_cast<void*>(local), size, remote, offset, local_region);
}

EndpointStats Endpoint::stats() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->stats;
}

}  // namespace parafab::rdma
