#include "ps/control_frame.h"

#include <limits>

namespace parafab::ps {

uint32_t control_frame_length(std::span<const uint8_t, kControlFrameHeaderBytes> h) {
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 8) | (static_cast<uint32_t>(h[2]) << 16) |
         (static_cast<uint32_t>(h[3]) << 24);
}

std::optional<std::string> check_control_frame_length(uint32_t length, size_t max_frame_bytes) {
  if (length <= max_frame_bytes) return std::nullopt;
  return "frame of " + std::to_string(length) + " bytes exceeds the control-plane limit of " +
         std::to_string(max_frame_bytes) + " bytes";
}

std::optional<std::string> parse_control_body(std::string_view body, proto::Envelope& out) {
  // ParseFromArray takes an int: a longer body cannot be a message of ours
  // (frames are at most 64 MiB), and must not wrap into a short one.
  if (body.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
      out.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return std::nullopt;
  }
  return "frame of " + std::to_string(body.size()) + " bytes is not a control message";
}

std::string encode_control_frame(const proto::Envelope& message) {
  const size_t n = message.ByteSizeLong();
  std::string frame(kControlFrameHeaderBytes + n, '\0');
  for (size_t i = 0; i < kControlFrameHeaderBytes; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  message.SerializeToArray(frame.data() + kControlFrameHeaderBytes, static_cast<int>(n));
  return frame;
}

ControlFrame decode_control_frame(std::span<const std::byte> bytes, size_t max_frame_bytes, proto::Envelope& out) {
  ControlFrame f;
  if (bytes.size() < kControlFrameHeaderBytes) return f;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint32_t length = control_frame_length(std::span<const uint8_t, kControlFrameHeaderBytes>(p, 4));
  if (auto why = check_control_frame_length(length, max_frame_bytes)) {
    f.status = ControlFrame::Status::kBad;
    f.error = std::move(*why);
    return f;
  }
  if (bytes.size() - kControlFrameHeaderBytes < length) return f;
  const std::string_view body(reinterpret_cast<const char*>(p) + kControlFrameHeaderBytes, length);
  if (auto why = parse_control_body(body, out)) {
    f.status = ControlFrame::Status::kBad;
    f.error = std::move(*why);
    return f;
  }
  f.status = ControlFrame::Status::kMessage;
  f.consumed = kControlFrameHeaderBytes + length;
  return f;
}

}  // namespace parafab::ps
