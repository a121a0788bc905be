// The data plane's message format (DESIGN.md, "Wire format"): a fixed
// 48-byte little-endian header, then `key_count` uint64 keys, then the
// values (`payload_bytes`, floats for every op but kError, whose payload is
// UTF-8 text). It rides as the payload of one rdma message; requests go
// with rdma tag 0, replies with their request id as the tag (a worker lands
// a large dense pull's reply by it, rdma::Endpoint::expect).
//
//   Header  magic u32 | version u16 | op u8 | flags u8 | table u32 | sender u32
//           clock i64 | request id u64 | key count u64 | payload bytes u64
//
//   std::vector<std::byte> msg = ps::encode_message(h, keys, values);
//   ps::DecodedMessage d;
//   if (auto err = ps::decode_message(bytes, limits, d)) reply_error(*err);
//
// decode_message checks every field against the limits before it hands out
// a pointer: a message it accepts can be read without further bounds checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace parafab::ps {

inline constexpr uint32_t kWireMagic = 0x564B4650;  // "PFKV"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kWireHeaderBytes = 48;

enum class Op : uint8_t {
  kPull = 1,          // worker → server: keys; answered by kPullReply
  kPullReply = 2,     // server → worker: values of the keys, in key order
  kPush = 3,          // worker → server: keys + gradients (width floats each)
  kPushReply = 4,     // server → worker: the push was applied (no payload)
  kClock = 5,         // worker → server: the worker finished iteration `clock - 1`
  kClockReply = 6,
  kDensePull = 7,     // keys = {first_row, rows}; answered by kDensePullReply
  kDensePullReply = 8,
  kDensePush = 9,     // keys = {first_row, rows} + rows*width gradients
  kDensePushReply = 10,
  kError = 11,        // server → worker: the request `request_id` failed; payload is text
  kDenseRegion = 12,  // worker → server: where is this table's shard for one-sided reads?
  kDenseRegionReply = 13,  // keys = DenseRegionKeys (see below), no payload
};

// The keys of a kDenseRegionReply: the shard's rows and the registered
// region (rdma::RemoteKey fields) holding a seqlock version word at byte 0,
// the server's published minimum worker clock (int64) at byte
// `clock_offset`, and the rows' values from byte `values_offset`; and the
// server's staleness bound s (0 under BSP, kRegionNoBound under ASP), so
// that a one-sided reader at clock c keeps what it read only when the
// published clock is >= c - s, as the server would answer a pull. A server
// that holds pushes back in rounds (BSP with more than one worker) says
// kRegionRounds instead of 0: a push of round c is in its rows only once
// the published clock is past c, so a reader that pushed at clock c since
// reads by message until then (the server applies the reader's own rounds
// before it answers a pull).
enum DenseRegionKeys : size_t {
  kRegionBeginRow,
  kRegionEndRow,
  kRegionAddress,
  kRegionKey,
  kRegionLength,
  kRegionValuesOffset,
  kRegionClockOffset,
  kRegionStaleness,
  kRegionKeyCount
};
inline constexpr uint64_t kRegionNoBound = ~uint64_t{0};
inline constexpr uint64_t kRegionRounds = ~uint64_t{0} - 1;  // bound 0, pushes applied by rounds
const char* to_string(Op op);
// A push of either kind (sparse or dense): what a server applies once and a
// clock waits for.
inline bool is_push(Op op) { return op == Op::kPush || op == Op::kDensePush; }

// Flag bits.
inline constexpr uint8_t kFlagNone = 0;
// Pulls and pushes only: the keys are strictly increasing and travel as
// LEB128 varints, the first key and then each key's difference from the one
// before (>= 1), the section padded with zero bytes to a multiple of 8 so
// that the values after it stay aligned. The key section's size is then
// what the message holds beyond the header and payload_bytes. Sorted keys
// of a small key space (a libsvm set's feature indices, a renumbered batch)
// take 1 to 3 bytes instead of 8; random 64-bit keys about 7.
inline constexpr uint8_t kFlagDeltaVarintKeys = 1;
// Push replies only: this copy of the push was one the server had already
// applied (a copy sent again, or one its restored checkpoint holds), so it
// changed nothing now. A worker counting what a rejoined server lost
// (worker::KvClient::server_rejoined) learns from it which of the pushes it
// sent again the checkpoint held.
inline constexpr uint8_t kFlagAppliedBefore = 2;
inline constexpr uint8_t kKnownFlags = kFlagDeltaVarintKeys | kFlagAppliedBefore;

struct WireHeader {
  Op op = Op::kPull;
  uint8_t flags = 0;
  uint32_t table = 0;
  uint32_t sender = 0;      // the sender's rank, checked against the transport's peer id
  int64_t clock = 0;        // the sender's clock when it sent this; pull replies: the server's minimum worker clock (the data's)
  uint64_t request_id = 0;  // chosen by the requester, echoed in replies
  uint64_t key_count = 0;
  uint64_t payload_bytes = 0;
};

