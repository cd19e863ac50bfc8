// Context parallelism's K/V exchange for one layer and micro-batch on one
// rank: the ring, the K/V all-gathered, or the heads exchanged
// (Layout::cp_comm; docs/simulator.md §3.2b), as the collectives it issues,
// what of them is exposed, and the buffers it holds.
#pragma once

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "sim/compute_model.h"
#include "sim/sim_options.h"

namespace loom {

// A rank's attention tensors: `tokens` of the micro-batch (b·s/cp), the TP
// rank's query and key/value heads, the head dims, the element size.
struct CpTensors {
  double tokens = 0, q_heads = 0, kv_heads = 0, qk_dim = 0, v_dim = 0, elem_bytes = 2;
};

struct CpExchangeCost {
  double fwd_exposed_s = 0, bwd_exposed_s = 0;  // on the layer's critical path
  // What runs beside the compute: the ring's hidden transfers (they slow
  // the blocks by the contention fraction) ...
  double fwd_hidden_s = 0, bwd_hidden_s = 0;
  // ... and the copies around the all-to-alls, memory traffic on the
  // compute stream (bytes, kernels).
  double fwd_copy_bytes = 0, bwd_copy_bytes = 0;
  int fwd_copy_kernels = 0, bwd_copy_kernels = 0;
  LinkBytes bytes;            // sent, forward and backward
  int calls = 0;
  double total_s = 0;         // every call's time
  LinkBytes fwd_bytes;        // the forward's share: what a recompute sends again
  int fwd_calls = 0;
  double fwd_total_s = 0;
};

// `core_fwd_s` / `core_bwd_s`: the rank's attention core, whose blocks the
// ring's transfers hide behind. `cp_group` must have >= 2 ranks.
CpExchangeCost cp_exchange_cost(const HwProfile& hw, const SimOptions& opt, CpComm comm, const GroupShape& cp_group,
                                const CpTensors& x, double core_fwd_s, double core_bwd_s);

// The exchange's buffers at a layer's peak, bytes: the ring's blocks in
// flight, the gathered K/V and its dK/dV, or the all-to-alls' copies (Loom's
// executor's in fp32). `tokens` as in CpTensors; `layout.cp` >= 2.
double cp_exchange_buffer_bytes(const ModelSpec& model, const Layout& layout, double tokens, double elem_bytes,
                                bool loom_executor);

}  // namespace loom
