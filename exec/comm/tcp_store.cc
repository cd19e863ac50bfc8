// The rendezvous store (tcp_store.h). Wire format: messages of
// [u32 magic][u32 type][u32 payload bytes][payload], integers little-endian,
// strings as [u32 bytes][bytes]. Rank 0 serves every client from one poll
// loop (non-blocking reads into a per-client buffer), so a silent or foreign
// client never stalls the rendezvous.
#include "exec/comm/tcp_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>

namespace loom::exec::tcp {
namespace {

constexpr uint32_t kMagic = 0x4c4d525a;  // "LMRZ"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxPayload = 64u << 20;
enum MsgType : uint32_t { kRegister = 1, kTable = 2, kError = 3 };

class Writer {
 public:
  explicit Writer(uint32_t type) {
    u32(kMagic);
    u32(type);
    u32(0);  // payload bytes, patched by finish()
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void str(const std::string& s) {
    u32(uint32_t(s.size()));
    out_ += s;
  }
  const std::string& finish() {
    uint32_t n = uint32_t(out_.size() - 12);
    for (int i = 0; i < 4; ++i) out_[8 + i] = char((n >> (8 * i)) & 0xff);
    return out_;
  }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, size_t n) : p_(data), n_(n) {}
  uint32_t u32() {
    uint32_t v = 0;
    if (!need(4)) return 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    if (!need(8)) return 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string str() {
    uint32_t len = u32();
    if (!need(len)) return "";
    std::string s(p_ + pos_, len);
    pos_ += len;
    return s;
  }
  bool ok() const { return ok_; }

 private:
  bool need(size_t k) {
    if (!ok_ || n_ - pos_ < k) ok_ = false;
    return ok_;
  }
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// A complete message at the front of `in`: 1 (type/payload set, consumed),
// 0 (need more bytes), -1 (not our protocol).
int take_message(std::string& in, uint32_t* type, std::string* payload) {
  if (in.size() < 12) return 0;
  Reader h(in.data(), 12);
  uint32_t magic = h.u32();
  *type = h.u32();
  uint32_t n = h.u32();
  if (magic != kMagic || n > kMaxPayload) return -1;
  if (in.size() < 12 + size_t(n)) return 0;
  *payload = in.substr(12, n);
  in.erase(0, 12 + size_t(n));
  return 1;
}

std::string error_message(const Status& s) {
  Writer w(kError);
  w.u32(uint32_t(s.code()));
  w.str(s.message());
  return w.finish();
}

std::string hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

std::string store_text(const RendezvousOptions& o) {
  return "the rendezvous store at " + host_port(o.master_addr, o.master_port) + " (MASTER_ADDR/MASTER_PORT)";
}

uint64_t make_nonce() {
  std::random_device rd;
  uint64_t n = (uint64_t(rd()) << 32) ^ rd();
  n ^= uint64_t(Clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
  n ^= uint64_t(getpid()) << 17;
  return n | 1;  // never 0
}

// This rank's listening socket for the mesh on `local`'s address (port 0:
// ephemeral), or on the wildcard address when that one cannot be bound.
Result<Fd> mesh_listener(SockAddr local, int* port) {
  local.set_port(0);
  int err = 0;
  Fd fd = listen_at(local, false, &err);
  if (!fd) {
    int first = err;
    fd = listen_at(any_address(local.family(), 0), false, &err);
    if (!fd) {
      return io_error("could not open a listening socket for the other ranks on " + local.host() + ": " +
                      errno_text(first) + "; check the network configuration of this host");
    }
  }
  *port = local_address(fd.get()).port();
  return fd;
}

// ---- rank 0 ---------------------------------------------------------------

struct Client {
  Fd fd;
  std::string in;
  int rank = -1;     // once registered
  std::string from;  // remote address, for messages
  bool from_loopback = false;
  std::string via;   // this end's address: where the client reaches rank 0
  std::string host;  // the address it registered for its own listener
  bool foreign = false;  // registered with another job id
};

class Server {
 public:
  explicit Server(const RendezvousOptions& o) : o_(o) {}

  Result<Rendezvous> run() {
    const Deadline deadline = deadline_after(o_.timeout_s);
    SockAddr master;
    std::string why;
    if (!resolve(o_.master_addr, o_.master_port, &master, &why)) {
      return invalid_argument("MASTER_ADDR=" + o_.master_addr + " does not resolve (" + why +
                              "); set MASTER_ADDR to rank 0's host name or address");
    }
    // A loopback MASTER_ADDR given as such (127.0.0.1, ::1, localhost) keeps
    // the job off the network. Otherwise every interface listens: a host
    // name may resolve to a loopback address here (Debian's 127.0.1.1) and
    // to the real one elsewhere.
    const bool local_only =
        master.is_loopback() && (o_.master_addr == master.host() || o_.master_addr == "localhost");
    SockAddr bind_addr = local_only ? master : any_address(master.family(), o_.master_port);
    int err = 0;
    listener_ = listen_at(bind_addr, true, &err);
    if (!listener_) {
      std::string where = "MASTER_PORT " + std::to_string(o_.master_port) + " on " + o_.master_addr;
      if (err == EADDRINUSE) return io_error(where + " is in use (another job?); set another MASTER_PORT");
      if (err == EACCES) return io_error(where + " needs privileges; set MASTER_PORT to 1024 or above");
      if (err == EADDRNOTAVAIL) {
        return invalid_argument("MASTER_ADDR=" + o_.master_addr + " (" + master.host() +
                                ") is not an address of this host, but this process is rank 0; set "
                                "MASTER_ADDR to rank 0's host");
      }
      return io_error("could not listen on " + where + ": " + errno_text(err));
    }
    fcntl(listener_.get(), F_SETFL, fcntl(listener_.get(), F_GETFL, 0) | O_NONBLOCK);

    Rendezvous rv;
    rv.peers.resize(size_t(o_.world));
    int port = 0;
    // Each rank reaches rank 0 at the address it reached the store by (the
    // table sent to it says so), so rank 0's listener takes every interface.
    LOOM_ASSIGN_OR_RETURN(rv.listener, mesh_listener(local_only ? master : any_address(master.family(), 0), &port));
    rv.peers[0] = {master.host(), port};
    arrived_.assign(size_t(o_.world), false);
    arrived_[0] = true;
    int count = 1;

    while (count < o_.world) {
      if (Clock::now() >= deadline) return fail(missing_ranks_status());
      std::vector<pollfd> fds;
      fds.push_back({listener_.get(), POLLIN, 0});
      for (const Client& c : clients_) fds.push_back({c.fd.get(), POLLIN, 0});
      int n = ::poll(fds.data(), fds.size(), poll_ms(deadline, 500));
      if (n < 0 && errno != EINTR) return fail(io_error("rendezvous: poll failed: " + errno_text(errno)));
      if (n <= 0) continue;
      if (fds[0].revents & POLLIN) accept_clients();
      // Read every client that has something (indices shift as clients leave).
      std::vector<Client*> ready;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) ready.push_back(&clients_[i - 1]);
      }
      std::vector<int> gone;  // fds to drop
      for (Client* c : ready) {
        Status s = read_client(*c, rv, &count);
        if (s.code() == StatusCode::kNotFound) {
          gone.push_back(c->fd.get());  // left or foreign
        } else if (!s.is_ok() && c->foreign) {
          // A process of another job: it gets the error, this job goes on.
          std::string m = error_message(s);
          (void)write_all(c->fd.get(), m.data(), m.size(), deadline_after(2));
          turned_away_.push_back(s.message());
          gone.push_back(c->fd.get());
        } else if (!s.is_ok()) {
          return fail(s);
        }
      }
      std::erase_if(clients_, [&](const Client& c) {
        return std::find(gone.begin(), gone.end(), c.fd.get()) != gone.end();
      });
    }

    LOOM_RETURN_IF_ERROR(check_reachable());
    rv.job_nonce = make_nonce();
    for (Client& c : clients_) {
      // Only the registered ranks: a connection that never registered (a
      // scanner, a late duplicate) must not learn the job nonce.
      if (c.rank <= 0) continue;
      Writer w(kTable);
      w.u64(rv.job_nonce);
      w.u32(uint32_t(o_.world));
      for (int r = 0; r < o_.world; ++r) {
        w.str(r == 0 ? c.via : rv.peers[size_t(r)].host);
        w.u32(uint32_t(rv.peers[size_t(r)].port));
      }
      const std::string& table = w.finish();
      (void)write_all(c.fd.get(), table.data(), table.size(), deadline_after(10));
    }
    return rv;
  }

 private:
  void accept_clients() {
    for (;;) {
      SockAddr from;
      from.len = sizeof from.storage;
      int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from.storage), &from.len, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: no more pending
      }
      Client c;
      c.fd.reset(fd);
      c.from = from.to_string();
      c.from_loopback = from.is_loopback();
      c.via = local_address(fd).host();
      clients_.push_back(std::move(c));
    }
  }

