#include "ps/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <set>

#include "ps/checkpoint.h"
#include "ps/control_channel.h"

namespace parafab::ps {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// Invalid messages a registered node may send before it is declared dead.
constexpr uint32_t kMaxInvalidMessages = 64;


struct Conn {
  uint64_t id = 0;
  std::shared_ptr<ControlChannel> channel;
  std::string peer;
  std::string nonce;  // the challenge this connection must answer
  Clock::time_point connected_at;
  Clock::time_point last_seen;
  bool joined = false;
  bool dead = false;
  bool done = false;
  bool refused = false;  // answered with an error and closing
  bool rejoining = false;  // a server back under a dead one's rank, not yet announced
  bool asked_rank = false;  // registered asking for its role rank (--rank)
  uint32_t invalid = 0;     // invalid messages since it registered
  Role role = Role::kWorker;
  uint32_t role_rank = 0;
  uint32_t rank = 0;
  std::string host;
  std::vector<std::byte> fabric_address;

  std::string describe() const {
    return std::string(to_string(role)) + " " + std::to_string(role_rank) + " (rank " + std::to_string(rank) +
           ", host " + host + ")";
  }
};

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

struct Scheduler::Impl {
  // io first: every socket and timer below is destroyed before it.
  asio::io_context io;
  SchedulerOptions opt;
  tcp::acceptor acceptor{io};
  asio::steady_timer join_timer{io};
  asio::steady_timer sweep_timer{io};
  asio::steady_timer grace_timer{io};
  asio::steady_timer accept_retry_timer{io};
  uint64_t job_id = 0;
  uint64_t next_conn_id = 0;
  std::map<uint64_t, std::shared_ptr<Conn>> conns;  // open connections
  std::vector<std::shared_ptr<Conn>> servers, workers;  // slots by role rank; null = vacant
  struct Barrier {
    std::map<uint32_t, uint64_t> arrived;  // rank -> its contribution
    bool workers_only = false;
  };
  std::map<std::string, Barrier> barriers;
  bool map_sent = false;
  ClusterMap map;  // as sent, with every rejoined server's new address
  std::map<uint32_t, Clock::time_point> rejoin_deadlines;  // dead servers' slots, by role rank
  bool tables_from_workers = false;  // opt.tables came from the first worker that brought some
  std::string resume_dir;            // from the first worker that brought one
  bool finishing = false;
  bool ran = false;
  std::string failure;

  struct {
    std::atomic<uint64_t> joined{0}, auth_failures{0}, malformed_frames{0}, invalid_messages{0},
        unauthenticated_messages{0}, refused_full{0}, auth_timeouts{0}, dead_nodes{0}, rejoined{0};
  } counters;

  explicit Impl(SchedulerOptions o) : opt(std::move(o)) {}

  ~Impl() {
    // Break channel -> handler -> Conn cycles before io tears down.
    for (auto& [id, c] : conns) {
      if (c->channel) c->channel->close();
    }
    conns.clear();
    servers.clear();
    workers.clear();
  }

  std::vector<std::shared_ptr<Conn>>& slots(Role r) { return r == Role::kServer ? servers : workers; }
  uint32_t expected(Role r) const { return r == Role::kServer ? opt.num_servers : opt.num_workers; }

