// Context parallelism: the sequence split over the CP group in Megatron's
// load-balanced order, and attention over it: ring attention (cp_comm=p2p),
// the K/V all-gathered (cp_comm=all_gather) or the heads exchanged
// (cp_comm=a2a).
//
// The sequence of T tokens is cut into 2·cp chunks of c = T / (2·cp); CP rank
// r holds chunks r and 2·cp−1−r, so under the causal mask every rank does
// the same attention work (Megatron-Core's get_batch_on_this_cp_rank).
// A rank's rows are kept "half-major": all B sequences' first chunk, then all
// B sequences' second chunk, (2, B, c) — so each half is an ordinary
// (B, c, H, D) tensor the attention and RoPE kernels take as is. Every other
// op of the layer is per token and does not care about the order.
//
// Ring attention (Megatron's AttnFuncWithCPAndKVP2P): the K/V of the local two
// chunks travel around the CP ring; at step s a rank holds the K/V of rank
// src = r − s and attends its queries to them, with the mask that the chunks'
// global positions give:
//   s = 0       q_lo·k_lo causal, q_hi·k_hi causal, q_hi·k_lo full
//   src < r     q_lo·k_lo full, q_hi·k_lo full   (k_hi lies in every query's future)
//   src > r     q_hi·k_lo full, q_hi·k_hi full   (q_lo precedes all of src's keys)
// Partial outputs merge with the log-sum-exp rule (AttentionMerge). The next
// step's K/V exchange is in flight while a step computes. Backward walks the
// ring again: each block's gradient comes from the final output and lse
// (exact per block), dQ stays local and the dK/dV of a K/V block travel with
// it, one step behind, and come home after the last step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/layout.h"
#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"

namespace loom::exec {

struct CpGroup {
  int size = 1, rank = 0;
  Communicator* comm = nullptr;  // the CP group; null when size == 1
  CpComm exchange = CpComm::kP2p;  // the layout's cp_comm: RingAttention, AllGatherAttention or A2aAttention
  bool enabled() const { return size > 1; }
  // The chunk index (of 2·size) of half h (0 or 1) of this rank's rows.
  int64_t chunk_of_half(int h) const { return h == 0 ? rank : 2 * size - 1 - rank; }
};

// Rows [row0, row0 + rows) of a rank's local (2, B, c) token order, cut where
// the half changes: fn(first row relative to row0, count, global position of
// the first row's chunk start, row index within the half).
template <typename F>
void for_each_cp_segment(const CpGroup& cp, int64_t B, int64_t c, int64_t row0, int64_t rows, F&& fn) {
  const int64_t half_rows = B * c;
  int64_t r = row0;
  while (r < row0 + rows) {
    const int h = int(r / half_rows);
    const int64_t end = std::min(row0 + rows, (h + 1) * half_rows);
    fn(r - row0, end - r, cp.chunk_of_half(h) * c, r - h * half_rows);
    r = end;
  }
}

// Causal attention over a CP group for one micro-batch: q (2, B, c, Hq, D),
// k, v (2, B, c, Hk, D), out like q, lse (2, B, Hq, c); local head counts.
class CpAttention {
 public:
  virtual ~CpAttention() = default;
  virtual Status forward(const float* q, const float* k, const float* v, float* out, float* lse) = 0;
  // dq, dk, dv overwritten.
  virtual Status backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                          const float* lse, float* dq, float* dk, float* dv) = 0;

 protected:
  // LOOM_CHECKs that `cp` is a group of its size (`what` names the scheme).
  CpAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk, int64_t D,
              const char* what);
  // This rank's K then V, both halves each: [K h0, K h1, V h0, V h1].
  DeviceBuffer pack_kv(const float* k, const float* v) const;
  int64_t q_half() const { return B_ * c_ * Hq_ * D_; }
  int64_t kv_half() const { return B_ * c_ * Hk_ * D_; }
  int64_t lse_half() const { return B_ * Hq_ * c_; }

  ComputeBackend* be_;
  CpGroup cp_;
  int64_t B_, c_, Hq_, Hk_, D_;
};

