#include "apps/cluster_node.h"

#include <fmt/format.h>

#include <cstdio>

namespace parafab::apps {

ClusterNode join_cluster(const ClusterFlags& flags, ps::Role role,
                         std::function<void(const ps::NodeInfo&, const std::string&)> on_node_dead,
                         std::vector<ps::TableSchema> tables, std::string resume_dir) {
  ClusterNode node;
  node.endpoint = std::make_unique<rdma::Endpoint>(endpoint_options(flags));
  const HostPort sched = scheduler_address(flags);
  ps::SchedulerClientOptions co;
  co.host = sched.host;
  co.port = *sched.port;  // required
  co.token = ps::JobToken::from_file(flags.token_file);
  co.role = role;
  co.host_name = this_host_name();
  co.fabric_address = node.endpoint->address();
  // Deaths mark the peer failed at once; a worker's notices of rejoined
  // servers are handled on the dispatcher's thread (rejoin_dispatch.h).
  // Only workers talk to servers: a server has nothing to update.
  node.rejoins = std::make_shared<RejoinDispatcher>(*node.endpoint);
  co.on_node_dead = [d = node.rejoins, user = std::move(on_node_dead)](const ps::NodeInfo& n, const std::string& why) {
    d->node_dead(n, why);
    if (user) user(n, why);
  };
  if (role == ps::Role::kWorker) {
    co.on_node_rejoined = [d = node.rejoins](const ps::NodeInfo& n, const ps::RestoredPushes& r) {
      d->server_rejoined(n, r);
    };
  }
  co.requested_role_rank = flags.role_rank;
  co.tables = std::move(tables);
  co.resume_dir = std::move(resume_dir);
  node.client = std::make_unique<ps::SchedulerClient>(std::move(co));
  node.map = &node.client->join(join_timeout(flags));
  node.rank = node.client->rank();
  node.role_rank = node.client->role_rank();
  // Servers answer workers; workers talk to servers.
  const auto& peers = role == ps::Role::kServer ? node.map->workers : node.map->servers;
  for (const ps::NodeInfo& p : peers) node.endpoint->add_peer(p.rank, p.fabric_address);
  std::fprintf(stderr, "%s\n",
               fmt::format("{} {} (rank {}) joined job {:016x}: {} servers, {} workers, fabric {} at {}",
                           ps::to_string(role), node.role_rank, node.rank, node.map->job_id, node.map->num_servers(),
                           node.map->num_workers(), node.endpoint->provider().provider,
                           node.endpoint->address_string())
                   .c_str());
  // A server back in a running job: the others passed this barrier long
  // ago. It says rejoin_ready itself, once its checkpoint is restored.
  if (!node.map->rejoin) node.client->barrier("fabric-ready", join_timeout(flags));
  return node;
}

std::shared_ptr<void> ClusterNode::attach(worker::KvClient& kv) {
  return rejoins->attach([&kv](const ps::NodeInfo& n, const ps::RestoredPushes& r) {
    const uint32_t w = kv.worker_index();
    kv.server_rejoined(n.rank, n.fabric_address, r.last_push_ids.at(w), r.worker_bytes_pushed.at(w));
  });
}

}  // namespace parafab::apps
