#include "apps/job_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace parafab::apps {

JobDir::JobDir(const ps::JobToken& token) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / "parafab-launch-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    throw std::runtime_error("cannot make a private directory " + tmpl + ": " + std::strerror(errno));
  }
  path_ = buf.data();
  const std::string file = token_file();
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && fchmod(fd, 0600) == 0;  // whatever the umask
  const std::string text = token.secret() + "\n";
  ok = ok && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  if (fd >= 0) ok = close(fd) == 0 && ok;
  if (!ok) {
    std::filesystem::remove_all(path_, ec);
    throw std::runtime_error("cannot write the job token to " + file + ": " + std::strerror(err));
  }
}

JobDir::~JobDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::optional<uint16_t> JobDir::read_port() const {
  // The scheduler writes the file whole and renames it into place.
  std::ifstream in(port_file());
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port == 0 || port > 65535) {
    throw std::runtime_error("the scheduler's port file " + port_file() + " holds '" + text + "', not a port");
  }
  return static_cast<uint16_t>(port);
}

}  // namespace parafab::apps
