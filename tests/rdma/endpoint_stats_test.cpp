// describe_losses: every loss counter in words, singular and plural, in a
// fixed order; nothing for traffic alone.
#include <gtest/gtest.h>

#include "rdma/endpoint_stats.h"

namespace parafab::rdma {
namespace {

TEST(EndpointStats, TrafficAloneIsNoLoss) {
  EndpointStats s;
  s.messages_sent = 5;
  s.bytes_received = 1 << 20;
  s.large_send_waits = 3;
  EXPECT_EQ(describe_losses(s), "");
}

TEST(EndpointStats, EachLossIsNamedWithItsCount) {
  EndpointStats s;
  s.dropped_unknown_sender = 1;
  EXPECT_EQ(describe_losses(s), "1 message from an unknown sender dropped");
  s.dropped_malformed = 2;
  s.inbound_failed = 1;
  s.skipped_in_order = 3;
  s.dropped_out_of_order = 1;
  s.timed_out = 4;
  s.error_completions = 1;
  EXPECT_EQ(describe_losses(s),
            "1 message from an unknown sender dropped, 2 malformed messages dropped, 1 large message not received "
            "whole, 3 messages of peers never received (skipped), 1 message dropped after its place was skipped, 4 "
            "operations timed out, 1 error completion");
}

}  // namespace
}  // namespace parafab::rdma
