#include "exec/comm/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace loom::exec::tcp {
namespace {

constexpr uint32_t kFrameMagic = 0x4c4d4652;  // "LMFR"
constexpr size_t kFrameBytes = size_t(4) << 20;
constexpr uint8_t kFirst = 1, kLast = 2, kAbandoned = 4;

// Frames use the host's byte order: every rank runs the same build on the
// same kind of machine (a mismatch shows up as a bad magic).
struct FrameHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t flags;
  uint16_t reserved;
  uint64_t ctx;
  int64_t tag;
  uint64_t total;  // message bytes
  uint64_t bytes;  // this frame's payload bytes
};
static_assert(sizeof(FrameHeader) == 40);

constexpr uint32_t kHelloMagic = 0x4c4d484c;  // "LMHL"
struct Hello {
  uint32_t magic;
  uint32_t world;
  uint64_t nonce;
  uint32_t from;
  uint32_t to;
};
static_assert(sizeof(Hello) == 24);

}  // namespace

struct Transport::Peer {
  Fd fd;
  std::mutex write_mu;
  std::thread reader;
};

Transport::Transport(int rank, std::vector<PeerAddress> addresses)
    : rank_(rank), addresses_(std::move(addresses)), down_(addresses_.size()) {
  peers_.resize(addresses_.size());
}

std::shared_ptr<Transport> Transport::single() {
  return std::shared_ptr<Transport>(new Transport(0, {PeerAddress{"127.0.0.1", 0}}));
}

std::string Transport::describe(int r) const {
  if (r < 0 || r >= size()) return "rank " + std::to_string(r);
  return "rank " + std::to_string(r) + " (" + addresses_[size_t(r)].to_string() + ")";
}