  // --- connections -----------------------------------------------------------

  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || finishing) return;
      if (ec) {
        // Out of file descriptors (EMFILE) and the like: accepting again at
        // once fails the same way, in a loop that logs on every pass.
        spdlog::warn("scheduler: accept failed: {}; accepting again in 100 ms", ec.message());
        accept_retry_timer.expires_after(std::chrono::milliseconds(100));
        accept_retry_timer.async_wait([this](boost::system::error_code e) {
          if (!e && !finishing) accept();
        });
        return;
      }
      on_accept(std::move(socket));
      accept();
    });
  }

  void on_accept(tcp::socket socket) {
    auto c = std::make_shared<Conn>();
    c->id = next_conn_id++;
    c->channel = std::make_shared<ControlChannel>(std::move(socket),
                                                  std::min(opt.max_frame_bytes, kMaxUnauthenticatedFrameBytes));
    c->peer = c->channel->peer();
    const std::vector<uint8_t> nonce = random_bytes(kNonceBytes);
    c->nonce.assign(nonce.begin(), nonce.end());
    c->connected_at = c->last_seen = Clock::now();
    conns[c->id] = c;
    std::weak_ptr<Conn> weak = c;
    c->channel->start({.on_message =
                           [this, weak](proto::Envelope& m) {
                             if (auto conn = weak.lock()) on_message(*conn, m);
                           },
                       .on_closed =
                           [this, weak](const ChannelClosed& closed) {
                             if (auto conn = weak.lock()) on_closed(conn, closed);
                           }});
    proto::Envelope hello;
    hello.mutable_challenge()->set_protocol_version(kControlProtocolVersion);
    hello.mutable_challenge()->set_job_id(job_id);
    hello.mutable_challenge()->set_nonce(c->nonce);
    c->channel->send(hello);
  }

  void refuse(Conn& c, proto::ErrorCode code, const std::string& text) {
    c.refused = true;
    c.channel->send_and_close(make_error(code, text));
  }

  void on_message(Conn& c, proto::Envelope& m) {
    if (c.refused || c.dead || finishing) return;
    c.last_seen = Clock::now();
    try {
      if (!c.joined) {
        if (m.body_case() != proto::Envelope::kRegister) {
          ++counters.unauthenticated_messages;
          spdlog::warn("scheduler: {} sent {} before registering; closing", c.peer, body_name(m));
          refuse(c, proto::ERROR_NOT_AUTHENTICATED,
                 "not registered: the first message must be register, got " + body_name(m));
          return;
        }
        handle_register(c, m.register_());
        return;
      }
      switch (m.body_case()) {
        case proto::Envelope::kHeartbeat: return;
        case proto::Envelope::kBarrierRequest: {
          const std::string& name = m.barrier_request().name();
          if (name.empty() || name.size() > kMaxBarrierNameBytes) {
            invalid(c, proto::ERROR_MALFORMED,
                    "barrier name has " + std::to_string(name.size()) + " bytes; must have 1 to " +
                        std::to_string(kMaxBarrierNameBytes));
            return;
          }
          const bool workers_only = m.barrier_request().workers_only();
          if (workers_only && c.role != Role::kWorker) {
            invalid(c, proto::ERROR_MALFORMED, "a server called the workers-only barrier '" + name + "'");
            return;
          }
          auto [it, fresh] = barriers.try_emplace(name);
          if (!fresh && it->second.workers_only != workers_only) {
            invalid(c, proto::ERROR_MALFORMED, "barrier '" + name + "' called both workers-only and for all nodes");
            return;
          }
          it->second.workers_only = workers_only;
          it->second.arrived[c.rank] = m.barrier_request().contribution();
          check_barriers();
          return;
        }
        case proto::Envelope::kRejoinReady: {
          if (!c.rejoining) {
            invalid(c, proto::ERROR_PROTOCOL, "rejoin_ready from " + c.describe() + ", which did not rejoin");
            return;
          }
          const proto::RejoinReady& ready = m.rejoin_ready();
          if (ready.last_push_ids_size() != static_cast<int>(map.workers.size()) ||
              ready.worker_bytes_pushed_size() != static_cast<int>(map.workers.size())) {
            invalid(c, proto::ERROR_MALFORMED,
                    "rejoin_ready from " + c.describe() + " with the push counts of " +
                        std::to_string(ready.last_push_ids_size()) + " and " +
                        std::to_string(ready.worker_bytes_pushed_size()) + " workers; the job has " +
                        std::to_string(map.workers.size()));
            return;
          }
          c.rejoining = false;
          proto::Envelope back;
          proto::NodeRejoined* told = back.mutable_node_rejoined();
          to_proto(map.servers[c.role_rank], told->mutable_node());
          *told->mutable_last_push_ids() = ready.last_push_ids();
          *told->mutable_worker_bytes_pushed() = ready.worker_bytes_pushed();
          for_each_live([&](const Conn& n) {
            if (&n != &c) n.channel->send(back);
          });
          spdlog::info("scheduler: {} is ready again; the other nodes are told", c.describe());
          return;
        }
        case proto::Envelope::kDone:
          if (!c.done) spdlog::info("scheduler: {} is done", c.describe());
          c.done = true;
          maybe_shutdown();
          return;
        case proto::Envelope::kRegister:
          invalid(c, proto::ERROR_PROTOCOL, "already registered as " + c.describe());
          return;
        case proto::Envelope::BODY_NOT_SET:
          invalid(c, proto::ERROR_MALFORMED, "empty envelope (no message body set)");
          return;
        default: invalid(c, proto::ERROR_PROTOCOL, "nodes do not send " + body_name(m) + " messages"); return;
      }
    } catch (const std::exception& e) {
      // Nothing a peer sends may take the scheduler down.
      invalid(c, proto::ERROR_MALFORMED, e.what());
    }
  }

  // A joined node's bad message: answered and counted; the node stays.
  void invalid(Conn& c, proto::ErrorCode code, const std::string& text) {
    ++counters.invalid_messages;
    spdlog::warn("scheduler: invalid message from {} ({}): {}", c.joined ? c.describe() : "unregistered", c.peer,
                 text);
    if (!c.joined) {
      refuse(c, code, text);
      return;
    }
    // Each is answered and logged: a node that keeps sending them (a bug,
    // or one flooding the scheduler while never reading) is declared dead
    // before its queue of answers and the log grow without bound.
    if (++c.invalid > kMaxInvalidMessages) {
      const std::string why = std::to_string(c.invalid) + " invalid messages (at most " +
                              std::to_string(kMaxInvalidMessages) + "); the last: " + text;
      // Its answers so far and this last one go out first (within the
      // channel's flush deadline, for a peer that does not read).
      c.channel->send_and_close(make_error(code, "closing: " + why));
      declare_dead(c, why, /*channel_closing=*/true);
      return;
    }
    c.channel->send(make_error(code, text));
  }

  void handle_register(Conn& c, const proto::Register& reg) {
    try {
      validate_register(reg);
    } catch (const ProtocolError& e) {
      ++counters.invalid_messages;
      spdlog::warn("scheduler: malformed registration from {}: {}", c.peer, e.what());
      refuse(c, proto::ERROR_MALFORMED, e.what());
      return;
    }
    const Role role = from_proto(reg.role(), "register: role");
    const Mac want = hmac_sha256(*opt.token, register_mac_input(job_id, c.nonce, reg));
    const auto* got = reinterpret_cast<const uint8_t*>(reg.mac().data());
    if (!macs_equal(want, std::span<const uint8_t>(got, reg.mac().size()))) {
      ++counters.auth_failures;
      const std::string text = "bad token: registration of " + std::string(to_string(role)) + " on host " +
                               reg.host() + " from " + c.peer + " refused; it does not hold the job token of job " +
                               job_hex(job_id) + " (a node of another job?)";
      spdlog::warn("scheduler: {}", text);
      refuse(c, proto::ERROR_BAD_TOKEN, text);
      return;
    }
    auto& role_slots = slots(role);
    if (map_sent && role == Role::kServer && opt.server_rejoin_timeout.count() > 0) {
      rejoin(c, reg);
      return;
    }
    auto vacant = std::find(role_slots.begin(), role_slots.end(), nullptr);
    if (const uint32_t asked = reg.requested_role_rank_plus_one(); asked != 0 && !map_sent) {
      const uint32_t want = asked - 1;
      if (want >= role_slots.size() || role_slots[want] != nullptr) {
        ++counters.invalid_messages;
        // Taken by a node that asked for no rank: it got the first free slot.
        const bool by_unranked = want < role_slots.size() && !role_slots[want]->asked_rank;
        const std::string text =
            std::string(to_string(role)) + " rank " + std::to_string(want) + " asked by host " + reg.host() + " is " +
            (want >= role_slots.size()
                 ? "out of range (the job has " + std::to_string(role_slots.size()) + ")"
                 : by_unranked ? "taken by host " + role_slots[want]->host +
                                     ", which asked for no rank and got the first free one: give every node its "
                                     "--rank, or none"
                               : "taken");
        spdlog::warn("scheduler: {}", text);
        refuse(c, proto::ERROR_MALFORMED, text);
        return;
      }
      // Slots asked for by number are kept for their askers: a node without a
      // request takes the first slot nobody holds.
      vacant = role_slots.begin() + want;
    }
    if (map_sent || vacant == role_slots.end()) {
      ++counters.refused_full;
      const std::string text = "all " + std::to_string(expected(role)) + " " + to_string(role) +
                               "s of job " + job_hex(job_id) + " have joined; refusing host " + reg.host();
      spdlog::warn("scheduler: {}", text);
      refuse(c, proto::ERROR_ROLE_FULL, text);
      return;
    }
    // What a worker brings (the tables, a resume directory) must agree with
    // what the job has; nothing is kept from a refused registration.
    std::string conflict;
    std::vector<TableSchema> proposed;
    for (const proto::Table& t : reg.tables()) proposed.push_back(from_proto(t));
    if (role != Role::kWorker && (!proposed.empty() || !reg.resume_dir().empty())) {
      conflict = "only workers bring tables or a resume directory";
    } else if (!proposed.empty() && !opt.tables.empty() && !same_tables(opt.tables, proposed)) {
      // Tables given to the scheduler win; a worker's must agree.
      conflict = tables_from_workers ? "its tables differ from those of the first worker"
                                     : "its tables differ from the scheduler's --table list";
    } else if (!reg.resume_dir().empty() && !resume_dir.empty() && resume_dir != reg.resume_dir()) {
      conflict = "it resumes from " + reg.resume_dir() + ", the first worker from " + resume_dir;
    }
    if (!conflict.empty()) {
      ++counters.invalid_messages;
      const std::string text = std::string(to_string(role)) + " on host " + reg.host() + " refused: " + conflict;
      spdlog::warn("scheduler: {}", text);
      refuse(c, proto::ERROR_MALFORMED, text);
      return;
    }
    if (!proposed.empty() && opt.tables.empty()) {
      opt.tables = std::move(proposed);
      tables_from_workers = true;
    }
    if (!reg.resume_dir().empty()) resume_dir = reg.resume_dir();
    c.joined = true;
    c.role = role;
    c.role_rank = static_cast<uint32_t>(vacant - role_slots.begin());
    c.asked_rank = reg.requested_role_rank_plus_one() != 0;
    c.rank = role == Role::kServer ? c.role_rank : opt.num_servers + c.role_rank;
    c.host = reg.host();
    const auto* p = reinterpret_cast<const std::byte*>(reg.fabric_address().data());
    c.fabric_address.assign(p, p + reg.fabric_address().size());
    *vacant = conns.at(c.id);
    c.channel->set_max_frame_bytes(opt.max_frame_bytes);
    ++counters.joined;
    welcome(c, reg);
    spdlog::info("scheduler: {} joined from {} ({} of {} servers, {} of {} workers)", c.describe(), c.peer,
                 joined_count(Role::kServer), opt.num_servers, joined_count(Role::kWorker), opt.num_workers);
    maybe_broadcast_map();
  }

  void welcome(Conn& c, const proto::Register& reg) {
    proto::Envelope w;
    w.mutable_welcome()->set_job_id(job_id);
    w.mutable_welcome()->set_rank(c.rank);
    w.mutable_welcome()->set_role_rank(c.role_rank);
    const Mac proof =
        hmac_sha256(*opt.token, welcome_mac_input(job_id, c.nonce, reg.client_nonce(), c.rank, c.role_rank));
    w.mutable_welcome()->set_scheduler_mac(reinterpret_cast<const char*>(proof.data()), proof.size());
    c.channel->send(w);
  }

  // A server registering after the map (its token checked): it takes the
  // slot of the dead server whose rank it asks for.
  void rejoin(Conn& c, const proto::Register& reg) {
    const uint32_t asked = reg.requested_role_rank_plus_one();
    std::string why;
    if (asked == 0) {
      why = "the job is running: a server joins it again only under the rank of a dead one (--rank)";
    } else if (asked - 1 >= servers.size()) {
      why = "server rank " + std::to_string(asked - 1) + " is out of range (the job has " +
            std::to_string(servers.size()) + ")";
    } else if (!servers[asked - 1]->dead) {
      why = "server " + std::to_string(asked - 1) + " is alive; only a dead server's rank can be taken again";
    } else if (!reg.tables().empty() || !reg.resume_dir().empty()) {
      why = "only workers bring tables or a resume directory";
    }
    if (!why.empty()) {
      ++counters.refused_full;
      const std::string text = "server on host " + reg.host() + " refused: " + why;
      spdlog::warn("scheduler: {}", text);
      refuse(c, proto::ERROR_ROLE_FULL, text);
      return;
    }
    const uint32_t r = asked - 1;
    c.joined = true;
    c.role = Role::kServer;
    c.role_rank = r;
    c.rank = r;
    c.host = reg.host();
    const auto* p = reinterpret_cast<const std::byte*>(reg.fabric_address().data());
    c.fabric_address.assign(p, p + reg.fabric_address().size());
    servers[r] = conns.at(c.id);
    rejoin_deadlines.erase(r);
    c.channel->set_max_frame_bytes(opt.max_frame_bytes);
    ++counters.joined;
    ++counters.rejoined;
    welcome(c, reg);
    map.servers[r].host = c.host;
    map.servers[r].fabric_address = c.fabric_address;
    ClusterMap theirs = map;
    theirs.rejoin = true;
    proto::Envelope m;
    to_proto(theirs, m.mutable_cluster_map());
    c.channel->send(m);
    // The workers that died meanwhile: they must leave its SSP minimum too.
    for (const auto& w : workers) {
      if (w->dead) c.channel->send(node_dead_message(*w, "died before this server rejoined"));
    }
    c.rejoining = true;  // the others hear of it once it is ready (rejoin_ready)
    spdlog::info("scheduler: {} rejoined from {}", c.describe(), c.peer);
  }

  uint32_t joined_count(Role r) {
    uint32_t n = 0;
    for (const auto& s : slots(r)) n += s != nullptr;
    return n;
  }

  void on_closed(const std::shared_ptr<Conn>& c, const ChannelClosed& closed) {
    conns.erase(c->id);
    if (closed.cause == ChannelClosed::Cause::kBadFrame) {
      ++counters.malformed_frames;
      spdlog::warn("scheduler: bad frame from {} ({}): {}", c->joined ? c->describe() : "unregistered", c->peer,
                   closed.reason);
    }
    if (finishing) {
      if (conns.empty()) grace_timer.cancel();
      return;
    }
    if (c->joined && !c->dead) declare_dead(*c, "connection lost: " + closed.reason);
  }

  // --- the map -----------------------------------------------------------------

  static bool same_tables(const std::vector<TableSchema>& a, const std::vector<TableSchema>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      proto::Table x, y;
      to_proto(a[i], &x);
      to_proto(b[i], &y);
      if (x.SerializeAsString() != y.SerializeAsString()) return false;
    }
    return true;
  }

  void maybe_broadcast_map() {
    if (map_sent || finishing) return;
    if (joined_count(Role::kServer) < opt.num_servers || joined_count(Role::kWorker) < opt.num_workers) return;
    map_sent = true;
    join_timer.cancel();
    map.job_id = job_id;
    auto info = [](const Conn& c) {
      return NodeInfo{.role = c.role, .rank = c.rank, .role_rank = c.role_rank, .host = c.host,
                      .fabric_address = c.fabric_address};
    };
    for (const auto& s : servers) map.servers.push_back(info(*s));
    for (const auto& w : workers) map.workers.push_back(info(*w));
    map.tables = opt.tables;
    map.resume_dir = resume_dir;
    map.server_rejoin_timeout = opt.server_rejoin_timeout;
    if (!resume_dir.empty() && !find_resume_set()) return;
    proto::Envelope m;
    to_proto(map, m.mutable_cluster_map());
    for (const auto& s : servers) s->channel->send(m);
    for (const auto& w : workers) w->channel->send(m);
    spdlog::info("scheduler: job {:016x}: all {} servers and {} workers joined; cluster map sent", job_id,
                 opt.num_servers, opt.num_workers);
    check_barriers();
    maybe_shutdown();
  }

  // The workers resume from resume_dir: the scheduler finds the checkpoint
  // set there once for the job (every file's checksums checked; a damaged
  // newest file passed over to the one before) and hands its clock and
  // files out in the map, instead of every worker and server reading every
  // file. False when there is none to use: the job stops, naming why.
  bool find_resume_set() {
    try {
      const CheckpointSet set = find_checkpoint_set(resume_dir, opt.num_servers);
      if (set.job_fingerprint != checkpoint_fingerprint(map.tables)) {
        throw CheckpointError(set.paths.front() + ": written for other tables than this job's");
      }
      for (const std::string& why : set.refused) spdlog::warn("scheduler: passed over {}", why);
      map.resume_clock = set.clock;
      map.resume_paths = set.paths;
      spdlog::info("scheduler: the job resumes from the checkpoint set in {} at clock {}", resume_dir, set.clock);
    } catch (const std::exception& e) {
      // CheckpointError, and any other failure reading the directory (a
      // std::filesystem_error for a directory this user may not search):
      // the scheduler's own, never blamed on the node that joined last.
      const std::string text = "cannot resume from " + resume_dir + ": " + e.what();
      finish(make_error(proto::ERROR_CANNOT_RESUME, text), text, text);
      return false;
    }
    // Reading the set took this thread from the nodes' heartbeats: their
    // silence meanwhile was ours.
    for (auto& [id, c] : conns) c->last_seen = Clock::now();
    return true;
  }

  template <typename F>
  void for_each_live(F&& f) {
    for (auto* role_slots : {&servers, &workers}) {
      for (const auto& n : *role_slots) {
        if (n && !n->dead) f(*n);
      }
    }
  }

  // --- barriers, death, shutdown -----------------------------------------------

  // A barrier is released once every live node has arrived: nodes that died
  // while it was pending no longer hold it up.
  void check_barriers() {
    if (!map_sent || finishing) return;
    for (auto it = barriers.begin(); it != barriers.end();) {
      const bool workers_only = it->second.workers_only;
      auto member = [&](const Conn& n) { return !workers_only || n.role == Role::kWorker; };
      bool all = true;
      for_each_live([&](const Conn& n) { all = all && (!member(n) || it->second.arrived.count(n.rank) > 0); });
      if (!all) {
        ++it;
        continue;
      }
      uint64_t sum = 0;
      for (const auto& [rank, contribution] : it->second.arrived) sum += contribution;
      proto::Envelope m;
      m.mutable_barrier_release()->set_name(it->first);
      m.mutable_barrier_release()->set_sum(sum);
      for_each_live([&](const Conn& n) {
        if (member(n)) n.channel->send(m);
      });
      it = barriers.erase(it);
    }
  }

  static proto::Envelope node_dead_message(const Conn& c, const std::string& reason) {
    proto::Envelope m;
    proto::NodeDead* d = m.mutable_node_dead();
    d->set_rank(c.rank);
    d->set_role(to_proto(c.role));
    d->set_role_rank(c.role_rank);
    d->set_host(c.host);
    d->set_reason(reason.substr(0, kMaxReasonBytes));
    return m;
  }

  // channel_closing: the caller has sent its last frame with send_and_close.
  void declare_dead(Conn& c, const std::string& reason, bool channel_closing = false) {
    if (c.dead || finishing) return;
    c.dead = true;
    if (!channel_closing) c.channel->close();
    if (!map_sent) {
      // Before the map a slot is only a reservation: free it for a newcomer.
      for (auto& s : slots(c.role)) {
        if (s.get() == &c) s = nullptr;
      }
      for (auto& [name, b] : barriers) b.arrived.erase(c.rank);
      spdlog::warn("scheduler: {} left before the cluster map ({}); its slot is free again", c.describe(), reason);
      return;
    }
    ++counters.dead_nodes;
    spdlog::error("scheduler: {} is dead: {}", c.describe(), reason);
    const proto::Envelope m = node_dead_message(c, reason);
    for_each_live([&](const Conn& n) { n.channel->send(m); });
    if (c.role == Role::kServer && opt.server_rejoin_timeout.count() > 0) {
      rejoin_deadlines[c.role_rank] = Clock::now() + opt.server_rejoin_timeout;
      spdlog::warn("scheduler: waiting up to {} for server {} to rejoin (parafab server --recover --rank {})",
                   ms(opt.server_rejoin_timeout), c.role_rank, c.role_rank);
    }
    if (c.role == Role::kWorker && !c.done && opt.on_worker_failure == SchedulerOptions::OnWorkerFailure::kFail) {
      const std::string text = c.describe() + " died before it was done (" + reason +
                               "); the job stops (--on-worker-failure fail)";
      finish(make_error(proto::ERROR_NODE_FAILED, text), text, text);
      return;
    }
    check_barriers();
    maybe_shutdown();
  }

  void maybe_shutdown() {
    if (!map_sent || finishing) return;
    uint32_t done = 0, dead = 0;
    for (const auto& w : workers) {
      if (w->dead) {
        ++dead;
      } else if (w->done) {
        ++done;
      }
    }
    if (done + dead < opt.num_workers) return;
    std::string reason = "all workers done";
    if (dead > 0) reason += " (" + std::to_string(dead) + " of " + std::to_string(opt.num_workers) + " dead)";
    proto::Envelope m;
    m.mutable_shutdown()->set_reason(reason);
    finish(m, "", reason);
  }

  // Ends the job: every open connection gets `message` and is closed;
  // run() returns once they are (or after a grace period), throwing
  // `failure` when it is not empty.
  void finish(const proto::Envelope& message, std::string failure_text, const std::string& log_reason) {
    if (finishing) return;
    finishing = true;
    failure = std::move(failure_text);
    if (failure.empty()) {
      spdlog::info("scheduler: job {:016x} shutting down: {}", job_id, log_reason);
    } else {
      spdlog::error("scheduler: job {:016x} failed: {}", job_id, failure);
    }
    boost::system::error_code ec;
    acceptor.close(ec);
    join_timer.cancel();
    sweep_timer.cancel();
    accept_retry_timer.cancel();
    for (auto& [id, c] : conns) {
      if (c->joined && !c->dead && !c->refused) {
        c->channel->send_and_close(message);
      } else {
        c->channel->close();
      }
    }
    if (conns.empty()) return;
    // A peer that never reads cannot hold run() hostage.
    grace_timer.expires_after(std::chrono::seconds(5));
    grace_timer.async_wait([this](boost::system::error_code e) {
      if (e) return;
      for (auto& [id, c] : conns) c->channel->close();
    });
  }

  void on_join_timeout() {
    if (map_sent || finishing) return;
    std::string text = "join timeout after " + ms(opt.join_timeout) + ": missing ";
    text += std::to_string(opt.num_servers - joined_count(Role::kServer)) + " of " +
            std::to_string(opt.num_servers) + " servers and " +
            std::to_string(opt.num_workers - joined_count(Role::kWorker)) + " of " +
            std::to_string(opt.num_workers) + " workers";
    std::string joined;
    for_each_live([&](const Conn& n) {
      joined += (joined.empty() ? "" : ", ") + std::string(to_string(n.role)) + " " + std::to_string(n.role_rank) +
                " on " + n.host;
    });
    text += "; joined: " + (joined.empty() ? std::string("none") : joined);
    size_t pending = 0;
    std::string pending_peers;
    for (const auto& [id, c] : conns) {
      if (!c->joined && !c->refused) {
        pending_peers += (pending++ ? ", " : "") + c->peer;
      }
    }
    if (pending > 0) text += "; connected but not registered: " + pending_peers;
    if (counters.auth_failures > 0) {
      text += "; " + std::to_string(counters.auth_failures.load()) + " registration(s) refused for a bad token";
    }
    finish(make_error(proto::ERROR_JOIN_TIMEOUT, text), text, text);
  }

  // Heartbeats and registration deadlines, checked a few times per timeout.
  void sweep() {
    const auto now = Clock::now();
    std::vector<std::shared_ptr<Conn>> silent;
    for (auto& [id, c] : conns) {
      if (c->refused || c->dead) continue;
      if (!c->joined && now - c->connected_at > opt.auth_timeout) {
        ++counters.auth_timeouts;
        spdlog::warn("scheduler: {} did not register within {}; closing", c->peer, ms(opt.auth_timeout));
        refuse(*c, proto::ERROR_NOT_AUTHENTICATED, "no registration within " + ms(opt.auth_timeout));
      } else if (c->joined && now - c->last_seen > opt.heartbeat_timeout) {
        silent.push_back(c);
      }
    }
    for (const auto& c : silent) {
      declare_dead(*c, "no heartbeat for " + ms(std::chrono::duration_cast<std::chrono::milliseconds>(now - c->last_seen)));
    }
    for (const auto& [r, deadline] : rejoin_deadlines) {
      if (now < deadline || finishing) continue;
      const std::string text = "server " + std::to_string(r) + " died and did not rejoin within " +
                               ms(opt.server_rejoin_timeout) + "; the job stops";
      finish(make_error(proto::ERROR_NODE_FAILED, text), text, text);
      return;
    }
    schedule_sweep();
  }

  void schedule_sweep() {
    if (finishing) return;
    auto period = std::min(opt.heartbeat_timeout, opt.auth_timeout) / 4;
    period = std::max(period, std::chrono::milliseconds(5));
    sweep_timer.expires_after(period);
    sweep_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec) sweep();
    });
  }
};

