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

}  // namespace loom::exec
