#include "ps/scheduler_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "ps/control_channel.h"

namespace parafab::ps {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }
}  // namespace

struct SchedulerClient::Impl {
  // io first: destroyed last, after every socket and timer that uses it.
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  SchedulerClientOptions opt;
  std::string address;  // "host:port" of the scheduler, for messages
  std::thread thread;
  asio::steady_timer heartbeat_timer{io};
  asio::steady_timer connect_timer{io};
  asio::steady_timer retry_timer{io};
  // Connecting: refused connections are tried again until this deadline
  // (join() + connect_timeout), every retry_delay (doubling up to 1 s).
  std::chrono::steady_clock::time_point connect_deadline;
  std::chrono::milliseconds retry_delay{50};
  std::atomic<uint32_t> connect_attempts{0};

  enum class Phase { kNew, kConnecting, kAuthenticating, kAwaitMap, kJoined, kShutdown, kFailed };

  // Guards everything below; the io thread writes, callers read and wait.
  mutable std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kNew;
  std::string error;
  std::shared_ptr<ControlChannel> channel;
  std::string nonce, client_nonce;
  uint64_t job_id = 0;
  uint32_t rank = 0, role_rank = 0;
  bool registered = false;
  ClusterMap map;
  std::map<std::string, std::deque<uint64_t>> released;  // barrier name -> sums of releases not yet consumed
  std::vector<uint32_t> dead;
  std::string shutdown_reason;
  uint64_t heartbeat_sequence = 0;

  explicit Impl(SchedulerClientOptions o)
      : opt(std::move(o)), address(opt.host + ":" + std::to_string(opt.port)) {}

  ~Impl() {
    if (thread.joinable()) {
      {
        std::lock_guard lock(mu);
        if (channel) channel->close();
      }
      asio::post(io, [this] {
        heartbeat_timer.cancel();
        connect_timer.cancel();
        retry_timer.cancel();
        io.stop();
      });
      guard.reset();
      thread.join();
    }
  }

  bool terminal() const { return phase == Phase::kShutdown || phase == Phase::kFailed; }

  // io thread: the job is over for this client, with `text` as the reason.
  void fail(const std::string& text) {
    std::shared_ptr<ControlChannel> ch;
    {
      std::lock_guard lock(mu);
      if (terminal()) return;
      phase = Phase::kFailed;
      error = text;
      ch = channel;
    }
    cv.notify_all();
    heartbeat_timer.cancel();
    if (ch) ch->close();
  }

