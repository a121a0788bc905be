// The hot-path result of rdma/: every operation's future yields a Status;
// set-up and misuse throw FabricError instead (STYLE.md, "Errors").
//
//   rdma::Status s = endpoint.send(peer, tag, data).get();
//   if (!s.ok()) log(s.to_string());   // "timed out: peer 2 (127.0.0.1:41234) ..."
#pragma once

#include <string>
#include <utility>

namespace parafab::rdma {

enum class StatusCode {
  kOk,
  kTimedOut,      // the operation did not complete within the endpoint's timeout
  kPeerError,     // the provider reported an error completion (peer gone, reset, ...)
  kUnsupported,   // the provider lacks the capability (no FI_RMA, no FI_HMEM, ...)
  kInvalidArgument,
  kClosed,        // the endpoint closed before the operation completed
};

const char* to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "ok", or "<code>: <message>".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace parafab::rdma
