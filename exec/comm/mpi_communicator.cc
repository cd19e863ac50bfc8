// MpiCommunicator: Communicator over MPI (MPI-3 non-blocking collectives).
//
// Every blocking call is its non-blocking form plus a wait that polls
// MPI_Test against a deadline (the watchdog), so a dead or stuck peer becomes
// kTimeout naming the communicator, the call and the timeout instead of a
// hang. MPI counts are int: buffers longer than max_count_per_call elements
// (per call, summed over ranks for the block-structured collectives) are split
// into several MPI calls (strided datatypes for all_gather / all_to_all, one
// MPI_Ireduce per root for an oversized reduce_scatter).
// Every communicator has MPI_ERRORS_RETURN; LOOM_MPI_CHECK turns a failing
// call into a Status with the call, MPI_Error_string and file/line.
#include "exec/comm/mpi_communicator.h"

// The C API only: OpenMPI's mpi.h otherwise pulls in its deprecated C++
// bindings, which need libmpi_cxx (absent when linking MPI::MPI_C).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;

Status mpi_error(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = std::snprintf(text, sizeof text, "MPI error %d", rc);
  int error_class = rc;
  MPI_Error_class(rc, &error_class);
  // Argument-class errors are the caller's (or a mismatched peer call's);
  // everything else means the transport or a peer failed.
  const int caller_errors[] = {MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG, MPI_ERR_COMM,
                               MPI_ERR_RANK,   MPI_ERR_ROOT,  MPI_ERR_OP,   MPI_ERR_ARG, MPI_ERR_TRUNCATE};
  bool caller = std::find(std::begin(caller_errors), std::end(caller_errors), error_class) != std::end(caller_errors);
  return Status(caller ? StatusCode::kInvalidArgument : StatusCode::kRemoteError,
                std::string(call) + " failed: " + std::string(text, size_t(len)) + " [" + file + ":" +
                    std::to_string(line) + "]");
}

