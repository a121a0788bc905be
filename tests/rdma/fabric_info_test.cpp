#include "rdma/fabric_info.h"

#include <gtest/gtest.h>

#include <rdma/fi_errno.h>

#include "rdma/fabric_error.h"

namespace parafab::rdma {
namespace {

TEST(FabricInfo, TcpRxmOnLoopbackIsAvailable) {
  ProviderQuery q;  // tcp;ofi_rxm at 127.0.0.1
  const auto infos = query_providers(q);
  ASSERT_FALSE(infos.empty());
  for (const auto& p : infos) {
    EXPECT_EQ(p.provider, "tcp;ofi_rxm");
    EXPECT_TRUE(p.tagged);
    EXPECT_GT(p.max_msg_size, 0u);
  }
}

TEST(FabricInfo, UnknownProviderIsAClearError) {
  ProviderQuery q;
  q.provider = "no-such-provider";
  try {
    (void)query_providers(q);
    FAIL() << "expected FabricError";
  } catch (const FabricError& e) {
    EXPECT_EQ(e.call(), "fi_getinfo");
    EXPECT_EQ(e.code(), -FI_ENODATA);
    EXPECT_NE(std::string(e.what()).find("no-such-provider"), std::string::npos) << e.what();
  }
}

TEST(FabricInfo, VersionIsReported) {
  const std::string v = libfabric_version();
  EXPECT_NE(v.find('.'), std::string::npos);
  EXPECT_GE(std::stoi(v), 1);
}

}  // namespace
}  // namespace parafab::rdma
