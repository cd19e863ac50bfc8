// Chrome trace-event JSON (opens in Perfetto / chrome://tracing): the one
// timeline format for predicted (simulator) and measured (executor) runs.
//
// pid = global rank (or pipeline stage for a predicted per-stage trace),
// tid = stream (0 compute, 1 pp-comm, 2 dp-comm), complete events ("X") with
// microsecond timestamps, `args.op_id` = the Program op id, so the two kinds
// of trace join on op ids (`loom compare --ops`, core/op_compare.h);
// otherData carries kind, plan_hash and program_hash. Metadata events name
// processes and threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom {

struct TraceEvent {
  std::string name;   // "fwd s1 c0 mb3"
  std::string cat;    // "fwd", "bwd", "comm", "optim", ...
  int pid = 0;
  int tid = 0;
  double ts_us = 0;
  double dur_us = 0;
  int32_t op_id = -1;   // -1 for events that are not program ops (nested slices)
  int32_t micro = -1;
  int32_t stage = -1;
  int32_t chunk = -1;
  double bytes = 0;     // communication payload, 0 when none
};

struct Trace {
  std::string kind;                     // "predicted" or "measured"
  std::vector<std::string> process_names;  // index = pid
  std::vector<std::string> thread_names;   // index = tid
  std::vector<TraceEvent> events;
  std::string plan_hash;
  // program_hash(ProgramConfig) of the op program the events are ops of:
  // traces with the same one join one to one on op_id. Empty in traces
  // written before it was recorded.
  std::string program_hash;
};

std::string trace_to_json(const Trace& trace);
Result<Trace> parse_trace(const std::string& json_text);
Status write_trace(const Trace& trace, const std::string& path);

}  // namespace loom
