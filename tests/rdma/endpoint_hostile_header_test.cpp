// A peer whose frame header announces chunks that never come (hostile, or
// dying between its header and its chunks): the receiving endpoint posts a
// window of chunk receives for it, not all of its slots, so it goes on
// serving everyone else; the message fails at its deadline, and the peer's
// next message is delivered after it.
//
// The hostile peer is a bare libfabric endpoint of the same provider
// (testing::RawSender), so that it can send a header no Endpoint would.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "rdma/endpoint.h"
#include "rdma/message_framing.h"
#include "tests/rdma/endpoint_test_util.h"
#include "tests/rdma/raw_sender.h"

namespace parafab::rdma {
namespace {

using testing::first_mismatch;
using testing::frame_of;
using testing::options_for;
using testing::pattern;
using testing::RawSender;
constexpr size_t kKiB = 1024;

class EndpointHostileHeader : public ::testing::TestWithParam<std::string> {};

TEST_P(EndpointHostileHeader, ChunksThatNeverComeHoldAWindowOfSlotsNotTheEndpoint) {
  EndpointOptions o = options_for(GetParam());
  o.max_in_flight = 16;  // a chunk window of 4
  o.timeout = std::chrono::seconds(6);
  Endpoint victim(o);
  Endpoint peer(options_for(GetParam()));
  RawSender hostile(GetParam());
  victim.add_peer(1, peer.address());
  peer.add_peer(0, victim.address());
  victim.add_peer(2, hostile.address());

  // Message 0 of the hostile peer: 10^5 chunks of 64 bytes announced, none sent.
  FrameHeader h;
  h.flags = kFrameLarge;
  h.user_tag = 5;
  h.message_id = 0;
  h.chunk_bytes = 64;
  h.total_bytes = 100000 * h.chunk_bytes;
  hostile.send(victim.address(), frame_of(h));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (victim.stats().chunk_receives_posted < 4 && std::chrono::steady_clock::now() < give_up) {
    (void)victim.receive(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(victim.stats().chunk_receives_posted, 4u) << "the header's window of chunk receives was not posted";

  // Everyone else is served meanwhile, both ways, with large messages (they
  // need chunk receives and send slots), long before the hostile message's
  // deadline: with every slot held, the peer's messages waited for it, and
  // so did the victim's send() calls (on their own thread here).
  constexpr int kMessages = 8;
  constexpr size_t kBytes = 64 * kKiB;
  const auto half_the_timeout = o.timeout / 2;
  std::vector<std::vector<std::byte>> in;
  std::vector<Completion> peer_sends;
  for (int i = 0; i < kMessages; ++i) {
    in.push_back(pattern(1, static_cast<uint64_t>(i), kBytes));
    peer_sends.push_back(peer.send(0, static_cast<uint64_t>(200 + i), in.back().data(), kBytes));
  }
  for (int i = 0; i < kMessages; ++i) {
    auto m = victim.receive(half_the_timeout);
    ASSERT_TRUE(m) << "the peer's message " << i << " did not arrive while the hostile message was pending";
    EXPECT_EQ(m->from, 1u);
    EXPECT_EQ(m->tag, static_cast<uint64_t>(200 + i));
    EXPECT_EQ(first_mismatch(m->data, 1, static_cast<uint64_t>(i), kBytes), -1);
  }
  for (Completion& s : peer_sends) EXPECT_TRUE(s.get().ok()) << s.get().to_string();
  std::vector<std::vector<std::byte>> out;
  for (int i = 0; i < kMessages; ++i) out.push_back(pattern(0, static_cast<uint64_t>(i), kBytes));
  auto victim_sends = std::async(std::launch::async, [&] {
    std::vector<Completion> sends;
    for (int i = 0; i < kMessages; ++i) {
      sends.push_back(victim.send(1, static_cast<uint64_t>(100 + i), out[static_cast<size_t>(i)].data(), kBytes));
    }
    std::vector<Status> done;
    for (Completion& c : sends) done.push_back(c.get());
    return done;
  });
  ASSERT_EQ(victim_sends.wait_for(half_the_timeout), std::future_status::ready)
      << "the victim's sends waited for room while the hostile message was pending";
  for (const Status& st : victim_sends.get()) EXPECT_TRUE(st.ok()) << st.to_string();
  for (int i = 0; i < kMessages; ++i) {
    auto m = peer.receive(half_the_timeout);
    ASSERT_TRUE(m) << "the victim's message " << i << " did not arrive";
    EXPECT_EQ(m->tag, static_cast<uint64_t>(100 + i));
    EXPECT_EQ(first_mismatch(m->data, 0, static_cast<uint64_t>(i), kBytes), -1);
  }
  // One chunk receive for each of the peer's messages, and still only the
  // hostile message's window.
  EXPECT_EQ(victim.stats().chunk_receives_posted, 4u + kMessages);

  // At its deadline the hostile message fails, its receives cancelled...
  const auto fail_by = std::chrono::steady_clock::now() + 5 * o.timeout;
  while (victim.stats().inbound_failed == 0 && std::chrono::steady_clock::now() < fail_by) {
    EXPECT_FALSE(victim.receive(std::chrono::milliseconds(50)));
  }
  const EndpointStats st = victim.stats();
  EXPECT_EQ(st.inbound_failed, 1u);
  EXPECT_EQ(st.timed_out, 1u);
  EXPECT_EQ(st.messages_received, static_cast<uint64_t>(kMessages));
  // ...and the hostile peer's next message comes after it, in its order.
  FrameHeader next;
  next.user_tag = 6;
  next.message_id = 1;
  next.total_bytes = 5;
  hostile.send(victim.address(), frame_of(next, "after"));
  auto m = victim.receive(std::chrono::seconds(10));
  ASSERT_TRUE(m) << "the hostile peer's next message never came";
  EXPECT_EQ(m->from, 2u);
  EXPECT_EQ(m->tag, 6u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data.data()), m->data.size()), "after");
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointHostileHeader, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "shm" ? std::string("shm") : std::string("tcp_rxm");
                         });

}  // namespace
}  // namespace parafab::rdma