  // A node may start before its scheduler listens (srun starts every task
  // at once): a refused connection is tried again until connect_deadline.
  void start_connect(const tcp::resolver::results_type& endpoints) {
    auto socket = std::make_shared<tcp::socket>(io);
    ++connect_attempts;
    connect_timer.expires_at(connect_deadline);
    connect_timer.async_wait([socket](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        socket->close(ignored);
      }
    });
    asio::async_connect(*socket, endpoints, [this, socket, endpoints](boost::system::error_code ec,
                                                                      const tcp::endpoint&) {
      const bool timed_out = connect_timer.cancel() == 0;
      if (ec) {
        const auto now = std::chrono::steady_clock::now();
        if (!timed_out && ec == asio::error::connection_refused && now + retry_delay < connect_deadline) {
          {
            std::lock_guard lock(mu);
            if (terminal()) return;
          }
          retry_timer.expires_after(retry_delay);
          retry_delay = std::min<std::chrono::milliseconds>(2 * retry_delay, std::chrono::seconds(1));
          retry_timer.async_wait([this, endpoints](boost::system::error_code wait_ec) {
            if (!wait_ec) start_connect(endpoints);
          });
          return;
        }
        const uint32_t tries = connect_attempts.load();
        fail("cannot connect to scheduler at " + address + ": " +
             (timed_out ? "no connection within " + ms(opt.connect_timeout) : ec.message()) +
             (tries > 1 ? " (" + std::to_string(tries) + " tries within " + ms(opt.connect_timeout) + ")" : ""));
        return;
      }
      auto ch = std::make_shared<ControlChannel>(std::move(*socket), opt.max_frame_bytes);
      {
        std::lock_guard lock(mu);
        if (terminal()) return;
        channel = ch;
        phase = Phase::kAuthenticating;
      }
      ch->start({.on_message = [this](proto::Envelope& m) { on_message(m); },
                 .on_closed = [this](const ChannelClosed& c) { on_closed(c); }});
    });
  }

  void on_closed(const ChannelClosed& c) {
    heartbeat_timer.cancel();
    fail(c.cause == ChannelClosed::Cause::kLocal ? "connection to scheduler at " + address + " closed"
                                                 : "connection to scheduler at " + address + " lost: " + c.reason);
  }

  void on_message(proto::Envelope& m) {
    try {
      dispatch(m);
    } catch (const std::exception& e) {
      // A scheduler that sends nonsense ends this client's job, never the process.
      fail("bad message from scheduler at " + address + ": " + e.what());
    }
  }

  void dispatch(proto::Envelope& m) {
    switch (m.body_case()) {
      case proto::Envelope::kChallenge: return on_challenge(m.challenge());
      case proto::Envelope::kWelcome: return on_welcome(m.welcome());
      case proto::Envelope::kClusterMap: return on_map(m.cluster_map());
      case proto::Envelope::kError: {
        const std::string text = m.error().text();
        bool joined;
        {
          std::lock_guard lock(mu);
          joined = phase == Phase::kJoined;
        }
        if (!joined || m.error().code() == proto::ERROR_JOIN_TIMEOUT || m.error().code() == proto::ERROR_STOPPED ||
            m.error().code() == proto::ERROR_NODE_FAILED || m.error().code() == proto::ERROR_CANNOT_RESUME) {
          fail("scheduler at " + address + ": " + text);
        } else {
          spdlog::warn("scheduler client: scheduler at {} reports an error: {}", address, text);
        }
        return;
      }
      case proto::Envelope::kBarrierRelease: {
        {
          std::lock_guard lock(mu);
          released[m.barrier_release().name()].push_back(m.barrier_release().sum());
        }
        cv.notify_all();
        return;
      }
      case proto::Envelope::kNodeDead: return on_node_dead(m.node_dead());
      case proto::Envelope::kNodeRejoined: return on_node_rejoined(m.node_rejoined());
      case proto::Envelope::kShutdown: {
        {
          std::lock_guard lock(mu);
          if (terminal()) return;
          phase = Phase::kShutdown;
          shutdown_reason = m.shutdown().reason().empty() ? "shutdown" : m.shutdown().reason();
        }
        heartbeat_timer.cancel();
        cv.notify_all();
        return;
      }
      default:
        throw ProtocolError("unexpected " + body_name(m) + " message");
    }
  }

  void on_challenge(const proto::Challenge& c) {
    if (c.protocol_version() != kControlProtocolVersion) {
      throw ProtocolError("scheduler speaks control protocol " + std::to_string(c.protocol_version()) +
                          ", this node " + std::to_string(kControlProtocolVersion));
    }
    if (c.nonce().size() != kNonceBytes) throw ProtocolError("challenge nonce is not 32 bytes");
    std::shared_ptr<ControlChannel> ch;
    proto::Envelope m;
    {
      std::lock_guard lock(mu);
      if (registered) throw ProtocolError("second challenge");
      registered = true;
      nonce = c.nonce();
      job_id = c.job_id();
      const std::vector<uint8_t> cn = random_bytes(kNonceBytes);
      client_nonce.assign(cn.begin(), cn.end());
      proto::Register* r = m.mutable_register_();
      r->set_protocol_version(kControlProtocolVersion);
      r->set_role(to_proto(opt.role));
      r->set_host(opt.host_name);
      r->set_fabric_address(reinterpret_cast<const char*>(opt.fabric_address.data()), opt.fabric_address.size());
      r->set_client_nonce(client_nonce);
      if (opt.requested_role_rank) r->set_requested_role_rank_plus_one(*opt.requested_role_rank + 1);
      for (const TableSchema& t : opt.tables) to_proto(t, r->add_tables());
      r->set_resume_dir(opt.resume_dir);
      const Mac mac = hmac_sha256(*opt.token, register_mac_input(job_id, nonce, *r));
      r->set_mac(reinterpret_cast<const char*>(mac.data()), mac.size());
      ch = channel;
    }
    ch->send(m);
  }

  void on_welcome(const proto::Welcome& w) {
    {
      std::lock_guard lock(mu);
      if (phase != Phase::kAuthenticating || !registered) throw ProtocolError("welcome before registration");
      if (w.job_id() != job_id) throw ProtocolError("welcome names another job");
      const Mac want = hmac_sha256(*opt.token, welcome_mac_input(job_id, nonce, client_nonce, w.rank(), w.role_rank()));
      const auto* got = reinterpret_cast<const uint8_t*>(w.scheduler_mac().data());
      if (!macs_equal(want, std::span<const uint8_t>(got, w.scheduler_mac().size()))) {
        throw ProtocolError("the scheduler could not prove it holds this job's token (a scheduler of another job?)");
      }
      rank = w.rank();
      role_rank = w.role_rank();
      phase = Phase::kAwaitMap;
    }
    schedule_heartbeat();
  }

  void on_map(const proto::ClusterMap& pm) {
    ClusterMap m = from_proto(pm);
    {
      std::lock_guard lock(mu);
      if (phase != Phase::kAwaitMap) throw ProtocolError("cluster map before welcome");
      if (m.job_id != job_id) throw ProtocolError("cluster map of another job");
      const auto& mine = opt.role == Role::kServer ? m.servers : m.workers;
      if (role_rank >= mine.size() || mine[role_rank].rank != rank ||
          mine[role_rank].fabric_address != opt.fabric_address) {
        throw ProtocolError("cluster map does not list this node as " + std::string(to_string(opt.role)) + " " +
                            std::to_string(role_rank) + " with its fabric address");
      }
      map = std::move(m);
      phase = Phase::kJoined;
    }
    cv.notify_all();
  }

  void on_node_dead(const proto::NodeDead& d) {
    NodeInfo n;
    n.role = from_proto(d.role(), "node_dead role");
    n.rank = d.rank();
    n.role_rank = d.role_rank();
    n.host = d.host();
    {
      std::lock_guard lock(mu);
      if (std::find(dead.begin(), dead.end(), n.rank) != dead.end()) return;
      dead.push_back(n.rank);
      for (const auto* nodes : {&map.servers, &map.workers}) {
        for (const NodeInfo& k : *nodes) {
          if (k.rank == n.rank) n.fabric_address = k.fabric_address;
        }
      }
    }
    spdlog::warn("scheduler client: {} {} (rank {}, host {}) is dead: {}", to_string(n.role), n.role_rank, n.rank,
                 n.host, d.reason());
    cv.notify_all();
    if (opt.on_node_dead) opt.on_node_dead(n, d.reason());
  }

  void on_node_rejoined(const proto::NodeRejoined& r) {
    const NodeInfo n = from_proto(r.node());
    RestoredPushes pushes;
    pushes.last_push_ids.assign(r.last_push_ids().begin(), r.last_push_ids().end());
    pushes.worker_bytes_pushed.assign(r.worker_bytes_pushed().begin(), r.worker_bytes_pushed().end());
    {
      std::lock_guard lock(mu);
      if (phase != Phase::kJoined) throw ProtocolError("node_rejoined before the cluster map");
      if (n.role != Role::kServer || n.role_rank >= map.servers.size() || n.rank != n.role_rank) {
        throw ProtocolError("node_rejoined names " + std::string(to_string(n.role)) + " " +
                            std::to_string(n.role_rank) + " (rank " + std::to_string(n.rank) +
                            "), not a server of this job");
      }
      if (pushes.last_push_ids.size() != map.workers.size() || pushes.worker_bytes_pushed.size() != map.workers.size()) {
        throw ProtocolError("node_rejoined carries the push counts of " + std::to_string(pushes.last_push_ids.size()) +
                            " and " + std::to_string(pushes.worker_bytes_pushed.size()) + " workers; the job has " +
                            std::to_string(map.workers.size()));
      }
      map.servers[n.role_rank].host = n.host;
      map.servers[n.role_rank].fabric_address = n.fabric_address;
      dead.erase(std::remove(dead.begin(), dead.end(), n.rank), dead.end());
    }
    spdlog::info("scheduler client: server {} (rank {}, host {}) rejoined", n.role_rank, n.rank, n.host);
    cv.notify_all();
    if (opt.on_node_rejoined) opt.on_node_rejoined(n, pushes);
  }

  void schedule_heartbeat() {
    if (opt.heartbeat_interval.count() <= 0) return;
    heartbeat_timer.expires_after(opt.heartbeat_interval);
    heartbeat_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      std::shared_ptr<ControlChannel> ch;
      proto::Envelope m;
      {
        std::lock_guard lock(mu);
        if (terminal()) return;
        ch = channel;
        m.mutable_heartbeat()->set_sequence(++heartbeat_sequence);
      }
      ch->send(m);
      schedule_heartbeat();
    });
  }

  // Caller threads: the channel once joined, or an exception saying why not.
  std::shared_ptr<ControlChannel> joined_channel(const char* what) {
    std::lock_guard lock(mu);
    if (phase == Phase::kFailed) throw std::runtime_error(std::string(what) + ": " + error);
    if (phase == Phase::kShutdown) {
      throw std::runtime_error(std::string(what) + ": the job has shut down (" + shutdown_reason + ")");
    }
    if (phase != Phase::kJoined) throw std::logic_error(std::string(what) + " before join()");
    return channel;
  }
};

