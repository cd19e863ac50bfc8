// A Communicator that forwards to another but drops message tags: every
// send and receive uses tag 0, so transfers between two ranks on one
// communicator pair in call order (MPI's non-overtaking rule), as NCCL's
// send/recv do. matches_by_tag() is false, so the trainer applies its
// NCCL-only checks. Lets the CPU tests run the runtime under NCCL's pairing.
#pragma once

#include <memory>
#include <string>

#include "exec/comm/communicator.h"

namespace loom::exec {

class TaglessCommunicator final : public Communicator {
 public:
  explicit TaglessCommunicator(std::unique_ptr<Communicator> owned) : own_(std::move(owned)), c_(own_.get()) {}
  explicit TaglessCommunicator(Communicator* borrowed) : c_(borrowed) {}
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  std::string name() const override { return c_->name() + "(tagless)"; }
  bool matches_by_tag() const override { return false; }
  Status all_reduce(float* b, size_t n, ReduceOp op) override { return c_->all_reduce(b, n, op); }
  Status all_reduce(double* b, size_t n, ReduceOp op) override { return c_->all_reduce(b, n, op); }
  Status reduce_scatter(const float* s, float* r, size_t n) override { return c_->reduce_scatter(s, r, n); }
  Status all_gather(const float* s, float* r, size_t n) override { return c_->all_gather(s, r, n); }
  Status broadcast(float* b, size_t n, int root) override { return c_->broadcast(b, n, root); }
  Status broadcast_bytes(void* b, size_t n, int root) override { return c_->broadcast_bytes(b, n, root); }
  Status all_to_all(const float* s, float* r, size_t n) override { return c_->all_to_all(s, r, n); }
  Status send(const float* b, size_t n, int peer, int) override { return c_->send(b, n, peer, 0); }
  Status recv(float* b, size_t n, int peer, int) override { return c_->recv(b, n, peer, 0); }
  Status barrier() override { return c_->barrier(); }
  Result<std::unique_ptr<CommRequest>> iall_reduce(float* b, size_t n, ReduceOp op) override {
    return c_->iall_reduce(b, n, op);
  }
  Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* s, float* r, size_t n) override {
    return c_->ireduce_scatter(s, r, n);
  }
  Result<std::unique_ptr<CommRequest>> iall_to_all(const float* s, float* r, size_t n) override {
    return c_->iall_to_all(s, r, n);
  }
  Result<std::unique_ptr<CommRequest>> iall_gather(const float* s, float* r, size_t n) override {
    return c_->iall_gather(s, r, n);
  }
  Result<std::unique_ptr<CommRequest>> isend(const float* b, size_t n, int peer, int) override {
    return c_->isend(b, n, peer, 0);
  }
  Result<std::unique_ptr<CommRequest>> irecv(float* b, size_t n, int peer, int) override {
    return c_->irecv(b, n, peer, 0);
  }
  Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) override {
    LOOM_ASSIGN_OR_RETURN(auto sub, c_->split(color, key, name));
    return std::unique_ptr<Communicator>(std::make_unique<TaglessCommunicator>(std::move(sub)));
  }
  [[noreturn]] void abort(int code, const std::string& message) override { c_->abort(code, message); }

 private:
  std::unique_ptr<Communicator> own_;
  Communicator* c_;
};

}  // namespace loom::exec