#define LOOM_MPI_CHECK(call)                                                                    \
  do {                                                                                          \
    int loom_mpi_rc_ = (call);                                                                  \
    if (loom_mpi_rc_ != MPI_SUCCESS) return mpi_error(loom_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

bool mpi_live() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", s);
  return b;
}

// What every communicator (and its in-flight requests) shares.
struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;
  int rank = 0, size = 1;
  double timeout_s = 0;
  size_t max_count = INT_MAX;  // elements per MPI call
  int tag_ub = 32767;          // MPI_TAG_UB (32767 is the least MPI allows)
  Status broken;               // not ok once a collective timed out: its request may still write

  ~CommState() {
    // A broken communicator still has a collective in flight; leave it to MPI_Finalize.
    if (comm != MPI_COMM_NULL && broken.is_ok() && mpi_live()) MPI_Comm_free(&comm);
  }
  std::string where(const std::string& call) const {
    return call + " on communicator '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  }
};

// The MPI requests of one Loom call (several when the buffer was split).
struct Ops {
  std::vector<MPI_Request> reqs;
  std::vector<long long> recv_count;  // per request: floats a recv must deliver, -1 otherwise
  bool cancellable = false;           // only receives: a timeout can cancel them
  const char* mpi_call = "";          // what started the requests, for error messages
  MPI_Request* add(const char* call, long long expect = -1) {
    mpi_call = call;
    reqs.push_back(MPI_REQUEST_NULL);
    recv_count.push_back(expect);
    return &reqs.back();
  }
};

// Tests each pending request once; *done when all are complete.
Status test_all(Ops& ops, bool* done) {
  *done = true;
  for (size_t i = 0; i < ops.reqs.size(); ++i) {
    if (ops.reqs[i] == MPI_REQUEST_NULL) continue;
    int flag = 0, cancelled = 0;
    MPI_Status st;
    int rc = MPI_Test(&ops.reqs[i], &flag, &st);
    if (rc != MPI_SUCCESS) {
      return mpi_error(rc, (std::string(ops.mpi_call) + " (completed by MPI_Test)").c_str(), __FILE__, __LINE__);
    }
    if (!flag) {
      *done = false;
      continue;
    }
    if (ops.recv_count[i] < 0) continue;
    LOOM_MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
    int got = 0;
    LOOM_MPI_CHECK(MPI_Get_count(&st, MPI_FLOAT, &got));
    if (!cancelled && got != ops.recv_count[i]) {
      return invalid_argument("received " + std::to_string(got) + " floats from rank " + std::to_string(st.MPI_SOURCE) +
                              " but expected " + std::to_string(ops.recv_count[i]) +
                              "; the send and recv counts must match");
    }
  }
  return Status::ok();
}

// Polls until every request is complete or timeout_s passed (0: no limit).
// Spins with yield for the first millisecond, then sleeps 50..200 us between
// polls so that oversubscribed ranks leave the core to the peer they wait for
// (MPI_Test is also what progresses a non-blocking collective).
Status poll(Ops& ops, double timeout_s) {
  const auto start = Clock::now();
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    bool done = false;
    LOOM_RETURN_IF_ERROR(test_all(ops, &done));
    if (done) return Status::ok();
    double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s > 0 && elapsed_s >= timeout_s) return Status(StatusCode::kTimeout, "");
    if (elapsed_s < 1e-3) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(200));
    }
  }
}

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(std::shared_ptr<CommState> state, std::string call, Ops ops)
      : state_(std::move(state)), call_(std::move(call)), ops_(std::move(ops)) {}
  ~MpiRequest() override {
    if (done_ || !state_->broken.is_ok() || !mpi_live()) return;
    Status s = wait();  // MPI forbids freeing a collective's request: complete it
    if (!s.is_ok()) std::fprintf(stderr, "loom: request dropped without wait(): %s\n", s.to_string().c_str());
  }

  Status wait() override {
    if (done_) return result_;
    Status s = poll(ops_, state_->timeout_s);
    if (s.code() == StatusCode::kTimeout) s = on_timeout();
    return finish(s);
  }

  bool test() override {
    if (done_) return true;
    bool complete = false;
    Status s = test_all(ops_, &complete);
    if (!s.is_ok() || complete) (void)finish(s);
    return done_;
  }

 private:
  Status on_timeout() {
    Status timeout(StatusCode::kTimeout, "did not complete within " + seconds_text(state_->timeout_s) +
                                             " (the collective timeout: loom execute --timeout); a peer is presumed dead "
                                             "or stuck, so the job ends (raise --timeout if a step legitimately takes "
                                             "longer)");
    if (ops_.cancellable) {
      for (MPI_Request& r : ops_.reqs) {
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      }
      if (poll(ops_, 1.0).is_ok()) return timeout;  // cancelled: the communicator stays usable
    }
    state_->broken = Status(StatusCode::kTimeout, "communicator '" + state_->name + "' is unusable after " + call_ +
                                                      " timed out");
    return timeout;
  }

  Status finish(Status s) {
    done_ = true;
    result_ = s.is_ok() ? s : s.with_context(state_->where(call_));
    return result_;
  }

  std::shared_ptr<CommState> state_;
  std::string call_;
  Ops ops_;
  bool done_ = false;
  Status result_;
};

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::kSum ? MPI_SUM : op == ReduceOp::kMax ? MPI_MAX : MPI_MIN;
}

// `count` floats, with an extent of `stride` floats: one rank's block of a
// chunked all_gather / all_to_all. Freed by the guard once the call started
// (MPI keeps it alive for pending operations).
struct TypeGuard {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  ~TypeGuard() {
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
  }
};
Status strided_floats(size_t count, size_t stride, TypeGuard* out) {
  TypeGuard block;
  LOOM_MPI_CHECK(MPI_Type_contiguous(int(count), MPI_FLOAT, &block.type));
  LOOM_MPI_CHECK(MPI_Type_create_resized(block.type, 0, MPI_Aint(stride * sizeof(float)), &out->type));
  LOOM_MPI_CHECK(MPI_Type_commit(&out->type));
  return Status::ok();
}

