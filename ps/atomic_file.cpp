#include "ps/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace parafab::ps {
namespace {

[[noreturn]] void fail(const std::string& file, const char* step, int err) {
  throw std::runtime_error(file + ": " + step + " failed: " + std::strerror(err));
}

}  // namespace

void write_file_atomically(const std::string& path, std::initializer_list<std::string_view> pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "create", errno);
  auto give_up = [&](const char* step) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(tmp, step, e);
  };
  for (std::string_view piece : pieces) {
    const char* p = piece.data();
    size_t n = piece.size();
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) give_up("write");
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0) give_up("fsync");
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "rename into place", e);
  }
  // The rename itself is durable once the directory is synced (best effort:
  // the data already is).
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace parafab::ps
