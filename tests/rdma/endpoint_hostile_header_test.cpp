// A peer whose frame header announces chunks that never come (hostile, or
// dying between its header and its chunks): the receiving endpoint posts a
// window of chunk receives for it, not all of its slots, so it goes on
// serving everyone else; the message fails at its deadline, and the peer's
// next message is delivered after it.
//
// The hostile peer is a bare libfabric endpoint of the same provider
// (RawSender), so that it can send a header no Endpoint would.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <future>
#include <cstring>
#include <string>
#include <vector>

#include "rdma/endpoint.h"
#include "rdma/fid_handle.h"
#include "rdma/message_framing.h"
#include "tests/rdma/endpoint_test_util.h"

namespace parafab::rdma {
namespace {

using testing::first_mismatch;
using testing::options_for;
using testing::pattern;
constexpr size_t kKiB = 1024;

void check_fi(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string(what) + ": " + fi_strerror(-rc));
}

// An RDM endpoint that sends whatever bytes it is given as one untagged
// message, as a frame header travels.
class RawSender {
 public:
  explicit RawSender(const std::string& provider) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(provider.c_str());
    const char* node = provider == "shm" ? nullptr : "127.0.0.1";
    const int rc = fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints, &info_);
    fi_freeinfo(hints);
    check_fi(rc, "fi_getinfo");
    check_fi(fi_fabric(info_->fabric_attr, fabric_.out(), nullptr), "fi_fabric");
    check_fi(fi_domain(fabric_.get(), info_, domain_.out(), nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    check_fi(fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_UNSPEC;
    check_fi(fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr), "fi_av_open");
    check_fi(fi_endpoint(domain_.get(), info_, ep_.out(), nullptr), "fi_endpoint");
    check_fi(fi_ep_bind(ep_.get(), &av_.get()->fid, 0), "fi_ep_bind(av)");
    check_fi(fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check_fi(fi_enable(ep_.get()), "fi_enable");
  }
  ~RawSender() {
    ep_.reset();
    av_.reset();
    cq_.reset();
    domain_.reset();
    fabric_.reset();
    fi_freeinfo(info_);
  }
  RawSender(const RawSender&) = delete;
  RawSender& operator=(const RawSender&) = delete;

  std::vector<std::byte> address() const {
    std::vector<std::byte> name(256);
    size_t len = name.size();
    check_fi(fi_getname(&ep_.get()->fid, name.data(), &len), "fi_getname");
    name.resize(len);
    return name;
  }

  // Sends `frame` to the endpoint at `to` and waits for its completion.
  void send(const std::vector<std::byte>& to, const std::vector<std::byte>& frame) {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    if (fi_av_insert(av_.get(), to.data(), 1, &addr, 0, nullptr) != 1) throw std::runtime_error("fi_av_insert");
    fi_context2 ctx{};
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ssize_t rc;
    while ((rc = fi_send(ep_.get(), frame.data(), frame.size(), nullptr, addr, &ctx)) == -FI_EAGAIN) {
      poll_once();
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("fi_send: no room in 20 s");
    }
    check_fi(static_cast<int>(rc), "fi_send");
    while (poll_once() == 0) {
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("fi_send: no completion in 20 s");
    }
  }

 private:
  int poll_once() {
    fi_cq_tagged_entry e;
    const ssize_t n = fi_cq_read(cq_.get(), &e, 1);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      (void)fi_cq_readerr(cq_.get(), &err, 0);
      throw std::runtime_error(std::string("send completed with an error: ") + fi_strerror(err.err));
    }
    return n > 0 ? 1 : 0;
  }

  fi_info* info_ = nullptr;
  FidHandle<fid_fabric> fabric_;
  FidHandle<fid_domain> domain_;
  FidHandle<fid_cq> cq_;
  FidHandle<fid_av> av_;
  FidHandle<fid_ep> ep_;
};

std::vector<std::byte> frame_of(const FrameHeader& h, const std::string& payload = "") {
  std::vector<std::byte> frame(kFrameHeaderBytes + payload.size());
  encode_frame_header(h, frame.data());
  std::memcpy(frame.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return frame;
}

class EndpointHostileHeader : public ::testing::TestWithParam<std::string> {};

TEST_P(EndpointHostileHeader, ChunksThatNeverComeHoldAWindowOfSlotsNotTheEndpoint) {
  EndpointOptions o = options_for(GetParam());
  o.max_in_flight = 16;  // a chunk window of 4
  o.timeout = std::chrono::seconds(6);
  Endpoint victim(o);
  Endpoint peer(options_for(GetParam()));
  RawSender hostile(GetParam());
  victim.add_peer(1, peer.address());
  peer.add_peer(0, victim.address());
  victim.add_peer(2, hostile.address());

  // Message 0 of the hostile peer: 10^5 chunks of 64 bytes announced, none sent.
  FrameHeader h;
  h.flags = kFrameLarge;
  h.user_tag = 5;
  h.message_id = 0;
  h.chunk_bytes = 64;
  h.total_bytes = 100000 * h.chunk_bytes;
  hostile.send(victim.address(), frame_of(h));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (victim.stats().chunk_receives_posted < 4 && std::chrono::steady_clock::now() < give_up) {
    (void)victim.receive(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(victim.stats().chunk_receives_posted, 4u) << "the header's window of chunk receives was not posted";

  // Everyone else is served meanwhile, both ways, with large messages (they
  // need chunk receives and send slots), long before the hostile message's
  // deadline: with every slot held, the peer's messages waited for it, and
  // so did the victim's send() calls (on their own thread here).
  constexpr int kMessages = 8;
  constexpr size_t kBytes = 64 * kKiB;
  const auto half_the_timeout = o.timeout / 2;
  std::vector<std::vector<std::byte>> in;
  std::vector<Completion> peer_sends;
  for (int i = 0; i < kMessages; ++i) {
    in.push_back(pattern(1, static_cast<uint64_t>(i), kBytes));
    peer_sends.push_back(peer.send(0, static_cast<uint64_t>(200 + i), in.back().data(), kBytes));
  }
  for (int i = 0; i < kMessages; ++i) {
    auto m = victim.receive(half_the_timeout);
    ASSERT_TRUE(m) << "the peer's message " << i << " did not arrive while the hostile message was pending";
    EXPECT_EQ(m->from, 1u);
    EXPECT_EQ(m->tag, static_cast<uint64_t>(200 + i));
    EXPECT_EQ(first_mismatch(m->data, 1, static_cast<uint64_t>(i), kBytes), -1);
  }
  for (Completion& s : peer_sends) EXPECT_TRUE(s.get().ok()) << s.get().to_string();
  std::vector<std::vector<std::byte>> out;
  for (int i = 0; i < kMessages; ++i) out.push_back(pattern(0, static_cast<uint64_t>(i), kBytes));
  auto victim_sends = std::async(std::launch::async, [&] {
    std::vector<Completion> sends;
    for (int i = 0; i < kMessages; ++i) {
      sends.push_back(victim.send(1, static_cast<uint64_t>(100 + i), out[static_cast<size_t>(i)].data(), kBytes));
    }
    std::vector<Status> done;
    for (Completion& c : sends) done.push_back(c.get());
    return done;
  });
  ASSERT_EQ(victim_sends.wait_for(half_the_timeout), std::future_status::ready)
      << "the victim's sends waited for room while the hostile message was pending";
  for (const Status& st : victim_sends.get()) EXPECT_TRUE(st.ok()) << st.to_string();
  for (int i = 0; i < kMessages; ++i) {
    auto m = peer.receive(half_the_timeout);
    ASSERT_TRUE(m) << "the victim's message " << i << " did not arrive";
    EXPECT_EQ(m->tag, static_cast<uint64_t>(100 + i));
    EXPECT_EQ(first_mismatch(m->data, 0, static_cast<uint64_t>(i), kBytes), -1);
  }
  // One chunk receive for each of the peer's messages, and still only the
  // hostile message's window.
  EXPECT_EQ(victim.stats().chunk_receives_posted, 4u + kMessages);

  // At its deadline the hostile message fails, its receives cancelled...
  const auto fail_by = std::chrono::steady_clock::now() + 5 * o.timeout;
  while (victim.stats().inbound_failed == 0 && std::chrono::steady_clock::now() < fail_by) {
    EXPECT_FALSE(victim.receive(std::chrono::milliseconds(50)));
  }
  const EndpointStats st = victim.stats();
  EXPECT_EQ(st.inbound_failed, 1u);
  EXPECT_EQ(st.timed_out, 1u);
  EXPECT_EQ(st.messages_received, static_cast<uint64_t>(kMessages));
  // ...and the hostile peer's next message comes after it, in its order.
  FrameHeader next;
  next.user_tag = 6;
  next.message_id = 1;
  next.total_bytes = 5;
  hostile.send(victim.address(), frame_of(next, "after"));
  auto m = victim.receive(std::chrono::seconds(10));
  ASSERT_TRUE(m) << "the hostile peer's next message never came";
  EXPECT_EQ(m->from, 2u);
  EXPECT_EQ(m->tag, 6u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data.data()), m->data.size()), "after");
}

INSTANTIATE_TEST_SUITE_P(Loopback, EndpointHostileHeader, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "shm" ? std::string("shm") : std::string("tcp_rxm");
                         });

}  // namespace
}  // namespace parafab::rdma
