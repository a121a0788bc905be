#include "apps/host_port.h"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>
#include <string_view>

namespace parafab::apps {

HostPort parse_host_port(const std::string& text, const std::string& lead, PortRule rule) {
  auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("{}'{}': {}", lead, text, why));
  };
  HostPort hp;
  std::string_view port_text;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) throw bad("'[' without ']' (expected [IPV6] or [IPV6]:PORT)");
    hp.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw bad("expected ':PORT' after ']'");
      port_text = std::string_view(text).substr(close + 2);
      has_port = true;
    }
  } else if (const size_t colon = text.find(':'); colon != std::string::npos && text.rfind(':') == colon) {
    hp.host = text.substr(0, colon);
    port_text = std::string_view(text).substr(colon + 1);
    has_port = true;
  } else {
    hp.host = text;  // no colon, or a bare IPv6 address
  }
  if (hp.host.empty()) throw bad("no host");
  if (has_port) {
    unsigned port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      throw bad("the port must be a number 1-65535");
    }
    hp.port = static_cast<uint16_t>(port);
  } else if (rule == PortRule::kRequired) {
    throw bad(hp.host.find(':') == std::string::npos
                  ? "no port (expected HOST:PORT)"
                  : "no port: an IPv6 address is written in brackets, [" + hp.host + "]:PORT, so that its last "
                    "group is not read as the port");
  }
  return hp;
}

std::string format_host_port(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

}  // namespace parafab::apps
