// Context parallelism's ring (exec/model/context_parallel.cc) as a program
// of ops that the event engine times: each step's attention blocks on the
// compute stream, the K/V and dK/dV transfers on one communication stream
// (they leave for the same neighbour, so they share its link), each op
// waiting on what the executor waits on before issuing it.
#pragma once

#include "core/program.h"

namespace loom {

struct CpRingTime {
  double fwd_s = 0, fwd_exposed_s = 0;  // forward: the ring's wall time, and what its blocks did not cover
  double bwd_s = 0, bwd_exposed_s = 0;  // backward, the last dK/dV's trip home included
};

// The ring over `ranks` (>= 2) CP ranks: `kv_s` one K/V transfer, `dkv_s`
// one dK/dV transfer, `fwd_step_s` / `bwd_step_s` the blocks of one step
// (1/ranks of the layer's attention core).
//
// Forward (`RingAttention::forward`): step s issues K/V s+1 once K/V s has
// arrived and step s-1's blocks are done, then runs its blocks, which need
// K/V s. Backward: the same K/V ring, and after step s's blocks the dK/dV
// gathered for the K/V held at step s leaves once the previous one
// arrived (its sum is added to what arrives); the host waits for that
// previous one before step s+1.
Program cp_ring_forward_program(int ranks);
Program cp_ring_backward_program(int ranks);
CpRingTime cp_ring_time(int ranks, double kv_s, double dkv_s, double fwd_step_s, double bwd_step_s);

}  // namespace loom