  // kNotFound: drop the client (it left, or does not speak our protocol);
  // another error: the rendezvous fails for everybody.
  Status read_client(Client& c, Rendezvous& rv, int* count) {
    char buf[65536];
    ssize_t got = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return Status::ok();
    if (got <= 0) {
      if (c.rank > 0) {  // registered, then left: it no longer counts as arrived
        arrived_[size_t(c.rank)] = false;
        --*count;
        left_.push_back(c.rank);
      }
      return Status(StatusCode::kNotFound, "");
    }
    c.in.append(buf, size_t(got));
    uint32_t type = 0;
    std::string payload;
    int m = take_message(c.in, &type, &payload);
    if (m == 0) return Status::ok();
    if (m < 0 || type != kRegister || c.rank >= 0) return Status(StatusCode::kNotFound, "");
    Reader r(payload.data(), payload.size());
    uint32_t version = r.u32();
    int rank = int(r.u32());
    int world = int(r.u32());
    int port = int(r.u32());
    std::string host = r.str(), job = r.str(), name = r.str();
    uint32_t pid = r.u32();
    if (!r.ok()) return Status(StatusCode::kNotFound, "");
    std::string who = "the process registering as rank " + std::to_string(rank) + " (" + name + ", pid " +
                      std::to_string(pid) + ", " + c.from + ")";
    if (version != kVersion) {
      return invalid_argument(who + " speaks rendezvous protocol " + std::to_string(version) + ", rank 0 speaks " +
                              std::to_string(kVersion) + "; run the same Loom build on every rank");
    }
    if (job != o_.job_id) {
      // Another job's process (its own rank 0 found the port taken): turned
      // away alone (see run()) rather than failing this job.
      c.foreign = true;
      return invalid_argument(who + " belongs to job '" + job + "' but rank 0 to job '" + o_.job_id +
                              "'; two jobs share MASTER_ADDR:MASTER_PORT; give each its own MASTER_PORT");
    }
    if (world != o_.world) {
      return invalid_argument(who + " has WORLD_SIZE=" + std::to_string(world) + " but rank 0 has WORLD_SIZE=" +
                              std::to_string(o_.world) + "; start every rank with the same WORLD_SIZE");
    }
    if (rank <= 0 || rank >= o_.world || arrived_[size_t(rank)]) {
      std::string first = rank == 0 ? "this process (rank 0)" : "another process";
      for (const Client& o : clients_) {
        if (o.rank == rank && rank > 0) first = "another process (" + o.from + ")";
      }
      return invalid_argument("rank " + std::to_string(rank) + " registered twice: " + who + " and " + first +
                              "; every process needs a distinct RANK in [0, WORLD_SIZE)");
    }
    c.rank = rank;
    c.host = host;
    arrived_[size_t(rank)] = true;
    rv.peers[size_t(rank)] = {host, port};
    ++*count;
    return Status::ok();
  }

