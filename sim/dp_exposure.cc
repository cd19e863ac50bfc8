#include "sim/dp_exposure.h"

#include <algorithm>

namespace loom {

StageDpExposure stage_dp_exposure(const Layout& l, const SimOptions& opt, const StageCosts& sc,
                                  const DpCollectives& d, int64_t m, int stage, double first_chunk_share) {
  const int p = l.pp, v = l.virtual_stages;
  const double t_stage = sc.fwd_s + sc.bwd_s + sc.recompute_s;
  const double b_last = sc.bwd_s + sc.recompute_s;
  const double drain = double(stage) * (b_last / v);
  // The stage's syncs start as its chunks finish their last backward: within
  // the last backward, bucket by bucket; with interleaving, the other chunks
  // still run their last micro-batches' backwards after the first chunk is
  // done (Megatron's cooldown takes min(p, m) of them per chunk).
  const double b_chunk = b_last / v;
  // (FSDP's post-backward under a pipeline syncs after the whole last
  // backward: none of it hides inside that backward.)
  const double in_last = priced_after_backward(l, opt) ? 0.0 : 1.0 - 1.0 / std::max(1, opt.grad_buckets);
  double window = l.overlap_grad_reduce
                      ? b_chunk * in_last + double(v - 1) * double(std::min<int64_t>(p, m)) * b_chunk
                      : 0.0;
  double exposed = 0;
  if (l.zero <= 1) {
    exposed = std::max(0.0, d.grad_sync_s - window - drain);
  } else if (!l.overlap_grad_reduce) {
    // Each micro-batch's reduce-scatter blocks the stage's next compute op
    // (the program's block_on): all m are exposed. ZeRO-3 with prefetch: the
    // gather issued after a backward queues ahead of that reduce-scatter on
    // the DP stream, so it is exposed with it; without prefetch every gather
    // waits in front of its compute op.
    const double rs = d.grad_sync_s, pg = d.param_gather_s;
    exposed = double(m) * rs;
    if (l.zero == 3)
      exposed += l.overlap_param_gather ? double(m) * pg + pg / std::max(1, sc.layers) : 2.0 * double(m) * pg;
  } else {
    // ZeRO-2/3 reduce-scatter after every micro-batch's backward, hidden
    // behind the next micro-batch; the last one behind the drain only.
    const double rs = d.grad_sync_s, tail = std::max(0.0, rs - window - drain);
    if (l.zero == 2) {
      exposed = double(m - 1) * std::max(0.0, rs - t_stage) + tail;
    } else if (l.overlap_param_gather && !opt.for_loom_executor()) {
      // ZeRO-3 as FSDP and DeepSpeed run it (simulate.h with_layered_dp):
      // each chunk use gathers one layer ahead, and its other layers must
      // cover the rest of its gather (before a backward, with all but the
      // last layer's reduce-scatter); what they cannot cover stalls it.
      // Only the step's first layer gather and the last layer's
      // reduce-scatter wait outside.
      const double layers = std::max(1, sc.layers), lc = std::max(1.0, layers / v);
      const double pc = d.param_gather_s / v, rc = rs / v, g = d.param_gather_s / layers;
      const double stall = piece_stall(pc, lc, sc.fwd_s / v) + piece_stall(pc, lc, b_chunk, rc * (lc - 1) / lc);
      exposed = double(m) * v * stall + g + std::max(0.0, rc / lc - drain);
    } else if (l.overlap_param_gather) {
      // ZeRO-3 with prefetch: gathers for forward and backward run ahead of
      // compute; only the step's first layer gather waits.
      exposed = double(m - 1) * std::max(0.0, rs + 2 * d.param_gather_s - t_stage) + tail +
                d.param_gather_s / std::max(1, sc.layers);
    } else {
      exposed = 2.0 * double(m) * d.param_gather_s + double(m - 1) * std::max(0.0, rs - t_stage) + tail;
    }
  }
  if (l.zero == 1 || l.zero == 2) {
    // Updated-parameter all-gather, or fully exposed after the optimizer.
    // Overlapped: the first chunk's first forward waits for its gather.
    // Loom's executor gathers a chunk in one call; a published stack
    // bucket by bucket, each forward pre-hook waiting for its own bucket,
    // so the forward waits for the first bucket and for what the rest
    // cannot hide behind its other buckets (simulate.h with_layered_dp).
    // Later chunks' gathers finish during the first chunk's forwards.
    if (l.overlap_param_gather) {
      const double pc = d.param_gather_s * first_chunk_share;
      const double kb = std::max(1, opt.grad_buckets);
      exposed += opt.for_loom_executor() ? pc : pc / kb + piece_stall(pc, kb, sc.chunk0_fwd_s);
    } else {
      exposed += d.param_gather_s;
    }
  }
  // The DP stream's time this stage's compute hides, and the SMs it holds.
  double total = d.grad_sync_s * (l.zero >= 2 ? double(m) : 1.0);
  if (l.zero == 1 || l.zero == 2) total += d.param_gather_s;
  if (l.zero == 3) total += 2.0 * double(m) * d.param_gather_s;
  // Collectives that progress only in the host's waits hide behind nothing.
  if (opt.dp_comm_host_progress) exposed = total;
  return {exposed, total};
}

}  // namespace loom
