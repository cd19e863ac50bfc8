#include "gui/planner_session.h"

#include <optional>
#include <thread>

#include "sim/framework.h"
#include "sim/report.h"

namespace loom::gui {

PlannerSession::PlannerSession() {
  // The defaults of `loom plan`, on a model and cluster that load without a
  // file dialog.
  req_.gpus = 8;
  req_.global_batch = 64;
  req_.seq = 1024;
  layout_.dp = 8;
  if (auto m = load_model_spec("gpt2-124m"); m.is_ok()) model_ = *m, model_source_ = "gpt2-124m";
  if (auto h = load_hw_profile("dgx-h100"); h.is_ok()) hw_ = *h, hw_source_ = "dgx-h100";
}

Status PlannerSession::load_model(const std::string& path_or_name) {
  LOOM_ASSIGN_OR_RETURN(ModelSpec m, load_model_spec(path_or_name));
  model_ = std::move(m);
  model_source_ = path_or_name;
  result_.reset();
  eval_.reset();
  return Status::ok();
}

Status PlannerSession::load_hw(const std::string& path_or_name) {
  LOOM_ASSIGN_OR_RETURN(HwProfile h, load_hw_profile(path_or_name));
  hw_ = std::move(h);
  hw_source_ = path_or_name;
  // Another profile measured other kernels: price its own.
  req_.attention_kernel.clear();
  result_.reset();
  eval_.reset();
  return Status::ok();
}

Status PlannerSession::rebuild_evaluator() {
  if (model_.name.empty()) return invalid_argument("no model loaded; choose one from models/ or a config.json");
  if (hw_.name.empty()) return invalid_argument("no hardware profile loaded; choose one from hwprofiles/");
  HwProfile hw = hw_;
  LOOM_RETURN_IF_ERROR(apply_request_to_hw(req_, &hw));
  LOOM_ASSIGN_OR_RETURN(TrainSpec train, make_train_spec(req_, hw, &model_));
  eval_ = std::make_shared<const Evaluator>(model_, hw, train, make_sim_options(req_, hw));
  return Status::ok();
}

Status PlannerSession::evaluate() {
  result_.reset();
  if (Status s = rebuild_evaluator(); !s.is_ok()) {
    eval_.reset();
    return s;
  }
  LOOM_RETURN_IF_ERROR(validate_layout(layout_, model_, eval_->train(), req_.gpus));
  // What the chosen stack can run (Megatron's splits, recompute_layers only there).
  std::optional<Framework> fw;
  if (!req_.framework.empty()) {
    LOOM_ASSIGN_OR_RETURN(fw, load_framework(req_.framework));
  }
  LOOM_RETURN_IF_ERROR(check_layout_for_stack(fw ? &*fw : nullptr, model_, layout_));
  LOOM_ASSIGN_OR_RETURN(SimResult r, simulate_layout(*eval_, layout_));
  result_ = std::move(r);
  return Status::ok();
}

std::string PlannerSession::prediction_json() const {
  return result_ ? loom::prediction_json(*result_, 2) : std::string("{}");
}

Result<Plan> PlannerSession::plan() const {
  if (!result_ || !eval_) return invalid_argument("no evaluated layout; fix the inputs first");
  if (!result_->memory.fits)
    return invalid_argument("layout " + result_->layout.to_string() + " does not fit: " + result_->memory.why_not());
  return make_plan(*eval_, *result_, req_.gpus);
}

Result<PlannerSession::SearchJob> PlannerSession::search_job() const {
  if (model_.name.empty() || hw_.name.empty()) return invalid_argument("load a model and a hardware profile first");
  HwProfile hw = hw_;
  LOOM_RETURN_IF_ERROR(apply_request_to_hw(req_, &hw));
  LOOM_ASSIGN_OR_RETURN(TrainSpec train, make_train_spec(req_, hw, &model_));
  SearchJob job;
  job.eval = std::make_shared<const Evaluator>(model_, hw, train, make_sim_options(req_, hw));
  job.space = make_search_space(req_);
  // Leave a core to the event loop.
  job.space.threads = std::max(1, int(std::thread::hardware_concurrency()) - 1);
  return job;
}

}  // namespace loom::gui
