#include "exec/model/context_parallel.h"

#include <string>
#include <utility>

namespace loom::exec {

namespace {
// The CP communicator is the ring's own: its two streams of messages (K/V,
// and in backward the dK/dV that follow them) get a tag each.
constexpr int kKvTag = 9101, kDkvTag = 9102;

DeviceBuffer uninit(ComputeBackend* be, int64_t floats) {
  return DeviceBuffer::uninitialized(be, size_t(floats) * sizeof(float));
}
}  // namespace

CpAttention::CpAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk,
                         int64_t D, const char* what)
    : be_(backend), cp_(cp), B_(B), c_(c), Hq_(Hq), Hk_(Hk), D_(D) {
  LOOM_CHECK(cp.size > 1 && cp.comm != nullptr && cp.comm->size() == cp.size, std::string(what) + " needs the CP group");
}

DeviceBuffer CpAttention::pack_kv(const float* k, const float* v) const {
  const int64_t kvh = kv_half();
  DeviceBuffer kv = uninit(be_, 4 * kvh);
  be_->copy(kv.f32(), k, size_t(2 * kvh) * sizeof(float));
  be_->copy(kv.f32() + 2 * kvh, v, size_t(2 * kvh) * sizeof(float));
  return kv;
}

RingAttention::RingAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk,
                             int64_t D)
    : CpAttention(backend, cp, B, c, Hq, Hk, D, "ring attention") {}

int RingAttention::blocks_of_step(int s, Block out[3]) const {
  const int n = cp_.size, r = cp_.rank, src = (r - s + n) % n;
  if (s == 0) {
    out[0] = {0, 0, true};
    out[1] = {1, 1, true};
    out[2] = {1, 0, false};
    return 3;
  }
  if (src < r) {
    out[0] = {0, 0, false};
    out[1] = {1, 0, false};
    return 2;
  }
  out[0] = {1, 0, false};
  out[1] = {1, 1, false};
  return 2;
}

// Step s's exchange, in flight while its blocks compute: `cur` on to the
// next rank, the previous rank's into `nxt` (none after the last step).
Result<std::unique_ptr<CommRequest>> RingAttention::pass_kv(int s, const DeviceBuffer& cur, DeviceBuffer& nxt) {
  const int n = cp_.size, r = cp_.rank;
  if (s + 1 >= n) return std::unique_ptr<CommRequest>();
  const size_t kvn = size_t(4 * kv_half());
  return cp_.comm->isend_recv(cur.f32(), kvn, (r + 1) % n, nxt.f32(), kvn, (r + n - 1) % n, kKvTag);
}

Status RingAttention::forward(const float* q, const float* k, const float* v, float* out, float* lse) {
  Kernels& kk = be_->kernels();
  const int n = cp_.size;
  const int64_t kvh = kv_half();
  DeviceBuffer cur = pack_kv(k, v), nxt = uninit(be_, 4 * kvh);
  DeviceBuffer tmp_o = uninit(be_, q_half()), tmp_l = uninit(be_, lse_half());
  bool written[2] = {false, false};
  for (int s = 0; s < n; ++s) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> req, pass_kv(s, cur, nxt));
    Block blocks[3];
    const int nb = blocks_of_step(s, blocks);
    for (int i = 0; i < nb; ++i) {
      const Block& b = blocks[i];
      const float* K = cur.f32() + b.kh * kvh;
      const float* V = cur.f32() + 2 * kvh + b.kh * kvh;
      const float* Q = q + b.qh * q_half();
      float* O = out + b.qh * q_half();
      float* L = lse + b.qh * lse_half();
      if (!written[b.qh]) {
        kk.attention_forward({Q, K, V, O, L, B_, c_, Hq_, Hk_, D_, b.causal});
        written[b.qh] = true;
      } else {
        kk.attention_forward({Q, K, V, tmp_o.f32(), tmp_l.f32(), B_, c_, Hq_, Hk_, D_, b.causal});
        kk.attention_merge({O, L, tmp_o.f32(), tmp_l.f32(), B_, c_, Hq_, D_});
      }
    }
    if (req) {
      LOOM_RETURN_IF_ERROR(req->wait());
      std::swap(cur, nxt);
    }
  }
  return Status::ok();
}

Status RingAttention::backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                               const float* lse, float* dq, float* dk, float* dv) {
  Kernels& kk = be_->kernels();
  const int n = cp_.size, r = cp_.rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t kvh = kv_half(), kvn = 4 * kvh, qh_n = q_half();
  DeviceBuffer cur = pack_kv(k, v), nxt = uninit(be_, kvn);
  DeviceBuffer tq = uninit(be_, qh_n), tk = uninit(be_, kvh), tv = uninit(be_, kvh);
  // dK/dV of the K/V block held at this step (same packing as `cur`): the
  // one sent on (in flight) and the one arriving from the previous rank.
  DeviceBuffer sending, receiving;
  std::unique_ptr<CommRequest> dkv_req;
  bool written[2] = {false, false};
  for (int s = 0; s < n; ++s) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> kv_req, pass_kv(s, cur, nxt));
    DeviceBuffer step(be_, size_t(kvn) * sizeof(float));  // zeroed: this step's dK/dV
    Block blocks[3];
    const int nb = blocks_of_step(s, blocks);
    for (int i = 0; i < nb; ++i) {
      const Block& b = blocks[i];
      const float* K = cur.f32() + b.kh * kvh;
      const float* V = cur.f32() + 2 * kvh + b.kh * kvh;
      const int64_t qo = b.qh * qh_n, lo = b.qh * lse_half();
      float* dQ = written[b.qh] ? tq.f32() : dq + qo;
      kk.attention_backward({dout + qo, q + qo, K, V, out + qo, lse + lo, dQ, tk.f32(), tv.f32(), B_, c_, Hq_, Hk_,
                             D_, b.causal});
      if (written[b.qh]) kk.add_inplace({dq + qo, tq.f32(), qh_n});
      written[b.qh] = true;
      kk.add_inplace({step.f32() + b.kh * kvh, tk.f32(), kvh});
      kk.add_inplace({step.f32() + 2 * kvh + b.kh * kvh, tv.f32(), kvh});
    }
    // What the previous ranks gathered for this K/V block arrives one step
    // behind it; add this step's share and pass it on (after the last step
    // it goes home: the next rank owns the block this rank holds).
    if (dkv_req) {
      LOOM_RETURN_IF_ERROR(dkv_req->wait());
      kk.add_inplace({receiving.f32(), step.f32(), kvn});
      sending = std::move(receiving);
    } else {
      sending = std::move(step);
    }
    receiving = uninit(be_, kvn);
    LOOM_ASSIGN_OR_RETURN(dkv_req, cp_.comm->isend_recv(sending.f32(), size_t(kvn), next, receiving.f32(),
                                                        size_t(kvn), prev, kDkvTag));
    if (kv_req) {
      LOOM_RETURN_IF_ERROR(kv_req->wait());
      std::swap(cur, nxt);
    }
  }
  LOOM_RETURN_IF_ERROR(dkv_req->wait());
  be_->copy(dk, receiving.f32(), size_t(2 * kvh) * sizeof(float));
  be_->copy(dv, receiving.f32() + 2 * kvh, size_t(2 * kvh) * sizeof(float));
  return Status::ok();
}

}  // namespace loom::exec
