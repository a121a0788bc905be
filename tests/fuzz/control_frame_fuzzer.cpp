// libFuzzer target: the control plane's decoder as the scheduler and its
// clients meet it. The input after the first byte is a TCP byte stream; it
// is cut into frames with ps::decode_control_frame (ControlChannel's own
// judgement), and each decoded Envelope goes through the validation the
// receivers apply (validate_register, the from_proto conversions of the
// cluster map, its tables and nodes, roles, MAC inputs).
//
//   byte 0: bit 0 the limit of a registered peer (64 MiB) instead of a
//           stranger's (256 KiB)
//
// Must hold: a bad frame says why; a decoded Envelope re-encodes to a frame
// that decodes to the same bytes; validation refuses with ProtocolError and
// nothing else (any other exception escapes and is reported as a crash);
// what validation accepts converts back to the wire and validates again to
// the same message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "ps/control_channel.h"
#include "ps/control_frame.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace parafab::ps;

using parafab::fuzz::check;
using parafab::fuzz::violated;

std::span<const std::byte> as_span(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

template <typename F>
bool refused(F&& f) {
  try {
    f();
    return false;
  } catch (const ProtocolError& e) {
    check(std::string(e.what()).size() > 0, "a ProtocolError without a reason");
    return true;
  }
}

void check_table_round_trip(const proto::Table& wire) {
  TableSchema s;
  if (refused([&] { s = from_proto(wire); })) return;
  proto::Table back;
  to_proto(s, &back);
  TableSchema again;
  check(!refused([&] { again = from_proto(back); }), "an accepted table fails validation after to_proto");
  proto::Table back2;
  to_proto(again, &back2);
  check(back.SerializeAsString() == back2.SerializeAsString(), "a table changes on a second round trip");
}

void check_map_round_trip(const proto::ClusterMap& wire) {
  ClusterMap map;
  if (refused([&] { map = from_proto(wire); })) return;
  check(map.num_servers() >= 1, "a cluster map without servers accepted");
  check(map.resume_paths.size() == (map.resume_dir.empty() ? 0 : map.num_servers()) && map.resume_clock >= 0,
        "a cluster map with a checkpoint file per server missing, or a negative resume clock, accepted");
  check(static_cast<int>(map.num_servers()) == wire.servers_size() &&
            static_cast<int>(map.num_workers()) == wire.workers_size(),
        "node counts changed");
  proto::ClusterMap back;
  to_proto(map, &back);
  ClusterMap again;
  check(!refused([&] { again = from_proto(back); }), "an accepted cluster map fails validation after to_proto");
  proto::ClusterMap back2;
  to_proto(again, &back2);
  check(back.SerializeAsString() == back2.SerializeAsString(), "a cluster map changes on a second round trip");
}

// What a scheduler or a client does with a decoded message before acting on
// it (the stateful checks, e.g. phase and job id, are theirs).
void validate(const proto::Envelope& m) {
  check(!body_name(m).empty(), "a body without a name");
  switch (m.body_case()) {
    case proto::Envelope::kRegister: {
      const proto::Register& r = m.register_();
      for (const proto::Table& t : r.tables()) check_table_round_trip(t);
      if (refused([&] { validate_register(r); })) return;
      (void)from_proto(r.role(), "register: role");  // validated: must not throw
      check(!register_mac_input(7, std::string(kNonceBytes, 'n'), r).empty(), "an empty MAC input");
      return;
    }
    case proto::Envelope::kClusterMap:
      for (const proto::Table& t : m.cluster_map().tables()) check_table_round_trip(t);
      for (const proto::NodeInfo& n : m.cluster_map().servers()) (void)refused([&] { (void)from_proto(n); });
      check_map_round_trip(m.cluster_map());
      return;
    case proto::Envelope::kWelcome: {
      const proto::Welcome& w = m.welcome();
      check(!welcome_mac_input(w.job_id(), std::string(kNonceBytes, 'n'), std::string(kNonceBytes, 'c'), w.rank(),
                               w.role_rank())
                 .empty(),
            "an empty MAC input");
      return;
    }
    case proto::Envelope::kNodeDead:
      (void)refused([&] { (void)from_proto(m.node_dead().role(), "node_dead role"); });
      return;
    case proto::Envelope::kError: {
      const proto::Envelope e = make_error(m.error().code(), m.error().text());
      check(e.error().text().size() <= kMaxReasonBytes, "an error text over the limit");
      return;
    }
    default: return;
  }
}

}  // namespace

// protobuf logs every string field with invalid UTF-8 it refuses; at tens
// of thousands of inputs a second that is all the fuzzer would do.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t limit = (data[0] & 1) ? kMaxControlFrameBytes : kMaxUnauthenticatedFrameBytes;
  std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  for (;;) {
    proto::Envelope m;
    const ControlFrame f = decode_control_frame(stream, limit, m);
    if (f.status == ControlFrame::Status::kIncomplete) {
      check(f.consumed == 0, "an incomplete frame consumed bytes");
      return 0;
    }
    if (f.status == ControlFrame::Status::kBad) {
      check(!f.error.empty(), "a bad frame without a reason");
      return 0;  // the channel closes here: nothing after a bad frame is read
    }
    check(f.consumed >= kControlFrameHeaderBytes && f.consumed <= stream.size(), "consumed outside the stream");
    // Re-encoding must give a frame that decodes to the same message.
    const std::string again = encode_control_frame(m);
    proto::Envelope m2;
    const ControlFrame f2 = decode_control_frame(as_span(again), kMaxControlFrameBytes, m2);
    check(f2.status == ControlFrame::Status::kMessage && f2.consumed == again.size(), "a re-encoded frame is bad");
    check(m2.SerializeAsString() == m.SerializeAsString(), "a message changes on re-encoding");
    validate(m);
    stream = stream.subspan(f.consumed);
  }
}
