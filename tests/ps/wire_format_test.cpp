// The data-plane format: round trips, and every malformed message refused
// with a reason before anything reads past its end.
#include "ps/wire_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

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

// A payload received apart from the rest (a landing): decoded from both
// parts, values pointing into the landed bytes; the parts must add up.
TEST(WireFormat, APayloadReceivedApartIsDecodedInPlace) {
  WireHeader h{.op = Op::kDensePullReply, .table = 2, .sender = 1, .clock = 4, .request_id = 99};
  const std::vector<float> values = {1.0f, -2.0f, 3.5f, 4.0f, 5.0f};
  const auto whole = as_received(encode_message(h, {}, values));
  const rdma::ByteBuffer head(whole.begin(), whole.begin() + kWireHeaderBytes);
  std::vector<float> landed_at(values.size() + 1);
  std::memcpy(landed_at.data(), values.data(), values.size() * sizeof(float));
  const std::span<const std::byte> landed = std::as_bytes(std::span(landed_at.data(), values.size()));
  DecodedMessage d;
  const auto err = decode_message(head, WireLimits{}, d, landed);
  ASSERT_FALSE(err) << *err;
  EXPECT_EQ(d.header.request_id, 99u);
  EXPECT_EQ(d.values.data(), landed_at.data());
  EXPECT_EQ(std::vector<float>(d.values.begin(), d.values.end()), values);
  EXPECT_EQ(request_id_of(head.data()), 99u);
  // One float too many or too few landed, or a whole message with a landed part.
  const auto more = std::as_bytes(std::span(landed_at.data(), values.size() + 1));
  ASSERT_TRUE(decode_message(head, WireLimits{}, d, more));
  EXPECT_NE(decode_message(head, WireLimits{}, d, more)->find("received apart"), std::string::npos);
  EXPECT_TRUE(decode_message(head, WireLimits{}, d, landed.first(landed.size() - 4)));
  EXPECT_TRUE(decode_message(whole, WireLimits{}, d, landed));
  // Landed bytes that are not float-aligned.
  std::vector<std::byte> odd(landed.size() + 1);
  EXPECT_TRUE(decode_message(head, WireLimits{}, d, std::span<const std::byte>(odd).subspan(1)));
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
  cases.push_back({"flags", patched(7, 4), "unknown flags 4", {}});
  cases.push_back({"applied-before flag on a push", patched(7, kFlagAppliedBefore), "push replies only", {}});
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

// Delta + varint keys: strictly increasing keys of any size round trip,
// values stay aligned behind the padded section, and small gaps cost a byte.
TEST(WireFormat, DeltaVarintKeysRoundTrip) {
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> key_sets = {
      {},
      {0},
      {~uint64_t{0}},
      {0, ~uint64_t{0}},                                   // the largest delta: a 10-byte varint
      {0, 1, 127, 128, 16383, 16384, (uint64_t{1} << 63) - 1, uint64_t{1} << 63, ~uint64_t{0} - 1, ~uint64_t{0}},
  };
  for (const size_t n : {1, 7, 8, 9, 1000}) {
    std::vector<uint64_t> k(n);
    for (uint64_t& x : k) x = rng() >> (rng() % 64);  // every magnitude
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
    key_sets.push_back(k);
  }
  for (const auto& keys : key_sets) {
    for (const Op op : {Op::kPush, Op::kPull}) {
      WireHeader h{.op = op, .flags = kFlagDeltaVarintKeys, .table = 2, .sender = 1, .request_id = 9};
      std::vector<float> values;
      if (op == Op::kPush) {
        for (size_t i = 0; i < keys.size() * 2; ++i) values.push_back(static_cast<float>(i) - 0.5f);
      }
      const auto bytes = encode_message(h, keys, values);
      ASSERT_EQ(bytes.size(), encoded_size(keys, values.size() * 4, kFlagDeltaVarintKeys));
      const size_t section = bytes.size() - kWireHeaderBytes - values.size() * 4;
      EXPECT_EQ(section % 8, 0u);
      size_t varints = 0;
      for (size_t i = 0; i < keys.size(); ++i) varints += varint_bytes(i == 0 ? keys[0] : keys[i] - keys[i - 1]);
      EXPECT_EQ(section, (varints + 7) / 8 * 8);
      const auto buf = as_received(bytes);
      DecodedMessage d;
      const auto err = decode_message(buf, WireLimits{}, d);
      ASSERT_FALSE(err) << *err;
      EXPECT_EQ(d.header.flags, kFlagDeltaVarintKeys);
      EXPECT_EQ(std::vector<uint64_t>(d.keys.begin(), d.keys.end()), keys);
      EXPECT_EQ(std::vector<float>(d.values.begin(), d.values.end()), values);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(d.values.data()) % 4, 0u);
    }
  }
  // 1000 consecutive keys: 1000 one-byte varints against 8000 bytes plain.
  std::vector<uint64_t> run(1000);
  std::iota(run.begin(), run.end(), uint64_t{5});
  EXPECT_EQ(key_section_bytes(run, kFlagDeltaVarintKeys), 1000u);
  EXPECT_EQ(key_section_bytes(run, kFlagNone), 8000u);
  // The LEB128 lengths at their edges.
  for (const auto& [v, n] : std::vector<std::pair<uint64_t, size_t>>{
           {0, 1}, {127, 1}, {128, 2}, {16383, 2}, {16384, 3}, {(uint64_t{1} << 63) - 1, 9}, {~uint64_t{0}, 10}}) {
    EXPECT_EQ(varint_bytes(v), n) << v;
    std::byte out[10];
    EXPECT_EQ(static_cast<size_t>(put_varint(out, v) - out), n) << v;
  }
}