SchedulerClient::SchedulerClient(SchedulerClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  const SchedulerClientOptions& o = impl_->opt;
  if (!o.token) throw std::invalid_argument("scheduler client: no job token given");
  if (o.role != Role::kServer && o.role != Role::kWorker) {
    throw std::invalid_argument("scheduler client: role must be server or worker");
  }
  if (o.host_name.empty() || o.host_name.size() > kMaxHostBytes) {
    throw std::invalid_argument("scheduler client: host_name must have 1 to 255 bytes");
  }
  if (o.fabric_address.empty() || o.fabric_address.size() > kMaxFabricAddressBytes) {
    throw std::invalid_argument("scheduler client: fabric_address must have 1 to 4096 bytes");
  }
}

SchedulerClient::~SchedulerClient() = default;

const ClusterMap& SchedulerClient::join(std::chrono::milliseconds timeout) {
  Impl& c = *impl_;
  {
    std::lock_guard lock(c.mu);
    if (c.phase != Impl::Phase::kNew) throw std::logic_error("scheduler client: join() called twice");
    c.phase = Impl::Phase::kConnecting;
  }
  tcp::resolver resolver(c.io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(c.opt.host, std::to_string(c.opt.port), ec);
  if (ec) {
    throw std::runtime_error("cannot resolve scheduler address " + c.address + ": " + ec.message());
  }
  c.connect_deadline = std::chrono::steady_clock::now() + c.opt.connect_timeout;
  c.guard.emplace(c.io.get_executor());
  c.thread = std::thread([&c] { c.io.run(); });
  asio::post(c.io, [&c, endpoints] { c.start_connect(endpoints); });

  std::unique_lock lock(c.mu);
  const bool finished = c.cv.wait_for(lock, timeout, [&c] {
    return c.phase == Impl::Phase::kJoined || c.terminal();
  });
  if (c.phase == Impl::Phase::kJoined) return c.map;
  if (c.phase == Impl::Phase::kFailed) throw std::runtime_error(c.error);
  if (c.phase == Impl::Phase::kShutdown) {
    throw std::runtime_error("scheduler at " + c.address + " shut down before the cluster map: " + c.shutdown_reason);
  }
  (void)finished;
  std::string where = c.phase == Impl::Phase::kAwaitMap
                          ? " (joined as " + std::string(to_string(c.opt.role)) + " " + std::to_string(c.role_rank) +
                                ", rank " + std::to_string(c.rank) + "; the other nodes have not all joined)"
                          : "";
  throw std::runtime_error("no cluster map from scheduler at " + c.address + " within " + ms(timeout) + where);
}

uint32_t SchedulerClient::connect_attempts() const { return impl_->connect_attempts.load(); }

const ClusterMap& SchedulerClient::cluster_map() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->map.servers.empty()) throw std::logic_error("scheduler client: cluster_map() before join()");
  return impl_->map;
}

