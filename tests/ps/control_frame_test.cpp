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

// The largest Register the scheduler accepts fits the frame limit it gives
// a peer before registration: every table field at its widest.
TEST(ControlFrame, TheLargestLegalRegisterFitsTheUnauthenticatedLimit) {
  proto::Envelope m;
  proto::Register* r = m.mutable_register_();
  r->set_protocol_version(kControlProtocolVersion);
  r->set_role(proto::ROLE_WORKER);
  r->set_host(std::string(kMaxHostBytes, 'h'));
  r->set_fabric_address(std::string(kMaxFabricAddressBytes, 'a'));
  r->set_client_nonce(std::string(kNonceBytes, 'n'));
  r->set_mac(std::string(kMacBytes, 'm'));
  r->set_resume_dir(std::string(kMaxResumeDirBytes, 'd'));
  TableSchema t;
  t.kind = TableKind::kDense;
  t.width = UINT32_MAX;
  t.rows = UINT64_MAX;
  t.init.kind = InitializerKind::kNormal;
  t.init.stddev = -1e30f;
  t.init.seed = UINT64_MAX;
  UpdaterConfig& u = t.updater;
  u.kind = UpdaterKind::kAdam;
  for (float* f : {&u.learning_rate, &u.l1, &u.l2, &u.adagrad_epsilon, &u.adagrad_initial_accumulator, &u.ftrl_alpha,
                   &u.ftrl_beta, &u.ftrl_l1, &u.ftrl_l2, &u.adam_beta1, &u.adam_beta2, &u.adam_epsilon}) {
    *f = -1e30f;  // every float field set, so each costs its 5 bytes
  }
  for (uint32_t id = 0; id < kMaxRegisterTables; ++id) {
    t.id = UINT32_MAX - id;
    to_proto(t, r->add_tables());
  }
  const size_t bytes = ControlChannel::encode_frame(m).size();
  EXPECT_LE(bytes, kMaxUnauthenticatedFrameBytes) << bytes;
  EXPECT_GE(bytes, kMaxRegisterTables * 80) << "the tables were not serialized at their widest: " << bytes;
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
  const std::string header("\x01\x00\x04\x00", 4);  // 262145 bytes announced, none sent
  proto::Envelope m;
  const ControlFrame f = decode_control_frame(bytes(header), kMaxUnauthenticatedFrameBytes, m);
  ASSERT_EQ(f.status, ControlFrame::Status::kBad);
  EXPECT_EQ(f.error, "frame of 262145 bytes exceeds the control-plane limit of 262144 bytes");
  EXPECT_EQ(check_control_frame_length(262144, kMaxUnauthenticatedFrameBytes), std::nullopt);
  EXPECT_EQ(control_frame_length(std::span<const uint8_t, 4>(reinterpret_cast<const uint8_t*>(header.data()), 4)),
            262145u);
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
