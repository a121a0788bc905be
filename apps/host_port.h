// The scheduler's address as flags and variables carry it (--scheduler,
// PARAFAB_SCHEDULER), one grammar wherever it is read:
//
//   HOST[:PORT]     a name or IPv4 address (HOST has no colon)
//   [IPV6][:PORT]   an IPv6 address in brackets
//   IPV6            a bare IPv6 address (two or more colons, as inet_pton
//                   reads it, with an optional %zone): never a port
//
// So "fe80::1:9737" is the address fe80::1:9737 with no port, wherever it is
// read: where a port is required it is refused, naming both bracketed forms
// ([fe80::1]:9737 if 9737 was meant as the port), rather than split at a
// colon that may belong to the address. Text with several colons that is
// not an IPv6 address ("head::9000") is refused everywhere.
//
//   apps::HostPort a = apps::parse_host_port("[fe80::1]:9737", "scheduler address ", apps::PortRule::kRequired);
//   // a.host == "fe80::1", *a.port == 9737
//   std::string s = apps::format_host_port("fe80::1", 9737);   // "[fe80::1]:9737"
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace parafab::apps {

struct HostPort {
  std::string host;
  std::optional<uint16_t> port;  // always set under PortRule::kRequired
};

enum class PortRule { kRequired, kOptional };

// `lead` names where the text came from, as the error's first words:
// "PARAFAB_SCHEDULER=" or "scheduler address " (the text follows in
// quotes). Throws std::invalid_argument "LEAD'TEXT': what is wrong" for an
// empty host, a bracket not closed, several colons that are not an IPv6
// address, a port that is not a number 1-65535, or no port where one is
// required.
HostPort parse_host_port(const std::string& text, const std::string& lead, PortRule rule);
// What parse_host_port reads back: "HOST:PORT", or "[IPV6]:PORT" for a host
// with a colon.
std::string format_host_port(const std::string& host, uint16_t port);

}  // namespace parafab::apps
