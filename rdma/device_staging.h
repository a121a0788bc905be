// GPU memory over a provider without FI_HMEM: every transfer goes through
// one page-locked host buffer registered once with the endpoint. Where the
// provider has FI_HMEM, register device memory directly instead
// (Endpoint::register_memory with MemoryKind::kCuda) and skip the copies.
//
//   rdma::DeviceStaging staging(endpoint, 4 << 20);
//   rdma::Status s = staging.send_from_device(server, tag, d_grad, bytes);
//   s = staging.read_to_device(server, d_params, bytes, shard_key, offset);
//
// Calls are synchronous and not thread-safe: one DeviceStaging per thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rdma/endpoint.h"
#include "rdma/staging_memory.h"

namespace parafab::rdma {

class DeviceStaging {
 public:
  // `bytes`: the staging buffer; RMA moves larger ranges in pieces of it,
  // and a larger send grows it.
  DeviceStaging(Endpoint& endpoint, size_t bytes);

  size_t capacity() const { return capacity_; }
  Status send_from_device(PeerId to, uint64_t tag, const void* device, size_t bytes);
  // Copies a received message's bytes into device memory.
  Status receive_to_device(const Message& message, void* device, size_t capacity);
  Status read_to_device(PeerId from, void* device, size_t bytes, const RemoteKey& remote, uint64_t offset);
  Status write_from_device(PeerId to, const void* device, size_t bytes, const RemoteKey& remote, uint64_t offset);

 private:
  void reserve(size_t bytes);

  Endpoint& endpoint_;
  size_t capacity_ = 0;
  PinnedBuffer buffer_;
  MemoryRegion region_;
};

}  // namespace parafab::rdma
