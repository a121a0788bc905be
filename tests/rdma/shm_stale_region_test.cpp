// A region file in /dev/shm left by a killed process whose pid has come round
// to this process: the shm endpoint must still open (libfabric 1.17 answers
// the first fi_enable with EBUSY there; CI hit it once in 800 tests).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <set>
#include <string>

#include "rdma/endpoint.h"
#include "tests/rdma/endpoint_test_util.h"

namespace parafab::rdma {
namespace {

using testing::make_mesh;
using testing::options_for;
using testing::pattern;
using testing::first_mismatch;

// The name the shm provider gives a region: "PID:DOMAIN:ENDPOINT", the part
// of the address after "fi_shm://".
std::string region_name(const std::vector<std::byte>& address) {
  std::string s(reinterpret_cast<const char*>(address.data()), address.size());
  s = s.c_str();  // the blob carries its terminating zero
  const std::string prefix = "fi_shm://";
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

// Unlinks the planted names when the test ends, however it ends (after the
// endpoints, which are declared later and so closed first).
struct Planted {
  std::set<std::string> names;
  ~Planted() {
    for (const auto& n : names) ::shm_unlink(n.c_str());
  }
};

TEST(ShmStaleRegion, AFileLeftByADeadProcessWithOurPidIsReplaced) {
  // Plant what a killed process with our pid leaves: a zero-filled region
  // (no version, as a crash mid-creation leaves it) under every name this
  // process's endpoints could take next. This process has opened no
  // endpoint yet, so a file already under one of those names is a real
  // leftover of a dead process with our pid (/dev/shm collects them from
  // killed jobs): it is emptied and planted like the others.
  Planted planted;
  for (int domain = 0; domain < 8; ++domain) {
    for (int ep = 0; ep < 64; ++ep) {
      const std::string name = std::to_string(::getpid()) + ":" + std::to_string(domain) + ":" + std::to_string(ep);
      const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
      ASSERT_GE(fd, 0) << name;
      ASSERT_EQ(::ftruncate(fd, 4096), 0);
      ::close(fd);
      planted.names.insert(name);
    }
  }

  auto eps = make_mesh(2, options_for("shm"));
  const std::string name0 = region_name(eps[0]->address());
  const std::string name1 = region_name(eps[1]->address());
  // The endpoints took names that were planted, so the stale-file path ran.
  EXPECT_TRUE(planted.names.count(name0)) << name0 << " was not among the planted names";
  EXPECT_TRUE(planted.names.count(name1)) << name1 << " was not among the planted names";

  // And they work: a message each way, every byte checked.
  const auto payload = pattern(0, 7, 4096);
  auto sent = eps[0]->send(1, 42, payload.data(), payload.size());
  auto got = eps[1]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(got) << "no message arrived over the replaced region";
  EXPECT_EQ(first_mismatch(got->data, 0, 7, payload.size()), -1);
  EXPECT_TRUE(sent.get().ok());
  const auto back = pattern(1, 8, 100);
  auto sent_back = eps[1]->send(0, 43, back.data(), back.size());
  auto got_back = eps[0]->receive(std::chrono::seconds(20));
  ASSERT_TRUE(got_back);
  EXPECT_EQ(first_mismatch(got_back->data, 1, 8, back.size()), -1);
  EXPECT_TRUE(sent_back.get().ok());
}

}  // namespace
}  // namespace parafab::rdma
