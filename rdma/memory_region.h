// Registered memory: what one-sided RMA needs on both sides, and what
// providers with FI_MR_LOCAL need for every local buffer.
//
//   rdma::MemoryRegion mr = endpoint.register_memory(shard.data(), bytes, rdma::kRemoteRead);
//   std::array<std::byte, rdma::RemoteKey::kEncodedBytes> blob;
//   mr.remote_key().encode(blob.data());   // hand to peers over the control plane
//   // a peer: endpoint.read(server, local, n, rdma::RemoteKey::decode(blob), offset)
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "rdma/fid_handle.h"

namespace parafab::rdma {

// Access rights of a registration (FI_* access bits).
inline constexpr uint64_t kLocalOnly = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
inline constexpr uint64_t kRemoteRead = kLocalOnly | FI_REMOTE_READ;
inline constexpr uint64_t kRemoteReadWrite = kLocalOnly | FI_REMOTE_READ | FI_REMOTE_WRITE;

// Where registered memory lives.
enum class MemoryKind { kHost, kCuda };

// What a peer needs to read or write a region: the address to name in
// fi_read/fi_write (a virtual address under FI_MR_VIRT_ADDR, else 0, i.e.
// offsets), the key (provider-chosen under FI_MR_PROV_KEY) and the length.
struct RemoteKey {
  static constexpr size_t kEncodedBytes = 24;
  uint64_t address = 0;
  uint64_t key = 0;
  uint64_t length = 0;

  void encode(std::byte* out) const;  // 24 bytes, little-endian
  // nullopt when the blob is not 24 bytes.
  static std::optional<RemoteKey> decode(std::span<const std::byte> blob);
};

class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(FidHandle<fid_mr> mr, void* base, size_t length, uint64_t advertised_address, MemoryKind kind)
      : mr_(std::move(mr)), base_(base), length_(length), advertised_address_(advertised_address), kind_(kind) {}

  void* base() const { return base_; }
  size_t length() const { return length_; }
  MemoryKind kind() const { return kind_; }
  // The local descriptor to pass with buffers inside this region.
  void* descriptor() const { return mr_ ? fi_mr_desc(mr_.get()) : nullptr; }
  RemoteKey remote_key() const;
  bool contains(const void* p, size_t n) const;
  explicit operator bool() const { return static_cast<bool>(mr_); }

 private:
  FidHandle<fid_mr> mr_;
  void* base_ = nullptr;
  size_t length_ = 0;
  uint64_t advertised_address_ = 0;
  MemoryKind kind_ = MemoryKind::kHost;
};

}  // namespace parafab::rdma