uint32_t SchedulerClient::rank() const {
  std::lock_guard lock(impl_->mu);
  return impl_->rank;
}

uint32_t SchedulerClient::role_rank() const {
  std::lock_guard lock(impl_->mu);
  return impl_->role_rank;
}

uint64_t SchedulerClient::job_id() const {
  std::lock_guard lock(impl_->mu);
  return impl_->job_id;
}

uint64_t SchedulerClient::barrier(const std::string& name, std::chrono::milliseconds timeout, bool workers_only,
                                  uint64_t contribution) {
  Impl& c = *impl_;
  if (name.empty() || name.size() > kMaxBarrierNameBytes) {
    throw std::invalid_argument("barrier name must have 1 to 256 bytes");
  }
  const std::string what = "barrier '" + name + "'";
  proto::Envelope m;
  m.mutable_barrier_request()->set_name(name);
  m.mutable_barrier_request()->set_workers_only(workers_only);
  m.mutable_barrier_request()->set_contribution(contribution);
  c.joined_channel(what.c_str())->send(m);
  std::unique_lock lock(c.mu);
  auto pending = [&] {
    const auto it = c.released.find(name);
    return it != c.released.end() && !it->second.empty();
  };
  const bool released = c.cv.wait_for(lock, timeout, [&] { return pending() || c.terminal(); });
  if (pending()) {
    std::deque<uint64_t>& sums = c.released[name];
    const uint64_t sum = sums.front();
    sums.pop_front();
    if (sums.empty()) c.released.erase(name);
    return sum;
  }
  if (c.phase == Impl::Phase::kFailed) throw std::runtime_error(what + ": " + c.error);
  if (c.phase == Impl::Phase::kShutdown) throw std::runtime_error(what + ": the job shut down (" + c.shutdown_reason + ")");
  (void)released;
  throw std::runtime_error(what + " not released by scheduler at " + c.address + " within " + ms(timeout));
}

