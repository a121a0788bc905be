// A child process whose stdout and stderr come back through one pipe, and
// which never outlives the benchmark: it gets SIGKILL when the thread that
// started it ends (PR_SET_PDEATHSIG), when its deadline passes, and when the
// object is destroyed before it exited.
//
//   ChildProcess server({"fi_pingpong", "-p", "shm", ...}, {"FI_TCP_IFACE=lo"});
//   ChildProcess client({"fi_pingpong", ..., "127.0.0.1"}, {});
//   bool done = wait_for_exit({&server, &client}, Clock::now() + 60s);  // kills both when not
//   if (done && client.exit_code() == 0) parse(client.output());
//
// Start children before any fabric is opened in this process (DESIGN.md:
// fork after memory registration breaks verbs and EFA).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace parafab::benchmarks {

class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts argv[0], searched on PATH, with this process's environment plus
  // `extra_env` ("NAME=value", overriding). Throws std::runtime_error when no
  // process can be made (pipe or fork failing); a program that cannot be
  // executed exits with status 127 and says so in its output.
  ChildProcess(std::vector<std::string> argv, std::vector<std::string> extra_env);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The command line, space-separated, for messages.
  const std::string& command() const { return command_; }
  // Everything read from the child's stdout and stderr so far.
  const std::string& output() const { return output_; }

  // Reads what the pipe holds now without blocking; false once at EOF.
  bool pump();
  // Reaps the child if it has exited (no blocking); true once reaped.
  bool try_reap();
  // SIGKILL (if still running) and reap.
  void kill_and_reap();
  bool reaped() const { return reaped_; }
  // Exit status once reaped; nullopt while running or after a signal.
  std::optional<int> exit_code() const;
  // "exit status 3", "killed by signal 9", "running".
  std::string describe_end() const;
  int output_fd() const { return fd_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  // read end of the output pipe; -1 after EOF
  bool reaped_ = false;
  int wait_status_ = 0;
  std::string command_;
  std::string output_;
};

// The absolute path of this process's executable (/proc/self/exe), to start
// more of itself. Throws std::runtime_error when it cannot be read.
std::string self_executable();

// `text` split at whitespace: a flag value such as "--hidden 64,32" as argv words.
std::vector<std::string> split_words(const std::string& text);

// Pumps the children's output until every one has closed it and exited, or
// until `deadline`; then kills and reaps those still running. True when all
// exited by themselves in time.
bool wait_for_exit(const std::vector<ChildProcess*>& children, ChildProcess::Clock::time_point deadline);

}  // namespace parafab::benchmarks
