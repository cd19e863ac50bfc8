// StepPhases: one optimizer step's time split into named phases, the same
// struct on both sides of predicted vs measured. The simulator fills it for
// its critical stage (sim/simulate.cc, written as the prediction's "phases",
// docs/formats/plan.md); the executor for its critical rank (exec/runtime/run_driver.cc,
// the run record's "phases", docs/formats/run_record.md). Exposed times (what
// the step waits for) and waits are named apart; each field says what the
// simulator and the executor put in it.
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "core/status.h"

namespace loom {

// A phase one side cannot produce (written as JSON null, read back as NaN).
inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

struct StepPhases {
  // Forward ops, the TP/EP collectives inside the layers included.
  //   simulator: micro-batches x the stage's forward per micro-batch (the
  //              forward ops' durations in the event engine);
  //   executor:  wall time of the forward ops (waits for ZeRO-3 gathers before
  //              them excluded: those are dp_comm_exposed_s).
  double forward_s = 0;
  // Backward ops, recompute and the TP/EP collectives inside the layers
  // included. simulator: micro-batches x (backward + recompute); executor:
  // wall time of the backward ops.
  double backward_s = 0;
  // The exposed TP/EP collectives: a PART of forward_s + backward_s, not an
  // extra term of the step. simulator: micro-batches x the exposed TP and EP
  // time; executor: kNotMeasured (the collectives run inside a chunk's
  // forward/backward and are not timed apart).
  double tp_comm_exposed_s = 0;
  // Waiting on the pipeline. simulator: the critical stage's bubble plus the
  // exposed p2p transfer time (breakdown bubble_s + pp_comm_exposed_s);
  // executor: time in pipeline send/recv ops (receives waiting for the
  // neighbour stage, its bubble included, and the sends' issue). 0 without a
  // pipeline.
  double pipeline_wait_s = 0;
  // Exposed DP / ZeRO communication. simulator: time the compute stream waits
  // on gradient syncs and parameter gathers (and, without a pipeline, the tail
  // after the last compute op); executor: the blocking parts of gradient syncs
  // and parameter gathers, waits for in-flight gathers before a forward or
  // backward, and the optimizer's wait for in-flight syncs.
  double dp_comm_exposed_s = 0;
  // The optimizer op (norm, clipping, AdamW). simulator: its modelled time;
  // executor: the op's wall time less its wait for in-flight syncs.
  double optimizer_s = 0;
  // Reading the step's samples. simulator: 0 (it assumes the data is ready);
  // executor: wall time reading and staging the step's tokens.
  double data_wait_s = 0;

  double compute_s() const { return forward_s + backward_s; }
  StepPhases& operator+=(const StepPhases& o);
  StepPhases operator/(double d) const;
};

// The fields in one table: JSON key (the same in the prediction and the run
// record) and member. Readers, writers and flatten() go through it.
struct PhaseField {
  const char* key;  // "forward_s"
  double StepPhases::*member;
};
inline constexpr int kNumPhases = 7;
inline constexpr std::array<PhaseField, kNumPhases> kPhaseFields = {{
    {"forward_s", &StepPhases::forward_s},
    {"backward_s", &StepPhases::backward_s},
    {"tp_comm_exposed_s", &StepPhases::tp_comm_exposed_s},
    {"pipeline_wait_s", &StepPhases::pipeline_wait_s},
    {"dp_comm_exposed_s", &StepPhases::dp_comm_exposed_s},
    {"optimizer_s", &StepPhases::optimizer_s},
    {"data_wait_s", &StepPhases::data_wait_s},
}};

// In kPhaseFields order: to move the struct through a collective.
using PhaseArray = std::array<double, kNumPhases>;
PhaseArray flatten(const StepPhases& p);
StepPhases unflatten(const PhaseArray& a);

// A JSON object of every field (kNotMeasured as null).
std::string phases_to_json(const StepPhases& p);
// Reads such an object: every key is required (null = kNotMeasured), numbers
// only. Errors name `what`.key and end with `fix` (what to do about it).
Result<StepPhases> parse_phases(const std::string& json_text, const std::string& what, const std::string& fix);

}  // namespace loom
