#include "rdma/fabric_info.h"

#include <rdma/fabric.h>

#include <cstring>
#include <memory>

#include "rdma/fabric_error.h"

namespace parafab::rdma {
namespace {

struct InfoDeleter {
  void operator()(fi_info* p) const { fi_freeinfo(p); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

}  // namespace

std::vector<ProviderInfo> query_providers(const ProviderQuery& query) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) throw FabricError("fi_allocinfo", -FI_ENOMEM, "provider query");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_TAGGED | (query.need_rma ? FI_RMA : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // Accept every registration mode; callers honour what the provider reports.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW;
  if (!query.provider.empty()) hints->fabric_attr->prov_name = strdup(query.provider.c_str());

  const std::string context =
      "provider '" + (query.provider.empty() ? std::string("any") : query.provider) + "' at node '" +
      (query.node.empty() ? std::string("any") : query.node) + "'";
  fi_info* raw = nullptr;
  check(fi_getinfo(FI_VERSION(1, 17), query.node.empty() ? nullptr : query.node.c_str(), nullptr,
                   query.node.empty() ? 0 : FI_SOURCE, hints.get(), &raw),
        "fi_getinfo", context);
  InfoPtr list(raw);

  std::vector<ProviderInfo> out;
  for (const fi_info* p = list.get(); p != nullptr; p = p->next) {
    ProviderInfo info;
    info.provider = p->fabric_attr->prov_name ? p->fabric_attr->prov_name : "";
    info.fabric = p->fabric_attr->name ? p->fabric_attr->name : "";
    info.domain = p->domain_attr->name ? p->domain_attr->name : "";
    info.max_msg_size = p->ep_attr->max_msg_size;
    info.inject_size = p->tx_attr->inject_size;
    info.mr_mode = static_cast<uint64_t>(p->domain_attr->mr_mode);
    info.rma = (p->caps & FI_RMA) != 0;
    info.tagged = (p->caps & FI_TAGGED) != 0;
    info.manual_progress = p->domain_attr->data_progress == FI_PROGRESS_MANUAL;
    out.push_back(std::move(info));
  }
  return out;
}

std::string libfabric_version() {
  const uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

}  // namespace parafab::rdma
