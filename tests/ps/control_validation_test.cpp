// The scheduler facing hostile or broken peers, spoken to in raw bytes over
// 127.0.0.1: garbage, an oversized length prefix, an out-of-range enum, a
// missing field, messages before registration, and bad messages from a
// registered node. Each gets an error reply (and a close where the stream
// or the peer cannot be trusted) and a counter; the scheduler keeps serving.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <optional>

#include "ps/control_channel.h"
#include "ps/job_token.h"
#include "ps/scheduler.h"
#include "ps/scheduler_client.h"

namespace parafab::ps {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr auto kWait = 20s;

// A blocking TCP client whose every read has a deadline (poll), so a test
// never hangs on a scheduler that fails to answer.
class RawConn {
 public:
  explicit RawConn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      throw std::runtime_error("raw connect failed");
    }
  }
  static std::unique_ptr<RawConn> adopt(int fd) { return std::unique_ptr<RawConn>(new RawConn(fd, 0)); }
  ~RawConn() { ::close(fd_); }

  void send_bytes(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("raw send failed");
      off += static_cast<size_t>(n);
    }
  }
  void send(const proto::Envelope& m) { send_bytes(ControlChannel::encode_frame(m)); }

  // The next frame, or nullopt at EOF. Throws on timeout.
  std::optional<proto::Envelope> read(std::chrono::milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    std::string header;
    if (!read_exact(4, deadline, header)) return std::nullopt;
    const uint32_t n = static_cast<uint8_t>(header[0]) | (static_cast<uint8_t>(header[1]) << 8) |
                       (static_cast<uint8_t>(header[2]) << 16) | (static_cast<uint32_t>(static_cast<uint8_t>(header[3])) << 24);
    std::string body;
    if (!read_exact(n, deadline, body)) throw std::runtime_error("EOF inside a frame");
    proto::Envelope m;
    if (!m.ParseFromString(body)) throw std::runtime_error("scheduler sent an unparsable frame");
    return m;
  }

  // Reads until EOF; returns the error frames seen on the way.
  std::vector<proto::Error> read_until_eof() {
    std::vector<proto::Error> errors;
    while (auto m = read()) {
      if (m->has_error()) errors.push_back(m->error());
    }
    return errors;
  }

 private:
  RawConn(int fd, int) : fd_(fd) {}
  bool read_exact(size_t n, Clock::time_point deadline, std::string& out) {
    out.resize(n);
    size_t got = 0;
    while (got < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw std::runtime_error("raw read timed out");
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r == 0) {
        if (got == 0) return false;
        throw std::runtime_error("EOF inside a frame");
      }
      if (r < 0) return false;  // reset by peer: as good as EOF here
      got += static_cast<size_t>(r);
    }
    return true;
  }
  int fd_ = -1;
};

SchedulerOptions options(const std::string& token) {
  SchedulerOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.token = JobToken(token);
  o.join_timeout = 60s;
  o.heartbeat_timeout = 30s;
  o.max_frame_bytes = 1 << 20;
  return o;
}

class ControlValidationTest : public ::testing::Test {
 protected:
  ControlValidationTest() : scheduler_(options("tok")) {
    run_ = std::async(std::launch::async, [this] { scheduler_.run(); });
  }
  ~ControlValidationTest() override {
    scheduler_.stop();
    if (run_.valid()) run_.wait_for(kWait);
  }

  // A raw connection that has read its challenge.
  std::pair<std::unique_ptr<RawConn>, proto::Challenge> connect() {
    auto c = std::make_unique<RawConn>(scheduler_.port());
    auto m = c->read();
    EXPECT_TRUE(m && m->has_challenge());
    return {std::move(c), m ? m->challenge() : proto::Challenge{}};
  }

  proto::Envelope good_register(const proto::Challenge& ch, const std::string& token, proto::Role role) {
    proto::Envelope m;
    proto::Register* r = m.mutable_register_();
    r->set_protocol_version(kControlProtocolVersion);
    r->set_role(role);
    r->set_host("raw-host");
    r->set_fabric_address("\x01\x02\x03\x04raw-address", 15);
    r->set_client_nonce(std::string(32, 'n'));
    const Mac mac = hmac_sha256(JobToken(token), register_mac_input(ch.job_id(), ch.nonce(), *r));
    r->set_mac(reinterpret_cast<const char*>(mac.data()), mac.size());
    return m;
  }

  // After the abuse: a real server and worker still join and finish.
  void expect_still_serving() {
    auto opts = [&](Role role, std::byte b) {
      SchedulerClientOptions o;
      o.port = scheduler_.port();
      o.token = JobToken("tok");
      o.role = role;
      o.host_name = "good";
      o.fabric_address = {b, std::byte{42}};
      o.heartbeat_interval = 100ms;
      return o;
    };
    SchedulerClient s(opts(Role::kServer, std::byte{1}));
    SchedulerClient w(opts(Role::kWorker, std::byte{2}));
    auto js = std::async(std::launch::async, [&] { s.join(kWait); });
    w.join(kWait);
    ASSERT_EQ(js.wait_for(kWait), std::future_status::ready);
    js.get();
    w.done();
    EXPECT_TRUE(s.wait_for_shutdown(kWait));
    ASSERT_EQ(run_.wait_for(kWait), std::future_status::ready);
    run_.get();
  }

