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
//                         recompute and both input- and weight-gradients)
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
  int16_t chunk = 0;      // model chunk on this stage, 0..v-1 (global chunk = chunk*pp + stage)
  int32_t micro = -1;     // micro-batch index, -1 when the op is per step
  int16_t part = 0;       // backward part / gradient bucket index within the chunk;
                          // ZeRO-3 param gather: 0 = before the forward, 1 = before the backward
  int16_t num_parts = 1;  // parts the chunk's backward (or grad sync) is split into
  int32_t dep_begin = 0;  // deps are Program::deps[dep_begin, dep_begin + dep_count)
  int32_t dep_count = 0;
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
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
};

ProgramConfig program_config_for(const Layout& layout, int64_t global_batch, int grad_buckets);

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

// Expands the schedule. Errors: kInvalidArgument when m, pp or v make the
// schedule impossible (interleaved needs m % pp == 0 and v >= 2; pp >= 1).
// Complexity O(pp * v * m) time and memory.
Result<Program> build_program(const ProgramConfig& config);

// The channel a pipeline transfer (a send or recv op) travels on:
// activations or gradients, and whether it wraps between the last stage and
// the first (interleaved schedules: the last stage feeds the next chunk of
// stage 0, and stage 0 returns its gradient). An executor without message
// tags (NCCL) gives each channel its own communicator and stream.
enum class P2pChannel { kActivation = 0, kGradient = 1, kActivationWrap = 2, kGradientWrap = 3 };
P2pChannel p2p_channel(const Op& op, int pp);

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
