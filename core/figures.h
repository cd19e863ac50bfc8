// The figures predicted vs measured compares, in one table: a stable id (the
// JSON key of `loom compare --json`, the figure name in `loom regress` results
// and suite tolerances), a display label, a unit, when it applies, and how the
// prediction (a plan's "prediction") and the run record each give it.
// core/compare.h builds the rows from it; nothing else names a figure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/layout.h"
#include "core/phases.h"
#include "core/run_record.h"
#include "core/status.h"

namespace loom {

// What the comparison reads from a plan's prediction (sim/report.cc
// prediction_json, docs/formats/plan.md).
struct PredictedFigures {
  double step_time_s = 0;
  double tokens_per_s = 0;
  StepPhases phases;
  // The worst stage's tensors: memory_per_stage total_bytes - overhead_bytes
  // (the runtime-reserve allowance is nothing the executor allocates).
  double peak_tensor_bytes = 0;
};

// Every key the table needs is required: a missing or renamed one is an error
// naming it and the fix (re-create the plan with this `loom plan`), never a 0.
Result<PredictedFigures> parse_predicted_figures(const std::string& prediction_json);

struct FigureSpec {
  const char* id;     // "step_time"
  const char* label;  // "step time (median)"
  const char* unit;   // "s", "tokens/s", "bytes"
  bool (*applies)(const Layout& layout);
  double (*predicted)(const PredictedFigures& p);
  double (*measured)(const RunRecord& r);
};

// In display order: step_time (median step), step_time_mean, compute,
// forward, backward, pipeline_wait (pp > 1), dp_comm (dp > 1), optimizer,
// tokens_per_s (measured at the median step), peak_memory.
const std::vector<FigureSpec>& comparison_figures();
// nullptr for an unknown id.
const FigureSpec* find_figure(std::string_view id);

// measured / predicted - 1. Equal values (0 and 0 included) give 0; a
// prediction of 0 against a non-zero measurement is +infinity (or -infinity
// for a negative one), never 0: a figure the prediction lacks must not pass.
// NaN when either side is NaN.
double relative_error(double predicted, double measured);

}  // namespace loom