  // A rank listening on a loopback address cannot be reached from another
  // host: typical of a MASTER_ADDR host name that resolves to 127.0.1.1 on
  // its own host. Refused before the mesh would fail with a vaguer error.
  Status check_reachable() {
    const Client* local = nullptr;
    const Client* remote = nullptr;
    for (const Client& c : clients_) {
      SockAddr a;
      if (c.rank > 0 && resolve(c.host, 0, &a, nullptr) && a.is_loopback()) local = &c;
      if (c.rank > 0 && !c.from_loopback) remote = &c;
    }
    if (!local || !remote) return Status::ok();
    return fail(invalid_argument(
        "rank " + std::to_string(local->rank) + " can only be reached on the loopback address " + local->host +
        " but rank " + std::to_string(remote->rank) + " runs on another host (" + remote->from +
        "): MASTER_ADDR=" + o_.master_addr + " resolves to a loopback address on rank " +
        std::to_string(local->rank) + "'s host; set MASTER_ADDR to an address of rank 0 that every host reaches (" +
        "its IP address)"));
  }

  Status missing_ranks_status() const {
    std::vector<int> missing, present;
    for (int r = 0; r < o_.world; ++r) (arrived_[size_t(r)] ? present : missing).push_back(r);
    std::string msg = "rendezvous at " + host_port(o_.master_addr, o_.master_port) + ": rank" +
                      (missing.size() > 1 ? "s " : " ") + rank_list(missing) + " of WORLD_SIZE=" +
                      std::to_string(o_.world) + " did not arrive within " +
                      seconds_text(o_.timeout_s) + " (arrived: " + rank_list(present) + ")";
    if (!left_.empty()) {
      std::vector<int> left = left_;
      std::sort(left.begin(), left.end());
      msg += "; rank" + std::string(left.size() > 1 ? "s " : " ") + rank_list(left) +
             " registered, then closed the connection (exited?)";
    }
    for (const std::string& t : turned_away_) msg += "; turned away: " + t;
    msg += "; start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise the rendezvous timeout";
    return Status(StatusCode::kTimeout, msg);
  }

