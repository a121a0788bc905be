// A server's or worker's connection to the scheduler: join the job, get the
// rank and the cluster map, barriers, heartbeats, failure notices, shutdown.
//
//   ps::SchedulerClient client({.host = "10.0.0.1", .port = 9000, .token = token,
//                               .role = ps::Role::kWorker, .host_name = hostname,
//                               .fabric_address = endpoint.address()});
//   const ps::ClusterMap& map = client.join(std::chrono::seconds(60));
//   client.barrier("tables-ready", std::chrono::seconds(60));
//   ... train ...
//   client.done();
//   client.wait_for_shutdown(std::chrono::seconds(60));
//
// A background thread (started by join) answers the scheduler, sends a
// heartbeat every heartbeat_interval and records notices: dead_ranks()
// lists the nodes the scheduler declared dead, and on_node_dead (if set) is
// called with each, on that thread. Errors are std::runtime_error naming the
// scheduler's address or carrying the scheduler's own error text.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ps/cluster_map.h"
#include "ps/job_token.h"

namespace parafab::ps {

// What a rejoined server's checkpoint holds of the workers' pushes, by
// worker index (Server::last_push_ids, Server::worker_bytes_pushed).
struct RestoredPushes {
  std::vector<uint64_t> last_push_ids;
  std::vector<uint64_t> worker_bytes_pushed;
};

struct SchedulerClientOptions {
  std::string host = "127.0.0.1";  // the scheduler's
  uint16_t port = 0;
  std::optional<JobToken> token;  // required
  Role role = Role::kWorker;      // kServer or kWorker
  std::string host_name;          // this node's, for the map and logs
  std::vector<std::byte> fabric_address;
  // Ask for this role rank (e.g. from SLURM_PROCID or PARAFAB_RANK); the
  // scheduler refuses the node when it is out of range or taken. Unset: the
  // next free one in order of arrival.
  std::optional<uint32_t> requested_role_rank;
  // Workers: the tables the job needs (used when the scheduler has none).
  std::vector<TableSchema> tables;
  // Workers: resume the job from the checkpoint set in this directory.
  std::string resume_dir;
  // 0 disables heartbeats (a test seam: the scheduler then declares the
  // node dead after its heartbeat_timeout).
  std::chrono::milliseconds heartbeat_interval{1000};
  // The connection must be made within this time of join(). A refused one
  // (the scheduler not listening yet: srun starts every task at once) is
  // tried again every 50 ms, doubling up to 1 s, until then.
  std::chrono::milliseconds connect_timeout{10000};
  size_t max_frame_bytes = 64u << 20;
  // Called on the client's thread for every node declared dead.
  std::function<void(const NodeInfo& node, const std::string& reason)> on_node_dead;
  // A dead server came back under its rank, at node.fabric_address (the
  // client's map already says so), holding `pushes` of each worker. Called
  // on the client's I/O thread.
  std::function<void(const NodeInfo& node, const RestoredPushes& pushes)> on_node_rejoined;
};

class SchedulerClient {
 public:
  // Checks the options (token, role, host name, fabric address); connects in join().
  explicit SchedulerClient(SchedulerClientOptions options);
  // Closes the connection (before shutdown the scheduler counts that as death).
  ~SchedulerClient();
  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  // Connects, authenticates, and waits for the cluster map. Throws
  // std::runtime_error on refusal ("bad token", role full), a join timeout
  // reported by the scheduler, a connection failure, or when `timeout` passes.
  // Call once.
  const ClusterMap& join(std::chrono::milliseconds timeout);
  const ClusterMap& cluster_map() const;  // after join
  // Connections tried so far (more than one when the first were refused).
  uint32_t connect_attempts() const;
  uint32_t rank() const;                  // after join
  uint32_t role_rank() const;
  uint64_t job_id() const;

  // Blocks until every live node has called barrier(name); throws on timeout
  // (naming the barrier) or when the connection fails.
  // workers_only: only the workers meet; servers neither call nor wait.
  // Returns the sum of every arrived node's contribution (a job-wide count).
  uint64_t barrier(const std::string& name, std::chrono::milliseconds timeout, bool workers_only = false,
                   uint64_t contribution = 0);
  // Tells the scheduler this node has finished; the job shuts down when all
  // workers have.
  void done();
  // A server that rejoined a running job (its map says `rejoin`), once its
  // endpoint has the workers' addresses and its checkpoint is restored: the
  // workers then hear of it, with what it holds of their pushes (one entry
  // per worker of the job), and send it their requests.
  void rejoin_ready(const RestoredPushes& pushes);
  // True once the scheduler's Shutdown arrived; false on timeout; throws when
  // the connection failed without one.
  bool wait_for_shutdown(std::chrono::milliseconds timeout);
  std::vector<uint32_t> dead_ranks() const;
  // Empty while none came: the reason carried by Shutdown.
  std::string shutdown_reason() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parafab::ps
