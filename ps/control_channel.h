// The control-plane transport: length-prefixed protobuf Envelopes
// (ps/proto/control.proto) over one Asio TCP socket, plus the conversions
// between wire messages and ps:: structs shared by the scheduler and its
// clients. Private to ps/ (the public API is scheduler.h and
// scheduler_client.h).
//
// Frame: 4-byte little-endian body length, then the serialized Envelope
// (the pure functions of ps/control_frame.h judge both halves). An
// announced length above max_frame_bytes, or a body that does not parse,
// is answered with an Error (ERROR_MALFORMED) and the connection is closed:
// after a bad frame the stream cannot be trusted to be in sync.
//
//   auto ch = std::make_shared<ControlChannel>(std::move(socket), kMaxFrameBytes);
//   ch->start({.on_message = [](proto::Envelope& m) { ... },
//              .on_closed = [](const ChannelClosed& c) { ... }});
//   ch->send(envelope);          // any thread; queued in order
//   ch->send_and_close(error);   // close once written
//   ch->close();                 // close now: what is queued is dropped
//
// A frame that closes the channel once written (send_and_close, or the
// Error answering a bad frame) gets flush_timeout to go out: a peer that
// stopped reading cannot keep the socket, its queue, or the io_context's
// run() alive after that.
//
// Threading: every handler runs on the socket's executor. send/close may be
// called from any thread; they post to it. The io_context must be run by one
// thread (the scheduler and the client each run one), which is what keeps
// the channel's state unlocked.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "ps/cluster_map.h"
#include "ps/proto/control.pb.h"

namespace parafab::ps {

inline constexpr uint32_t kControlProtocolVersion = 1;
inline constexpr size_t kMaxControlFrameBytes = 64u << 20;
inline constexpr size_t kMaxResumeDirBytes = 4096;  // a path
inline constexpr uint64_t kMaxRejoinTimeoutMs = uint64_t{7} * 24 * 3600 * 1000;  // a week
// Before a peer has registered it gets no more than this per frame, so a
// stranger cannot make the scheduler allocate 64 MiB per connection. The
// largest Register validate_register accepts (kMaxRegisterTables tables of
// every field at its widest, a resume directory, host and fabric address
// of their largest) is about 150 KiB; this leaves room over it (64 KiB
// refused a legal Register of some 700 tables).
inline constexpr size_t kMaxRegisterTables = 1024;
inline constexpr size_t kMaxUnauthenticatedFrameBytes = 256u << 10;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMaxHostBytes = 255;
inline constexpr size_t kMaxFabricAddressBytes = 4096;
inline constexpr size_t kMaxBarrierNameBytes = 256;
inline constexpr size_t kMaxReasonBytes = 4096;

// A control message that fails validation; what() names the message and field.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ChannelClosed {
  enum class Cause {
    kLocal,     // close() or send_and_close() on this side
    kPeer,      // EOF or a socket error
    kBadFrame,  // oversized length or unparsable body (already answered with an Error)
  };
  Cause cause = Cause::kPeer;
  std::string reason;
};

class ControlChannel : public std::enable_shared_from_this<ControlChannel> {
 public:
  struct Handlers {
    std::function<void(proto::Envelope&)> on_message;
    std::function<void(const ChannelClosed&)> on_closed;  // exactly once, after the last on_message
  };

  static constexpr std::chrono::milliseconds kFlushTimeout{5000};
  ControlChannel(boost::asio::ip::tcp::socket socket, size_t max_frame_bytes = kMaxControlFrameBytes,
                 std::chrono::milliseconds flush_timeout = kFlushTimeout);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  void start(Handlers handlers);
  void send(const proto::Envelope& message);
  void send_and_close(const proto::Envelope& message);
  // Closes the socket now, a write in flight and the frames queued behind it
  // included (the grace timer of a scheduler shutting down, a node declared
  // dead); on_closed follows with Cause::kLocal.
  void close();
  // Socket's executor only (e.g. from a handler): the limit for later frames.
  void set_max_frame_bytes(size_t n) { max_frame_bytes_ = n; }
  // "host:port" of the other end, for logs and errors.
  const std::string& peer() const { return peer_; }

  // 4-byte little-endian length + body; exposed for tests that speak raw bytes.
  static std::string encode_frame(const proto::Envelope& message);

 private:
  void read_header();
  void read_body(uint32_t length);
  void enqueue(std::string frame, bool close_after);
  void write_next();
  void finish(ChannelClosed::Cause cause, std::string reason);
  // Closes the socket when what is left to write has not gone out within
  // flush_timeout_ (armed once, when the channel starts closing).
  void arm_flush_deadline();

  boost::asio::ip::tcp::socket socket_;
  size_t max_frame_bytes_;
  std::chrono::milliseconds flush_timeout_;
  boost::asio::steady_timer flush_deadline_;
  bool flush_deadline_armed_ = false;
  std::string peer_;
  Handlers handlers_;
  uint8_t header_[4] = {};
  std::string body_;
  std::deque<std::string> out_;
  bool writing_ = false;
  bool close_after_flush_ = false;
  bool closed_ = false;
};

// --- wire <-> ps:: conversions (throw ProtocolError naming the field) -------

proto::Role to_proto(Role role);
Role from_proto(proto::Role role, const char* field);  // servers and workers only
proto::Envelope make_error(proto::ErrorCode code, const std::string& text);
// Which of an Envelope's oneof is set, for logs ("register", "heartbeat", …).
std::string body_name(const proto::Envelope& message);

void to_proto(const TableSchema& table, proto::Table* out);
TableSchema from_proto(const proto::Table& table);  // validates every field and the schema
void to_proto(const NodeInfo& node, proto::NodeInfo* out);
NodeInfo from_proto(const proto::NodeInfo& node);
void to_proto(const ClusterMap& map, proto::ClusterMap* out);
// Checks counts, ranks, role ranks, key ranges against KeyPartition(S), and
// that table ids are unique.
ClusterMap from_proto(const proto::ClusterMap& map);

// Structural checks of a Register (sizes, version, role); not the MAC.
void validate_register(const proto::Register& reg);

// What the MACs cover (ps/job_token.h MacInput): the node's proof binds the
// scheduler's nonce and job id to everything it registers with; the
// scheduler's proof binds both nonces to the rank it assigned.
std::vector<uint8_t> register_mac_input(uint64_t job_id, const std::string& nonce, const proto::Register& reg);
std::vector<uint8_t> welcome_mac_input(uint64_t job_id, const std::string& nonce, const std::string& client_nonce,
                                       uint32_t rank, uint32_t role_rank);

}  // namespace parafab::ps
