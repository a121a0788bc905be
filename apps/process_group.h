// The child processes of `parafab launch`. Each child runs in a process group
// of its own (signals reach whatever it starts, and a Ctrl-C at the terminal
// reaches only launch, which decides), gets SIGKILL if launch dies
// (PR_SET_PDEATHSIG), reads /dev/null, and has its stdout and stderr
// forwarded line by line to launch's own, each line prefixed with the
// child's label: "[worker 2] ...". A last line without a newline is
// forwarded when its stream ends.
//
//   SignalPipe signals({SIGINT, SIGTERM, SIGCHLD});
//   ProcessGroup group(signals.fd());
//   size_t w = group.start("worker 0", {"parafab", "worker"}, {"PARAFAB_RANK=0"});
//   while (group.running() > 0) {
//     for (size_t i : group.wait(std::chrono::seconds(1))) report(group.child(i));
//     if (interrupted(signals.take())) group.stop(std::chrono::seconds(5));
//   }
//
// Start children before any fabric is opened in this process (fork after
// memory registration breaks verbs and EFA). Single-threaded use only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace parafab::apps {

class ProcessGroup {
 public:
  using Clock = std::chrono::steady_clock;

  struct Child {
    std::string label;    // "scheduler", "server 0", "worker 2"
    std::string command;  // argv joined by spaces, for messages
    pid_t pid = -1;
    bool exited = false;           // reaped
    int wait_status = 0;           // valid once exited
    bool stopped_by_us = false;    // stop() signalled it while it ran
    std::deque<std::string> tail;  // its last output lines (both streams)

    // Exited with status 0.
    bool succeeded() const;
    // "exit status 3", "killed by signal 9", "running".
    std::string describe_end() const;
  };

  // `wake_fd` (optional, e.g. a SignalPipe's, which SIGCHLD makes readable)
  // is polled with the children's output: wait() returns when it is
  // readable, and the caller drains it. Forwarded lines go to out_fd (the
  // children's stdout) and err_fd (their stderr).
  explicit ProcessGroup(int wake_fd = -1, int out_fd = 1, int err_fd = 2);
  // Kills (SIGKILL) and reaps every child still running, then forwards what
  // their pipes still hold.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv (argv[0] searched on PATH) with this process's environment,
  // `env` ("NAME=value") overriding. Returns the child's index. Throws
  // std::runtime_error when no process can be made; a program that cannot
  // be executed exits with status 127 after saying so on its stderr.
  size_t start(std::string label, std::vector<std::string> argv, const std::vector<std::string>& env);

  // Forwards output and reaps until something happens: a child exits, the
  // wake fd becomes readable, or `timeout` passes. Returns the indices of
  // the children reaped in this call (their output drained first, so a
  // report printed next comes after their last lines).
  std::vector<size_t> wait(std::chrono::milliseconds timeout);

  // SIGTERM to the process group of every running child, then forwards
  // output until all have exited or `grace` has passed, then SIGKILL to the
  // rest and reaps them. `hurry`, asked each time the wake fd is readable,
  // ends the grace early when it returns true (a second Ctrl-C).
  void stop(std::chrono::milliseconds grace, const std::function<bool()>& hurry = {});

  size_t size() const { return children_.size(); }
  const Child& child(size_t i) const { return children_[i].info; }
  size_t running() const;
  // The child's last output lines, each indented, for an error message.
  std::string tail(size_t i) const;

 private:
  struct Stream {
    int fd = -1;  // read end; -1 after EOF
    int out_fd = 1;
    std::string partial;  // bytes after the last newline
  };
  struct Entry {
    Child info;
    Stream out, err;
  };

  // Reads what `s` holds now (without blocking) and forwards whole lines;
  // at EOF forwards the partial line and closes the fd.
  void pump(Entry& e, Stream& s);
  void forward(Entry& e, const Stream& s, const char* line, size_t n);
  bool try_reap(Entry& e);
  void signal_group(Entry& e, int sig);

  int wake_fd_;
  int out_fd_, err_fd_;
  std::vector<Entry> children_;
};

}  // namespace parafab::apps
