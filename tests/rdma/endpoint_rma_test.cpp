// One-sided RMA over real libfabric on loopback: reads and writes of every
// size at odd offsets, chunked past the transfer limit, bounds refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <tuple>
#include <vector>

#include "rdma/device_staging.h"
#include "rdma/endpoint.h"
#include "rdma/fabric_error.h"
#include "tests/rdma/endpoint_test_util.h"

namespace parafab::rdma {
namespace {

using testing::first_mismatch;
using testing::make_mesh;
using testing::options_for;
using testing::pattern;
using testing::pattern_byte;

constexpr size_t kRegion = 3 * 1024 * 1024 + 5;

// provider, transfer bytes, forced transfer limit (0: provider's)
using Case = std::tuple<std::string, size_t, size_t>;
class EndpointRma : public ::testing::TestWithParam<Case> {};

TEST_P(EndpointRma, ReadAndWriteEveryByteAtAnOddOffset) {
  const auto& [provider, bytes, limit] = GetParam();
  EndpointOptions o = options_for(provider);
  o.max_message_bytes = limit;
  auto eps = make_mesh(2, o);
  if (!eps[0]->supports_rma()) GTEST_SKIP() << provider << " has no FI_RMA";

  auto shard = pattern(1, 0, kRegion);
  MemoryRegion mr = eps[1]->register_memory(shard.data(), shard.size(), kRemoteReadWrite);
  // The key travels as a blob, as it would over the control plane.
  std::array<std::byte, RemoteKey::kEncodedBytes> blob;
  mr.remote_key().encode(blob.data());
  const RemoteKey key = *RemoteKey::decode(blob);
  ASSERT_EQ(key.length, kRegion);

  const uint64_t offset = 4093;
  std::vector<std::byte> local(bytes, std::byte{0});
  Status s = eps[0]->read(1, local.data(), bytes, key, offset).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(local[i], pattern_byte(1, 0, offset + i)) << "read byte " << i;
  }

  // Write a different pattern with a registered local buffer.
  auto out = pattern(0, 7, bytes);
  MemoryRegion local_mr = eps[0]->register_memory(out.data(), out.size(), kLocalOnly);
  s = eps[0]->write(1, out.data(), bytes, key, offset, &local_mr).get();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(shard[offset + i], out[i]) << "written byte " << i;
  }
  // Bytes around the window are untouched.
  EXPECT_EQ(shard[offset - 1], pattern_byte(1, 0, offset - 1));
  if (offset + bytes < kRegion) {
    EXPECT_EQ(shard[offset + bytes], pattern_byte(1, 0, offset + bytes));
  }
  EXPECT_EQ(eps[0]->stats().rma_bytes, 2 * bytes);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* p : {"tcp;ofi_rxm", "shm"}) {
    for (size_t s : {size_t{1}, size_t{4096}, size_t{65536}, size_t{1 << 20}}) out.emplace_back(p, s, 0);
    out.emplace_back(p, (1 << 20) + 3, 64 * 1024);  // 17 chunks
    out.emplace_back(p, 10000, 256);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointRma, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string p = std::get<0>(info.param) == "shm" ? "shm" : "tcp_rxm";
  return p + "_" + std::to_string(std::get<1>(info.param)) + "B" +
         (std::get<2>(info.param) ? "_limit" + std::to_string(std::get<2>(info.param)) : "");
});

TEST(EndpointRmaErrors, OutOfBoundsAndForeignBuffersAreRefusedBeforeAnythingIsPosted) {
  auto eps = make_mesh(2, options_for("tcp;ofi_rxm"));
  std::vector<std::byte> shard(4096);
  MemoryRegion mr = eps[1]->register_memory(shard.data(), shard.size(), kRemoteRead);
  std::vector<std::byte> local(8192);
  Status s = eps[0]->read(1, local.data(), 100, mr.remote_key(), 4000).get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("outside the remote region"), std::string::npos) << s.message();
  s = eps[0]->read(1, local.data(), 1, mr.remote_key(), ~uint64_t{0}).get();  // offset overflow
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  MemoryRegion small = eps[0]->register_memory(local.data(), 16, kLocalOnly);
  s = eps[0]->read(1, local.data(), 100, mr.remote_key(), 0, &small).get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = eps[0]->read(9, local.data(), 1, mr.remote_key(), 0).get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(RemoteKey::decode(std::span<const std::byte>(local.data(), 23)));
}

