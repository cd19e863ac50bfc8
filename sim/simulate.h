// Detailed simulation of one layout: the program builder expands the layout
// into per-stage ops (core/program.h), the cost models give each op its
// duration, and the event engine (sim/event_engine.h) times the program. The
// result carries everything reports need: per-stage memory, the step-time
// breakdown, figures, traffic per link class and the timeline.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/phases.h"
#include "core/program.h"
#include "core/trace.h"
#include "sim/evaluate.h"
#include "sim/event_engine.h"

namespace loom {

struct SimResult {
  Layout layout;
  MemoryReport memory;
  StepBreakdown time;      // from the event engine
  StepPhases phases;       // the same, as the phases predicted vs measured compares (core/phases.h)
  Figures figures;
  Traffic traffic;
  Estimate closed_form;    // the search's estimate, for comparison
  Program program;
  Timeline timeline;
  std::vector<double> durations_s;  // per op, as fed to the engine
  std::vector<StageCosts> stages;
  int critical_stage = 0;
  // Shapes priced beyond the profile's measured tables (sim/coverage.h).
  std::vector<std::string> outside_measured;
};

// Blocking pipeline p2p (SimOptions::pp_blocking_p2p): `prog` as the engine
// times it when a stage's compute waits for its own sends. Each send lasts
// the transfer (its recv starts with it) and moves to a stage of its own,
// P + s, so that it neither holds up the stage's recvs nor waits behind them
// (Megatron batches a send with the opposite recv); activation sends take
// that stage's pp-comm stream and gradient sends its dp-comm stream, the two
// directions of the link. The sender's compute then depends on the send's
// end: plain 1F1B and GPipe wait before the next compute op
// (send_forward_recv_backward and its kin wait on every request); the
// interleaved schedule batches a forward's send with the following
// backward's transfers (send_forward_backward_recv_forward_backward), so a
// forward's send is waited before the stage's next forward and a backward's
// before its next compute op. Op ids stay those of `prog`, and so do the
// executor's program and hash; timeline entries past P are the send stages.
Program with_blocking_sends(const Program& prog);

// Megatron's overlap_p2p_comm (its interleaved schedule; torchtitan's
// interleaved schedule posts its receives ahead too): after each forward
// (backward) the host posts that op's send and the receive of the next
// forward's (backward's) input, and waits on both before that next op of the
// same direction (schedules.py forward_backward_pipelining_with_interleaving,
// send_forward_recv_forward / send_backward_recv_backward with
// overlap_p2p_comm=True). A receive is therefore in flight while the op in
// between computes. Each pair of peers has its own communicator (PyTorch
// ProcessGroupNCCL's point-to-point keys), so the transfers with the
// previous stage (activations in, gradients out) stay on the stage's
// pp-comm stream and those with the next (activations out, gradients in)
// move to a stage of their own, P + s; each stream takes the host's posting
// order, and a send lasts its transfer. Op ids stay those of `prog`.
Program with_posted_ahead_recvs(const Program& prog);

// The gradient norm's all-reduce before the update (every stack, and Loom's
// executor, sums the squared norm over the pipeline stages: Megatron's
// get_grad_norm_fp32, exec/runtime/optimizer.cc): a barrier. Each stage's
// optimizer op also waits for every other stage's last compute op and for
// what that stage's optimizer waits for (its gradient syncs, its last sends),
// so no stage updates before the slowest one has its gradients; the
// all-reduce's own latency is in the optimizer's duration
// (StageCosts::norm_sync_s). Op ids stay those of `prog`.
Program with_norm_barrier(const Program& prog);

// Data-parallel traffic as the published stacks issue it, where the program
// has one op per chunk: Megatron's overlap_param_gather gathers the updated
// parameters bucket by bucket and each forward pre-hook waits for its own
// bucket (param_and_grad_buffer / distributed optimizer); FSDP and ZeRO-3
// gather one layer ahead of the layer that needs it and reduce-scatter each
// layer's gradients as its backward ends. Changes `dur` in place for the
// program's ops: a gather keeps on the DP stream its first bucket or layer,
// which its consumer waits for; the rest runs beside the consumer's other
// buckets or layers, and before a backward so does the reduce-scatter of all
// but its last layer. The reduce-scatter op keeps its last layer (ZeRO-2:
// also what the backward cannot cover). `hidden[c]` receives the DP time
// that runs beside compute op c, which pays SM contention and NIC sharing as
// overlapped DP time does. Under ZeRO-3, `stall[c]` receives what op c's
// own layers cannot cover, since the stacks prefetch one layer ahead and the
// op waits between its layers (the caller lengthens it); a step gather's
// excess stays on the DP stream, which dispatches every chunk's buckets
// from the start of the step. ZeRO-3 is taken by layer only with both
// overlaps on; otherwise its ops stand. `chunk_layers` is indexed
// stage * v + chunk; a chunk's buckets are the program's (ProgramConfig::buckets_of). Loom's
// executor runs the program's ops as they are, so this is for published
// stacks (SimOptions::for_loom_executor false).
void with_layered_dp(const Program& prog, std::span<const int> chunk_layers, std::vector<double>* dur,
                     std::vector<double>* hidden, std::vector<double>* stall);

// NIC sharing. On rail-optimized nodes each GPU has its own NIC, and the
// rank's DP collectives, its pipeline transfers and its EP/TP exchanges all
// leave through it. While a DP collective crosses the network, a foreground
// transfer on the same rank gets half the NIC (fair sharing of one link by
// two flows). A DP collective outlasts the foreground transfer (the stage's
// gradients against one micro-batch's activations), so the overlapped
// network time is paid twice: once more by the foreground op, and once more
// by the DP op it shared with. `net_fraction[op]` is the share of an op's
// duration that is network-bound (1 for a cross-node recv, the exposed
// cross-node EP/TP share for a compute op); DP-stream ops are the
// background. Overlaps come from `tl` (one pass). Returns the lengthened
// durations and, per stage, the time added to compute ops.
std::vector<double> with_nic_sharing(const Program& prog, const Timeline& tl, const std::vector<double>& dur,
                                     const std::vector<double>& net_fraction, int stages, std::vector<double>* added);

// Validates, then simulates. Errors: the layout's validation Status, or a
// program/engine error.
Result<SimResult> simulate_layout(const Evaluator& eval, const Layout& layout);

// The predicted timeline as a Chrome trace: pid = pipeline stage, tid = stream.
// Its program hash is that of the program the engine timed
// (result.program.config): the plan's, except where the stack runs another
// form of the layout (torchtitan's FSDP under a pipeline, priced_layout), so
// that `loom compare --ops` refuses to join a measured trace of the plan's
// program with the ops of another.
Trace predicted_trace(const SimResult& result, const std::string& plan_hash);

}  // namespace loom
