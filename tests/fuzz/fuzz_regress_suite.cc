// Regression suites (cli/regress.h parse_suite): bench/suites/*.json. Each
// accepted case's layout, scale and precision strings go through the parsers
// `loom regress run` hands them to.
#include "cli/regress.h"
#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto s = cli::parse_suite(text, "fuzz suite");
  if (!s.is_ok()) {
    FUZZ_CHECK(!s.status().message().empty(), "an error without a message");
    return 0;
  }
  FUZZ_CHECK(!s->cases.empty(), "a suite without cases");
  FUZZ_CHECK(s->steps >= 4 && s->threads >= 1, "steps/threads out of range");
  for (const cli::SuiteCase& c : s->cases) {
    FUZZ_CHECK(c.ranks >= 1, "a case with ranks < 1");
    FUZZ_CHECK(!c.tolerances.empty(), "a case without tolerances");
    for (const auto& [k, v] : c.tolerances) FUZZ_CHECK(v > 0, "tolerance " + k + " not positive");
    (void)parse_layout(c.layout);
    if (!c.scale.empty()) (void)parse_model_scale(c.scale);
    (void)parse_precision(c.precision);
  }
  return 0;
}