// The one the group's cp_comm names.
std::unique_ptr<CpAttention> make_cp_attention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c,
                                               int64_t Hq, int64_t Hk, int64_t D);

class RingAttention : public CpAttention {
 public:
  RingAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk, int64_t D);
  Status forward(const float* q, const float* k, const float* v, float* out, float* lse) override;
  Status backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                  const float* lse, float* dq, float* dk, float* dv) override;

 private:
  // One (query half, key half) block of step `s`: whether it exists and
  // whether it is causal.
  struct Block {
    int qh, kh;
    bool causal;
  };
  int blocks_of_step(int s, Block out[3]) const;
  Result<std::unique_ptr<CommRequest>> pass_kv(int s, const DeviceBuffer& cur, DeviceBuffer& nxt);
};

// Llama 3's context parallelism (arXiv 2407.21783 §3.3.2; Transformer
// Engine's AttnFuncWithCPAndKVAllGather, Megatron --cp-comm-type all_gather):
// forward all-gathers every rank's K/V (both halves, so the whole sequence)
// and runs each local query half against the keys up to its own chunk: the
// chunks before it in full, its own causal — (chunk + 1) blocks, 2·cp + 1 per
// rank in all, the ring's work. Backward gathers the K/V again (it is not
// kept), runs the same blocks' backward from the final output and lse,
// sums dK/dV over the whole sequence and reduce-scatters them home. Neither
// collective overlaps the blocks, as in Transformer Engine.
class AllGatherAttention : public CpAttention {
 public:
  AllGatherAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk,
                     int64_t D);
  Status forward(const float* q, const float* k, const float* v, float* out, float* lse) override;
  Status backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                  const float* lse, float* dq, float* dk, float* dv) override;

 private:
  // Every rank's packed [K half 0, K half 1, V half 0, V half 1], rank-major.
  Result<DeviceBuffer> gather_kv(const float* k, const float* v) const;
  // Offsets in the gathered buffer of global chunk g's keys and values.
  int64_t k_offset(int64_t g) const;
  int64_t v_offset(int64_t g) const { return k_offset(g) + 2 * kv_half(); }
};

// DeepSpeed-Ulysses (Transformer Engine's AttnFuncWithCPAndQKVOA2A, Megatron
// --cp-comm-type a2a): all-to-alls trade the sequence split for a head
// split. Q, K and V go out head group by head group, each rank getting
// heads/cp heads of every rank's tokens, which it puts back in sequence
// order; the attention is then an ordinary causal one over the whole
// sequence; the output and its log-sum-exp go back the same way. Backward
// sends Q, K, V, the output, its log-sum-exp and the output gradient over
// again (they are not kept in the head split), runs the whole sequence's
// attention backward and sends dQ, dK and dV home. Needs cp to divide Hq
// and Hk (the layout check says so).
class A2aAttention : public CpAttention {
 public:
  A2aAttention(ComputeBackend* backend, const CpGroup& cp, int64_t B, int64_t c, int64_t Hq, int64_t Hk, int64_t D);
  Status forward(const float* q, const float* k, const float* v, float* out, float* lse) override;
  Status backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                  const float* lse, float* dq, float* dk, float* dv) override;

 private:
  // (2, B, c, H, D) on this rank -> (B, s, H/cp, D), s = 2·cp·c, and back.
  Result<DeviceBuffer> to_heads(const float* x, int64_t H);
  Status to_seq(const float* x, int64_t H, float* out);
  // The log-sum-exp: (2, B, Hq, c) -> (B, Hq/cp, s), and back.
  Result<DeviceBuffer> lse_to_heads(const float* lse);
  Status lse_to_seq(const float* lse, float* out);
  int64_t tokens() const { return 2 * B_ * c_; }  // this rank's

  // Row indices of the four gathers around each all-to-all (device int32).
  DeviceBuffer heads_pack_, heads_order_, seq_pack_, seq_unpack_;
  DeviceBuffer lse_heads_pack_, lse_heads_order_, lse_seq_pack_, lse_seq_unpack_;
};

}  // namespace loom::exec
