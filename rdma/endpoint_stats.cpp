#include "rdma/endpoint_stats.h"

namespace parafab::rdma {

std::string describe_losses(const EndpointStats& s) {
  std::string out;
  auto add = [&](uint64_t n, const char* one, const char* many) {
    if (n == 0) return;
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + (n == 1 ? one : many);
  };
  add(s.dropped_unknown_sender, "message from an unknown sender dropped", "messages from unknown senders dropped");
  add(s.dropped_malformed, "malformed message dropped", "malformed messages dropped");
  add(s.inbound_failed, "large message not received whole", "large messages not received whole");
  add(s.skipped_in_order, "message of a peer never received (skipped)", "messages of peers never received (skipped)");
  add(s.dropped_out_of_order, "message dropped after its place was skipped", "messages dropped after their place was skipped");
  add(s.timed_out, "operation timed out", "operations timed out");
  add(s.error_completions, "error completion", "error completions");
  return out;
}

}  // namespace parafab::rdma
