#include "apps/host_port.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <charconv>
#include <stdexcept>
#include <string_view>

namespace parafab::apps {
namespace {

// An IPv6 address as inet_pton reads it, with an optional %zone (fe80::1%eth0).
bool is_ipv6(const std::string& text) {
  const std::string address = text.substr(0, text.find('%'));
  in6_addr out{};
  return inet_pton(AF_INET6, address.c_str(), &out) == 1;
}

bool is_port(std::string_view text) {
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() && port >= 1 && port <= 65535;
}

}  // namespace

HostPort parse_host_port(const std::string& text, const std::string& lead, PortRule rule) {
  auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("{}'{}': {}", lead, text, why));
  };
  const bool required = rule == PortRule::kRequired;
  const char* forms = required ? "expected HOST:PORT or [IPV6]:PORT" : "expected HOST, HOST:PORT, [IPV6] or [IPV6]:PORT";
  HostPort hp;
  std::string_view port_text;
  bool has_port = false, bracketed = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) throw bad(fmt::format("'[' without ']' ({})", forms));
    hp.host = text.substr(1, close - 1);
    bracketed = true;
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw bad(fmt::format("expected ':PORT' after ']' ({})", forms));
      port_text = std::string_view(text).substr(close + 2);
      has_port = true;
    }
  } else if (const size_t colon = text.find(':'); colon != std::string::npos && text.rfind(':') == colon) {
    hp.host = text.substr(0, colon);
    port_text = std::string_view(text).substr(colon + 1);
    has_port = true;
  } else if (colon != std::string::npos) {
    // Several colons: an IPv6 address without brackets, and nothing else.
    if (!is_ipv6(text)) throw bad(fmt::format("not an IPv6 address, and a host has no colon ({})", forms));
    hp.host = text;
  } else {
    hp.host = text;
  }
  if (hp.host.empty()) throw bad("no host");
  if (has_port) {
    if (!is_port(port_text)) throw bad("the port must be a number 1-65535");
    hp.port = static_cast<uint16_t>(std::stoul(std::string(port_text)));
  } else if (required) {
    if (bracketed) throw bad("no port (expected [IPV6]:PORT)");
    if (hp.host.find(':') == std::string::npos) throw bad("no port (expected HOST:PORT)");
    // A bare IPv6 address: its last group may have been meant as the port.
    const size_t last = text.rfind(':');
    const std::string head = text.substr(0, last);
    const std::string_view tail = std::string_view(text).substr(last + 1);
    throw bad(is_ipv6(head) && is_port(tail)
                  ? fmt::format("no port: an IPv6 address with a port goes in brackets, [{}]:{} if {} is the port, "
                                "[{}]:PORT if it is part of the address",
                                head, tail, tail, text)
                  : fmt::format("no port: an IPv6 address with a port goes in brackets, [{}]:PORT", text));
  }
  return hp;
}

std::string format_host_port(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

}  // namespace parafab::apps
