// The FI_MR_LOCAL path over real libfabric on loopback. Providers with
// FI_MR_LOCAL in their mr_mode (efa; ofi_rxm over verbs) need a registered
// descriptor for every local buffer they are handed; tcp;ofi_rxm and shm
// never ask for one, so EndpointOptions::register_local_buffers makes the
// endpoint register and pass them anyway. Every kind of buffer is covered:
// the receive pool, eager and chunked sends (one piece, many pieces,
// gathered copies), inbound chunks into a fresh buffer and into a landing,
// and RMA buffers with and without a caller's region. Each test checks every
// byte and, through EndpointStats::local_registrations, that the
// registrations did happen (and do not without the option).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <vector>

#include "rdma/endpoint.h"
#include "tests/rdma/endpoint_test_util.h"

namespace parafab::rdma {
namespace {

using testing::first_mismatch;
using testing::make_mesh;
using testing::options_for;
using testing::pattern;
using testing::pattern_byte;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

EndpointOptions registering(const std::string& provider) {
  EndpointOptions o = options_for(provider);
  o.register_local_buffers = true;
  return o;
}

class EndpointMrLocal : public ::testing::TestWithParam<std::string> {};

TEST_P(EndpointMrLocal, TheProviderDoesNotAskAndNothingIsRegisteredWithoutTheOption) {
  auto eps = make_mesh(2, options_for(GetParam()));
  // What makes the option the only way to run this path here.
  ASSERT_EQ(eps[0]->provider().mr_mode & FI_MR_LOCAL, 0u) << GetParam() << " asks for local registrations";
  const auto bytes = pattern(0, 1, 100 * kKiB);
  auto sent = eps[0]->send(1, 1, bytes.data(), bytes.size());
  auto m = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(m);
  EXPECT_TRUE(sent.get().ok());
  EXPECT_EQ(eps[0]->stats().local_registrations, 0u);
  EXPECT_EQ(eps[1]->stats().local_registrations, 0u);
}

// Every size from empty to past the provider's eager path, all in flight
// at once; then chunked past a forced message limit.
TEST_P(EndpointMrLocal, MessagesOfEverySizeArriveWhole) {
  for (const size_t limit : {size_t{0}, 4 * kKiB}) {
    SCOPED_TRACE("message limit " + std::to_string(limit));
    EndpointOptions o = registering(GetParam());
    o.max_message_bytes = limit;
    auto eps = make_mesh(2, o);
    // The receive pool, registered once when the endpoint opens.
    EXPECT_EQ(eps[1]->stats().local_registrations, 1u);
    // The provider's own mr_mode is reported as it is.
    EXPECT_EQ(eps[0]->provider().mr_mode & FI_MR_LOCAL, 0u);
    const std::vector<size_t> sizes = {0, 1, 4 * kKiB, 16 * kKiB, 64 * kKiB + 3, kMiB + 5};
    std::vector<std::vector<std::byte>> payloads;
    std::vector<Completion> sent;
    for (size_t i = 0; i < sizes.size(); ++i) payloads.push_back(pattern(0, i, sizes[i]));
    for (size_t i = 0; i < sizes.size(); ++i) {
      sent.push_back(eps[0]->send(1, 500 + i, payloads[i].data(), payloads[i].size()));
    }
    std::map<uint64_t, ByteBuffer> got;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto m = eps[1]->receive(std::chrono::seconds(20));
      ASSERT_TRUE(m) << "message " << i << " never arrived";
      got[m->tag] = std::move(m->data);
    }
    for (auto& f : sent) {
      const Status s = eps[0]->wait(f);
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_TRUE(got.count(500 + i)) << "tag " << 500 + i;
      EXPECT_EQ(first_mismatch(got[500 + i], 0, i, sizes[i]), -1) << sizes[i] << " bytes";
    }
    // Past the eager size a send registers at least its frame and payload,
    // the receiver the buffer its chunks land in.
    EXPECT_GE(eps[0]->stats().local_registrations, 1 + 2u);
    EXPECT_GE(eps[1]->stats().local_registrations, 1 + 2u);
    EXPECT_EQ(eps[1]->stats().dropped_malformed, 0u);
    EXPECT_EQ(eps[1]->stats().inbound_failed, 0u);
  }
}

// A chunked message from 40 pieces of uneven sizes (some empty): chunks that
// span several pieces go as an iovec of their registered pieces, chunks that
// span more than the iovec allows as a registered gathered copy.
TEST_P(EndpointMrLocal, ScatterGatherPiecesAndGatheredChunksArriveWhole) {
  EndpointOptions o = registering(GetParam());
  o.max_message_bytes = 8 * kKiB;
  auto eps = make_mesh(2, o);
  const auto whole = pattern(0, 9, 150 * kKiB + 17);
  const std::vector<ConstBuffer> pieces = testing::uneven_pieces(whole, 7, 61, 5);
  ASSERT_GT(pieces.size(), 40u);
  const uint64_t before = eps[0]->stats().local_registrations;
  auto sent = eps[0]->send(1, 77, pieces);
  auto m = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(m);
  const Status s = sent.get();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(first_mismatch(m->data, 0, 9, whole.size()), -1);
  // Each non-empty piece registered once (and the frame), whatever the
  // number of chunks it is sent in.
  size_t non_empty = 0;
  for (const ConstBuffer& p : pieces) non_empty += p.size > 0;
  EXPECT_GE(eps[0]->stats().local_registrations - before, non_empty + 1);
}

// A landing's tail is a buffer of the caller's: registered for the receive.
TEST_P(EndpointMrLocal, ALandedTailArrivesInTheCallersMemory) {
  EndpointOptions o = registering(GetParam());
  o.max_message_bytes = 16 * kKiB;
  auto eps = make_mesh(2, o);
  constexpr size_t kHead = 40, kTail = 200 * kKiB + 3;
  std::vector<std::byte> tail(kTail, std::byte{0});
  const LandingId id = eps[1]->expect({.from = 0, .tag = 8, .head_bytes = kHead, .tail = tail.data(),
                                       .tail_bytes = kTail});
  ASSERT_NE(id, 0u);
  const auto whole = pattern(0, 3, kHead + kTail);
  auto sent = eps[0]->send(1, 8, whole.data(), whole.size());
  auto m = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(m);
  EXPECT_TRUE(sent.get().ok());
  EXPECT_EQ(first_mismatch(m->data, 0, 3, kHead), -1);
  ASSERT_EQ(m->landed.size(), kTail);
  for (size_t i = 0; i < kTail; ++i) ASSERT_EQ(tail[i], pattern_byte(0, 3, kHead + i)) << "tail byte " << i;
  EXPECT_TRUE(eps[1]->withdraw(id));
  EXPECT_EQ(eps[1]->stats().messages_landed, 1u);
  // The pool, the head's buffer and the tail.
  EXPECT_EQ(eps[1]->stats().local_registrations, 3u);
}

// RMA: without a local region the endpoint registers the local buffer for
// the one operation; with one it uses the caller's registration.
TEST_P(EndpointMrLocal, RmaReadsAndWritesWithAndWithoutALocalRegion) {
  EndpointOptions o = registering(GetParam());
  o.max_message_bytes = 64 * kKiB;  // a transfer of several chunks, one registration
  auto eps = make_mesh(2, o);
  if (!eps[0]->supports_rma()) GTEST_SKIP() << GetParam() << " has no FI_RMA";
  constexpr size_t kRegion = kMiB + 7, kOffset = 4093, kBytes = 300 * kKiB + 1;
  auto shard = pattern(1, 0, kRegion);
  MemoryRegion remote = eps[1]->register_memory(shard.data(), shard.size(), kRemoteReadWrite);
  const RemoteKey key = remote.remote_key();

  const uint64_t r0 = eps[0]->stats().local_registrations;
  std::vector<std::byte> local(kBytes, std::byte{0});
  Status s = eps[0]->read(1, local.data(), kBytes, key, kOffset).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(local[i], pattern_byte(1, 0, kOffset + i)) << "read byte " << i;
  EXPECT_EQ(eps[0]->stats().local_registrations - r0, 1u);

  auto out = pattern(0, 7, kBytes);
  s = eps[0]->write(1, out.data(), kBytes, key, kOffset).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(shard[kOffset + i], out[i]) << "written byte " << i;
  EXPECT_EQ(eps[0]->stats().local_registrations - r0, 2u);

  auto again = pattern(0, 8, kBytes);
  MemoryRegion mine = eps[0]->register_memory(again.data(), again.size(), kLocalOnly);
  s = eps[0]->write(1, again.data(), kBytes, key, kOffset, &mine).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(shard[kOffset + i], again[i]) << "written byte " << i;
  EXPECT_EQ(eps[0]->stats().local_registrations - r0, 2u);  // the caller's region, not a new one
  EXPECT_EQ(shard[kOffset - 1], pattern_byte(1, 0, kOffset - 1));
  EXPECT_EQ(shard[kOffset + kBytes], pattern_byte(1, 0, kOffset + kBytes));
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointMrLocal, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) { return info.param == "shm" ? std::string("shm") : std::string("tcp_rxm"); });

}  // namespace
}  // namespace parafab::rdma
