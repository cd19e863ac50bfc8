// A layer's tensor-parallel collectives around its four linears (QKV, proj,
// FC1, FC2; docs/simulator.md section 3.4): what they cost, what of them
// shows, and the SM time the hidden ones take from the GEMMs beside them.
// Internal to the compute model (sim/compute_model.cc layer_cost).
#pragma once

#include "sim/compute_model.h"

namespace loom {

// `count` calls of collective `c` of `bytes` on group `g`: their time, their
// traffic added to `traffic` (may be null). 0 for a group of one.
double collective_time(const HwProfile& hw, Collective c, const GroupShape& g, double bytes, LinkBytes* traffic,
                       double count);

struct TpLayerComm {
  double fwd_total = 0, bwd_total = 0;      // every collective's time
  double fwd_exposed = 0, bwd_exposed = 0;  // what the GEMMs beside them cannot cover
  double fwd_sm_s = 0, bwd_sm_s = 0;        // GEMM time the hidden ones take (SMs they hold)
  int calls = 0;                            // collectives per micro-batch, forward and backward
};

// The collectives of one micro-batch of a layer on `sh.tp_group` (tp > 1):
// all-reduces, or with SP all-gathers (`ag_bytes`: FP8 gathers half) and
// reduce-scatters (`tp_bytes`), exposed as SimOptions::tp_async_backward and
// tp_comm_overlap (with its userbuffers settings, SimOptions::tp_overlap)
// say. `windows`: the attention and MLP blocks' column-parallel GEMMs'
// forward times (QKV, FC1); `rows`: their row-parallel ones' (proj, FC2).
TpLayerComm tp_layer_comm(const HwProfile& hw, const SimOptions& opt, const ComputeShape& sh, double ag_bytes,
                          double tp_bytes, const double (&windows)[2], const double (&rows)[2], LinkBytes* traffic);

}  // namespace loom
