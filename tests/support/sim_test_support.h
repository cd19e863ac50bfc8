// Parsing and loading helpers of the simulator's tests: a layout text or a
// shipped framework file, or the calling test fails with the Status message.
#pragma once

#include <string>

#include "core/layout.h"
#include "core/status.h"
#include "sim/framework.h"

namespace loom::testing {

inline Layout layout_or_die(const std::string& text) {
  auto l = parse_layout(text);
  LOOM_CHECK(l.is_ok(), l.status().to_string());
  return *l;
}

inline Framework framework_or_die(const std::string& name) {
  auto f = load_framework(name);
  LOOM_CHECK(f.is_ok(), f.status().to_string());
  return *f;
}

}  // namespace loom::testing
