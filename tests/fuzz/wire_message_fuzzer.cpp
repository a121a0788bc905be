// libFuzzer target: the data plane's message decoder (ps::decode_message).
// The first input byte picks the receiver's limits (the server's are
// configurable, so every WireLimits is in the contract) and whether the
// buffer is misaligned; the rest is the message, copied into a heap block
// of exactly its size so ASan sees any read past it. A refusal must say why;
// an accepted message must have spans inside the buffer that account for
// every byte, and encode back to the same bytes.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <span>
#include <vector>

#include "ps/wire_format.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::violated;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr parafab::ps::WireLimits kLimits[8] = {
    {},                                     // the defaults (server and client)
    {0, 0},                                 // nothing but a header
    {4, 64},                                // small
    {kMax, kMax},                           // no limit at all
    {uint64_t{1} << 61, uint64_t{1} << 62},  // the largest the decoder's comment allowed
    {kMax / 8 + 1, kMax},                   // key bytes alone overflow 64 bits
    {1, kMax},
    {kMax, 8},
};

struct AlignedBlock {
  explicit AlignedBlock(size_t n) : size(n), p(static_cast<std::byte*>(::operator new(n ? n : 1, std::align_val_t{8}))) {}
  ~AlignedBlock() { ::operator delete(p, std::align_val_t{8}); }
  size_t size;
  std::byte* p;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace parafab::ps;
  const uint8_t sel = data[0];
  const WireLimits& limits = kLimits[sel & 7];
  const size_t skew = (sel & 8) ? 4 : 0;  // a buffer that is not 8-byte aligned
  const size_t n = size - 1;
  AlignedBlock block(n + skew);
  if (n) std::memcpy(block.p + skew, data + 1, n);
  const std::span<const std::byte> bytes(block.p + skew, n);

  DecodedMessage d;
  const auto err = decode_message(bytes, limits, d);
  if (err) {
    check(!err->empty(), "a refusal without a reason");
    return 0;
  }
  check(skew == 0, "an unaligned buffer was accepted");
  const WireHeader& h = d.header;
  check(h.key_count <= limits.max_keys && h.payload_bytes <= limits.max_payload_bytes, "a limit was not enforced");
  check((h.flags & ~kKnownFlags) == 0, "unknown flags accepted");
  check((h.flags & kFlagAppliedBefore) == 0 || h.op == Op::kPushReply || h.op == Op::kDensePushReply,
        "the applied-before flag accepted on another op");
  const bool varint = (h.flags & kFlagDeltaVarintKeys) != 0;
  check(!varint || h.op == Op::kPull || h.op == Op::kPush, "delta-varint keys accepted on another op");
  check(d.keys.size() == h.key_count, "keys span differs from key_count");
  // Delta-varint keys are decoded into key_storage: a section of at least a
  // byte a key, padded to 8, strictly increasing keys.
  const uint64_t key_bytes = varint ? bytes.size() - kWireHeaderBytes - h.payload_bytes : d.keys.size_bytes();
  if (varint) {
    check(d.keys.data() == d.key_storage.data(), "delta-varint keys not in key_storage");
    check(key_bytes % 8 == 0 && h.key_count <= key_bytes, "delta-varint key section of a bad size");
    for (size_t i = 1; i < d.keys.size(); ++i) check(d.keys[i] > d.keys[i - 1], "delta-varint keys not increasing");
  }
  const std::byte* end = bytes.data() + bytes.size();
  auto inside = [&](const void* p, size_t len) {
    const auto* b = static_cast<const std::byte*>(p);
    return len == 0 || (b >= bytes.data() && b <= end && len <= static_cast<size_t>(end - b));
  };
  if (!varint) check(inside(d.keys.data(), d.keys.size_bytes()), "keys span leaves the buffer");
  check(inside(d.values.data(), d.values.size_bytes()), "values span leaves the buffer");
  if (h.op == Op::kError) {
    check(d.values.empty() && d.error_text.size() == h.payload_bytes, "error text length differs from the payload");
  } else {
    check(d.error_text.empty() && d.values.size_bytes() == h.payload_bytes, "values span differs from the payload");
  }
  check(kWireHeaderBytes + key_bytes + h.payload_bytes == bytes.size(), "sizes do not add up");
  uint64_t sum = 0;
  for (uint64_t k : d.keys) sum += k;
  for (float v : d.values) sum += static_cast<uint64_t>(std::bit_cast<uint32_t>(v));
  if (sum == 0x5eed) std::fprintf(stderr, " ");  // keeps the reads

  const std::span<const std::byte> payload =
      h.op == Op::kError ? std::as_bytes(std::span<const char>(d.error_text.data(), d.error_text.size()))
                         : std::as_bytes(d.values);
  const std::vector<std::byte> again = encode_message(h, d.keys, payload);
  check(again.size() == bytes.size() && std::memcmp(again.data(), bytes.data(), bytes.size()) == 0,
        "an accepted message does not encode back to its bytes");
  return 0;
}
