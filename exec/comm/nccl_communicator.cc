#include "exec/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace loom::exec {

namespace {

Status nccl_status(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return Status::ok();
  const std::string msg = what + ": " + ncclGetErrorString(r);
  if (r == ncclRemoteError) return Status(StatusCode::kRemoteError, msg);
  return internal_error(msg);
}

Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::ok();
  return internal_error(what + ": " + cudaGetErrorString(e));
}

#define LOOM_NCCL_CHECK(call, what) LOOM_RETURN_IF_ERROR(nccl_status((call), (what)))
#define LOOM_NCCL_CUDA(call, what) LOOM_RETURN_IF_ERROR(cuda_status((call), (what)))

struct Shared {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaStream_t producer = nullptr;  // the compute stream calls wait for
  cudaEvent_t produced = nullptr;
  double timeout_s = 300;
  std::string name;
  bool broken = false;
  Communicator* bootstrap = nullptr;
  ~Shared() {
    if (comm) broken ? ncclCommAbort(comm) : ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
    if (produced) cudaEventDestroy(produced);
  }
  // Orders the next enqueued call after the producer stream's queued work.
  Status after_producer() {
    if (!producer) return Status::ok();
    if (!produced) LOOM_NCCL_CUDA(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), name + " event");
    LOOM_NCCL_CUDA(cudaEventRecord(produced, producer), name + " compute-stream event");
    LOOM_NCCL_CUDA(cudaStreamWaitEvent(stream, produced, 0), name + " wait for the compute stream");
    return Status::ok();
  }
};

