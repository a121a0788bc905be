// Landings (Endpoint::expect/withdraw): an expected large message received
// with its head in the Message and its tail straight into the caller's
// memory; every other message received as before; and a withdrawn landing
// never written again, even when withdrawn while its message arrives.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rdma/endpoint.h"
#include "rdma/message_framing.h"
#include "tests/rdma/endpoint_test_util.h"
#include "tests/rdma/raw_sender.h"

namespace parafab::rdma {
namespace {

using testing::first_mismatch;
using testing::make_mesh;
using testing::options_for;
using testing::pattern;
using testing::pattern_byte;

constexpr size_t kKiB = 1024;
constexpr std::byte kUntouched{0xA5};
constexpr size_t kGuard = 64;  // bytes before and after the tail that nothing may write

// The caller's memory for a tail of n bytes, between two guard zones.
struct TailMemory {
  explicit TailMemory(size_t n) : bytes(n + 2 * kGuard, kUntouched), size(n) {}
  std::byte* tail() { return bytes.data() + kGuard; }
  // Whether the guards, and the tail too when `tail_too`, are still untouched.
  bool untouched(bool tail_too) const {
    auto clean = [](auto b, auto e) { return std::all_of(b, e, [](std::byte x) { return x == kUntouched; }); };
    return clean(bytes.begin(), bytes.begin() + kGuard) && clean(bytes.end() - kGuard, bytes.end()) &&
           (!tail_too || clean(bytes.begin() + kGuard, bytes.end() - kGuard));
  }
  // The first tail byte that is not byte head + i of message `msg` from peer 0, or -1.
  int64_t tail_mismatch(uint64_t msg, size_t head) const {
    for (size_t i = 0; i < size; ++i) {
      if (bytes[kGuard + i] != pattern_byte(0, msg, head + i)) return static_cast<int64_t>(i);
    }
    return -1;
  }
  std::vector<std::byte> bytes;
  size_t size;
};

class EndpointLanding : public ::testing::TestWithParam<std::string> {};

// Sends `bytes` with `tag` from eps[0] to eps[1] and receives there the
// next message; the send must succeed.
std::optional<Message> send_and_receive(std::vector<std::unique_ptr<Endpoint>>& eps, uint64_t tag,
                                        const std::vector<std::byte>& bytes) {
  auto sent = eps[0]->send(1, tag, bytes.data(), bytes.size());
  auto m = eps[1]->receive(std::chrono::seconds(20));
  EXPECT_TRUE(sent.get().ok());
  return m;
}

// Head and tail split at every kind of place: inside the one chunk of a
// message (a receive into two places), inside a later chunk of many, at a
// chunk's edge, and with no head at all.
TEST_P(EndpointLanding, AnExpectedMessageLandsItsTailInTheCallersMemory) {
  struct Shape {
    size_t limit;  // max_message_bytes (0: the provider's)
    size_t head, tail;
  };
  const Shape shapes[] = {{0, 48, 64 * kKiB}, {0, 48, 1024 * kKiB + 4}, {16 * kKiB, 13, 300 * kKiB + 7},
                          {16 * kKiB, 40 * kKiB + 5, 100 * kKiB}, {16 * kKiB, 32 * kKiB, 64 * kKiB},
                          {16 * kKiB, 0, 80 * kKiB}};
  uint64_t msg = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("limit " + std::to_string(s.limit) + ", head " + std::to_string(s.head) + ", tail " +
                 std::to_string(s.tail));
    EndpointOptions o = options_for(GetParam());
    o.max_message_bytes = s.limit;
    auto eps = make_mesh(2, o);
    TailMemory mem(s.tail);
    const LandingId id = eps[1]->expect({.from = 0, .tag = 900 + msg, .head_bytes = s.head, .tail = mem.tail(),
                                         .tail_bytes = s.tail});
    ASSERT_NE(id, 0u);
    const auto whole = pattern(0, msg, s.head + s.tail);
    auto m = send_and_receive(eps, 900 + msg, whole);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->tag, 900 + msg);
    EXPECT_EQ(first_mismatch(m->data, 0, msg, s.head), -1);
    EXPECT_EQ(static_cast<void*>(m->landed.data()), static_cast<void*>(mem.tail()));
    EXPECT_EQ(m->landed.size(), s.tail);
    EXPECT_EQ(mem.tail_mismatch(msg, s.head), -1);
    EXPECT_TRUE(mem.untouched(false));
    EXPECT_TRUE(eps[1]->withdraw(id));  // used: nothing to end
    const EndpointStats st = eps[1]->stats();
    EXPECT_EQ(st.messages_landed, 1u);
    EXPECT_EQ(st.bytes_received, s.head + s.tail);
    ++msg;
  }
}

