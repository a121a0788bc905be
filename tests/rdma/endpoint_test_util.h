// Shared pieces of the rdma tests: endpoint options per provider, a mesh of
// endpoints that know each other, and byte patterns where every byte of
// every message and peer differs, so a misplaced byte shows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rdma/endpoint.h"

namespace parafab::rdma::testing {

inline EndpointOptions options_for(const std::string& provider) {
  EndpointOptions o;
  o.provider = provider;
  o.node = "127.0.0.1";
  o.timeout = std::chrono::seconds(20);
  return o;
}

// Every endpoint knows every other under rank = its index.
inline std::vector<std::unique_ptr<Endpoint>> make_mesh(size_t n, const EndpointOptions& o) {
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (size_t i = 0; i < n; ++i) eps.push_back(std::make_unique<Endpoint>(o));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) eps[i]->add_peer(static_cast<PeerId>(j), eps[j]->address());
    }
  }
  return eps;
}

// Byte `pos` of message `msg` from `peer`: a 64-bit mix, so neighbouring
// positions, messages and peers all differ.
inline std::byte pattern_byte(uint64_t peer, uint64_t msg, uint64_t pos) {
  uint64_t x = (peer << 48) ^ (msg << 32) ^ pos;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 29;
  return static_cast<std::byte>(x);
}

inline std::vector<std::byte> pattern(uint64_t peer, uint64_t msg, size_t n) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern_byte(peer, msg, i);
  return v;
}

// `whole` cut into consecutive pieces of uneven sizes: piece i is empty
// when i % empty_every == 0, else step * i + base bytes (the last one what
// is left), so chunks of a message span several pieces, some none.
inline std::vector<ConstBuffer> uneven_pieces(const std::vector<std::byte>& whole, size_t empty_every, size_t step,
                                              size_t base) {
  std::vector<ConstBuffer> pieces;
  size_t at = 0;
  for (size_t i = 0; at < whole.size(); ++i) {
    const size_t n = std::min(whole.size() - at, (i % empty_every == 0) ? size_t{0} : step * i + base);
    pieces.push_back({whole.data() + at, n});
    at += n;
  }
  return pieces;
}

// The first differing position, or -1.
inline int64_t first_mismatch(std::span<const std::byte> got, uint64_t peer, uint64_t msg, size_t n) {
  if (got.size() != n) return static_cast<int64_t>(std::min(got.size(), n));
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != pattern_byte(peer, msg, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

// Address blobs and keys as hex text, to pass them through a pipe.
inline std::string to_hex(const std::vector<std::byte>& v) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::byte b : v) {
    s += d[static_cast<unsigned>(b) >> 4];
    s += d[static_cast<unsigned>(b) & 15];
  }
  return s;
}

inline std::vector<std::byte> from_hex(const std::string& s) {
  std::vector<std::byte> v(s.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return v;
}

}  // namespace parafab::rdma::testing
