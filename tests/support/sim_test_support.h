// Parsing and loading helpers of the simulator's tests: a layout text or a
// shipped framework file, or the calling test fails with the Status message;
// an evaluator of a shipped model on a shipped profile.
#pragma once

#include <string>

#include "core/layout.h"
#include "core/status.h"
#include "sim/evaluate.h"
#include "sim/framework.h"
#include "tests/support/test_models.h"

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

// `model` (models/) on `hw` (hwprofiles/), `batch` sequences of `seq` tokens a step.
inline Evaluator make_evaluator(const std::string& model, const std::string& hw, int64_t batch, int64_t seq,
                                SimOptions opt = SimOptions{}) {
  TrainSpec t;
  t.global_batch = batch;
  t.seq_len = seq;
  return Evaluator(load_model_or_die(model), load_hw_or_die(hw), t, opt);
}

}  // namespace loom::testing
