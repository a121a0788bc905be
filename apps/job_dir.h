// The private directory of one `parafab launch` job: made with mkdtemp (mode
// 0700) under $TMPDIR or /tmp, holding the job token in a file of mode 0600
// (children get its path, never the token itself, so it shows in no command
// line and no environment) and the scheduler's port file. Removed with
// everything in it when the object goes.
//
//   JobDir dir(ps::JobToken::generate());
//   env.push_back("PARAFAB_TOKEN_FILE=" + dir.token_file());
//   std::optional<uint16_t> port = dir.read_port();  // once the scheduler wrote it
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ps/job_token.h"

namespace parafab::apps {

class JobDir {
 public:
  // Throws std::runtime_error naming the path when it cannot be made.
  explicit JobDir(const ps::JobToken& token);
  ~JobDir();
  JobDir(const JobDir&) = delete;
  JobDir& operator=(const JobDir&) = delete;

  const std::string& path() const { return path_; }
  std::string token_file() const { return path_ + "/token"; }
  std::string port_file() const { return path_ + "/port"; }
  // The port in port_file(), or nullopt while it is absent. Throws
  // std::runtime_error when it holds something other than a port.
  std::optional<uint16_t> read_port() const;

 private:
  std::string path_;
};

}  // namespace parafab::apps