  // Tells every connected client why the rendezvous failed, then returns `s`.
  Status fail(const Status& s) {
    std::string m = error_message(s);
    for (Client& c : clients_) (void)write_all(c.fd.get(), m.data(), m.size(), deadline_after(2));
    clients_.clear();
    return s;
  }

  const RendezvousOptions& o_;
  Fd listener_;
  std::vector<Client> clients_;
  std::vector<bool> arrived_;
  std::vector<int> left_;
  std::vector<std::string> turned_away_;  // why processes of other jobs were turned away
};

// ---- ranks 1..world-1 -------------------------------------------------------

Result<Rendezvous> join(const RendezvousOptions& o) {
  const Deadline deadline = deadline_after(o.timeout_s);
  Fd store;
  std::string last = "no attempt";
  auto backoff = std::chrono::milliseconds(20);
  for (;;) {
    SockAddr addr;
    std::string why;
    if (resolve(o.master_addr, o.master_port, &addr, &why)) {
      int err = 0;
      store = connect_to(addr, std::min(deadline, deadline_after(5)), &err);
      if (store) break;
      last = errno_text(err);
    } else {
      last = "MASTER_ADDR does not resolve (" + why + ")";
    }
    auto now = Clock::now();
    if (now >= deadline) {
      return Status(StatusCode::kTimeout, "could not reach " + store_text(o) + " within " + seconds_text(o.timeout_s) +
                                              ": " + last + "; is rank 0 running?");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  set_no_delay(store.get());

  Rendezvous rv;
  SockAddr local = local_address(store.get());
  int port = 0;
  LOOM_ASSIGN_OR_RETURN(rv.listener, mesh_listener(local, &port));
  Writer w(kRegister);
  w.u32(kVersion);
  w.u32(uint32_t(o.rank));
  w.u32(uint32_t(o.world));
  w.u32(uint32_t(port));
  w.str(local.host());
  w.str(o.job_id);
  w.str(hostname());
  w.u32(uint32_t(getpid()));
  const std::string& reg = w.finish();
  // Rank 0 answers by its own deadline; ours ends a little later so that we
  // hear its verdict (which ranks are missing) rather than time out first.
  const double wait_s = o.timeout_s + 2 + 0.1 * o.timeout_s;
  const Deadline answer_by = deadline_after(wait_s);
  IoResult io = write_all(store.get(), reg.data(), reg.size(), answer_by);

  std::string in;
  uint32_t type = 0;
  std::string payload;
  int m = 0;
  while (io.ok() && (m = take_message(in, &type, &payload)) == 0) {
    char buf[65536];
    IoResult r = read_all(store.get(), buf, 1, answer_by);  // one byte blocks until something arrives
    if (!r.ok()) {
      io = r;
      break;
    }
    in.push_back(buf[0]);
    ssize_t more = ::recv(store.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (more > 0) in.append(buf, size_t(more));
  }
  if (io.what == Io::kTimedOut) {
    return Status(StatusCode::kTimeout, "no answer from " + store_text(o) + " within " + seconds_text(wait_s) +
                                            " of registering as rank " + std::to_string(o.rank) +
                                            "; is rank 0 stuck?");
  }
  if (!io.ok()) {
    return Status(StatusCode::kRemoteError, store_text(o) + " (rank 0) closed the connection before every rank "
                                            "arrived (" + io.text() + "): rank 0 died or exited; see its output");
  }
  if (m < 0 || (type != kTable && type != kError)) {
    return Status(StatusCode::kRemoteError, store_text(o) + " answered with something that is not a Loom "
                                            "rendezvous store (another service on that port?); set another "
                                            "MASTER_PORT");
  }
  Reader r(payload.data(), payload.size());
  if (type == kError) {
    uint32_t code = r.u32();
    std::string msg = r.str();
    if (code == 0 || code > uint32_t(StatusCode::kInternal)) code = uint32_t(StatusCode::kRemoteError);
    return Status(StatusCode(code), msg + " (reported by rank 0 to rank " + std::to_string(o.rank) + ")");
  }
  rv.job_nonce = r.u64();
  uint32_t world = r.u32();
  if (!r.ok() || world != uint32_t(o.world)) {
    return Status(StatusCode::kRemoteError, store_text(o) + " sent a malformed address table");
  }
  rv.peers.resize(world);
  for (PeerAddress& p : rv.peers) {
    p.host = r.str();
    p.port = int(r.u32());
  }
  if (!r.ok()) return Status(StatusCode::kRemoteError, store_text(o) + " sent a malformed address table");
  return rv;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

Result<Rendezvous> rendezvous(const RendezvousOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    return invalid_argument("rendezvous: rank " + std::to_string(o.rank) + " of world " + std::to_string(o.world) +
                            " is out of range; RANK must be in [0, WORLD_SIZE)");
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return invalid_argument("MASTER_PORT=" + std::to_string(o.master_port) + " is not a TCP port; use 1024..65535");
  }
  if (o.master_addr.empty()) return invalid_argument("MASTER_ADDR is empty; set it to rank 0's host name or address");
  if (!(o.timeout_s > 0)) {
    return invalid_argument("rendezvous timeout " + seconds_text(o.timeout_s) + " must be positive");
  }
  if (o.rank == 0) return Server(o).run();
  return join(o);
}

}  // namespace loom::exec::tcp
