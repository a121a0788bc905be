// The control plane's framing as pure functions on bytes: a 4-byte
// little-endian body length, then one serialized proto::Envelope.
// ControlChannel (control_channel.h) reads a socket with the first three;
// decode_control_frame composes them over a buffer for tests and the fuzzer
// (tests/fuzz/control_frame_fuzzer.cpp), so both judge a frame alike.
// Private to ps/.
//
//   proto::Envelope m;
//   const ControlFrame f = decode_control_frame(bytes, kMaxControlFrameBytes, m);
//   if (f.status == ControlFrame::Status::kBad) reply_malformed(f.error);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ps/proto/control.pb.h"

namespace parafab::ps {

inline constexpr size_t kControlFrameHeaderBytes = 4;

// The body length a frame header announces.
uint32_t control_frame_length(std::span<const uint8_t, kControlFrameHeaderBytes> header);

// nullopt when a body of `length` bytes may follow, else the text of the
// Error the peer gets before the connection closes.
std::optional<std::string> check_control_frame_length(uint32_t length, size_t max_frame_bytes);

// Parses one body into `out`; nullopt on success, else the Error's text.
std::optional<std::string> parse_control_body(std::string_view body, proto::Envelope& out);

// Header + serialized body.
std::string encode_control_frame(const proto::Envelope& message);

struct ControlFrame {
  enum class Status {
    kMessage,     // one Envelope decoded; `consumed` bytes of the buffer were its frame
    kIncomplete,  // the buffer ends inside the frame: read more
    kBad,         // oversized or unparsable; `error` says which (the stream is lost)
  };
  Status status = Status::kIncomplete;
  size_t consumed = 0;
  std::string error;
};

// The first frame of `bytes`, judged as ControlChannel judges it.
ControlFrame decode_control_frame(std::span<const std::byte> bytes, size_t max_frame_bytes, proto::Envelope& out);

}  // namespace parafab::ps
