// Context parallelism with the K/V all-gathered (exec/model/context_parallel.h).
#include <utility>

#include "exec/model/context_parallel.h"

namespace loom::exec {

namespace {
DeviceBuffer uninit(ComputeBackend* be, int64_t floats) {
  return DeviceBuffer::uninitialized(be, size_t(floats) * sizeof(float));
}
}  // namespace

std::unique_ptr<CpAttention> make_cp_attention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c,
                                               int64_t Hq, int64_t Hk, int64_t D) {
  switch (cp.exchange) {
    case CpComm::kAllGather: return std::make_unique<AllGatherAttention>(backend, cp, B, c, Hq, Hk, D);
    case CpComm::kA2a: return std::make_unique<A2aAttention>(backend, cp, B, c, Hq, Hk, D);
    case CpComm::kP2p: break;
  }
  return std::make_unique<RingAttention>(backend, cp, B, c, Hq, Hk, D);
}

AllGatherAttention::AllGatherAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq,
                                       int64_t Hk, int64_t D)
    : CpAttention(backend, cp, B, c, Hq, Hk, D, "all-gather attention") {}

// Global chunk g (of 2·cp) is half 0 of rank g, or half 1 of rank 2·cp−1−g
// (CpGroup::chunk_of_half).
int64_t AllGatherAttention::k_offset(int64_t g) const {
  const int64_t n = cp_.size;
  const int64_t rank = g < n ? g : 2 * n - 1 - g, half = g < n ? 0 : 1;
  return rank * 4 * kv_half() + half * kv_half();
}

Result<DeviceBuffer> AllGatherAttention::gather_kv(const float* k, const float* v) const {
  const int64_t kvh = kv_half();
  DeviceBuffer mine = pack_kv(k, v);
  DeviceBuffer all = uninit(be_, int64_t(cp_.size) * 4 * kvh);
  LOOM_RETURN_IF_ERROR(cp_.comm->all_gather(mine.f32(), all.f32(), size_t(4 * kvh)));
  return all;
}

Status AllGatherAttention::forward(const float* q, const float* k, const float* v, float* out, float* lse) {
  Kernels& kk = be_->kernels();
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer kv, gather_kv(k, v));
  DeviceBuffer tmp_o = uninit(be_, q_half()), tmp_l = uninit(be_, lse_half());
  for (int h = 0; h < 2; ++h) {
    const int64_t ch = cp_.chunk_of_half(h);
    const float* Q = q + h * q_half();
    float* O = out + h * q_half();
    float* L = lse + h * lse_half();
    for (int64_t g = 0; g <= ch; ++g) {
      const float* K = kv.f32() + k_offset(g);
      const float* V = kv.f32() + v_offset(g);
      const bool causal = g == ch;
      if (g == 0) {
        kk.attention_forward({Q, K, V, O, L, B_, c_, Hq_, Hk_, D_, causal});
      } else {
        kk.attention_forward({Q, K, V, tmp_o.f32(), tmp_l.f32(), B_, c_, Hq_, Hk_, D_, causal});
        kk.attention_merge({O, L, tmp_o.f32(), tmp_l.f32(), B_, c_, Hq_, D_});
      }
    }
  }
  return Status::ok();
}

Status AllGatherAttention::backward(const float* dout, const float* q, const float* k, const float* v,
                                    const float* out, const float* lse, float* dq, float* dk, float* dv) {
  Kernels& kk = be_->kernels();
  const int64_t kvh = kv_half(), qh_n = q_half();
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer kv, gather_kv(k, v));
  DeviceBuffer dkv(be_, size_t(cp_.size) * size_t(4 * kvh) * sizeof(float));  // zeroed: the whole sequence's dK/dV
  DeviceBuffer tq = uninit(be_, qh_n), tk = uninit(be_, kvh), tv = uninit(be_, kvh);
  for (int h = 0; h < 2; ++h) {
    const int64_t ch = cp_.chunk_of_half(h), qo = h * qh_n, lo = h * lse_half();
    for (int64_t g = 0; g <= ch; ++g) {
      float* dQ = g == 0 ? dq + qo : tq.f32();
      kk.attention_backward({dout + qo, q + qo, kv.f32() + k_offset(g), kv.f32() + v_offset(g), out + qo, lse + lo,
                             dQ, tk.f32(), tv.f32(), B_, c_, Hq_, Hk_, D_, g == ch});
      if (g > 0) kk.add_inplace({dq + qo, tq.f32(), qh_n});
      kk.add_inplace({dkv.f32() + k_offset(g), tk.f32(), kvh});
      kk.add_inplace({dkv.f32() + v_offset(g), tv.f32(), kvh});
    }
  }
  // Each rank's packed [dK, dV] summed over the group comes home.
  DeviceBuffer mine = uninit(be_, 4 * kvh);
  LOOM_RETURN_IF_ERROR(cp_.comm->reduce_scatter(dkv.f32(), mine.f32(), size_t(4 * kvh)));
  be_->copy(dk, mine.f32(), size_t(2 * kvh) * sizeof(float));
  be_->copy(dv, mine.f32() + 2 * kvh, size_t(2 * kvh) * sizeof(float));
  return Status::ok();
}

}  // namespace loom::exec
