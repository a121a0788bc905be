// Server checkpoints: a shard and its optimizer state go out and come back
// exactly (the restored server then moves as the original does); damaged
// files are refused with their path; a set meets at a clock every server
// has; a checkpoint of other tables is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "ps/checkpoint.h"
#include "ps/server.h"
#include "rdma/endpoint.h"
#include "tests/common/temp_dir.h"

namespace parafab::ps {
namespace {

ClusterMap one_server_map(UpdaterKind sparse_updater) {
  ClusterMap map;
  auto node = [](Role role, uint32_t rank, uint32_t role_rank) {
    NodeInfo n;
    n.role = role;
    n.rank = rank;
    n.role_rank = role_rank;
    n.host = "h";
    return n;
  };
  map.servers.push_back(node(Role::kServer, 0, 0));
  for (uint32_t w = 0; w < 2; ++w) map.workers.push_back(node(Role::kWorker, 1 + w, w));
  TableSchema sparse;
  sparse.width = 3;
  sparse.updater.kind = sparse_updater;
  sparse.updater.learning_rate = 0.1f;
  TableSchema dense;
  dense.id = 1;
  dense.kind = TableKind::kDense;
  dense.width = 4;
  dense.rows = 10;
  dense.updater.kind = UpdaterKind::kAdam;
  dense.updater.learning_rate = 0.01f;
  map.tables = {sparse, dense};
  return map;
}

rdma::EndpointOptions endpoint_options() {
  rdma::EndpointOptions o;
  o.provider = "tcp;ofi_rxm";
  o.node = "127.0.0.1";
  return o;
}

// The same pushes into a server's tables, from a seed.
void push_some(Server& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 200; ++k) keys.push_back(k * 7919 + seed % 3);
  std::vector<float> grads(keys.size() * 3);
  for (float& v : grads) v = g(rng);
  (void)s.sparse_table(0)->push(keys, grads.data());
  std::vector<float> dg(10 * 4);
  for (float& v : dg) v = g(rng);
  (void)s.dense_table(1)->push(0, 10, dg.data());
}

std::vector<float> pull_all(Server& s) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 200; ++k) {
    for (uint64_t r = 0; r < 3; ++r) keys.push_back(k * 7919 + r);
  }
  std::vector<float> out(keys.size() * 3 + 40);
  s.sparse_table(0)->pull(keys, out.data());
  s.dense_table(1)->pull(0, 10, out.data() + keys.size() * 3);
  return out;
}

TEST(CheckpointTest, ShardAndOptimizerStateComeBackExactly) {
  testing::TempDir dir;
  const ClusterMap map = one_server_map(UpdaterKind::kAdaGrad);
  rdma::Endpoint ea(endpoint_options()), eb(endpoint_options());
  Server a(ea, map, 0, {});
  for (uint32_t i = 0; i < 5; ++i) push_some(a, i);
  const std::string path = checkpoint_path(dir.path().string(), 0, 1);
  ShardCheckpoint written = a.checkpoint();
  written.bytes_pushed = 123456789012;  // as if that many gradient bytes had come in by message
  written.last_push_ids = {7, uint64_t{1} << 40};  // and the workers' pushes up to these request ids
  written.worker_bytes_pushed = {400, uint64_t{3} << 41};  // that many bytes from each
  EXPECT_EQ(written.run_id, map.job_id);
  written.run_id = 0x5eed;  // the run that wrote it (the scheduler's job id)
  // The ids the server had seen of each worker: the last push's, then a
  // window with every other id below it seen (for worker 0).
  ASSERT_EQ(written.seen_highest.size(), 2u);
  ASSERT_EQ(written.seen_windows.size(), 2 * SeenRequests::kWindowWords);
  written.seen_highest = written.last_push_ids;
  for (size_t i = 0; i < SeenRequests::kWindowWords; ++i) written.seen_windows[i] = 0x5555555555555555ULL;
  EXPECT_GT(write_checkpoint(path, written), 0u);
  Server b(eb, map, 0, {});
  const ShardCheckpoint back = read_checkpoint(path);
  EXPECT_EQ(back.bytes_pushed, 123456789012u);
  b.restore(back, path, 7);
  EXPECT_EQ(b.clocks().min_clock(), 7);
  // The restored server counts on from the checkpoint's figure.
  EXPECT_EQ(b.checkpoint().bytes_pushed, 123456789012u);
  // The workers' last push ids: a resumed job's workers are new processes
  // numbering from 1, so they start afresh; a server rejoining the same
  // workers (kCheckpointClocks) keeps them, so a retry is not applied twice.
  EXPECT_EQ(back.last_push_ids, (std::vector<uint64_t>{7, uint64_t{1} << 40}));
  EXPECT_EQ(back.worker_bytes_pushed, (std::vector<uint64_t>{400, uint64_t{3} << 41}));
  EXPECT_EQ(back.run_id, 0x5eedu);
  EXPECT_EQ(back.seen_highest, written.seen_highest);
  EXPECT_EQ(back.seen_windows, written.seen_windows);
  EXPECT_EQ(b.checkpoint().last_push_ids, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(b.checkpoint().worker_bytes_pushed, (std::vector<uint64_t>{0, 0}));
  // Rejoining needs a checkpoint of the running job's run: refused from
  // another run (before a resume, or another job), naming the file.
  rdma::Endpoint ed(endpoint_options());
  Server d(ed, map, 0, {});
  try {
    d.restore(back, path, Server::kCheckpointClocks);
    ADD_FAILURE() << "a checkpoint of another run was taken for a rejoin";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": was written by job 0000000000005eed, not this run"),
              std::string::npos)
        << e.what();
  }
  ClusterMap same_run = map;
  same_run.job_id = 0x5eed;
  Server d2(ed, same_run, 0, {});
  d2.restore(back, path, Server::kCheckpointClocks);
  EXPECT_EQ(d2.checkpoint().last_push_ids, (std::vector<uint64_t>{7, uint64_t{1} << 40}));
  EXPECT_EQ(d2.worker_bytes_pushed(), (std::vector<uint64_t>{400, uint64_t{3} << 41}));
  EXPECT_EQ(d2.checkpoint().worker_clocks, written.worker_clocks);
  EXPECT_EQ(d2.checkpoint().seen_highest, written.seen_highest);
  EXPECT_EQ(d2.checkpoint().seen_windows, written.seen_windows);
  EXPECT_EQ(pull_all(a), pull_all(b));
  // AdaGrad's accumulators and Adam's moments and step came back too: the
  // same next pushes move both servers to the same values.
  for (uint32_t i = 5; i < 8; ++i) {
    push_some(a, i);
    push_some(b, i);
  }
  EXPECT_EQ(pull_all(a), pull_all(b));
  // A server that did not get the checkpoint differs (the check can fail).
  rdma::Endpoint ec(endpoint_options());
  Server c(ec, map, 0, {});
  for (uint32_t i = 5; i < 8; ++i) push_some(c, i);
  EXPECT_NE(pull_all(a), pull_all(c));
}