TEST(WireFormat, DeltaVarintKeysMustIncrease) {
  for (const std::vector<uint64_t>& keys : {std::vector<uint64_t>{3, 3}, std::vector<uint64_t>{5, 4}}) {
    try {
      (void)encode_message(WireHeader{.op = Op::kPull, .flags = kFlagDeltaVarintKeys}, keys, std::span<const float>());
      ADD_FAILURE() << "non-increasing keys encoded";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("key 1 (" + std::to_string(keys[1]) + ") follows"), std::string::npos)
          << e.what();
    }
  }
}

// Every way a delta-varint key section can be wrong is refused, naming it,
// and a huge key count is refused before anything is allocated for it.
TEST(WireFormat, MalformedDeltaVarintKeysAreRefusedWithAReason) {
  // A pull whose key section is `section` (padded by the caller), key_count given.
  auto pull = [](uint64_t key_count, std::vector<uint8_t> section, uint64_t payload = 0, Op op = Op::kPull) {
    std::vector<std::byte> b(kWireHeaderBytes);
    encode_header(WireHeader{.op = op, .flags = kFlagDeltaVarintKeys, .key_count = key_count, .payload_bytes = payload},
                  b.data());
    for (uint8_t x : section) b.push_back(std::byte{x});
    for (uint64_t i = 0; i < payload; ++i) b.push_back(std::byte{0});
    return b;
  };
  struct Case {
    const char* name;
    std::vector<std::byte> bytes;
    const char* expect;
  };
  const std::vector<uint8_t> ten_ff = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  auto with = [](std::vector<uint8_t> v, std::initializer_list<uint8_t> more) {
    v.insert(v.end(), more);
    while (v.size() % 8 != 0) v.push_back(0);
    return v;
  };
  const std::vector<Case> cases = {
      {"on a dense push", pull(1, {1, 0, 0, 0, 0, 0, 0, 0}, 0, Op::kDensePush), "pulls and pushes only"},
      {"on a clock", pull(0, {}, 0, Op::kClock), "pulls and pushes only"},
      {"unpadded", pull(1, {5}), "not padded"},
      {"more keys than bytes", pull(9, {1, 1, 1, 1, 1, 1, 1, 1}), "carries"},
      {"huge key count", pull(uint64_t{1} << 40, {1, 1, 1, 1, 1, 1, 1, 1}), "carries"},
      {"truncated varint", pull(2, {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}), "ends inside the varint of key 1"},
      {"65-bit varint", pull(1, with(ten_ff, {0x02})), "does not fit in 64 bits"},
      {"11-byte varint", pull(1, with(ten_ff, {0x81, 0x00})), "does not fit in 64 bits"},
      {"delta zero", pull(2, {7, 0, 0, 0, 0, 0, 0, 0}), "key 1 repeats the key before it"},
      {"wraps past 2^64", pull(2, with(ten_ff, {0x01, 0x01})), "key 1 passes 2^64"},
      {"nonzero padding", pull(1, {7, 0, 0, 0, 0, 0, 9, 0}), "nonzero padding"},
      {"overlong varint", pull(1, {0x87, 0x00, 0, 0, 0, 0, 0, 0}), "overlong"},
      {"a whole word of padding", pull(1, {7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), "padding is under 8"},
  };
  for (const Case& c : cases) {
    const auto buf = as_received(c.bytes);
    DecodedMessage d;
    const auto err = decode_message(buf, WireLimits{~uint64_t{0}, ~uint64_t{0}}, d);
    ASSERT_TRUE(err) << c.name << " was accepted";
    EXPECT_NE(err->find(c.expect), std::string::npos) << c.name << ": " << *err;
    EXPECT_LE(d.key_storage.capacity(), 16u) << c.name;  // nothing sized by a hostile count
  }
  // A push announcing more payload than the message holds.
  std::vector<std::byte> b(kWireHeaderBytes + 8);
  encode_header(WireHeader{.op = Op::kPush, .flags = kFlagDeltaVarintKeys, .key_count = 1, .payload_bytes = 16},
                b.data());
  DecodedMessage d;
  const auto err = decode_message(as_received(b), WireLimits{}, d);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("carries"), std::string::npos) << *err;
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
      const size_t key_bytes = (d.header.flags & kFlagDeltaVarintKeys) != 0 ? d.keys.size() : d.keys.size_bytes();
      EXPECT_LE(kWireHeaderBytes + key_bytes + d.values.size_bytes(), buf.size());
    }
  }
  EXPECT_GT(accepted, 0u);  // the generator does reach valid messages
}

}  // namespace
}  // namespace parafab::ps
