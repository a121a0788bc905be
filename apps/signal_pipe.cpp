#include "apps/signal_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace parafab::apps {
namespace {

// The write end of the live SignalPipe's pipe, for the handler; -1 when none.
std::atomic<int> g_write_fd{-1};

void on_signal(int sig) {
  const int saved = errno;
  const int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const auto byte = static_cast<unsigned char>(sig);
    // Non-blocking: when the pipe is full a wake-up is already pending.
    (void)!write(fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe(std::initializer_list<int> signals) : signals_(signals) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(std::string("signal pipe: pipe2: ") + std::strerror(errno));
  }
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, fds[1])) {
    close(fds[0]);
    close(fds[1]);
    throw std::logic_error("signal pipe: only one SignalPipe may exist at a time");
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  for (const int sig : signals_) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    struct sigaction old {};
    sigaction(sig, &sa, &old);
    old_.push_back(old);
  }
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < signals_.size(); ++i) {
    sigaction(signals_[i], &old_[i], nullptr);
  }
  g_write_fd.store(-1);
  close(read_fd_);
  close(write_fd_);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> got;
  unsigned char buf[64];
  for (;;) {
    const ssize_t n = read(read_fd_, buf, sizeof buf);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) got.push_back(buf[i]);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return got;
  }
}

}  // namespace parafab::apps
