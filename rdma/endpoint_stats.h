// What an endpoint counts: traffic, and the messages and operations it lost
// or failed (each a reason a peer's request can go unanswered).
#pragma once

#include <cstdint>
#include <string>

namespace parafab::rdma {

struct EndpointStats {
  uint64_t messages_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_received = 0;          // landed bytes included
  uint64_t messages_landed = 0;         // received straight into a landing's memory (Endpoint::expect)
  uint64_t rma_bytes = 0;
  uint64_t dropped_unknown_sender = 0;  // from an address not added with add_peer
  uint64_t dropped_malformed = 0;       // bad frame header, truncated, over the inbound limit
  uint64_t inbound_failed = 0;          // large messages whose chunks failed or timed out
  uint64_t skipped_in_order = 0;        // messages of a peer never received, skipped after the timeout
  uint64_t dropped_out_of_order = 0;    // arrived after their place in the order was skipped
  uint64_t timed_out = 0;               // operations failed by the timeout
  uint64_t error_completions = 0;       // error completions read from the CQ
  uint64_t large_send_waits = 0;        // sends that found their peer's large_in_flight_per_peer taken and waited
  // Chunk receives posted for large inbound messages, a window at a time
  // (each drained chunk of a withdrawn landing included).
  uint64_t chunk_receives_posted = 0;
  // Local buffers registered for their descriptors (FI_MR_LOCAL, or
  // EndpointOptions::register_local_buffers): the receive pool once, then
  // per operation; 0 where neither asks for them.
  uint64_t local_registrations = 0;
};

// The losses among `s` in words ("2 messages from unknown senders dropped,
// 1 operation timed out"), or "" when there were none: what an error about
// a missing reply appends, so that a transport-level loss names itself.
std::string describe_losses(const EndpointStats& s);

}  // namespace parafab::rdma