// A landing takes only the message it names: another tag, another size or
// an eager message of its tag arrive whole as before, and leave the memory
// alone; one landing per peer and tag at a time.
TEST_P(EndpointLanding, OtherMessagesArriveWholeAndLeaveTheMemoryAlone) {
  auto eps = make_mesh(2, options_for(GetParam()));
  constexpr size_t kHead = 48, kTail = 128 * kKiB;
  TailMemory mem(kTail);
  const LandingId id =
      eps[1]->expect({.from = 0, .tag = 5, .head_bytes = kHead, .tail = mem.tail(), .tail_bytes = kTail});
  ASSERT_NE(id, 0u);
  EXPECT_EQ(eps[1]->expect({.from = 0, .tag = 5, .head_bytes = kHead, .tail = mem.tail(), .tail_bytes = kTail}), 0u);
  struct Other {
    uint64_t tag;
    size_t bytes;
  };
  const Other others[] = {{5, kHead + kTail + 8}, {5, kHead + kTail - 8}, {6, kHead + kTail}, {5, 100}};
  uint64_t msg = 0;
  for (const Other& x : others) {
    SCOPED_TRACE("tag " + std::to_string(x.tag) + ", " + std::to_string(x.bytes) + " bytes");
    const auto whole = pattern(0, msg, x.bytes);
    auto m = send_and_receive(eps, x.tag, whole);
    ASSERT_TRUE(m);
    EXPECT_TRUE(m->landed.empty());
    EXPECT_EQ(first_mismatch(m->data, 0, msg, x.bytes), -1);
    EXPECT_TRUE(mem.untouched(true));
    ++msg;
  }
  // Still waiting: the message it names lands.
  const auto whole = pattern(0, msg, kHead + kTail);
  auto m = send_and_receive(eps, 5, whole);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->landed.size(), kTail);
  EXPECT_EQ(mem.tail_mismatch(msg, kHead), -1);
  EXPECT_EQ(eps[1]->stats().messages_landed, 1u);
  // Each landing serves one message: the same again arrives whole.
  auto m2 = send_and_receive(eps, 5, whole);
  ASSERT_TRUE(m2);
  EXPECT_TRUE(m2->landed.empty());
  EXPECT_EQ(first_mismatch(m2->data, 0, msg, whole.size()), -1);
  EXPECT_TRUE(eps[1]->withdraw(id));
}

TEST_P(EndpointLanding, AWithdrawnLandingIsNotUsed) {
  auto eps = make_mesh(2, options_for(GetParam()));
  constexpr size_t kHead = 48, kTail = 256 * kKiB;
  TailMemory mem(kTail);
  const LandingId id =
      eps[1]->expect({.from = 0, .tag = 9, .head_bytes = kHead, .tail = mem.tail(), .tail_bytes = kTail});
  EXPECT_TRUE(eps[1]->withdraw(id));
  EXPECT_TRUE(eps[1]->withdraw(id));  // once more: nothing left to end
  EXPECT_TRUE(eps[1]->withdraw(0));
  const auto whole = pattern(0, 0, kHead + kTail);
  auto m = send_and_receive(eps, 9, whole);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->landed.empty());
  EXPECT_EQ(first_mismatch(m->data, 0, 0, whole.size()), -1);
  EXPECT_TRUE(mem.untouched(true));
  // And the peer and tag are free for a new landing.
  const LandingId next =
      eps[1]->expect({.from = 0, .tag = 9, .head_bytes = kHead, .tail = mem.tail(), .tail_bytes = kTail});
  EXPECT_NE(next, 0u);
  EXPECT_TRUE(eps[1]->withdraw(next));
}

