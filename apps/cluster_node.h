// Joining a job as a server or worker: open the fabric endpoint, register
// with the scheduler (its address blob travels in the registration), get
// the cluster map, add the peers this role talks to, and meet the others at
// a barrier so nobody sends before every endpoint knows its peers.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "apps/cluster_flags.h"
#include "apps/rejoin_dispatch.h"
#include "ps/scheduler_client.h"
#include "rdma/endpoint.h"
#include "worker/kv_client.h"

namespace parafab::apps {

struct ClusterNode {
  std::unique_ptr<rdma::Endpoint> endpoint;
  std::unique_ptr<ps::SchedulerClient> client;
  const ps::ClusterMap* map = nullptr;
  uint32_t rank = 0;
  uint32_t role_rank = 0;
  // A worker's notices of rejoined servers, handled off the scheduler
  // client's thread (made in join_cluster, shared with its callbacks).
  std::shared_ptr<RejoinDispatcher> rejoins;

  // A worker's KV client hears of rejoined servers until the returned
  // handle goes (declare it after the client, so it goes first).
  [[nodiscard]] std::shared_ptr<void> attach(worker::KvClient& kv);
};

// Throws with the scheduler's or the fabric's reason.
// `tables`: a worker's proposal of the job's tables, `resume_dir` the
// checkpoint set its servers load (see SchedulerClientOptions).
ClusterNode join_cluster(const ClusterFlags& flags, ps::Role role,
                         std::function<void(const ps::NodeInfo&, const std::string&)> on_node_dead = {},
                         std::vector<ps::TableSchema> tables = {}, std::string resume_dir = {});

}  // namespace parafab::apps