  static bool mentions(const std::vector<proto::Error>& errors, proto::ErrorCode code, const std::string& text) {
    for (const auto& e : errors) {
      if (e.code() == code && e.text().find(text) != std::string::npos) return true;
    }
    return false;
  }

  Scheduler scheduler_;
  std::future<void> run_;
};

TEST_F(ControlValidationTest, GarbageFrameIsAnsweredAndClosed) {
  auto [c, ch] = connect();
  c->send_bytes(std::string("\x08\x00\x00\x00", 4) + std::string(8, '\xff'));  // an unfinished varint
  const auto errors = c->read_until_eof();
  EXPECT_TRUE(mentions(errors, proto::ERROR_MALFORMED, "not a control message"));
  EXPECT_EQ(scheduler_.stats().malformed_frames, 1u);
  expect_still_serving();
}

TEST_F(ControlValidationTest, OversizedLengthPrefixIsAnsweredAndClosed) {
  auto [c, ch] = connect();
  c->send_bytes(std::string("\xff\xff\xff\x7f", 4));
  const auto errors = c->read_until_eof();
  EXPECT_TRUE(mentions(errors, proto::ERROR_MALFORMED, "exceeds the control-plane limit"));
  EXPECT_EQ(scheduler_.stats().malformed_frames, 1u);
  expect_still_serving();
}

TEST_F(ControlValidationTest, OutOfRangeEnumAndMissingFieldsAreRefused) {
  {
    auto [c, ch] = connect();
    proto::Envelope m = good_register(ch, "tok", proto::ROLE_SERVER);
    m.mutable_register_()->set_role(static_cast<proto::Role>(7));
    c->send(m);
    EXPECT_TRUE(mentions(c->read_until_eof(), proto::ERROR_MALFORMED, "role = 7"));
  }
  {
    auto [c, ch] = connect();
    proto::Envelope m = good_register(ch, "tok", proto::ROLE_WORKER);
    m.mutable_register_()->clear_mac();
    c->send(m);
    EXPECT_TRUE(mentions(c->read_until_eof(), proto::ERROR_MALFORMED, "mac has 0 bytes"));
  }
  {
    auto [c, ch] = connect();
    proto::Envelope m = good_register(ch, "tok", proto::ROLE_WORKER);
    m.mutable_register_()->clear_fabric_address();
    c->send(m);
    EXPECT_TRUE(mentions(c->read_until_eof(), proto::ERROR_MALFORMED, "fabric_address has 0 bytes"));
  }
  {
    auto [c, ch] = connect();
    proto::Envelope m = good_register(ch, "tok", proto::ROLE_WORKER);
    m.mutable_register_()->set_host(std::string(300, 'h'));
    c->send(m);
    EXPECT_TRUE(mentions(c->read_until_eof(), proto::ERROR_MALFORMED, "host has 300 bytes"));
  }
  EXPECT_EQ(scheduler_.stats().invalid_messages, 4u);
  EXPECT_EQ(scheduler_.stats().joined, 0u);
  expect_still_serving();
}

TEST_F(ControlValidationTest, NothingButRegisterBeforeAuthentication) {
  {
    auto [c, ch] = connect();
    proto::Envelope m;
    m.mutable_barrier_request()->set_name("sneaky");
    c->send(m);
    EXPECT_TRUE(mentions(c->read_until_eof(), proto::ERROR_NOT_AUTHENTICATED, "got barrier_request"));
  }
  {
    auto [c, ch] = connect();
    c->send_bytes(std::string(4, '\0'));  // a valid, empty envelope
    EXPECT_TRUE(mentions(c->read_until_eof(), proto::ERROR_NOT_AUTHENTICATED, "empty envelope"));
  }
  {
    // A MAC made for another connection's nonce (a replay) is a bad token.
    auto [c1, ch1] = connect();
    auto [c2, ch2] = connect();
    c2->send(good_register(ch1, "tok", proto::ROLE_WORKER));
    EXPECT_TRUE(mentions(c2->read_until_eof(), proto::ERROR_BAD_TOKEN, "bad token"));
  }
  EXPECT_EQ(scheduler_.stats().unauthenticated_messages, 2u);
  EXPECT_EQ(scheduler_.stats().auth_failures, 1u);
  expect_still_serving();
}

