#include "rdma/memory_region.h"

namespace parafab::rdma {
namespace {

void put_u64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

void RemoteKey::encode(std::byte* out) const {
  put_u64(out, address);
  put_u64(out + 8, key);
  put_u64(out + 16, length);
}

std::optional<RemoteKey> RemoteKey::decode(std::span<const std::byte> blob) {
  if (blob.size() != kEncodedBytes) return std::nullopt;
  return RemoteKey{get_u64(blob.data()), get_u64(blob.data() + 8), get_u64(blob.data() + 16)};
}

RemoteKey MemoryRegion::remote_key() const {
  return RemoteKey{advertised_address_, mr_ ? fi_mr_key(mr_.get()) : 0, length_};
}

bool MemoryRegion::contains(const void* p, size_t n) const {
  const auto* b = static_cast<const std::byte*>(base_);
  const auto* q = static_cast<const std::byte*>(p);
  return q >= b && n <= length_ && static_cast<size_t>(q - b) <= length_ - n;
}

}  // namespace parafab::rdma
