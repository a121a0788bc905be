// A second process for the rdma tests: opens an endpoint, prints its
// address and a registered region's key (hex, one line each), reads the
// test's address from stdin, adds it and prints "ready", then echoes every
// message until killed or until stdin closes.
//   rdma_peer_process PROVIDER
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "rdma/endpoint.h"
#include "tests/rdma/endpoint_test_util.h"

int main(int argc, char** argv) {
  using namespace parafab::rdma;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PROVIDER\n", argv[0]);
    return 2;
  }
  Endpoint ep(parafab::rdma::testing::options_for(argv[1]));
  auto region = parafab::rdma::testing::pattern(1, 0, 1 << 20);
  MemoryRegion mr = ep.register_memory(region.data(), region.size(), kRemoteRead);
  std::vector<std::byte> key(RemoteKey::kEncodedBytes);
  mr.remote_key().encode(key.data());
  using parafab::rdma::testing::from_hex;
  using parafab::rdma::testing::to_hex;
  std::cout << to_hex(ep.address()) << "\n" << to_hex(key) << std::endl;
  std::string peer;
  if (!std::getline(std::cin, peer)) return 1;
  ep.add_peer(0, from_hex(peer));
  // Only now would a message from the test be accepted (unknown senders are dropped).
  std::cout << "ready" << std::endl;
  // Echo every message back until stdin closes (or a SIGKILL).
  // peek() only when poll() says stdin has data or is closed: a blocking
  // peek while a slow message (a sanitizer build) is still arriving would
  // stop the echo until the test writes again, which it never does.
  for (;;) {
    auto m = ep.receive(std::chrono::milliseconds(100));
    if (m) (void)ep.send(0, m->tag, m->data.data(), m->data.size()).get();
    pollfd in{.fd = 0, .events = POLLIN, .revents = 0};
    if (!m && ::poll(&in, 1, 0) > 0 && std::cin.peek() == EOF) break;
  }
  return 0;
}
