#include "ps/wire_format.h"

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace parafab::ps {
namespace {

template <typename T>
void put(std::byte* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(static_cast<uint64_t>(v) >> (8 * i));
}
template <typename T>
T get(const std::byte* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

// The count keys of a delta-varint section of `bytes` bytes at p into keys;
// nullopt, or what is wrong.
std::optional<std::string> decode_delta_varints(const std::byte* p, uint64_t bytes, uint64_t count,
                                                std::vector<uint64_t>& keys) {
  const std::byte* const end = p + bytes;
  keys.resize(static_cast<size_t>(count));  // count <= bytes: checked by the caller
  uint64_t prev = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      if (p == end) return "the key section ends inside the varint of key " + std::to_string(i);
      const auto b = static_cast<uint8_t>(*p++);
      if (shift == 63 && b > 1) return "the varint of key " + std::to_string(i) + " does not fit in 64 bits";
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        // One coding per key: a message accepted encodes back to its bytes.
        if (b == 0 && shift > 0) return "the varint of key " + std::to_string(i) + " is overlong (a zero last byte)";
        break;
      }
    }
    if (i > 0) {
      if (v == 0) return "key " + std::to_string(i) + " repeats the key before it (delta-varint keys must increase)";
      if (v > UINT64_MAX - prev) return "key " + std::to_string(i) + " passes 2^64 (delta " + std::to_string(v) + ")";
      v += prev;
    }
    keys[static_cast<size_t>(i)] = prev = v;
  }
  if (end - p >= 8) return std::to_string(end - p) + " bytes after the last key's varint (padding is under 8)";
  for (; p < end; ++p) {
    if (*p != std::byte{0}) return "nonzero padding after the delta-varint keys";
  }
  return std::nullopt;
}

bool known_op(uint8_t op) { return op >= static_cast<uint8_t>(Op::kPull) && op <= static_cast<uint8_t>(Op::kDenseRegionReply); }

}  // namespace

const char* to_string(Op op) {
  switch (op) {
    case Op::kPull: return "pull";
    case Op::kPullReply: return "pull reply";
    case Op::kPush: return "push";
    case Op::kPushReply: return "push reply";
    case Op::kClock: return "clock";
    case Op::kClockReply: return "clock reply";
    case Op::kDensePull: return "dense pull";
    case Op::kDensePullReply: return "dense pull reply";
    case Op::kDensePush: return "dense push";
    case Op::kDensePushReply: return "dense push reply";
    case Op::kError: return "error";
    case Op::kDenseRegion: return "dense region";
    case Op::kDenseRegionReply: return "dense region reply";
  }
  return "unknown";
}

void encode_header(const WireHeader& h, std::byte* p) {
  put<uint32_t>(p, kWireMagic);
  put<uint16_t>(p + 4, kWireVersion);
  put<uint8_t>(p + 6, static_cast<uint8_t>(h.op));
  put<uint8_t>(p + 7, h.flags);
  put<uint32_t>(p + 8, h.table);
  put<uint32_t>(p + 12, h.sender);
  put<uint64_t>(p + 16, static_cast<uint64_t>(h.clock));
  put<uint64_t>(p + 24, h.request_id);
  put<uint64_t>(p + 32, h.key_count);
  put<uint64_t>(p + 40, h.payload_bytes);
}

uint64_t request_id_of(const std::byte* header) { return get<uint64_t>(header + 24); }

void set_request_id(std::byte* header, uint64_t request_id) { put<uint64_t>(header + 24, request_id); }

size_t varint_bytes(uint64_t v) { return v < 128 ? 1 : (static_cast<size_t>(std::bit_width(v)) + 6) / 7; }

