// Signals as readable bytes: while a SignalPipe lives, each signal it names
// writes its number to a self-pipe, so an event loop waits for signals in
// the same poll() as its other descriptors (no work in the handler, no race
// between checking a flag and blocking).
//
//   SignalPipe signals({SIGINT, SIGTERM, SIGCHLD});
//   poll({..., {signals.fd(), POLLIN, 0}}, ...);
//   for (int s : signals.take()) if (s == SIGINT) stop();
//
// A signal handler can only reach process-wide state, so at most one
// SignalPipe exists at a time (the constructor throws otherwise); the old
// dispositions come back when it goes. Children started while it lives
// must reset the signals to SIG_DFL before exec (exec would do that for a
// caught signal, but not in the window between fork and exec).
#pragma once

#include <signal.h>

#include <initializer_list>
#include <vector>

namespace parafab::apps {

class SignalPipe {
 public:
  explicit SignalPipe(std::initializer_list<int> signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Readable when a signal has arrived since the last take().
  int fd() const { return read_fd_; }
  // The signals that arrived since the last call, in order (a signal
  // repeated faster than it is taken may appear once).
  std::vector<int> take();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::vector<int> signals_;
  std::vector<struct sigaction> old_;  // the dispositions to restore, by signals_ index
};

}  // namespace parafab::apps
