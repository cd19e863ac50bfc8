#include "exec/runtime/pipeline.h"

#include "exec/backend/memory_ledger.h"

namespace loom::exec {

Result<std::unique_ptr<Pipeline>> Pipeline::create(Communicator& world, int color, const Layout& layout, int stage,
                                                   ComputeBackend* backend) {
  std::unique_ptr<Pipeline> p(new Pipeline(layout, stage, backend));
  LOOM_ASSIGN_OR_RETURN(p->act_, world.split(color, stage, "pp"));
  LOOM_ASSIGN_OR_RETURN(p->grad_, world.split(color, stage, "pp-grad"));
  if (layout.virtual_stages > 1 && layout.pp > 1) {
    LOOM_ASSIGN_OR_RETURN(p->act_wrap_, world.split(color, stage, "pp-wrap"));
    LOOM_ASSIGN_OR_RETURN(p->grad_wrap_, world.split(color, stage, "pp-grad-wrap"));
  }
  return p;
}

Communicator& Pipeline::channel(const Op& op) {
  ProgramConfig pc;
  pc.pp = layout_.pp;
  pc.schedule = layout_.schedule;
  switch (p2p_channel(op, pc)) {
    case P2pChannel::kActivation: return *act_;
    case P2pChannel::kGradient: return *grad_;
    case P2pChannel::kActivationWrap: return *act_wrap_;
    case P2pChannel::kGradientWrap: return *grad_wrap_;
  }
  return *act_;
}

// The chunk of this stage holding global chunk g, or -1 (interleaving with
// pp = 1: every chunk; DualPipeV: the two arms meet on the last stage).
int Pipeline::local_chunk(int g) const {
  for (int c = 0; c < layout_.virtual_stages; ++c)
    if (layout_.global_chunk(stage_, c) == g) return c;
  return -1;
}

Result<const float*> Pipeline::forward_input(int c, int micro) {
  const Key key{c, micro};
  const int prev_here = local_chunk(layout_.global_chunk(stage_, c) - 1);
  if (prev_here >= 0 && !act_in_.count(key)) {  // the previous chunk on this same stage
    auto prev = act_out_.find({prev_here, micro});
    if (prev != act_out_.end()) {
      act_in_[key] = std::move(prev->second);
      act_out_.erase(prev);
    }
  }
  auto it = act_in_.find(key);
  if (it == act_in_.end())
    return internal_error("forward input of chunk " + std::to_string(c) + " micro-batch " + std::to_string(micro) +
                          " is missing");
  return static_cast<const float*>(it->second.f32());
}

void Pipeline::forward_done(int c, int micro, DeviceBuffer output) {
  act_in_.erase({c, micro});
  if (!output.empty()) act_out_[{c, micro}] = std::move(output);
}

Result<const float*> Pipeline::backward_input(int c, int micro) {
  const Key key{c, micro};
  const int next_here = local_chunk(layout_.global_chunk(stage_, c) + 1);
  if (next_here >= 0 && !grad_in_.count(key)) {  // the next chunk on this same stage
    auto next = grad_out_.find({next_here, micro});
    if (next != grad_out_.end()) {
      grad_in_[key] = std::move(next->second);
      grad_out_.erase(next);
    }
  }
  auto it = grad_in_.find(key);
  if (it == grad_in_.end())
    return internal_error("backward input of chunk " + std::to_string(c) + " micro-batch " + std::to_string(micro) +
                          " is missing");
  return static_cast<const float*>(it->second.f32());
}

void Pipeline::backward_done(int c, int micro, DeviceBuffer dinput) {
  grad_in_.erase({c, micro});
  if (!dinput.empty()) grad_out_[{c, micro}] = std::move(dinput);
}

Status Pipeline::send(const Op& op) {
  const bool grad = op.kind == OpKind::kSendGrad;
  auto& outputs = grad ? grad_out_ : act_out_;
  auto it = outputs.find({op.chunk, op.micro});
  if (it == outputs.end())
    return internal_error(std::string("nothing to send for ") + op_kind_name(op.kind) + " chunk " +
                          std::to_string(op.chunk) + " micro-batch " + std::to_string(op.micro));
  DeviceBuffer buf = std::move(it->second);
  outputs.erase(it);
  LOOM_ASSIGN_OR_RETURN(auto req, channel(op).isend(buf.f32(), buf.floats(), op.peer_stage, op.tag));
  sends_.push_back(std::move(req));
  send_buffers_.push_back(std::move(buf));
  return reap_sends();
}

Status Pipeline::reap_sends() {
  size_t kept = 0;
  for (size_t i = 0; i < sends_.size(); ++i) {
    if (sends_[i]->test()) {
      LOOM_RETURN_IF_ERROR(sends_[i]->wait());
      continue;
    }
    if (kept != i) {
      sends_[kept] = std::move(sends_[i]);
      send_buffers_[kept] = std::move(send_buffers_[i]);
    }
    ++kept;
  }
  sends_.resize(kept);
  send_buffers_.resize(kept);
  return Status::ok();
}

Status Pipeline::recv(const Op& op, size_t floats) {
  MemoryClassScope charge(MemoryClass::kCommBuffers);
  auto buf = DeviceBuffer::uninitialized(backend_, floats * sizeof(float));
  LOOM_RETURN_IF_ERROR(channel(op).recv(buf.f32(), buf.floats(), op.peer_stage, op.tag));
  (op.kind == OpKind::kRecvGrad ? grad_in_ : act_in_)[{op.chunk, op.micro}] = std::move(buf);
  return reap_sends();
}

Status Pipeline::wait_sends() {
  for (auto& req : sends_) LOOM_RETURN_IF_ERROR(req->wait());
  sends_.clear();
  send_buffers_.clear();
  return Status::ok();
}

}  // namespace loom::exec
