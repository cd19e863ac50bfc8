// JSON pieces the regression suite's readers share (suite files and results
// files both carry {"figure": fraction} tolerance maps).
#pragma once

#include <map>
#include <string>

#include "core/json_util.h"

namespace loom::cli {

// obj["tolerances"] as figure -> positive fraction; empty when absent.
// Errors name `where`.tolerances.<figure>.
Result<std::map<std::string, double>> parse_tolerances(const Json& obj, const std::string& where);

}  // namespace loom::cli