Result<std::shared_ptr<Transport>> Transport::connect(Rendezvous rv, int rank, double timeout_s) {
  const int world = int(rv.peers.size());
  const Deadline deadline = deadline_after(timeout_s);
  std::shared_ptr<Transport> t(new Transport(rank, rv.peers));
  std::vector<Fd> fds(static_cast<size_t>(world));
  auto who = [&](int r) { return t->describe(r); };

  // 1. Connect to every lower rank (their listeners exist since before they
  //    registered: the kernel's backlog accepts without them) and say hello.
  for (int j = 0; j < rank; ++j) {
    SockAddr addr;
    std::string why;
    if (!resolve(rv.peers[size_t(j)].host, rv.peers[size_t(j)].port, &addr, &why)) {
      return Status(StatusCode::kRemoteError, "rank " + std::to_string(rank) + " cannot resolve the address of " +
                                                  who(j) + ": " + why);
    }
    int err = 0;
    for (;;) {
      fds[size_t(j)] = connect_to(addr, deadline, &err);
      if (fds[size_t(j)] || Clock::now() >= deadline || err == ETIMEDOUT) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // refused: retry until the deadline
    }
    if (!fds[size_t(j)]) {
      return Status(StatusCode::kTimeout, "rank " + std::to_string(rank) + " could not connect to " + who(j) +
                                              " within " + seconds_text(timeout_s) + ": " + errno_text(err) +
                                              "; the ranks' hosts must reach each other on ephemeral TCP ports "
                                              "(firewall?)");
    }
    Hello h{kHelloMagic, uint32_t(world), rv.job_nonce, uint32_t(rank), uint32_t(j)};
    IoResult io = write_all(fds[size_t(j)].get(), &h, sizeof h, deadline);
    if (!io.ok()) {
      return Status(StatusCode::kRemoteError, "rank " + std::to_string(rank) + " could not greet " + who(j) + ": " +
                                                  io.text() + "; it failed during start-up, see its output");
    }
  }

  // 2. Accept every higher rank; turn away anything else (another job, a scanner).
  int needed = world - 1 - rank;
  while (needed > 0) {
    pollfd p{rv.listener.get(), POLLIN, 0};
    int n = ::poll(&p, 1, poll_ms(deadline, 500));
    if (n < 0 && errno != EINTR) return io_error("mesh: poll failed: " + errno_text(errno));
    if (n <= 0) {
      if (Clock::now() < deadline) continue;
      std::vector<int> missing;
      for (int r = rank + 1; r < world; ++r) {
        if (!fds[size_t(r)]) missing.push_back(r);
      }
      return Status(StatusCode::kTimeout,
                    "rank " + std::to_string(rank) + " waited " + seconds_text(timeout_s) + " for rank" +
                        (missing.size() > 1 ? "s " : " ") + rank_list(missing) +
                        " to connect to it (they registered at the rendezvous, then did not connect: they "
                        "failed, or a firewall blocks ephemeral TCP ports between the hosts)");
    }
    Fd c(::accept4(rv.listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) continue;
    Hello h{};
    if (!read_all(c.get(), &h, sizeof h, std::min(deadline, deadline_after(5))).ok()) continue;
    bool ok = h.magic == kHelloMagic && h.nonce == rv.job_nonce && h.world == uint32_t(world) &&
              h.to == uint32_t(rank) && int(h.from) > rank && int(h.from) < world && !fds[h.from];
    if (!ok) continue;  // not one of ours
    Hello ack{kHelloMagic, uint32_t(world), rv.job_nonce, uint32_t(rank), h.from};
    if (!write_all(c.get(), &ack, sizeof ack, deadline).ok()) continue;
    fds[h.from] = std::move(c);
    --needed;
  }
  rv.listener.reset();

  // 3. Every lower rank answered our hello.
  for (int j = 0; j < rank; ++j) {
    Hello ack{};
    IoResult io = read_all(fds[size_t(j)].get(), &ack, sizeof ack, deadline);
    if (io.what == Io::kTimedOut) {
      return Status(StatusCode::kTimeout, "rank " + std::to_string(rank) + ": " + who(j) +
                                              " did not answer its connection within " + seconds_text(timeout_s) +
                                              "; is it stuck?");
    }
    if (!io.ok()) {
      return Status(StatusCode::kRemoteError, "rank " + std::to_string(rank) + ": " + who(j) +
                                                  " closed the connection during start-up (" + io.text() +
                                                  "): it failed; see its output");
    }
    if (ack.magic != kHelloMagic || ack.nonce != rv.job_nonce || ack.from != uint32_t(j) ||
        ack.to != uint32_t(rank)) {
      return Status(StatusCode::kRemoteError, "rank " + std::to_string(rank) + ": the process at " +
                                                  rv.peers[size_t(j)].to_string() +
                                                  " is not rank " + std::to_string(j) + " of this job");
    }
  }

  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    set_no_delay(fds[size_t(r)].get());
    t->peers_[size_t(r)] = std::make_unique<Peer>();
    t->peers_[size_t(r)]->fd = std::move(fds[size_t(r)]);
  }
  t->start_readers();
  return t;
}

void Transport::start_readers() {
  std::lock_guard<std::mutex> lk(mu_);
  for (int r = 0; r < size(); ++r) {
    if (!peers_[size_t(r)]) continue;
    ++readers_running_;
    peers_[size_t(r)]->reader = std::thread([this, r] { reader(r); });
  }
}

Transport::~Transport() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    closing_ = true;
    cv_.notify_all();
  }
  // Half-close: our last bytes go out, then FIN; wait (briefly) for the
  // peers' FIN so no unread byte turns our close into a reset that could
  // discard what they sent last.
  for (auto& p : peers_) {
    if (p) ::shutdown(p->fd.get(), SHUT_WR);
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(1), [&] { return readers_running_ == 0; });
  }
  for (auto& p : peers_) {
    if (p) ::shutdown(p->fd.get(), SHUT_RDWR);
  }
  for (auto& p : peers_) {
    if (p && p->reader.joinable()) p->reader.join();
  }
}

void Transport::abort_peers(int exit_code) {
  for (size_t m = 0; m < peers_.size(); ++m) {
    if (!peers_[m]) continue;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!down_[m].is_ok()) continue;
    }
    Peer& p = *peers_[m];
    // Bounded like close_context(): a send holding the connection to a peer
    // that stopped draining must not keep this rank from ending.
    std::unique_lock<std::mutex> lk(p.write_mu, std::defer_lock);
    for (const Deadline until = deadline_after(0.2); !lk.try_lock() && Clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!lk.owns_lock()) continue;
    FrameHeader h{kFrameMagic, uint8_t(Kind::kAbort), uint8_t(kFirst | kLast), 0, 0, int64_t(exit_code), 0, 0};
    write_all(p.fd.get(), &h, sizeof h, deadline_after(0.2));
  }
  shutdown_now();
}

