// How one logical message crosses the fabric.
//
// Every message starts with a 40-byte little-endian frame header sent as an
// untagged libfabric message (fi_send) into a posted receive buffer. A small
// message (header + payload within the eager size) is that one send. A
// larger one sends the header alone, flagged kLarge, and then the payload in
// chunks of `chunk_bytes` (the sender's libfabric message limit), each a
// tagged send whose tag names the message and the chunk (chunk_tag). On the
// header, the receiver allocates the whole message and posts one receive
// per chunk, directed at the sender, a window of them at a time
// (kChunkWindow), so chunks land in place with no copy.
//
// This framing belongs to the transport; the parameter-server wire format
// (DESIGN.md) is the payload and is validated by ps/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace parafab::rdma {

inline constexpr uint32_t kFrameMagic = 0x4D524650;  // "PFRM" little-endian
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 40;
inline constexpr uint16_t kFrameLarge = 1;  // payload follows as chunks
// Eager payloads of at least this many bytes are sent as an iovec of header
// and payload rather than copied behind the header.
inline constexpr size_t kEagerGatherBytes = 4096;

// Chunk tags: bit 63 set, 39 bits of message id, 24 bits of chunk index.
// Frame headers are untagged (FI_MSG), so the receive pool sits in the
// provider's untagged receive queue: a chunk that arrives before its
// receive is posted is matched against the chunk receives alone, not
// against every pool buffer (64 tag comparisons a chunk over shm, 0.3 us of
// a 32 or 64 KiB message).
inline constexpr int kChunkIndexBits = 24;
inline constexpr int kMessageIdBits = 39;
inline constexpr uint64_t kMaxChunks = uint64_t{1} << kChunkIndexBits;
inline constexpr uint64_t kMessageIdMask = (uint64_t{1} << kMessageIdBits) - 1;
inline constexpr size_t kMinChunkBytes = 64;

struct FrameHeader {
  uint16_t flags = 0;
  uint64_t user_tag = 0;
  uint64_t message_id = 0;   // sender-local, below 2^39
  uint64_t total_bytes = 0;  // payload bytes
  uint64_t chunk_bytes = 0;  // large messages: bytes per chunk (the last may be short)
};

void encode_frame_header(const FrameHeader& h, std::byte* out);  // writes kFrameHeaderBytes

// Validates a received frame of `frame.size()` bytes. Returns the header or
// nullopt with `why` set. `max_total` bounds total_bytes of large messages,
// `max_chunk` their chunk size (what this side can receive in one message).
std::optional<FrameHeader> decode_frame_header(std::span<const std::byte> frame, uint64_t max_total,
                                               uint64_t max_chunk, std::string& why);

uint64_t chunk_tag(uint64_t message_id, uint64_t chunk_index);
uint64_t chunk_count(uint64_t total_bytes, uint64_t chunk_bytes);

}  // namespace parafab::rdma
