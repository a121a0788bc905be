// The scheduler's address as the flags and variables carry it
// (apps/host_port.h): HOST:PORT and [IPV6]:PORT read and written back, one
// grammar whether the port is required (--scheduler) or not
// (PARAFAB_SCHEDULER for parafab node), bad ones refused naming the text;
// and --join-timeout's variable, which launch and node set for their workers.
#include "apps/host_port.h"

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

HostPort parse_required(const std::string& text) {
  return parse_host_port(text, "scheduler address ", PortRule::kRequired);
}

std::string error_of(const std::string& text, PortRule rule = PortRule::kRequired) {
  try {
    (void)parse_host_port(text, "scheduler address ", rule);
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
  };
  for (const auto& [text, want] : cases) {
    for (const PortRule rule : {PortRule::kRequired, PortRule::kOptional}) {
      const HostPort got = parse_host_port(text, "x=", rule);
      EXPECT_EQ(got.host, want.host) << text;
      EXPECT_EQ(got.port, want.port) << text;
    }
  }
}

// Without brackets, two or more colons are an IPv6 address and nothing
// else: never split at a colon that may belong to it (fe80::1:9737 is an
// address of its own), whether or not a port is required.
TEST(HostPort, ABareIpv6AddressHasNoPortUnderEitherRule) {
  for (const std::string text : {"fe80::1", "fe80::1:9737", "::1", "2001:db8::17"}) {
    const HostPort got = parse_host_port(text, "x=", PortRule::kOptional);
    EXPECT_EQ(got.host, text);
    EXPECT_FALSE(got.port.has_value()) << text;
    const std::string msg = error_of(text);
    EXPECT_NE(msg.find("'" + text + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[" + text + "]:PORT"), std::string::npos) << msg;  // how to write it with a port
  }
}

// The hint names both readings of an address whose last group could be a
// port; a bracketed address without one is told so without the IPv6 lesson.
TEST(HostPort, AMissingPortIsExplainedForTheFormGiven) {
  const std::string both = error_of("fe80::1:9737");
  EXPECT_NE(both.find("[fe80::1]:9737 if 9737 is the port"), std::string::npos) << both;
  EXPECT_NE(both.find("[fe80::1:9737]:PORT if it is part of the address"), std::string::npos) << both;
  EXPECT_NE(error_of("[fe80::1]").find("no port (expected [IPV6]:PORT)"), std::string::npos);
  EXPECT_NE(error_of("head").find("no port (expected HOST:PORT)"), std::string::npos);
  // A scoped address keeps its zone.
  EXPECT_EQ(parse_host_port("fe80::1%eth0", "x=", PortRule::kOptional).host, "fe80::1%eth0");
  EXPECT_EQ(parse_host_port("[fe80::1%eth0]:9737", "x=", PortRule::kRequired).host, "fe80::1%eth0");
}

// Several colons that are not an IPv6 address are a typo, not a host.
TEST(HostPort, SeveralColonsThatAreNoIpv6AddressAreRefusedEverywhere) {
  for (const std::string text : {"head::9000", "head:9000:", "a:b:c", "::1::2", ":::"}) {
    for (const PortRule rule : {PortRule::kRequired, PortRule::kOptional}) {
      const std::string msg = error_of(text, rule);
      EXPECT_NE(msg.find("'" + text + "': not an IPv6 address"), std::string::npos) << text << " -> " << msg;
    }
  }
}

TEST(HostPort, APortMayBeLeftOutOnlyWhereItIsOptional) {
  for (const auto& [text, host] : {std::pair<std::string, std::string>{"head.example", "head.example"},
                                   {"10.0.0.5", "10.0.0.5"}, {"[fe80::1]", "fe80::1"}}) {
    const HostPort got = parse_host_port(text, "x=", PortRule::kOptional);
    EXPECT_EQ(got.host, host);
    EXPECT_FALSE(got.port.has_value()) << text;
    EXPECT_NE(error_of(text).find("no port"), std::string::npos) << text;
  }
}

TEST(HostPort, WrittenAddressesReadBackTheSame) {
  for (const auto& [host, port] : {std::pair<std::string, uint16_t>{"head.example", 9000}, {"10.0.0.5", 1},
                                   {"fe80::1", 9737}, {"2001:db8::17", 443}}) {
    const std::string text = format_host_port(host, port);
    EXPECT_EQ(text.find(':') != text.rfind(':'), text.front() == '[') << text;  // brackets exactly for IPv6
    const HostPort back = parse_required(text);
    EXPECT_EQ(back.host, host) << text;
    EXPECT_EQ(back.port, port) << text;
  }
  EXPECT_EQ(format_host_port("fe80::1", 9737), "[fe80::1]:9737");
  EXPECT_EQ(format_host_port("head", 9000), "head:9000");
}

TEST(HostPort, BadAddressesAreNamed) {
  for (const std::string text : {"head", ":9000", ":", "", "[", "[]", "head:0", "head:65536", "head:99999999999",
                                  "head:x", "head:+1", "head: 1", "[fe80::1", "[fe80::1]", "[fe80::1]9000", "[]:9000",
                                  "[fe80::1]:", "[::1]:", "[fe80::1]:0"}) {
    const std::string msg = error_of(text);
    EXPECT_EQ(msg.find("scheduler address '" + text + "': "), 0u) << text << " -> " << msg;
  }
  // The same texts, but for "head" and "[fe80::1]", are wrong where the port is optional too.
  for (const std::string text : {":9000", ":", "", "head:0", "head:65536", "head:x", "[", "[fe80::1", "[fe80::1]9000",
                                  "[]:9000", "[fe80::1]:", "[fe80::1]:0", "[]"}) {
    EXPECT_NE(error_of(text, PortRule::kOptional).find("'" + text + "'"), std::string::npos) << text;
  }
  EXPECT_NE(error_of("[fe80::1").find("without ']'"), std::string::npos);
  EXPECT_NE(error_of(":9000").find("no host"), std::string::npos);
  EXPECT_NE(error_of("head:65536").find("1-65535"), std::string::npos);
}

TEST(HostPort, TheClusterFlagsRequireAPort) {
  ClusterFlags f;
  f.scheduler = "[fe80::1]:9737";
  EXPECT_EQ(scheduler_address(f).port, std::optional<uint16_t>(9737));
  f.scheduler = "fe80::1";
  try {
    (void)scheduler_address(f);
    ADD_FAILURE() << "a scheduler address without a port was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--scheduler or PARAFAB_SCHEDULER"), std::string::npos) << e.what();
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