std::optional<Transport::PeerAbort> Transport::peer_abort() const {
  std::lock_guard<std::mutex> lk(mu_);
  return peer_abort_;
}

void Transport::shutdown_now() {
  for (auto& p : peers_) {
    if (p) ::shutdown(p->fd.get(), SHUT_RDWR);
  }
}

void Transport::mark_down(int r, Status why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (down_[size_t(r)].is_ok()) down_[size_t(r)] = std::move(why);
  cv_.notify_all();
}

void Transport::reader(int r) {
  Peer& p = *peers_[size_t(r)];
  struct Partial {
    Message m;
    size_t got = 0;
  };
  std::map<Key, Partial> partial;  // messages whose frames are still arriving
  Status why;
  for (;;) {
    FrameHeader h{};
    IoResult io = read_all(p.fd.get(), &h, sizeof h, Deadline::max());
    if (!io.ok()) {
      why = Status(StatusCode::kRemoteError,
                   describe(r) + (io.what == Io::kClosed && io.done == 0 && io.err == 0
                                      ? " closed its connection: it died or exited"
                                      : " closed its connection (" + io.text() + "): it died or exited"));
      break;
    }
    auto malformed = [&](const std::string& what) {
      return Status(StatusCode::kRemoteError,
                    describe(r) + " sent a malformed frame (" + what +
                        "); the connection is closed (do all ranks run the same Loom build on the same kind of "
                        "machine?)");
    };
    if (h.magic != kFrameMagic) {
      why = malformed("bad magic");
      ::shutdown(p.fd.get(), SHUT_RDWR);
      break;
    }
    if (h.kind == uint8_t(Kind::kAbort)) {  // the tag is the job's exit code
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (!peer_abort_) peer_abort_ = PeerAbort{r, int(h.tag)};
      }
      mark_down(r, Status(StatusCode::kRemoteError,
                          describe(r) + " aborted the job (exit code " + std::to_string(h.tag) + ")"));
      continue;
    }
    if (h.kind == uint8_t(Kind::kClose)) {
      std::lock_guard<std::mutex> lk(mu_);
      closed_by_peer_[{h.ctx, r}] = (h.flags & kAbandoned) != 0;
      cv_.notify_all();
      continue;
    }
    if (h.kind != uint8_t(Kind::kCollective) && h.kind != uint8_t(Kind::kP2p)) {
      why = malformed("unknown kind " + std::to_string(h.kind));
      ::shutdown(p.fd.get(), SHUT_RDWR);
      break;
    }
    Key key{h.ctx, r, h.kind, h.tag};
    auto it = partial.find(key);
    if (h.flags & kFirst) {
      if (it != partial.end()) {
        why = malformed("a message began before the previous one with the same key ended");
        ::shutdown(p.fd.get(), SHUT_RDWR);
        break;
      }
      Partial fresh;
      fresh.m.bytes = size_t(h.total);
      if (h.total > 0) {
        fresh.m.data.reset(new (std::nothrow) char[size_t(h.total)]);
        if (!fresh.m.data) {
          why = Status(StatusCode::kRemoteError, "could not allocate " + std::to_string(h.total) +
                                                     " bytes for a message from " + describe(r) +
                                                     "; the connection is closed");
          ::shutdown(p.fd.get(), SHUT_RDWR);
          break;
        }
      }
      it = partial.emplace(key, std::move(fresh)).first;
    } else if (it == partial.end()) {
      why = malformed("a continuation frame without a first frame");
      ::shutdown(p.fd.get(), SHUT_RDWR);
      break;
    }
    Partial& pm = it->second;
    if (h.bytes > pm.m.bytes - pm.got) {
      why = malformed("frame longer than its message");
      ::shutdown(p.fd.get(), SHUT_RDWR);
      break;
    }
    io = read_all(p.fd.get(), pm.m.data.get() + pm.got, size_t(h.bytes), Deadline::max());
    if (!io.ok()) {
      why = Status(StatusCode::kRemoteError, describe(r) + " closed its connection in the middle of a message (" +
                                                 io.text() + "): it died or exited");
      break;
    }
    pm.got += size_t(h.bytes);
    if (h.flags & kLast) {
      if (pm.got != pm.m.bytes) {
        why = malformed("message shorter than announced");
        ::shutdown(p.fd.get(), SHUT_RDWR);
        break;
      }
      deliver(key, std::move(pm.m));
      partial.erase(it);
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (!closing_ && down_[size_t(r)].is_ok()) down_[size_t(r)] = why;
  --readers_running_;
  cv_.notify_all();
}

void Transport::deliver(const Key& key, Message m) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_here_.count(key.ctx)) return;
  Slot& slot = slots_[key];
  if (!slot.waiting.empty()) {
    std::shared_ptr<Ticket> t = std::move(slot.waiting.front());
    slot.waiting.pop_front();
    t->msg = std::move(m);
    t->filled = true;
    if (slot.waiting.empty() && slot.messages.empty()) slots_.erase(key);
    cv_.notify_all();
  } else {
    slot.messages.push_back(std::move(m));
  }
}

