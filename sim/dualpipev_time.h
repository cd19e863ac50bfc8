// The closed form's pipeline time of DualPipeV: its compute order
// (core/program.h dualpipev_order) replayed over the stages with each
// stage's chunk times, as the event engine would time the program without
// data-parallel traffic.
#pragma once

#include <cstdint>
#include <span>

namespace loom {

// One stage's times for one micro-batch of each of its two chunks (chunk 0
// = global chunk s, chunk 1 = global chunk 2*pp-1-s): the forward, the whole
// backward (weight gradients included) and the weight-gradient part a
// deferring backward leaves to its W.
struct DualPipeVStageTimes {
  double fwd[2] = {0, 0}, bwd[2] = {0, 0}, wgrad[2] = {0, 0};
};

// Step time of the pipeline (from the first forward to the last compute op
// of any stage) for m >= 2*pp micro-batches, with `t_p2p` on every transfer
// between stages. `stages` has pp entries. Replays min(m, 4*pp) micro-batches
// and adds the rest at the slowest stage's rate: exact for equal stages (the
// idle stops growing at m = 2*pp) and up to m = 4*pp, within 1% of the whole
// order where the stages differ (tests/unit/sim/event_engine_test.cc). O(pp^2).
double dualpipev_pipeline_s(int pp, int64_t m, std::span<const DualPipeVStageTimes> stages, double t_p2p);

}  // namespace loom
