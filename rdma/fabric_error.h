// The error type of rdma/: a failed libfabric call, with its name, the
// fi_strerror text, and the peer or provider involved.
//
//   rdma::check(fi_getinfo(...), "fi_getinfo", "provider tcp;ofi_rxm");
#pragma once

#include <stdexcept>
#include <string>

namespace parafab::rdma {

class FabricError : public std::runtime_error {
 public:
  FabricError(std::string call, int code, const std::string& context);
  const std::string& call() const { return call_; }
  int code() const { return code_; }  // the negative FI_* code libfabric returned

 private:
  std::string call_;
  int code_;
};

// Throws FabricError when rc < 0; returns rc otherwise.
int check(int rc, const char* call, const std::string& context);

}  // namespace parafab::rdma