// Waits for `event` (recorded after the call on the stream), polling NCCL's
// asynchronous error; aborts the communicator on timeout.
Status wait_event(Shared& s, cudaEvent_t event, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (s.broken || !s.comm)
      return Status(StatusCode::kRemoteError, s.name + " " + what + ": the communicator was aborted after an error");
    cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) return Status::ok();
    if (q != cudaErrorNotReady) return cuda_status(q, s.name + " " + what);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(s.comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      s.broken = true;
      return nccl_status(async, s.name + " " + what + " (asynchronous error)");
    }
    if (s.timeout_s > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > s.timeout_s) {
      s.broken = true;
      ncclCommAbort(s.comm);
      s.comm = nullptr;
      return Status(StatusCode::kTimeout, s.name + " " + what + " did not complete in " +
                                              std::to_string(int(s.timeout_s)) +
                                              " s; a peer is presumed dead: NCCL communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(std::shared_ptr<Shared> s, cudaEvent_t e, std::string what) : s_(std::move(s)), e_(e), what_(std::move(what)) {}
  ~NcclRequest() override { cudaEventDestroy(e_); }
  Status wait() override { return wait_event(*s_, e_, what_); }
  bool test() override { return cudaEventQuery(e_) == cudaSuccess; }

 private:
  std::shared_ptr<Shared> s_;
  cudaEvent_t e_;
  std::string what_;
};

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kMax ? ncclMax : ncclMin; }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Shared> s, int rank, int size) : s_(std::move(s)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return s_->name; }
  bool matches_by_tag() const override { return false; }

  Status all_reduce(float* buf, size_t count, ReduceOp op) override {
    return run("all_reduce", [&] { return ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), s_->comm, s_->stream); });
  }
  Status all_reduce(double* buf, size_t count, ReduceOp op) override {
    return run("all_reduce", [&] { return ncclAllReduce(buf, buf, count, ncclDouble, nccl_op(op), s_->comm, s_->stream); });
  }
  Status reduce_scatter(const float* send, float* recv, size_t recv_count) override {
    return run("reduce_scatter",
               [&] { return ncclReduceScatter(send, recv, recv_count, ncclFloat, ncclSum, s_->comm, s_->stream); });
  }
  Status all_gather(const float* send, float* recv, size_t send_count) override {
    return run("all_gather", [&] { return ncclAllGather(send, recv, send_count, ncclFloat, s_->comm, s_->stream); });
  }
  Status broadcast(float* buf, size_t count, int root) override {
    return run("broadcast", [&] { return ncclBroadcast(buf, buf, count, ncclFloat, root, s_->comm, s_->stream); });
  }
  Status broadcast_bytes(void* buf, size_t bytes, int root) override {
    return run("broadcast", [&] { return ncclBroadcast(buf, buf, bytes, ncclUint8, root, s_->comm, s_->stream); });
  }
  Status all_to_all(const float* send, float* recv, size_t n) override {
    LOOM_ASSIGN_OR_RETURN(auto req, iall_to_all(send, recv, n));
    return req->wait();
  }
  Status send(const float* buf, size_t count, int peer, int) override {
    return run("send", [&] { return ncclSend(buf, count, ncclFloat, peer, s_->comm, s_->stream); });
  }
  Status recv(float* buf, size_t count, int peer, int) override {
    return run("recv", [&] { return ncclRecv(buf, count, ncclFloat, peer, s_->comm, s_->stream); });
  }
  Status barrier() override {
    if (!scratch_) LOOM_NCCL_CUDA(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), "barrier scratch");
    return all_reduce(scratch_, 1, ReduceOp::kSum);
  }
  Result<std::unique_ptr<CommRequest>> iall_reduce(float* buf, size_t count, ReduceOp op) override {
    return start("all_reduce", [&] { return ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), s_->comm, s_->stream); });
  }
  Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* send, float* recv, size_t recv_count) override {
    return start("reduce_scatter",
                 [&] { return ncclReduceScatter(send, recv, recv_count, ncclFloat, ncclSum, s_->comm, s_->stream); });
  }
  Result<std::unique_ptr<CommRequest>> iall_gather(const float* send, float* recv, size_t send_count) override {
    return start("all_gather", [&] { return ncclAllGather(send, recv, send_count, ncclFloat, s_->comm, s_->stream); });
  }
  Result<std::unique_ptr<CommRequest>> iall_to_all(const float* send, float* recv, size_t n) override {
    return start("all_to_all", [&] {
      ncclResult_t r = ncclGroupStart();
      for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
        r = ncclSend(send + size_t(p) * n, n, ncclFloat, p, s_->comm, s_->stream);
        if (r == ncclSuccess) r = ncclRecv(recv + size_t(p) * n, n, ncclFloat, p, s_->comm, s_->stream);
      }
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
  }
  Status all_to_allv(const float* send, const std::vector<size_t>& send_counts, float* recv,
                     const std::vector<size_t>& recv_counts) override {
    if (int(send_counts.size()) != size_ || int(recv_counts.size()) != size_)
      return Communicator::all_to_allv(send, send_counts, recv, recv_counts);  // names the mismatch
    LOOM_ASSIGN_OR_RETURN(auto req, start("all_to_allv", [&] {
      ncclResult_t r = ncclGroupStart();
      size_t so = 0, ro = 0;
      for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
        r = ncclSend(send + so, send_counts[size_t(p)], ncclFloat, p, s_->comm, s_->stream);
        if (r == ncclSuccess) r = ncclRecv(recv + ro, recv_counts[size_t(p)], ncclFloat, p, s_->comm, s_->stream);
        so += send_counts[size_t(p)];
        ro += recv_counts[size_t(p)];
      }
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    }));
    return req->wait();
  }
  Result<std::unique_ptr<CommRequest>> isend_recv(const float* send, size_t send_count, int dst, float* recv,
                                                  size_t recv_count, int src, int) override {
    return start("send_recv", [&] {
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(send, send_count, ncclFloat, dst, s_->comm, s_->stream);
      if (r == ncclSuccess) r = ncclRecv(recv, recv_count, ncclFloat, src, s_->comm, s_->stream);
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
  }
  Result<std::unique_ptr<CommRequest>> isend(const float* buf, size_t count, int peer, int) override {
    return start("send", [&] { return ncclSend(buf, count, ncclFloat, peer, s_->comm, s_->stream); });
  }
  Result<std::unique_ptr<CommRequest>> irecv(float* buf, size_t count, int peer, int) override {
    return start("recv", [&] { return ncclRecv(buf, count, ncclFloat, peer, s_->comm, s_->stream); });
  }

  Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) override {
    LOOM_RETURN_IF_ERROR(usable("split"));
    auto s = std::make_shared<Shared>();
    s->timeout_s = s_->timeout_s;
    s->name = name;
    s->bootstrap = s_->bootstrap;
    s->producer = s_->producer;
    LOOM_NCCL_CHECK(ncclCommSplit(s_->comm, color, key, &s->comm, nullptr), s_->name + " split into " + name);
    LOOM_NCCL_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), name + " stream");
    int r = 0, n = 0;
    LOOM_NCCL_CHECK(ncclCommUserRank(s->comm, &r), name + " rank");
    LOOM_NCCL_CHECK(ncclCommCount(s->comm, &n), name + " size");
    return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(s), r, n));
  }

  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    if (s_->comm) ncclCommAbort(s_->comm), s_->comm = nullptr;
    s_->broken = true;
    if (s_->bootstrap) s_->bootstrap->abort(exit_code, message);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::_Exit(exit_code);
  }

  ~NcclCommunicator() override {
    if (scratch_) cudaFree(scratch_);
  }

 private:
  Status usable(const char* what) const {
    if (!s_->comm || s_->broken)
      return Status(StatusCode::kRemoteError, s_->name + " " + what + ": the communicator was aborted after an error");
    return Status::ok();
  }
  template <typename F>
  Result<std::unique_ptr<CommRequest>> start(const char* what, F&& enqueue) {
    LOOM_RETURN_IF_ERROR(usable(what));
    LOOM_RETURN_IF_ERROR(s_->after_producer());
    LOOM_NCCL_CHECK(enqueue(), s_->name + " " + what);
    cudaEvent_t e = nullptr;
    LOOM_NCCL_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), s_->name + " event");
    if (cudaError_t err = cudaEventRecord(e, s_->stream); err != cudaSuccess) {
      cudaEventDestroy(e);
      return cuda_status(err, s_->name + " event record");
    }
    return std::unique_ptr<CommRequest>(std::make_unique<NcclRequest>(s_, e, what));
  }
  template <typename F>
  Status run(const char* what, F&& enqueue) {
    LOOM_ASSIGN_OR_RETURN(auto req, start(what, std::forward<F>(enqueue)));
    return req->wait();
  }

  std::shared_ptr<Shared> s_;
  int rank_, size_;
  float* scratch_ = nullptr;
};

}  // namespace

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

Result<std::unique_ptr<Communicator>> nccl_world(Communicator* bootstrap, int local_rank, const NcclOptions& options) {
  if (!bootstrap) return invalid_argument("nccl_world: a bootstrap communicator (MPI) is required");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return unsupported("NCCL needs a CUDA device on every rank; none is visible on rank " +
                       std::to_string(bootstrap->rank()));
  }
  const int device = options.device >= 0 ? options.device : local_rank % devices;
  LOOM_NCCL_CUDA(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap->rank() == 0) LOOM_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
  LOOM_RETURN_IF_ERROR(bootstrap->broadcast_bytes(&id, sizeof id, 0));
  auto s = std::make_shared<Shared>();
  s->timeout_s = options.timeout_s;
  s->name = "world(nccl)";
  s->bootstrap = bootstrap;
  s->producer = static_cast<cudaStream_t>(options.compute_stream);
  LOOM_NCCL_CHECK(ncclCommInitRank(&s->comm, bootstrap->size(), id, bootstrap->rank()), "ncclCommInitRank");
  LOOM_NCCL_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "NCCL stream");
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(s), bootstrap->rank(), bootstrap->size()));
}

}  // namespace loom::exec
