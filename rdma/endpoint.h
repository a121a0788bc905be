// One libfabric RDM endpoint with everything it owns: fabric, domain,
// completion queue, address vector, a pool of posted receive buffers and a
// progress thread. It carries two kinds of traffic:
//
// - messages: `send` a tagged byte sequence (scatter-gather) to a peer;
//   the peer gets it whole from `receive`, however large (see
//   message_framing.h for chunking past max_msg_size), and gets each
//   sender's messages in the order they were sent;
// - one-sided RMA: `read`/`write` a peer's registered region.
//
// Every operation returns a future (rdma::Completion) that becomes ready
// with a Status within the endpoint's timeout, whatever the peer does. Peers
// are named by the caller's own ranks (PeerId); their addresses come from
// the control plane.
//
//   rdma::Endpoint a(options), b(options);
//   a.add_peer(1, b.address());  b.add_peer(0, a.address());
//   rdma::Status s = a.send(1, /*tag=*/7, data.data(), data.size()).get();
//   std::optional<rdma::Message> m = b.receive(std::chrono::seconds(5));  // m->from == 0
//
// Progress: by default a thread per endpoint completes operations. With
// `progress_thread = false` the caller drives it through receive(), wait()
// and progress(), as fabtests do; a future then must be waited on with
// wait(), not get(), and a peer reading our registered memory over a
// provider with manual progress needs us to call one of them meanwhile.
//
// Buffers handed to send/read/write must stay valid until the future is
// ready; after a timeout the provider may still touch them until the
// endpoint is destroyed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rdma/byte_buffer.h"
#include "rdma/completion.h"
#include "rdma/endpoint_options.h"
#include "rdma/endpoint_stats.h"
#include "rdma/fabric_info.h"
#include "rdma/memory_region.h"
#include "rdma/status.h"

namespace parafab::rdma {

using PeerId = uint32_t;

// One piece of a scatter-gather send.
struct ConstBuffer {
  const void* data = nullptr;
  size_t size = 0;
};

struct Message {
  PeerId from = 0;
  uint64_t tag = 0;
  ByteBuffer data;
  // The rest of the message, received straight into a landing's memory
  // (Endpoint::expect): empty for a message received whole into `data`.
  std::span<std::byte> landed;
};

// Where the tail of an expected message is received (Endpoint::expect).
struct Landing {
  PeerId from = 0;
  uint64_t tag = 0;
  size_t head_bytes = 0;  // the message's first bytes, which go to Message::data
  void* tail = nullptr;   // the rest, straight into here
  size_t tail_bytes = 0;
};
using LandingId = uint64_t;  // 0: none

class Endpoint {
 public:
  // Opens the provider and starts the progress thread. Throws FabricError
  // naming the provider and node when that fails.
  explicit Endpoint(EndpointOptions options);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  const EndpointOptions& options() const;
  const ProviderInfo& provider() const;
  // Bytes per libfabric message or RMA transfer: min(provider limit, option).
  size_t max_chunk_bytes() const;
  bool supports_rma() const;
  bool supports_hmem() const;

  // This endpoint's fi_getname blob, for the control plane to hand around.
  std::vector<std::byte> address() const;
  // Human-readable form of an address blob (fi_av_straddr), e.g.
  // "fi_sockaddr_in://127.0.0.1:41234".
  std::string address_string() const;
  std::string peer_address_string(PeerId peer) const;

