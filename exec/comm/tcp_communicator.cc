// TcpCommunicator: Communicator over the TCP mesh (tcp_transport.h).
//
// Progress: every communicator has a worker thread (started by its first
// collective) that runs its collectives one at a time in call order, blocking
// and non-blocking alike: a blocking call queues its work and waits for it,
// a non-blocking one returns a request at once. So an iall_reduce progresses
// while the caller does blocking point-to-point transfers on other
// communicators, and collectives keep the call order on every rank. Each
// collective gets the next sequence number of its communicator as the tag of
// its messages. Point-to-point transfers bypass the queue: sends are eager
// (written at once; the peer's reader thread always drains), receives are
// posted in call order and matched by (source, tag).
// Contexts: "world" is context 1; split() derives a child's context from the
// parent's, the parent's split count and the color (a 64-bit mix, the same on
// every member), so communicators sharing ranks never see each other's
// traffic, and collective and point-to-point traffic are kept apart by kind.
// Watchdog: waits are bounded by timeout_s; a timed-out collective is
// cancelled (the worker stops touching the caller's buffers before wait()
// returns) and breaks the communicator, which tells its other members.
#include "exec/comm/tcp_communicator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "exec/comm/tcp_collectives.h"
#include "exec/comm/tcp_store.h"
#include "exec/comm/tcp_transport.h"

namespace loom::exec {
namespace {

using tcp::CollectiveIo;
using tcp::Deadline;
using tcp::Transport;

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t child_context(uint64_t parent, uint64_t split_index, int color) {
  uint64_t c = mix64(mix64(parent) ^ mix64(split_index * 0x100000001b3ull + 0x5157) ^ uint64_t(uint32_t(color)) << 1);
  return c < 2 ? c + 2 : c;  // 0 is unused, 1 is the world
}

// One collective call: run by the worker, waited for by the caller.
struct Task {
  std::function<Status(CollectiveIo&)> body;
  std::string call;
  int64_t seq = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
  std::atomic<bool> cancel{false};
  std::atomic<int> waiting_on{-1};
};

// What a communicator and its requests share.
class Core {
 public:
  Core(std::shared_ptr<Transport> t, std::string name, int rank, std::vector<int> members, uint64_t ctx,
       double timeout_s)
      : t(std::move(t)), name(std::move(name)), rank(rank), members(std::move(members)), ctx(ctx),
        timeout_s(timeout_s) {}

  ~Core() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    if (members.size() > 1) t->close_context(ctx, members, !broken().is_ok());
  }

  int size() const { return int(members.size()); }
  std::string where(const std::string& call) const {
    return call + " on communicator '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size()) +
           ")";
  }
  tcp::Group group() const { return tcp::Group{t.get(), ctx, rank, &members, timeout_s}; }

