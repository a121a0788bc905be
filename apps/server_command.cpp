// `parafab server`: one parameter server of a job.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "apps/cluster_flags.h"
#include "apps/cluster_node.h"
#include "apps/commands.h"
#include "apps/signal_pipe.h"
#include "ps/checkpoint.h"
#include "ps/server.h"

namespace parafab::apps {
namespace {

struct ServerFlags {
  ClusterFlags cluster;
  std::string consistency = "bsp";
  CheckpointFlags checkpoints;
  bool recover = false;
  unsigned apply_threads = 0;
  uint32_t drop_push_every = 0;
};

// Loads this server's shard of a checkpoint set: the one the scheduler
// found for the job (the map's resume files and clock), or, with --recover
// alone, the newest complete set in `dir`.
void restore_from(ps::Server& srv, const ps::ClusterMap& map, const std::string& dir, uint32_t index) {
  std::string path;
  int64_t clock = 0;
  if (!map.resume_paths.empty()) {
    path = map.resume_paths.at(index);
    clock = map.resume_clock;
  } else {
    const ps::CheckpointSet set = ps::find_checkpoint_set(dir, map.num_servers());
    for (const std::string& why : set.refused) std::fprintf(stderr, "server %u: passed over %s\n", index, why.c_str());
    path = set.paths.at(index);
    clock = set.clock;
  }
  const ps::ShardCheckpoint c = ps::read_checkpoint(path);
  srv.restore(c, path, clock);
  size_t keys = 0;
  for (const auto& t : c.sparse) keys += t.keys.size();
  std::fprintf(stderr, "%s\n",
               fmt::format("server {}: restored from {} ({:.1f} MB, {} sparse keys, {} dense shards, minimum worker "
                           "clock {}, {} gradient bytes pushed into it)",
                           index, path, c.bytes / 1e6, keys, c.dense.size(), c.min_clock, c.bytes_pushed)
                   .c_str());
}

// A server rejoining a running job under its rank: its own newest
// checkpoint (the one before when that is damaged), with its workers'
// clocks as they were; the workers then send theirs.
void restore_own(ps::Server& srv, const std::string& dir, uint32_t index, uint32_t servers) {
  std::vector<std::string> refused;
  const auto found = ps::read_server_checkpoints(dir, index, servers, refused, ps::CheckpointRead::kNewestWhole);
  for (const std::string& why : refused) std::fprintf(stderr, "server %u: passed over %s\n", index, why.c_str());
  if (found.empty()) {
    throw ps::CheckpointError("rejoining the job needs this server's checkpoint: " +
                              (refused.empty() ? ps::checkpoint_path(dir, index, servers) + ": none there"
                                               : refused.front()));
  }
  const auto& [path, c] = found.front();
  srv.restore(c, path, ps::Server::kCheckpointClocks);
  std::fprintf(stderr, "%s\n",
               fmt::format("server {}: rejoined the running job, restored from {} ({:.1f} MB, minimum worker clock "
                           "{}, {} gradient bytes pushed into it); the updates since then are lost",
                           index, path, c.bytes / 1e6, c.min_clock, c.bytes_pushed)
                   .c_str());
}

int run_server(ServerFlags f) {
  resolve_cluster_flags(f.cluster);
  ps::ServerOptions so;
  so.consistency = ps::ConsistencyModel::parse(f.consistency);
  so.apply_threads = f.apply_threads;
  so.drop_push_every = f.drop_push_every;
  if (f.recover && f.checkpoints.dir.empty()) throw std::invalid_argument("--recover needs --checkpoint-dir (where the checkpoint is)");
  f.checkpoints.validate();
  if (!f.checkpoints.dir.empty()) std::filesystem::create_directories(f.checkpoints.dir);
  ps::Server* server = nullptr;
  std::atomic<bool> ready{false};
  ClusterNode node = join_cluster(f.cluster, ps::Role::kServer, [&](const ps::NodeInfo& n, const std::string& why) {
    std::fprintf(stderr, "%s\n", fmt::format("server: {} {} (rank {}, {}) is dead: {}", ps::to_string(n.role),
                                             n.role_rank, n.rank, n.host, why).c_str());
    if (n.role == ps::Role::kWorker && ready) server->remove_worker_later(n.role_rank);
  });
  if (!f.checkpoints.dir.empty()) {
    so.checkpoint_path = ps::checkpoint_path(f.checkpoints.dir, node.role_rank, node.map->num_servers());
    so.checkpoint_interval = std::chrono::milliseconds(static_cast<int64_t>(f.checkpoints.interval_s * 1000));
    so.checkpoint_clocks = f.checkpoints.clocks;
  }
  ps::Server srv(*node.endpoint, *node.map, node.role_rank, so);
  // The job's workers asked to resume (train --resume DIR), or this server
  // was started to recover its own last checkpoint.
  if (node.map->rejoin) {
    if (f.checkpoints.dir.empty()) {
      throw std::invalid_argument("server " + std::to_string(node.role_rank) +
                                  " rejoins a running job: it needs --checkpoint-dir (its last checkpoint)");
    }
    restore_own(srv, f.checkpoints.dir, node.role_rank, node.map->num_servers());
    // Its endpoint knows the workers and its shard is back: they may send
    // to it, and learn what it holds of their pushes.
    node.client->rejoin_ready(ps::RestoredPushes{srv.last_push_ids(), srv.worker_bytes_pushed()});
  } else if (!node.map->resume_dir.empty() || f.recover) {
    // A resumed job's map names the files; --recover alone finds its set in --checkpoint-dir.
    restore_from(srv, *node.map, f.checkpoints.dir, node.role_rank);
  }
  server = &srv;
  ready = true;
  // Workers declared dead before now (a server that rejoined hears of them
  // while it joins): they leave the SSP minimum.
  for (const uint32_t r : node.client->dead_ranks()) {
    if (r >= node.map->num_servers()) srv.remove_worker_later(r - node.map->num_servers());
  }
  std::fprintf(stderr, "server %u: serving %zu tables under %s\n", node.role_rank, node.map->tables.size(),
               so.consistency.to_string().c_str());
  std::atomic<bool> stop{false};
  std::string failure;
  // SIGTERM or SIGINT (launch stopping the job, the end of a Slurm step):
  // stop between two messages, write the final checkpoint, print the
  // counts, and exit 128+N.
  SignalPipe signals({SIGTERM, SIGINT});
  int stopped_by = 0;
  std::thread watcher([&] {
    try {
      while (!node.client->wait_for_shutdown(std::chrono::milliseconds(200))) {
        if (stop) return;
        for (const int s : signals.take()) stopped_by = s;
        if (stopped_by != 0) break;
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
                           "messages{}, {} non-finite gradients refused, {} retried pushes answered without applying "
                           "them again, {} retried clocks answered, {} pushes and clocks that arrived late (sent "
                           "again after a loss){}; max staleness {}",
                           node.role_rank, st.pushes, st.keys_pushed, st.pulls, st.keys_pulled, st.clocks, st.parked,
                           st.bad_messages, st.last_error.empty() ? "" : " (last: " + st.last_error + ")",
                           st.refused_non_finite, st.duplicate_pushes, st.duplicate_clocks, st.late_requests,
                           so.consistency.kind == ps::ConsistencyModel::Kind::kBsp
                               ? fmt::format(", {} BSP rounds applied as one step ({} before every worker ended "
                                             "them)",
                                             st.rounds_applied, st.rounds_applied_early)
                               : std::string(),
                           st.staleness.max_seen())
                   .c_str());
  if (st.pushes_dropped > 0) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("server {}: fault injection: {} pushes dropped (--drop-pushes-every {})", node.role_rank,
                             st.pushes_dropped, so.drop_push_every)
                     .c_str());
  }
  // What the transport lost: a reply that never got out, a request that
  // never came in (the reasons a worker's request goes unanswered).
  const std::string losses = rdma::describe_losses(node.endpoint->stats());
  if (st.reply_failures > 0 || !losses.empty()) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("server {}: transport: {} replies not delivered{}{}{}", node.role_rank, st.reply_failures,
                             st.last_reply_failure.empty() ? "" : " (last: " + st.last_reply_failure + ")",
                             losses.empty() ? "" : "; ", losses)
                     .c_str());
  }
  // With checkpoints, what a restart from one of them would lose: the bytes
  // since it (checkpoint.h).
  if (!so.checkpoint_path.empty()) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("server {}: {} gradient bytes applied since the job began ({} before this run's restore)",
                             node.role_rank, st.bytes_pushed_restored + st.bytes_pushed, st.bytes_pushed_restored)
                     .c_str());
  }
  if (st.checkpoints > 0) {
    std::fprintf(stderr, "%s\n",
                 fmt::format("server {}: {} checkpoints to {}, the last {:.1f} MB in {:.3f} s", node.role_rank,
                             st.checkpoints, so.checkpoint_path, st.checkpoint_bytes / 1e6, st.checkpoint_seconds)
                     .c_str());
  }
  if (stopped_by != 0) {
    std::fprintf(stderr, "server %u: stopped by signal %d (%s)\n", node.role_rank, stopped_by, strsignal(stopped_by));
    return 128 + stopped_by;
  }
  if (!failure.empty()) throw std::runtime_error("lost the scheduler: " + failure);
  std::fprintf(stderr, "server %u: shutdown: %s\n", node.role_rank, node.client->shutdown_reason().c_str());
  return 0;
}

}  // namespace