// Files of versions 2 and 3 (the fuzz corpus keeps one of each, written
// before the next version, after the fuzzer's option byte) still read:
// without seen request ids (a restore counts every id up to the last push
// as seen), and from version 2 without per-worker bytes (zeros) and run.
TEST(CheckpointTest, Version2And3FilesStillRead) {
  for (const int version : {2, 3}) {
    SCOPED_TRACE("version " + std::to_string(version));
    std::ifstream seed(std::string(PARAFAB_SOURCE_DIR) + "/tests/fuzz/corpus/checkpoint_reader/two_tables_v" +
                           std::to_string(version),
                       std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(seed)), {});
    ASSERT_GT(bytes.size(), 81u);
    testing::TempDir dir;
    const std::string path = (dir.path() / "old.ckpt").string();
    std::ofstream(path, std::ios::binary).write(bytes.data() + 1, static_cast<std::streamsize>(bytes.size() - 1));
    const ShardCheckpoint c = read_checkpoint(path);
    EXPECT_EQ(c.server_index, 1u);
    EXPECT_EQ(c.worker_clocks, (std::vector<int64_t>{20, 22}));
    EXPECT_EQ(c.last_push_ids, (std::vector<uint64_t>{17, 19}));
    EXPECT_EQ(c.worker_bytes_pushed, version == 2 ? (std::vector<uint64_t>{0, 0}) : (std::vector<uint64_t>{2048, 2048}));
    EXPECT_EQ(c.run_id, version == 2 ? 0u : 0x0123456789abcdefu);
    EXPECT_TRUE(c.seen_highest.empty());
    EXPECT_TRUE(c.seen_windows.empty());
    ASSERT_EQ(c.sparse.size(), 1u);
    EXPECT_EQ(c.sparse[0].keys, (std::vector<uint64_t>{5, 9}));
  }
}

