// RAII ownership of one libfabric fid: fi_close on destruction. Declare
// members in the order fabric, domain, CQ/AV, MRs, endpoint, so that C++'s
// reverse destruction closes the endpoint first and the fabric last (the
// order of fabtests' example_rdm.c cleanup(); an MR still bound to an open
// endpoint would fail with -FI_EBUSY).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <utility>

namespace parafab::rdma {

template <typename Fid>
class FidHandle {
 public:
  FidHandle() = default;
  explicit FidHandle(Fid* fid) : fid_(fid) {}
  FidHandle(const FidHandle&) = delete;
  FidHandle& operator=(const FidHandle&) = delete;
  FidHandle(FidHandle&& o) noexcept : fid_(std::exchange(o.fid_, nullptr)) {}
  FidHandle& operator=(FidHandle&& o) noexcept {
    if (this != &o) {
      reset();
      fid_ = std::exchange(o.fid_, nullptr);
    }
    return *this;
  }
  ~FidHandle() { reset(); }

  void reset() {
    // A close failure at teardown has no caller to report to; the fid is gone
    // from our side either way.
    if (fid_ != nullptr) (void)fi_close(&fid_->fid);
    fid_ = nullptr;
  }
  Fid* get() const { return fid_; }
  Fid** out() {
    reset();
    return &fid_;
  }
  explicit operator bool() const { return fid_ != nullptr; }

 private:
  Fid* fid_ = nullptr;
};

}  // namespace parafab::rdma
