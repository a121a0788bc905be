// A small LAN of network namespaces for tests that need separate addresses:
// a hub namespace holding a bridge, and N host namespaces, each with one
// veth (named veth0 inside) on the bridge at 10.211.0.(10 + i)/24. Nothing
// routes out of it. Host i's link can be cut and restored from the hub side.
//
//   testing::NetnsLan lan(5);           // throws NetnsUnavailable without the rights
//   lan.address(2);                     // "10.211.0.12"
//   lan.run_in(2, "ip addr");           // a shell command inside host 2
//   lan.set_link(2, false);             // cut host 2 off the bridge
//
// Everything is removed when the object goes (deleting a namespace deletes
// its veth ends).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace parafab::testing {

class NetnsUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NetnsLan {
 public:
  explicit NetnsLan(int hosts) : tag_("pf" + std::to_string(::getpid() % 1000000)) {
    if (::geteuid() != 0) throw NetnsUnavailable("not root: ip netns needs CAP_SYS_ADMIN and CAP_NET_ADMIN");
    if (std::system("command -v ip >/dev/null 2>&1") != 0) throw NetnsUnavailable("no ip command (iproute2)");
    if (!sh("ip netns add " + hub() + " 2>/dev/null")) {
      throw NetnsUnavailable("ip netns add failed (no rights to make network namespaces here)");
    }
    made_.push_back(hub());
    try {
      build(hosts);
    } catch (...) {
      remove_all();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  ~NetnsLan() { remove_all(); }
  NetnsLan(const NetnsLan&) = delete;
  NetnsLan& operator=(const NetnsLan&) = delete;

  static std::string address(int i) { return "10.211.0." + std::to_string(10 + i); }
  std::string host_ns(int i) const { return tag_ + "n" + std::to_string(i); }
  // Host i's link up or down, at the bridge.
  void set_link(int i, bool up) {
    need("ip netns exec " + hub() + " ip link set " + hub_end(i) + (up ? " up" : " down"));
  }
  bool run_in(int i, const std::string& command) const { return sh("ip netns exec " + host_ns(i) + " " + command); }

 private:
  void build(int hosts) {
    need("ip netns exec " + hub() + " ip link add br0 type bridge && ip netns exec " + hub() +
         " ip link set br0 up");
    for (int i = 0; i < hosts; ++i) {
      const std::string ns = host_ns(i), inner = tag_ + "v" + std::to_string(i), outer = hub_end(i);
      need("ip netns add " + ns);
      made_.push_back(ns);
      need("ip link add " + inner + " type veth peer name " + outer);
      need("ip link set " + inner + " netns " + ns + " && ip link set " + outer + " netns " + hub());
      need("ip netns exec " + ns + " ip link set " + inner + " name veth0");
      need("ip netns exec " + ns + " ip addr add " + address(i) + "/24 dev veth0");
      need("ip netns exec " + ns + " ip link set veth0 up && ip netns exec " + ns + " ip link set lo up");
      need("ip netns exec " + hub() + " ip link set " + outer + " master br0 && ip netns exec " + hub() +
           " ip link set " + outer + " up");
    }
  }
  void remove_all() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) sh("ip netns del " + *it + " 2>/dev/null");
    made_.clear();
  }
  std::string hub() const { return tag_ + "h"; }
  std::string hub_end(int i) const { return tag_ + "p" + std::to_string(i); }
  static bool sh(const std::string& command) { return std::system(command.c_str()) == 0; }
  static void need(const std::string& command) {
    if (!sh(command)) throw std::runtime_error("netns set-up failed: " + command);
  }

  std::string tag_;
  std::vector<std::string> made_;
};

}  // namespace parafab::testing
