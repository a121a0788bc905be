// The scheduler's address as the flags and variables carry it
// (apps/cluster_flags.h): HOST:PORT and [IPV6]:PORT read and written back,
// bad ones refused naming the text; and --join-timeout's variable, which
// launch and node set for their workers.
#include "apps/cluster_flags.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace parafab::apps {
namespace {

std::string error_of(const std::string& text) {
  try {
    (void)parse_host_port(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(HostPort, HostsAndIpv6AddressesWithTheirPorts) {
  const std::pair<std::string, HostPort> cases[] = {
      {"head.example:9000", {"head.example", 9000}},
      {"10.0.0.5:1", {"10.0.0.5", 1}},
      {"[fe80::1]:9737", {"fe80::1", 9737}},
      {"[::1]:65535", {"::1", 65535}},
      {"fe80::1:9737", {"fe80::1", 9737}},  // no brackets: split at the last colon
  };
  for (const auto& [text, want] : cases) {
    const HostPort got = parse_host_port(text);
    EXPECT_EQ(got.host, want.host) << text;
    EXPECT_EQ(got.port, want.port) << text;
  }
}

TEST(HostPort, WrittenAddressesReadBackTheSame) {
  for (const auto& [host, port] : {std::pair<std::string, uint16_t>{"head.example", 9000}, {"10.0.0.5", 1},
                                   {"fe80::1", 9737}, {"2001:db8::17", 443}}) {
    const std::string text = format_host_port(host, port);
    EXPECT_EQ(text.find(':') != text.rfind(':'), text.front() == '[') << text;  // brackets exactly for IPv6
    const HostPort back = parse_host_port(text);
    EXPECT_EQ(back.host, host) << text;
    EXPECT_EQ(back.port, port) << text;
  }
  EXPECT_EQ(format_host_port("fe80::1", 9737), "[fe80::1]:9737");
  EXPECT_EQ(format_host_port("head", 9000), "head:9000");
}

TEST(HostPort, BadAddressesAreNamed) {
  for (const std::string text : {"head", ":9000", "head:0", "head:65536", "head:x", "[fe80::1", "[fe80::1]",
                                  "[fe80::1]9000", "[]:9000", "[fe80::1]:", "[fe80::1]:0"}) {
    const std::string msg = error_of(text);
    EXPECT_NE(msg.find("'" + text + "'"), std::string::npos) << text << " -> " << msg;
  }
}

// add_cluster_flags' --join-timeout: the flag, else PARAFAB_JOIN_TIMEOUT,
// else 60.
double join_timeout_of(const std::vector<std::string>& args) {
  CLI::App app("t");
  ClusterFlags f;
  add_cluster_flags(&app, f);
  std::vector<std::string> argv = args;
  std::reverse(argv.begin(), argv.end());  // CLI11 parses a reversed vector
  app.parse(argv);
  return f.join_timeout_s;
}

TEST(JoinTimeout, TheFlagElseTheVariableElseSixty) {
  ::unsetenv("PARAFAB_JOIN_TIMEOUT");
  EXPECT_EQ(join_timeout_of({}), 60.0);
  ::setenv("PARAFAB_JOIN_TIMEOUT", "300", 1);
  EXPECT_EQ(join_timeout_of({}), 300.0);
  EXPECT_EQ(join_timeout_of({"--join-timeout", "2.5"}), 2.5);
  ::setenv("PARAFAB_JOIN_TIMEOUT", "0", 1);
  EXPECT_THROW(join_timeout_of({}), CLI::ValidationError);
  ::unsetenv("PARAFAB_JOIN_TIMEOUT");
}

}  // namespace
}  // namespace parafab::apps
