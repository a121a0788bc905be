// The data-plane format: round trips, and every malformed message refused
// with a reason before anything reads past its end.
#include "ps/wire_format.h"

#include <gtest/gtest.h>

#include <random>

#include "rdma/endpoint.h"

namespace parafab::ps {
namespace {

// rdma::Message buffers come from operator new: 8-byte aligned, as decode needs.
rdma::ByteBuffer as_received(const std::vector<std::byte>& v) { return rdma::ByteBuffer(v.begin(), v.end()); }

TEST(WireFormat, PushRoundTripsEveryField) {
  WireHeader h;
  h.op = Op::kPush;
  h.table = 7;
  h.sender = 3;
  h.clock = -5;
  h.request_id = 0xfedcba9876543210ULL;
  const std::vector<uint64_t> keys = {1, ~uint64_t{0}, 0x8000000000000000ULL};
  const std::vector<float> values = {1.5f, -2.25f, 3e30f, -0.0f, 7.0f, 8.0f};
  const auto buf = as_received(encode_message(h, keys, values));
  DecodedMessage d;
  const auto err = decode_message(buf, WireLimits{}, d);
  ASSERT_FALSE(err) << *err;
  EXPECT_EQ(d.header.op, Op::kPush);
  EXPECT_EQ(d.header.table, 7u);
  EXPECT_EQ(d.header.sender, 3u);
  EXPECT_EQ(d.header.clock, -5);
  EXPECT_EQ(d.header.request_id, h.request_id);
  EXPECT_EQ(std::vector<uint64_t>(d.keys.begin(), d.keys.end()), keys);
  ASSERT_EQ(d.values.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(d.values[i]), std::bit_cast<uint32_t>(values[i]));
}

TEST(WireFormat, ErrorRepliesCarryText) {
  WireHeader h;
  h.op = Op::kError;
  h.request_id = 9;
  const std::string text = "table 4 does not exist";
  const auto buf = as_received(encode_message(h, {}, std::as_bytes(std::span(text.data(), text.size()))));
  DecodedMessage d;
  ASSERT_FALSE(decode_message(buf, WireLimits{}, d));
  EXPECT_EQ(d.error_text, text);
  EXPECT_TRUE(d.values.empty());
}

TEST(WireFormat, MalformedMessagesAreRefusedWithAReason) {
  WireHeader h;
  h.op = Op::kPush;
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> values = {1, 2};
  const auto good = encode_message(h, keys, values);
  struct Case {
    const char* name;
    std::vector<std::byte> bytes;
    const char* expect;
    WireLimits limits;
  };
  std::vector<Case> cases;
  auto patched = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = std::byte{v};
    return b;
  };
  cases.push_back({"short", std::vector<std::byte>(good.begin(), good.begin() + 47), "shorter", {}});
  cases.push_back({"magic", patched(0, 0), "magic", {}});
  cases.push_back({"version", patched(4, 2), "version", {}});
  cases.push_back({"op zero", patched(6, 0), "unknown op", {}});
  cases.push_back({"op high", patched(6, 200), "unknown op", {}});
  cases.push_back({"flags", patched(7, 1), "flags", {}});
  cases.push_back({"truncated body", std::vector<std::byte>(good.begin(), good.end() - 1), "carries", {}});
  auto longer = good;
  longer.push_back(std::byte{0});
  cases.push_back({"trailing byte", longer, "carries", {}});
  cases.push_back({"key count huge", patched(32 + 7, 0x10), "exceed", {}});
  cases.push_back({"payload huge", patched(40 + 7, 0x10), "exceeds", {}});
  cases.push_back({"keys over a limit", good, "exceed", WireLimits{1, 1 << 20}});
  // Key count and payload that add up but leave a partial float.
  WireHeader odd = h;
  const std::vector<std::byte> three(3);
  auto odd_bytes = encode_message(odd, keys, std::span<const std::byte>(three));
  cases.push_back({"partial float", odd_bytes, "whole number of floats", {}});

  for (const Case& c : cases) {
    const auto buf = as_received(c.bytes);
    DecodedMessage d;
    const auto err = decode_message(buf, c.limits, d);
    ASSERT_TRUE(err) << c.name << " was accepted";
    EXPECT_NE(err->find(c.expect), std::string::npos) << c.name << ": " << *err;
  }
}

// Found by tests/fuzz (wire_message): with no key limit, 2^61 keys are
// 2^64 bytes, which wrapped to 0 and passed for an empty body.
TEST(WireFormat, AKeyCountWhoseSizeWrapsIsRefusedWithoutLimits) {
  const WireLimits none{~uint64_t{0}, ~uint64_t{0}};
  for (const uint64_t key_count : {uint64_t{1} << 61, (uint64_t{1} << 61) + 1, ~uint64_t{0}}) {
    for (const uint64_t payload : {uint64_t{0}, uint64_t{8}, ~uint64_t{0} - 7}) {
      std::vector<std::byte> bytes(kWireHeaderBytes + 8);
      encode_header(WireHeader{.op = Op::kPush, .key_count = key_count, .payload_bytes = payload}, bytes.data());
      for (const size_t size : {kWireHeaderBytes, kWireHeaderBytes + 8}) {
        const auto buf = as_received(std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<long>(size)));
        DecodedMessage d;
        const auto err = decode_message(buf, none, d);
        ASSERT_TRUE(err) << key_count << " keys, " << payload << " payload bytes in " << size << " bytes accepted";
        EXPECT_NE(err->find("carries"), std::string::npos) << *err;
      }
    }
  }
}

TEST(WireFormat, RandomBytesNeverCrashTheDecoder) {
  std::mt19937_64 rng(42);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    rdma::ByteBuffer buf(rng() % 200);
    for (auto& b : buf) b = static_cast<std::byte>(rng());
    if (i % 2 == 0 && buf.size() >= kWireHeaderBytes) {
      // Valid magic and version so the deeper checks are reached.
      encode_header(WireHeader{.op = static_cast<Op>(1 + rng() % 11), .key_count = rng() % 8,
                               .payload_bytes = rng() % 64},
                    buf.data());
    }
    DecodedMessage d;
    if (!decode_message(buf, WireLimits{}, d)) {
      ++accepted;
      // Whatever it accepted lies inside the buffer.
      EXPECT_LE(kWireHeaderBytes + d.keys.size_bytes() + d.values.size_bytes(), buf.size());
    }
  }
  EXPECT_GT(accepted, 0u);  // the generator does reach valid messages
}

}  // namespace
}  // namespace parafab::ps
