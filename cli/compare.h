// Predicted (a plan's prediction) vs measured (a run record): the rows both
// sides have, with relative errors (measured / predicted - 1).
#pragma once

#include <string>
#include <vector>

#include "core/compare.h"

namespace loom::cli {

using loom::ComparisonRow;
using loom::compare_rows;

std::string format_comparison(const Plan& plan, const RunRecord& record, bool other_hardware = false);
// {"step_time_s": {...}, "step_time_rel_error": ..., ...}
std::string comparison_json(const std::vector<ComparisonRow>& rows);

int cmd_compare(int argc, char** argv);

}  // namespace loom::cli
