#include "apps/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace parafab::apps {
namespace {

constexpr size_t kTailLines = 20;
constexpr size_t kTailLineChars = 400;
// A "line" longer than this is forwarded in pieces rather than held.
constexpr size_t kMaxPartial = 64 * 1024;
// Reads per stream per turn, so one chatty child cannot starve the others.
constexpr int kReadsPerTurn = 16;

std::string env_name(const std::string& assignment) { return assignment.substr(0, assignment.find('=')); }

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      (void)poll(&p, 1, 100);
    } else {
      return;  // the reader went away; the children's output is dropped
    }
  }
}

int ms_until(ProcessGroup::Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - ProcessGroup::Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

}  // namespace

bool ProcessGroup::Child::succeeded() const {
  return exited && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string ProcessGroup::Child::describe_end() const {
  if (!exited) return "running";
  if (WIFEXITED(wait_status)) return "exit status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "killed by signal " + std::to_string(WTERMSIG(wait_status));
  return "ended (wait status " + std::to_string(wait_status) + ")";
}

ProcessGroup::ProcessGroup(int wake_fd, int out_fd, int err_fd) : wake_fd_(wake_fd), out_fd_(out_fd), err_fd_(err_fd) {}

ProcessGroup::~ProcessGroup() {
  for (Entry& e : children_) {
    if (!e.info.exited || e.out.fd >= 0 || e.err.fd >= 0) signal_group(e, SIGKILL);
  }
  for (Entry& e : children_) {
    if (!e.info.exited) {
      int status = 0;
      while (waitpid(e.info.pid, &status, 0) < 0 && errno == EINTR) {
      }
      e.info.exited = true;
      e.info.wait_status = status;
    }
    for (Stream* s : {&e.out, &e.err}) {
      pump(e, *s);
      if (s->fd >= 0) {
        if (!s->partial.empty()) forward(e, *s, s->partial.data(), s->partial.size());
        close(s->fd);
        s->fd = -1;
      }
    }
  }
}

size_t ProcessGroup::start(std::string label, std::vector<std::string> argv,
                           const std::vector<std::string>& env_overrides) {
  if (argv.empty()) throw std::invalid_argument("launch: empty command line for " + label);
  Entry e;
  e.info.label = std::move(label);
  for (const auto& a : argv) e.info.command += (e.info.command.empty() ? "" : " ") + a;

  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed.
  std::vector<std::string> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string entry(*p);
    const bool overridden = std::any_of(env_overrides.begin(), env_overrides.end(),
                                        [&](const std::string& x) { return env_name(x) == env_name(entry); });
    if (!overridden) env.push_back(entry);
  }
  env.insert(env.end(), env_overrides.begin(), env_overrides.end());
  std::vector<char*> argv_c, env_c;
  for (auto& a : argv) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  for (auto& x : env) env_c.push_back(x.data());
  env_c.push_back(nullptr);
  const std::string exec_failed = "cannot execute '" + argv[0] + "' (not found, or not executable)\n";

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("launch: pipe2 for " + e.info.label + ": " + std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int saved = errno;
    close(out[0]);
    close(out[1]);
    throw std::runtime_error("launch: pipe2 for " + e.info.label + ": " + std::strerror(saved));
  }
  const pid_t parent = getpid();
  // Signals stay blocked from before fork until the child has reset the
  // parent's handlers: a SIGTERM from stop() reaching a child that has not
  // yet done so would run the parent's handler in the child (writing into
  // the parent's signal pipe) instead of ending it.
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t pid = fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) {
    const int saved = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    throw std::runtime_error("launch: fork for " + e.info.label + " (" + e.info.command + "): " + std::strerror(saved));
  }
  if (pid == 0) {
    // The parent's handlers write to its signal pipe; exec would reset them,
    // but a signal may come before exec. Caught signals go back to their
    // defaults (ignored ones stay ignored, as exec would leave them), then
    // the parent's mask comes back and a pending SIGTERM acts.
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction now {};
      if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, nullptr, &now) != 0) continue;
      if (now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, nullptr);
      }
    }
    setpgid(0, 0);
    // Dies with launch, even when launch is SIGKILLed; if launch is already
    // gone, getppid() no longer names it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    execvpe(argv_c[0], argv_c.data(), env_c.data());
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  // Both sides set the group, so it exists before either relies on it.
  (void)setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  e.info.pid = pid;
  e.out.fd = out[0];
  e.out.out_fd = out_fd_;
  e.err.fd = err[0];
  e.err.out_fd = err_fd_;
  for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  children_.push_back(std::move(e));
  return children_.size() - 1;
}

void ProcessGroup::forward(Entry& e, const Stream& s, const char* line, size_t n) {
  std::string text;
  text.reserve(e.info.label.size() + n + 4);
  text.append("[").append(e.info.label).append("] ").append(line, n).append("\n");
  write_all(s.out_fd, text);
  e.info.tail.emplace_back(line, std::min(n, kTailLineChars));
  if (e.info.tail.size() > kTailLines) e.info.tail.pop_front();
}

