#include "ps/control_channel.h"

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cmath>
#include <set>
#include <span>

#include "ps/control_frame.h"
#include "ps/job_token.h"
#include "ps/key_partition.h"

namespace parafab::ps {

namespace asio = boost::asio;
using asio::ip::tcp;

ControlChannel::ControlChannel(tcp::socket socket, size_t max_frame_bytes, std::chrono::milliseconds flush_timeout)
    : socket_(std::move(socket)),
      max_frame_bytes_(max_frame_bytes),
      flush_timeout_(flush_timeout),
      flush_deadline_(socket_.get_executor()) {
  boost::system::error_code ec;
  const tcp::endpoint ep = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("unknown peer") : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(tcp::no_delay(true), ec);
}

ControlChannel::~ControlChannel() = default;

void ControlChannel::start(Handlers handlers) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), h = std::move(handlers)]() mutable {
    self->handlers_ = std::move(h);
    self->read_header();
  });
}

std::string ControlChannel::encode_frame(const proto::Envelope& message) { return encode_control_frame(message); }

void ControlChannel::send(const proto::Envelope& message) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), f = encode_frame(message)]() mutable { self->enqueue(std::move(f), false); });
}

void ControlChannel::send_and_close(const proto::Envelope& message) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), f = encode_frame(message)]() mutable { self->enqueue(std::move(f), true); });
}

void ControlChannel::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    // Closing the socket cancels a write in flight: its handler (which still
    // owns the frame's buffer) sees operation_aborted and drops the queue.
    boost::system::error_code ec;
    self->socket_.close(ec);
    self->flush_deadline_.cancel();
    self->finish(ChannelClosed::Cause::kLocal, "closed locally");
  });
}

void ControlChannel::arm_flush_deadline() {
  if (flush_deadline_armed_) return;
  flush_deadline_armed_ = true;
  flush_deadline_.expires_after(flush_timeout_);
  flush_deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;  // cancelled: flushed, or closed already
    boost::system::error_code ignored;
    self->socket_.close(ignored);  // the write handler then ends the channel
  });
}

void ControlChannel::read_header() {
  asio::async_read(socket_, asio::buffer(header_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
    if (self->closed_ || self->close_after_flush_) return;  // closing: ignore what still arrives
    if (ec) {
      self->finish(ChannelClosed::Cause::kPeer,
                   ec == asio::error::eof ? std::string("connection closed by peer") : ec.message());
      return;
    }
    const uint32_t length = control_frame_length(self->header_);
    if (auto why = check_control_frame_length(length, self->max_frame_bytes_)) {
      self->enqueue(encode_frame(make_error(proto::ERROR_MALFORMED, *why)), true);
      self->finish(ChannelClosed::Cause::kBadFrame, *why);
      return;
    }
    self->read_body(length);
  });
}

void ControlChannel::read_body(uint32_t length) {
  body_.resize(length);
  asio::async_read(socket_, asio::buffer(body_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
    if (self->closed_ || self->close_after_flush_) return;  // closing: ignore what still arrives
    if (ec) {
      self->finish(ChannelClosed::Cause::kPeer, "connection lost mid-frame: " + ec.message());
      return;
    }
    proto::Envelope message;
    if (auto why = parse_control_body(self->body_, message)) {
      self->enqueue(encode_frame(make_error(proto::ERROR_MALFORMED, *why)), true);
      self->finish(ChannelClosed::Cause::kBadFrame, *why);
      return;
    }
    self->body_.clear();
    if (self->handlers_.on_message) self->handlers_.on_message(message);
    if (!self->closed_ && !self->close_after_flush_) self->read_header();
  });
}

void ControlChannel::enqueue(std::string frame, bool close_after) {
  if (close_after_flush_) return;  // closing: nothing after the last frame
  if (!socket_.is_open()) return;
  out_.push_back(std::move(frame));
  close_after_flush_ = close_after;
  if (close_after) arm_flush_deadline();
  if (!writing_) write_next();
}

