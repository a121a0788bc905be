// kernels/memory.h and DeviceArray: round trips, zero sizes, moves, errors.
#include "kernels/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/device_array.h"
#include "parafab/config.h"

namespace parafab::kernels {
namespace {

TEST(DeviceMemory, RoundTripsEveryByte) {
  for (const size_t n : {size_t{1}, size_t{63}, size_t{4096}, size_t{3} << 20}) {
    std::vector<uint32_t> host(n);
    std::iota(host.begin(), host.end(), 0x01020304u);
    const DeviceArray<uint32_t> d(host);
    ASSERT_EQ(d.size(), n);
    EXPECT_EQ(d.to_host(), host) << n;
  }
}

TEST(DeviceMemory, ZeroSizedArraysAreFine) {
  const DeviceArray<float> a(size_t{0});
  EXPECT_EQ(a.size(), 0u);
  EXPECT_TRUE(a.to_host().empty());
  const DeviceArray<float> b(std::vector<float>{});
  EXPECT_EQ(b.size(), 0u);
  copy_to_device(nullptr, nullptr, 0);
  copy_to_host(nullptr, nullptr, 0);
  device_fill_zero(nullptr, 0);
  device_free(nullptr);
}

TEST(DeviceMemory, FillZeroAndUploadResize) {
  DeviceArray<int32_t> a(std::vector<int32_t>{1, 2, 3, 4, 5});
  device_fill_zero(a.data(), 2 * sizeof(int32_t));
  EXPECT_EQ(a.to_host(), (std::vector<int32_t>{0, 0, 3, 4, 5}));
  const std::vector<int32_t> longer{9, 8, 7, 6, 5, 4, 3};
  a.upload(longer);
  EXPECT_EQ(a.size(), longer.size());
  EXPECT_EQ(a.to_host(), longer);
}

// Blocks taken and given back many times (on CUDA from the device's
// stream-ordered pool, which hands freed blocks out again): every byte
// survives a round trip, and a zero size is no memory.
TEST(DeviceMemory, RawBlocksRoundTripAcrossReuse) {
  EXPECT_EQ(device_alloc(0), nullptr);
  for (int round = 0; round < 50; ++round) {
    const size_t n = size_t{1} << (round % 20);  // 1 element to 2 MiB
    std::vector<uint32_t> host(n);
    std::iota(host.begin(), host.end(), static_cast<uint32_t>(round) * 0x9E3779B1u);
    void* p = device_alloc(n * sizeof(uint32_t));
    ASSERT_NE(p, nullptr);
    copy_to_device(p, host.data(), n * sizeof(uint32_t));
    std::vector<uint32_t> back(n);
    copy_to_host(back.data(), p, n * sizeof(uint32_t));
    device_free(p);
    ASSERT_EQ(back, host) << "round " << round;
  }
}

TEST(DeviceMemory, MovesTransferOwnership) {
  DeviceArray<double> a(std::vector<double>{1.5, 2.5});
  const double* p = a.data();
  DeviceArray<double> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  DeviceArray<double> c;
  c = std::move(b);
  EXPECT_EQ(c.to_host(), (std::vector<double>{1.5, 2.5}));
}

TEST(DeviceMemory, AlignedForVectorLoads) {
  for (const size_t bytes : {size_t{1}, size_t{100}, size_t{5} << 20}) {
    void* p = device_alloc(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    device_free(p);
  }
}

TEST(DeviceMemory, HugeAllocationThrowsNamingTheSize) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts on impossible allocations instead of returning null";
#endif
  const size_t huge = size_t{1} << 60;
  try {
    void* p = device_alloc(huge);
    device_free(p);
    FAIL() << "allocating 2^60 bytes succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
}

TEST(DeviceMemory, BackendDescriptionNamesTheBackend) {
  const std::string d = backend_description();
#if PARAFAB_CUDA
  EXPECT_NE(d.find("CUDA"), std::string::npos) << d;
#else
  set_host_threads(3);
  EXPECT_EQ(backend_description(), "OpenMP host backend (3 threads)");
  set_host_threads(1);
  EXPECT_EQ(backend_description(), "OpenMP host backend (1 thread)");
  set_host_threads(2);
  EXPECT_THROW(set_host_threads(0), std::invalid_argument);
#endif
}

}  // namespace
}  // namespace parafab::kernels
