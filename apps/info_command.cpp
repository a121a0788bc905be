// `parafab info`: what this build is and which fabric providers this host has.
#include <fmt/format.h>

#include <cstdio>
#include <vector>

#include "apps/commands.h"
#include "kernels/memory.h"
#include "parafab/config.h"
#include "rdma/fabric_error.h"
#include "rdma/fabric_info.h"

namespace parafab::apps {

void add_info_command(CLI::App& root, CommandContext& ctx) {
  auto node = std::make_shared<std::string>("127.0.0.1");
  CLI::App* cmd = root.add_subcommand("info", "Print the build configuration and the libfabric providers found");
  cmd->add_option("--node", *node, "Address to query the providers at")->capture_default_str();
  cmd->callback([node, &ctx] {
    ctx.exit_code = run_guarded("info", [&] {
      std::printf("parafab %s\n", PARAFAB_VERSION);
      std::printf("kernels backend: %s\n", kernels::backend_description().c_str());
      std::printf("thrust: %s\n", PARAFAB_THRUST_ORIGIN);
      std::printf("libfabric: %s\n", rdma::libfabric_version().c_str());
      for (const char* prov : {"tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa"}) {
        rdma::ProviderQuery q;
        q.provider = prov;
        q.node = std::string(prov) == "shm" ? "" : *node;
        try {
          // A provider reports only the capabilities asked for: ask for
          // FI_RMA first (as an endpoint does), then without it.
          std::vector<rdma::ProviderInfo> infos;
          q.need_rma = true;
          try {
            infos = rdma::query_providers(q);
          } catch (const rdma::FabricError&) {
            q.need_rma = false;
            infos = rdma::query_providers(q);
          }
          const auto& p = infos.front();
          std::printf("provider %-14s available: domain %s, max_msg_size %zu, inject_size %zu, rma %s, %s progress\n",
                      prov, p.domain.c_str(), p.max_msg_size, p.inject_size, p.rma ? "yes" : "no",
                      p.manual_progress ? "manual" : "auto");
        } catch (const rdma::FabricError& e) {
          std::printf("provider %-14s not available (%s)\n", prov, e.what());
        }
      }
      return 0;
    });
  });
}

}  // namespace parafab::apps
