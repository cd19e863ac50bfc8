// PlannerSession: the GUI's state without widgets — the loaded model and
// hardware profile, the training inputs, the layout being looked at — and
// the simulator calls on them. Built with the same PlanRequest as `loom plan`
// (sim/plan_request.h), so every number the views show is the one
// `loom plan --layout ... --json` prints for the same inputs.
//
// Loading a bad file returns the error and keeps the previous state.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "sim/evaluate.h"
#include "sim/plan_request.h"
#include "sim/search.h"
#include "sim/simulate.h"

namespace loom::gui {

class PlannerSession {
 public:
  PlannerSession();

  // A name from models/ / hwprofiles/ or a path. On error nothing changes.
  Status load_model(const std::string& path_or_name);
  Status load_hw(const std::string& path_or_name);
  const ModelSpec& model() const { return model_; }
  const HwProfile& hw() const { return hw_; }
  const std::string& model_source() const { return model_source_; }
  const std::string& hw_source() const { return hw_source_; }

  PlanRequest& request() { return req_; }
  const PlanRequest& request() const { return req_; }
  Layout& layout() { return layout_; }
  const Layout& layout() const { return layout_; }

  // Validates the inputs and the layout, then simulates. On error (a bad
  // input, an impossible layout) the message explains it and result() is
  // empty; a layout that does not fit still has a result (memory.fits false).
  Status evaluate();
  const std::optional<SimResult>& result() const { return result_; }
  const Evaluator* evaluator() const { return eval_.get(); }
  // `loom plan --layout ... --json` for the current result.
  std::string prediction_json() const;
  // The plan `loom plan --layout ... --out` would write (requires a result).
  Result<Plan> plan() const;

  // A full search on the current inputs (not the layout), for a worker
  // thread: uses a snapshot of the evaluator, so the session may change
  // meanwhile.
  struct SearchJob {
    std::shared_ptr<const Evaluator> eval;
    SearchSpace space;
  };
  Result<SearchJob> search_job() const;

 private:
  Status rebuild_evaluator();

  ModelSpec model_;
  HwProfile hw_;
  std::string model_source_, hw_source_;
  PlanRequest req_;
  Layout layout_;
  std::shared_ptr<const Evaluator> eval_;
  std::optional<SimResult> result_;
};

}  // namespace loom::gui