void ControlChannel::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (close_after_flush_) {
      boost::system::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_both, ec);
      socket_.close(ec);
      flush_deadline_.cancel();
      finish(ChannelClosed::Cause::kLocal, "closed locally");
    }
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](boost::system::error_code ec, size_t) {
                      self->out_.pop_front();
                      if (ec) {
                        self->out_.clear();
                        self->writing_ = false;
                        boost::system::error_code ignored;
                        self->socket_.close(ignored);
                        self->flush_deadline_.cancel();
                        self->finish(ChannelClosed::Cause::kPeer, "write failed: " + ec.message());
                        return;
                      }
                      self->write_next();
                    });
}

// Marks the channel closed and tells the owner once. Pending writes (an
// Error or Shutdown queued with send_and_close) still go out, within the
// flush deadline; the socket is closed when they have, or now when nothing
// is queued.
void ControlChannel::finish(ChannelClosed::Cause cause, std::string reason) {
  if (!closed_) {
    closed_ = true;
    if (!writing_) {
      boost::system::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_both, ec);
      socket_.close(ec);
    } else {
      close_after_flush_ = true;
      if (socket_.is_open()) arm_flush_deadline();  // close() has closed it already
      // Stop reading: the read in flight completes with an error we ignore.
      boost::system::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_receive, ec);
    }
    auto on_closed = std::move(handlers_.on_closed);
    handlers_ = {};
    if (on_closed) on_closed(ChannelClosed{cause, std::move(reason)});
  }
}

// --- conversions -------------------------------------------------------------

namespace {

[[noreturn]] void fail(const std::string& what) { throw ProtocolError(what); }

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void check_size(const std::string& what, size_t size, size_t min, size_t max) {
  if (size < min || size > max) {
    fail(what + " has " + std::to_string(size) + " bytes; must have " +
         (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)));
  }
}

}  // namespace

proto::Role to_proto(Role role) {
  switch (role) {
    case Role::kServer: return proto::ROLE_SERVER;
    case Role::kWorker: return proto::ROLE_WORKER;
    case Role::kScheduler: break;
  }
  throw std::invalid_argument("control plane: only servers and workers register, not " +
                              std::string(to_string(role)));
}

Role from_proto(proto::Role role, const char* field) {
  switch (static_cast<int>(role)) {
    case proto::ROLE_SERVER: return Role::kServer;
    case proto::ROLE_WORKER: return Role::kWorker;
    default: fail(std::string(field) + " = " + std::to_string(static_cast<int>(role)) + " is not server (1) or worker (2)");
  }
}

proto::Envelope make_error(proto::ErrorCode code, const std::string& text) {
  proto::Envelope e;
  e.mutable_error()->set_code(code);
  e.mutable_error()->set_text(text.substr(0, kMaxReasonBytes));
  return e;
}

std::string body_name(const proto::Envelope& m) {
  switch (m.body_case()) {
    case proto::Envelope::kChallenge: return "challenge";
    case proto::Envelope::kRegister: return "register";
    case proto::Envelope::kWelcome: return "welcome";
    case proto::Envelope::kClusterMap: return "cluster_map";
    case proto::Envelope::kHeartbeat: return "heartbeat";
    case proto::Envelope::kBarrierRequest: return "barrier_request";
    case proto::Envelope::kBarrierRelease: return "barrier_release";
    case proto::Envelope::kDone: return "done";
    case proto::Envelope::kShutdown: return "shutdown";
    case proto::Envelope::kNodeDead: return "node_dead";
    case proto::Envelope::kNodeRejoined: return "node_rejoined";
    case proto::Envelope::kRejoinReady: return "rejoin_ready";
    case proto::Envelope::kError: return "error";
    case proto::Envelope::BODY_NOT_SET: break;
  }
  return "empty envelope";
}

