#include "ps/cluster_map.h"

#include <stdexcept>

namespace parafab::ps {

const char* to_string(Role role) {
  switch (role) {
    case Role::kScheduler: return "scheduler";
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
  }
  return "unknown";
}

const TableSchema& ClusterMap::table(uint32_t id) const {
  for (const TableSchema& t : tables) {
    if (t.id == id) return t;
  }
  throw std::invalid_argument("no table " + std::to_string(id) + " in the cluster map (" +
                              std::to_string(tables.size()) + " tables)");
}

}  // namespace parafab::ps