// What the receiver accepts.
struct WireLimits {
  uint64_t max_keys = uint64_t{1} << 32;
  uint64_t max_payload_bytes = uint64_t{1} << 36;
  // The most a server's pull reply may carry: a request for more (a small
  // pull of a wide table asks for 4 x width bytes a key) is refused, not
  // built. 4 GiB, what an endpoint receives by default
  // (rdma::EndpointOptions::max_inbound_bytes): a larger reply would be
  // dropped by the worker's transport and its pull time out.
  uint64_t max_reply_bytes = uint64_t{4} << 30;
};

// A worker's clock on the wire: in [0, kMaxWireClock]; kMaxWireClock itself
// only in a clock message, from a worker that has finished
// (worker::KvClient::kFinishedClock). A server refuses a request outside,
// so clock arithmetic (c - s, c + 1) cannot overflow and no push is filed
// in a round that never ends.
inline constexpr int64_t kMaxWireClock = int64_t{1} << 60;

struct DecodedMessage {
  WireHeader header;
  std::span<const uint64_t> keys;   // into the message (8 bytes a key), or into key_storage
  std::vector<uint64_t> key_storage;  // the decoded keys of a kFlagDeltaVarintKeys message
  std::span<const float> values;    // empty for kError
  std::string error_text;           // kError only
};

// Bytes of a message's key section: 8 a key, or with kFlagDeltaVarintKeys
// in flags the keys' varints padded to a multiple of 8. Throws
// std::invalid_argument, naming the position, when that flag is given and
// the keys are not strictly increasing.
size_t key_section_bytes(std::span<const uint64_t> keys, uint8_t flags);
// A delta-varint key section of `varint_bytes` bytes of varints, with its
// zero padding: the next multiple of 8.
inline size_t padded_varint_section(size_t varint_bytes) { return (varint_bytes + 7) / 8 * 8; }
// The LEB128 varint of v: its length (1 to 10), and writing it at out
// (returns the byte after it).
size_t varint_bytes(uint64_t v);
std::byte* put_varint(std::byte* out, uint64_t v);
// Bytes of the message encode_message makes of these keys and payload.
size_t encoded_size(std::span<const uint64_t> keys, size_t payload_bytes, uint8_t flags = kFlagNone);
// encode_message into out, which holds exactly encoded_size bytes (a buffer
// the caller allocated without zero-filling: every byte is written). The
// key section is coded as header.flags says.
void encode_message_into(WireHeader header, std::span<const uint64_t> keys, std::span<const std::byte> payload,
                         std::span<std::byte> out);
// The same into a new Buffer, a contiguous container of std::byte sized by
// its constructor: std::vector, or rdma::ByteBuffer (not zero-filled), the
// transport's message type, so a message is encoded where it is sent from.
template <typename Buffer>
Buffer encode_message_as(const WireHeader& header, std::span<const uint64_t> keys,
                         std::span<const std::byte> payload = {}) {
  Buffer out(encoded_size(keys, payload.size(), header.flags));
  encode_message_into(header, keys, payload, out);
  return out;
}
// Encodes header + keys + payload bytes (header.key_count and payload_bytes
// are set from the spans).
std::vector<std::byte> encode_message(WireHeader header, std::span<const uint64_t> keys,
                                      std::span<const std::byte> payload);
std::vector<std::byte> encode_message(WireHeader header, std::span<const uint64_t> keys,
                                      std::span<const float> values);
// Writes the header alone into out[0, kWireHeaderBytes) (scatter-gather sends).
void encode_header(const WireHeader& header, std::byte* out);
// The request id of an encoded header, read or rewritten in place (a
// request is numbered once it is built; a reply is sent with its request's
// id as the transport's tag, so that a worker can receive it straight into
// the caller's array: rdma::Endpoint::expect).
uint64_t request_id_of(const std::byte* header);
void set_request_id(std::byte* header, uint64_t request_id);

// Validates `bytes` and fills `out` (spans into `bytes`, which must be
// 8-byte aligned: rdma::Message buffers are). Returns nullopt when the
// message is well formed, else what is wrong. Checks: length, magic,
// version, op, flags, and that key and payload sizes add up exactly; for
// delta-varint keys also every varint (at most 64 bits, inside the
// section, no overlong coding), every difference (>= 1, no wrap past 2^64) and the padding
// (zero, under 8 bytes). The caller checks sender, table and widths against
// its cluster map.
//
// A message whose payload was received apart from the rest (a landing,
// rdma::Message::landed) is decoded from both: `bytes` then holds the header
// and keys, `landed` exactly the payload, and out.values points into it.
std::optional<std::string> decode_message(std::span<const std::byte> bytes, const WireLimits& limits,
                                          DecodedMessage& out, std::span<const std::byte> landed = {});

}  // namespace parafab::ps
