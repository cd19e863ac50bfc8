// Predicted (a plan's prediction) vs measured (a run record): the rows both
// sides have, with relative errors (measured / predicted - 1). Used by
// `loom compare`, `loom regress` and the GUI's measured overlay.
#pragma once

#include <string>
#include <vector>

#include "core/plan.h"
#include "core/run_record.h"

namespace loom {

struct ComparisonRow {
  std::string name;     // "step_time", "compute", ...
  std::string unit;     // "s", "tokens/s", "bytes"
  double predicted = 0;
  double measured = 0;
  double rel_error() const { return predicted != 0 ? measured / predicted - 1 : 0; }
};

// Errors: the prediction is missing or is for another plan (hash mismatch).
// With `other_hardware`, the plan may differ from the one the run executed in
// its hardware profile only (e.g. the same plan made on a calibrated profile):
// model, layout, world size and tokens per step must still match the record.
Result<std::vector<ComparisonRow>> compare_rows(const Plan& plan, const RunRecord& record, bool other_hardware = false);

}  // namespace loom
