// Tagged messages over real libfabric on loopback: every size from empty to
// past the message limit, several in flight, scatter-gather, many peers.
#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <optional>
#include <thread>
#include <map>
#include <tuple>

#include "rdma/endpoint.h"
#include "rdma/fabric_error.h"
#include "rdma/message_framing.h"
#include "tests/rdma/endpoint_test_util.h"

namespace parafab::rdma {
namespace {

using testing::first_mismatch;
using testing::make_mesh;
using testing::options_for;
using testing::pattern;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

// provider, message bytes, messages in flight, forced message limit (0: provider's)
using Case = std::tuple<std::string, size_t, size_t, size_t>;

class EndpointMessages : public ::testing::TestWithParam<Case> {};

TEST_P(EndpointMessages, EveryByteArrivesInOrderOfTags) {
  const auto& [provider, bytes, in_flight, limit] = GetParam();
  EndpointOptions o = options_for(provider);
  o.max_message_bytes = limit;
  auto eps = make_mesh(2, o);
  if (limit != 0) {
    ASSERT_EQ(eps[0]->max_chunk_bytes(), limit);
  }

  std::vector<std::vector<std::byte>> payloads;
  std::vector<Completion> sent;
  for (size_t m = 0; m < in_flight; ++m) payloads.push_back(pattern(0, m, bytes));
  for (size_t m = 0; m < in_flight; ++m) {
    sent.push_back(eps[0]->send(1, /*tag=*/1000 + m, payloads[m].data(), payloads[m].size()));
  }
  std::map<uint64_t, ByteBuffer> got;
  for (size_t m = 0; m < in_flight; ++m) {
    auto msg = eps[1]->receive(std::chrono::seconds(30));
    ASSERT_TRUE(msg) << "message " << m << " of " << in_flight << " never arrived";
    EXPECT_EQ(msg->from, 0u);
    got[msg->tag] = std::move(msg->data);
  }
  for (auto& f : sent) {
    const Status s = f.get();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ASSERT_EQ(got.size(), in_flight);
  for (size_t m = 0; m < in_flight; ++m) {
    ASSERT_TRUE(got.count(1000 + m)) << "tag " << 1000 + m << " missing";
    EXPECT_EQ(first_mismatch(got[1000 + m], 0, m, bytes), -1) << "message " << m << " of " << bytes << " bytes";
  }
  const EndpointStats st = eps[1]->stats();
  EXPECT_EQ(st.messages_received, in_flight);
  EXPECT_EQ(st.dropped_malformed, 0u);
  EXPECT_EQ(eps[0]->stats().messages_sent, in_flight);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string p = std::get<0>(info.param);
  for (char& c : p) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return p + "_" + std::to_string(std::get<1>(info.param)) + "B_x" + std::to_string(std::get<2>(info.param)) +
         (std::get<3>(info.param) ? "_limit" + std::to_string(std::get<3>(info.param)) : "");
}

// 16 KiB: one payload past ofi_rxm's eager frame (its 40-byte header).
const std::vector<size_t> kSizes = {0, 1, 4 * kKiB, 16 * kKiB, 64 * kKiB, kMiB};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* p : {"tcp;ofi_rxm", "shm"}) {
    for (size_t s : kSizes) {
      for (size_t f : {size_t{1}, size_t{8}}) out.emplace_back(p, s, f, 0);
    }
    out.emplace_back(p, 64 * kMiB, 1, 0);
    // Past the message limit: chunked and reassembled, odd sizes included.
    out.emplace_back(p, 64 * kKiB + 3, 4, 4 * kKiB);
    out.emplace_back(p, kMiB + 1, 2, 64 * kKiB);
    out.emplace_back(p, 3 * kMiB + 7, 1, 256);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointMessages, ::testing::ValuesIn(cases()), case_name);

class EndpointPerProvider : public ::testing::TestWithParam<std::string> {};

TEST_P(EndpointPerProvider, ScatterGatherWithMorePiecesThanTheIovLimit) {
  EndpointOptions o = options_for(GetParam());
  o.max_message_bytes = 8 * kKiB;  // chunks span several pieces
  auto eps = make_mesh(2, o);
  const auto whole = pattern(0, 5, 100 * kKiB + 11);
  // 37 pieces of uneven sizes, some empty.
  const std::vector<ConstBuffer> pieces = testing::uneven_pieces(whole, 5, 97, 13);
  ASSERT_GT(pieces.size(), 8u);
  auto fut = eps[0]->send(1, 77, pieces);
  auto msg = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(msg);
  EXPECT_TRUE(fut.get().ok());
  EXPECT_EQ(msg->tag, 77u);
  EXPECT_EQ(first_mismatch(msg->data, 0, 5, whole.size()), -1);
}

// Eager messages from pieces: below kEagerGatherBytes they are copied behind
// the frame header; from it on, with few pieces, header and pieces go as one
// iovec; with many pieces, copied again. Every byte checked in each.
TEST_P(EndpointPerProvider, EagerMessagesFromPiecesArriveWhole) {
  auto eps = make_mesh(2, options_for(GetParam()));
  const std::vector<std::vector<size_t>> shapes = {
      {100, 0, 57},                       // small: copied
      {kEagerGatherBytes, 0, 1},          // at the gather size, two pieces
      {5000, 3000},                       // two pieces, gathered
      {12 * kKiB},                        // one piece, gathered
      {1000, 2000, 3000, 4000, 5000, 6},  // more pieces than a short iovec: copied
  };
  for (size_t c = 0; c < shapes.size(); ++c) {
    size_t total = 0;
    for (size_t n : shapes[c]) total += n;
    const auto whole = pattern(0, 40 + c, total);
    std::vector<ConstBuffer> pieces;
    size_t at = 0;
    for (size_t n : shapes[c]) {
      pieces.push_back({whole.data() + at, n});
      at += n;
    }
    auto fut = eps[0]->send(1, 100 + c, pieces);
    auto msg = eps[1]->receive(std::chrono::seconds(20));
    ASSERT_TRUE(msg) << "shape " << c;
    EXPECT_TRUE(eps[0]->wait(fut).ok()) << "shape " << c;
    EXPECT_EQ(msg->tag, 100 + c);
    EXPECT_EQ(msg->data.size(), total) << "shape " << c;
    EXPECT_EQ(first_mismatch(msg->data, 0, 40 + c, total), -1) << "shape " << c;
  }
}

TEST_P(EndpointPerProvider, EightPeersAllToAll) {
  constexpr size_t kPeers = 8;
  auto eps = make_mesh(kPeers, options_for(GetParam()));
  std::vector<std::vector<std::byte>> payloads(kPeers * kPeers);
  std::vector<Completion> sent;
  for (size_t i = 0; i < kPeers; ++i) {
    for (size_t j = 0; j < kPeers; ++j) {
      if (i == j) continue;
      // Sizes differ per pair: eager and chunked paths both in play.
      payloads[i * kPeers + j] = pattern(i, j, (i * kPeers + j) * 3001 + 1);
      sent.push_back(eps[i]->send(static_cast<PeerId>(j), j, payloads[i * kPeers + j].data(),
                                  payloads[i * kPeers + j].size()));
    }
  }
  for (size_t j = 0; j < kPeers; ++j) {
    std::vector<bool> seen(kPeers, false);
    for (size_t k = 0; k + 1 < kPeers; ++k) {
      auto msg = eps[j]->receive(std::chrono::seconds(30));
      ASSERT_TRUE(msg) << "peer " << j << " got " << k << " of " << kPeers - 1;
      ASSERT_LT(msg->from, kPeers);
      EXPECT_FALSE(seen[msg->from]);
      seen[msg->from] = true;
      EXPECT_EQ(msg->tag, j);
      EXPECT_EQ(first_mismatch(msg->data, msg->from, j, (msg->from * kPeers + j) * 3001 + 1), -1);
    }
  }
  for (auto& f : sent) {
    const Status s = f.get();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

TEST_P(EndpointPerProvider, BackPressureWithTwoOperationsInFlightLosesNothing) {
  EndpointOptions o = options_for(GetParam());
  o.max_in_flight = 2;              // sender and receiver both throttled
  o.max_message_bytes = 16 * kKiB;  // each message is seven chunks
  o.receive_buffers = 4;
  auto eps = make_mesh(2, o);
  constexpr size_t kMessages = 64;
  std::vector<std::vector<std::byte>> payloads;
  for (size_t m = 0; m < kMessages; ++m) payloads.push_back(pattern(0, m, 100 * kKiB + m));
  // Sends from a thread of their own: with two slots, send() blocks until
  // earlier operations complete, which needs the receiver to keep up.
  std::vector<Completion> sent(kMessages);
  std::thread sender([&] {
    for (size_t m = 0; m < kMessages; ++m) sent[m] = eps[0]->send(1, m, payloads[m].data(), payloads[m].size());
  });
  std::vector<bool> seen(kMessages, false);
  for (size_t k = 0; k < kMessages; ++k) {
    auto msg = eps[1]->receive(std::chrono::seconds(30));
    ASSERT_TRUE(msg) << "got " << k << " of " << kMessages;
    ASSERT_LT(msg->tag, kMessages);
    seen[msg->tag] = true;
    EXPECT_EQ(first_mismatch(msg->data, 0, msg->tag, 100 * kKiB + msg->tag), -1) << "message " << msg->tag;
  }
  sender.join();
  for (auto& f : sent) {
    const Status s = f.get();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), static_cast<long>(kMessages));
}

// One small message from a to b (peer 1 of a), received on a thread of its
// own: the providers set up the connection (shm maps the region, ofi_rxm
// connects) only while b makes progress, which the tests below then hold,
// and a's first post waits for it.
void connect_one_way(Endpoint& a, Endpoint& b) {
  std::optional<Message> m;
  std::thread receiver([&] { m = b.receive(std::chrono::seconds(20)); });
  const uint64_t hello = 1;
  auto f = a.send(1, 99, &hello, sizeof hello);
  const Status s = a.wait(f);
  receiver.join();
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(m);
}

// A (rank 0, options o) and B (rank 1, the same options but no progress
// thread): B makes progress only while the test calls into it.
struct HeldPair {
  std::unique_ptr<Endpoint> a, b;
  explicit HeldPair(const EndpointOptions& o) {
    EndpointOptions receiver_o = o;
    receiver_o.progress_thread = false;
    a = std::make_unique<Endpoint>(o);
    b = std::make_unique<Endpoint>(receiver_o);
    a->add_peer(1, b->address());
    b->add_peer(0, a->address());
  }
};

// large_in_flight_per_peer: with two large messages to B unreceived, a third
// send waits; once B reads, all arrive whole and in order. B's progress is
// held (no progress thread, nobody polls) until A's third send is seen
// waiting, so the wait is certain, not a matter of timing.
TEST_P(EndpointPerProvider, ALargeSendBeyondThePeersLimitWaitsAndLosesNothing) {
  EndpointOptions o = options_for(GetParam());
  o.large_in_flight_per_peer = 2;
  o.max_message_bytes = 256 * kKiB;  // tcp;ofi_rxm: chunks the receiver must take
  HeldPair pair(o);
  ASSERT_NO_FATAL_FAILURE(connect_one_way(*pair.a, *pair.b));
  Endpoint* a = pair.a.get();
  Endpoint* b = pair.b.get();
  constexpr size_t kMessages = 6;
  constexpr size_t kBytes = 256 * kKiB;
  std::vector<std::vector<std::byte>> payloads;
  for (size_t m = 0; m < kMessages; ++m) payloads.push_back(pattern(0, m, kBytes + m));
  std::vector<Completion> sent(kMessages);
  std::thread sender([&] {
    for (size_t m = 0; m < kMessages; ++m) sent[m] = a->send(1, m, payloads[m].data(), payloads[m].size());
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (a->stats().large_send_waits == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_GE(a->stats().large_send_waits, 1u) << "the third large send did not wait";
  for (size_t k = 0; k < kMessages; ++k) {
    auto msg = b->receive(std::chrono::seconds(20));  // drives B's progress
    EXPECT_TRUE(msg) << "got " << k << " of " << kMessages;
    if (!msg) break;
    EXPECT_EQ(msg->tag, k);
    EXPECT_EQ(first_mismatch(msg->data, 0, k, kBytes + k), -1) << "message " << k;
  }
  sender.join();
  for (auto& f : sent) {
    const Status s = f.get();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

// One large-message place per peer; 256 KiB messages are large (chunked
// over tcp;ofi_rxm too).
EndpointOptions one_large_place(const std::string& provider) {
  EndpointOptions o = options_for(provider);
  o.large_in_flight_per_peer = 1;
  o.max_message_bytes = 256 * kKiB;
  return o;
}

// Sends to a receiver that never reads, one large place: the second waits
// and times out; the places of sends that ended (by their own timeout) are
// given back, so a third gets one at once instead of waiting again.
TEST_P(EndpointPerProvider, PlacesOfLargeSendsThatTimedOutAreGivenBack) {
  EndpointOptions o = one_large_place(GetParam());
  o.timeout = std::chrono::milliseconds(300);
  HeldPair pair(o);
  ASSERT_NO_FATAL_FAILURE(connect_one_way(*pair.a, *pair.b));
  Endpoint* a = pair.a.get();
  const auto big = pattern(0, 0, 256 * kKiB);
  auto first = a->send(1, 0, big.data(), big.size());
  auto second = a->send(1, 1, big.data(), big.size());
  // Either it never got the place or it got it when the first timed out
  // and then timed out itself: kTimedOut both ways, after one wait.
  EXPECT_EQ(second.get().code(), StatusCode::kTimedOut);
  EXPECT_EQ(first.get().code(), StatusCode::kTimedOut);
  EXPECT_EQ(a->stats().large_send_waits, 1u);
  auto third = a->send(1, 2, big.data(), big.size());
  EXPECT_EQ(a->stats().large_send_waits, 1u) << "the timed-out sends still held the place";
  EXPECT_EQ(third.get().code(), StatusCode::kTimedOut);
}

// A send waiting for a place ends when its peer is declared failed, with
// the reason; the send in flight ends too.
TEST_P(EndpointPerProvider, ALargeSendWaitingForAPlaceEndsWhenThePeerIsMarkedFailed) {
  HeldPair pair(one_large_place(GetParam()));
  ASSERT_NO_FATAL_FAILURE(connect_one_way(*pair.a, *pair.b));
  Endpoint* a = pair.a.get();
  const auto big = pattern(0, 0, 256 * kKiB);
  auto first = a->send(1, 0, big.data(), big.size());
  Completion second;
  std::thread sender([&] { second = a->send(1, 1, big.data(), big.size()); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (a->stats().large_send_waits == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(a->stats().large_send_waits, 1u);
  a->mark_peer_failed(1, "declared dead by the test");
  sender.join();
  const Status s = second.get();
  EXPECT_EQ(s.code(), StatusCode::kPeerError) << s.to_string();
  EXPECT_NE(s.to_string().find("declared dead by the test"), std::string::npos) << s.to_string();
  EXPECT_EQ(first.get().code(), StatusCode::kPeerError);
}

// B sends `rounds` messages back to rank 0 as they come, from a thread of
// its own, driving its endpoint through receive and wait.
std::thread echo_to_rank_0(Endpoint& b, int rounds) {
  return std::thread([&b, rounds] {
    for (int i = 0; i < rounds; ++i) {
      auto m = b.receive(std::chrono::seconds(20));
      if (!m) return;
      auto f = b.send(0, m->tag, m->data.data(), m->data.size());
      if (!b.wait(f).ok()) return;
    }
  });
}

TEST_P(EndpointPerProvider, CallerDrivenProgressWithoutAProgressThread) {
  EndpointOptions o = options_for(GetParam());
  o.progress_thread = false;
  o.busy_poll = true;
  o.max_message_bytes = 32 * kKiB;
  auto eps = make_mesh(2, o);
  constexpr int kRounds = 20;
  std::thread echo = echo_to_rank_0(*eps[1], kRounds);
  for (int i = 0; i < kRounds; ++i) {
    const size_t n = (i % 2) ? 100 * kKiB + i : 10 + i;  // chunked and eager in turn
    const auto out = pattern(0, i, n);
    auto f = eps[0]->send(1, i, out.data(), out.size());
    auto back = eps[0]->receive(std::chrono::seconds(20));
    ASSERT_TRUE(back) << "round " << i;
    const Status s = eps[0]->wait(f);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(back->tag, static_cast<uint64_t>(i));
    EXPECT_EQ(first_mismatch(back->data, 0, i, n), -1) << "round " << i;
  }
  echo.join();
}

// A caller's own event loop: receive with a zero timeout, over and over,
// and nothing else. Each call must poll the queue, or no message ever comes.
TEST_P(EndpointPerProvider, ReceiveWithZeroTimeoutDrivesProgress) {
  EndpointOptions o = options_for(GetParam());
  o.progress_thread = false;
  auto eps = make_mesh(2, o);
  constexpr int kRounds = 10;
  std::thread echo = echo_to_rank_0(*eps[1], kRounds);
  for (int i = 0; i < kRounds; ++i) {
    const size_t n = (i % 2) ? 40 * kKiB + i : 10 + i;  // chunked and eager in turn
    const auto out = pattern(0, i, n);
    auto f = eps[0]->send(1, i, out.data(), out.size());
    std::optional<Message> back;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!back && std::chrono::steady_clock::now() < give_up) back = eps[0]->receive(std::chrono::milliseconds(0));
    ASSERT_TRUE(back) << "round " << i << ": receive(0ms) never delivered the echo";
    EXPECT_TRUE(eps[0]->wait(f).ok());
    EXPECT_EQ(first_mismatch(back->data, 0, i, n), -1) << "round " << i;
  }
  echo.join();
}

TEST_P(EndpointPerProvider, EachSendersMessagesArriveInSendOrder) {
  // Large messages are reassembled from chunks while small ones arrive
  // whole: without the per-peer order a small message would overtake.
  EndpointOptions o = options_for(GetParam());
  o.max_message_bytes = 8 * kKiB;
  auto eps = make_mesh(3, o);
  constexpr size_t kPerSender = 40;
  std::vector<std::vector<std::byte>> payloads(2 * kPerSender);
  std::vector<Completion> sent;
  for (size_t i = 0; i < kPerSender; ++i) {
    for (PeerId from : {PeerId{0}, PeerId{1}}) {
      auto& p = payloads[from * kPerSender + i];
      p = pattern(from, i, (i % 3 == 0) ? 512 * kKiB + i : 16 + i);
      sent.push_back(eps[from]->send(2, i, p.data(), p.size()));
    }
  }
  std::vector<uint64_t> next(2, 0);
  for (size_t k = 0; k < 2 * kPerSender; ++k) {
    auto msg = eps[2]->receive(std::chrono::seconds(30));
    ASSERT_TRUE(msg) << "got " << k;
    ASSERT_LT(msg->from, 2u);
    EXPECT_EQ(msg->tag, next[msg->from]) << "from peer " << msg->from;
    next[msg->from] = msg->tag + 1;
    const size_t n = (msg->tag % 3 == 0) ? 512 * kKiB + msg->tag : 16 + msg->tag;
    EXPECT_EQ(first_mismatch(msg->data, msg->from, msg->tag, n), -1);
  }
  for (auto& f : sent) EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(eps[2]->stats().skipped_in_order, 0u);
}

TEST_P(EndpointPerProvider, GarbageAddressIsAClearError) {
  Endpoint a(options_for(GetParam()));
  const std::vector<std::byte> garbage = {std::byte{0xde}, std::byte{0xad}, std::byte{0xbe}, std::byte{0xef}};
  try {
    a.add_peer(3, garbage);
    FAIL() << "expected FabricError";
  } catch (const FabricError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.call(), "fi_av_insert");
    EXPECT_NE(what.find("peer 3"), std::string::npos) << what;
    EXPECT_NE(what.find("deadbeef"), std::string::npos) << what;
  }
  // A blob of the right length but the wrong contents.
  std::vector<std::byte> wrong = a.address();
  for (auto& b : wrong) b = std::byte{0x5a};
  EXPECT_THROW(a.add_peer(4, wrong), FabricError);
  EXPECT_FALSE(a.has_peer(3));
  EXPECT_FALSE(a.has_peer(4));
}

// A provider this host does not have: the error names the provider and the
// node and says what -61 (FI_ENODATA) means here.
TEST(EndpointSetup, AMissingProviderIsAClearError) {
  EndpointOptions o;
  o.provider = "no-such-provider";
  o.node = "127.0.0.1";
  try {
    Endpoint e(o);
    ADD_FAILURE() << "an endpoint opened for provider no-such-provider";
  } catch (const FabricError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), -FI_ENODATA) << what;
    EXPECT_NE(what.find("'no-such-provider'"), std::string::npos) << what;
    EXPECT_NE(what.find("'127.0.0.1'"), std::string::npos) << what;
    EXPECT_NE(what.find("no provider of that name on this host offers them at that node"), std::string::npos) << what;
  }
}

TEST_P(EndpointPerProvider, MessageFromAnUnknownAddressIsDroppedAndCounted) {
  EndpointOptions o = options_for(GetParam());
  Endpoint b(o), stranger(o);
  stranger.add_peer(0, b.address());  // b never adds the stranger
  auto f = stranger.send(0, 9, "hello", 5);
  EXPECT_FALSE(b.receive(std::chrono::milliseconds(500)));
  // A large one too: its header is dropped before any buffer is allocated.
  const auto big = pattern(9, 9, 300 * kKiB);
  auto g = stranger.send(0, 10, big.data(), big.size());
  EXPECT_FALSE(b.receive(std::chrono::milliseconds(500)));
  EXPECT_EQ(b.stats().dropped_unknown_sender, 2u);
  EXPECT_EQ(b.stats().messages_received, 0u);
  // What an unanswered request's error appends names the loss.
  EXPECT_EQ(describe_losses(b.stats()), "2 messages from unknown senders dropped");
  EXPECT_EQ(describe_losses(stranger.stats()), "");
  (void)f.wait_for(std::chrono::seconds(1));
}

TEST_P(EndpointPerProvider, SendToAPeerNeverAddedIsInvalidArgument) {
  Endpoint a(options_for(GetParam()));
  const Status s = a.send(42, 0, "x", 1).get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("peer 42"), std::string::npos) << s.message();
}

TEST_P(EndpointPerProvider, AReplacedPeerIsReachedAtItsNewAddressInOrder) {
  EndpointOptions o = options_for(GetParam());
  Endpoint a(o);
  auto old_b = std::make_unique<Endpoint>(o);
  a.add_peer(1, old_b->address());
  old_b->add_peer(0, a.address());
  // Some messages each way first, so both sides' message numbers have moved on.
  for (uint64_t m = 0; m < 3; ++m) {
    const auto p = pattern(0, m, 1000);
    ASSERT_TRUE(a.send(1, m, p.data(), p.size()).get().ok());
    ASSERT_TRUE(old_b->receive(std::chrono::seconds(10)));
    ASSERT_TRUE(old_b->send(0, m, p.data(), p.size()).get().ok());
    ASSERT_TRUE(a.receive(std::chrono::seconds(10)));
  }
  old_b.reset();  // the peer's process ends
  Endpoint new_b(o);  // ... and a new one takes its rank
  EXPECT_THROW(a.replace_peer(7, new_b.address()), FabricError);  // never added
  a.replace_peer(1, new_b.address());
  new_b.add_peer(0, a.address());
  EXPECT_NE(a.peer_address_string(1).find(new_b.address_string()), std::string::npos) << a.peer_address_string(1);
  // Both directions, several messages, large ones too: every byte, in order.
  const std::vector<size_t> sizes = {1, 4 * kKiB, 300 * kKiB, 7};
  auto stream = [&](Endpoint& from, PeerId from_rank, Endpoint& to, PeerId to_rank, uint64_t first_tag) {
    for (uint64_t m = 0; m < sizes.size(); ++m) {
      const auto p = pattern(from_rank, first_tag + m, sizes[m]);
      ASSERT_TRUE(from.send(to_rank, first_tag + m, p.data(), p.size()).get().ok());
    }
    for (uint64_t m = 0; m < sizes.size(); ++m) {
      auto got = to.receive(std::chrono::seconds(20));
      ASSERT_TRUE(got) << "message " << m << " from rank " << from_rank << " did not arrive";
      EXPECT_EQ(got->from, from_rank);
      EXPECT_EQ(got->tag, first_tag + m);
      EXPECT_EQ(first_mismatch(got->data, from_rank, first_tag + m, sizes[m]), -1);
    }
  };
  stream(a, 0, new_b, 1, 100);
  stream(new_b, 1, a, 0, 200);
}

// A peer the control plane declared dead: a send retrying for it (the
// provider may answer FI_EAGAIN while it reconnects to the dead process)
// and every later one fail with the reason, long before the fabric
// timeout; replace_peer (its successor) lifts it.
TEST_P(EndpointPerProvider, APeerMarkedFailedEndsItsSendsUntilReplaced) {
  EndpointOptions o = options_for(GetParam());
  o.timeout = std::chrono::seconds(120);
  Endpoint a(o);
  auto old_b = std::make_unique<Endpoint>(o);
  a.add_peer(1, old_b->address());
  old_b->add_peer(0, a.address());
  const auto p = pattern(0, 0, 64 * kKiB);
  ASSERT_TRUE(a.send(1, 0, p.data(), p.size()).get().ok());
  ASSERT_TRUE(old_b->receive(std::chrono::seconds(10)));
  // The peer ends. Not under shm: there libfabric 1.17 faults in the next
  // post to the region of an endpoint this same process has closed (a
  // test-only case: another process's region stays mapped after it dies);
  // the peer stays up, unanswering, and the mark alone must stop the sends.
  if (GetParam() != std::string("shm")) old_b.reset();
  const std::string reason = "declared dead by the test";
  std::atomic<int> started{0};
  // Sends to the dead peer until one fails with the reason (one may also
  // end otherwise, broken pipe, or complete into the void, around the mark).
  auto sender = std::async(std::launch::async, [&] {
    for (;;) {
      ++started;
      const Status s = a.send(1, 1, p.data(), p.size()).get();
      if (!s.ok() && s.message().find(reason) != std::string::npos) return s;
    }
  });
  while (started == 0) std::this_thread::yield();  // it is in its first send, or past it
  a.mark_peer_failed(1, reason);
  ASSERT_EQ(sender.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a send to the failed peer held on";
  const Status ended = sender.get();
  EXPECT_EQ(ended.code(), StatusCode::kPeerError) << ended.to_string();
  EXPECT_NE(ended.message().find(reason), std::string::npos) << ended.to_string();
  const Status later = a.send(1, 2, "x", 1).get();
  EXPECT_EQ(later.code(), StatusCode::kPeerError);
  EXPECT_NE(later.message().find("peer 1"), std::string::npos) << later.to_string();
  EXPECT_NE(later.message().find(reason), std::string::npos) << later.to_string();
  a.mark_peer_failed(9, reason);  // never added: ignored
  // Its successor is reached again.
  Endpoint new_b(o);
  a.replace_peer(1, new_b.address());
  new_b.add_peer(0, a.address());
  ASSERT_TRUE(a.send(1, 3, p.data(), p.size()).get().ok());
  auto got = new_b.receive(std::chrono::seconds(20));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->tag, 3u);
  EXPECT_EQ(first_mismatch(got->data, 0, 0, p.size()), -1);
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointPerProvider, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) { return info.param == "shm" ? std::string("shm") : std::string("tcp_rxm"); });

TEST(EndpointAddress, TcpBindsTheLoopbackAddressItWasGiven) {
  Endpoint a(options_for("tcp;ofi_rxm"));
  const std::string s = a.address_string();
  EXPECT_NE(s.find("127.0.0.1:"), std::string::npos) << s;
}

}  // namespace
}  // namespace parafab::rdma