Status Transport::send(int dst, uint64_t ctx, Kind kind, int64_t tag, const void* data, size_t bytes,
                       Deadline deadline, const std::atomic<bool>* cancel) {
  if (dst == rank_) {
    Message m;
    m.bytes = bytes;
    if (bytes > 0) {
      m.data.reset(new char[bytes]);
      std::memcpy(m.data.get(), data, bytes);
    }
    deliver(Key{ctx, rank_, uint8_t(kind), tag}, std::move(m));
    return Status::ok();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!down_[size_t(dst)].is_ok()) return down_[size_t(dst)];
    Ticket probe;  // the same verdict a receive from dst on ctx would get
    probe.ctx = ctx;
    probe.src = dst;
    Status closed = failure_locked(probe);
    if (!closed.is_ok()) return closed;
  }
  Peer& p = *peers_[size_t(dst)];
  const char* src = static_cast<const char*>(data);
  size_t off = 0;
  do {
    size_t n = std::min(kFrameBytes, bytes - off);
    FrameHeader h{kFrameMagic, uint8_t(kind), 0, 0, ctx, tag, bytes, n};
    if (off == 0) h.flags |= kFirst;
    if (off + n == bytes) h.flags |= kLast;
    iovec v[2] = {{&h, sizeof h}, {const_cast<char*>(src + off), n}};
    IoResult io;
    {
      std::lock_guard<std::mutex> lk(p.write_mu);
      io = write_all(p.fd.get(), v, 2, deadline, cancel);
    }
    if (!io.ok()) {
      if (io.what == Io::kClosed || io.what == Io::kFailed) {
        mark_down(dst, Status(StatusCode::kRemoteError,
                              describe(dst) + " closed its connection (" + io.text() + "): it died or exited"));
        std::lock_guard<std::mutex> lk(mu_);
        return down_[size_t(dst)];
      }
      // Half a frame, or the first frames of a message, went out: the peer's
      // reader holds a partial message that can never be completed (a later
      // message with the same key would read as malformed): the stream is
      // out of step for good.
      if (io.done > 0 || off > 0) {
        mark_down(dst, Status(StatusCode::kRemoteError, "the connection to " + describe(dst) +
                                                            " was abandoned in the middle of a message after a "
                                                            "timeout"));
        ::shutdown(p.fd.get(), SHUT_RDWR);
      }
      if (io.what == Io::kCancelled) return Status(StatusCode::kTimeout, "cancelled");
      return Status(StatusCode::kTimeout, "sending to " + describe(dst) + ": it did not drain its connection in time");
    }
    off += n;
  } while (off < bytes);
  return Status::ok();
}

std::shared_ptr<Ticket> Transport::post(uint64_t ctx, int src, Kind kind, int64_t tag) {
  auto t = std::make_shared<Ticket>();
  t->ctx = ctx;
  t->src = src;
  t->kind = kind;
  t->tag = tag;
  Key key{ctx, src, uint8_t(kind), tag};
  std::lock_guard<std::mutex> lk(mu_);
  Slot& slot = slots_[key];
  if (!slot.messages.empty()) {
    t->msg = std::move(slot.messages.front());
    slot.messages.pop_front();
    t->filled = true;
    if (slot.waiting.empty() && slot.messages.empty()) slots_.erase(key);
  } else {
    slot.waiting.push_back(t);
  }
  return t;
}

