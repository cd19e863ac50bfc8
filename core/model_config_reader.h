// Internal to core/: what reading a config.json (core/model_config_reader.cc)
// and validating a ModelSpec (core/model_spec.cc) share.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// "{1,2,4,8}": the divisors of n, for messages that say what would work.
std::string divisors_of(int64_t n);

}  // namespace loom