Scheduler::Scheduler(SchedulerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  SchedulerOptions& o = impl_->opt;
  if (!o.token) throw std::invalid_argument("scheduler: no job token given");
  if (o.num_servers == 0) throw std::invalid_argument("scheduler: num_servers must be >= 1");
  if (o.num_workers == 0) throw std::invalid_argument("scheduler: num_workers must be >= 1");
  if (o.join_timeout.count() <= 0 || o.heartbeat_timeout.count() <= 0 || o.auth_timeout.count() <= 0) {
    throw std::invalid_argument("scheduler: join, heartbeat and auth timeouts must be > 0");
  }
  if (o.max_frame_bytes < 1024) throw std::invalid_argument("scheduler: max_frame_bytes must be >= 1024");
  std::set<uint32_t> ids;
  for (const TableSchema& t : o.tables) {
    t.validate();
    if (!ids.insert(t.id).second) throw std::invalid_argument("scheduler: table " + std::to_string(t.id) + " twice");
  }
  impl_->servers.resize(o.num_servers);
  impl_->workers.resize(o.num_workers);
  impl_->job_id = random_u64();
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(o.bind, ec);
  if (ec) throw std::invalid_argument("scheduler: bind address '" + o.bind + "': " + ec.message());
  const tcp::endpoint ep(address, o.port);
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw SchedulerError("scheduler: cannot listen on " + o.bind + ":" + std::to_string(o.port) + ": " +
                         ec.message());
  }
  spdlog::info("scheduler: job {:016x} listening on {}:{} for {} servers and {} workers (token {})", impl_->job_id,
               o.bind, port(), o.num_servers, o.num_workers, o.token->fingerprint());
}