std::byte* put_varint(std::byte* out, uint64_t v) {
  while (v >= 128) {
    *out++ = static_cast<std::byte>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<std::byte>(v);
  return out;
}

size_t key_section_bytes(std::span<const uint64_t> keys, uint8_t flags) {
  if ((flags & kFlagDeltaVarintKeys) == 0) return keys.size_bytes();
  size_t n = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0 && keys[i] <= keys[i - 1]) {
      throw std::invalid_argument("delta-varint keys must be strictly increasing: key " + std::to_string(i) + " (" +
                                  std::to_string(keys[i]) + ") follows " + std::to_string(keys[i - 1]));
    }
    n += varint_bytes(i == 0 ? keys[0] : keys[i] - keys[i - 1]);
  }
  return padded_varint_section(n);
}

size_t encoded_size(std::span<const uint64_t> keys, size_t payload_bytes, uint8_t flags) {
  return kWireHeaderBytes + key_section_bytes(keys, flags) + payload_bytes;
}

void encode_message_into(WireHeader h, std::span<const uint64_t> keys, std::span<const std::byte> payload,
                         std::span<std::byte> out) {
  const size_t key_bytes = key_section_bytes(keys, h.flags);
  if (out.size() != kWireHeaderBytes + key_bytes + payload.size()) {
    throw std::invalid_argument("encode_message_into: a buffer of " + std::to_string(out.size()) +
                                " bytes for a message of " +
                                std::to_string(kWireHeaderBytes + key_bytes + payload.size()));
  }
  h.key_count = keys.size();
  h.payload_bytes = payload.size();
  encode_header(h, out.data());
  // Keys and floats are stored in host order: every supported host is
  // little-endian (checked at compile time below), so this is the wire order.
  static_assert(std::endian::native == std::endian::little, "parafab's wire format assumes a little-endian host");
  std::byte* k = out.data() + kWireHeaderBytes;
  if ((h.flags & kFlagDeltaVarintKeys) != 0) {
    uint64_t prev = 0;
    for (const uint64_t key : keys) {
      k = put_varint(k, key - prev);
      prev = key;
    }
    std::memset(k, 0, static_cast<size_t>(out.data() + kWireHeaderBytes + key_bytes - k));
  } else if (!keys.empty()) {
    std::memcpy(k, keys.data(), keys.size_bytes());
  }
  if (!payload.empty()) std::memcpy(out.data() + kWireHeaderBytes + key_bytes, payload.data(), payload.size());
}

std::vector<std::byte> encode_message(WireHeader h, std::span<const uint64_t> keys, std::span<const std::byte> payload) {
  return encode_message_as<std::vector<std::byte>>(h, keys, payload);
}

std::vector<std::byte> encode_message(WireHeader h, std::span<const uint64_t> keys, std::span<const float> values) {
  return encode_message(h, keys, std::as_bytes(values));
}

