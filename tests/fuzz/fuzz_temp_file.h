// Where a fuzz target writes its input when the code under test reads a
// file: tmpfs when there is one (the writers fsync, which is free there),
// one name per process and purpose. The files (and the ".prev" a checkpoint
// writer rotates beside one) are removed when the fuzzer exits normally, so
// runs leave nothing in /dev/shm.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace parafab::fuzz {

inline std::string temp_path(const std::string& what) {
  struct Removed {
    std::vector<std::string> paths;
    ~Removed() {
      for (const std::string& p : paths) {
        std::error_code ec;
        std::filesystem::remove(p, ec);
        std::filesystem::remove(p + ".prev", ec);
      }
    }
  };
  static Removed at_exit;
  const std::filesystem::path dir =
      std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
  std::string path = (dir / ("parafab-fuzz-" + std::to_string(::getpid()) + "-" + what)).string();
  at_exit.paths.push_back(path);
  return path;
}

}  // namespace parafab::fuzz