TEST(EndpointRmaErrors, CudaMemoryWithoutHmemIsUnsupported) {
  Endpoint a(options_for("tcp;ofi_rxm"));
  if (a.supports_hmem()) GTEST_SKIP() << "provider has FI_HMEM";
  std::vector<std::byte> buf(64);
  try {
    (void)a.register_memory(buf.data(), buf.size(), kRemoteRead, MemoryKind::kCuda);
    FAIL() << "expected FabricError";
  } catch (const FabricError& e) {
    EXPECT_NE(std::string(e.what()).find("FI_HMEM"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parafab::rdma

namespace parafab::rdma {
namespace {

// On the host backend "device" memory is host memory, so the staging path
// (pinned buffer, copies, RMA in pieces of the buffer) runs here unchanged.
TEST(DeviceStaging, MovesRangesLargerThanTheStagingBufferInPieces) {
  auto eps = testing::make_mesh(2, testing::options_for("tcp;ofi_rxm"));
  DeviceStaging staging(*eps[0], 4096);
  auto shard = testing::pattern(1, 0, 200 * 1024);
  MemoryRegion mr = eps[1]->register_memory(shard.data(), shard.size(), kRemoteReadWrite);

  std::vector<std::byte> device(100 * 1024 + 9);
  Status s = staging.read_to_device(1, device.data(), device.size(), mr.remote_key(), 777);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < device.size(); ++i) ASSERT_EQ(device[i], testing::pattern_byte(1, 0, 777 + i)) << i;

  const auto grad = testing::pattern(0, 3, 50 * 1024 + 1);
  s = staging.write_from_device(1, grad.data(), grad.size(), mr.remote_key(), 10);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < grad.size(); ++i) ASSERT_EQ(shard[10 + i], grad[i]) << i;

  // A send larger than the buffer grows it.
  s = staging.send_from_device(1, 4, grad.data(), grad.size());
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_GE(staging.capacity(), grad.size());
  auto msg = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(msg);
  std::vector<std::byte> out(grad.size());
  ASSERT_TRUE(staging.receive_to_device(*msg, out.data(), out.size()).ok());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), grad.begin(), grad.end()));
  EXPECT_EQ(staging.receive_to_device(*msg, out.data(), out.size() - 1).code(), StatusCode::kInvalidArgument);
}

// After a transfer that timed out, the provider may still write the staging
// buffer until the endpoint closes: the endpoint keeps it, and the next
// transfer uses a fresh one. Peer 1 answers nothing: it has no progress
// thread and nobody polls it once the connection is up.
TEST(DeviceStaging, ATimedOutTransferLeavesItsBufferWithTheEndpointAndTakesAFreshOne) {
  EndpointOptions o = testing::options_for("tcp;ofi_rxm");
  o.timeout = std::chrono::milliseconds(500);
  EndpointOptions silent = testing::options_for("tcp;ofi_rxm");
  silent.progress_thread = false;
  Endpoint a(o), b(silent), c(testing::options_for("tcp;ofi_rxm"));
  a.add_peer(1, b.address());
  a.add_peer(2, c.address());
  b.add_peer(0, a.address());
  c.add_peer(0, a.address());
  auto b_shard = testing::pattern(1, 0, 64 * 1024);
  auto c_shard = testing::pattern(2, 0, 64 * 1024);
  MemoryRegion b_mr = b.register_memory(b_shard.data(), b_shard.size(), kRemoteReadWrite);
  MemoryRegion c_mr = c.register_memory(c_shard.data(), c_shard.size(), kRemoteReadWrite);
  // The connection to b, while b is polled (a's post waits for it).
  auto heard = std::async(std::launch::async, [&] { return b.receive(std::chrono::seconds(20)).has_value(); });
  Completion hello = a.send(1, 1, "hi", 2);
  ASSERT_TRUE(heard.get()) << "b never heard from a";
  ASSERT_TRUE(hello.get().ok());

  DeviceStaging staging(a, 4096);
  std::vector<std::byte> device(8192);
  Status s = staging.read_to_device(1, device.data(), device.size(), b_mr.remote_key(), 0);
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.to_string();
  EXPECT_EQ(staging.buffers_retired(), 1u);
  s = staging.read_to_device(2, device.data(), device.size(), c_mr.remote_key(), 100);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < device.size(); ++i) ASSERT_EQ(device[i], testing::pattern_byte(2, 0, 100 + i)) << i;
  EXPECT_EQ(staging.capacity(), 4096u);
  EXPECT_EQ(staging.buffers_retired(), 1u);
  // A failure that lent nothing (a peer never added) keeps the buffer.
  EXPECT_EQ(staging.read_to_device(9, device.data(), 16, c_mr.remote_key(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(staging.buffers_retired(), 1u);
}

// Without a progress thread the staging calls drive progress themselves
// (they used to wait on the future alone, which nothing would complete).
TEST(DeviceStaging, DrivesProgressWhereTheEndpointHasNoProgressThread) {
  EndpointOptions caller = testing::options_for("tcp;ofi_rxm");
  caller.progress_thread = false;
  Endpoint a(caller), b(testing::options_for("tcp;ofi_rxm"));
  a.add_peer(1, b.address());
  b.add_peer(0, a.address());
  DeviceStaging staging(a, 4096);
  auto shard = testing::pattern(1, 0, 32 * 1024);
  MemoryRegion mr = b.register_memory(shard.data(), shard.size(), kRemoteReadWrite);
  std::vector<std::byte> device(10 * 1024 + 3);
  Status s = staging.read_to_device(1, device.data(), device.size(), mr.remote_key(), 5);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < device.size(); ++i) ASSERT_EQ(device[i], testing::pattern_byte(1, 0, 5 + i)) << i;
  const auto grad = testing::pattern(0, 1, 6000);
  s = staging.write_from_device(1, grad.data(), grad.size(), mr.remote_key(), 0);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(std::equal(grad.begin(), grad.end(), shard.begin()));
  s = staging.send_from_device(1, 8, grad.data(), grad.size());
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto msg = b.receive(std::chrono::seconds(20));
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->tag, 8u);
  EXPECT_EQ(testing::first_mismatch(msg->data, 0, 1, grad.size()), -1);
  EXPECT_EQ(staging.buffers_retired(), 0u);
}

TEST(EndpointRetain, RetainedMemoryLivesUntilTheEndpointCloses) {
  auto memory = std::make_shared<std::vector<std::byte>>(4096);
  const std::weak_ptr<std::vector<std::byte>> watch = memory;
  {
    Endpoint e(testing::options_for("tcp;ofi_rxm"));
    e.retain_until_close(std::move(memory));
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace parafab::rdma