void ProcessGroup::pump(Entry& e, Stream& s) {
  if (s.fd < 0) return;
  char buf[16384];
  for (int turn = 0; turn < kReadsPerTurn; ++turn) {
    const ssize_t n = read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // EOF, or an error that ends the stream alike
      if (!s.partial.empty()) forward(e, s, s.partial.data(), s.partial.size());
      s.partial.clear();
      close(s.fd);
      s.fd = -1;
      return;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    size_t begin = 0;
    for (size_t nl; (nl = s.partial.find('\n', begin)) != std::string::npos; begin = nl + 1) {
      forward(e, s, s.partial.data() + begin, nl - begin);
    }
    s.partial.erase(0, begin);
    if (s.partial.size() >= kMaxPartial) {
      forward(e, s, s.partial.data(), s.partial.size());
      s.partial.clear();
    }
  }
}

bool ProcessGroup::try_reap(Entry& e) {
  if (e.info.exited) return false;
  int status = 0;
  pid_t r;
  while ((r = waitpid(e.info.pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == 0) return false;
  e.info.exited = true;
  // ECHILD would mean someone else reaped it; report it as ended.
  e.info.wait_status = r == e.info.pid ? status : -1;
  return true;
}

void ProcessGroup::signal_group(Entry& e, int sig) {
  // The group outlives its leader while anything it started still holds
  // the group id, so this also reaches a leader's leftover children.
  if (e.info.pid > 0) (void)kill(-e.info.pid, sig);
}

size_t ProcessGroup::running() const {
  return static_cast<size_t>(
      std::count_if(children_.begin(), children_.end(), [](const Entry& e) { return !e.info.exited; }));
}

std::string ProcessGroup::tail(size_t i) const {
  std::string t;
  for (const std::string& line : children_[i].info.tail) t += "\n    " + line;
  return t.empty() ? std::string("\n    (no output)") : t;
}

std::vector<size_t> ProcessGroup::wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<size_t> reaped;
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, Stream*>> streams;
  for (;;) {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (try_reap(children_[i])) {
        pump(children_[i], children_[i].out);  // drain what it wrote before its end
        pump(children_[i], children_[i].err);
        reaped.push_back(i);
      }
    }
    if (!reaped.empty()) return reaped;
    fds.clear();
    streams.clear();
    if (wake_fd_ >= 0) fds.push_back({wake_fd_, POLLIN, 0});
    for (size_t i = 0; i < children_.size(); ++i) {
      for (Stream* s : {&children_[i].out, &children_[i].err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.emplace_back(i, s);
      }
    }
    int wait_ms = ms_until(deadline);
    // Without a wake fd, a child whose pipes are closed is noticed by polling.
    if (wake_fd_ < 0 && running() > 0) wait_ms = std::min(wait_ms, 10);
    const int r = poll(fds.data(), fds.size(), wait_ms);
    if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("launch: poll: ") + std::strerror(errno));
    const size_t first_stream = wake_fd_ >= 0 ? 1 : 0;
    for (size_t k = 0; r > 0 && k < streams.size(); ++k) {
      if (fds[first_stream + k].revents != 0) pump(children_[streams[k].first], *streams[k].second);
    }
    const bool woken = wake_fd_ >= 0 && r > 0 && fds[0].revents != 0;
    if (woken || Clock::now() >= deadline) {
      for (size_t i = 0; i < children_.size(); ++i) {
        if (try_reap(children_[i])) {
          pump(children_[i], children_[i].out);
          pump(children_[i], children_[i].err);
          reaped.push_back(i);
        }
      }
      return reaped;
    }
  }
}

void ProcessGroup::stop(std::chrono::milliseconds grace, const std::function<bool()>& hurry) {
  for (Entry& e : children_) {
    if (!e.info.exited) e.info.stopped_by_us = true;
    if (!e.info.exited || e.out.fd >= 0 || e.err.fd >= 0) signal_group(e, SIGTERM);
  }
  const auto deadline = Clock::now() + grace;
  while (running() > 0 && Clock::now() < deadline) {
    (void)wait(std::chrono::milliseconds(ms_until(deadline)));
    pollfd p{wake_fd_, POLLIN, 0};
    if (wake_fd_ >= 0 && poll(&p, 1, 0) > 0) {
      if (hurry) {
        if (hurry()) break;
      } else {
        char buf[64];
        while (read(wake_fd_, buf, sizeof buf) > 0) {
        }
      }
    }
  }
  for (Entry& e : children_) {
    if (!e.info.exited || e.out.fd >= 0 || e.err.fd >= 0) signal_group(e, SIGKILL);
  }
  for (Entry& e : children_) {
    if (e.info.exited) continue;
    int status = 0;
    while (waitpid(e.info.pid, &status, 0) < 0 && errno == EINTR) {
    }
    e.info.exited = true;
    e.info.wait_status = status;
    pump(e, e.out);
    pump(e, e.err);
  }
}

}  // namespace parafab::apps
