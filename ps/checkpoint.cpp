#include "ps/checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <iterator>
#include <string_view>

#include "ps/atomic_file.h"
#include "ps/seen_requests.h"

namespace parafab::ps {
namespace {

constexpr char kMagic[8] = {'P', 'F', 'C', 'K', 'P', 'T', '0', '1'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t server_index;
  uint32_t num_servers;
  uint32_t num_workers;
  uint64_t job_fingerprint;
  int64_t min_clock;
  uint64_t written_unix_ms;
  uint64_t payload_bytes;
  uint64_t payload_hash;
  uint64_t bytes_pushed;
  uint64_t header_hash;  // of every byte before it
};
static_assert(sizeof(Header) == 80);

uint64_t header_hash(const Header& h) { return XXH64(&h, offsetof(Header, header_hash), 0); }

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
void put_array(std::string& out, const std::vector<T>& v) {
  put<uint64_t>(out, v.size());
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Reads the payload from the file as it goes, hashing every byte (so a
// checkpoint is never held twice in memory, and a header-only read needs
// no more than a buffer); every read is checked against what is left, so a
// hostile size cannot read past the end or allocate more than the file holds.
class Cursor {
 public:
  Cursor(std::istream& in, uint64_t bytes, const std::string& path) : in_(in), left_(bytes), path_(path) {
    XXH64_reset(state_.get(), 0);
  }
  template <typename T>
  T get(const char* what) {
    T v;
    read(&v, sizeof v, what);
    return v;
  }
  template <typename T>
  std::vector<T> get_array(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    if (n > left_ / sizeof(T)) {
      throw CheckpointError(path_ + ": checkpoint is inconsistent: " + what + " says " + std::to_string(n) +
                            " entries, more than the file holds");
    }
    std::vector<T> v(n);
    if (n) read(v.data(), n * sizeof(T), what);  // an empty vector's data() may be null
    return v;
  }
  bool done() const { return left_ == 0; }
  // Reads (and hashes) the rest; false when the file ended early.
  bool drain() {
    std::vector<char> buf(std::min<uint64_t>(left_, 1 << 20));
    while (left_ > 0) {
      const size_t n = std::min<uint64_t>(left_, buf.size());
      in_.read(buf.data(), static_cast<std::streamsize>(n));
      if (static_cast<size_t>(in_.gcount()) != n) return false;
      XXH64_update(state_.get(), buf.data(), n);
      left_ -= n;
    }
    return true;
  }
  uint64_t digest() const { return XXH64_digest(state_.get()); }

 private:
  void read(void* dst, size_t n, const char* what) {
    if (left_ < n) throw CheckpointError(path_ + ": checkpoint cut short in " + what);
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in_.gcount()) != n) {
      throw CheckpointError(path_ + ": checkpoint cut short in " + what + " (the file ended while reading)");
    }
    XXH64_update(state_.get(), dst, n);
    left_ -= n;
  }
  struct FreeState {
    void operator()(XXH64_state_t* s) const { XXH64_freeState(s); }
  };
  std::istream& in_;
  uint64_t left_;
  const std::string& path_;
  std::unique_ptr<XXH64_state_t, FreeState> state_{XXH64_createState()};
};

// Opens `path` and checks its header: magic, header checksum, version,
// and that the payload is exactly the header's size. `in` is left at the
// payload.
Header read_header(std::ifstream& in, const std::string& path) {
  in.open(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open checkpoint: " + std::strerror(errno));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw CheckpointError(path + ": cannot size checkpoint: " + ec.message());
  Header h{};
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  if (size < sizeof h || in.gcount() != sizeof h) throw CheckpointError(path + ": truncated checkpoint (header cut short)");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) throw CheckpointError(path + ": not a parafab checkpoint (bad magic)");
  if (h.header_hash != header_hash(h)) throw CheckpointError(path + ": checkpoint header checksum mismatch (corrupt)");
  if (h.version < 2 || h.version > kCheckpointVersion) {
    throw CheckpointError(path + ": checkpoint version " + std::to_string(h.version) +
                          " is not supported (this build reads 2 to " + std::to_string(kCheckpointVersion) + ")");
  }
  if (size - sizeof h != h.payload_bytes) {
    throw CheckpointError(path + ": checkpoint has " + std::to_string(size - sizeof h) + " payload bytes, its header says " +
                          std::to_string(h.payload_bytes) + " (truncated or padded)");
  }
  return h;
}

ShardCheckpoint from_header(const Header& h) {
  ShardCheckpoint c;
  c.server_index = h.server_index;
  c.num_servers = h.num_servers;
  c.job_fingerprint = h.job_fingerprint;
  c.min_clock = h.min_clock;
  c.written_unix_ms = h.written_unix_ms;
  c.bytes_pushed = h.bytes_pushed;
  c.bytes = sizeof h + h.payload_bytes;
  return c;
}

// Damage shows as a payload checksum mismatch, whatever it broke first.
void check_payload_hash(Cursor& r, const Header& h, const std::string& path) {
  if (!r.drain() || r.digest() != h.payload_hash) {
    throw CheckpointError(path + ": checkpoint payload checksum mismatch (corrupt)");
  }
}

// The payload after the header, into c (whose header fields are set).
void read_payload(Cursor& r, const Header& h, const std::string& path, ShardCheckpoint& c) {
  c.worker_clocks = r.get_array<int64_t>("worker clocks");
  if (c.worker_clocks.size() != h.num_workers) throw CheckpointError(path + ": checkpoint is inconsistent: worker count");
  c.last_push_ids = r.get_array<uint64_t>("last push ids");
  if (c.last_push_ids.size() != h.num_workers) {
    throw CheckpointError(path + ": checkpoint is inconsistent: last push ids of " +
                          std::to_string(c.last_push_ids.size()) + " workers, clocks of " +
                          std::to_string(h.num_workers));
  }
  if (h.version >= 3) {
    c.worker_bytes_pushed = r.get_array<uint64_t>("per-worker gradient bytes");
    if (c.worker_bytes_pushed.size() != h.num_workers) {
      throw CheckpointError(path + ": checkpoint is inconsistent: gradient bytes of " +
                            std::to_string(c.worker_bytes_pushed.size()) + " workers, clocks of " +
                            std::to_string(h.num_workers));
    }
    c.run_id = r.get<uint64_t>("run id");
  } else {
    c.worker_bytes_pushed.assign(h.num_workers, 0);
  }
  if (h.version >= 4) {
    c.seen_highest = r.get_array<uint64_t>("seen request ids");
    c.seen_windows = r.get_array<uint64_t>("seen request windows");
    const bool none = c.seen_highest.empty() && c.seen_windows.empty();
    if (!none && (c.seen_highest.size() != h.num_workers ||
                  c.seen_windows.size() != uint64_t{h.num_workers} * SeenRequests::kWindowWords)) {
      throw CheckpointError(path + ": checkpoint is inconsistent: seen request ids of " +
                            std::to_string(c.seen_highest.size()) + " workers in " +
                            std::to_string(c.seen_windows.size()) + " words, clocks of " +
                            std::to_string(h.num_workers));
    }
  }
  const uint32_t n_sparse = r.get<uint32_t>("sparse table count");
  for (uint32_t i = 0; i < n_sparse; ++i) {
    ShardCheckpoint::Sparse t;
    t.id = r.get<uint32_t>("table id");
    t.width = r.get<uint32_t>("width");
    t.state_floats = r.get<uint32_t>("state floats");
    t.keys = r.get_array<uint64_t>("keys");
    t.data = r.get_array<float>("values");
    if (t.data.size() != t.keys.size() * (static_cast<uint64_t>(t.width) + t.state_floats)) {
      throw CheckpointError(path + ": checkpoint is inconsistent: table " + std::to_string(t.id) + " has " +
                            std::to_string(t.data.size()) + " floats for " + std::to_string(t.keys.size()) + " keys");
    }
    c.sparse.push_back(std::move(t));
  }
  const uint32_t n_dense = r.get<uint32_t>("dense table count");
  for (uint32_t i = 0; i < n_dense; ++i) {
    ShardCheckpoint::Dense t;
    t.id = r.get<uint32_t>("table id");
    t.width = r.get<uint32_t>("width");
    t.begin_row = r.get<uint64_t>("begin row");
    t.end_row = r.get<uint64_t>("end row");
    t.values = r.get_array<float>("values");
    t.state = r.get_array<float>("state");
    if (t.end_row < t.begin_row || t.values.size() / std::max<uint64_t>(t.width, 1) != t.end_row - t.begin_row ||
        t.values.size() % std::max<uint64_t>(t.width, 1) != 0 || (t.width == 0 && !t.values.empty())) {
      throw CheckpointError(path + ": checkpoint is inconsistent: dense table " + std::to_string(t.id) + " has " +
                            std::to_string(t.values.size()) + " values for rows [" + std::to_string(t.begin_row) +
                            ", " + std::to_string(t.end_row) + ") of width " + std::to_string(t.width));
    }
    c.dense.push_back(std::move(t));
  }
}

}  // namespace

uint64_t checkpoint_fingerprint(const std::vector<TableSchema>& tables) {
  std::string text;
  for (const TableSchema& t : tables) {
    text += std::to_string(t.id) + ";" + std::to_string(static_cast<int>(t.kind)) + ";" + std::to_string(t.width) +
            ";" + std::to_string(t.rows) + ";" + std::to_string(static_cast<int>(t.init.kind)) + ";" +
            std::to_string(t.init.stddev) + ";" + std::to_string(t.init.seed) + ";" + to_string(t.updater) + "\n";
  }
  return XXH64(text.data(), text.size(), 0x70666b6370ULL);
}

std::string checkpoint_path(const std::string& dir, uint32_t server_index, uint32_t num_servers) {
  return (std::filesystem::path(dir) /
          ("server-" + std::to_string(server_index) + "-of-" + std::to_string(num_servers) + ".ckpt"))
      .string();
}

uint64_t write_checkpoint(const std::string& path, const ShardCheckpoint& c) {
  const size_t workers = c.worker_clocks.size();
  const bool no_seen = c.seen_highest.empty() && c.seen_windows.empty();
  if (!no_seen && (c.seen_highest.size() != workers || c.seen_windows.size() != workers * SeenRequests::kWindowWords)) {
    throw std::invalid_argument(path + ": a checkpoint needs the seen request ids of each worker (" +
                                std::to_string(c.seen_highest.size()) + " highest ids and " +
                                std::to_string(c.seen_windows.size()) + " window words for " +
                                std::to_string(workers) + " workers)");
  }
  if (c.last_push_ids.size() != c.worker_clocks.size() || c.worker_bytes_pushed.size() != c.worker_clocks.size()) {
    throw std::invalid_argument(path + ": a checkpoint needs one last push id and one byte count per worker clock (" +
                                std::to_string(c.last_push_ids.size()) + " and " +
                                std::to_string(c.worker_bytes_pushed.size()) + " for " +
                                std::to_string(c.worker_clocks.size()) + ")");
  }
  std::string payload;
  put_array(payload, c.worker_clocks);
  put_array(payload, c.last_push_ids);
  put_array(payload, c.worker_bytes_pushed);
  put<uint64_t>(payload, c.run_id);
  put_array(payload, c.seen_highest);
  put_array(payload, c.seen_windows);
  put<uint32_t>(payload, static_cast<uint32_t>(c.sparse.size()));
  for (const ShardCheckpoint::Sparse& t : c.sparse) {
    put(payload, t.id);
    put(payload, t.width);
    put(payload, t.state_floats);
    put_array(payload, t.keys);
    put_array(payload, t.data);
  }
  put<uint32_t>(payload, static_cast<uint32_t>(c.dense.size()));
  for (const ShardCheckpoint::Dense& t : c.dense) {
    put(payload, t.id);
    put(payload, t.width);
    put(payload, t.begin_row);
    put(payload, t.end_row);
    put_array(payload, t.values);
    put_array(payload, t.state);
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kCheckpointVersion;
  h.server_index = c.server_index;
  h.num_servers = c.num_servers;
  h.num_workers = static_cast<uint32_t>(c.worker_clocks.size());
  h.job_fingerprint = c.job_fingerprint;
  h.min_clock = c.min_clock;
  h.written_unix_ms = c.written_unix_ms;
  h.payload_bytes = payload.size();
  h.payload_hash = XXH64(payload.data(), payload.size(), 0);
  h.bytes_pushed = c.bytes_pushed;
  h.header_hash = header_hash(h);
  // The previous checkpoint stays as PATH.prev: if this server dies before
  // the others have written theirs of the same clock, the set can still
  // meet at the older one.
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) std::filesystem::rename(path, path + ".prev", ec);
  write_file_atomically(path, {std::string_view(reinterpret_cast<const char*>(&h), sizeof h), payload});
  return sizeof h + payload.size();
}

ShardCheckpoint read_checkpoint_header(const std::string& path) {
  std::ifstream in;
  const Header h = read_header(in, path);
  Cursor r(in, h.payload_bytes, path);
  check_payload_hash(r, h, path);
  return from_header(h);
}

ShardCheckpoint read_checkpoint(const std::string& path) {
  std::ifstream in;
  const Header h = read_header(in, path);
  ShardCheckpoint c = from_header(h);
  Cursor r(in, h.payload_bytes, path);
  try {
    read_payload(r, h, path, c);
  } catch (const CheckpointError&) {
    check_payload_hash(r, h, path);  // corruption is named as such
    throw;
  }
  const bool trailing = !r.done();
  check_payload_hash(r, h, path);
  if (trailing) throw CheckpointError(path + ": checkpoint has bytes after its last table");
  return c;
}

std::vector<std::pair<std::string, ShardCheckpoint>> read_server_checkpoints(const std::string& dir,
                                                                             uint32_t server_index,
                                                                             uint32_t num_servers,
                                                                             std::vector<std::string>& refused,
                                                                             CheckpointRead what) {
  std::vector<std::pair<std::string, ShardCheckpoint>> out;
  const std::string path = checkpoint_path(dir, server_index, num_servers);
  for (const std::string& p : {path, path + ".prev"}) {
    std::error_code ec;
    const bool there = std::filesystem::exists(p, ec);
    if (ec) throw CheckpointError(p + ": cannot look for it: " + ec.message());
    if (!there) continue;
    try {
      ShardCheckpoint c = what == CheckpointRead::kNewestWhole ? read_checkpoint(p) : read_checkpoint_header(p);
      if (c.server_index != server_index || c.num_servers != num_servers) {
        throw CheckpointError(p + ": holds server " + std::to_string(c.server_index) + " of " +
                              std::to_string(c.num_servers) + ", not " + std::to_string(server_index) + " of " +
                              std::to_string(num_servers));
      }
      out.emplace_back(p, std::move(c));
      if (what == CheckpointRead::kNewestWhole) break;
    } catch (const CheckpointError& e) {
      refused.push_back(e.what());
    }
  }
  return out;
}

CheckpointSet find_checkpoint_set(const std::string& dir, uint32_t num_servers) {
  // Each server's usable checkpoints: the newest and the one before it,
  // their headers only (each file's checksums checked as it streams by), so
  // finding the set of a large model costs no memory.
  std::vector<std::vector<std::pair<std::string, ShardCheckpoint>>> candidates(num_servers);
  std::vector<std::string> refused;
  for (uint32_t i = 0; i < num_servers; ++i) {
    const size_t refused_before = refused.size();
    candidates[i] = read_server_checkpoints(dir, i, num_servers, refused, CheckpointRead::kHeaders);
    if (candidates[i].empty()) {
      const std::string path = checkpoint_path(dir, i, num_servers);
      throw CheckpointError(refused.size() == refused_before
                                ? path + ": no checkpoint of server " + std::to_string(i) + " of " +
                                      std::to_string(num_servers) + " (the set in " + dir + " is incomplete)"
                                : refused[refused_before]);
    }
  }
  const uint64_t fingerprint = candidates[0].front().second.job_fingerprint;
  for (uint32_t i = 1; i < num_servers; ++i) {
    for (const auto& [p, c] : candidates[i]) {
      if (c.job_fingerprint != fingerprint) {
        throw CheckpointError(p + ": is of another job's tables than " + candidates[0].front().first);
      }
    }
  }
  CheckpointSet set;
  set.job_fingerprint = fingerprint;
  set.refused = std::move(refused);
  // The newest clock every server has a checkpoint of; else each server's
  // newest, meeting at the smallest of their clocks.
  int64_t best = -1;
  for (const auto& [p, c] : candidates[0]) {
    bool everywhere = true;
    for (uint32_t i = 1; i < num_servers && everywhere; ++i) {
      everywhere = std::any_of(candidates[i].begin(), candidates[i].end(),
                               [clock = c.min_clock](const auto& pc) { return pc.second.min_clock == clock; });
    }
    if (everywhere) best = std::max(best, c.min_clock);
  }
  set.clock = std::numeric_limits<int64_t>::max();
  for (uint32_t i = 0; i < num_servers; ++i) {
    const auto* pick = &candidates[i].front();
    if (best >= 0) {
      for (const auto& pc : candidates[i]) {
        if (pc.second.min_clock == best) pick = &pc;
      }
    }
    set.paths.push_back(pick->first);
    set.clock = std::min(set.clock, pick->second.min_clock);
  }
  set.clock = std::min(set.clock, kMaxResumeClock);
  return set;
}

}  // namespace parafab::ps
