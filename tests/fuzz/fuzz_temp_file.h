// Where a fuzz target writes its input when the code under test reads a
// file: tmpfs when there is one (the writers fsync, which is free there),
// one name per process and purpose. The files (and the ".prev" a checkpoint
// writer rotates beside one) are removed when the fuzzer exits normally, so
// runs leave nothing in /dev/shm.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "tests/fuzz/fuzz_check.h"

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

// Writes bytes to path (a temp_path), replacing what it held.
inline void write_temp_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) violated("cannot write the fuzz input's temp file");
}

inline void write_temp_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  write_temp_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace parafab::fuzz
