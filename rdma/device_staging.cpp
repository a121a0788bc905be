#include "rdma/device_staging.h"

#include <algorithm>
#include <memory>
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

DeviceStaging::DeviceStaging(Endpoint& endpoint, size_t bytes) : endpoint_(endpoint), wanted_(std::max<size_t>(bytes, 4096)) {
  reserve(wanted_);
}

void DeviceStaging::reserve(size_t bytes) {
  if (bytes <= capacity_) return;
  region_ = MemoryRegion();  // deregister before freeing
  buffer_.reset();
  capacity_ = 0;
  buffer_ = allocate_pinned(bytes);
  region_ = endpoint_.register_memory(buffer_.get(), bytes, kLocalOnly);
  capacity_ = bytes;
  wanted_ = bytes;
}

Status DeviceStaging::finish(Completion op) {
  endpoint_.wait_ready(op);
  const bool lent = op.memory_lent();
  Status s = op.get();
  if (!lent) return s;
  // Ended by its timeout or its peer's failure with transfers outstanding:
  // the provider may still read or write the buffer, so the endpoint keeps
  // it, with its registration (deregistered first: members go in reverse),
  // and the next call takes a fresh one (have_buffer).
  struct Lent {
    PinnedBuffer buffer;
    MemoryRegion region;
  };
  capacity_ = 0;
  ++retired_;
  std::shared_ptr<Lent> lent_memory;
  try {
    lent_memory = std::make_shared<Lent>();  // before anything moves into it
  } catch (const std::bad_alloc&) {
    (void)buffer_.release();  // no room to hand it over: leaked, never freed under the provider
    region_ = MemoryRegion();
    return s;
  }
  lent_memory->buffer = std::move(buffer_);
  lent_memory->region = std::move(region_);
  endpoint_.retain_until_close(std::move(lent_memory));
  return s;
}

Status DeviceStaging::have_buffer(size_t bytes) {
  try {
    reserve(std::max(bytes, wanted_));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, std::string("staging buffer: ") + e.what());
  }
  return {};
}

Status DeviceStaging::send_from_device(PeerId to, uint64_t tag, const void* device, size_t bytes) {
  Status s = have_buffer(bytes);
  if (!s.ok()) return s;
  s = guarded_copy([&] { copy_memory(buffer_.get(), device, bytes); });
  if (!s.ok()) return s;
  return finish(endpoint_.send(to, tag, buffer_.get(), bytes));
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
    if (Status b = have_buffer(0); !b.ok()) return b;
    const size_t n = std::min(capacity_, bytes - done);
    Status s = finish(endpoint_.read(from, buffer_.get(), n, remote, offset + done, &region_));
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
    if (Status b = have_buffer(0); !b.ok()) return b;
    const size_t n = std::min(capacity_, bytes - done);
    Status s = guarded_copy([&] { copy_memory(buffer_.get(), in + done, n); });
    if (!s.ok()) return s;
    s = finish(endpoint_.write(to, buffer_.get(), n, remote, offset + done, &region_));
    if (!s.ok()) return s;
    done += n;
  }
  return {};
}

}  // namespace parafab::rdma
