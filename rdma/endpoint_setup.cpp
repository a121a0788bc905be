// Endpoint set-up: opening the provider's objects, registration, addresses.
#include "rdma/endpoint_impl.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>

#include <algorithm>
#include <cstring>
#include <new>
#include <string_view>

#include "rdma/fabric_error.h"

namespace parafab::rdma {
namespace {

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

Endpoint::Impl::Impl(EndpointOptions opts) : options(std::move(opts)) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) throw FabricError("fi_allocinfo", -FI_ENOMEM, context());
  hints->ep_attr->type = FI_EP_RDM;
  // FI_MSG for frame headers, FI_TAGGED for chunks (message_framing.h).
  const uint64_t base_caps = FI_MSG | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV | (options.hmem ? FI_HMEM : 0);
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
  check(rc, "fi_getinfo",
        context() + " (RDM with FI_MSG, FI_TAGGED, FI_SOURCE and FI_DIRECTED_RECV" +
            (rc == -FI_ENODATA ? "; no provider of that name on this host offers them at that node: a provider "
                                 "this host lacks, or a node address that is not one of this host's)"
                               : ")"));
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
  if (options.register_local_buffers) mr_mode |= FI_MR_LOCAL;
  provider_info.rma = has_rma;
  provider_info.tagged = true;
  provider_info.manual_progress = fi->domain_attr->data_progress == FI_PROGRESS_MANUAL;

  const bool over_shm = provider_info.provider == "shm";
  const bool over_rxm = provider_info.provider.find("ofi_rxm") != std::string::npos;
  large_limit = options.large_in_flight_per_peer != 0 ? options.large_in_flight_per_peer : over_shm ? 2 : 0;
  max_chunk = fi->ep_attr->max_msg_size;
  if (options.max_message_bytes != 0) max_chunk = std::min(max_chunk, options.max_message_bytes);
  if (max_chunk < kMinChunkBytes) {
    throw FabricError("max_msg_size", -FI_EINVAL,
                      context() + ": message limit " + std::to_string(max_chunk) + " is below " +
                          std::to_string(kMinChunkBytes) + " bytes");
  }
  const size_t eager_bytes = options.eager_bytes != 0 ? options.eager_bytes
                             : over_rxm               ? 16 * 1024
                             : over_shm               ? 4 * 1024
                                                      : 17 * 1024;
  eager_limit = std::max(kFrameHeaderBytes, std::min(eager_bytes, max_chunk));
  chunk_window = std::clamp<size_t>(options.max_in_flight / 4, 1, kChunkWindow);
  iov_limit = std::max<size_t>(1, fi->tx_attr->iov_limit);
  rx_iov_limit = std::max<size_t>(1, fi->rx_attr->iov_limit);

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
  check(enable_endpoint(), "fi_enable", context());

  // The receive pool: one registration for all buffers (FI_MR_LOCAL), posted
  // before the progress thread starts (no fi_enable/fi_cq_read race).
  const size_t nbuf = std::max<size_t>(1, options.receive_buffers);
  pool_memory.resize(nbuf * eager_limit);
  pool_ops.resize(nbuf);
  if (mr_mode & FI_MR_LOCAL) {
    pool_mr = register_raw(pool_memory.data(), pool_memory.size(), FI_RECV, MemoryKind::kHost, 0);
    local_registrations.fetch_add(1, std::memory_order_relaxed);
  }
  for (size_t i = 0; i < nbuf; ++i) {
    Operation& op = pool_ops[i];
    op.kind = OpKind::kPoolBuffer;
    op.n_first_contexts = 1;
    op.first_contexts[0].op = &op;
    op.first_contexts[0].index = i;
    check(post_pool_buffer(i), "fi_recv(receive pool)", context());
  }
  if (options.progress_thread) progress_thread = std::thread([this] { progress_loop(); });
}

int Endpoint::Impl::enable_endpoint() {
  int rc = fi_enable(ep.get());
  // shm names its region after our pid. A killed process leaves its file in
  // /dev/shm; when its pid comes round again to us, libfabric 1.17 sees the
  // file's owner "alive" (it is us), unlinks the file and answers EBUSY. The
  // stale file is gone then, so one more try creates a fresh region. (Newer
  // libfabric retries under another name itself.)
  if (rc == -FI_EBUSY && provider_info.provider == "shm") rc = fi_enable(ep.get());
  return rc;
}