  Status broken() {
    std::lock_guard<std::mutex> lk(mu_);
    return broken_;
  }
  // The communicator is out of step: later calls fail, pending receives on it
  // end (its later traffic is dropped, so they could never complete), and
  // the other members stop waiting for this rank on it.
  void set_broken(const Status& why) {
    if (mark_broken(why)) tell_members();
  }
  // The first half of set_broken(): true the first time.
  bool mark_broken(const Status& why) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!broken_.is_ok()) return false;
      broken_ = why;
      abandoned = true;
    }
    t->wake();  // receive requests waiting on `abandoned`
    return true;
  }
  // The second half: close frames to the other members. It takes their
  // connections' write locks, so a send of the worker must have been
  // cancelled first (else this waits for that send's own deadline).
  void tell_members() {
    if (members.size() > 1) t->close_context(ctx, members, true);
  }

  // Queues a collective (the caller has checked its arguments).
  Result<std::shared_ptr<Task>> submit(const std::string& call, std::function<Status(CollectiveIo&)> body) {
    auto task = std::make_shared<Task>();
    task->body = std::move(body);
    task->call = call;
    std::lock_guard<std::mutex> lk(mu_);
    if (!broken_.is_ok()) return broken_.with_context(where(call));
    task->seq = next_seq_++;
    queue_.push_back(task);
    if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
    cv_.notify_all();
    return task;
  }

  // Waits for a task under the watchdog; on a timeout the task is cancelled
  // and finished before this returns (its buffers are free again).
  Status wait(Task& task) {
    std::unique_lock<std::mutex> lk(task.mu);
    if (timeout_s > 0) {
      Deadline d = tcp::deadline_after(timeout_s);
      if (!task.cv.wait_until(lk, d, [&] { return task.done; })) {
        // Cancel this task and the one running ahead of it (if it is still
        // queued), so that the worker lets go of every caller's buffer now.
        // The communicator is broken first, so that the worker skips the
        // queued tasks instead of starting them.
        int peer = task.waiting_on.load();
        lk.unlock();
        const bool first = mark_broken(Status(StatusCode::kTimeout, "communicator '" + name + "' is unusable after " +
                                                                        task.call + " timed out"));
        task.cancel = true;
        {
          std::lock_guard<std::mutex> q(mu_);
          if (running_) {
            if (peer < 0) peer = running_->waiting_on.load();
            running_->cancel = true;
          }
          if (peer < 0) peer = last_peer_;
        }
        t->wake();
        // Only now: a send of the worker to a peer that stopped draining holds
        // that connection's write lock until it sees the cancel flag.
        if (first) tell_members();
        lk.lock();
        task.cv.wait(lk, [&] { return task.done; });
        if (task.result.is_ok()) return Status::ok();  // finished just in time
        if (task.result.code() == StatusCode::kTimeout) {
          // The worker's own watchdog may have fired first: its message names the peer.
          if (peer < 0 && task.result.message() != "cancelled") return task.result.with_context(where(task.call));
          Status timeout(StatusCode::kTimeout,
                         "did not complete within " + tcp::seconds_text(timeout_s) + " (the collective timeout: loom execute --timeout)" +
                             (peer >= 0 ? " waiting for " + t->describe(peer) : std::string()) +
                             "; a peer is presumed dead or stuck, so the job ends (raise --timeout if a step legitimately "
                             "takes longer)");
          return timeout.with_context(where(task.call));
        }
      }
    } else {
      task.cv.wait(lk, [&] { return task.done; });
    }
    if (task.result.is_ok()) return task.result;
    if (task.result.message() == "cancelled") {  // by another request's timeout
      lk.unlock();
      Status b = broken();
      return (b.is_ok() ? Status(StatusCode::kTimeout, "cancelled after another call timed out") : b)
          .with_context(where(task.call));
    }
    return task.result.with_context(where(task.call));
  }

  // A blocking collective: queued behind the pending non-blocking ones.
  Status run(const std::string& call, std::function<Status(CollectiveIo&)> body) {
    LOOM_ASSIGN_OR_RETURN(auto task, submit(call, std::move(body)));
    return wait(*task);
  }

  Status check_rank(const char* what, int r) const {
    if (r >= 0 && r < size()) return Status::ok();
    return invalid_argument(std::string(what) + "=" + std::to_string(r) + " is not a rank of this communicator (size " +
                            std::to_string(size()) + ")");
  }

  const std::shared_ptr<Transport> t;
  const std::string name;
  const int rank;
  const std::vector<int> members;  // world rank of each rank
  const uint64_t ctx;
  const double timeout_s;
  uint64_t splits = 0;  // split() calls so far (the same count on every member)
  // Set (with broken_) when the communicator breaks: ends the waits of
  // pending receive requests, whose messages are now dropped.
  std::atomic<bool> abandoned{false};

 private:
  void work() {
    for (;;) {
      std::shared_ptr<Task> task;
      Status broken;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        broken = broken_;
        running_ = task;
      }
      Status s = broken;
      if (s.is_ok()) {
        tcp::Group g = group();
        CollectiveIo io(g, task->seq, &task->cancel, &task->waiting_on);
        s = task->body(io);
        if (!s.is_ok() && s.message() != "cancelled") {
          const char* what = s.code() == StatusCode::kTimeout ? " timed out (" : " failed (";
          set_broken(Status(s.code(), "communicator '" + name + "' is unusable after " + task->call + what +
                                          s.message() + ")"));
        }
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        running_.reset();
        if (!s.is_ok() && task->waiting_on >= 0) last_peer_ = task->waiting_on;
      }
      std::lock_guard<std::mutex> lk(task->mu);
      task->result = s;
      task->done = true;
      task->cv.notify_all();
    }
  }

  std::mutex mu_;  // guards the queue, the worker and broken_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::shared_ptr<Task> running_;  // the task the worker runs now
  int last_peer_ = -1;             // the peer a failed task waited for last
  std::thread worker_;
  bool stop_ = false;
  int64_t next_seq_ = 0;
  Status broken_;
};

