// Program: a layout expanded into the ordered, dependent ops of one training
// step, per pipeline stage. The one place where pipeline schedules live.
//
// The simulator's event engine (sim/event_engine.h) times a Program with the
// cost models; the executor's runtime runs the same Program on its backends.
// Both therefore produce timelines with the same op ids, and "predicted vs
// measured" is a join on ids.
//
// All DP/TP/CP replicas of a pipeline stage run the same ops, so a Program
// holds one op list per *stage*, not per rank (16k ranks cost no more than 16).
// Within a stage, ops on one stream run in the order they appear in `ops`
// (like a CUDA stream); an op starts once its stream is free and all its deps
// have finished. Deps may cross stages (a recv depends on the peer's send).
//
// Ops, all coarse:
//   kForward / kBackward  one model chunk, one micro-batch (backward includes
//                         recompute and both input- and weight-gradients,
//                         unless it defers the weight gradients)
//   kWeightGrad           the deferred weight gradients of one earlier
//                         backward (DualPipeV's zero-bubble W)
//   kSend* / kRecv*       pipeline p2p of activations (forward) or gradients
//                         (backward) between neighbouring stages
//   kParamGather          ZeRO-3: all-gather of a chunk's parameters before its
//                         forward or backward of one micro-batch; ZeRO-1/2: the
//                         all-gather of updated parameters (micro = -1)
//   kGradSync             one gradient bucket of a chunk: all-reduce (ZeRO 0),
//                         reduce-scatter (ZeRO 1-3)
//   kOptimizer            the optimizer step on this stage's (shard of) params
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/status.h"

namespace loom {

enum class OpKind : uint8_t {
  kForward,
  kBackward,
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
  kParamGather,
  kGradSync,
  kOptimizer,
  kWeightGrad,
};
const char* op_kind_name(OpKind k);  // "fwd", "bwd", "send_act", ...

enum class Stream : uint8_t { kCompute = 0, kPpComm = 1, kDpComm = 2 };
inline constexpr int kNumStreams = 3;
const char* stream_name(Stream s);   // "compute", "pp-comm", "dp-comm"

struct Op {
  int32_t id = 0;         // index into Program::ops; stable for a given config
  OpKind kind = OpKind::kForward;
  Stream stream = Stream::kCompute;
  int16_t stage = 0;      // pipeline rank, 0..pp-1
  int16_t chunk = 0;      // model chunk on this stage, 0..v-1 (global chunk: ProgramConfig::global_chunk)
  int32_t micro = -1;     // micro-batch index, -1 when the op is per step
  int16_t part = 0;       // backward part / gradient bucket index within the chunk;
                          // ZeRO-3 param gather: 0 = before the forward, 1 = before the backward
  int16_t num_parts = 1;  // parts the chunk's backward (or grad sync) is split into
  int32_t dep_begin = 0;  // deps are Program::deps[dep_begin, dep_begin + dep_count)
  int32_t dep_count = 0;
  // Pipeline transfers: the stage and chunk at the other end, and the message
  // tag both ends use (unique per kind, peer chunk and micro-batch on a
  // channel). -1 for other ops.
  int16_t peer_stage = -1;
  int16_t peer_chunk = -1;
  int32_t tag = -1;
  // ZeRO-3: a compute op after which the chunk's gathered parameters are
  // released (no later op before the next gather uses them).
  bool releases_params = false;
  // A backward that leaves its weight gradients to a later kWeightGrad op of
  // the same chunk and micro-batch (zero-bubble scheduling).
  bool defers_wgrad = false;
};

struct ProgramConfig {
  int pp = 1;
  int virtual_stages = 1;       // v; > 1 only for kInterleaved
  int64_t micro_batches = 1;    // m per step
  Schedule schedule = Schedule::k1F1B;
  // Data-parallel communication; when `dp_comm` is false no sync ops are made.
  bool dp_comm = false;
  int zero = 0;
  int grad_buckets = 1;         // buckets per chunk; the last backward of a chunk is split to match
  // Buckets of each chunk where they differ (indexed stage * v + chunk; empty:
  // grad_buckets everywhere): a published stack's own bucketing (Megatron-
  // core buckets only pipeline rank 0's first chunk, by size). Written to the
  // program's JSON only when set; Loom's executor never sets it.
  std::vector<int> chunk_grad_buckets;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
  // ZeRO 0/1 with overlap: each chunk's buckets all sync after its whole last
  // backward instead of splitting it (FSDP's post-backward under a pipeline,
  // as torch.distributed.pipelining runs it; DualPipeV's always do). Written
  // to the program's JSON only when set.
  bool syncs_after_backward = false;

