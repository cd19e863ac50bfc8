// Predicted (a plan's prediction) vs measured (a run record): one row per
// figure of the table in core/figures.h that applies to the layout, with
// relative errors (measured / predicted - 1). Used by `loom compare`,
// `loom regress` and the GUI's measured overlay.
#pragma once

#include <string>
#include <vector>

#include "core/figures.h"
#include "core/plan.h"
#include "core/run_record.h"

namespace loom {

struct ComparisonRow {
  std::string id;       // FigureSpec::id: "step_time", "compute", ...
  std::string label;    // FigureSpec::label: "step time (median)", ...
  std::string unit;     // "s", "tokens/s", "bytes"
  double predicted = 0;
  double measured = 0;
  // relative_error (core/figures.h): +inf, not 0, when only the prediction is 0.
  double rel_error() const { return relative_error(predicted, measured); }
};

// Errors: the prediction is missing, lacks a key the figures need (named,
// with the fix: re-create the plan with this `loom plan`), or is for another
// plan (hash mismatch).
// With `other_hardware`, the plan may differ from the one the run executed in
// its hardware profile only (e.g. the same plan made on a calibrated profile):
// model, layout, world size and tokens per step must still match the record.
Result<std::vector<ComparisonRow>> compare_rows(const Plan& plan, const RunRecord& record, bool other_hardware = false);

// Peak memory by buffer class (core/memory_class.h): the rank whose measured
// peak is the largest, what was live at it, against the prediction for that
// rank's pipeline stage (memory_per_stage: weights_bytes ... inputs_bytes).
// `available` is false (rows empty) for a record without the breakdown (an
// older executor) or a prediction without the executor's classes (a plan for
// a framework, or an older plan).
struct MemoryClassRow {
  std::string name;     // memory_class_name
  double predicted = 0; // NaN: the simulator has no term for the class ("other")
  double measured = 0;
};
struct MemoryComparison {
  bool available = false;
  int rank = 0, stage = 0;
  std::vector<MemoryClassRow> rows;
};
// Call after compare_rows accepted the pair.
MemoryComparison compare_memory(const Plan& plan, const RunRecord& record);

}  // namespace loom