void SchedulerClient::done() {
  proto::Envelope m;
  m.mutable_done();
  impl_->joined_channel("done")->send(m);
}

void SchedulerClient::rejoin_ready(const RestoredPushes& pushes) {
  proto::Envelope m;
  proto::RejoinReady* r = m.mutable_rejoin_ready();
  r->mutable_last_push_ids()->Add(pushes.last_push_ids.begin(), pushes.last_push_ids.end());
  r->mutable_worker_bytes_pushed()->Add(pushes.worker_bytes_pushed.begin(), pushes.worker_bytes_pushed.end());
  impl_->joined_channel("rejoin_ready")->send(m);
}

bool SchedulerClient::wait_for_shutdown(std::chrono::milliseconds timeout) {
  Impl& c = *impl_;
  std::unique_lock lock(c.mu);
  c.cv.wait_for(lock, timeout, [&c] { return c.terminal(); });
  if (c.phase == Impl::Phase::kShutdown) return true;
  if (c.phase == Impl::Phase::kFailed) throw std::runtime_error(c.error);
  return false;
}

std::vector<uint32_t> SchedulerClient::dead_ranks() const {
  std::lock_guard lock(impl_->mu);
  return impl_->dead;
}

std::string SchedulerClient::shutdown_reason() const {
  std::lock_guard lock(impl_->mu);
  return impl_->shutdown_reason;
}

}  // namespace parafab::ps
