#include "exec/comm/self_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::exec {

namespace {

class DoneRequest final : public CommRequest {
 public:
  Status wait() override { return Status::ok(); }
  bool test() override { return true; }
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }
  Status all_reduce(float*, size_t, ReduceOp) override { return Status::ok(); }
  Status all_reduce(double*, size_t, ReduceOp) override { return Status::ok(); }
  Status reduce_scatter(const float* send, float* recv, size_t n) override { return copy(send, recv, n); }
  Status all_gather(const float* send, float* recv, size_t n) override { return copy(send, recv, n); }
  Status broadcast(float*, size_t, int root) override { return check_peer(root); }
  Status broadcast_bytes(void*, size_t, int root) override { return check_peer(root); }
  Status all_to_all(const float* send, float* recv, size_t n) override { return copy(send, recv, n); }
  Status all_to_allv(const float* send, const std::vector<size_t>& sc, float* recv,
                     const std::vector<size_t>& rc) override {
    if (sc.size() != 1 || rc.size() != 1 || sc[0] != rc[0])
      return invalid_argument(name_ + ": all_to_allv counts do not match one rank");
    return copy(send, recv, sc[0]);
  }
  Status send(const float*, size_t, int peer, int) override {
    return invalid_argument(name_ + ": send to peer " + std::to_string(peer) + " in a one-rank communicator");
  }
  Status recv(float*, size_t, int peer, int) override {
    return invalid_argument(name_ + ": recv from peer " + std::to_string(peer) + " in a one-rank communicator");
  }
  Status barrier() override { return Status::ok(); }
  Result<std::unique_ptr<CommRequest>> iall_reduce(float*, size_t, ReduceOp) override { return done(); }
  Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* send, float* recv, size_t n) override {
    LOOM_RETURN_IF_ERROR(copy(send, recv, n));
    return done();
  }
  Result<std::unique_ptr<CommRequest>> iall_gather(const float* send, float* recv, size_t n) override {
    LOOM_RETURN_IF_ERROR(copy(send, recv, n));
    return done();
  }
  Result<std::unique_ptr<CommRequest>> iall_to_all(const float* send, float* recv, size_t n) override {
    LOOM_RETURN_IF_ERROR(copy(send, recv, n));
    return done();
  }
  Result<std::unique_ptr<CommRequest>> isend(const float* b, size_t n, int peer, int tag) override {
    LOOM_RETURN_IF_ERROR(send(b, n, peer, tag));
    return done();
  }
  Result<std::unique_ptr<CommRequest>> irecv(float* b, size_t n, int peer, int tag) override {
    LOOM_RETURN_IF_ERROR(recv(b, n, peer, tag));
    return done();
  }
  Result<std::unique_ptr<Communicator>> split(int, int, const std::string& name) override {
    return std::unique_ptr<Communicator>(new SelfCommunicator(name));
  }
  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fprintf(stderr, "loom: %s\n", message.c_str());
    std::exit(code);
  }

 private:
  static Status copy(const float* a, float* b, size_t n) {
    if (a != b) std::memmove(b, a, n * sizeof(float));
    return Status::ok();
  }
  Status check_peer(int root) {
    if (root != 0) return invalid_argument(name_ + ": root " + std::to_string(root) + " in a one-rank communicator");
    return Status::ok();
  }
  static Result<std::unique_ptr<CommRequest>> done() { return std::unique_ptr<CommRequest>(new DoneRequest()); }
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace loom::exec
