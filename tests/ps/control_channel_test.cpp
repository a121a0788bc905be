// ControlChannel against a raw TCP peer that connects and never reads: once
// the socket's buffers are full a write stays pending, and neither close()
// nor a frame sent with send_and_close may leave that write (and so the
// io_context's run()) alive for good.
#include "ps/control_channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace parafab::ps {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

struct StuckPeer {
  asio::io_context io;
  tcp::socket peer{io};  // connected, never read
  std::shared_ptr<ControlChannel> channel;
  std::atomic<int> closed{0};
  ChannelClosed::Cause cause = ChannelClosed::Cause::kPeer;

  explicit StuckPeer(std::chrono::milliseconds flush_timeout) {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    peer.connect(acceptor.local_endpoint());
    channel = std::make_shared<ControlChannel>(acceptor.accept(), kMaxControlFrameBytes, flush_timeout);
    channel->start({.on_message = [](proto::Envelope&) {},
                    .on_closed = [this](const ChannelClosed& c) {
                      cause = c.cause;
                      ++closed;
                    }});
  }

  // 64 frames of 1 MiB: far more than loopback's socket buffers hold.
  void fill() {
    proto::Envelope big;
    big.mutable_error()->set_text(std::string(1 << 20, 'x'));
    for (int i = 0; i < 64; ++i) channel->send(big);
  }

  // Until the peer's receive buffer holds at least 32 KiB, so the channel's
  // write is blocked on a full socket (the peer reads nothing).
  bool wait_until_blocked() {
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < give_up) {
      boost::system::error_code ec;
      if (peer.available(ec) >= (32u << 10)) return true;
      std::this_thread::yield();
    }
    return false;
  }
};

// run() on a thread of its own; true when it returns within `limit`
// (otherwise the io_context is stopped, so that the test ends either way).
bool runs_out(StuckPeer& s, const std::function<void()>& then, std::chrono::seconds limit) {
  auto done = std::async(std::launch::async, [&] { s.io.run(); });
  EXPECT_TRUE(s.wait_until_blocked()) << "the channel's writes never filled the peer's buffer";
  then();
  const bool returned = done.wait_for(limit) == std::future_status::ready;
  if (!returned) s.io.stop();
  done.get();
  return returned;
}

TEST(ControlChannel, CloseEndsAWriteThePeerNeverReads) {
  StuckPeer s(ControlChannel::kFlushTimeout);
  s.fill();
  EXPECT_TRUE(runs_out(s, [&] { s.channel->close(); }, 10s)) << "run() still busy with the channel's write";
  EXPECT_EQ(s.closed.load(), 1);
  EXPECT_EQ(s.cause, ChannelClosed::Cause::kLocal);
}

TEST(ControlChannel, AFrameSentToCloseGivesUpAtTheFlushTimeout) {
  StuckPeer s(200ms);
  s.fill();
  proto::Envelope bye;
  bye.mutable_shutdown();
  EXPECT_TRUE(runs_out(s, [&] { s.channel->send_and_close(bye); }, 10s)) << "run() still busy after the flush timeout";
  EXPECT_EQ(s.closed.load(), 1);
}

// A peer that reads gets every frame and the last one before the close.
TEST(ControlChannel, AFrameSentToCloseReachesAPeerThatReads) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket peer(io);
  peer.connect(acceptor.local_endpoint());
  auto channel = std::make_shared<ControlChannel>(acceptor.accept(), kMaxControlFrameBytes, 200ms);
  channel->start({});
  proto::Envelope bye;
  bye.mutable_shutdown();
  channel->send_and_close(bye);
  io.run();
  std::string got(64, '\0');
  boost::system::error_code ec;
  const size_t n = asio::read(peer, asio::buffer(got), ec);
  EXPECT_EQ(ec, asio::error::eof);
  EXPECT_EQ(got.substr(0, n), ControlChannel::encode_frame(bye));
}

}  // namespace
}  // namespace parafab::ps
