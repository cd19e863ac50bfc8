#include "sim/cp_exchange.h"

#include <algorithm>

#include "sim/comm_model.h"
#include "sim/cp_ring.h"

namespace loom {

CpExchangeCost cp_exchange_cost(const HwProfile& hw, const SimOptions& opt, CpComm comm, const GroupShape& cp_group,
                                const CpTensors& x, double core_fwd_s, double core_bwd_s) {
  CpExchangeCost r;
  const int n = cp_group.ranks;
  const double cp = n, T = x.tokens, e = x.elem_bytes;
  if (comm == CpComm::kA2a) {
    // The heads exchanged (DeepSpeed-Ulysses; Transformer Engine's
    // AttnFuncWithCPAndQKVOA2A, Megatron --cp-comm-type a2a): forward
    // all-to-alls Q, K and V (each rank keeps heads/cp heads of the whole
    // sequence) and the output back; backward the output gradient, then dQ,
    // dK and dV back. Each rank sends (cp-1)/cp of the tensor. TE overlaps
    // one tensor's all-to-all only with the reordering of the one before:
    // all exposed here. Around each all-to-all the tensor is copied twice
    // (the head split before it, the chunks back in sequence order after),
    // memory traffic on the compute stream.
    // Loom's executor (exec/model/cp_a2a.cc) keeps nothing in the head
    // split: its backward sends Q, K, V, the output and the output gradient
    // over again, and the log-sum-exp (fp32, one per token and head) goes
    // with the output both ways.
    const bool executor = opt.for_loom_executor();
    const double q = T * x.q_heads * x.qk_dim * e, k = T * x.kv_heads * x.qk_dim * e;
    const double v = T * x.kv_heads * x.v_dim * e, o = T * x.q_heads * x.v_dim * e;
    const double lse = executor ? T * x.q_heads * 4 : 0;
    const CollectiveCost cq = collective_cost(hw, Collective::kAllToAll, cp_group, q);
    const CollectiveCost ck = collective_cost(hw, Collective::kAllToAll, cp_group, k);
    const CollectiveCost cv = collective_cost(hw, Collective::kAllToAll, cp_group, v);
    const CollectiveCost co = collective_cost(hw, Collective::kAllToAll, cp_group, o);
    const CollectiveCost cl = executor ? collective_cost(hw, Collective::kAllToAll, cp_group, lse) : CollectiveCost{};
    const double pass = cq.time_s + ck.time_s + cv.time_s + co.time_s;  // Q, K, V out and O back (TE's backward: dO, dQ, dK, dV)
    const double bwd_factor = executor ? 2 : 1;
    r.fwd_exposed_s = pass + cl.time_s;
    r.bwd_exposed_s = bwd_factor * pass + cl.time_s;
    for (const CollectiveCost* c : {&cq, &ck, &cv, &co}) {
      r.bytes.add(*c, 1 + bwd_factor);
      r.fwd_bytes.add(*c, 1);
    }
    const int lse_calls = executor ? 1 : 0;
    r.bytes.add(cl, 2 * lse_calls);
    r.fwd_bytes.add(cl, lse_calls);
    r.calls = executor ? 5 + 9 : 8;
    r.total_s = r.fwd_exposed_s + r.bwd_exposed_s;
    r.fwd_calls = 4 + lse_calls;
    r.fwd_total_s = r.fwd_exposed_s;
    r.fwd_copy_bytes = 4 * (q + k + v + o + lse);
    r.fwd_copy_kernels = 8 + 2 * lse_calls;
    r.bwd_copy_bytes = 4 * (bwd_factor * (q + k + v + o) + lse);
    r.bwd_copy_kernels = int(8 * bwd_factor) + 2 * lse_calls;
  } else if (comm == CpComm::kAllGather) {
    // The K/V all-gathered (Transformer Engine's
    // AttnFuncWithCPAndKVAllGather: "KV all-gather between CP ranks is
    // exposed"). Forward: K and V gathered, one all-gather each. Backward:
    // gathered again (not kept) and the whole sequence's dK and dV
    // reduce-scattered home, one each. Nothing overlaps them.
    const double k_total = cp * T * x.kv_heads * x.qk_dim * e, v_total = cp * T * x.kv_heads * x.v_dim * e;
    const CollectiveCost ag_k = collective_cost(hw, Collective::kAllGather, cp_group, k_total);
    const CollectiveCost ag_v = collective_cost(hw, Collective::kAllGather, cp_group, v_total);
    const CollectiveCost rs_k = collective_cost(hw, Collective::kReduceScatter, cp_group, k_total);
    const CollectiveCost rs_v = collective_cost(hw, Collective::kReduceScatter, cp_group, v_total);
    const double gather = ag_k.time_s + ag_v.time_s;
    r.fwd_exposed_s = gather;
    r.bwd_exposed_s = gather + rs_k.time_s + rs_v.time_s;
    r.bytes.add(ag_k, 2);
    r.bytes.add(ag_v, 2);
    r.bytes.add(rs_k, 1);
    r.bytes.add(rs_v, 1);
    r.calls = 6;
    r.total_s = r.fwd_exposed_s + r.bwd_exposed_s;
    r.fwd_bytes.add(ag_k, 1);
    r.fwd_bytes.add(ag_v, 1);
    r.fwd_calls = 2;
    r.fwd_total_s = gather;
  } else {
    // The ring: each step sends this rank's K and V (b s/cp tokens, the
    // local KV heads) to the next CP rank while the attention blocks of the
    // K/V it holds run (exec/model/context_parallel.h). Forward: cp-1
    // exchanges. Backward: the K/V again (cp-1) and the dK/dV one step
    // behind them (cp, the last one going home after the last block). The
    // ring's ops, each waiting on what the executor waits on, are timed by
    // the event engine (sim/cp_ring.h); what the blocks (1/cp of the core
    // per step) do not cover is exposed, and the hidden part slows them
    // (contention), as TP's does.
    const double kv_bytes = T * x.kv_heads * (x.qk_dim + x.v_dim) * e;
    const bool net = cp_group.nodes > 1;  // the ring's slowest hop crosses nodes
    const GroupShape pair{2, net ? 2 : 1, net ? 1 : 2};
    const CollectiveCost step = collective_cost(hw, Collective::kSendRecv, pair, kv_bytes);
    const double s = step.time_s;
    const CpRingTime ring = cp_ring_time(n, s, s, core_fwd_s / cp, core_bwd_s / cp);
    r.fwd_exposed_s = ring.fwd_exposed_s;
    r.bwd_exposed_s = ring.bwd_exposed_s;
    const double fwd_total = (n - 1) * s, bwd_total = (2 * n - 1) * s;
    r.bytes.add(step, 3 * n - 2);
    r.calls = 3 * n - 2;
    r.total_s = fwd_total + bwd_total;
    r.fwd_bytes.add(step, n - 1);
    r.fwd_calls = n - 1;
    r.fwd_total_s = fwd_total;
    r.fwd_hidden_s = std::max(0.0, fwd_total - r.fwd_exposed_s);
    r.bwd_hidden_s = std::max(0.0, bwd_total - r.bwd_exposed_s);
  }
  return r;
}

// The ring: the K/V held and the one arriving, and in backward also the
// dK/dV step, the one sent on and the one arriving
// (exec/model/context_parallel.cc; fp32 in Loom's executor). With the K/V
// all-gathered: the whole sequence's K/V (cp times a rank's) and, in
// backward, its dK/dV beside them (Transformer Engine's k_ag, v_ag, dk, dv);
// Loom's executor also keeps its own packed K/V and the dK/dV coming home
// (exec/model/cp_all_gather.cc). With the heads exchanged (a2a): Q, K and V
// copied for the all-to-all and received (TE's flash_attn_a2a_communicate),
// what is kept for backward being the received, the same size as the
// activations it replaces; Loom's executor's backward holds Q, K, V, O and
// dO in the head split, dQ, dK and dV, and one exchange's send and receive
// buffers (exec/model/cp_a2a.cc).
double cp_exchange_buffer_bytes(const ModelSpec& m, const Layout& l, double T, double e, bool loom_executor) {
  const double kv_heads = double(m.mla.enabled ? m.num_heads : m.num_kv_heads);
  const double kv = T * kv_heads / l.tp * 2 * double(m.head_dim), q = T * double(m.num_heads) / l.tp * m.head_dim;
  if (l.cp_comm == CpComm::kAllGather) return (loom_executor ? 4.0 * (2 * l.cp + 2) : 2 * e * l.cp) * kv;
  if (l.cp_comm == CpComm::kA2a) return loom_executor ? 4.0 * (2 * (q + kv) + 4 * q) : 2 * e * (kv + q);
  return (loom_executor ? 5 * 4.0 : 2 * e) * kv;
}

}  // namespace loom
