// GPU memory over the fabric, on a real GPU (built only with PARAFAB_CUDA;
// run by benchmarks/gpu/check.sh): DeviceStaging moves cudaMalloc'd bytes
// through its pinned buffer both ways, by RMA and by message, over both
// providers; where a provider reports FI_HMEM, device memory is registered
// directly and read one-sided. Every byte is checked after a copy back to
// the host. Without a CUDA device the tests skip.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rdma/device_staging.h"
#include "rdma/endpoint.h"
#include "tests/rdma/endpoint_test_util.h"

namespace parafab::rdma {
namespace {

using testing::make_mesh;
using testing::options_for;
using testing::pattern;
using testing::pattern_byte;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// n bytes of device memory, freed with the object.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t n) : n_(n) { EXPECT_EQ(cudaMalloc(&p_, n), cudaSuccess); }
  ~DeviceBytes() { cudaFree(p_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return p_; }
  void upload(const std::vector<std::byte>& host) {
    ASSERT_EQ(cudaMemcpy(p_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), p_, n_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

class DeviceStagingGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(DeviceStagingGpu, MovesDeviceBytesByRmaAndByMessage) {
  auto eps = make_mesh(2, options_for(GetParam()));
  if (!eps[0]->supports_rma()) GTEST_SKIP() << GetParam() << " has no FI_RMA";
  DeviceStaging staging(*eps[0], 64 * 1024);  // smaller than the transfers: they go in pieces
  auto shard = pattern(1, 0, 1 << 20);
  MemoryRegion mr = eps[1]->register_memory(shard.data(), shard.size(), kRemoteReadWrite);

  const size_t n = 300 * 1024 + 7;
  DeviceBytes device(n);
  Status s = staging.read_to_device(1, device.get(), n, mr.remote_key(), 4099);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto read = device.download();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(read[i], pattern_byte(1, 0, 4099 + i)) << i;

  const auto grad = pattern(0, 5, n);
  device.upload(grad);
  s = staging.write_from_device(1, device.get(), n, mr.remote_key(), 13);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(shard[13 + i], grad[i]) << i;

  s = staging.send_from_device(1, 9, device.get(), n);
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto msg = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->tag, 9u);
  DeviceBytes back(n);
  DeviceStaging receiver(*eps[1], 4096);
  ASSERT_TRUE(receiver.receive_to_device(*msg, back.get(), n).ok());
  EXPECT_EQ(back.download(), grad);
}

TEST_P(DeviceStagingGpu, DeviceMemoryIsRegisteredDirectlyWhereTheProviderHasHmem) {
  EndpointOptions o = options_for(GetParam());
  o.hmem = true;
  std::vector<std::unique_ptr<Endpoint>> eps;
  try {
    eps = make_mesh(2, o);
  } catch (const std::exception& e) {
    GTEST_SKIP() << GetParam() << " with FI_HMEM: " << e.what();
  }
  if (!eps[1]->supports_hmem() || !eps[0]->supports_rma()) GTEST_SKIP() << GetParam() << " has no FI_HMEM or FI_RMA";
  const auto host = pattern(1, 2, 256 * 1024);
  DeviceBytes device(host.size());
  device.upload(host);
  MemoryRegion mr = eps[1]->register_memory(device.get(), host.size(), kRemoteRead, MemoryKind::kCuda);
  std::vector<std::byte> got(host.size() - 100);
  const Status s = eps[0]->read(1, got.data(), got.size(), mr.remote_key(), 100).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], host[100 + i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Loopback, DeviceStagingGpu, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) { return info.param == "shm" ? std::string("shm") : std::string("tcp_rxm"); });

}  // namespace
}  // namespace parafab::rdma