Endpoint::Impl::~Impl() {
  stopping = true;
  if (progress_thread.joinable()) progress_thread.join();
  // Close the endpoint first: after that no completion can touch the
  // operations, so their futures can be failed and their memory freed.
  ep.reset();
  pool_mr.reset();
  std::vector<std::shared_ptr<void>> kept;
  {
    std::lock_guard lock(mu_);
    ops.for_each([](Operation& op) {
      if (op.kind != OpKind::kInbound && !op.fulfilled()) {
        op.complete_locked(Status(StatusCode::kClosed, op.describe() + ": endpoint closed"));
      }
    });
    ops.clear();  // with their own registrations, of retained memory too
    kept.swap(retained);
  }
  // No provider touches it now, and no registration of it is left but its
  // own, which closes while the domain is open; its destructors run
  // without our lock.
  kept.clear();
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
  PostContext& pc = pool_ops[slot].first_contexts[0];
  void* desc = pool_mr ? fi_mr_desc(pool_mr.get()) : nullptr;
  return static_cast<int>(
      fi_recv(ep.get(), pool_memory.data() + slot * eager_limit, eager_limit, desc, FI_ADDR_UNSPEC, &pc.fi_ctx));
}

void Endpoint::Impl::repost(size_t slot) {
  if (stopping) return;
  const int rc = post_pool_buffer(slot);
  if (rc == -FI_EAGAIN) {
    std::lock_guard lock(mu_);
    repost_pending.push_back(slot);
    has_repost_pending.store(true, std::memory_order_release);
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
  if (const auto failed = failed_peers.find(peer); failed != failed_peers.end()) {
    err = Status(StatusCode::kPeerError, describe_peer_locked(peer) + ": " + failed->second);
    return FI_ADDR_UNSPEC;
  }
  // shm: a peer process killed while it held the lock of its shared region
  // leaves it held, and libfabric's shm then spins forever in the next post
  // to that peer (seen in fi_tsend, a pthread spinlock in the peer's region).
  // The address names the peer's pid (fi_shm://PID:...), so a post to a
  // process that is gone fails here instead. A peer that dies while a post
  // is already spinning is not covered: that needs robust locks in the provider.
  // The check (a kill(pid, 0) system call, about as long as a whole small
  // message over shm) runs at most once a millisecond per peer, by the
  // coarse clock (so once a tick, 4 ms here): a post within a few
  // milliseconds of a check is as safe as one right after it.
  if (const auto pid = shm_pid.find(peer); pid != shm_pid.end()) {
    const Clock::time_point now = coarse_now();
    Clock::time_point& seen = shm_alive_at[peer];
    if (now - seen >= kShmAliveCheckEvery) {
      if (::kill(pid->second, 0) != 0 && errno == ESRCH) {
        err = Status(StatusCode::kPeerError, describe_peer_locked(peer) + ": its process " +
                                                 std::to_string(pid->second) + " has exited (shm)");
        return FI_ADDR_UNSPEC;
      }
      seen = now;
    }
  }
  return it->second;
}

std::unique_ptr<Operation> Endpoint::Impl::make_op(OpKind kind, PeerId peer, fi_addr_t addr, const char* verb,
                                                   uint64_t bytes, const char* detail_name, uint64_t detail) const {
  // Default-, not value-initialised: members without an initialiser (the
  // inline frame, the fi_context2s) are not zeroed first, ~500 bytes an operation.
  std::unique_ptr<Operation> op(new Operation);
  op->kind = kind;
  op->peer = peer;
  op->peer_addr = addr;
  op->verb = verb;
  op->bytes = bytes;
  op->detail_name = detail_name;
  op->detail = detail;
  op->deadline = coarse_now() + options.timeout;
  if (kind != OpKind::kInbound) op->completion = std::make_shared<detail::CompletionState>();
  return op;
}

Operation* Endpoint::Impl::new_op(OpKind kind, PeerId peer, fi_addr_t addr, const char* verb, uint64_t bytes,
                                  const char* detail_name, uint64_t detail) {
  auto op = make_op(kind, peer, addr, verb, bytes, detail_name, detail);
  Operation* raw = op.get();
  std::lock_guard lock(mu_);
  ops.insert(std::move(op));
  return raw;
}

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

void Endpoint::Impl::check_address_shape(std::span<const std::byte> address, const std::string& who) const {
  // libfabric reads as many bytes as its address format needs, whatever the
  // blob's length: check the blob's shape before it sees it.
  const uint32_t format = info->addr_format;
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
    shape_ok = address.size() == info->src_addrlen;
  }
  if (!shape_ok) throw FabricError("fi_av_insert", -FI_EINVAL, who + ": not an address of this provider");
}

