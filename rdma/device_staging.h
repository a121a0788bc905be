// GPU memory over a provider without FI_HMEM: every transfer goes through
// one page-locked host buffer registered once with the endpoint. Where the
// provider has FI_HMEM, register device memory directly instead
// (Endpoint::register_memory with MemoryKind::kCuda) and skip the copies.
//
//   rdma::DeviceStaging staging(endpoint, 4 << 20);
//   rdma::Status s = staging.send_from_device(server, tag, d_grad, bytes);
//   s = staging.read_to_device(server, d_params, bytes, shard_key, offset);
//
// Calls are synchronous (driving the endpoint's progress where it has no
// progress thread) and not thread-safe: one DeviceStaging per thread. After
// a transfer that failed or timed out, the provider may still use the
// buffer until the endpoint closes: the endpoint keeps it
// (Endpoint::retain_until_close) and the next call takes a fresh one.
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
  // Buffers handed to the endpoint after a transfer that failed with its
  // memory still lent to the provider (Completion::memory_lent).
  size_t buffers_retired() const { return retired_; }
  Status send_from_device(PeerId to, uint64_t tag, const void* device, size_t bytes);
  // Copies a received message's bytes into device memory.
  Status receive_to_device(const Message& message, void* device, size_t capacity);
  Status read_to_device(PeerId from, void* device, size_t bytes, const RemoteKey& remote, uint64_t offset);
  Status write_from_device(PeerId to, const void* device, size_t bytes, const RemoteKey& remote, uint64_t offset);

 private:
  // Grows the buffer to `bytes` (registered); throws on failure, leaving
  // none (capacity 0).
  void reserve(size_t bytes);
  // A buffer of at least `bytes` (and of the size asked for before), or
  // why there is none.
  Status have_buffer(size_t bytes);
  // Waits for `op` (driving progress where the endpoint has no progress
  // thread); when it ended with its memory still lent to the provider,
  // hands the buffer to the endpoint to keep.
  Status finish(Completion op);

  Endpoint& endpoint_;
  size_t capacity_ = 0;
  size_t retired_ = 0;
  size_t wanted_ = 0;  // the size to take again after a retirement
  PinnedBuffer buffer_;
  MemoryRegion region_;
};

}  // namespace parafab::rdma
