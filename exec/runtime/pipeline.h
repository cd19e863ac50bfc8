// Pipeline execution of one rank: the activation and gradient buffers of the
// micro-batches in flight, and the program's p2p transfers between stages.
//
// Each transfer op of the program (core/program.h) names its peer stage and
// its message tag; this class only looks up the channel and moves the
// buffer. Transfers travel on one communicator per channel (P2pChannel:
// activations, gradients, and with interleaving the wrap-around edges of
// each), so every channel keeps one order of sends and receives and no cycle
// between stages, which NCCL's in-stream send/recv needs.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/layout.h"
#include "core/program.h"
#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"

namespace loom::exec {

class Pipeline {
 public:
  // `stage_group_color` / `stage` split the pipeline group (the ranks that
  // share this rank's DP and TP coordinates) out of `world`.
  static Result<std::unique_ptr<Pipeline>> create(Communicator& world, int stage_group_color, const Layout& layout,
                                                  int stage, ComputeBackend* backend);

  // Whether the channels pair messages by tag (MPI, TCP) or in call order (NCCL).
  bool matches_by_tag() const { return act_->matches_by_tag(); }
  const Communicator& activation_channel() const { return *act_; }

  // Forward input of (chunk, micro): received from the previous stage, or
  // the previous chunk's output on this stage (pp = 1 with several chunks;
  // DualPipeV's last stage, where chunk 0's output is chunk 1's input).
  Result<const float*> forward_input(int chunk, int micro);
  void forward_done(int chunk, int micro, DeviceBuffer output);  // output empty on the last global chunk
  // Backward input (the gradient of the chunk's output) and result.
  Result<const float*> backward_input(int chunk, int micro);
  void backward_done(int chunk, int micro, DeviceBuffer dinput);  // dinput empty on the first global chunk

  // kSend* / kRecv*: `floats` is the size of the activation a recv expects.
  Status send(const Op& op);
  Status recv(const Op& op, size_t floats);
  // Completes the sends in flight (before the optimizer).
  Status wait_sends();
  // Sends in flight, whose buffers are held (for tests).
  size_t sends_in_flight() const { return sends_.size(); }

 private:
  Pipeline(const Layout& layout, int stage, ComputeBackend* backend) : layout_(layout), stage_(stage), backend_(backend) {}
  Communicator& channel(const Op& op);
  int local_chunk(int global_chunk) const;
  // Frees the buffers of the sends that have completed (each send and receive
  // reaps), so a stage holds the outputs its peer has not yet received, not
  // every output of the step.
  Status reap_sends();
  using Key = std::pair<int, int>;  // (chunk, micro)

  Layout layout_;
  int stage_;
  ComputeBackend* backend_;
  std::unique_ptr<Communicator> act_, grad_, act_wrap_, grad_wrap_;
  std::map<Key, DeviceBuffer> act_in_, act_out_, grad_in_, grad_out_;
  std::vector<std::unique_ptr<CommRequest>> sends_;
  std::vector<DeviceBuffer> send_buffers_;  // alive until their sends complete
};

}  // namespace loom::exec