TEST_F(ControlValidationTest, RegisteredNodesBadMessagesAreAnsweredAndCounted) {
  auto [c, ch] = connect();
  c->send(good_register(ch, "tok", proto::ROLE_SERVER));
  auto w = c->read();
  ASSERT_TRUE(w && w->has_welcome()) << (w ? w->DebugString() : "EOF");
  EXPECT_EQ(w->welcome().rank(), 0u);

  proto::Envelope long_name;
  long_name.mutable_barrier_request()->set_name(std::string(1000, 'b'));
  c->send(long_name);
  auto e1 = c->read();
  ASSERT_TRUE(e1 && e1->has_error());
  EXPECT_NE(e1->error().text().find("barrier name has 1000 bytes"), std::string::npos);

  proto::Envelope wrong_way;
  wrong_way.mutable_cluster_map();
  c->send(wrong_way);
  auto e2 = c->read();
  ASSERT_TRUE(e2 && e2->has_error());
  EXPECT_EQ(e2->error().code(), proto::ERROR_PROTOCOL);

  c->send(good_register(ch, "tok", proto::ROLE_SERVER));
  auto e3 = c->read();
  ASSERT_TRUE(e3 && e3->has_error());
  EXPECT_NE(e3->error().text().find("already registered"), std::string::npos);
  EXPECT_EQ(scheduler_.stats().invalid_messages, 3u);

  // Still registered: a worker joining completes the job and both get the map.
  SchedulerClientOptions o;
  o.port = scheduler_.port();
  o.token = JobToken("tok");
  o.role = Role::kWorker;
  o.host_name = "good";
  o.fabric_address = {std::byte{9}};
  SchedulerClient worker(o);
  const ClusterMap& map = worker.join(kWait);
  ASSERT_EQ(map.servers.size(), 1u);
  EXPECT_EQ(map.servers[0].host, "raw-host");
  auto m = c->read();
  ASSERT_TRUE(m && m->has_cluster_map());
  worker.done();
  EXPECT_TRUE(worker.wait_for_shutdown(kWait));
  // The raw server gets the Shutdown too, then EOF.
  bool shutdown = false;
  while (auto x = c->read()) shutdown = shutdown || x->has_shutdown();
  EXPECT_TRUE(shutdown);
  ASSERT_EQ(run_.wait_for(kWait), std::future_status::ready);
  run_.get();
}

// A registered node that keeps sending invalid messages is answered 64
// times, then told why and declared dead (its slot freed before the map):
// neither the answers queued for it nor the log grow without bound. The job
// still forms with good nodes.
TEST_F(ControlValidationTest, ANodeThatKeepsSendingInvalidMessagesIsClosed) {
  auto [c, ch] = connect();
  c->send(good_register(ch, "tok", proto::ROLE_SERVER));
  auto w = c->read();
  ASSERT_TRUE(w && w->has_welcome()) << (w ? w->DebugString() : "EOF");
  proto::Envelope wrong_way;
  wrong_way.mutable_cluster_map();
  // Exactly 65: frames sent after the one that closes it would lie unread at
  // the scheduler, whose close then resets the connection, and a reset
  // discards answers this end has not read yet (it did so in CI).
  for (int i = 0; i < 65; ++i) c->send(wrong_way);
  int errors = 0;
  std::string last;
  while (auto m = c->read()) {
    if (m->has_error()) {
      ++errors;
      last = m->error().text();
    }
  }
  EXPECT_EQ(errors, 65);  // 64 answers, then the reason for the close; then EOF
  EXPECT_NE(last.find("closing: 65 invalid messages (at most 64)"), std::string::npos) << last;
  EXPECT_EQ(scheduler_.stats().invalid_messages, 65u);
  expect_still_serving();
}

// The client checks the scheduler too: a "scheduler" that cannot prove it
// holds the job token (another job's, or an impostor) is refused.
TEST(ControlAuthTest, ClientRefusesASchedulerWithoutTheToken) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  const uint16_t port = ntohs(a.sin_port);

  auto fake = std::async(std::launch::async, [lfd] {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) throw std::runtime_error("no client came");
    auto c = RawConn::adopt(::accept(lfd, nullptr, nullptr));
    proto::Envelope hello;
    hello.mutable_challenge()->set_protocol_version(kControlProtocolVersion);
    hello.mutable_challenge()->set_job_id(77);
    hello.mutable_challenge()->set_nonce(std::string(32, 'x'));
    c->send(hello);
    auto reg = c->read();
    if (!reg || !reg->has_register_()) throw std::runtime_error("no register");
    // The impostor holds another token: its proof is wrong.
    const Mac proof = hmac_sha256(JobToken("impostor"), welcome_mac_input(77, std::string(32, 'x'),
                                                                          reg->register_().client_nonce(), 0, 0));
    proto::Envelope w;
    w.mutable_welcome()->set_job_id(77);
    w.mutable_welcome()->set_scheduler_mac(reinterpret_cast<const char*>(proof.data()), proof.size());
    c->send(w);
    c->read_until_eof();
  });
  SchedulerClientOptions o;
  o.port = port;
  o.token = JobToken("real");
  o.role = Role::kServer;
  o.host_name = "h";
  o.fabric_address = {std::byte{1}};
  SchedulerClient client(o);
  try {
    client.join(kWait);
    FAIL() << "joined an impostor scheduler";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove it holds this job's token"), std::string::npos) << e.what();
  }
  ASSERT_EQ(fake.wait_for(kWait), std::future_status::ready);
  fake.get();
  ::close(lfd);
}

}  // namespace
}  // namespace parafab::ps
