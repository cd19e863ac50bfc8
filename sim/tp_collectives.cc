#include "sim/tp_collectives.h"

#include <algorithm>

namespace loom {

double collective_time(const HwProfile& hw, Collective c, const GroupShape& g, double bytes, LinkBytes* traffic,
                       double count) {
  if (g.ranks <= 1 || bytes <= 0 || count <= 0) return 0;
  CollectiveCost cost = collective_cost(hw, c, g, bytes);
  if (traffic) traffic->add(cost, count);
  return cost.time_s * count;
}

TpLayerComm tp_layer_comm(const HwProfile& hw, const SimOptions& opt, const ComputeShape& sh, double ag_bytes,
                          double tp_bytes, const double (&windows)[2], const double (&rows)[2], LinkBytes* traffic) {
  TpLayerComm r;
  const double t = sh.tp;
  const TpOverlapConfig& ubc = opt.tp_overlap;
  bool ub_sm = false;  // userbuffers set the SM shares below
  // Userbuffers (Megatron --tp-comm-overlap, SP only) also runs the
  // backward's bulk overlaps that tp_async_backward describes.
  const bool ub = opt.tp_comm_overlap && sh.sp;
  const bool async = opt.tp_async_backward || ub;
  if (sh.sp) {
    // Forward: all-gather before QKV and FC1, reduce-scatter after proj and FC2.
    const double ag = collective_time(hw, Collective::kAllGather, sh.tp_group, ag_bytes, nullptr, 1);
    const double rs = collective_time(hw, Collective::kReduceScatter, sh.tp_group, tp_bytes, nullptr, 1);
    r.fwd_total = 2 * ag + 2 * rs;
    collective_time(hw, Collective::kAllGather, sh.tp_group, ag_bytes, traffic, 2);
    collective_time(hw, Collective::kReduceScatter, sh.tp_group, tp_bytes, traffic, 2);
    // Backward: per block the output gradient's all-gather and the input
    // gradient's reduce-scatter, and async also the input re-gathered.
    const int gathers = async ? 4 : 2;
    r.bwd_total = gathers * ag + 2 * rs;
    collective_time(hw, Collective::kAllGather, sh.tp_group, ag_bytes, traffic, gathers);
    collective_time(hw, Collective::kReduceScatter, sh.tp_group, tp_bytes, traffic, 2);
    r.fwd_exposed = r.fwd_total;
    if (ub) {
      // Transformer Engine's userbuffers (sim/tp_overlap.h). A ring
      // exchange splits the collective into t chunks pipelined with t
      // slices of its GEMM: an all-gather feeds the GEMM from the local
      // shard first, so only what the other t-1 slices cannot cover shows.
      // A reduce-scatter (pipeline in s = num_splits chunks, or ring
      // exchange, s = t) can start only after the first chunk, and its
      // last chunk follows the GEMM.
      const double tf = (t - 1) / t;
      auto ag_exposed = [&](double g) { return std::max(0.0, ag - g * tf); };
      auto rs_exposed = [&](double g, const UbGemm& u) {
        const double sp = u.method == UbMethod::kPipeline ? std::max(1, u.num_splits) : t;
        return std::max(rs / sp, rs - g * (sp - 1) / sp);
      };
      // The SMs a hidden collective takes from the GEMM beside it: none
      // for a ring exchange (copy engines) or where the GEMM already left
      // them (set_sm_margin, priced in its time); else num_sm of the SMs.
      const double sms = hw.accel.sm_count;
      auto sm_share = [&](const UbGemm& u) {
        return u.method == UbMethod::kRingExchange || u.set_sm_margin || sms <= 0 ? 0.0
                                                                                : std::min(1.0, u.num_sm / sms);
      };
      const UbGemm* rs_cfg[2] = {&ubc.proj_fprop, &ubc.fc2_fprop};
      const UbGemm* regather_cfg[2] = {&ubc.qkv_dgrad, &ubc.fc1_dgrad};
      const UbGemm* dgrad_rs_cfg[2] = {&ubc.qkv_wgrad, &ubc.fc1_wgrad};
      r.fwd_exposed = 0;
      ub_sm = true;
      for (int blk = 0; blk < 2; ++blk) {
        const double rs_exp = rs_exposed(rows[blk], *rs_cfg[blk]);
        r.fwd_exposed += ag_exposed(windows[blk]) + rs_exp;
        r.fwd_sm_s += (rs - rs_exp) * sm_share(*rs_cfg[blk]);
      }
      // Backward: the output gradient's gather ring-exchanged with the
      // row-parallel layer's data-gradient GEMM (its forward time), the
      // input re-gather and the input-gradient reduce-scatter in bulk
      // behind the column-parallel layer's GEMMs.
      for (int blk = 0; blk < 2; ++blk) {
        const double regather = std::max(0.0, ag - windows[blk]), dgrad_rs = std::max(0.0, rs - windows[blk]);
        r.bwd_exposed += ag_exposed(rows[blk]) + regather + dgrad_rs;
        r.bwd_sm_s += (ag - regather) * sm_share(*regather_cfg[blk]) + (rs - dgrad_rs) * sm_share(*dgrad_rs_cfg[blk]);
      }
    } else if (async) {
      for (double w : windows) r.bwd_exposed += ag + std::max(0.0, ag - w) + std::max(0.0, rs - w);
    } else {
      r.bwd_exposed = r.bwd_total;
    }
    r.calls = 4 + gathers + 2;
  } else {
    // Forward: an all-reduce after proj and after FC2; backward: one after
    // the input gradient of QKV and of FC1 (async: behind their weight gradients).
    const double ar = collective_time(hw, Collective::kAllReduce, sh.tp_group, tp_bytes, nullptr, 1);
    r.fwd_total = 2 * ar;
    r.fwd_exposed = r.fwd_total;
    r.bwd_total = 2 * ar;
    collective_time(hw, Collective::kAllReduce, sh.tp_group, tp_bytes, traffic, 4);
    if (async) {
      for (double w : windows) r.bwd_exposed += std::max(0.0, ar - w);
    } else {
      r.bwd_exposed = r.bwd_total;
    }
    r.calls = 4;
  }
  if (!ub_sm) {
    // NCCL keeps a thread block per channel resident for the collective:
    // the hidden time takes that share of the SMs from the GEMMs beside it.
    const double contention = comm_contention_fraction(hw);
    r.fwd_sm_s = (r.fwd_total - r.fwd_exposed) * contention;
    r.bwd_sm_s = (r.bwd_total - r.bwd_exposed) * contention;
  }
  return r;
}

}  // namespace loom
