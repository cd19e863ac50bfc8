#include "sim/dp_exposure.h"

#include <algorithm>

namespace loom {

StageDpExposure stage_dp_exposure(const Layout& l, const SimOptions& opt, const StageCosts& sc,
                                  const DpCollectives& d, int64_t m, int stage, double first_chunk_share,
                                  double cycle_s) {
  const int p = l.pp, v = l.virtual_stages;
  // Under a pipeline every stage runs at the slowest stage's pace: a lighter
  // stage's collectives hide behind its waits as well as its compute.
  const double t_stage = std::max(sc.fwd_s + sc.bwd_s + sc.recompute_s, cycle_s);
  const double b_last = sc.bwd_s + sc.recompute_s;
  const double drain = double(stage) * (b_last / v);
  // The stage's syncs start as its chunks finish their last backward: within
  // the last backward, bucket by bucket; with interleaving, the other chunks
  // still run their last micro-batches' backwards after the first chunk is
  // done (Megatron's cooldown takes min(p, m) of them per chunk).
  const double b_chunk = b_last / v;
  // (FSDP's post-backward under a pipeline syncs after the whole last
  // backward: none of it hides inside that backward.) The buckets are the
  // first chunk's (StageCosts::chunk_buckets: Megatron-core buckets only
  // pipeline rank 0's first chunk, the rest sync as one bucket each).
  const int kb0 = sc.chunk_buckets.empty() ? std::max(1, opt.grad_buckets) : std::max(1, sc.chunk_buckets[0]);
  const double in_last = priced_after_backward(l, opt) ? 0.0 : 1.0 - 1.0 / kb0;
  const double window_other = l.overlap_grad_reduce ? double(v - 1) * double(std::min<int64_t>(p, m)) * b_chunk : 0.0;
  const double window = l.overlap_grad_reduce ? b_chunk * in_last + window_other : 0.0;
  const bool executor = opt.for_loom_executor();
  double exposed = 0;
  if (l.zero <= 1) {
    // The DP stream finishes at the latest of: its first bucket's start plus
    // all the stage's syncs (G - window); the stage's first chunk's (share
    // s0, whose last backward ends the stage's work) first bucket plus that
    // chunk's syncs, as its buckets arrive only within that backward
    // (G s0 - b_chunk in_last); and that chunk's last bucket, ready only when
    // the backward ends (G s0 / k; all of G s0 with one bucket or where the
    // syncs follow the whole backward). Less the drain. The engine times
    // the program's buckets so (core/program.cc).
    double exposed_sync = d.grad_sync_s - window;
    if (l.overlap_grad_reduce) {
      const double g0 = d.grad_sync_s * first_chunk_share;
      exposed_sync = std::max({exposed_sync, g0 - b_chunk * in_last, g0 * (1.0 - in_last)});
    }
    exposed = std::max(0.0, exposed_sync - drain);
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
    // behind the next micro-batch; the last one behind the drain only (and,
    // interleaved, the other chunks' last backwards). Loom's executor
    // reduce-scatters a micro-batch's gradients in one collective after its
    // backward (core/program.cc); the published stacks layer by layer, so
    // all but the last layer's share runs beside the backward itself, as the
    // engine times it (simulate.h with_layered_dp).
    const double rs = d.grad_sync_s;
    const double k = std::max(1.0, double(std::max(1, sc.layers)) / v);
    const double beside_own = executor ? 0.0 : std::min(rs, b_last) * (k - 1) / k;
    const double rs_left = rs - beside_own;
    const double tail = std::max(0.0, rs_left - window_other - drain);
    // What runs between two of the stage's backwards (or forwards): 1F1B and
    // interleaving alternate them, so a micro-batch's whole time; GPipe runs
    // all forwards and then all backwards, so one backward (one forward),
    // each with its share of the pipeline's slack.
    const double own = sc.fwd_s + sc.bwd_s + sc.recompute_s, slack = t_stage - own;
    const bool gpipe = l.schedule == Schedule::kGpipe;
    const double f_window = sc.fwd_s + (own > 0 ? slack * sc.fwd_s / own : 0.0);
    const double b_window = b_last + (own > 0 ? slack * b_last / own : 0.0);
    const double between = gpipe ? b_window : t_stage;
    if (l.zero == 2 && !gpipe && l.schedule != Schedule::kDualPipeV) {
      // (Earlier micro-batches' reduce-scatters share the DP stream with the
      // one before them: whole, behind the next micro-batch, as the engine.)
      // 1F1B and interleaving end with backwards only (as many chunk
      // executions as the stage's warm-up: Megatron's (p − s − 1), or
      // 2(p − s − 1) + (v − 1)p interleaved; all of them when that exceeds
      // m·v): there a reduce-scatter has one chunk's backward to hide behind.
      // (The last one is the tail's.)
      const double warm = v == 1 ? double(p - 1 - stage) : 2.0 * double(p - 1 - stage) + double(v - 1) * p;
      const double cool = std::min(double(m) * v - 1, warm);
      const double steady = std::max(0.0, double(m - 1) - cool / v);
      exposed = steady * std::max(0.0, rs - between) + cool / v * std::max(0.0, rs - b_window) + tail;
    } else if (l.zero == 2) {
      exposed = double(m - 1) * std::max(0.0, rs - between) + tail;
    } else if (l.overlap_param_gather && !executor) {
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
      // ZeRO-3 with prefetch on Loom's executor: gathers for forward and
      // backward run ahead of compute; the step's first forward waits for its
      // chunk's whole gather (one collective per chunk).
      const double pg = d.param_gather_s;
      const double steady = gpipe ? std::max(0.0, pg - f_window) + std::max(0.0, pg + rs - b_window)
                                  : std::max(0.0, rs + 2 * pg - t_stage);
      exposed = double(m - 1) * steady + tail + pg * first_chunk_share;
    } else {
      // ZeRO-3 without prefetch: each gather is issued when the op before
      // its consumer ends, so both wait whole. A backward's reduce-scatter
      // runs during the next forward, and that forward's following op's
      // gather queues behind it on the DP stream: what the forward (and the
      // pipeline's slack) cannot cover of it is exposed. No stack splits
      // these reduce-scatters by layer (the backward waits for a gather).
      const double tail_whole = std::max(0.0, rs - window_other - drain);
      const double cover = gpipe ? b_window : sc.fwd_s + slack;  // the op between
      exposed = 2.0 * double(m) * d.param_gather_s + double(m - 1) * std::max(0.0, rs - cover) + tail_whole;
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
    // A later stage's first forward waits for the forwards of the stages
    // before it (about `stage` first-chunk forwards), which its gather,
    // dispatched at the step's start, runs beside.
    if (l.overlap_param_gather) {
      const double pc = d.param_gather_s * first_chunk_share;
      const double wait = opt.for_loom_executor() ? pc : pc / kb0 + piece_stall(pc, kb0, sc.chunk0_fwd_s);
      exposed += std::max(0.0, wait - double(stage) * sc.chunk0_fwd_s);
    } else {
      exposed += d.param_gather_s;
    }
  }
  // The DP stream's time this stage's compute hides, and the SMs it holds.
  double total = d.grad_sync_s * (l.zero >= 2 ? double(m) : 1.0);
  if (l.zero == 1 || l.zero == 2) total += d.param_gather_s;
  if (l.zero == 3) total += 2.0 * double(m) * d.param_gather_s;
  // The DP stream runs one collective at a time: whatever the overlap, the
  // stage cannot finish before its stream has run them all (per-micro-batch
  // reduce-scatters and gathers queue behind each other).
  if (l.zero >= 2) exposed = std::max(exposed, total - double(m) * t_stage);
  // Collectives that progress only in the host's waits hide behind nothing.
  if (opt.dp_comm_host_progress) exposed = total;
  return {exposed, total};
}

}  // namespace loom
