// `parafab server`: one parameter server of a job.
#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "apps/cluster_node.h"
#include "apps/commands.h"
#include "ps/server.h"

namespace parafab::apps {
namespace {

struct ServerFlags {
  ClusterFlags cluster;
  std::string consistency = "bsp";
};

int run_server(ServerFlags f) {
  resolve_cluster_flags(f.cluster);
  ps::ServerOptions so;
  so.consistency = ps::ConsistencyModel::parse(f.consistency);
  ps::Server* server = nullptr;
  std::atomic<bool> ready{false};
  ClusterNode node = join_cluster(f.cluster, ps::Role::kServer, [&](const ps::NodeInfo& n, const std::string& why) {
    std::fprintf(stderr, "%s\n", fmt::format("server: {} {} (rank {}, {}) is dead: {}", ps::to_string(n.role),
                                             n.role_rank, n.rank, n.host, why).c_str());
    if (n.role == ps::Role::kWorker && ready) server->remove_worker_later(n.role_rank);
  });
  ps::Server srv(*node.endpoint, *node.map, node.role_rank, so);
  server = &srv;
  ready = true;
  std::fprintf(stderr, "server %u: serving %zu tables under %s\n", node.role_rank, node.map->tables.size(),
               so.consistency.to_string().c_str());
  std::atomic<bool> stop{false};
  std::string failure;
  std::thread watcher([&] {
    try {
      while (!node.client->wait_for_shutdown(std::chrono::milliseconds(200))) {
        if (stop) return;
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    stop = true;
  });
  srv.serve(stop);
  watcher.join();
  const ps::ServerStats st = srv.stats();
  std::fprintf(stderr, "%s\n",
               fmt::format("server {}: {} pushes ({} keys), {} pulls ({} keys), {} clocks, {} parked, {} bad "
                           "messages{}, {} non-finite gradients refused; max staleness {}",
                           node.role_rank, st.pushes, st.keys_pushed, st.pulls, st.keys_pulled, st.clocks, st.parked,
                           st.bad_messages, st.last_error.empty() ? "" : " (last: " + st.last_error + ")",
                           st.refused_non_finite, st.staleness.max_seen())
                   .c_str());
  if (!failure.empty()) throw std::runtime_error("lost the scheduler: " + failure);
  std::fprintf(stderr, "server %u: shutdown: %s\n", node.role_rank, node.client->shutdown_reason().c_str());
  return 0;
}

}  // namespace

void add_server_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<ServerFlags>();
  CLI::App* cmd = root.add_subcommand("server", "Run one parameter server of a job (joins through the scheduler)");
  add_cluster_flags(cmd, f->cluster);
  cmd->add_option("--consistency", f->consistency, "bsp, ssp:S (bounded staleness S) or asp")->capture_default_str();
  cmd->callback([f, &ctx] { ctx.exit_code = run_guarded("server", [&] { return run_server(*f); }); });
}

}  // namespace parafab::apps