class DoneRequest final : public CommRequest {
 public:
  explicit DoneRequest(Status s = Status::ok()) : s_(std::move(s)) {}
  Status wait() override { return s_; }
  bool test() override { return true; }

 private:
  Status s_;
};

class TaskRequest final : public CommRequest {
 public:
  TaskRequest(std::shared_ptr<Core> core, std::shared_ptr<Task> task)
      : core_(std::move(core)), task_(std::move(task)) {}
  ~TaskRequest() override {
    if (waited_) return;
    Status s = wait();  // the worker may still use the caller's buffers: finish first
    if (!s.is_ok()) std::fprintf(stderr, "loom: request dropped without wait(): %s\n", s.to_string().c_str());
  }
  Status wait() override {
    if (!waited_) {
      result_ = core_->wait(*task_);
      waited_ = true;
    }
    return result_;
  }
  bool test() override {
    if (waited_) return true;
    {
      std::lock_guard<std::mutex> lk(task_->mu);
      if (!task_->done) return false;
    }
    (void)wait();
    return true;
  }

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<Task> task_;
  bool waited_ = false;
  Status result_;
};

// A posted receive: the ticket keeps its place in the (source, tag) order.
class RecvRequest final : public CommRequest {
 public:
  RecvRequest(std::shared_ptr<Core> core, std::shared_ptr<tcp::Ticket> ticket, float* buf, size_t count, int peer,
              int tag, const char* call)
      : core_(std::move(core)), ticket_(std::move(ticket)), buf_(buf), count_(count), peer_(peer), tag_(tag),
        call_(call) {}
  ~RecvRequest() override {
    if (done_) return;
    Status s = wait();
    if (!s.is_ok()) std::fprintf(stderr, "loom: request dropped without wait(): %s\n", s.to_string().c_str());
  }
  Status wait() override {
    if (done_) return result_;
    Status s = core_->t->wait(*ticket_, tcp::deadline_after(core_->timeout_s), &core_->abandoned);
    return finish(s);
  }
  bool test() override {
    if (done_) return true;
    Status error;
    if (core_->t->poll(*ticket_, &error)) {
      (void)finish(error);
    } else if (core_->abandoned) {
      (void)finish(Status(StatusCode::kTimeout, "cancelled"));
    }
    return done_;
  }

