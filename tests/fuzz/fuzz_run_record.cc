// Run records (core/run_record.h parse_run_record): what `loom execute
// --record` writes and `loom compare` / `loom regress` read. Accepted records
// must round-trip through run_record_to_json.
#include "core/run_record.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    RunRecord r;
    r.loom_version = "0.1.0";
    r.plan_hash = "0123456789abcdef";
    r.model_name = "gpt2-124m";
    r.hardware_name = "cpu-local";
    r.backend = "cpu";
    r.layout = "dp=2,tp=1,pp=1,ep=1,cp=1,zero=0,micro=1,schedule=1f1b,v=1,sp=0,recompute=none";
    r.world_size = 2;
    r.steps = 4;
    r.tokens_per_step = 1024;
    r.losses = {5.5, 5.2, 4.9, 4.7};
    r.step_times_s = {0.5, 0.3, 0.31, 0.29};
    r.step_time_s = 0.3;
    r.step_time_median_s = 0.3;
    r.phases.forward_s = 0.1;
    r.phases.backward_s = 0.15;
    r.tokens_per_s = 3400;
    r.mfu = 0.2;
    r.mfu_formula = "palm";
    r.peak_flops_per_rank = 1e11;
    r.peak_memory_bytes = {1e8, 1.1e8};
    loom::fuzz::write_seed("record_0.json", run_record_to_json(r));
    r.losses.clear();
    r.step_times_s.clear();
    r.peak_memory_bytes.clear();
    loom::fuzz::write_seed("record_1.json", run_record_to_json(r));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = parse_run_record(text, "fuzz run record");
  if (!r.is_ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string canon = run_record_to_json(*r);
  auto r2 = parse_run_record(canon, "fuzz run record (re-serialized)");
  FUZZ_CHECK(r2.is_ok(), r2.status().to_string() + "\n" + canon);
  FUZZ_CHECK(run_record_to_json(*r2) == canon, "the record changed in a round trip");
  return 0;
}
