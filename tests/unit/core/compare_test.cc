// Predicted vs measured (issue #15): the typed step phases and the one table
// of comparison figures. A prediction lacking a key the table needs is an
// error naming the key and the fix (never a 0), so are the regression figures
// of such a plan; a prediction of 0 against a measured figure has an infinite
// relative error, not 0; the phases round-trip through the run record and a
// version-1 record still reads; traces join op by op only when they are of the
// same program one to one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli/regress.h"
#include "core/compare.h"
#include "core/figures.h"
#include "core/op_compare.h"
#include "core/phases.h"
#include "core/plan.h"
#include "core/run_record.h"
#include "sim/report.h"
#include "sim/simulate.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

using nlohmann::json;

bool has(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// A 2x2x2 plan (every figure applies) and a run record of it.
Plan sample_plan() {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  t.steps = 10;
  Evaluator eval(testing::load_model_or_die("gpt2-124m"), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
  auto l = parse_layout("dp=2,tp=2,pp=2,zero=1,micro=2");
  LOOM_CHECK(l.is_ok(), l.status().to_string());
  auto r = simulate_layout(eval, *l);
  LOOM_CHECK(r.is_ok(), r.status().to_string());
  return make_plan(eval, *r, 8);
}

RunRecord sample_record(const Plan& p) {
  RunRecord rec;
  rec.plan_hash = p.plan_hash();
  rec.model_name = p.model.name;
  rec.layout = p.layout.to_string();
  rec.world_size = p.world_size;
  rec.tokens_per_step = int64_t(p.train.global_batch) * p.train.seq_len;
  rec.steps = 8;
  rec.warmup_steps = 2;
  rec.step_time_s = 0.5;
  rec.step_time_median_s = 0.4;
  rec.tokens_per_s = double(rec.tokens_per_step) / rec.step_time_s;
  rec.phases.forward_s = 0.1;
  rec.phases.backward_s = 0.2;
  rec.phases.tp_comm_exposed_s = kNotMeasured;
  rec.phases.pipeline_wait_s = 0.05;
  rec.phases.dp_comm_exposed_s = 0.03;
  rec.phases.optimizer_s = 0.02;
  rec.phases.data_wait_s = 0.001;
  rec.peak_memory_bytes = {1e9, 2e9};
  return rec;
}

// The plan with its prediction JSON edited.
Plan with_prediction(const Plan& p, const std::function<void(json&)>& edit) {
  json j = json::parse(p.prediction_json);
  edit(j);
  Plan q = p;
  q.prediction_json = j.dump();
  return q;
}

TEST(Figures, RowsFollowTheTableAndReadTheTypedPhases) {
  const Plan p = sample_plan();
  const RunRecord rec = sample_record(p);
  auto rows = compare_rows(p, rec);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  const auto& table = comparison_figures();
  ASSERT_EQ(rows->size(), table.size()) << "dp, tp and pp > 1: every figure applies";
  const json pred = json::parse(p.prediction_json);
  const json& ph = pred["phases"];
  for (size_t i = 0; i < table.size(); ++i) {
    const ComparisonRow& r = (*rows)[i];
    EXPECT_EQ(r.id, table[i].id);
    EXPECT_EQ(r.label, table[i].label);
    EXPECT_EQ(find_figure(r.id), &table[i]);
  }
  auto row = [&](const std::string& id) {
    for (const ComparisonRow& r : *rows)
      if (r.id == id) return r;
    ADD_FAILURE() << "no row " << id;
    return ComparisonRow{};
  };
  // The ids regress suites and baselines use, each read from the typed side.
  EXPECT_EQ(row("step_time").measured, 0.4) << "step_time is the median step";
  EXPECT_EQ(row("step_time_mean").measured, 0.5);
  EXPECT_EQ(row("step_time").predicted, pred["step_time_s"].get<double>());
  EXPECT_DOUBLE_EQ(row("compute").measured, 0.3);
  EXPECT_DOUBLE_EQ(row("compute").predicted, ph["forward_s"].get<double>() + ph["backward_s"].get<double>());
  EXPECT_EQ(row("forward").predicted, ph["forward_s"].get<double>());
  EXPECT_EQ(row("backward").measured, 0.2);
  EXPECT_EQ(row("pipeline_wait").predicted, ph["pipeline_wait_s"].get<double>());
  EXPECT_EQ(row("pipeline_wait").measured, 0.05);
  EXPECT_EQ(row("dp_comm").predicted, ph["dp_comm_exposed_s"].get<double>());
  EXPECT_EQ(row("dp_comm").measured, 0.03);
  EXPECT_EQ(row("optimizer").measured, 0.02);
  EXPECT_DOUBLE_EQ(row("tokens_per_s").measured, double(rec.tokens_per_step) / 0.4) << "at the median step";
  EXPECT_EQ(row("peak_memory").measured, 2e9);
  EXPECT_GT(row("peak_memory").predicted, 0);
  // The prediction's pipeline wait is the breakdown's bubble + exposed p2p.
  const json& b = pred["breakdown"];
  EXPECT_DOUBLE_EQ(ph["pipeline_wait_s"].get<double>(),
                   b["bubble_s"].get<double>() + b["pp_comm_exposed_s"].get<double>());
  EXPECT_DOUBLE_EQ(ph["tp_comm_exposed_s"].get<double>(),
                   b["tp_comm_exposed_s"].get<double>() + b["ep_comm_exposed_s"].get<double>());

  // Without a pipeline or DP, those figures do not apply.
  Plan single = p;
  single.layout.pp = 1;
  single.layout.dp = 1;
  RunRecord r1 = rec;
  r1.plan_hash = single.plan_hash();
  auto rows1 = compare_rows(single, r1);
  ASSERT_TRUE(rows1.is_ok()) << rows1.status().to_string();
  for (const ComparisonRow& r : *rows1) EXPECT_TRUE(r.id != "pipeline_wait" && r.id != "dp_comm") << r.id;
}

TEST(Figures, AMissingOrRenamedPredictionKeyIsAnErrorNotAZero) {
  const Plan p = sample_plan();
  const RunRecord rec = sample_record(p);
  ASSERT_TRUE(compare_rows(p, rec).is_ok());
  ASSERT_TRUE(cli::case_figures(p, rec).is_ok());
  struct Case {
    const char* key;  // what the message must name
    std::function<void(json&)> edit;
  };
  const Case cases[] = {
      {"pipeline_wait_s",
       [](json& j) {
         j["phases"]["pipeline_wait_exposed_s"] = j["phases"]["pipeline_wait_s"];
         j["phases"].erase("pipeline_wait_s");
       }},
      {"forward_s", [](json& j) { j["phases"].erase("forward_s"); }},
      {"dp_comm_exposed_s", [](json& j) { j["phases"]["dp_comm_exposed_s"] = "fast"; }},
      {"phases", [](json& j) { j.erase("phases"); }},
      {"step_time_s", [](json& j) { j.erase("step_time_s"); }},
      {"tokens_per_s", [](json& j) { j["tokens_per_sec"] = j["tokens_per_s"]; j.erase("tokens_per_s"); }},
      {"total_bytes", [](json& j) { j["memory_per_stage"][1].erase("total_bytes"); }},
      {"memory_per_stage", [](json& j) { j.erase("memory_per_stage"); }},
  };
  for (const Case& c : cases) {
    const Plan edited = with_prediction(p, c.edit);
    EXPECT_EQ(edited.plan_hash(), p.plan_hash()) << "the prediction is not hashed: the record still matches";
    auto rows = compare_rows(edited, rec);
    ASSERT_FALSE(rows.is_ok()) << c.key;
    EXPECT_EQ(rows.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(has(rows.status(), c.key)) << rows.status().message();
    EXPECT_TRUE(has(rows.status(), "re-create it with this `loom plan`")) << rows.status().message();
    // The regression case of such a plan gets the error (no figures).
    auto figures = cli::case_figures(edited, rec);
    ASSERT_FALSE(figures.is_ok()) << c.key;
    EXPECT_TRUE(has(figures.status(), c.key)) << figures.status().message();
  }
  Plan none = p;
  none.prediction_json = "{}";
  EXPECT_TRUE(has(compare_rows(none, rec).status(), "has no prediction"));
}

TEST(Figures, APredictionOfZeroIsNeverZeroError) {
  EXPECT_EQ(relative_error(0, 0), 0);
  EXPECT_EQ(relative_error(2, 2), 0);
  EXPECT_DOUBLE_EQ(relative_error(2, 3), 0.5);
  EXPECT_DOUBLE_EQ(relative_error(2, 1), -0.5);
  EXPECT_TRUE(std::isinf(relative_error(0, 0.1)));
  EXPECT_GT(relative_error(0, 0.1), 0);
  EXPECT_TRUE(std::isnan(relative_error(kNotMeasured, 1)));
  EXPECT_TRUE(std::isnan(relative_error(1, kNotMeasured)));
  ComparisonRow row{"dp_comm", "DP communication (exposed)", "s", 0.0, 0.02};
  EXPECT_FALSE(std::isfinite(row.rel_error()));
  cli::Figure f{0.0, 0.02};
  EXPECT_FALSE(std::isfinite(f.rel_error())) << "regress check fails a non-finite error";
  // A plan whose prediction says 0 for a phase the run measured: an infinite row.
  const Plan p = with_prediction(sample_plan(), [](json& j) { j["phases"]["optimizer_s"] = 0.0; });
  auto figures = cli::case_figures(p, sample_record(p));
  ASSERT_TRUE(figures.is_ok()) << figures.status().to_string();
  EXPECT_TRUE(std::isinf(figures->at("optimizer").rel_error()));
}

TEST(Phases, FlattenAndJsonRoundTrip) {
  StepPhases p;
  double x = 0.5;
  for (const PhaseField& f : kPhaseFields) p.*f.member = (x += 0.25);
  p.tp_comm_exposed_s = kNotMeasured;
  const StepPhases q = unflatten(flatten(p));
  auto back = parse_phases(phases_to_json(p), "phases", "fix it");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  for (const PhaseField& f : kPhaseFields) {
    if (std::isnan(p.*f.member)) {
      EXPECT_TRUE(std::isnan(q.*f.member) && std::isnan((*back).*f.member)) << f.key;
    } else {
      EXPECT_EQ(q.*f.member, p.*f.member) << f.key;
      EXPECT_EQ((*back).*f.member, p.*f.member) << f.key;
    }
  }
  EXPECT_EQ(json::parse(phases_to_json(p))["tp_comm_exposed_s"], nullptr);
  StepPhases sum;
  sum += p;
  sum += p;
  EXPECT_DOUBLE_EQ((sum / 2).forward_s, p.forward_s);
  EXPECT_DOUBLE_EQ(p.compute_s(), p.forward_s + p.backward_s);
  json j = json::parse(phases_to_json(p));
  j.erase("data_wait_s");
  auto missing = parse_phases(j.dump(), "run.json: phases", "re-run it");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_TRUE(has(missing.status(), "run.json: phases.data_wait_s is missing; re-run it")) << missing.status().message();
}

TEST(RunRecordPhases, RoundTripAndVersionOneStillReads) {
  const Plan p = sample_plan();
  const RunRecord rec = sample_record(p);
  const std::string text = run_record_to_json(rec);
  const json j = json::parse(text);
  EXPECT_EQ(j["schema_version"], 2);
  for (const PhaseField& f : kPhaseFields) EXPECT_TRUE(j["phases"].contains(f.key)) << f.key;
  EXPECT_EQ(j["phases"]["tp_comm_exposed_s"], nullptr) << "not measured by the executor";
  auto back = parse_run_record(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->phases.forward_s, rec.phases.forward_s);
  EXPECT_EQ(back->phases.pipeline_wait_s, rec.phases.pipeline_wait_s);
  EXPECT_EQ(back->phases.dp_comm_exposed_s, rec.phases.dp_comm_exposed_s);
  EXPECT_TRUE(std::isnan(back->phases.tp_comm_exposed_s));
  EXPECT_EQ(run_record_to_json(*back), text);

  // A version-2 record with a phase missing is incomplete, not 0.
  json damaged = j;
  damaged["phases"].erase("pipeline_wait_s");
  auto refused = parse_run_record(damaged.dump(), "run.json");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_TRUE(has(refused.status(), "run.json: phases.pipeline_wait_s is missing")) << refused.status().message();

  // Version 1: pp_comm_s (every pipeline wait) and dp_comm_s map to the typed fields.
  json v1 = j;
  v1["schema_version"] = 1;
  v1["phases"] = {{"forward_s", 0.11},  {"backward_s", 0.22}, {"pp_comm_s", 0.33},
                  {"dp_comm_s", 0.044}, {"optimizer_s", 0.055}, {"data_wait_s", 0.0066}};
  auto old = parse_run_record(v1.dump(), "old.json");
  ASSERT_TRUE(old.is_ok()) << old.status().to_string();
  EXPECT_EQ(old->schema_version, 1);
  EXPECT_EQ(old->phases.forward_s, 0.11);
  EXPECT_EQ(old->phases.backward_s, 0.22);
  EXPECT_EQ(old->phases.pipeline_wait_s, 0.33);
  EXPECT_EQ(old->phases.dp_comm_exposed_s, 0.044);
  EXPECT_EQ(old->phases.optimizer_s, 0.055);
  EXPECT_EQ(old->phases.data_wait_s, 0.0066);
  EXPECT_TRUE(std::isnan(old->phases.tp_comm_exposed_s));
  auto rows = compare_rows(p, *old);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  EXPECT_EQ(json::parse(run_record_to_json(*old))["schema_version"], 2) << "written as the current version";
  json v3 = j;
  v3["schema_version"] = 3;
  auto newer = parse_run_record(v3.dump(), "new.json");
  ASSERT_FALSE(newer.is_ok());
  EXPECT_TRUE(has(newer.status(), "schema_version 3 is not supported")) << newer.status().message();
}

// --- op by op ------------------------------------------------------------------

TraceEvent op_event(int32_t id, const std::string& name, const std::string& kind, int pid, double dur_us) {
  TraceEvent e;
  e.name = name;
  e.cat = kind;
  e.pid = pid;
  e.dur_us = dur_us;
  e.op_id = id;
  e.stage = 0;
  return e;
}

Trace trace(const std::string& kind, const std::string& program) {
  Trace t;
  t.kind = kind;
  t.program_hash = program;
  return t;
}

TEST(OpCompare, JoinsOnOpIdsAveragingTheRanksThatRunAnOp) {
  Trace pred = trace("predicted", "aaaa");
  pred.events = {op_event(0, "fwd s0 c0 mb0", "fwd", 0, 100), op_event(1, "bwd s0 c0 mb0", "bwd", 0, 200),
                 op_event(2, "optimizer s0", "optimizer", 0, 50)};
  Trace meas = trace("measured", "aaaa");
  for (int rank = 0; rank < 2; ++rank) {
    meas.events.push_back(op_event(2, "optimizer s0", "optimizer", rank, 40 + 20 * rank));
    meas.events.push_back(op_event(0, "fwd s0 c0 mb0", "fwd", rank, 100 + 100 * rank));
    meas.events.push_back(op_event(1, "bwd s0 c0 mb0", "bwd", rank, 210));
    meas.events.push_back(op_event(-1, "nested slice", "fwd", rank, 5));  // not a program op
  }
  auto c = compare_ops(pred, meas, "pred.json", "meas.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->program_hash, "aaaa");
  EXPECT_TRUE(c->note.empty());
  ASSERT_EQ(c->rows.size(), 3u);
  EXPECT_EQ(c->rows[0].name, "fwd s0 c0 mb0");
  EXPECT_EQ(c->rows[0].ranks, 2);
  EXPECT_EQ(c->rows[0].measured_us, 150);
  EXPECT_EQ(c->rows[0].measured_max_us, 200);
  EXPECT_DOUBLE_EQ(c->rows[0].rel_error(), 0.5);
  EXPECT_EQ(c->rows[2].measured_us, 50);
  auto top = largest_differences(*c, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0]->op_id, 0);
  EXPECT_EQ(top[1]->op_id, 1);
  ASSERT_EQ(c->kinds.size(), 3u);
  EXPECT_EQ(c->kinds[0].kind, "fwd");
  EXPECT_EQ(c->kinds[1].kind, "bwd");
  EXPECT_EQ(c->kinds[2].kind, "optimizer");
  EXPECT_EQ(c->kinds[2].measured_us, 50);

  // An older trace without a program hash still joins, with a note.
  Trace old = meas;
  old.program_hash.clear();
  auto o = compare_ops(pred, old, "pred.json", "old.json");
  ASSERT_TRUE(o.is_ok()) << o.status().to_string();
  EXPECT_NE(o->note.find("old.json has no program hash"), std::string::npos) << o->note;
}

TEST(OpCompare, RefusesTracesThatAreNotOfTheSameProgram) {
  Trace pred = trace("predicted", "aaaa");
  pred.events = {op_event(0, "fwd s0 c0 mb0", "fwd", 0, 100), op_event(1, "bwd s0 c0 mb0", "bwd", 0, 200)};
  Trace meas = trace("measured", "bbbb");
  meas.events = {op_event(0, "fwd s0 c0 mb0", "fwd", 0, 100), op_event(1, "bwd s0 c0 mb0", "bwd", 0, 200)};
  auto other = compare_ops(pred, meas, "pred.json", "meas.json");
  ASSERT_FALSE(other.is_ok());
  EXPECT_TRUE(has(other.status(), "different programs")) << other.status().message();
  EXPECT_TRUE(has(other.status(), "pred.json is of program aaaa")) << other.status().message();
  EXPECT_TRUE(has(other.status(), "meas.json of program bbbb")) << other.status().message();

  meas.program_hash = "aaaa";
  meas.events.pop_back();
  meas.events.push_back(op_event(7, "grad_sync s0 c0 b0", "grad_sync", 0, 10));
  auto unmatched = compare_ops(pred, meas, "pred.json", "meas.json");
  ASSERT_FALSE(unmatched.is_ok());
  EXPECT_TRUE(has(unmatched.status(), "1 predicted op(s) have no measured event (bwd s0 c0 mb0)"))
      << unmatched.status().message();
  EXPECT_TRUE(has(unmatched.status(), "1 measured op(s) are not in the predicted trace (grad_sync s0 c0 b0 (op 7))"))
      << unmatched.status().message();

  meas.events = {op_event(0, "fwd s0 c0 mb0", "fwd", 0, 100), op_event(1, "bwd s0 c0 mb1", "bwd", 0, 200)};
  auto renamed = compare_ops(pred, meas, "pred.json", "meas.json");
  ASSERT_FALSE(renamed.is_ok());
  EXPECT_TRUE(has(renamed.status(), "op 1 is 'bwd s0 c0 mb0' in pred.json but 'bwd s0 c0 mb1' in meas.json"))
      << renamed.status().message();

  Trace empty = trace("measured", "aaaa");
  empty.events = {op_event(-1, "slice", "fwd", 0, 1)};
  auto none = compare_ops(pred, empty, "pred.json", "empty.json");
  ASSERT_FALSE(none.is_ok());
  EXPECT_TRUE(has(none.status(), "empty.json has no program ops")) << none.status().message();
  auto swapped = compare_ops(meas, pred, "meas.json", "pred.json");
  ASSERT_FALSE(swapped.is_ok());
  EXPECT_TRUE(has(swapped.status(), "meas.json is a measured trace")) << swapped.status().message();
}

TEST(OpCompare, TheProgramHashRoundTripsThroughTheTrace) {
  Trace t = trace("predicted", "0123456789abcdef");
  t.plan_hash = "fedcba9876543210";
  t.events = {op_event(0, "fwd s0 c0 mb0", "fwd", 0, 100)};
  auto back = parse_trace(trace_to_json(t));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->program_hash, t.program_hash);
  EXPECT_EQ(back->plan_hash, t.plan_hash);
  EXPECT_EQ(json::parse(trace_to_json(t))["otherData"]["program_hash"], "0123456789abcdef");
  // Older traces have none.
  auto old = parse_trace(R"({"traceEvents": [], "otherData": {"kind": "measured", "plan_hash": "x"}})");
  ASSERT_TRUE(old.is_ok());
  EXPECT_TRUE(old->program_hash.empty());

  // The predicted trace carries the plan's program hash.
  const Plan p = sample_plan();
  TrainSpec tr = p.train;
  Evaluator eval(p.model, p.hw, tr, SimOptions{});
  auto r = simulate_layout(eval, p.layout);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Trace pt = predicted_trace(*r, p.plan_hash());
  EXPECT_EQ(pt.program_hash, program_hash(p.program_config()));
  EXPECT_FALSE(pt.program_hash.empty());
}

// torchtitan's FSDP under a pipeline syncs once a step: the engine times the
// ZeRO-1 form (priced_layout), not the plan's ZeRO-3 program. Its predicted
// trace says so by its program hash, and `compare --ops` against a run of
// the plan's program refuses to join the two instead of pairing ops by id.
TEST(CompareOps, FsdpOncePredictedTraceIsOfThePricedProgram) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  SimOptions opt;
  opt.pp_fsdp_once = true;
  opt.loom_executor = false;
  Evaluator eval(testing::load_model_or_die("gpt2-124m"), testing::load_hw_or_die("dgx-h100"), t, opt);
  auto l = parse_layout("dp=4,pp=2,zero=3,micro=2");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  auto r = simulate_layout(eval, *l);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Plan p = make_plan(eval, *r, 8);
  EXPECT_EQ(p.layout.zero, 3);
  const Trace pt = predicted_trace(*r, p.plan_hash());
  EXPECT_NE(pt.program_hash, program_hash(p.program_config()));
  EXPECT_EQ(pt.program_hash, program_hash(r->program.config));
  EXPECT_EQ(r->program.config.zero, 1);
  EXPECT_TRUE(r->program.config.syncs_after_backward);

  // A measured trace of the plan's own program (what `loom execute` writes).
  Trace meas = pt;
  meas.kind = "measured";
  meas.program_hash = program_hash(p.program_config());
  auto c = compare_ops(pt, meas, "pred.json", "meas.json");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("different programs"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Peak memory by class: the rank with the largest peak, its pipeline stage,
// what was live at it against that stage's predicted terms; a record without
// the breakdown has none; the breakdown round-trips and a malformed one is
// an error naming the field.
TEST(MemoryByClass, TheRankWithTheLargestPeakAgainstItsStage) {
  const Plan p = sample_plan();  // dp2 tp2 pp2: ranks 4-7 are stage 1 (tp-cp-ep-dp-pp)
  RunRecord rec = sample_record(p);
  EXPECT_FALSE(compare_memory(p, rec).available) << "an older record: no breakdown";
  rec.peak_memory_bytes = {1e9, 1e9, 1e9, 1e9, 1e9, 3e9, 1e9, 1e9};
  rec.peak_memory_by_class.assign(8, MemoryBreakdown{});
  rec.peak_memory_by_class[5][size_t(MemoryClass::kActivations)] = 2e9;
  rec.peak_memory_by_class[5][size_t(MemoryClass::kWeights)] = 1e9;
  const MemoryComparison m = compare_memory(p, rec);
  ASSERT_TRUE(m.available);
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.stage, 1);
  ASSERT_EQ(m.rows.size(), size_t(kNumMemoryClasses));
  const json stage = json::parse(p.prediction_json)["memory_per_stage"][1];
  EXPECT_EQ(m.rows[size_t(MemoryClass::kActivations)].name, "activations");
  EXPECT_EQ(m.rows[size_t(MemoryClass::kActivations)].measured, 2e9);
  EXPECT_EQ(m.rows[size_t(MemoryClass::kActivations)].predicted, stage["activations_bytes"].get<double>());
  EXPECT_EQ(m.rows[size_t(MemoryClass::kWorkspace)].predicted, stage["workspace_bytes"].get<double>());
  EXPECT_TRUE(std::isnan(m.rows[size_t(MemoryClass::kOther)].predicted)) << "no term for untagged buffers";

  // Written and read back as it was.
  auto back = parse_run_record(run_record_to_json(rec));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->peak_memory_by_class.size(), 8u);
  EXPECT_EQ(back->peak_memory_by_class[5], rec.peak_memory_by_class[5]);
  // One entry per rank, numbers of bytes >= 0.
  json j = json::parse(run_record_to_json(rec));
  j["peak_memory_by_class"].erase(0);
  auto short_one = parse_run_record(j.dump());
  ASSERT_FALSE(short_one.is_ok());
  EXPECT_TRUE(has(short_one.status(), "peak_memory_by_class")) << short_one.status().to_string();
  j = json::parse(run_record_to_json(rec));
  j["peak_memory_by_class"][2]["grads"] = -1;
  auto negative = parse_run_record(j.dump());
  ASSERT_FALSE(negative.is_ok());
  EXPECT_TRUE(has(negative.status(), "peak_memory_by_class.grads")) << negative.status().to_string();
}

}  // namespace
}  // namespace loom