std::optional<std::string> decode_message(std::span<const std::byte> bytes, const WireLimits& limits,
                                          DecodedMessage& out, std::span<const std::byte> landed) {
  if (bytes.size() < kWireHeaderBytes) {
    return "message of " + std::to_string(bytes.size()) + " bytes is shorter than the " +
           std::to_string(kWireHeaderBytes) + "-byte header";
  }
  const std::byte* p = bytes.data();
  if (get<uint32_t>(p) != kWireMagic) return "bad magic";
  if (const auto v = get<uint16_t>(p + 4); v != kWireVersion) {
    return "wire version " + std::to_string(v) + ", this build speaks " + std::to_string(kWireVersion);
  }
  const auto op = get<uint8_t>(p + 6);
  if (!known_op(op)) return "unknown op " + std::to_string(op);
  WireHeader& h = out.header;
  h.op = static_cast<Op>(op);
  h.flags = get<uint8_t>(p + 7);
  if ((h.flags & ~kKnownFlags) != 0) return "unknown flags " + std::to_string(h.flags);
  if ((h.flags & kFlagAppliedBefore) != 0 && h.op != Op::kPushReply && h.op != Op::kDensePushReply) {
    return std::string("the applied-before flag in a ") + to_string(h.op) + " message (push replies only)";
  }
  const bool varint = (h.flags & kFlagDeltaVarintKeys) != 0;
  if (varint && h.op != Op::kPull && h.op != Op::kPush) {
    return std::string("delta-varint keys in a ") + to_string(h.op) + " message (pulls and pushes only)";
  }
  h.table = get<uint32_t>(p + 8);
  h.sender = get<uint32_t>(p + 12);
  h.clock = static_cast<int64_t>(get<uint64_t>(p + 16));
  h.request_id = get<uint64_t>(p + 24);
  h.key_count = get<uint64_t>(p + 32);
  h.payload_bytes = get<uint64_t>(p + 40);
  if (h.key_count > limits.max_keys) {
    return std::to_string(h.key_count) + " keys exceed the limit of " + std::to_string(limits.max_keys);
  }
  if (h.payload_bytes > limits.max_payload_bytes) {
    return "payload of " + std::to_string(h.payload_bytes) + " bytes exceeds the limit of " +
           std::to_string(limits.max_payload_bytes);
  }
  const uint64_t body = bytes.size() - kWireHeaderBytes + landed.size();
  if (!landed.empty() && h.payload_bytes != landed.size()) {
    return "header announces " + std::to_string(h.payload_bytes) + " payload bytes, but " +
           std::to_string(landed.size()) + " bytes of the message were received apart as its payload";
  }
  uint64_t key_bytes = 0;
  if (varint) {
    // Each varint takes at least a byte: key_count is bounded by the bytes
    // received before anything is allocated for it.
    if (h.payload_bytes > body || h.key_count > body - h.payload_bytes) {
      return "header announces " + std::to_string(h.key_count) + " delta-varint keys and " +
             std::to_string(h.payload_bytes) + " payload bytes, but the message carries " + std::to_string(body) +
             " bytes after the header";
    }
    key_bytes = body - h.payload_bytes;
    if (key_bytes % 8 != 0) return "delta-varint key section of " + std::to_string(key_bytes) + " bytes is not padded to a multiple of 8";
  } else {
    // Divide, never multiply: the limits are the receiver's to choose (up to
    // no limit at all), so key_count * 8 could wrap to a size that fits.
    if (h.key_count > body / 8 || h.payload_bytes != body - h.key_count * 8) {
      return "header announces " + std::to_string(h.key_count) + " keys and " + std::to_string(h.payload_bytes) +
             " payload bytes, but the message carries " + std::to_string(body) + " bytes after the header";
    }
    key_bytes = h.key_count * 8;
  }
  if (h.op != Op::kError && h.payload_bytes % sizeof(float) != 0) {
    return "payload of " + std::to_string(h.payload_bytes) + " bytes is not a whole number of floats";
  }
  if (reinterpret_cast<uintptr_t>(p) % alignof(uint64_t) != 0) return "message buffer is not 8-byte aligned";
  if (reinterpret_cast<uintptr_t>(landed.data()) % alignof(float) != 0) return "landed payload is not 4-byte aligned";
  if (varint) {
    if (auto err = decode_delta_varints(p + kWireHeaderBytes, key_bytes, h.key_count, out.key_storage)) return err;
    out.keys = out.key_storage;
  } else {
    out.keys = {reinterpret_cast<const uint64_t*>(p + kWireHeaderBytes), static_cast<size_t>(h.key_count)};
  }
  const std::byte* payload = landed.empty() ? p + kWireHeaderBytes + key_bytes : landed.data();
  out.values = {};
  out.error_text.clear();
  if (h.op == Op::kError) {
    out.error_text.assign(reinterpret_cast<const char*>(payload), static_cast<size_t>(h.payload_bytes));
  } else {
    out.values = {reinterpret_cast<const float*>(payload), static_cast<size_t>(h.payload_bytes / sizeof(float))};
  }
  return std::nullopt;
}

}  // namespace parafab::ps