Status Transport::failure_locked(const Ticket& t) const {
  if (t.filled) return Status::ok();
  if (t.withdrawn) return internal_error("a withdrawn receive was waited for");
  if (t.src < 0 || t.src >= size()) return internal_error("receive from rank " + std::to_string(t.src));
  if (!down_[size_t(t.src)].is_ok()) return down_[size_t(t.src)];
  auto it = closed_by_peer_.find({t.ctx, t.src});
  if (it != closed_by_peer_.end()) {
    return Status(StatusCode::kRemoteError,
                  describe(t.src) + (it->second ? " abandoned this communicator after an error (see its output)"
                                                : " destroyed this communicator while this rank still waited for it"));
  }
  if (closing_) return Status(StatusCode::kRemoteError, "the TCP transport is shutting down");
  return Status::ok();
}

void Transport::withdraw_locked(Ticket& t) {
  if (t.filled || t.withdrawn) return;
  t.withdrawn = true;
  Key key{t.ctx, t.src, uint8_t(t.kind), t.tag};
  auto it = slots_.find(key);
  if (it == slots_.end()) return;
  auto& w = it->second.waiting;
  w.erase(std::remove_if(w.begin(), w.end(), [&](const std::shared_ptr<Ticket>& p) { return p.get() == &t; }),
          w.end());
  if (w.empty() && it->second.messages.empty()) slots_.erase(it);
}

void Transport::withdraw(Ticket& t) {
  std::lock_guard<std::mutex> lk(mu_);
  withdraw_locked(t);
}

Status Transport::wait(Ticket& t, Deadline deadline, const std::atomic<bool>* cancel) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (t.filled) return Status::ok();
    Status bad = failure_locked(t);
    if (!bad.is_ok()) {
      withdraw_locked(t);
      return bad;
    }
    if (cancel && cancel->load()) {
      withdraw_locked(t);
      return Status(StatusCode::kTimeout, "cancelled");
    }
    auto now = Clock::now();
    if (now >= deadline) {
      withdraw_locked(t);
      return Status(StatusCode::kTimeout, "no message from " + describe(t.src));
    }
    // Bounded naps: a cancel flag set without wake() is still seen.
    cv_.wait_until(lk, std::min(deadline, now + std::chrono::milliseconds(500)));
  }
}

bool Transport::poll(Ticket& t, Status* error) {
  std::lock_guard<std::mutex> lk(mu_);
  if (t.filled) return true;
  *error = failure_locked(t);
  if (!error->is_ok()) withdraw_locked(t);
  return !error->is_ok();
}

void Transport::wake() {
  std::lock_guard<std::mutex> lk(mu_);
  cv_.notify_all();
}

void Transport::close_context(uint64_t ctx, const std::vector<int>& members, bool abandoned) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!closed_here_.insert(ctx).second) return;
    // Messages that arrived for it are dropped with it.
    for (auto it = slots_.begin(); it != slots_.end();) {
      if (it->first.ctx == ctx && it->second.waiting.empty()) {
        it = slots_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (int m : members) {
    if (m == rank_ || !peers_[size_t(m)]) continue;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!down_[size_t(m)].is_ok()) continue;
    }
    FrameHeader h{kFrameMagic, uint8_t(Kind::kClose), uint8_t(kFirst | kLast | (abandoned ? kAbandoned : 0)), 0, ctx, 0,
                  0, 0};
    Peer& p = *peers_[size_t(m)];
    // Best effort, bounded: another thread may hold the lock in a send to a
    // peer that stopped draining (until that send's deadline, or for ever
    // without one); a communicator's destructor must not wait for it.
    // (try_lock in naps, not a timed mutex: ThreadSanitizer does not see
    // pthread_mutex_clocklock.)
    std::unique_lock<std::mutex> lk(p.write_mu, std::defer_lock);
    for (const Deadline until = deadline_after(1); !lk.try_lock() && Clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!lk.owns_lock()) continue;
    IoResult io = write_all(p.fd.get(), &h, sizeof h, deadline_after(1));
    if (!io.ok() && io.done > 0) ::shutdown(p.fd.get(), SHUT_RDWR);     // out of step: end it
  }
}

}  // namespace loom::exec::tcp