void to_proto(const TableSchema& t, proto::Table* out) {
  out->set_id(t.id);
  out->set_kind(t.kind == TableKind::kDense ? proto::TABLE_KIND_DENSE : proto::TABLE_KIND_SPARSE);
  out->set_width(t.width);
  out->set_rows(t.rows);
  out->mutable_init()->set_kind(t.init.kind == InitializerKind::kNormal ? proto::INITIALIZER_NORMAL
                                                                          : proto::INITIALIZER_ZEROS);
  out->mutable_init()->set_stddev(t.init.stddev);
  out->mutable_init()->set_seed(t.init.seed);
  proto::Updater* u = out->mutable_updater();
  const UpdaterConfig& c = t.updater;
  switch (c.kind) {
    case UpdaterKind::kSgd: u->set_kind(proto::UPDATER_SGD); break;
    case UpdaterKind::kAdaGrad: u->set_kind(proto::UPDATER_ADAGRAD); break;
    case UpdaterKind::kFtrl: u->set_kind(proto::UPDATER_FTRL); break;
    case UpdaterKind::kAdam: u->set_kind(proto::UPDATER_ADAM); break;
  }
  u->set_learning_rate(c.learning_rate);
  u->set_l1(c.l1);
  u->set_l2(c.l2);
  u->set_adagrad_epsilon(c.adagrad_epsilon);
  u->set_adagrad_initial_accumulator(c.adagrad_initial_accumulator);
  u->set_ftrl_alpha(c.ftrl_alpha);
  u->set_ftrl_beta(c.ftrl_beta);
  u->set_ftrl_l1(c.ftrl_l1);
  u->set_ftrl_l2(c.ftrl_l2);
  u->set_adam_beta1(c.adam_beta1);
  u->set_adam_beta2(c.adam_beta2);
  u->set_adam_epsilon(c.adam_epsilon);
}

TableSchema from_proto(const proto::Table& t) {
  const std::string who = "cluster map table " + std::to_string(t.id()) + ": ";
  if (!t.has_init()) fail(who + "missing initializer");
  if (!t.has_updater()) fail(who + "missing updater");
  TableSchema s;
  s.id = t.id();
  switch (static_cast<int>(t.kind())) {
    case proto::TABLE_KIND_SPARSE: s.kind = TableKind::kSparse; break;
    case proto::TABLE_KIND_DENSE: s.kind = TableKind::kDense; break;
    default: fail(who + "kind = " + std::to_string(static_cast<int>(t.kind())) + " is out of range");
  }
  s.width = t.width();
  s.rows = t.rows();
  switch (static_cast<int>(t.init().kind())) {
    case proto::INITIALIZER_ZEROS: s.init.kind = InitializerKind::kZeros; break;
    case proto::INITIALIZER_NORMAL: s.init.kind = InitializerKind::kNormal; break;
    default: fail(who + "initializer kind = " + std::to_string(static_cast<int>(t.init().kind())) + " is out of range");
  }
  s.init.stddev = t.init().stddev();
  s.init.seed = t.init().seed();
  const proto::Updater& u = t.updater();
  switch (static_cast<int>(u.kind())) {
    case proto::UPDATER_SGD: s.updater.kind = UpdaterKind::kSgd; break;
    case proto::UPDATER_ADAGRAD: s.updater.kind = UpdaterKind::kAdaGrad; break;
    case proto::UPDATER_FTRL: s.updater.kind = UpdaterKind::kFtrl; break;
    case proto::UPDATER_ADAM: s.updater.kind = UpdaterKind::kAdam; break;
    default: fail(who + "updater kind = " + std::to_string(static_cast<int>(u.kind())) + " is out of range");
  }
  UpdaterConfig& c = s.updater;
  c.learning_rate = u.learning_rate();
  c.l1 = u.l1();
  c.l2 = u.l2();
  c.adagrad_epsilon = u.adagrad_epsilon();
  c.adagrad_initial_accumulator = u.adagrad_initial_accumulator();
  c.ftrl_alpha = u.ftrl_alpha();
  c.ftrl_beta = u.ftrl_beta();
  c.ftrl_l1 = u.ftrl_l1();
  c.ftrl_l2 = u.ftrl_l2();
  c.adam_beta1 = u.adam_beta1();
  c.adam_beta2 = u.adam_beta2();
  c.adam_epsilon = u.adam_epsilon();
  try {
    s.validate();
  } catch (const std::invalid_argument& e) {
    fail(std::string("cluster map: ") + e.what());
  }
  return s;
}

