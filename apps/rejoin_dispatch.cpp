#include "apps/rejoin_dispatch.h"

#include <cstdio>
#include <exception>

namespace parafab::apps {

namespace {
std::string failed_reason(const std::string& why) { return "declared dead by the scheduler: " + why; }
}  // namespace

RejoinDispatcher::RejoinDispatcher(rdma::Endpoint& endpoint) : endpoint_(endpoint), thread_([this] { run(); }) {}

RejoinDispatcher::~RejoinDispatcher() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  thread_.join();
}

void RejoinDispatcher::node_dead(const ps::NodeInfo& node, const std::string& why) {
  // Sends to it fail at once from now on (a post retrying for it stops),
  // instead of holding the sender until the fabric timeout.
  endpoint_.mark_peer_failed(node.rank, failed_reason(why));
  std::lock_guard lock(queue_mu_);
  Death& d = deaths_[node.rank];
  ++d.count;
  d.reason = why;
}

void RejoinDispatcher::server_rejoined(const ps::NodeInfo& node, const ps::RestoredPushes& restored) {
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back(Notice{node, restored, deaths_[node.rank].count});
  }
  queue_cv_.notify_all();
}

std::shared_ptr<void> RejoinDispatcher::attach(Target target) {
  {
    std::lock_guard lock(target_mu_);
    target_ = std::move(target);
  }
  return std::shared_ptr<void>(nullptr, [self = shared_from_this()](void*) {
    std::lock_guard lock(self->target_mu_);
    self->target_ = nullptr;
  });
}

uint64_t RejoinDispatcher::handled() const {
  std::lock_guard lock(queue_mu_);
  return handled_;
}

void RejoinDispatcher::run() {
  for (;;) {
    Notice n;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      n = std::move(queue_.front());
      queue_.pop_front();
    }
    handle(n);
    std::lock_guard lock(queue_mu_);
    ++handled_;
  }
}

void RejoinDispatcher::handle(const Notice& n) {
  {
    std::lock_guard lock(target_mu_);
    try {
      if (target_) {
        target_(n.node, n.restored);
      } else {
        endpoint_.replace_peer(n.node.rank, n.node.fabric_address);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "server %u rejoined at an address this node cannot use: %s\n", n.node.role_rank, e.what());
    }
  }
  // Dead again since this rejoin was queued: replace_peer lifted the mark.
  bool dead_again = false;
  std::string why;
  {
    std::lock_guard lock(queue_mu_);
    const Death& d = deaths_[n.node.rank];
    dead_again = d.count != n.deaths_then;
    why = d.reason;
  }
  if (dead_again) endpoint_.mark_peer_failed(n.node.rank, failed_reason(why));
}

}  // namespace parafab::apps