// fi_av_insert of one address; mu_ not held (the AV has its own lock).
fi_addr_t Endpoint::Impl::insert_address(std::span<const std::byte> address, const std::string& who, std::string& name) {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  const int rc = fi_av_insert(av.get(), address.data(), 1, &addr, 0, nullptr);
  if (rc != 1) throw FabricError("fi_av_insert", rc < 0 ? rc : -FI_EINVAL, who);
  char buf[256] = "";
  size_t len = sizeof buf;
  fi_av_straddr(av.get(), address.data(), buf, &len);
  name = buf;
  return addr;
}

void Endpoint::Impl::map_peer_locked(PeerId peer, fi_addr_t addr, const std::string& name) {
  peer_addrs[peer] = addr;
  addr_peers[addr] = peer;
  peer_names[peer] = name;
  shm_pid.erase(peer);
  shm_alive_at.erase(peer);
  failed_peers.erase(peer);  // a new process at this address
  // fi_shm://PID:... (see lookup_locked).
  constexpr std::string_view kShm = "fi_shm://";
  const std::string_view n(name);
  if (n.substr(0, kShm.size()) == kShm) {
    long pid = 0;
    const std::string_view digits = n.substr(kShm.size());
    size_t i = 0;
    while (i < digits.size() && digits[i] >= '0' && digits[i] <= '9' && pid < (1L << 31)) pid = pid * 10 + (digits[i++] - '0');
    if (i > 0 && i < digits.size() && digits[i] == ':' && pid > 0) shm_pid[peer] = static_cast<pid_t>(pid);
  }
}

namespace {

// "peer 3, address blob of 16 bytes [0200...], <endpoint>", for errors.
std::string describe_blob(PeerId peer, std::span<const std::byte> address, const std::string& context) {
  return "peer " + std::to_string(peer) + ", address blob of " + std::to_string(address.size()) + " bytes [" +
         hex_prefix(address) + "], " + context;
}

}  // namespace

void Endpoint::add_peer(PeerId peer, std::span<const std::byte> address) {
  Impl& m = *impl_;
  const std::string who = describe_blob(peer, address, m.context());
  m.check_address_shape(address, who);
  {
    std::lock_guard lock(m.mu_);
    if (m.peer_addrs.count(peer) != 0) {
      throw FabricError("fi_av_insert", -FI_EALREADY, who + ": peer already added");
    }
  }
  std::string name;
  const fi_addr_t addr = m.insert_address(address, who, name);
  std::lock_guard lock(m.mu_);
  m.map_peer_locked(peer, addr, name);
}

void Endpoint::replace_peer(PeerId peer, std::span<const std::byte> address) {
  Impl& m = *impl_;
  const std::string who = "new address of " + describe_blob(peer, address, m.context());
  m.check_address_shape(address, who);
  {
    std::lock_guard lock(m.mu_);
    if (m.peer_addrs.count(peer) == 0) throw FabricError("fi_av_insert", -FI_EINVAL, who + ": peer was never added");
  }
  std::string name;
  const fi_addr_t addr = m.insert_address(address, who, name);
  fi_addr_t old = FI_ADDR_NOTAVAIL;
  {
    std::lock_guard lock(m.mu_);
    old = m.peer_addrs.at(peer);
    m.addr_peers.erase(old);  // what still comes from the old address is from a stranger now
    m.map_peer_locked(peer, addr, name);
    // A new process numbers its messages from 0, and expects ours from 0;
    // what the old one's messages still in flight end in is not delivered
    // into the new numbering (deliver_in_order).
    m.order.erase(peer);
    ++m.incarnation[peer];
  }
  // What was in flight with the old process will not be answered by it.
  m.fail_ops_of(peer, old, "it was replaced by a new process at " + name);
  if (old != addr) (void)fi_av_remove(m.av.get(), &old, 1, 0);
}

void Endpoint::mark_peer_failed(PeerId peer, std::string reason) {
  {
    std::lock_guard lock(impl_->mu_);
    if (impl_->peer_addrs.count(peer) == 0) return;
    impl_->failed_peers[peer] = reason;
  }
  impl_->fail_ops_of(peer, FI_ADDR_UNSPEC, reason);
}

bool Endpoint::has_peer(PeerId peer) const {
  std::lock_guard lock(impl_->mu_);
  return impl_->peer_addrs.count(peer) != 0;
}

void Endpoint::retain_until_close(std::shared_ptr<void> memory) {
  std::lock_guard lock(impl_->mu_);
  try {
    impl_->retained.push_back(std::move(memory));
  } catch (const std::bad_alloc&) {
    // No room to keep it: leak it rather than free memory the provider may
    // still write.
    (void)new (std::nothrow) std::shared_ptr<void>(std::move(memory));
  }
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

}  // namespace parafab::rdma
