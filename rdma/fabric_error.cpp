#include "rdma/fabric_error.h"

#include <rdma/fi_errno.h>

namespace parafab::rdma {

FabricError::FabricError(std::string call, int code, const std::string& context)
    : std::runtime_error(call + " failed for " + context + ": " + fi_strerror(-code) + " (" +
                         std::to_string(code) + ")"),
      call_(std::move(call)), code_(code) {}

int check(int rc, const char* call, const std::string& context) {
  if (rc < 0) throw FabricError(call, rc, context);
  return rc;
}

}  // namespace parafab::rdma
