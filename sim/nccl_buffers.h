#pragma once
// NCCL's point-to-point connection buffers: the GPU memory a rank's NCCL
// communicators hold for the pipeline's send/recv, the context-parallel ring
// and the experts' all-to-all, outside PyTorch's caching allocator
// (docs/simulator.md section 2.5).

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "sim/sim_options.h"

namespace loom {

struct NcclP2pBuffers {
  double fixed_bytes = 0;        // the EP all-to-all and the CP ring: every stage
  double per_pp_peer_bytes = 0;  // each pipeline neighbour a stage exchanges with
};

// What a rank of `layout` holds; zero where the profile states no
// nccl_p2p_channels_per_peer (NodeSpec).
NcclP2pBuffers nccl_p2p_buffers(const ModelSpec& model, const HwProfile& hw, const Layout& layout,
                                const SimOptions& opt);
// Its parts from group shapes a caller already holds (the Evaluator's
// memoized ones): the CP ring and the EP all-to-all, and one pipeline
// neighbour over the PP group.
double nccl_fixed_p2p_bytes(const ModelSpec& model, const HwProfile& hw, const Layout& layout, const SimOptions& opt,
                            const GroupShape& cp_group, const GroupShape& ep_group);
double nccl_pp_peer_bytes(const HwProfile& hw, const GroupShape& pp_group);

// The distinct pipeline neighbours stage `stage` sends to and receives from:
// 0 without a pipeline, 1 with two stages or at the ends of a GPipe / 1F1B
// pipeline, else 2 (interleaving and DualPipeV send the last stage's output
// back to stage 0).
int pipeline_peers(const Layout& layout, int stage);

}  // namespace loom