TEST(CheckpointTest, DamagedFilesAreRefusedWithTheirPath) {
  testing::TempDir dir;
  const ClusterMap map = one_server_map(UpdaterKind::kAdaGrad);
  rdma::Endpoint ea(endpoint_options());
  Server a(ea, map, 0, {});
  push_some(a, 1);
  const std::string path = checkpoint_path(dir.path().string(), 0, 1);
  const uint64_t bytes = write_checkpoint(path, a.checkpoint());
  auto expect_refused = [&](const std::string& p, const std::string& why) {
    try {
      (void)read_checkpoint(p);
      ADD_FAILURE() << "accepted " << p << " (" << why << ")";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const std::string flipped = path + ".flipped", cut = path + ".cut";
  std::filesystem::copy_file(path, flipped);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bytes - 5));
    f.put('\x7f');
  }
  expect_refused(flipped, "checksum mismatch");
  // The header-only read (what a set is found with) checks the same.
  const ShardCheckpoint whole = read_checkpoint(path), header = read_checkpoint_header(path);
  EXPECT_EQ(header.min_clock, whole.min_clock);
  EXPECT_EQ(header.job_fingerprint, whole.job_fingerprint);
  EXPECT_EQ(header.bytes, bytes);
  EXPECT_TRUE(header.sparse.empty() && header.worker_clocks.empty());
  EXPECT_THROW((void)read_checkpoint_header(flipped), CheckpointError);
  // Damage to a size inside the payload is named as damage (the checksum),
  // not as the inconsistency it also makes: the first sparse table's key
  // count (after clocks, ids, bytes of 2 workers, the run and the count).
  const std::string sized = path + ".sized";
  std::filesystem::copy_file(path, sized);
  {
    std::fstream f(sized, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(80 + 3 * (8 + 2 * 8) + 8 + 4 + 3 * 4);
    const uint64_t huge = uint64_t{1} << 40;
    f.write(reinterpret_cast<const char*>(&huge), sizeof huge);
  }
  expect_refused(sized, "checksum mismatch");
  std::filesystem::copy_file(path, cut);
  std::filesystem::resize_file(cut, bytes - 100);
  expect_refused(cut, "truncated or padded");
  std::filesystem::resize_file(cut, 30);
  expect_refused(cut, "header cut short");
  expect_refused(path + ".absent", "cannot open");

  // The set passes over a corrupt newest file to the one before it, and says so.
  push_some(a, 2);
  (void)write_checkpoint(path, a.checkpoint());  // the first is now PATH.prev
  std::filesystem::copy_file(flipped, path, std::filesystem::copy_options::overwrite_existing);
  const CheckpointSet set = find_checkpoint_set(dir.path().string(), 1);
  EXPECT_EQ(set.paths.at(0), path + ".prev");
  ASSERT_EQ(set.refused.size(), 1u);
  EXPECT_NE(set.refused[0].find(path), std::string::npos);
  // Both damaged: refused, naming the file.
  std::filesystem::copy_file(flipped, path + ".prev", std::filesystem::copy_options::overwrite_existing);
  try {
    (void)find_checkpoint_set(dir.path().string(), 1);
    ADD_FAILURE() << "a set of corrupt files was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(CheckpointTest, SetMeetsAtAClockEveryServerHasAndRefusesOtherTables) {
  testing::TempDir dir;
  const std::string d = dir.path().string();
  ShardCheckpoint c;
  c.num_servers = 2;
  c.job_fingerprint = 42;
  c.worker_clocks = {0, 0};
  c.last_push_ids = {0, 0};
  c.worker_bytes_pushed = {0, 0};
  auto write_at = [&](uint32_t server, int64_t clock) {
    c.server_index = server;
    c.min_clock = clock;
    (void)write_checkpoint(checkpoint_path(d, server, 2), c);
  };
  write_at(0, 10);
  EXPECT_THROW((void)find_checkpoint_set(d, 2), CheckpointError);  // server 1 has none
  write_at(1, 10);
  write_at(0, 20);  // server 0 is ahead; its clock 10 is now its .prev
  CheckpointSet set = find_checkpoint_set(d, 2);
  EXPECT_EQ(set.clock, 10);
  EXPECT_EQ(set.paths[0], checkpoint_path(d, 0, 2) + ".prev");
  write_at(1, 20);
  set = find_checkpoint_set(d, 2);
  EXPECT_EQ(set.clock, 20);
  EXPECT_EQ(set.paths[0], checkpoint_path(d, 0, 2));
  // No clock in common: each server's newest, at the smaller clock.
  write_at(1, 25);
  write_at(1, 30);
  set = find_checkpoint_set(d, 2);
  EXPECT_EQ(set.clock, 20);
  c.job_fingerprint = 43;
  write_at(1, 40);
  EXPECT_THROW((void)find_checkpoint_set(d, 2), CheckpointError);

  // A server refuses a checkpoint of other tables, naming the file.
  const ClusterMap adagrad = one_server_map(UpdaterKind::kAdaGrad), sgd = one_server_map(UpdaterKind::kSgd);
  rdma::Endpoint ea(endpoint_options()), eb(endpoint_options());
  Server a(ea, adagrad, 0, {});
  Server b(eb, sgd, 0, {});
  const std::string path = d + "/other.ckpt";
  (void)write_checkpoint(path, a.checkpoint());
  try {
    b.restore(read_checkpoint(path), path, 0);
    ADD_FAILURE() << "restored a checkpoint of other tables";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("other tables"), std::string::npos) << e.what();
  }
}

// A directory that cannot be looked into (here a symbolic link to itself,
// ELOOP; a directory this user may not search is the same) is a
// CheckpointError naming the path, which the scheduler turns into "cannot
// resume", not a std::filesystem_error that escaped it.
TEST(Checkpoint, ADirectoryThatCannotBeSearchedIsACheckpointError) {
  testing::TempDir dir;
  const std::filesystem::path loop = dir.path() / "loop";
  std::filesystem::create_directory_symlink(loop, loop);
  try {
    (void)find_checkpoint_set(loop.string(), 1);
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(loop.string()), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CheckpointError: " << e.what();
  }
}

}  // namespace
}  // namespace parafab::ps