  // Inserts a peer's address blob. Throws FabricError (call "fi_av_insert")
  // naming the peer and the blob when it is not an address of this provider.
  void add_peer(PeerId peer, std::span<const std::byte> address);
  // The peer came back as a new process (a restarted server under its old
  // rank): later sends go to `address`, messages from the old address are
  // dropped as a stranger's, and both directions' message order starts
  // afresh. Operations still in flight with the old address fail now with
  // kPeerError (their buffers, as after a timeout, may be touched by the
  // provider until the endpoint closes). Throws as add_peer, and for a peer
  // never added.
  void replace_peer(PeerId peer, std::span<const std::byte> address);
  // The peer is gone (the control plane declared it dead): new operations
  // to it fail at once with kPeerError and `reason`, and a post already
  // retrying on FI_EAGAIN stops with it, instead of waiting out the
  // timeout. Operations already posted with it fail now too (their
  // buffers, as after a timeout, may be touched by the provider until the
  // endpoint closes). replace_peer clears it (and fails what was in flight
  // with the old process the same way). A peer never added is ignored.
  void mark_peer_failed(PeerId peer, std::string reason);
  bool has_peer(PeerId peer) const;

  Completion send(PeerId to, uint64_t tag, std::span<const ConstBuffer> pieces);
  Completion send(PeerId to, uint64_t tag, const void* data, size_t size);
  // The next complete message from a known peer, or nullopt after `timeout`.
  // Without a progress thread, or with busy_poll, it drives progress itself,
  // at least one poll even with a zero timeout.
  std::optional<Message> receive(std::chrono::milliseconds timeout);
  // Receiving straight into the caller's memory, without the copy out of a
  // fresh buffer: the next large message (past the eager limit) from
  // `landing.from` with `landing.tag` whose size is exactly head_bytes +
  // tail_bytes is received with its head in Message::data and its tail in
  // landing.tail (Message::landed). Any other message is received as usual,
  // and so is every message when the provider cannot split a receive where
  // the head ends. Each landing serves one message. Returns 0 (no landing)
  // when one for the same peer and tag is already waiting. The tail memory
  // must stay valid until withdraw(id) returns; whoever reads it checks the
  // head first (any message of that size and tag from that peer fills it).
  LandingId expect(const Landing& landing);
  // Ends a landing, used or not; 0 is ignored. When it returns true, the
  // endpoint writes the tail no more: a message landing at that moment has
  // its receives into the tail cancelled and waited for, at most the
  // timeout; the rest of it is received into scratch, so that its sender's
  // send completes, and then dropped (counted in inbound_failed, as a failed
  // message). False only if those receives had still not ended then; as
  // after an RMA's timeout, the provider may then write the tail until the
  // endpoint is destroyed.
  bool withdraw(LandingId id);

  // The operation's Status, driving progress while waiting where nothing
  // else does (progress_thread off, or busy_poll). With the default progress
  // thread it is `operation.get()`.
  Status wait(Completion& operation);
  // The same wait, leaving the Status in `operation` (memory_lent() may
  // then be read before get()).
  void wait_ready(Completion& operation);
  // Reads the completion queue once (reposts, deadlines): for callers that
  // turned the progress thread off and have nothing to wait on right now.
  void progress();

  // Registers [base, base+length) with `access` (kRemoteRead, ...). Throws
  // FabricError; kCuda without FI_HMEM is -FI_EOPNOTSUPP.
  MemoryRegion register_memory(void* base, size_t length, uint64_t access,
                               MemoryKind kind = MemoryKind::kHost, int cuda_device = 0);
  // Keeps `memory` alive until the endpoint closes: memory lent to an
  // operation that failed or timed out, which the provider may still read
  // or write until then (a buffer and its MemoryRegion, say). It is
  // destroyed once the libfabric endpoint is closed, before the domain, so
  // a registration inside may still deregister.
  void retain_until_close(std::shared_ptr<void> memory);
  // One-sided read of `size` bytes at `offset` in the peer's region into
  // `local` (write: the other way). `local_region`, when given, must contain
  // the local buffer; providers with FI_MR_LOCAL otherwise register it for
  // the duration of the operation.
  Completion read(PeerId from, void* local, size_t size, const RemoteKey& remote, uint64_t offset,
                  const MemoryRegion* local_region = nullptr);
  Completion write(PeerId to, const void* local, size_t size, const RemoteKey& remote, uint64_t offset,
                   const MemoryRegion* local_region = nullptr);

  EndpointStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace parafab::rdma
