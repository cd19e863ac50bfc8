// The closed form's exposed data-parallel time of one pipeline stage, and
// the per-piece arithmetic it shares with the event engine's timing of the
// published stacks (simulate.h with_layered_dp). docs/simulator.md §6, §7.
#pragma once

#include <cstdint>

#include "core/layout.h"
#include "sim/evaluate.h"
#include "sim/sim_options.h"

namespace loom {

// A transfer issued in `pieces` pieces ahead of a consumer computing in as
// many pieces (Megatron's buckets, FSDP's layers): the consumer waits for
// the first piece, the rest runs beside its other pieces together with
// `beside` (the reduce-scatter of a backward's earlier layers), and what
// those pieces of `compute` cannot cover stalls it. The stall only; the
// first piece is the caller's.
inline double piece_stall(double transfer, double pieces, double compute, double beside = 0.0) {
  const double f = (pieces - 1) / pieces;
  const double rest = transfer * f + beside - compute * f;
  return rest > 0 ? rest : 0.0;
}

struct StageDpExposure {
  double exposed = 0;  // DP time the stage's compute does not hide
  double total = 0;    // the stage's DP stream time in a step
};

// Stage `stage` of layout `l` with `m` micro-batches, its costs `sc` and its
// collectives `d`; `first_chunk_share` is the share of the stage's
// parameters in its first chunk (1 without interleaving); `cycle_s` the
// pipeline's time per micro-batch (its slowest stage's forward + backward),
// which every stage runs at in the steady state (0: the stage's own).
StageDpExposure stage_dp_exposure(const Layout& l, const SimOptions& opt, const StageCosts& sc,
                                  const DpCollectives& d, int64_t m, int stage, double first_chunk_share,
                                  double cycle_s = 0);

}  // namespace loom
