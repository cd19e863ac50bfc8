// One row of the validation table read from its JSON object: shared by the
// table (sim/validation.cc) and the layout sweeps (sim/layout_sweeps.cc),
// whose runs are rows of one setting. Internal to sim/.
#pragma once

#include <string>

#include "core/json_util.h"
#include "sim/validation.h"

namespace loom {

// `where` names the row in messages ("runs[3]"); relative model paths with a
// '/' are resolved against `base_dir`.
Result<PublishedRun> parse_published_run(const Json& row, std::string where, const std::string& base_dir);

}  // namespace loom
