#include "benchmarks/pingpong_ceiling.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "benchmarks/child_process.h"

namespace parafab::benchmarks {
namespace {

using Clock = ChildProcess::Clock;

std::vector<std::string_view> split_blanks(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::optional<uint64_t> parse_uint(std::string_view s) {
  uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// A plain decimal real: digits with at most one '.', nothing else (printf's
// "%.2f" of fi_pingpong; "inf"/"nan" are refused).
std::optional<double> parse_real(std::string_view s) {
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '-') return std::nullopt;
  }
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// cnt_str: a decimal count with an optional k/m/b (10^3, 10^6, 10^9), truncated.
std::optional<uint64_t> parse_count(std::string_view s) {
  uint64_t scale = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': scale = 1000; break;
      case 'm': scale = 1000000; break;
      case 'b': scale = 1000000000; break;
      default: break;
    }
    if (scale != 1) s.remove_suffix(1);
  }
  const auto v = parse_uint(s);
  if (!v) return std::nullopt;
  return *v * scale;
}

uint16_t free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// 1: a socket listens on `port` (any address); 0: none yet; -1: cannot tell.
int listening_on(uint16_t port) {
  std::ifstream f("/proc/net/tcp");
  if (!f) return -1;
  std::string line;
  std::getline(f, line);  // header
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::getline(f, line)) {
    const auto cols = split_blanks(line);
    // sl local_address rem_address st ...; st 0A is TCP_LISTEN.
    if (cols.size() > 3 && cols[1].size() > 5 && cols[1].substr(cols[1].size() - 5) == want && cols[3] == "0A") {
      return 1;
    }
  }
  return 0;
}

// The last few non-blank lines of a child's output, joined by " | ".
std::string last_lines(const std::string& text, size_t max_lines = 4) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(l);
  }
  if (lines.empty()) return "(no output)";
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i) {
    out += (out.empty() ? "" : " | ") + lines[i];
  }
  return out;
}

}  // namespace

std::optional<uint64_t> parse_pingpong_size(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t base = 1;
  switch (s.back()) {
    case 'k': base = uint64_t{1} << 10; break;
    case 'm': base = uint64_t{1} << 20; break;
    case 'g': base = uint64_t{1} << 30; break;
    default: break;
  }
  if (base != 1) s.remove_suffix(1);
  const size_t dot = s.find('.');
  const auto whole = parse_uint(s.substr(0, dot));
  if (!whole) return std::nullopt;
  uint64_t tenths = 0;
  if (dot != std::string_view::npos) {
    const auto t = parse_uint(s.substr(dot + 1));
    if (!t || s.size() - dot - 1 != 1) return std::nullopt;  // size_str prints one digit
    tenths = *t;
  }
  return *whole * base + tenths * base / 10;
}

std::optional<PingpongFigures> parse_pingpong_line(std::string_view line) {
  // bytes  #sent  [=+-]#ack  total  <seconds>s  MB/sec  usec/xfer  Mxfers/sec
  const auto t = split_blanks(line);
  if (t.size() != 8) return std::nullopt;
  PingpongFigures f;
  const auto bytes = parse_pingpong_size(t[0]);
  const auto sent = parse_count(t[1]);
  const bool ack_ok = t[2].size() > 1 && (t[2][0] == '=' || t[2][0] == '+' || t[2][0] == '-') &&
                      parse_count(t[2].substr(1)).has_value();
  const auto total = parse_pingpong_size(t[3]);
  if (!bytes || !sent || !ack_ok || !total || t[4].size() < 2 || t[4].back() != 's') return std::nullopt;
  const auto seconds = parse_real(t[4].substr(0, t[4].size() - 1));
  const auto mbps = parse_real(t[5]);
  const auto usec = parse_real(t[6]);
  const auto mxfers = parse_real(t[7]);
  if (!seconds || !mbps || !usec || !mxfers) return std::nullopt;
  f.bytes = *bytes;
  f.sent = *sent;
  f.seconds = *seconds;
  f.mb_per_s = *mbps;
  f.usec_per_xfer = *usec;
  return f;
}

std::vector<PingpongFigures> parse_pingpong_output(std::string_view text) {
  std::vector<PingpongFigures> rows;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (auto f = parse_pingpong_line(text.substr(start, end - start))) rows.push_back(*f);
    start = end + 1;
  }
  return rows;
}

PingpongCeiling measure_fi_pingpong(const PingpongCeilingOptions& o) {
  PingpongCeiling result;
  const auto deadline = Clock::now() + o.timeout;
  const uint16_t port = free_local_port();
  if (port == 0) {
    result.error = "no free TCP port on 127.0.0.1 for fi_pingpong's control connection";
    return result;
  }
  const std::vector<std::string> common{o.executable, "-p", o.provider,  "-e", "rdm", "-m", "tagged",
                                        "-I",         std::to_string(o.iterations), "-S", std::to_string(o.bytes)};
  // fi_pingpong's tcp provider would otherwise pick the first interface, not loopback.
  const std::vector<std::string> env{"FI_TCP_IFACE=lo"};
  auto server_argv = common;
  server_argv.insert(server_argv.end(), {"-B", std::to_string(port)});
  auto client_argv = common;
  client_argv.insert(client_argv.end(), {"-P", std::to_string(port), o.host});
  for (const auto& a : client_argv) result.command += (result.command.empty() ? "" : " ") + a;

  std::unique_ptr<ChildProcess> server;
  try {
    server = std::make_unique<ChildProcess>(server_argv, env);
  } catch (const std::exception& e) {
    result.error = e.what();
    return result;
  }
  // The client connects once and gives up when nobody listens: wait for the
  // server's listening socket (/proc/net/tcp); where that cannot be read,
  // retry a client that failed to connect instead.
  bool can_tell = true;
  while (Clock::now() < deadline) {
    server->pump();
    if (server->try_reap()) break;
    const int l = listening_on(port);
    if (l != 0) {
      can_tell = l > 0;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (server->try_reap()) {
    server->pump();
    result.error = "fi_pingpong server (" + server->command() + ") ended before listening, " +
                   server->describe_end() + ": " + last_lines(server->output());
    if (server->exit_code() == 127) result.error = "fi_pingpong not found: " + result.error;
    return result;
  }
  std::unique_ptr<ChildProcess> client;
  for (int attempt = 0;; ++attempt) {
    try {
      client = std::make_unique<ChildProcess>(client_argv, env);
    } catch (const std::exception& e) {
      result.error = e.what();
      return result;  // ~server kills it
    }
    if (can_tell) break;
    // Cannot see the listener: let a client that fails to connect fail
    // fast, and try again while the server runs.
    const auto quick = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
    if (!wait_for_exit({client.get()}, quick) || client->exit_code() == 0 ||
        client->output().find("failed to connect") == std::string::npos || attempt >= 50 ||
        server->try_reap()) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool in_time = wait_for_exit({server.get(), client.get()}, deadline);
  if (!in_time) {
    result.error = "fi_pingpong did not finish within " + std::to_string(o.timeout.count()) +
                   " ms and was killed; client: " + last_lines(client->output()) +
                   "; server: " + last_lines(server->output());
    return result;
  }
  if (client->exit_code() != 0) {
    result.error = "fi_pingpong client " + client->describe_end() + ": " + last_lines(client->output()) +
                   "; server " + server->describe_end() + ": " + last_lines(server->output());
    return result;
  }
  const auto rows = parse_pingpong_output(client->output());
  if (rows.empty()) {
    result.error = "no result row in fi_pingpong's output: " + last_lines(client->output());
    return result;
  }
  result.figures = rows.back();
  return result;
}

}  // namespace parafab::benchmarks
