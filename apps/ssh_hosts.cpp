#include "apps/ssh_hosts.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace parafab::apps {
namespace {

// How the remote side ends with its ssh session.
//
// Without a tty, sshd sends the remote command no SIGHUP when the session
// ends: killing the ssh client closes the connection, and a remote process
// that neither reads stdin nor writes lives on. `ssh -tt` would give it a
// SIGHUP, but a pty mixes stderr into stdout, rewrites newlines and lets a
// process that ignores SIGHUP survive. So the remote login shell runs this
// wrapper instead: the command in a session (and process group) of its own
// with stdin from /dev/null, and a watcher that reads the ssh channel's
// stdin; at EOF (launch closed the pipe it holds open as every ssh client's
// stdin, launch died, or the connection broke) the watcher sends SIGTERM to
// the command's group, and SIGKILL after the grace. The wrapper waits for
// the command, kills the watcher and what the command left in its group,
// and exits with the command's status, which ssh returns to launch.
// The watcher's output goes to /dev/null so that sshd, which closes the
// session once the command's stdout and stderr are closed, never waits for it.
// `setsid` runs in a background child that is not a group leader, so it
// does not fork: $! is the new group's id. Each kill names the pid as well
// as the group, for the moment before the child has called setsid().
// Positional parameters: $1 directory, $2 grace seconds, then the command.
// dash's kill wants `-s SIG -- -PGID`.
constexpr const char* kRemoteWrapper =
    "cd \"$1\" || { echo \"parafab launch: cannot change to directory $1 on $(hostname)\" >&2; exit 126; }; "
    "g=$2; shift 2; "
    "exec 3<&0 </dev/null; "
    "setsid \"$@\" 3<&- & p=$!; "
    "setsid sh -c 'cat >/dev/null; kill -s TERM -- -\"$1\" \"$1\"; sleep \"$2\"; "
    "kill -s KILL -- -\"$1\" \"$1\"' watch \"$p\" \"$g\" <&3 >/dev/null 2>&1 & w=$!; "
    "exec 3<&-; "
    "wait \"$p\"; s=$?; "
    "kill -s KILL -- -\"$w\" \"$w\" 2>/dev/null; kill -s KILL -- -\"$p\" 2>/dev/null; "
    "exit \"$s\"";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

template <typename T>
bool parse_uint(const std::string& text, T& out, T min, T max) {
  unsigned long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v < min || v > max) return false;
  out = static_cast<T>(v);
  return true;
}

// [user@]host[:port] or [user@][v6addr][:port].
SshHost parse_host(const std::string& word, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("{}: host '{}': {}", where, word, why));
  };
  if (word[0] == '-') throw bad("a host may not start with '-' (ssh would read it as an option)");
  SshHost h;
  h.where = where;
  const size_t at = word.rfind('@');
  const std::string user = at == std::string::npos ? std::string() : word.substr(0, at + 1);
  if (at != std::string::npos && at == 0) throw bad("empty user before '@'");
  std::string rest = at == std::string::npos ? word : word.substr(at + 1);
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) throw bad("'[' without ']'");
    h.address = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') throw bad("expected ':PORT' after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) throw bad("empty port after ':'");
    }
  } else {
    const size_t colon = rest.find(':');
    if (colon != std::string::npos && rest.find(':', colon + 1) != std::string::npos) {
      throw bad("an IPv6 address with a port goes in brackets: [ADDRESS]:PORT");
    }
    h.address = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) throw bad("empty port after ':'");
    }
  }
  if (h.address.empty()) throw bad("no host name");
  if (!port_text.empty()) {
    uint16_t port = 0;
    if (!parse_uint<uint16_t>(port_text, port, 1, 65535)) throw bad(fmt::format("port '{}' is not 1..65535", port_text));
    h.port = port;
  }
  h.destination = user + h.address;
  return h;
}

}  // namespace

