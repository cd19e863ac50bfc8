// loom compare: predicted (a plan's prediction) vs measured (a run record),
// one row per figure of core/figures.h, with relative errors (measured /
// predicted - 1); and `loom compare --ops`: a predicted trace vs a measured
// one op by op (core/op_compare.h).
#pragma once

#include <string>
#include <vector>

#include "core/compare.h"

namespace loom::cli {

using loom::ComparisonRow;
using loom::compare_rows;

// A relative error as text: "+12%", "-3%", "+inf" (a prediction of 0), "n/a" (NaN).
std::string error_text(double rel_error);

std::string format_comparison(const Plan& plan, const RunRecord& record, bool other_hardware = false);
// The peak-memory-by-class table (core/compare.h compare_memory); empty when
// the comparison is not available.
std::string format_memory_comparison(const MemoryComparison& memory);
// Keyed by figure id: {"step_time": {"predicted", "measured", "unit",
// "label"}, "step_time_rel_error": x (null when not finite), ...}, and
// "peak_memory_by_class": {"rank", "stage", "classes": {"weights":
// {"predicted", "measured"}, ...}} when available.
std::string comparison_json(const std::vector<ComparisonRow>& rows, const MemoryComparison& memory = {});

int cmd_compare(int argc, char** argv);
// `loom compare --ops PREDICTED_TRACE MEASURED_TRACE [--top N] [--json]`.
int cmd_compare_ops(int argc, char** argv);

}  // namespace loom::cli
