#include "rdma/status.h"

namespace parafab::rdma {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kTimedOut: return "timed out";
    case StatusCode::kPeerError: return "peer error";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kClosed: return "closed";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(rdma::to_string(code_)) + ": " + message_;
}

}  // namespace parafab::rdma
