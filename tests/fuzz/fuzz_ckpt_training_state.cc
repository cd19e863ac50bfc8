// Checkpoint training-state rank files (training_state/rank_R.json:
// exec/checkpoint/training_state.h parse_training_state) and the data cursor
// inside them (exec/data/loader.h parse_loader_cursor), as a resume reads them.
#include "exec/checkpoint/training_state.h"
#include "exec/data/loader.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    // What Trainer::snapshot writes (exec/runtime/trainer_state.cc).
    loom::fuzz::write_seed("state_0.json", R"J({
  "step": 12, "adam_step": 12, "consumed_samples": 96, "consumed_tokens": 12288, "lr_schedule_step": 12,
  "loss_scale": 65536.0, "loss_scale_good_steps": 3, "precision": "fp16",
  "rng": {"seed": 1234, "note": "parameters and data derive from (seed, global index)"},
  "data": {"consumed_samples": 96, "per_dataset": [60, 36]},
  "rank": 0, "coords": {"dp": 0, "tp": 0, "pp": 0}
}
)J");
    loom::fuzz::write_seed("state_1.json", R"({"step": 3, "precision": "bf16", "loss_scale": 1.0, "data": {"consumed_samples": 24}})");
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto st = ckpt::parse_training_state(text, "fuzz training state");
  if (!st.is_ok()) {
    FUZZ_CHECK(!st.status().message().empty(), "an error without a message");
    return 0;
  }
  FUZZ_CHECK(st->step >= 0 && st->step <= ckpt::kMaxTrainingStep && st->adam_step >= 0, "step out of range");
  if (st->has_loss_scale) FUZZ_CHECK(st->loss_scale > 0, "loss scale not positive");
  if (!st->data_json.empty()) {
    const int64_t global_batch = 1 << 24;  // the largest a plan allows
    auto c = data::parse_loader_cursor(st->data_json, st->step * global_batch, "fuzz data cursor");
    if (c.is_ok()) {
      FUZZ_CHECK(c->consumed_samples >= 0, "negative consumed samples");
      int64_t sum = 0;
      for (int64_t n : c->per_dataset) sum += n;
      FUZZ_CHECK(c->per_dataset.empty() || sum == c->consumed_samples, "per-dataset counts do not sum up");
    }
  }
  return 0;
}