void to_proto(const NodeInfo& n, proto::NodeInfo* out) {
  out->set_role(to_proto(n.role));
  out->set_rank(n.rank);
  out->set_role_rank(n.role_rank);
  out->set_host(n.host);
  out->set_fabric_address(reinterpret_cast<const char*>(n.fabric_address.data()), n.fabric_address.size());
}

NodeInfo from_proto(const proto::NodeInfo& n) {
  NodeInfo out;
  out.role = from_proto(n.role(), "cluster map node role");
  out.rank = n.rank();
  out.role_rank = n.role_rank();
  check_size("cluster map node " + std::to_string(n.rank()) + " host", n.host().size(), 1, kMaxHostBytes);
  check_size("cluster map node " + std::to_string(n.rank()) + " fabric address", n.fabric_address().size(), 1,
             kMaxFabricAddressBytes);
  out.host = n.host();
  const auto* p = reinterpret_cast<const std::byte*>(n.fabric_address().data());
  out.fabric_address.assign(p, p + n.fabric_address().size());
  return out;
}

void to_proto(const ClusterMap& map, proto::ClusterMap* out) {
  out->set_job_id(map.job_id);
  const KeyPartition partition = map.partition();
  for (const NodeInfo& s : map.servers) {
    proto::NodeInfo* n = out->add_servers();
    to_proto(s, n);
    const KeyRange& r = partition.range(s.role_rank);
    n->mutable_key_range()->set_begin(r.begin);
    n->mutable_key_range()->set_end(r.end);
    n->mutable_key_range()->set_last(r.last);
  }
  for (const NodeInfo& w : map.workers) to_proto(w, out->add_workers());
  for (const TableSchema& t : map.tables) to_proto(t, out->add_tables());
  out->set_resume_dir(map.resume_dir);
  out->set_resume_clock(map.resume_clock);
  for (const std::string& p : map.resume_paths) out->add_resume_paths(p);
  out->set_server_rejoin_timeout_ms(static_cast<uint64_t>(map.server_rejoin_timeout.count()));
  out->set_rejoin(map.rejoin);
}

ClusterMap from_proto(const proto::ClusterMap& m) {
  ClusterMap map;
  map.job_id = m.job_id();
  if (m.servers_size() == 0) fail("cluster map has no servers");
  const KeyPartition partition(static_cast<uint32_t>(m.servers_size()));
  for (int i = 0; i < m.servers_size(); ++i) {
    NodeInfo n = from_proto(m.servers(i));
    const uint32_t idx = static_cast<uint32_t>(i);
    if (n.role != Role::kServer || n.role_rank != idx || n.rank != idx) {
      fail("cluster map server " + std::to_string(i) + " has role " + to_string(n.role) + ", rank " +
           std::to_string(n.rank) + ", role rank " + std::to_string(n.role_rank));
    }
    const KeyRange& want = partition.range(idx);
    const proto::KeyRange& got = m.servers(i).key_range();
    if (!m.servers(i).has_key_range() || got.begin() != want.begin || got.end() != want.end ||
        got.last() != want.last) {
      fail("cluster map server " + std::to_string(i) + " key range differs from the equal split of mix64 over " +
           std::to_string(m.servers_size()) + " servers");
    }
    map.servers.push_back(std::move(n));
  }
  for (int j = 0; j < m.workers_size(); ++j) {
    NodeInfo n = from_proto(m.workers(j));
    const uint32_t idx = static_cast<uint32_t>(j);
    if (n.role != Role::kWorker || n.role_rank != idx || n.rank != map.num_servers() + idx) {
      fail("cluster map worker " + std::to_string(j) + " has role " + to_string(n.role) + ", rank " +
           std::to_string(n.rank) + ", role rank " + std::to_string(n.role_rank));
    }
    map.workers.push_back(std::move(n));
  }
  std::set<uint32_t> ids;
  for (const proto::Table& t : m.tables()) {
    map.tables.push_back(from_proto(t));
    if (!ids.insert(t.id()).second) fail("cluster map has table " + std::to_string(t.id()) + " twice");
  }
  check_size("cluster map: resume_dir", m.resume_dir().size(), 0, kMaxResumeDirBytes);
  map.resume_dir = m.resume_dir();
  if (m.resume_clock() < 0) fail("cluster map: resume clock " + std::to_string(m.resume_clock()) + " is negative");
  if (m.resume_paths_size() != (map.resume_dir.empty() ? 0 : m.servers_size())) {
    fail("cluster map: " + std::to_string(m.resume_paths_size()) + " checkpoint files to resume from for " +
         std::to_string(m.servers_size()) + " servers" + (map.resume_dir.empty() ? " and no resume directory" : ""));
  }
  map.resume_clock = m.resume_clock();
  for (const std::string& p : m.resume_paths()) {
    check_size("cluster map: resume path", p.size(), 1, kMaxResumeDirBytes + 64);
    map.resume_paths.push_back(p);
  }
  if (m.server_rejoin_timeout_ms() > kMaxRejoinTimeoutMs) {
    fail("cluster map: server rejoin timeout " + std::to_string(m.server_rejoin_timeout_ms()) + " ms is over " +
         std::to_string(kMaxRejoinTimeoutMs));
  }
  map.server_rejoin_timeout = std::chrono::milliseconds(m.server_rejoin_timeout_ms());
  map.rejoin = m.rejoin();
  return map;
}