 private:
  Status finish(Status s) {
    done_ = true;
    const int src = core_->members[size_t(peer_)];
    if (!s.is_ok() && s.message() == "cancelled") {
      // The communicator broke while this receive was pending (see Core::abandoned).
      core_->t->withdraw(*ticket_);
      Status b = core_->broken();
      result_ = b.is_ok() ? Status(StatusCode::kRemoteError, "cancelled").with_context(core_->where(call_))
                          : b.with_context(core_->where(call_));
      return result_;
    }
    if (s.is_ok()) {
      const tcp::Message& m = ticket_->msg;
      if (m.bytes != count_ * sizeof(float)) {
        s = invalid_argument("received " + std::to_string(m.bytes / sizeof(float)) + " floats from rank " +
                             std::to_string(peer_) + " (tag " + std::to_string(tag_) + ") but expected " +
                             std::to_string(count_) + "; the send and recv counts must match");
      } else if (m.bytes > 0) {
        std::memcpy(buf_, m.data.get(), m.bytes);
      }
      ticket_->msg = tcp::Message();
    } else if (s.code() == StatusCode::kTimeout) {
      // The receive was withdrawn: the communicator stays usable.
      s = Status(StatusCode::kTimeout, "did not complete within " + tcp::seconds_text(core_->timeout_s) +
                                           " (the collective timeout: loom execute --timeout) waiting for " + core_->t->describe(src) +
                                           " (tag " + std::to_string(tag_) +
                                           "); a peer is presumed dead or stuck, so the job ends (raise --timeout if a step "
                                           "legitimately takes longer)");
    }
    result_ = s.is_ok() ? s : s.with_context(core_->where(call_));
    return result_;
  }

  std::shared_ptr<Core> core_;
  std::shared_ptr<tcp::Ticket> ticket_;
  float* buf_;
  size_t count_;
  int peer_, tag_;
  const char* call_;
  bool done_ = false;
  Status result_;
};

