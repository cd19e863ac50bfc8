// Event engine: times a Program (core/program.h) given each op's duration.
//
// Semantics (the same the executor's runtime follows): within a stage, ops of
// one stream run one at a time in program order; an op starts at
//   max(end of the previous op on its stream, end of every dep).
// Streams of a stage run concurrently (compute overlaps DP and PP comm).
// A recv's duration is the transfer time; it starts when the matching send's
// dep (the producing compute op) is done, so p2p time is paid once.
//
// The engine knows nothing about schedules: GPipe, 1F1B and interleaved differ
// only in the op order the program builder emitted, which is the point.
// Complexity O(ops + deps), no allocation beyond the result.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/program.h"
#include "core/status.h"

namespace loom {

struct OpTiming {
  double start_s = 0;
  double end_s = 0;
};

// Why the compute stream of a stage sat idle, attributed to the dep that was
// the last to finish before each idle gap.
struct StageIdle {
  double pipeline_s = 0;  // waiting on a recv / neighbour stage: the bubble
  double dp_comm_s = 0;   // waiting on ZeRO-3 gathers or grad sync (exposed DP comm)
  double tail_s = 0;      // after the last compute op until the step ends (grad sync, optimizer waits)
};

struct Timeline {
  std::vector<OpTiming> ops;        // indexed like Program::ops
  double step_time_s = 0;           // max end over all ops
  std::vector<double> compute_busy_s;  // per stage: sum of compute-stream op durations
  std::vector<StageIdle> idle;         // per stage
};

// `duration_s[i]` is op i's duration (>= 0). kInvalidArgument when sizes
// disagree or a duration is negative or NaN; kInternal when the program has a
// dependency cycle (a program-builder bug) — reported, never hung on.
Result<Timeline> run_event_engine(const Program& program, std::span<const double> duration_s);

}  // namespace loom
