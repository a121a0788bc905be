// Which libfabric providers this host offers, and what they can do.
//
//   rdma::ProviderQuery q;   // tcp;ofi_rxm at 127.0.0.1
//   for (const rdma::ProviderInfo& p : rdma::query_providers(q)) std::cout << p.provider;
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace parafab::rdma {

struct ProviderQuery {
  std::string provider = "tcp;ofi_rxm";  // FI_PROVIDER syntax; empty = any
  std::string node = "127.0.0.1";        // bind address; empty = provider's choice
  bool need_rma = false;                 // require FI_RMA (one-sided read/write)
};

struct ProviderInfo {
  std::string provider;  // e.g. "tcp;ofi_rxm"
  std::string fabric;
  std::string domain;
  size_t max_msg_size = 0;
  size_t inject_size = 0;
  uint64_t mr_mode = 0;  // FI_MR_* bits
  bool rma = false;
  bool tagged = false;
  bool manual_progress = false;  // data progress is FI_PROGRESS_MANUAL
};

// RDM endpoints matching the query. Throws FabricError (naming the provider
// and node) when libfabric finds none or fails.
std::vector<ProviderInfo> query_providers(const ProviderQuery& query);

// libfabric's runtime version, "1.17".
std::string libfabric_version();

}  // namespace parafab::rdma