// Calls fn(offset, count) over [0, total) in pieces of at most max (at least
// one call, so a zero-length operation still matches its peers).
template <typename Fn>
Status chunked(size_t total, size_t max, Fn fn) {
  size_t off = 0;
  do {
    size_t c = std::min(max, total - off);
    LOOM_RETURN_IF_ERROR(fn(off, c));
    off += c;
  } while (off < total);
  return Status::ok();
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<CommState> s) : s_(std::move(s)) {}
  int rank() const override { return s_->rank; }
  int size() const override { return s_->size; }
  std::string name() const override { return s_->name; }

  Status all_reduce(float* buf, size_t count, ReduceOp op) override {
    return run("all_reduce", [&](Ops& o) { return start_all_reduce(o, buf, count, MPI_FLOAT, sizeof(float), op); });
  }
  Status all_reduce(double* buf, size_t count, ReduceOp op) override {
    return run("all_reduce", [&](Ops& o) { return start_all_reduce(o, buf, count, MPI_DOUBLE, sizeof(double), op); });
  }
  Status reduce_scatter(const float* send, float* recv, size_t recv_count) override {
    return run("reduce_scatter", [&](Ops& o) { return start_reduce_scatter(o, send, recv, recv_count); });
  }
  Status all_gather(const float* send, float* recv, size_t send_count) override {
    return run("all_gather", [&](Ops& o) { return start_all_gather(o, send, recv, send_count); });
  }
  Status broadcast(float* buf, size_t count, int root) override {
    return run("broadcast", [&](Ops& o) { return start_broadcast(o, buf, count, MPI_FLOAT, sizeof(float), root); });
  }
  Status broadcast_bytes(void* buf, size_t bytes, int root) override {
    return run("broadcast_bytes", [&](Ops& o) { return start_broadcast(o, buf, bytes, MPI_BYTE, 1, root); });
  }
  Status all_to_all(const float* send, float* recv, size_t count_per_peer) override {
    return run("all_to_all", [&](Ops& o) { return start_all_to_all(o, send, recv, count_per_peer); });
  }
  Status send(const float* buf, size_t count, int peer, int tag) override {
    return run("send", [&](Ops& o) { return start_p2p(o, const_cast<float*>(buf), count, peer, tag, false); });
  }
  Status recv(float* buf, size_t count, int peer, int tag) override {
    return run("recv", [&](Ops& o) { return start_p2p(o, buf, count, peer, tag, true); });
  }
  Status barrier() override {
    return run("barrier", [&](Ops& o) {
      LOOM_MPI_CHECK(MPI_Ibarrier(s_->comm, o.add("MPI_Ibarrier")));
      return Status::ok();
    });
  }

  Result<std::unique_ptr<CommRequest>> iall_reduce(float* buf, size_t count, ReduceOp op) override {
    return launch("iall_reduce", [&](Ops& o) { return start_all_reduce(o, buf, count, MPI_FLOAT, sizeof(float), op); });
  }
  Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* send, float* recv, size_t recv_count) override {
    return launch("ireduce_scatter", [&](Ops& o) { return start_reduce_scatter(o, send, recv, recv_count); });
  }
  Result<std::unique_ptr<CommRequest>> iall_gather(const float* send, float* recv, size_t send_count) override {
    return launch("iall_gather", [&](Ops& o) { return start_all_gather(o, send, recv, send_count); });
  }
  // MPI's counts and displacements are ints: a larger exchange takes the
  // per-peer path of the base class.
  Status all_to_allv(const float* send, const std::vector<size_t>& send_counts, float* recv,
                     const std::vector<size_t>& recv_counts) override {
    const size_t n = size_t(s_->size);
    if (send_counts.size() != n || recv_counts.size() != n)
      return Communicator::all_to_allv(send, send_counts, recv, recv_counts);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    size_t so = 0, ro = 0;
    for (size_t p = 0; p < n; ++p) {
      if (so + send_counts[p] > size_t(INT_MAX) || ro + recv_counts[p] > size_t(INT_MAX))
        return Communicator::all_to_allv(send, send_counts, recv, recv_counts);
      sc[p] = int(send_counts[p]);
      sd[p] = int(so);
      rc[p] = int(recv_counts[p]);
      rd[p] = int(ro);
      so += send_counts[p];
      ro += recv_counts[p];
    }
    return run("all_to_allv", [&](Ops& o) {
      LOOM_MPI_CHECK(MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT,
                                    s_->comm, o.add("MPI_Ialltoallv")));
      return Status::ok();
    });
  }
  Result<std::unique_ptr<CommRequest>> iall_to_all(const float* send, float* recv, size_t count_per_peer) override {
    return launch("iall_to_all", [&](Ops& o) { return start_all_to_all(o, send, recv, count_per_peer); });
  }
  Result<std::unique_ptr<CommRequest>> isend(const float* buf, size_t count, int peer, int tag) override {
    return launch("isend", [&](Ops& o) { return start_p2p(o, const_cast<float*>(buf), count, peer, tag, false); });
  }
  Result<std::unique_ptr<CommRequest>> irecv(float* buf, size_t count, int peer, int tag) override {
    return launch("irecv", [&](Ops& o) { return start_p2p(o, buf, count, peer, tag, true); });
  }

  Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) override {
    // Gather every (color, key) under the watchdog first: a dead peer times out
    // here rather than inside MPI_Comm_split, and a bad color fails on every rank.
    int mine[2] = {color, key};
    std::vector<int> all(2 * size_t(s_->size));
    LOOM_RETURN_IF_ERROR(run("split", [&](Ops& o) {
      LOOM_MPI_CHECK(MPI_Iallgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, s_->comm, o.add("MPI_Iallgather")));
      return Status::ok();
    }));
    for (int r = 0; r < s_->size; ++r) {
      if (all[2 * r] < 0) {
        return invalid_argument(s_->where("split") + ": rank " + std::to_string(r) + " passed color " +
                                std::to_string(all[2 * r]) + "; colors must be >= 0");
      }
    }
    auto sub = std::make_shared<CommState>(*s_);
    sub->comm = MPI_COMM_NULL;
    sub->name = name;
    Status s = [&]() -> Status {
      LOOM_MPI_CHECK(MPI_Comm_split(s_->comm, color, key, &sub->comm));
      LOOM_MPI_CHECK(MPI_Comm_set_errhandler(sub->comm, MPI_ERRORS_RETURN));
      LOOM_MPI_CHECK(MPI_Comm_rank(sub->comm, &sub->rank));
      LOOM_MPI_CHECK(MPI_Comm_size(sub->comm, &sub->size));
      return Status::ok();
    }();
    if (!s.is_ok()) return s.with_context(s_->where("split"));
    return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(sub)));
  }

  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    std::fprintf(stderr, "loom: rank %d of communicator '%s' aborts the job (exit code %d): %s\n", s_->rank,
                 s_->name.c_str(), exit_code, message.c_str());
    std::fflush(stderr);
    if (mpi_live()) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code != 0 ? exit_code : 1);
  }

 private:
  // Runs a blocking call: start it, then wait under the watchdog.
  template <typename Start>
  Status run(const char* call, Start start) {
    auto req = launch(call, start);
    if (!req.is_ok()) return req.status();
    return (*req)->wait();
  }

  template <typename Start>
  Result<std::unique_ptr<CommRequest>> launch(const char* call, Start start) {
    if (!s_->broken.is_ok()) return s_->broken;
    Ops ops;
    Status s = start(ops);
    if (!s.is_ok()) {
      // Pieces already started cannot be recalled: the communicator is out of step.
      if (!ops.reqs.empty()) s_->broken = s.with_context(s_->where(call));
      return s.with_context(s_->where(call));
    }
    return std::unique_ptr<CommRequest>(new MpiRequest(s_, call, std::move(ops)));
  }

  // Per-rank block limit of the block-structured collectives: a call's total
  // count stays within max_count (some MPIs compute rank * count in int).
  size_t block_max() const { return std::max<size_t>(1, s_->max_count / size_t(s_->size)); }

  Status check_rank(const char* what, int r) const {
    if (r >= 0 && r < s_->size) return Status::ok();
    return invalid_argument(std::string(what) + "=" + std::to_string(r) + " is not a rank of this communicator (size " +
                            std::to_string(s_->size) + ")");
  }

  Status start_all_reduce(Ops& o, void* buf, size_t count, MPI_Datatype type, size_t elem, ReduceOp op) {
    return chunked(count, s_->max_count, [&](size_t off, size_t c) {
      LOOM_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(buf) + off * elem, int(c), type, mpi_op(op),
                                    s_->comm, o.add("MPI_Iallreduce")));
      return Status::ok();
    });
  }

  Status start_reduce_scatter(Ops& o, const float* send, float* recv, size_t n) {
    if (n <= block_max()) {
      LOOM_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, int(n), MPI_FLOAT, MPI_SUM, s_->comm,
                                               o.add("MPI_Ireduce_scatter_block")));
      return Status::ok();
    }
    // Slices are rank-strided and predefined reductions need predefined types:
    // reduce each piece of each rank's slice to that rank.
    return chunked(n, block_max(), [&](size_t off, size_t c) {
      for (int root = 0; root < s_->size; ++root) {
        LOOM_MPI_CHECK(MPI_Ireduce(send + size_t(root) * n + off, root == s_->rank ? recv + off : nullptr, int(c),
                                   MPI_FLOAT, MPI_SUM, root, s_->comm, o.add("MPI_Ireduce")));
      }
      return Status::ok();
    });
  }

  // A piece shorter than the block (c < n) lands in each rank's block through
  // a strided type; a whole block uses plain floats.
  // In place (send == this rank's block of recv): MPI_IN_PLACE, which reads
  // the rank's piece where the received layout puts it.
  Status start_all_gather(Ops& o, const float* send, float* recv, size_t n) {
    const bool in_place = send == recv + size_t(s_->rank) * n;
    return chunked(n, block_max(), [&](size_t off, size_t c) {
      TypeGuard block;
      if (c < n) LOOM_RETURN_IF_ERROR(strided_floats(c, n, &block));
      MPI_Datatype rtype = c < n ? block.type : MPI_FLOAT;
      const void* sbuf = in_place ? MPI_IN_PLACE : static_cast<const void*>(send + off);
      LOOM_MPI_CHECK(MPI_Iallgather(sbuf, int(c), MPI_FLOAT, recv + off, c < n ? 1 : int(c), rtype, s_->comm,
                                    o.add("MPI_Iallgather")));
      return Status::ok();
    });
  }

  Status start_broadcast(Ops& o, void* buf, size_t count, MPI_Datatype type, size_t elem, int root) {
    LOOM_RETURN_IF_ERROR(check_rank("root", root));
    return chunked(count, s_->max_count, [&](size_t off, size_t c) {
      LOOM_MPI_CHECK(
          MPI_Ibcast(static_cast<char*>(buf) + off * elem, int(c), type, root, s_->comm, o.add("MPI_Ibcast")));
      return Status::ok();
    });
  }

  Status start_all_to_all(Ops& o, const float* send, float* recv, size_t n) {
    return chunked(n, block_max(), [&](size_t off, size_t c) {
      TypeGuard block;
      if (c < n) LOOM_RETURN_IF_ERROR(strided_floats(c, n, &block));
      MPI_Datatype type = c < n ? block.type : MPI_FLOAT;
      int count = c < n ? 1 : int(c);
      LOOM_MPI_CHECK(MPI_Ialltoall(send + off, count, type, recv + off, count, type, s_->comm, o.add("MPI_Ialltoall")));
      return Status::ok();
    });
  }

  // Pieces of one message share the tag: MPI's non-overtaking rule keeps them in order.
  Status start_p2p(Ops& o, float* buf, size_t count, int peer, int tag, bool is_recv) {
    LOOM_RETURN_IF_ERROR(check_rank("peer", peer));
    if (tag < 0 || tag > s_->tag_ub) {
      return invalid_argument("tag=" + std::to_string(tag) + " is outside [0, " + std::to_string(s_->tag_ub) +
                              "] (MPI_TAG_UB)");
    }
    o.cancellable = is_recv;
    return chunked(count, s_->max_count, [&](size_t off, size_t c) {
      if (is_recv) {
        LOOM_MPI_CHECK(MPI_Irecv(buf + off, int(c), MPI_FLOAT, peer, tag, s_->comm, o.add("MPI_Irecv", (long long)c)));
      } else {
        LOOM_MPI_CHECK(MPI_Isend(buf + off, int(c), MPI_FLOAT, peer, tag, s_->comm, o.add("MPI_Isend")));
      }
      return Status::ok();
    });
  }

  std::shared_ptr<CommState> s_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> mpi_world(int* argc, char*** argv, const MpiOptions& options) {
  if (!std::isfinite(options.timeout_s) || options.timeout_s < 0) {
    return invalid_argument("mpi_world: timeout_s=" + std::to_string(options.timeout_s) +
                            " must be a finite number of seconds >= 0 (0 disables the watchdog)");
  }
  int initialized = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return unsupported("mpi_world: MPI was already finalized in this process and cannot be restarted");
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    // MULTIPLE lets different threads drive different communicators.
    LOOM_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  }
  LOOM_MPI_CHECK(MPI_Query_thread(&provided));
  if (provided < MPI_THREAD_FUNNELED) {
    return unsupported("mpi_world: this MPI provides thread level " + std::to_string(provided) +
                       " below MPI_THREAD_FUNNELED; rebuild MPI with thread support");
  }
  LOOM_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

  auto state = std::make_shared<CommState>();
  state->name = "world";
  state->timeout_s = options.timeout_s;
  state->max_count = std::clamp<size_t>(options.max_count_per_call, 1, INT_MAX);
  LOOM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &state->rank));
  LOOM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &state->size));
  int* tag_ub = nullptr;
  int found = 0;
  LOOM_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
  if (found) state->tag_ub = *tag_ub;
  // A duplicate, timed like any collective (a rank that never starts hangs nobody).
  Ops ops;
  LOOM_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &state->comm, ops.add("MPI_Comm_idup")));
  Status s = MpiRequest(state, "mpi_world (MPI_Comm_idup)", std::move(ops)).wait();
  if (!s.is_ok()) {
    new std::shared_ptr<CommState>(state);  // leaked: MPI may still write state->comm
    return s;
  }
  LOOM_MPI_CHECK(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN));
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(state)));
}

void mpi_finalize() {
  if (mpi_live()) MPI_Finalize();
}

bool mpi_available() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return !finalized;
}

}  // namespace loom::exec