void validate_register(const proto::Register& r) {
  if (r.protocol_version() != kControlProtocolVersion) {
    fail("register: protocol version " + std::to_string(r.protocol_version()) + ", this scheduler speaks " +
         std::to_string(kControlProtocolVersion));
  }
  (void)from_proto(r.role(), "register: role");
  check_size("register: host", r.host().size(), 1, kMaxHostBytes);
  check_size("register: fabric_address", r.fabric_address().size(), 1, kMaxFabricAddressBytes);
  check_size("register: client_nonce", r.client_nonce().size(), kNonceBytes, kNonceBytes);
  check_size("register: mac", r.mac().size(), kMacBytes, kMacBytes);
  if (r.tables_size() > static_cast<int>(kMaxRegisterTables)) {
    fail("register: " + std::to_string(r.tables_size()) + " tables (at most " + std::to_string(kMaxRegisterTables) +
         ")");
  }
  check_size("register: resume_dir", r.resume_dir().size(), 0, kMaxResumeDirBytes);
  std::set<uint32_t> ids;
  for (const proto::Table& t : r.tables()) {
    const TableSchema schema = from_proto(t);  // validates every field
    if (!ids.insert(schema.id).second) fail("register: table " + std::to_string(schema.id) + " twice");
  }
}

std::vector<uint8_t> register_mac_input(uint64_t job_id, const std::string& nonce, const proto::Register& r) {
  MacInput in("parafab/register/v1");
  in.add_u64(job_id)
      .add(as_bytes(nonce))
      .add_u64(r.protocol_version())
      .add_u64(static_cast<uint64_t>(r.role()))
      .add(r.host())
      .add(as_bytes(r.fabric_address()))
      .add(as_bytes(r.client_nonce()))
      .add_u64(r.requested_role_rank_plus_one());
  std::string tables;
  for (const proto::Table& t : r.tables()) tables += t.SerializeAsString();
  in.add(tables);  // the proposed tables are covered by the MAC too
  in.add(r.resume_dir());
  return {in.bytes().begin(), in.bytes().end()};
}

std::vector<uint8_t> welcome_mac_input(uint64_t job_id, const std::string& nonce, const std::string& client_nonce,
                                       uint32_t rank, uint32_t role_rank) {
  MacInput in("parafab/welcome/v1");
  in.add_u64(job_id).add(as_bytes(nonce)).add(as_bytes(client_nonce)).add_u64(rank).add_u64(role_rank);
  return {in.bytes().begin(), in.bytes().end()};
}

}  // namespace parafab::ps
