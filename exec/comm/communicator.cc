#include "exec/comm/communicator.h"

namespace loom::exec {

Status Communicator::all_to_allv(const float* send, const std::vector<size_t>& send_counts, float* recv,
                                 const std::vector<size_t>& recv_counts) {
  const int n = size();
  if (int(send_counts.size()) != n || int(recv_counts.size()) != n)
    return invalid_argument(name() + " all_to_allv: " + std::to_string(send_counts.size()) + " send and " +
                            std::to_string(recv_counts.size()) + " receive counts for " + std::to_string(n) +
                            " ranks");
  std::vector<std::unique_ptr<CommRequest>> reqs;
  size_t off = 0;
  for (int p = 0; p < n; ++p) {
    LOOM_ASSIGN_OR_RETURN(auto r, irecv(recv + off, recv_counts[size_t(p)], p, kAllToAllvTag));
    reqs.push_back(std::move(r));
    off += recv_counts[size_t(p)];
  }
  // Starting with the next rank spreads the first sends over the peers.
  std::vector<size_t> send_off(size_t(n) + 1, 0);
  for (int p = 0; p < n; ++p) send_off[size_t(p) + 1] = send_off[size_t(p)] + send_counts[size_t(p)];
  for (int i = 0; i < n; ++i) {
    const int p = (rank() + i) % n;
    LOOM_ASSIGN_OR_RETURN(auto r, isend(send + send_off[size_t(p)], send_counts[size_t(p)], p, kAllToAllvTag));
    reqs.push_back(std::move(r));
  }
  Status first = Status::ok();
  for (auto& r : reqs) {
    Status s = r->wait();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  return first;
}

namespace {
// Both halves of a ring step; wait() returns the first failure.
class PairRequest final : public CommRequest {
 public:
  PairRequest(std::unique_ptr<CommRequest> a, std::unique_ptr<CommRequest> b) : a_(std::move(a)), b_(std::move(b)) {}
  Status wait() override {
    Status sa = a_->wait();
    Status sb = b_->wait();
    return sa.is_ok() ? sb : sa;
  }
  bool test() override { return a_->test() && b_->test(); }

 private:
  std::unique_ptr<CommRequest> a_, b_;
};
}  // namespace

Result<std::unique_ptr<CommRequest>> Communicator::isend_recv(const float* send, size_t send_count, int dst,
                                                              float* recv, size_t recv_count, int src, int tag) {
  LOOM_ASSIGN_OR_RETURN(auto r, irecv(recv, recv_count, src, tag));
  LOOM_ASSIGN_OR_RETURN(auto s, isend(send, send_count, dst, tag));
  return std::unique_ptr<CommRequest>(std::make_unique<PairRequest>(std::move(r), std::move(s)));
}

}  // namespace loom::exec
