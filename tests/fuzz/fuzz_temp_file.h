// Where a fuzz target writes its input when the code under test reads a
// file: tmpfs when there is one (the writers fsync, which is free there),
// one name per process and purpose.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace parafab::fuzz {

inline std::string temp_path(const std::string& what) {
  const std::filesystem::path dir =
      std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
  return (dir / ("parafab-fuzz-" + std::to_string(::getpid()) + "-" + what)).string();
}

}  // namespace parafab::fuzz
