#include "ps/cluster_map.h"

#include <cstdio>
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

std::string job_hex(uint64_t job_id) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(job_id));
  return text;
}

const TableSchema& ClusterMap::table(uint32_t id) const {
  for (const TableSchema& t : tables) {
    if (t.id == id) return t;
  }
  throw std::invalid_argument("no table " + std::to_string(id) + " in the cluster map (" +
                              std::to_string(tables.size()) + " tables)");
}

}  // namespace parafab::ps
