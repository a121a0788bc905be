// The control plane's framing as pure functions (ps/control_frame.h): what
// ControlChannel does with a header and a body, judged on bytes alone.
#include "ps/control_frame.h"

#include <gtest/gtest.h>

#include <span>
#include <string>

#include "ps/control_channel.h"

namespace parafab::ps {
namespace {

std::span<const std::byte> bytes(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

proto::Envelope barrier(const std::string& name) {
  proto::Envelope m;
  m.mutable_barrier_request()->set_name(name);
  m.mutable_barrier_request()->set_contribution(77);
  return m;
}

TEST(ControlFrame, FramesDecodeOneAfterAnother) {
  const std::string a = encode_control_frame(barrier("first")), b = encode_control_frame(barrier("second"));
  ASSERT_EQ(a, ControlChannel::encode_frame(barrier("first")));
  const std::string stream = a + b;
  proto::Envelope m;
  ControlFrame f = decode_control_frame(bytes(stream), kMaxControlFrameBytes, m);
  ASSERT_EQ(f.status, ControlFrame::Status::kMessage) << f.error;
  EXPECT_EQ(f.consumed, a.size());
  EXPECT_EQ(m.barrier_request().name(), "first");
  f = decode_control_frame(bytes(stream).subspan(f.consumed), kMaxControlFrameBytes, m);
  ASSERT_EQ(f.status, ControlFrame::Status::kMessage) << f.error;
  EXPECT_EQ(f.consumed, b.size());
  EXPECT_EQ(m.barrier_request().name(), "second");
  EXPECT_EQ(m.barrier_request().contribution(), 77u);
}

TEST(ControlFrame, ShortInputIsIncompleteNotBad) {
  const std::string a = encode_control_frame(barrier("x"));
  proto::Envelope m;
  for (size_t n = 0; n < a.size(); ++n) {
    const ControlFrame f = decode_control_frame(bytes(a.substr(0, n)), kMaxControlFrameBytes, m);
    EXPECT_EQ(f.status, ControlFrame::Status::kIncomplete) << n;
    EXPECT_EQ(f.consumed, 0u);
  }
}

TEST(ControlFrame, AnEmptyBodyIsAnEmptyEnvelope) {
  // The scheduler answers it as a message without a body, not as a bad frame.
  proto::Envelope m;
  const ControlFrame f = decode_control_frame(bytes(std::string(4, '\0')), kMaxControlFrameBytes, m);
  ASSERT_EQ(f.status, ControlFrame::Status::kMessage);
  EXPECT_EQ(f.consumed, 4u);
  EXPECT_EQ(m.body_case(), proto::Envelope::BODY_NOT_SET);
}

TEST(ControlFrame, AnOversizedLengthIsBadBeforeTheBodyArrives) {
  const std::string header("\x01\x00\x01\x00", 4);  // 65537 bytes announced, none sent
  proto::Envelope m;
  const ControlFrame f = decode_control_frame(bytes(header), kMaxUnauthenticatedFrameBytes, m);
  ASSERT_EQ(f.status, ControlFrame::Status::kBad);
  EXPECT_EQ(f.error, "frame of 65537 bytes exceeds the control-plane limit of 65536 bytes");
  EXPECT_EQ(check_control_frame_length(65536, kMaxUnauthenticatedFrameBytes), std::nullopt);
  EXPECT_EQ(control_frame_length(std::span<const uint8_t, 4>(reinterpret_cast<const uint8_t*>(header.data()), 4)),
            65537u);
}

TEST(ControlFrame, AnUnparsableBodyIsBad) {
  const std::string frame = std::string("\x03\x00\x00\x00", 4) + "\xff\xff\xff";
  proto::Envelope m;
  const ControlFrame f = decode_control_frame(bytes(frame), kMaxControlFrameBytes, m);
  ASSERT_EQ(f.status, ControlFrame::Status::kBad);
  EXPECT_EQ(f.error, "frame of 3 bytes is not a control message");
}

}  // namespace
}  // namespace parafab::ps
