// A bare libfabric RDM endpoint for the rdma tests: it sends whatever bytes
// it is given, untagged as a frame header travels or tagged as a chunk, so
// a test can play a peer that sends what no Endpoint would (a header whose
// chunks never come, a chunk held back).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdma/fid_handle.h"
#include "rdma/message_framing.h"

namespace parafab::rdma::testing {

inline void check_fi(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string(what) + ": " + fi_strerror(-rc));
}

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

  // Sends `bytes` to the endpoint at `to`, untagged (a frame), and waits
  // for its completion.
  void send(const std::vector<std::byte>& to, const std::vector<std::byte>& bytes) {
    const fi_addr_t addr = lookup(to);
    post_and_wait([&](fi_context2* ctx) { return fi_send(ep_.get(), bytes.data(), bytes.size(), nullptr, addr, ctx); });
  }
  // The same, tagged (a chunk: rdma::chunk_tag).
  void send_tagged(const std::vector<std::byte>& to, uint64_t tag, const std::vector<std::byte>& bytes) {
    const fi_addr_t addr = lookup(to);
    post_and_wait(
        [&](fi_context2* ctx) { return fi_tsend(ep_.get(), bytes.data(), bytes.size(), nullptr, addr, tag, ctx); });
  }

 private:
  fi_addr_t lookup(const std::vector<std::byte>& to) {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    if (fi_av_insert(av_.get(), to.data(), 1, &addr, 0, nullptr) != 1) throw std::runtime_error("fi_av_insert");
    return addr;
  }

  template <typename Post>
  void post_and_wait(Post post) {
    fi_context2 ctx{};
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ssize_t rc;
    while ((rc = post(&ctx)) == -FI_EAGAIN) {
      (void)poll_once();
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("raw send: no room in 20 s");
    }
    check_fi(static_cast<int>(rc), "raw send");
    while (poll_once() == 0) {
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("raw send: no completion in 20 s");
    }
  }

  int poll_once() {
    fi_cq_tagged_entry e;
    const ssize_t n = fi_cq_read(cq_.get(), &e, 1);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      (void)fi_cq_readerr(cq_.get(), &err, 0);
      throw std::runtime_error(std::string("raw send completed with an error: ") + fi_strerror(err.err));
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

// A frame: `h` encoded, then `payload`.
inline std::vector<std::byte> frame_of(const FrameHeader& h, const std::string& payload = "") {
  std::vector<std::byte> frame(kFrameHeaderBytes + payload.size());
  encode_frame_header(h, frame.data());
  std::memcpy(frame.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return frame;
}

}  // namespace parafab::rdma::testing
