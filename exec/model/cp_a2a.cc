// Context parallelism with the heads exchanged (exec/model/context_parallel.h).
//
// Notation: n = cp ranks, a rank's N = 2·B·c tokens t = (h·B + b)·c + p (half
// h, sequence b, position p in the chunk), s = 2·n·c. Global chunk g of
// (rank r, half h) is r for h = 0 and 2n−1−r for h = 1. A tensor of H heads
// is viewed as rows of one head group (H/n heads × D): token t's group j is
// row t·n + j. Every move is a row gather (the kernels' moe_gather).
#include <vector>

#include "exec/model/context_parallel.h"

namespace loom::exec {

namespace {
DeviceBuffer uninit(ComputeBackend* be, int64_t floats) {
  return DeviceBuffer::uninitialized(be, size_t(floats) * sizeof(float));
}
DeviceBuffer upload(ComputeBackend* be, const std::vector<int32_t>& v) {
  DeviceBuffer b = DeviceBuffer::uninitialized(be, v.size() * sizeof(int32_t));
  be->copy_to_device(b.f32(), v.data(), v.size() * sizeof(int32_t));
  return b;
}
}  // namespace

A2aAttention::A2aAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk,
                           int64_t D)
    : CpAttention(backend, cp, B, c, Hq, Hk, D, "heads-exchange attention") {
  const int64_t n = cp.size, N = tokens(), s = 2 * n * c, hq = Hq / n;
  LOOM_CHECK(Hq % n == 0 && Hk % n == 0, "the heads exchange needs cp to divide the query and key/value heads");
  auto rank_of = [n](int64_t g) { return g < n ? g : 2 * n - 1 - g; };
  auto half_of = [n](int64_t g) { return g < n ? int64_t(0) : int64_t(1); };
  auto chunk_of = [n](int64_t r, int64_t h) { return h == 0 ? r : 2 * n - 1 - r; };
  std::vector<int32_t> heads_pack(size_t(n * N)), heads_order(size_t(n * N)), seq_pack(size_t(n * N)),
      seq_unpack(size_t(n * N));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t t = 0; t < N; ++t) {
      heads_pack[size_t(j * N + t)] = int32_t(t * n + j);  // send group j of every token to rank j
      seq_unpack[size_t(t * n + j)] = int32_t(j * N + t);  // group j of token t came from rank j
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < 2 * n; ++g)
      for (int64_t p = 0; p < c; ++p) {
        const int64_t row = b * s + g * c + p, t = (half_of(g) * B + b) * c + p;
        heads_order[size_t(row)] = int32_t(rank_of(g) * N + t);  // sequence order from the ranks' tokens
        seq_pack[size_t(rank_of(g) * N + t)] = int32_t(row);     // and back to the rank holding it
      }
  // The log-sum-exp: a rank's (2, B, Hq, c) as rows of c, (h·B + b)·Hq +
  // head; L of them per peer (its hq heads); the whole sequence's (B, hq,
  // s) as rows (b·hq + k)·2n + g.
  const int64_t L = 2 * B * hq;
  std::vector<int32_t> lse_heads_pack(size_t(n * L)), lse_heads_order(size_t(n * L)), lse_seq_pack(size_t(n * L)),
      lse_seq_unpack(size_t(n * L));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t k = 0; k < hq; ++k) {
          const int64_t sent = j * L + (h * B + b) * hq + k, local = (h * B + b) * Hq + j * hq + k;
          lse_heads_pack[size_t(sent)] = int32_t(local);
          lse_seq_unpack[size_t(local)] = int32_t(sent);
          // Rank j's half h: global chunk g of its rows in the sequence order.
          const int64_t full = (b * hq + k) * 2 * n + chunk_of(j, h);
          lse_heads_order[size_t(full)] = int32_t(sent);
          lse_seq_pack[size_t(sent)] = int32_t(full);
        }
  heads_pack_ = upload(be_, heads_pack);
  heads_order_ = upload(be_, heads_order);
  seq_pack_ = upload(be_, seq_pack);
  seq_unpack_ = upload(be_, seq_unpack);
  lse_heads_pack_ = upload(be_, lse_heads_pack);
  lse_heads_order_ = upload(be_, lse_heads_order);
  lse_seq_pack_ = upload(be_, lse_seq_pack);
  lse_seq_unpack_ = upload(be_, lse_seq_unpack);
}