  // The global chunk (in layer order) of chunk `chunk` on stage `stage` (global_chunk_of).
  int global_chunk(int stage, int chunk) const { return global_chunk_of(schedule, pp, stage, chunk); }
  // The gradient buckets of chunk `chunk` on stage `stage`.
  int buckets_of(int stage, int chunk) const {
    return chunk_grad_buckets.empty() ? grad_buckets : chunk_grad_buckets[size_t(stage) * virtual_stages + chunk];
  }
};

// Gradient buckets per chunk when nothing says otherwise (Megatron's default
// bucket of 40M parameters gives a handful per chunk at the sizes we run).
inline constexpr int kDefaultGradBuckets = 4;

ProgramConfig program_config_for(const Layout& layout, int64_t global_batch, int grad_buckets);

// The program configuration as JSON (the plan's "program" section) and back;
// errors name the field. Every field is written, none defaulted on reading.
std::string program_config_to_json(const ProgramConfig& c);
Result<ProgramConfig> parse_program_config(const std::string& json_text, const std::string& what);
// XXH3 of the canonical JSON: two interpreters with the same hash run the same
// ops with the same ids (the builder is deterministic in its config).
std::string program_hash(const ProgramConfig& c);
// The fields in which two configurations differ ("grad_buckets 4 vs 2, ..."),
// empty when they are the same.
std::string program_config_diff(const ProgramConfig& a, const ProgramConfig& b);

// The layers of a chunk that backward part `part` of `num_parts` runs: the
// chunk's `num_layers` are sliced from the top (part 0 holds the last layers,
// and the LM head when the chunk has it; the last part holds the first layers,
// and the embedding). Layers [begin, end), chunk-local; empty when the chunk
// has fewer layers than parts. Gradient bucket k holds the parameters that
// part k finishes, so its sync can start as soon as the part is done.
struct LayerRange {
  int begin = 0, end = 0;
};
LayerRange backward_part_layers(int num_layers, int part, int num_parts);

struct Program {
  ProgramConfig config;
  std::vector<Op> ops;
  std::vector<int32_t> deps;
  // Indices into `ops` of each stage's ops, in issue order (all streams).
  std::vector<std::vector<int32_t>> stage_ops;

  std::span<const int32_t> deps_of(const Op& op) const {
    return {deps.data() + op.dep_begin, static_cast<size_t>(op.dep_count)};
  }
  // "fwd s1 c0 mb3", "grad_sync s0 c1 b2", "optimizer s3": unique per op.
  std::string op_name(const Op& op) const;
};

// The message tag of a pipeline transfer of `grad`ients or activations into
// chunk `peer_chunk` (on the receiving stage) for micro-batch `micro`.
int32_t p2p_tag(bool grad, int peer_chunk, int32_t micro);

// One compute op of a schedule on one stage: a forward, a backward (which
// may defer its weight gradients), or the deferred weight gradients (wgrad)
// of an earlier backward of that chunk and micro-batch.
struct ComputeStep {
  bool fwd;
  int16_t chunk;
  int32_t micro;
  bool wgrad = false;
  bool defers_wgrad = false;
};
// DualPipeV's compute order on stage `stage` of `pp` with `m` >= 2*pp
// micro-batches (deepseek-ai/DualPipe dualpipev.py DualPipeV.step), as
// build_program expands it; appended to `out`.
void dualpipev_order(int pp, int stage, int64_t m, std::vector<ComputeStep>& out);

// Expands the schedule. Errors: kInvalidArgument when m, pp or v make the
// schedule impossible (interleaved needs m % pp == 0 and v >= 2; dualpipev
// v == 2, pp >= 2, m >= 2*pp and zero <= 1; pp >= 1).
// Complexity O(pp * v * m) time and memory.
Result<Program> build_program(const ProgramConfig& config);

// The channel a pipeline transfer (a send or recv op) travels on:
// activations or gradients, and whether it wraps between the last stage and
// the first (interleaved schedules: the last stage feeds the next chunk of
// stage 0, and stage 0 returns its gradient) or, under DualPipeV, belongs to
// chunk 1 (the V's second arm, which runs from the last stage back to the
// first). An executor without message tags (NCCL) gives each channel its own
// communicator and stream.
enum class P2pChannel { kActivation = 0, kGradient = 1, kActivationWrap = 2, kGradientWrap = 3 };
P2pChannel p2p_channel(const Op& op, int pp);
// The same for any schedule (DualPipeV's arms have channels of their own).
P2pChannel p2p_channel(const Op& op, const ProgramConfig& config);

// Whether the transfers can make progress when each (stage, channel) is one
// first-in-first-out stream on which a send completes only once its receive
// is running (NCCL's rendezvous), every receive blocks the stage's host
// until it completes, and the optimizer first waits for the stage's sends:
// replays the program under those rules and returns kUnsupported naming the
// stuck stages on a deadlock. `wrap_channels` false puts the wrap-around
// transfers on the plain channels (to show why they need their own).
Status check_p2p_progress(const Program& program, bool wrap_channels = true);

// Whether every stage issues its receives of each kind (activations,
// gradients) in the order its neighbour issues the matching sends: what a
// communicator without message tags (NCCL's send/recv) needs, since it pairs
// transfers in call order and would otherwise swap same-sized tensors
// silently. kUnsupported naming the first mismatch.
Status check_p2p_in_order(const Program& program);

}  // namespace loom
