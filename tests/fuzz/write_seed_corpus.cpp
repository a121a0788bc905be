// Writes the binary seed inputs of the fuzz targets with the project's own
// encoders, so the seeds follow the formats as the code writes them:
//
//   build-asan/tests/fuzz/fuzz_write_seed_corpus tests/fuzz/corpus
//
// (the text readers' seeds are hand-written lines, committed as they are;
// compressed_input's are tiny files from the gzip, bzip2 and xz tools).
// Each seed starts with the option byte its target reads first (but
// planted_weights', a text read as it is).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ps/checkpoint.h"
#include "ps/control_channel.h"
#include "ps/control_frame.h"
#include "ps/seen_requests.h"
#include "ps/wire_format.h"
#include "rdma/message_framing.h"
#include "worker/binary_cache.h"
#include "worker/linear_model_file.h"
#include "worker/model_file.h"
#include "worker/synthetic_data.h"

namespace {

namespace fs = std::filesystem;
using namespace parafab;

void write(const fs::path& dir, const std::string& name, char option, const std::string& body) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.put(option);
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

std::string str(const std::vector<std::byte>& v) { return {reinterpret_cast<const char*>(v.data()), v.size()}; }

void wire_seeds(const fs::path& dir) {
  const std::vector<uint64_t> keys{11, 22, 33};
  const std::vector<float> values{0.5f, -1.25f, 2.0f, 3.5f, -4.0f, 8.25f};
  ps::WireHeader h{.op = ps::Op::kPush, .table = 1, .sender = 3, .clock = 7, .request_id = 42};
  write(dir, "push", 0, str(ps::encode_message(h, keys, values)));
  h.op = ps::Op::kPull;
  write(dir, "pull", 0, str(ps::encode_message(h, keys, std::span<const float>{})));
  // Delta + varint keys: one-byte gaps, a two-byte one, and the largest key.
  const std::vector<uint64_t> sorted{3, 4, 200, ~uint64_t{0}};
  h.flags = ps::kFlagDeltaVarintKeys;
  write(dir, "pull_delta_varint", 0, str(ps::encode_message(h, sorted, std::span<const float>{})));
  h.op = ps::Op::kPush;
  write(dir, "push_delta_varint", 0,
        str(ps::encode_message(h, sorted, std::span<const float>(values.data(), sorted.size()))));
  h.flags = ps::kFlagNone;
  h.op = ps::Op::kPullReply;
  write(dir, "pull_reply_small_limits", 2, str(ps::encode_message(h, std::span<const uint64_t>(keys.data(), 1),
                                                                  std::span<const float>(values.data(), 2))));
  h.op = ps::Op::kClock;
  write(dir, "clock", 3, str(ps::encode_message(h, {}, std::span<const float>{})));
  h.op = ps::Op::kDensePush;
  const std::vector<uint64_t> rows{4, 2};
  write(dir, "dense_push", 0, str(ps::encode_message(h, rows, values)));
  h.op = ps::Op::kError;
  const std::string text = "table 9 is not served here";
  write(dir, "error", 0, str(ps::encode_message(h, {}, std::as_bytes(std::span<const char>(text.data(), text.size())))));
  h.op = ps::Op::kDenseRegionReply;
  const std::vector<uint64_t> region{0, 100, 0x7f0000001000, 77, 4096, 64};
  write(dir, "dense_region_reply", 0, str(ps::encode_message(h, region, std::span<const float>{})));
}

void frame_seeds(const fs::path& dir) {
  std::string small(rdma::kFrameHeaderBytes + 5, '\0');
  rdma::encode_frame_header({.flags = 0, .user_tag = 9, .message_id = 3, .total_bytes = 5},
                            reinterpret_cast<std::byte*>(small.data()));
  small.replace(rdma::kFrameHeaderBytes, 5, "hello");
  write(dir, "small", 0, small);
  std::string large(rdma::kFrameHeaderBytes, '\0');
  rdma::encode_frame_header({.flags = rdma::kFrameLarge, .user_tag = 1, .message_id = 12345,
                             .total_bytes = 3 << 20, .chunk_bytes = 1 << 20},
                            reinterpret_cast<std::byte*>(large.data()));
  write(dir, "large", 0, large);
  write(dir, "large_many_chunks", 4, large);
}

ps::TableSchema table(uint32_t id, ps::TableKind kind, ps::UpdaterKind updater) {
  ps::TableSchema t;
  t.id = id;
  t.kind = kind;
  t.width = kind == ps::TableKind::kDense ? 8 : 1;
  t.rows = kind == ps::TableKind::kDense ? 16 : 0;
  t.init.kind = ps::InitializerKind::kNormal;
  t.init.stddev = 0.05f;
  t.init.seed = 99;
  t.updater.kind = updater;
  return t;
}

void control_seeds(const fs::path& dir) {
  const std::string nonce(ps::kNonceBytes, 'n'), mac(ps::kMacBytes, 'm');
  std::vector<std::pair<std::string, ps::proto::Envelope>> seeds;
  {
    ps::proto::Envelope e;
    e.mutable_challenge()->set_protocol_version(ps::kControlProtocolVersion);
    e.mutable_challenge()->set_job_id(1234);
    e.mutable_challenge()->set_nonce(nonce);
    seeds.emplace_back("challenge", e);
  }
  {
    ps::proto::Envelope e;
    ps::proto::Register* r = e.mutable_register_();
    r->set_protocol_version(ps::kControlProtocolVersion);
    r->set_role(ps::proto::ROLE_WORKER);
    r->set_host("node-a");
    r->set_fabric_address("\x02\x00\x1f\x90\x7f\x00\x00\x01", 8);
    r->set_client_nonce(nonce);
    r->set_mac(mac);
    r->set_requested_role_rank_plus_one(2);
    ps::to_proto(table(0, ps::TableKind::kSparse, ps::UpdaterKind::kAdaGrad), r->add_tables());
    ps::to_proto(table(1, ps::TableKind::kDense, ps::UpdaterKind::kAdam), r->add_tables());
    seeds.emplace_back("register", e);
  }
  {
    ps::proto::Envelope e;
    e.mutable_welcome()->set_job_id(1234);
    e.mutable_welcome()->set_rank(2);
    e.mutable_welcome()->set_role_rank(0);
    e.mutable_welcome()->set_scheduler_mac(mac);
    seeds.emplace_back("welcome", e);
  }
  {
    ps::ClusterMap map;
    map.job_id = 1234;
    for (uint32_t i = 0; i < 2; ++i) {
      map.servers.push_back({.role = ps::Role::kServer, .rank = i, .role_rank = i, .host = "s" + std::to_string(i),
                             .fabric_address = {std::byte{1}, std::byte(i)}});
    }
    map.workers.push_back({.role = ps::Role::kWorker, .rank = 2, .role_rank = 0, .host = "w0",
                           .fabric_address = {std::byte{2}, std::byte{0}}});
    map.tables = {table(0, ps::TableKind::kSparse, ps::UpdaterKind::kFtrl),
                  table(1, ps::TableKind::kDense, ps::UpdaterKind::kSgd)};
    ps::proto::Envelope e;
    ps::to_proto(map, e.mutable_cluster_map());
    seeds.emplace_back("cluster_map", e);
  }
  {
    ps::proto::Envelope e;
    e.mutable_barrier_request()->set_name("trained");
    e.mutable_barrier_request()->set_workers_only(true);
    e.mutable_barrier_request()->set_contribution(1000);
    seeds.emplace_back("barrier_request", e);
  }
  {
    ps::proto::Envelope e;
    e.mutable_node_dead()->set_rank(3);
    e.mutable_node_dead()->set_role(ps::proto::ROLE_WORKER);
    e.mutable_node_dead()->set_role_rank(1);
    e.mutable_node_dead()->set_host("w1");
    e.mutable_node_dead()->set_reason("heartbeat timeout");
    seeds.emplace_back("node_dead", e);
  }
  seeds.emplace_back("error", ps::make_error(ps::proto::ERROR_MALFORMED, "bad frame"));
  std::string stream;
  for (const auto& [name, e] : seeds) {
    const std::string frame = ps::encode_control_frame(e);
    write(dir, name, 1, frame);
    stream += frame;
  }
  ps::proto::Envelope hb, done, bye;
  hb.mutable_heartbeat()->set_sequence(5);
  done.mutable_done();
  bye.mutable_shutdown()->set_reason("all workers done");
  write(dir, "stream", 1, ps::encode_control_frame(hb) + ps::encode_control_frame(done) + stream +
                              ps::encode_control_frame(bye));
}

void cache_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  worker::DatasetArrays a;
  a.labels = {1.0f, 0.0f, 1.0f};
  a.row_ptr = {0, 2, 2, 5};
  a.keys = {3, 17, 1, 2, 0xff00000000000001};
  a.values = {0.5f, 1.0f, -2.0f, 1e-3f, 7.0f};
  const fs::path tmp = dir / "tmp.pfc";
  auto emit = [&](const std::string& name, char option, const worker::Dataset& d, uint64_t skipped) {
    worker::write_binary_cache(tmp.string(), d, {.size = 1000, .mtime_ns = 1'700'000'000'000'000'000}, skipped);
    std::ifstream in(tmp, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write(dir, name, option, bytes);
    fs::remove(tmp);
  };
  emit("three_rows", 0, worker::Dataset(a), 0);
  emit("three_rows_fix_hashes", 3, worker::Dataset(a), 2);
  emit("empty", 0, worker::Dataset(), 0);
}

void checkpoint_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  ps::ShardCheckpoint c;
  c.server_index = 1;
  c.num_servers = 2;
  c.job_fingerprint = 0x1234;
  c.min_clock = 20;
  c.written_unix_ms = 1'700'000'000'000;
  c.bytes_pushed = 4096;
  c.worker_clocks = {20, 22};
  c.last_push_ids = {17, 19};
  c.worker_bytes_pushed = {2048, 2048};
  c.run_id = 0x0123456789abcdef;
  c.seen_highest = {19, 21};
  c.seen_windows.assign(2 * ps::SeenRequests::kWindowWords, 0);
  c.seen_windows[0] = 0xbfffe;                                   // worker 0: ids 1-17 and 19 seen
  c.seen_windows[ps::SeenRequests::kWindowWords] = 0x2ffffe;     // worker 1: ids 1-19 and 21
  c.sparse.push_back({.id = 0, .width = 2, .state_floats = 2, .keys = {5, 9}, .data = {1, 2, 3, 4, 5, 6, 7, 8}});
  c.dense.push_back({.id = 1, .width = 2, .begin_row = 3, .end_row = 5, .values = {1, 2, 3, 4}, .state = {0.5f}});
  const fs::path tmp = dir / "tmp.ckpt";
  (void)ps::write_checkpoint(tmp.string(), c);
  std::ifstream in(tmp, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write(dir, "two_tables", 0, bytes);
  write(dir, "two_tables_fix_all", 7, bytes);
  fs::remove(tmp);
  fs::remove(tmp.string() + ".prev");
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {(std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()};
}

// Option bits of model_file_fuzzer.cpp: 2 the linear header, 1|4|8 fix the
// magic and version, the sizes and the checksums.
void model_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path tmp = dir / "tmp.pfm";
  auto emit = [&](const std::string& name, bool linear, const std::string& bytes) {
    write(dir, name, linear ? 2 : 0, bytes);
    write(dir, name + "_fix_all", linear ? 15 : 13, bytes);
  };
  auto saved = [&](const std::string& name, const worker::SavedModel& m) {
    worker::save_model_file(tmp.string(), m);
    emit(name, false, file_bytes(tmp));
  };
  auto linear = [&](const std::string& name, const worker::LinearModel& m) {
    worker::save_linear_model(tmp.string(), m);
    emit(name, true, file_bytes(tmp));
  };
  worker::SavedModel fm;
  fm.spec = worker::ModelSpec::fm(2);
  fm.map = {worker::SlotMode::kDirect, 16};
  fm.keys = {1, 5, 16};
  fm.values = {0.5f, -0.25f, 1, 2, 3, 4, -1, 0.125f, 8};
  saved("fm", fm);
  worker::SavedModel ftrl;  // lr trained with FTRL: an fm of no factors
  ftrl.spec = worker::ModelSpec::fm(0);
  ftrl.spec.hyper.sparse_updater = ps::UpdaterKind::kFtrl;
  ftrl.map = {worker::SlotMode::kHashed, 1 << 4};
  ftrl.keys = {3, 9};
  ftrl.values = {0.75f, -1.5f};
  saved("lr_ftrl", ftrl);
  worker::SavedModel dnn;
  dnn.spec = worker::ModelSpec::dnn_with_fields(worker::ModelSpec::fields_of_format(false), 2, {3}, 3, 1);
  dnn.map = {worker::SlotMode::kHashed, 1 << 6};
  dnn.keys = {2, 40};
  dnn.values = {0.5f, -0.5f, 1, -1};
  dnn.mlp.resize(static_cast<size_t>(kernels::mlp_parameter_count(dnn.spec.mlp_shape())));
  for (size_t i = 0; i < dnn.mlp.size(); ++i) dnn.mlp[i] = static_cast<float>(i) / 8;
  saved("dnn", dnn);
  worker::LinearModel lr;
  lr.map = {worker::SlotMode::kDirect, 5};
  lr.weights = {0.5f, -1, 0, 2, 0.25f, -0.125f};
  linear("lr", lr);
  worker::LinearModel svm;
  svm.loss = kernels::Loss::kHinge;
  svm.map = {worker::SlotMode::kHashed, 4};
  svm.weights = {1, 2, 3, 4, -0.5f};
  linear("svm_hashed", svm);
  fs::remove(tmp);
}

// gen-data --weights-out's file, as it writes it (no option byte: the
// target reads the text as it is).
void planted_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  worker::SyntheticOptions o;
  o.examples = 1;
  o.features = 6;
  o.nnz = 2;
  const fs::path train = dir / "tmp.svm";
  worker::write_synthetic_libsvm(o, train.string(), "", (dir / "gen_data").string());
  fs::remove(train);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  wire_seeds(root / "wire_message");
  frame_seeds(root / "frame_header");
  control_seeds(root / "control_frame");
  cache_seeds(root / "binary_cache");
  checkpoint_seeds(root / "checkpoint_reader");
  model_seeds(root / "model_file");
  planted_seeds(root / "planted_weights");
  return 0;
}
