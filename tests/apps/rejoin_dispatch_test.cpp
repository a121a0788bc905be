// RejoinDispatcher (apps/rejoin_dispatch.h) over real tcp endpoints on
// loopback: a notice that a server rejoined is handed over without waiting
// for its handler (the scheduler client's thread must go back to its
// heartbeats), notices are handled in order, and a server declared dead
// again while its rejoin waited stays failed.
#include "apps/rejoin_dispatch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace parafab::apps {
namespace {

using namespace std::chrono_literals;

rdma::EndpointOptions loopback() {
  rdma::EndpointOptions o;
  o.provider = "tcp;ofi_rxm";
  o.node = "127.0.0.1";
  o.timeout = std::chrono::seconds(10);
  return o;
}

ps::NodeInfo server(uint32_t rank, const rdma::Endpoint& at) {
  ps::NodeInfo n;
  n.role = ps::Role::kServer;
  n.rank = rank;
  n.role_rank = rank;
  n.fabric_address = at.address();
  return n;
}

// Polls `done` (a state the dispatcher's thread reaches) for up to 10 s.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

class RejoinDispatch : public ::testing::Test {
 protected:
  rdma::Endpoint worker_{loopback()}, old_{loopback()}, new_{loopback()};
  static constexpr rdma::PeerId kServer = 1;
  void SetUp() override {
    worker_.add_peer(kServer, old_.address());
    new_.add_peer(0, worker_.address());  // the new process knows the worker (the map)
  }
  rdma::Status send_to_server() {
    const char byte = 7;
    return worker_.send(kServer, 3, &byte, 1).get();
  }
};

TEST_F(RejoinDispatch, ANoticeIsHandedOverWithoutWaitingForItsHandlerAndHandledInOrder) {
  auto d = std::make_shared<RejoinDispatcher>(worker_);
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::vector<uint64_t> seen;  // restored last push ids, in the order handled
  auto handle = d->attach([&](const ps::NodeInfo& n, const ps::RestoredPushes& r) {
    open.wait();  // a KV client whose send lock is held by a long send
    worker_.replace_peer(n.rank, n.fabric_address);
    seen.push_back(r.last_push_ids.at(0));
  });
  d->node_dead(server(kServer, old_), "no heartbeat");
  // Sends to the dead server fail at once, naming why.
  const rdma::Status dead = send_to_server();
  EXPECT_FALSE(dead.ok());
  EXPECT_NE(dead.to_string().find("declared dead by the scheduler: no heartbeat"), std::string::npos) << dead.to_string();
  // Both notices return while the handler is stuck on the first.
  auto notify = std::async(std::launch::async, [&] {
    d->server_rejoined(server(kServer, new_), ps::RestoredPushes{{11}, {0}});
    d->server_rejoined(server(kServer, new_), ps::RestoredPushes{{12}, {0}});
  });
  ASSERT_EQ(notify.wait_for(10s), std::future_status::ready) << "server_rejoined waited for its handler";
  EXPECT_EQ(d->handled(), 0u);
  gate.set_value();
  ASSERT_TRUE(eventually([&] { return d->handled() == 2; }));
  EXPECT_EQ(seen, (std::vector<uint64_t>{11, 12}));
  // The peer is the new process now.
  EXPECT_TRUE(send_to_server().ok());
  auto m = new_.receive(10s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->tag, 3u);
}

TEST_F(RejoinDispatch, AServerDeadAgainWhileItsRejoinWaitedStaysFailed) {
  auto d = std::make_shared<RejoinDispatcher>(worker_);
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  auto handle = d->attach([&](const ps::NodeInfo& n, const ps::RestoredPushes&) {
    open.wait();
    worker_.replace_peer(n.rank, n.fabric_address);  // lifts the failed mark
  });
  d->node_dead(server(kServer, old_), "no heartbeat");
  d->server_rejoined(server(kServer, new_), ps::RestoredPushes{{0}, {0}});
  d->node_dead(server(kServer, new_), "connection lost");  // before the rejoin is handled
  gate.set_value();
  ASSERT_TRUE(eventually([&] { return d->handled() == 1; }));
  const rdma::Status s = send_to_server();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("declared dead by the scheduler: connection lost"), std::string::npos) << s.to_string();
}

// Without a target (no KV client attached yet, or detached) the endpoint
// itself takes the new address.
TEST_F(RejoinDispatch, WithoutATargetTheEndpointTakesTheNewAddress) {
  auto d = std::make_shared<RejoinDispatcher>(worker_);
  d->node_dead(server(kServer, old_), "no heartbeat");
  d->server_rejoined(server(kServer, new_), ps::RestoredPushes{{0}, {0}});
  ASSERT_TRUE(eventually([&] { return d->handled() == 1; }));
  EXPECT_TRUE(send_to_server().ok());
  auto m = new_.receive(10s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->from, 0u);
}

}  // namespace
}  // namespace parafab::apps
