// The transport's frame header: round trip, and every malformed frame
// refused with a reason instead of being trusted.
#include "rdma/message_framing.h"

#include <gtest/gtest.h>

#include <vector>

namespace parafab::rdma {
namespace {

std::vector<std::byte> frame_of(const FrameHeader& h, size_t payload) {
  std::vector<std::byte> f(kFrameHeaderBytes + payload);
  encode_frame_header(h, f.data());
  return f;
}

constexpr uint64_t kMaxTotal = uint64_t{1} << 30;
constexpr uint64_t kMaxChunk = 1 << 20;

TEST(MessageFraming, EagerAndLargeHeadersRoundTrip) {
  FrameHeader h;
  h.user_tag = 0x0123456789abcdefULL;
  h.message_id = kMessageIdMask;
  h.total_bytes = 5;
  std::string why;
  auto f = frame_of(h, 5);
  auto d = decode_frame_header(f, kMaxTotal, kMaxChunk, why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->user_tag, h.user_tag);
  EXPECT_EQ(d->message_id, h.message_id);
  EXPECT_EQ(d->total_bytes, 5u);

  h.flags = kFrameLarge;
  h.total_bytes = 3 * kMaxChunk + 1;
  h.chunk_bytes = kMaxChunk;
  f = frame_of(h, 0);
  d = decode_frame_header(f, kMaxTotal, kMaxChunk, why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(chunk_count(d->total_bytes, d->chunk_bytes), 4u);
}

TEST(MessageFraming, MalformedFramesAreRefusedWithAReason) {
  FrameHeader ok;
  ok.total_bytes = 8;
  struct Case {
    const char* name;
    std::vector<std::byte> frame;
    const char* expect;
  };
  std::vector<Case> cases;
  cases.push_back({"short", std::vector<std::byte>(kFrameHeaderBytes - 1), "shorter"});
  auto bad_magic = frame_of(ok, 8);
  bad_magic[0] = std::byte{0};
  cases.push_back({"magic", bad_magic, "magic"});
  auto bad_version = frame_of(ok, 8);
  bad_version[4] = std::byte{9};
  cases.push_back({"version", bad_version, "version"});
  auto bad_flags = frame_of(ok, 8);
  bad_flags[6] = std::byte{0x80};
  cases.push_back({"flags", bad_flags, "flags"});
  cases.push_back({"payload length", frame_of(ok, 7), "announces"});
  FrameHeader big;
  big.flags = kFrameLarge;
  big.total_bytes = kMaxTotal + 1;
  big.chunk_bytes = kMaxChunk;
  cases.push_back({"over the inbound limit", frame_of(big, 0), "inbound limit"});
  big.total_bytes = 100;
  big.chunk_bytes = kMaxChunk + 1;
  cases.push_back({"chunk above ours", frame_of(big, 0), "chunk size"});
  big.chunk_bytes = 1;
  cases.push_back({"tiny chunk", frame_of(big, 0), "chunk size"});
  big.chunk_bytes = kMinChunkBytes;
  big.total_bytes = kMinChunkBytes * (kMaxChunks + 1);
  cases.push_back({"too many chunks", frame_of(big, 0), "2^24"});
  big.total_bytes = 100;
  cases.push_back({"large with trailing bytes", frame_of(big, 3), "trailing"});
  FrameHeader id;
  id.message_id = kMessageIdMask + 1;
  cases.push_back({"message id", frame_of(id, 0), "39 bits"});

  for (const Case& c : cases) {
    std::string why;
    // The chunk-count case needs a limit above its size to reach that check.
    const uint64_t max_total = std::string(c.name) == "too many chunks" ? ~uint64_t{0} : kMaxTotal;
    EXPECT_FALSE(decode_frame_header(c.frame, max_total, kMaxChunk, why)) << c.name;
    EXPECT_NE(why.find(c.expect), std::string::npos) << c.name << ": " << why;
  }
}

TEST(MessageFraming, ChunkTagsAreDistinctFromEachOther) {
  EXPECT_NE(chunk_tag(0, 0), 0u);
  EXPECT_NE(chunk_tag(1, 0), chunk_tag(0, 1));
  EXPECT_NE(chunk_tag(kMessageIdMask, kMaxChunks - 1), chunk_tag(kMessageIdMask - 1, kMaxChunks - 1));
  EXPECT_EQ(chunk_count(0, 64), 0u);
  EXPECT_EQ(chunk_count(64, 64), 1u);
  EXPECT_EQ(chunk_count(65, 64), 2u);
  EXPECT_EQ(chunk_count(uint64_t{1} << 40, ~uint64_t{0}), 1u);  // no overflow
}

}  // namespace
}  // namespace parafab::rdma
