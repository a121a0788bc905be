// A real second process as the peer: messages and RMA across processes,
// then the peer is killed (SIGKILL) in the middle of a large transfer and
// every pending and later operation towards it must fail within the
// timeout, never hang.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "rdma/endpoint.h"
#include "tests/rdma/endpoint_test_util.h"

extern char** environ;

namespace parafab::rdma {
namespace {

using Clock = std::chrono::steady_clock;
using testing::options_for;
using testing::pattern;
using testing::pattern_byte;
using testing::from_hex;
using testing::to_hex;


// The child with pipes to its stdin and stdout; killed and reaped on scope exit.
class PeerProcess {
 public:
  explicit PeerProcess(const std::string& provider) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::string bin = PARAFAB_RDMA_PEER_BIN;
    char* argv[] = {bin.data(), const_cast<char*>(provider.c_str()), nullptr};
    if (posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv, environ) != 0) {
      throw std::runtime_error("cannot start " + bin);
    }
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_child_ = fdopen(in[1], "w");
    from_child_ = fdopen(out[0], "r");
  }
  ~PeerProcess() {
    kill_now();
    if (to_child_) fclose(to_child_);
    if (from_child_) fclose(from_child_);
  }
  // One line from the child's stdout (the child prints as soon as it starts;
  // ctest's TIMEOUT bounds a child that never does).
  std::string read_line() {
    char buf[4096];
    if (!fgets(buf, sizeof buf, from_child_)) return {};
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void write_line(const std::string& s) {
    std::fprintf(to_child_, "%s\n", s.c_str());
    std::fflush(to_child_);
  }
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      remove_shm_regions(pid_);
      pid_ = -1;
    }
  }

 private:
  // shm names its region file after the pid ("/dev/shm/<pid>:0:0"); a
  // process killed by SIGKILL cannot unlink it, so the test does, and
  // repeated runs leave nothing behind.
  static void remove_shm_regions(pid_t pid) {
    const std::string prefix = std::to_string(pid) + ":";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
    }
  }

  pid_t pid_ = -1;
  FILE* to_child_ = nullptr;
  FILE* from_child_ = nullptr;
};

class PeerDeath : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerDeath, AcrossProcessesThenKilledMidTransferEveryOperationFailsWithinTheTimeout) {
  constexpr auto kTimeout = std::chrono::milliseconds(2000);
  EndpointOptions o = options_for(GetParam());
  o.timeout = kTimeout;
  Endpoint ep(o);
  PeerProcess child(GetParam());
  const std::string addr = child.read_line();
  const std::string key_hex = child.read_line();
  ASSERT_FALSE(addr.empty()) << "the peer process printed no address";
  ep.add_peer(1, from_hex(addr));
  child.write_line(to_hex(ep.address()));
  ASSERT_EQ(child.read_line(), "ready") << "the peer process did not add our address";

  // Alive: an echo of a chunked message, and an RMA read of its region.
  const auto msg = pattern(0, 1, 300 * 1024 + 1);
  Status s = ep.send(1, 5, msg.data(), msg.size()).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto echo = ep.receive(std::chrono::seconds(20));
  ASSERT_TRUE(echo) << "no echo from the peer process";
  EXPECT_EQ(testing::first_mismatch(echo->data, 0, 1, msg.size()), -1);
  const RemoteKey key = *RemoteKey::decode(from_hex(key_hex));
  if (ep.supports_rma()) {
    std::vector<std::byte> got(4096);
    s = ep.read(1, got.data(), got.size(), key, 1000).get();
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], pattern_byte(1, 0, 1000 + i)) << i;
  }

  // Killed in the middle of a large transfer.
  const auto big = pattern(0, 2, 256u << 20);
  auto pending = ep.send(1, 6, big.data(), big.size());
  child.kill_now();
  const auto t0 = Clock::now();
  ASSERT_EQ(pending.wait_for(kTimeout + std::chrono::seconds(3)), std::future_status::ready)
      << "a send to a killed peer neither completed nor failed";
  s = pending.get();
  // The send may have been handed to the kernel before the kill; it must
  // not hang either way. Later operations must fail.
  std::printf("pending send after kill: %s\n", s.to_string().c_str());

  auto later = ep.send(1, 7, big.data(), 4 << 20);
  ASSERT_EQ(later.wait_for(kTimeout + std::chrono::seconds(3)), std::future_status::ready);
  s = later.get();
  EXPECT_FALSE(s.ok()) << "a 4 MiB send to a dead peer reported success";
  EXPECT_NE(s.message().find("peer 1"), std::string::npos) << s.to_string();
  if (ep.supports_rma()) {
    std::vector<std::byte> got(1 << 20);
    auto r = ep.read(1, got.data(), got.size(), key, 0);
    ASSERT_EQ(r.wait_for(kTimeout + std::chrono::seconds(3)), std::future_status::ready);
    s = r.get();
    EXPECT_FALSE(s.ok()) << "an RMA read from a dead peer reported success";
  }
  EXPECT_LT(Clock::now() - t0, 3 * (kTimeout + std::chrono::seconds(3)));
}

// The control plane declares a killed peer dead (Endpoint::mark_peer_failed):
// what was in flight with it fails at once with the reason, not at the
// timeout (a worker's reply loop once waited the whole timeout on a send
// posted to a server just before it was killed).
TEST_P(PeerDeath, AKilledPeersOperationsInFlightFailWhenItIsDeclaredDead) {
  constexpr auto kTimeout = std::chrono::seconds(120);
  // Declared before the endpoint: the failed send stays with the provider
  // until the endpoint closes, and its buffer with it.
  const auto big = pattern(0, 2, 256u << 20);
  EndpointOptions o = options_for(GetParam());
  o.timeout = kTimeout;
  Endpoint ep(o);
  PeerProcess child(GetParam());
  const std::string addr = child.read_line();
  ASSERT_FALSE(child.read_line().empty());  // its region's key, unused here
  ASSERT_FALSE(addr.empty()) << "the peer process printed no address";
  ep.add_peer(1, from_hex(addr));
  child.write_line(to_hex(ep.address()));
  ASSERT_EQ(child.read_line(), "ready") << "the peer process did not add our address";
  auto pending = ep.send(1, 6, big.data(), big.size());
  child.kill_now();
  const std::string reason = "declared dead by the test";
  ep.mark_peer_failed(1, reason);
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a send in flight to a peer declared dead waited for the " << kTimeout.count() << " s timeout";
  const Status s = pending.get();
  EXPECT_EQ(s.code(), StatusCode::kPeerError) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(RealProcess, PeerDeath, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) { return info.param == "shm" ? std::string("shm") : std::string("tcp_rxm"); });

TEST(PeerDeath, APeerThatNeverExistedFailsWithinTheTimeout) {
  EndpointOptions o = options_for("tcp;ofi_rxm");
  o.timeout = std::chrono::milliseconds(1500);
  Endpoint a(o);
  std::vector<std::byte> gone;
  {
    Endpoint b(o);
    gone = b.address();
  }
  a.add_peer(1, gone);
  const auto data = pattern(0, 0, 1 << 20);
  auto f = a.send(1, 0, data.data(), data.size());
  ASSERT_EQ(f.wait_for(std::chrono::seconds(6)), std::future_status::ready);
  const Status s = f.get();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("peer 1"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace parafab::rdma