// Withdrawn while its message arrives, chunk by chunk: when withdraw
// returns, nothing writes the memory any more (it is the caller's to free),
// whether the message had landed whole by then (delivered, landed) or was
// cancelled (never delivered, counted as failed); either way the sender's
// send completes (the rest is drained) and its next message still comes.
// The receiver drives its own progress, so the test steps through the
// chunks' arrival instead of racing a progress thread. Chunks of 4 KiB
// (1024, posted a window at a time: many steps to withdraw in) and of 1
// MiB (4, all posted at once; whether any is still unmatched when the
// withdraw comes is up to the timing, which the test below fixes).
void withdraw_after_every_chunk_was_posted(const std::string& provider, bool mr_local);

// Withdrawn once every chunk receive of its message is posted, before any
// chunk came (the sender here is a bare endpoint that holds them back): the
// receives are cancelled and posted again into scratch, so the chunks sent
// afterwards still find receives and never touch the tail; the message then
// ends as failed, and the sender's next message follows it.
// Also with every local buffer registered (FI_MR_LOCAL's path), the scratch included.
TEST_P(EndpointLanding, WithdrawnAfterEveryChunkWasPostedTheRestIsDrained) {
  for (const bool mr_local : {false, true}) {
    SCOPED_TRACE(mr_local ? "register_local_buffers" : "plain");
    withdraw_after_every_chunk_was_posted(GetParam(), mr_local);
  }
}

void withdraw_after_every_chunk_was_posted(const std::string& provider, bool mr_local) {
  EndpointOptions o = options_for(provider);
  o.register_local_buffers = mr_local;
  Endpoint target(o);
  testing::RawSender sender(provider);
  target.add_peer(0, sender.address());
  constexpr size_t kChunk = 32 * kKiB, kHead = 48, kTail = 2 * kChunk - kHead;
  TailMemory mem(kTail);
  const LandingId id =
      target.expect({.from = 0, .tag = 3, .head_bytes = kHead, .tail = mem.tail(), .tail_bytes = kTail});
  FrameHeader h;
  h.flags = kFrameLarge;
  h.user_tag = 3;
  h.message_id = 0;
  h.total_bytes = 2 * kChunk;
  h.chunk_bytes = kChunk;
  sender.send(target.address(), testing::frame_of(h));
  auto wait_for_posts = [&](uint64_t n) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (target.stats().chunk_receives_posted < n && std::chrono::steady_clock::now() < give_up) {
      EXPECT_FALSE(target.receive(std::chrono::milliseconds(5)));
    }
    return target.stats().chunk_receives_posted;
  };
  ASSERT_EQ(wait_for_posts(2), 2u) << "the header's two chunk receives were not posted";
  EXPECT_TRUE(target.withdraw(id));
  // Both cancelled receives posted again, into scratch: the message is still open.
  EXPECT_EQ(wait_for_posts(4), 4u) << "the cancelled chunks were not posted again";
  EXPECT_EQ(target.stats().inbound_failed, 0u);
  const auto whole = pattern(0, 0, 2 * kChunk);
  for (uint64_t k = 0; k < 2; ++k) {
    const std::vector<std::byte> chunk(whole.begin() + static_cast<ptrdiff_t>(k * kChunk),
                                       whole.begin() + static_cast<ptrdiff_t>((k + 1) * kChunk));
    sender.send_tagged(target.address(), chunk_tag(0, k), chunk);
  }
  FrameHeader next;
  next.user_tag = 4;
  next.message_id = 1;
  next.total_bytes = 4;
  sender.send(target.address(), testing::frame_of(next, "next"));
  auto m = target.receive(std::chrono::seconds(20));
  ASSERT_TRUE(m) << "the sender's next message never came";
  EXPECT_EQ(m->tag, 4u);
  EXPECT_EQ(target.stats().inbound_failed, 1u);
  EXPECT_EQ(target.stats().messages_landed, 0u);
  EXPECT_TRUE(mem.untouched(true)) << "a chunk sent after withdraw wrote the tail";
  if (mr_local) {
    EXPECT_GT(target.stats().local_registrations, 0u);
  }
}

