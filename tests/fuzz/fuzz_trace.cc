// Chrome traces (core/trace.h parse_trace): what `loom compare` joins on op
// ids, from Loom or from other producers. Accepted traces are re-written and
// parsed again.
#include "core/trace.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    Trace t;
    t.kind = "predicted";
    t.plan_hash = "0123456789abcdef";
    t.process_names = {"stage 0", "stage 1"};
    t.thread_names = {"compute", "pp-comm", "dp-comm"};
    t.events.push_back({"fwd s0 c0 mb0", "fwd", 0, 0, 0, 10, 0, 0, 0, 0, 0});
    t.events.push_back({"send_act s0 c0 mb0", "comm", 0, 1, 10, 0, 1, 0, 0, 0, 4096});
    t.events.push_back({"recv_act s1 c0 mb0", "comm", 1, 1, 10, 2, 2, 0, 1, 0, 4096});
    t.events.push_back({"fwd s1 c0 mb0", "fwd", 1, 0, 12, 10, 3, 0, 1, 0, 0});
    loom::fuzz::write_seed("trace_0.json", trace_to_json(t));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto t = parse_trace(text);
  if (!t.is_ok()) {
    FUZZ_CHECK(!t.status().message().empty(), "an error without a message");
    return 0;
  }
  auto t2 = parse_trace(trace_to_json(*t));
  FUZZ_CHECK(t2.is_ok(), t2.status().to_string());
  FUZZ_CHECK(t2->events.size() == t->events.size(), "events lost in a round trip");
  return 0;
}
