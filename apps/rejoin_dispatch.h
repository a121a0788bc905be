// A worker hears that a server rejoined (a new process under a dead one's
// rank) on the scheduler client's I/O thread, the thread that also sends
// its heartbeats. Telling the KV client (KvClient::server_rejoined) takes
// the client's send lock, which a send in progress may hold for a long
// time (a large push under back-pressure): done on the I/O thread, that
// could starve the heartbeats until the scheduler declared this worker
// dead. So the notice is queued here and handled on a thread of its own,
// in the order the scheduler sent them; the I/O thread returns at once.
//
// A death is not queued: the endpoint marks the peer failed at once, so
// that a send retrying to it stops (and frees the send lock). Should a
// server die again while its rejoin waits in the queue, the rejoin's
// replace_peer would lift that mark: the dispatcher marks it again.
//
//   auto d = std::make_shared<RejoinDispatcher>(endpoint);
//   options.on_node_dead = [d](const NodeInfo& n, const std::string& why) { d->node_dead(n, why); };
//   options.on_node_rejoined = [d](const NodeInfo& n, const RestoredPushes& r) { d->server_rejoined(n, r); };
//   auto handle = d->attach([&kv](const NodeInfo& n, const RestoredPushes& r) { ... kv.server_rejoined ... });
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ps/cluster_map.h"
#include "ps/scheduler_client.h"
#include "rdma/endpoint.h"

namespace parafab::apps {

class RejoinDispatcher : public std::enable_shared_from_this<RejoinDispatcher> {
 public:
  // What a worker does with a notice: tell its KV client.
  using Target = std::function<void(const ps::NodeInfo&, const ps::RestoredPushes&)>;

  explicit RejoinDispatcher(rdma::Endpoint& endpoint);
  // Notices still queued are dropped: the node is going.
  ~RejoinDispatcher();
  RejoinDispatcher(const RejoinDispatcher&) = delete;
  RejoinDispatcher& operator=(const RejoinDispatcher&) = delete;

  // On the scheduler client's thread. Never blocks on the KV client.
  void node_dead(const ps::NodeInfo& node, const std::string& why);
  void server_rejoined(const ps::NodeInfo& node, const ps::RestoredPushes& restored);

  // Notices go to `target` (else straight to the endpoint: replace_peer)
  // until the returned handle goes; its release waits for a notice being
  // handled. The dispatcher must be owned by a shared_ptr.
  [[nodiscard]] std::shared_ptr<void> attach(Target target);
  // Notices handled so far (tests).
  uint64_t handled() const;

 private:
  struct Notice {
    ps::NodeInfo node;
    ps::RestoredPushes restored;
    uint64_t deaths_then = 0;  // deaths_ of this rank when it was queued
  };
  void run();
  void handle(const Notice& n);

  rdma::Endpoint& endpoint_;
  mutable std::mutex queue_mu_;  // queue_, deaths_, stopping_, handled_
  std::condition_variable queue_cv_;
  std::deque<Notice> queue_;
  struct Death {
    uint64_t count = 0;
    std::string reason;
  };
  std::map<uint32_t, Death> deaths_;  // by rank
  bool stopping_ = false;
  uint64_t handled_ = 0;
  std::mutex target_mu_;  // held while a notice is handled; guards target_
  Target target_;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace parafab::apps