class EndpointLandingWithdrawn : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

TEST_P(EndpointLandingWithdrawn, WhileItsMessageArrivesNothingWritesTheMemoryAfter) {
  EndpointOptions o = options_for(std::get<0>(GetParam()));
  o.max_message_bytes = std::get<1>(GetParam());
  EndpointOptions receiver = o;
  receiver.progress_thread = false;
  receiver.busy_poll = true;
  Endpoint sender(o), target(receiver);
  sender.add_peer(1, target.address());
  target.add_peer(0, sender.address());
  constexpr size_t kHead = 48, kTail = 4096 * kKiB;
  TailMemory mem(kTail);
  const LandingId id =
      target.expect({.from = 0, .tag = 3, .head_bytes = kHead, .tail = mem.tail(), .tail_bytes = kTail});
  const auto whole = pattern(0, 0, kHead + kTail);
  const auto next = pattern(0, 1, 100);
  // Posting may wait for the target to take messages, which only this
  // thread's progress does: the sender posts from its own thread.
  std::promise<void> withdrawn;
  std::future<std::pair<Status, Status>> sends = std::async(std::launch::async, [&] {
    auto sent = sender.send(1, 3, whole.data(), whole.size());
    withdrawn.get_future().wait();
    // The sender's next message: whatever follows it arrived before it.
    auto sent_next = sender.send(1, 4, next.data(), next.size());
    return std::pair{sent.get(), sent_next.get()};
  });
  // Progress until the first bytes land, then withdraw at once.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (mem.untouched(true) && std::chrono::steady_clock::now() < give_up) target.progress();
  const bool landed_some = !mem.untouched(true);
  const bool ended = target.withdraw(id);
  const std::vector<std::byte> at_withdraw = mem.bytes;
  withdrawn.set_value();
  ASSERT_TRUE(landed_some) << "no byte of the message landed within 20 s";
  ASSERT_TRUE(ended);
  std::vector<Message> got;
  while (got.empty() || got.back().tag != 4) {
    auto m = target.receive(std::chrono::seconds(20));
    ASSERT_TRUE(m) << "the message after the withdrawn one never came";
    got.push_back(std::move(*m));
  }
  // Drive progress a while longer: late chunks of the cancelled message
  // must not land either.
  for (int i = 0; i < 2000; ++i) target.progress();
  EXPECT_EQ(mem.bytes, at_withdraw) << "the memory was written after withdraw returned";
  EXPECT_TRUE(mem.untouched(false));
  EXPECT_EQ(first_mismatch(got.back().data, 0, 1, next.size()), -1);
  const EndpointStats st = target.stats();
  if (got.size() == 2) {  // it had landed whole before the withdraw
    EXPECT_EQ(got[0].landed.size(), kTail);
    EXPECT_EQ(mem.tail_mismatch(0, kHead), -1);
    EXPECT_EQ(st.messages_landed, 1u);
  } else {
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(st.inbound_failed, 1u);
    EXPECT_EQ(st.messages_landed, 0u);
  }
  // The withdrawn message's chunks still found receives (into scratch), so
  // its send completed rather than waiting out the sender's timeout.
  const auto [sent, sent_next] = sends.get();
  EXPECT_TRUE(sent.ok()) << sent.to_string();
  EXPECT_TRUE(sent_next.ok()) << sent_next.to_string();
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointLandingWithdrawn,
                         ::testing::Combine(::testing::Values("tcp;ofi_rxm", "shm"),
                                            ::testing::Values(4 * kKiB, kKiB * kKiB)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, size_t>>& p) {
                           return (std::get<0>(p.param) == "shm" ? std::string("shm") : std::string("tcp_rxm")) +
                                  "_chunk" + std::to_string(std::get<1>(p.param) / kKiB) + "k";
                         });
INSTANTIATE_TEST_SUITE_P(Loopback, EndpointLanding, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) { return info.param == "shm" ? std::string("shm") : std::string("tcp_rxm"); });

}  // namespace
}  // namespace parafab::rdma