Result<DeviceBuffer> A2aAttention::to_heads(const float* x, int64_t H) {
  Kernels& kk = be_->kernels();
  const int64_t n = cp_.size, N = tokens(), w = H / n * D_;
  DeviceBuffer send = uninit(be_, n * N * w), recv = uninit(be_, n * N * w), full = uninit(be_, n * N * w);
  kk.moe_gather({x, heads_pack_.i32(), send.f32(), n * N, w});
  LOOM_RETURN_IF_ERROR(cp_.comm->all_to_all(send.f32(), recv.f32(), size_t(N * w)));
  kk.moe_gather({recv.f32(), heads_order_.i32(), full.f32(), n * N, w});
  return full;
}

Status A2aAttention::to_seq(const float* x, int64_t H, float* out) {
  Kernels& kk = be_->kernels();
  const int64_t n = cp_.size, N = tokens(), w = H / n * D_;
  DeviceBuffer send = uninit(be_, n * N * w), recv = uninit(be_, n * N * w);
  kk.moe_gather({x, seq_pack_.i32(), send.f32(), n * N, w});
  LOOM_RETURN_IF_ERROR(cp_.comm->all_to_all(send.f32(), recv.f32(), size_t(N * w)));
  kk.moe_gather({recv.f32(), seq_unpack_.i32(), out, n * N, w});
  return Status::ok();
}

Result<DeviceBuffer> A2aAttention::lse_to_heads(const float* lse) {
  Kernels& kk = be_->kernels();
  const int64_t n = cp_.size, L = 2 * B_ * (Hq_ / n);
  DeviceBuffer send = uninit(be_, n * L * c_), recv = uninit(be_, n * L * c_), full = uninit(be_, n * L * c_);
  kk.moe_gather({lse, lse_heads_pack_.i32(), send.f32(), n * L, c_});
  LOOM_RETURN_IF_ERROR(cp_.comm->all_to_all(send.f32(), recv.f32(), size_t(L * c_)));
  kk.moe_gather({recv.f32(), lse_heads_order_.i32(), full.f32(), n * L, c_});
  return full;
}

Status A2aAttention::lse_to_seq(const float* lse, float* out) {
  Kernels& kk = be_->kernels();
  const int64_t n = cp_.size, L = 2 * B_ * (Hq_ / n);
  DeviceBuffer send = uninit(be_, n * L * c_), recv = uninit(be_, n * L * c_);
  kk.moe_gather({lse, lse_seq_pack_.i32(), send.f32(), n * L, c_});
  LOOM_RETURN_IF_ERROR(cp_.comm->all_to_all(send.f32(), recv.f32(), size_t(L * c_)));
  kk.moe_gather({recv.f32(), lse_seq_unpack_.i32(), out, n * L, c_});
  return Status::ok();
}

Status A2aAttention::forward(const float* q, const float* k, const float* v, float* out, float* lse) {
  const int64_t n = cp_.size, s = 2 * n * c_, hq = Hq_ / n, hk = Hk_ / n;
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer Q, to_heads(q, Hq_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer K, to_heads(k, Hk_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer V, to_heads(v, Hk_));
  DeviceBuffer O = uninit(be_, B_ * s * hq * D_), L = uninit(be_, B_ * hq * s);
  be_->kernels().attention_forward({Q.f32(), K.f32(), V.f32(), O.f32(), L.f32(), B_, s, hq, hk, D_, true});
  LOOM_RETURN_IF_ERROR(to_seq(O.f32(), Hq_, out));
  return lse_to_seq(L.f32(), lse);
}

Status A2aAttention::backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                              const float* lse, float* dq, float* dk, float* dv) {
  const int64_t n = cp_.size, s = 2 * n * c_, hq = Hq_ / n, hk = Hk_ / n;
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer Q, to_heads(q, Hq_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer K, to_heads(k, Hk_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer V, to_heads(v, Hk_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer O, to_heads(out, Hq_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dO, to_heads(dout, Hq_));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer L, lse_to_heads(lse));
  DeviceBuffer dQ = uninit(be_, B_ * s * hq * D_), dK = uninit(be_, B_ * s * hk * D_), dV = uninit(be_, B_ * s * hk * D_);
  be_->kernels().attention_backward({dO.f32(), Q.f32(), K.f32(), V.f32(), O.f32(), L.f32(), dQ.f32(), dK.f32(), dV.f32(),
                                     B_, s, hq, hk, D_, true});
  LOOM_RETURN_IF_ERROR(to_seq(dQ.f32(), Hq_, dq));
  LOOM_RETURN_IF_ERROR(to_seq(dK.f32(), Hk_, dk));
  return to_seq(dV.f32(), Hk_, dv);
}

}  // namespace loom::exec