Scheduler::~Scheduler() = default;

uint16_t Scheduler::port() const { return impl_->acceptor.local_endpoint().port(); }
uint64_t Scheduler::job_id() const { return impl_->job_id; }

void Scheduler::run() {
  Impl& s = *impl_;
  if (s.ran) throw std::logic_error("scheduler: run() called twice");
  s.ran = true;
  s.accept();
  s.schedule_sweep();
  s.join_timer.expires_after(s.opt.join_timeout);
  s.join_timer.async_wait([&s](boost::system::error_code ec) {
    if (!ec) s.on_join_timeout();
  });
  s.io.run();
  if (!s.failure.empty()) throw SchedulerError(s.failure);
}

void Scheduler::stop() {
  Impl* s = impl_.get();
  asio::post(s->io, [s] {
    proto::Envelope m;
    m.mutable_shutdown()->set_reason("scheduler stopped");
    s->finish(m, "", "stop() called");
  });
}

SchedulerStats Scheduler::stats() const {
  const auto& c = impl_->counters;
  return SchedulerStats{.joined = c.joined,
                        .auth_failures = c.auth_failures,
                        .malformed_frames = c.malformed_frames,
                        .invalid_messages = c.invalid_messages,
                        .unauthenticated_messages = c.unauthenticated_messages,
                        .refused_full = c.refused_full,
                        .auth_timeouts = c.auth_timeouts,
                        .dead_nodes = c.dead_nodes,
                        .rejoined = c.rejoined};
}

}  // namespace parafab::ps

namespace parafab::ps {

SchedulerOptions::OnWorkerFailure parse_worker_failure_policy(const std::string& text) {
  if (text == "fail") return SchedulerOptions::OnWorkerFailure::kFail;
  if (text == "continue") return SchedulerOptions::OnWorkerFailure::kContinue;
  throw std::invalid_argument("--on-worker-failure: '" + text + "' is not fail or continue");
}

}  // namespace parafab::ps
