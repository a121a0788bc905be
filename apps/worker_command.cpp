// `parafab worker`: a worker that checks a cluster end to end. Every worker
// pushes known integer gradients to a sparse SGD table (lr 1) for several
// clocks, meets the others at a barrier, pulls every key back and compares
// with the closed form of the sum. Run under `parafab launch` (or any
// launcher) to validate a deployment before training on it.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "apps/cluster_node.h"
#include "apps/commands.h"
#include "apps/flag_checks.h"
#include "ps/key_hash.h"
#include "worker/kv_client.h"

namespace parafab::apps {
namespace {

struct WorkerFlags {
  ClusterFlags cluster;
  uint32_t table = 0;
  uint64_t keys = 100000;
  int rounds = 3;
};

// Gradient of coordinate c of key index k pushed by worker w: small integers,
// exact in float however they are summed.
float gradient(uint64_t k, uint32_t c, uint32_t w) { return static_cast<float>((k + c) % 5 + 1) * static_cast<float>(w + 1); }

int run_worker(WorkerFlags f) {
  resolve_cluster_flags(f.cluster);
  ClusterNode node = join_cluster(f.cluster, ps::Role::kWorker);
  const ps::ClusterMap& map = *node.map;
  const ps::TableSchema& t = map.table(f.table);
  if (t.kind != ps::TableKind::kSparse || t.updater.kind != ps::UpdaterKind::kSgd || t.updater.learning_rate != 1.0f ||
      t.updater.l1 != 0.0f || t.updater.l2 != 0.0f || t.init.kind != ps::InitializerKind::kZeros) {
    throw std::invalid_argument(fmt::format(
        "table {} must be sparse, zero-initialised SGD with lr=1 and no L1/L2 for the check (e.g. "
        "--table id={},kind=sparse,width=4,updater=sgd,lr=1)", f.table, f.table));
  }
  worker::KvClient kv(*node.endpoint, map, node.role_rank);
  const uint32_t w = node.role_rank, width = t.width;
  std::vector<uint64_t> keys(f.keys);
  for (uint64_t k = 0; k < f.keys; ++k) keys[k] = ps::mix64(k + 1);  // spread over every server
  std::vector<float> grads(f.keys * width);
  for (uint64_t k = 0; k < f.keys; ++k) {
    for (uint32_t c = 0; c < width; ++c) grads[k * width + c] = gradient(k, c, w);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < f.rounds; ++r) {
    if (const rdma::Status s = kv.push(f.table, keys, grads).get(); !s.ok()) throw std::runtime_error("push: " + s.to_string());
    if (const rdma::Status s = kv.clock().get(); !s.ok()) throw std::runtime_error("clock: " + s.to_string());
  }
  const double push_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  node.client->barrier("pushed", join_timeout(f.cluster), /*workers_only=*/true);
  std::vector<float> got(f.keys * width);
  const auto t1 = std::chrono::steady_clock::now();
  if (const rdma::Status s = kv.pull(f.table, keys, got.data()).get(); !s.ok()) throw std::runtime_error("pull: " + s.to_string());
  const double pull_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  // Every worker v pushed gradient(k, c, v) `rounds` times; SGD with lr 1 from 0.
  const double workers_sum = map.num_workers() * (map.num_workers() + 1) / 2.0;
  uint64_t wrong = 0;
  for (uint64_t k = 0; k < f.keys; ++k) {
    for (uint32_t c = 0; c < width; ++c) {
      const float want = -static_cast<float>(((k + c) % 5 + 1) * workers_sum * f.rounds);
      if (got[k * width + c] != want) {
        if (wrong++ == 0) {
          std::fprintf(stderr, "worker %u: key %llu coordinate %u is %g, expected %g\n", w,
                       static_cast<unsigned long long>(keys[k]), c, got[k * width + c], want);
        }
      }
    }
  }
  const worker::KvClientStats st = kv.stats();
  std::fprintf(stderr, "%s\n",
               fmt::format("worker {}: {} keys x {} rounds pushed in {:.3f} s ({:.2f} M keys/s), pulled in {:.3f} s "
                           "({:.2f} M keys/s); {} pushed, {} pulled; {}",
                           w, f.keys, f.rounds, push_s, f.keys * f.rounds / push_s / 1e6, pull_s,
                           f.keys / pull_s / 1e6, fmt::format("{:.1f} MB", st.push_bytes / 1e6), fmt::format("{:.1f} MB", st.pull_bytes / 1e6),
                           wrong == 0 ? std::string("every value matches the sum of all workers' pushes")
                                      : fmt::format("{} values WRONG", wrong))
                   .c_str());
  node.client->done();
  (void)node.client->wait_for_shutdown(join_timeout(f.cluster));
  return wrong == 0 ? 0 : 1;
}

}  // namespace

void add_worker_command(CLI::App& root, CommandContext& ctx) {
  auto f = std::make_shared<WorkerFlags>();
  CLI::App* cmd = root.add_subcommand(
      "worker", "Check a cluster end to end: push known gradients from every worker, pull, compare with their sum");
  add_cluster_flags(cmd, f->cluster);
  cmd->add_option("--table", f->table, "Id of a sparse SGD table with lr=1 to check")->capture_default_str();
  cmd->add_option("--keys", f->keys, "Keys each worker pushes")->check(kPositiveNumber)->capture_default_str();
  cmd->add_option("--rounds", f->rounds, "Pushes (clocks) per worker")->check(kPositiveNumber)->capture_default_str();
  cmd->callback([f, &ctx] { ctx.exit_code = run_guarded("worker", [&] { return run_worker(*f); }); });
}

}  // namespace parafab::apps
