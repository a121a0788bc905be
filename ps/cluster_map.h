// Who is in the job: what the scheduler hands every node once all have
// joined. Ranks are data-plane peer ids (rdma::PeerId): servers take
// 0 … S−1, workers S … S+W−1; a node's fabric address is its
// rdma::Endpoint::address() blob.
//
//   const ps::ClusterMap& map = scheduler_client.cluster_map();
//   for (const ps::NodeInfo& s : map.servers) endpoint.add_peer(s.rank, s.fabric_address);
//   uint32_t server_index = map.partition().server_of(key);   // map.servers[server_index]
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ps/key_partition.h"
#include "ps/table_schema.h"

namespace parafab::ps {

enum class Role : uint8_t { kScheduler, kServer, kWorker };
const char* to_string(Role role);  // "scheduler", "server", "worker"

struct NodeInfo {
  Role role = Role::kWorker;
  uint32_t rank = 0;       // data-plane peer id
  uint32_t role_rank = 0;  // index among its role: server i, worker j
  std::string host;        // as the node reported it (for logs)
  std::vector<std::byte> fabric_address;
};

struct ClusterMap {
  uint64_t job_id = 0;  // random per scheduler start; nodes of another job never match it
  std::vector<NodeInfo> servers;  // index i is server i
  std::vector<NodeInfo> workers;  // index j is worker j
  std::vector<TableSchema> tables;
  // Where the servers load their shards from (a job resumed from its
  // checkpoint set, ps/checkpoint.h); empty: a fresh start.
  std::string resume_dir;
  // With resume_dir: the set the scheduler found there (find_checkpoint_set,
  // read and checked once for the job): its clock, where every worker's
  // clock starts, and each server's file, by server index.
  int64_t resume_clock = 0;
  std::vector<std::string> resume_paths;
  // How long the scheduler waits for a dead server to come back under its
  // rank (0: it does not).
  std::chrono::milliseconds server_rejoin_timeout{0};
  // This server rejoined a running job (its copy of the map only).
  bool rejoin = false;

  uint32_t num_servers() const { return static_cast<uint32_t>(servers.size()); }
  uint32_t num_workers() const { return static_cast<uint32_t>(workers.size()); }
  uint32_t server_rank(uint32_t server_index) const { return server_index; }
  uint32_t worker_rank(uint32_t worker_index) const { return num_servers() + worker_index; }
  // Server i owns the i-th of S equal ranges of mix64(key).
  KeyPartition partition() const { return KeyPartition(num_servers()); }
  // Throws std::invalid_argument when no table has this id.
  const TableSchema& table(uint32_t id) const;
};

// A job's id as every node prints it, 16 hex digits ("joined job
// 5cdea82f9eb76ce6"), so that one grep finds the job in all of its logs.
std::string job_hex(uint64_t job_id);

}  // namespace parafab::ps
