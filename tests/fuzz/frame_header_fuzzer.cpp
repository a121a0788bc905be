// libFuzzer target: the transport's frame header decoder
// (rdma::decode_frame_header). The first input byte picks the receiver's
// limits (inbound total, largest chunk); the rest is the frame as it landed
// in a posted receive buffer, copied to a block of exactly its size. A
// refusal must say why; an accepted header must satisfy what the receive
// path relies on before it allocates (flags, message id, sizes, chunk count)
// and encode back to the frame's first 40 bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "rdma/message_framing.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::violated;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
struct Limits {
  uint64_t max_total, max_chunk;
};
constexpr Limits kLimits[8] = {
    {uint64_t{1} << 30, uint64_t{1} << 20},  // typical: 1 GiB inbound, tcp's chunk
    {0, 0},
    {64, 64},
    {kMax, kMax},                             // a provider without limits
    {uint64_t{1} << 44, 64},                  // many small chunks
    {kMax, 1},                                // a chunk limit below the minimum
    {1000, kMax},
    {uint64_t{1} << 24, 4096},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace parafab::rdma;
  const Limits& lim = kLimits[data[0] & 7];
  const size_t n = size - 1;
  auto block = std::make_unique<std::byte[]>(n);
  if (n) std::memcpy(block.get(), data + 1, n);
  const std::span<const std::byte> frame(block.get(), n);

  std::string why;
  const auto h = decode_frame_header(frame, lim.max_total, lim.max_chunk, why);
  if (!h) {
    check(!why.empty(), "a refusal without a reason");
    return 0;
  }
  check((h->flags & ~kFrameLarge) == 0, "unknown flags accepted");
  check(h->message_id <= kMessageIdMask, "a message id beyond 39 bits accepted");
  if (h->flags & kFrameLarge) {
    check(n == kFrameHeaderBytes, "a large-message header with trailing bytes");
    check(h->total_bytes <= lim.max_total, "the inbound limit was not enforced");
    check(h->chunk_bytes >= kMinChunkBytes && h->chunk_bytes <= lim.max_chunk, "the chunk size was not checked");
    const uint64_t chunks = chunk_count(h->total_bytes, h->chunk_bytes);
    check(chunks <= kMaxChunks, "more than 2^24 chunks accepted");
    check(chunks == 0 || (chunks - 1) * h->chunk_bytes < h->total_bytes, "the chunk count overshoots");
    check(chunks == 0 || h->total_bytes - (chunks - 1) * h->chunk_bytes <= h->chunk_bytes,
          "the chunk count falls short");
    if (chunks > 0) {
      // The receiver posts one receive per chunk: the tags must differ.
      check(chunk_tag(h->message_id, 0) != chunk_tag(h->message_id, chunks - 1) || chunks == 1,
            "first and last chunk share a tag");
      check((chunk_tag(h->message_id, chunks - 1) >> 63) == 1, "a chunk tag without bit 63");
    }
  } else {
    check(n == kFrameHeaderBytes + h->total_bytes, "a small frame whose size differs from its header");
  }
  std::byte again[kFrameHeaderBytes];
  encode_frame_header(*h, again);
  check(std::memcmp(again, frame.data(), kFrameHeaderBytes) == 0, "an accepted header does not encode back");
  return 0;
}