std::vector<SshHost> parse_hostfile(const std::string& text, const std::string& name) {
  std::vector<SshHost> hosts;
  std::map<std::string, std::string> seen;  // destination:port -> where
  std::istringstream in(text);
  size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::string where = fmt::format("{}:{}", name, number);
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string word;
    words >> word;
    SshHost h = parse_host(word, where);
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (key != "slots" || eq == std::string::npos) {
        throw std::invalid_argument(fmt::format("{}: unknown field '{}' (a line is: HOST [slots=N])", where, word));
      }
      if (h.slots) throw std::invalid_argument(fmt::format("{}: slots given twice", where));
      uint32_t slots = 0;
      if (!parse_uint<uint32_t>(word.substr(eq + 1), slots, 1, 1u << 20)) {
        throw std::invalid_argument(fmt::format("{}: '{}': slots must be a whole number >= 1", where, word));
      }
      h.slots = slots;
    }
    const std::string key = h.destination + ":" + (h.port ? std::to_string(*h.port) : std::string());
    if (const auto it = seen.find(key); it != seen.end()) {
      throw std::invalid_argument(
          fmt::format("{}: host '{}' is already listed at {} (give it slots=N instead)", where, h.destination, it->second));
    }
    seen.emplace(key, where);
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) throw std::invalid_argument(fmt::format("{}: no host (a line is: HOST [slots=N])", name));
  return hosts;
}

std::vector<SshHost> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(fmt::format("--hostfile {}: cannot read it", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::vector<size_t> place_round_robin(const std::vector<SshHost>& hosts, size_t processes,
                                      const std::string& hostfile) {
  if (hosts.empty()) throw std::invalid_argument(fmt::format("{}: no host", hostfile));
  const bool capped = std::all_of(hosts.begin(), hosts.end(), [](const SshHost& h) { return h.slots.has_value(); });
  if (capped) {
    size_t total = 0;
    for (const SshHost& h : hosts) total += *h.slots;
    if (total < processes) {
      throw std::invalid_argument(fmt::format(
          "{}: {} slots on {} host{}, but the job has {} processes (1 scheduler + servers + workers); add hosts or "
          "slots",
          hostfile, total, hosts.size(), hosts.size() == 1 ? "" : "s", processes));
    }
  }
  std::vector<size_t> used(hosts.size(), 0), at;
  size_t next = 0;
  for (size_t g = 0; g < processes; ++g) {
    // A free host exists: either one has no cap, or the total covers the job.
    while (hosts[next].slots && used[next] >= *hosts[next].slots) next = (next + 1) % hosts.size();
    at.push_back(next);
    ++used[next];
    next = (next + 1) % hosts.size();
  }
  return at;
}

std::string shell_quote(const std::string& text) {
  const bool safe = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_-+=/.,:@%").find(c) != std::string_view::npos;
  });
  if (safe) return text;
  std::string q = "'";
  for (const char c : text) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::string remote_command(const std::string& cwd, double grace_s, const std::vector<std::string>& env,
                           const std::vector<std::string>& argv) {
  std::string cmd = "exec sh -c " + shell_quote(kRemoteWrapper) + " parafab-launch " + shell_quote(cwd) + " " +
                    shell_quote(fmt::format("{}", std::max(0.0, grace_s))) + " env";
  for (const std::string& e : env) cmd += " " + shell_quote(e);
  for (const std::string& a : argv) cmd += " " + shell_quote(a);
  return cmd;
}

std::vector<std::string> ssh_argv(const SshHost& host, const SshOptions& options, const std::string& command) {
  // -T: no tty (see kRemoteWrapper); -x: no X11; BatchMode: fail rather than
  // ask for a password or a host key confirmation nobody can answer.
  std::vector<std::string> argv = {options.program, "-o", "BatchMode=yes", "-T", "-x"};
  const std::optional<uint16_t> port = host.port ? host.port : options.port;
  if (port) {
    argv.push_back("-p");
    argv.push_back(std::to_string(*port));
  }
  for (const std::string& o : options.options) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  argv.push_back(host.destination);
  argv.push_back(command);
  return argv;
}

std::string describe_ssh_exit(int exit_status) {
  switch (exit_status) {
    case 255:
      return "exit status 255 (ssh failed: could not connect or log in, or the connection broke)";
    case 126:
      return "exit status 126 (on the host: cannot change to the working directory, or cannot execute the command)";
    case 127:
      return "exit status 127 (on the host: command not found)";
    default:
      return fmt::format("exit status {}", exit_status);
  }
}

}  // namespace parafab::apps
