#include "rdma/message_framing.h"

#include <cstdio>
#include <cstring>

namespace parafab::rdma {
namespace {

// Explicit little-endian stores so the format does not depend on the host.
void put_u16(std::byte* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t get_le(const std::byte* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

void encode_frame_header(const FrameHeader& h, std::byte* out) {
  put_u32(out + 0, kFrameMagic);
  put_u16(out + 4, kFrameVersion);
  put_u16(out + 6, h.flags);
  put_u64(out + 8, h.user_tag);
  put_u64(out + 16, h.message_id);
  put_u64(out + 24, h.total_bytes);
  put_u64(out + 32, h.chunk_bytes);
}

std::optional<FrameHeader> decode_frame_header(std::span<const std::byte> frame, uint64_t max_total,
                                               uint64_t max_chunk, std::string& why) {
  if (frame.size() < kFrameHeaderBytes) {
    why = "frame of " + std::to_string(frame.size()) + " bytes is shorter than the " +
          std::to_string(kFrameHeaderBytes) + "-byte header";
    return std::nullopt;
  }
  const std::byte* p = frame.data();
  const uint64_t magic = get_le(p, 4);
  if (magic != kFrameMagic) {
    why = "bad magic 0x" + [&] {
      char buf[17];
      std::snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(magic));
      return std::string(buf);
    }();
    return std::nullopt;
  }
  const uint64_t version = get_le(p + 4, 2);
  if (version != kFrameVersion) {
    why = "frame version " + std::to_string(version) + ", this build speaks " + std::to_string(kFrameVersion);
    return std::nullopt;
  }
  FrameHeader h;
  h.flags = static_cast<uint16_t>(get_le(p + 6, 2));
  h.user_tag = get_le(p + 8, 8);
  h.message_id = get_le(p + 16, 8);
  h.total_bytes = get_le(p + 24, 8);
  h.chunk_bytes = get_le(p + 32, 8);
  if ((h.flags & ~kFrameLarge) != 0) {
    why = "unknown frame flags " + std::to_string(h.flags);
    return std::nullopt;
  }
  if (h.message_id > kMessageIdMask) {
    why = "message id " + std::to_string(h.message_id) + " exceeds 39 bits";
    return std::nullopt;
  }
  if ((h.flags & kFrameLarge) == 0) {
    if (frame.size() != kFrameHeaderBytes + h.total_bytes) {
      why = "frame of " + std::to_string(frame.size()) + " bytes announces a payload of " +
            std::to_string(h.total_bytes);
      return std::nullopt;
    }
    return h;
  }
  if (frame.size() != kFrameHeaderBytes) {
    why = "large-message header with " + std::to_string(frame.size() - kFrameHeaderBytes) + " trailing bytes";
    return std::nullopt;
  }
  if (h.total_bytes > max_total) {
    why = "message of " + std::to_string(h.total_bytes) + " bytes exceeds the inbound limit of " +
          std::to_string(max_total);
    return std::nullopt;
  }
  if (h.chunk_bytes < kMinChunkBytes || h.chunk_bytes > max_chunk) {
    why = "chunk size " + std::to_string(h.chunk_bytes) + " outside [" + std::to_string(kMinChunkBytes) + ", " +
          std::to_string(max_chunk) + "]";
    return std::nullopt;
  }
  if (chunk_count(h.total_bytes, h.chunk_bytes) > kMaxChunks) {
    why = "message needs more than 2^24 chunks";
    return std::nullopt;
  }
  return h;
}

uint64_t chunk_tag(uint64_t message_id, uint64_t chunk_index) {
  return (uint64_t{1} << 63) | ((message_id & kMessageIdMask) << kChunkIndexBits) |
         (chunk_index & (kMaxChunks - 1));
}

uint64_t chunk_count(uint64_t total_bytes, uint64_t chunk_bytes) {
  // Written so a chunk size near 2^64 (providers without a limit) cannot overflow.
  return chunk_bytes == 0 || total_bytes == 0 ? 0 : 1 + (total_bytes - 1) / chunk_bytes;
}

}  // namespace parafab::rdma
