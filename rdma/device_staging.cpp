#include "rdma/device_staging.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace parafab::rdma {
namespace {

// Copy failures (a bad device pointer) become a Status like the fabric's.
template <typename F>
Status guarded_copy(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, e.what());
  }
  return {};
}

}  // namespace

DeviceStaging::DeviceStaging(Endpoint& endpoint, size_t bytes) : endpoint_(endpoint) { reserve(std::max<size_t>(bytes, 4096)); }

void DeviceStaging::reserve(size_t bytes) {
  if (bytes <= capacity_) return;
  region_ = MemoryRegion();  // deregister before freeing
  buffer_ = allocate_pinned(bytes);
  capacity_ = bytes;
  region_ = endpoint_.register_memory(buffer_.get(), capacity_, kLocalOnly);
}

Status DeviceStaging::send_from_device(PeerId to, uint64_t tag, const void* device, size_t bytes) {
  reserve(bytes);
  Status s = guarded_copy([&] { copy_memory(buffer_.get(), device, bytes); });
  if (!s.ok()) return s;
  return endpoint_.send(to, tag, buffer_.get(), bytes).get();
}

Status DeviceStaging::receive_to_device(const Message& message, void* device, size_t capacity) {
  if (message.data.size() > capacity) {
    return Status(StatusCode::kInvalidArgument, "message of " + std::to_string(message.data.size()) +
                                                    " bytes does not fit the device buffer of " +
                                                    std::to_string(capacity));
  }
  return guarded_copy([&] { copy_memory(device, message.data.data(), message.data.size()); });
}

Status DeviceStaging::read_to_device(PeerId from, void* device, size_t bytes, const RemoteKey& remote,
                                     uint64_t offset) {
  auto* out = static_cast<std::byte*>(device);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(capacity_, bytes - done);
    Status s = endpoint_.read(from, buffer_.get(), n, remote, offset + done, &region_).get();
    if (!s.ok()) return s;
    s = guarded_copy([&] { copy_memory(out + done, buffer_.get(), n); });
    if (!s.ok()) return s;
    done += n;
  }
  return {};
}

Status DeviceStaging::write_from_device(PeerId to, const void* device, size_t bytes, const RemoteKey& remote,
                                        uint64_t offset) {
  const auto* in = static_cast<const std::byte*>(device);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(capacity_, bytes - done);
    Status s = guarded_copy([&] { copy_memory(buffer_.get(), in + done, n); });
    if (!s.ok()) return s;
    s = endpoint_.write(to, buffer_.get(), n, remote, offset + done, &region_).get();
    if (!s.ok()) return s;
    done += n;
  }
  return {};
}

}  // namespace parafab::rdma
