#include "benchmarks/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace parafab::benchmarks {
namespace {

std::string env_name(const std::string& assignment) { return assignment.substr(0, assignment.find('=')); }

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> argv, std::vector<std::string> extra_env) {
  if (argv.empty()) throw std::invalid_argument("ChildProcess: empty command line");
  for (const auto& a : argv) command_ += (command_.empty() ? "" : " ") + a;

  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed (other threads may hold malloc's lock).
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    bool overridden = false;
    for (const auto& x : extra_env) overridden = overridden || env_name(x) == env_name(entry);
    if (!overridden) env.push_back(entry);
  }
  for (auto& x : extra_env) env.push_back(std::move(x));
  std::vector<char*> argv_c, env_c;
  for (auto& a : argv) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  for (auto& e : env) env_c.push_back(e.data());
  env_c.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error("ChildProcess: pipe2 for '" + command_ + "': " + std::strerror(errno));
  }
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error("ChildProcess: fork for '" + command_ + "': " + std::strerror(err));
  }
  if (pid_ == 0) {
    // Killed when the starting thread ends, even by SIGKILL; if the parent
    // is already gone, getppid() no longer names it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execvpe(argv_c[0], argv_c.data(), env_c.data());
    static const char msg[] = "cannot execute the program (not installed, or not on PATH)\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  close(fds[1]);
  fd_ = fds[0];
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

ChildProcess::~ChildProcess() {
  kill_and_reap();
  if (fd_ >= 0) close(fd_);
}

bool ChildProcess::pump() {
  if (fd_ < 0) return false;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n > 0) {
      output_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    close(fd_);  // EOF, or an error that ends the stream alike
    fd_ = -1;
    return false;
  }
}

bool ChildProcess::try_reap() {
  if (reaped_ || pid_ <= 0) return reaped_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    wait_status_ = status;
  }
  return reaped_;
}

void ChildProcess::kill_and_reap() {
  if (reaped_ || pid_ <= 0) return;
  if (try_reap()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  wait_status_ = status;
}

std::optional<int> ChildProcess::exit_code() const {
  if (!reaped_ || !WIFEXITED(wait_status_)) return std::nullopt;
  return WEXITSTATUS(wait_status_);
}

std::string ChildProcess::describe_end() const {
  if (!reaped_) return "running";
  if (WIFEXITED(wait_status_)) return "exit status " + std::to_string(WEXITSTATUS(wait_status_));
  if (WIFSIGNALED(wait_status_)) return "killed by signal " + std::to_string(WTERMSIG(wait_status_));
  return "ended";
}

bool wait_for_exit(const std::vector<ChildProcess*>& children, ChildProcess::Clock::time_point deadline) {
  for (;;) {
    std::vector<pollfd> fds;
    bool all_done = true;
    for (ChildProcess* c : children) {
      if (c->output_fd() >= 0) fds.push_back({c->output_fd(), POLLIN, 0});
      // A child that closed its output but lingers (or one that handed its
      // stdout to a grandchild) is reaped on the next turns.
      if (c->output_fd() >= 0 || !c->try_reap()) all_done = false;
    }
    if (all_done) return true;
    const auto now = ChildProcess::Clock::now();
    if (now >= deadline) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    // Without open pipes, poll only waits: 10 ms between reaping attempts.
    const int wait_ms = static_cast<int>(std::min<long long>(fds.empty() ? 10 : 100, left + 1));
    (void)poll(fds.data(), fds.size(), wait_ms);
    for (ChildProcess* c : children) c->pump();
  }
  for (ChildProcess* c : children) {
    c->pump();
    c->kill_and_reap();
  }
  return false;
}

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this binary (/proc/self/exe): " + ec.message());
  return p.string();
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

}  // namespace parafab::benchmarks