class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(std::shared_ptr<Core> core) : c_(std::move(core)) {}
  int rank() const override { return c_->rank; }
  int size() const override { return c_->size(); }
  std::string name() const override { return c_->name; }

  Status all_reduce(float* buf, size_t count, ReduceOp op) override {
    return c_->run("all_reduce", [=](CollectiveIo& io) { return tcp::all_reduce(io, buf, count, op); });
  }
  Status all_reduce(double* buf, size_t count, ReduceOp op) override {
    return c_->run("all_reduce", [=](CollectiveIo& io) { return tcp::all_reduce(io, buf, count, op); });
  }
  Status reduce_scatter(const float* send, float* recv, size_t recv_count) override {
    return c_->run("reduce_scatter",
                   [=](CollectiveIo& io) { return tcp::reduce_scatter(io, send, recv, recv_count); });
  }
  Status all_gather(const float* send, float* recv, size_t send_count) override {
    return c_->run("all_gather", [=](CollectiveIo& io) {
      return tcp::all_gather_bytes(io, send, recv, send_count * sizeof(float));
    });
  }
  Status broadcast(float* buf, size_t count, int root) override {
    LOOM_RETURN_IF_ERROR(c_->check_rank("root", root).with_context(c_->where("broadcast")));
    return c_->run("broadcast",
                   [=](CollectiveIo& io) { return tcp::broadcast_bytes(io, buf, count * sizeof(float), root); });
  }
  Status broadcast_bytes(void* buf, size_t bytes, int root) override {
    LOOM_RETURN_IF_ERROR(c_->check_rank("root", root).with_context(c_->where("broadcast_bytes")));
    return c_->run("broadcast_bytes", [=](CollectiveIo& io) { return tcp::broadcast_bytes(io, buf, bytes, root); });
  }
  Status all_to_all(const float* send, float* recv, size_t count_per_peer) override {
    return c_->run("all_to_all", [=](CollectiveIo& io) {
      return tcp::all_to_all_bytes(io, send, recv, count_per_peer * sizeof(float));
    });
  }
  Status barrier() override {
    return c_->run("barrier", [](CollectiveIo& io) { return tcp::barrier(io); });
  }

  Status send(const float* buf, size_t count, int peer, int tag) override {
    LOOM_ASSIGN_OR_RETURN(auto req, start_send("send", buf, count, peer, tag));
    return req->wait();
  }
  Status recv(float* buf, size_t count, int peer, int tag) override {
    LOOM_ASSIGN_OR_RETURN(auto req, start_recv("recv", buf, count, peer, tag));
    return req->wait();
  }

  Result<std::unique_ptr<CommRequest>> iall_reduce(float* buf, size_t count, ReduceOp op) override {
    return launch("iall_reduce", [=](CollectiveIo& io) { return tcp::all_reduce(io, buf, count, op); });
  }
  Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* send, float* recv, size_t recv_count) override {
    return launch("ireduce_scatter",
                  [=](CollectiveIo& io) { return tcp::reduce_scatter(io, send, recv, recv_count); });
  }
  Result<std::unique_ptr<CommRequest>> iall_gather(const float* send, float* recv, size_t send_count) override {
    return launch("iall_gather", [=](CollectiveIo& io) {
      return tcp::all_gather_bytes(io, send, recv, send_count * sizeof(float));
    });
  }
  Result<std::unique_ptr<CommRequest>> iall_to_all(const float* send, float* recv, size_t count_per_peer) override {
    return launch("iall_to_all", [=](CollectiveIo& io) {
      return tcp::all_to_all_bytes(io, send, recv, count_per_peer * sizeof(float));
    });
  }
  Result<std::unique_ptr<CommRequest>> isend(const float* buf, size_t count, int peer, int tag) override {
    return start_send("isend", buf, count, peer, tag);
  }
  Result<std::unique_ptr<CommRequest>> irecv(float* buf, size_t count, int peer, int tag) override {
    return start_recv("irecv", buf, count, peer, tag);
  }

  Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) override {
    const int p = c_->size();
    int32_t mine[2] = {int32_t(color), int32_t(key)};
    std::vector<int32_t> all(2 * size_t(p));
    LOOM_RETURN_IF_ERROR(c_->run("split", [&](CollectiveIo& io) {
      return tcp::all_gather_bytes(io, mine, all.data(), sizeof mine);
    }));
    for (int r = 0; r < p; ++r) {
      if (all[2 * size_t(r)] < 0) {
        return invalid_argument(c_->where("split") + ": rank " + std::to_string(r) + " passed color " +
                                std::to_string(all[2 * size_t(r)]) + "; colors must be >= 0");
      }
    }
    // Members of this color ordered by (key, rank in the parent).
    std::vector<std::pair<int32_t, int>> order;
    for (int r = 0; r < p; ++r) {
      if (all[2 * size_t(r)] == color) order.emplace_back(all[2 * size_t(r) + 1], r);
    }
    std::sort(order.begin(), order.end());
    std::vector<int> members;
    int new_rank = 0;
    for (const auto& [k, r] : order) {
      if (r == c_->rank) new_rank = int(members.size());
      members.push_back(c_->members[size_t(r)]);
    }
    uint64_t ctx = child_context(c_->ctx, c_->splits++, color);
    return std::unique_ptr<Communicator>(new TcpCommunicator(
        std::make_shared<Core>(c_->t, name, new_rank, std::move(members), ctx, c_->timeout_s)));
  }

  // A peer that aborted first sets the code: every rank of the job exits as
  // the first failing rank did (as mpirun reports MPI_Abort's code).
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    std::string why = message;
    if (auto first = c_->t->peer_abort()) {
      exit_code = first->exit_code;
      why += " (world rank " + std::to_string(first->rank) + " aborted first, with this exit code)";
    }
    if (exit_code == 0) exit_code = 1;
    std::fprintf(stderr, "loom: rank %d of communicator '%s' aborts the job (exit code %d): %s\n", c_->rank,
                 c_->name.c_str(), exit_code, why.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    c_->t->abort_peers(exit_code);  // the peers learn the code and see EOF now, not when the kernel reaps us
    std::_Exit(exit_code);
  }

 private:
  Result<std::unique_ptr<CommRequest>> launch(const char* call, std::function<Status(CollectiveIo&)> body) {
    LOOM_ASSIGN_OR_RETURN(auto task, c_->submit(call, std::move(body)));
    return std::unique_ptr<CommRequest>(new TaskRequest(c_, std::move(task)));
  }

  Status check_p2p(const char* call, int peer, int tag) {
    Status s = c_->broken();
    if (!s.is_ok()) return s.with_context(c_->where(call));
    s = c_->check_rank("peer", peer);
    if (s.is_ok() && tag < 0) {
      s = invalid_argument("tag=" + std::to_string(tag) + " is outside [0, " + std::to_string(INT32_MAX) + "]");
    }
    return s.is_ok() ? s : s.with_context(c_->where(call));
  }

  // Eager: the message is on its way (or failed) when this returns.
  Result<std::unique_ptr<CommRequest>> start_send(const char* call, const float* buf, size_t count, int peer,
                                                  int tag) {
    LOOM_RETURN_IF_ERROR(check_p2p(call, peer, tag));
    const int dst = c_->members[size_t(peer)];
    Status s = c_->t->send(dst, c_->ctx, tcp::Kind::kP2p, tag, buf, count * sizeof(float),
                           tcp::deadline_after(c_->timeout_s));
    if (s.code() == StatusCode::kTimeout) {
      s = Status(StatusCode::kTimeout, "did not complete within " + tcp::seconds_text(c_->timeout_s) +
                                           " (the collective timeout: loom execute --timeout): " + c_->t->describe(dst) +
                                           " did not take the data; a peer is presumed dead or stuck; call "
                                           "abort() to end the job");
    }
    if (!s.is_ok()) return s.with_context(c_->where(call));
    return std::unique_ptr<CommRequest>(new DoneRequest());
  }

  Result<std::unique_ptr<CommRequest>> start_recv(const char* call, float* buf, size_t count, int peer, int tag) {
    LOOM_RETURN_IF_ERROR(check_p2p(call, peer, tag));
    auto ticket = c_->t->post(c_->ctx, c_->members[size_t(peer)], tcp::Kind::kP2p, tag);
    return std::unique_ptr<CommRequest>(new RecvRequest(c_, std::move(ticket), buf, count, peer, tag, call));
  }

  std::shared_ptr<Core> c_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> tcp_world(const TcpOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    return invalid_argument("tcp_world: rank " + std::to_string(o.rank) + " of world " + std::to_string(o.world) +
                            " is out of range; RANK must be in [0, WORLD_SIZE) and WORLD_SIZE >= 1");
  }
  if (!std::isfinite(o.timeout_s) || o.timeout_s < 0) {
    return invalid_argument("tcp_world: timeout_s=" + std::to_string(o.timeout_s) +
                            " must be a finite number of seconds >= 0 (0 disables the watchdog)");
  }
  if (!std::isfinite(o.rendezvous_timeout_s) || o.rendezvous_timeout_s <= 0) {
    return invalid_argument("tcp_world: rendezvous_timeout_s=" + std::to_string(o.rendezvous_timeout_s) +
                            " must be a finite number of seconds > 0");
  }
  std::shared_ptr<Transport> t;
  if (o.world == 1) {
    t = Transport::single();
  } else {
    const std::string who = "tcp_world (rank " + std::to_string(o.rank) + " of " + std::to_string(o.world) + ")";
    tcp::RendezvousOptions ro{o.rank, o.world, o.master_addr, o.master_port, o.rendezvous_timeout_s, o.job_id};
    auto rv = tcp::rendezvous(ro);
    if (!rv.is_ok()) return rv.status().with_context(who);
    auto mesh = Transport::connect(std::move(rv).value(), o.rank, o.rendezvous_timeout_s);
    if (!mesh.is_ok()) return mesh.status().with_context(who);
    t = std::move(mesh).value();
  }
  std::vector<int> members(static_cast<size_t>(o.world));
  for (int r = 0; r < o.world; ++r) members[size_t(r)] = r;
  return std::unique_ptr<Communicator>(
      new TcpCommunicator(std::make_shared<Core>(std::move(t), "world", o.rank, std::move(members), 1, o.timeout_s)));
}

}  // namespace loom::exec