void add_server_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<ServerFlags>();
  CLI::App* cmd = root.add_subcommand("server", "Run one parameter server of a job (joins through the scheduler)");
  add_cluster_flags(cmd, f->cluster);
  cmd->add_option("--consistency", f->consistency, kConsistencyHelp)->capture_default_str();
  cmd->add_option("--apply-threads", f->apply_threads,
                  "Threads that apply one large push (or answer one large sparse pull) side by side, this server's "
                  "serving thread included; 0: one per hardware thread, at most 4")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
  add_checkpoint_flags(cmd, f->checkpoints,
                       "Checkpoint this server's shards (values and optimizer state) to DIR/server-I-of-S.ckpt: every "
                       "--checkpoint-interval seconds or --checkpoint-clocks clocks, and at the end");
  cmd->add_option("--drop-pushes-every", f->drop_push_every,
                  "Fault injection, to test a job's recovery from lost messages: discard every Nth push that arrives, "
                  "unanswered, as if the transport had lost it (a worker sends it again after its --resend-after); "
                  "0: never")
      ->envname("PARAFAB_DROP_PUSHES_EVERY")
      ->capture_default_str();
  cmd->add_flag("--recover", f->recover,
                "Start from this server's shard of the newest complete checkpoint set in --checkpoint-dir; "
                "rejoining a running job, from its newest usable file, else PATH.prev (refused, naming the file, "
                "when none is usable or it is of other tables)");
  cmd->callback([f, &ctx] { ctx.exit_code = run_guarded("server", [&] { return run_server(*f); }); });
}

}  // namespace parafab::apps
