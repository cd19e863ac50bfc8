// Layout sweeps (validation/layout_sweeps.json, sim/layout_sweeps.h): the
// rank statistics against hand calculations, the bookkeeping of a sweep
// (places, pick, regret, fit verdicts) against a sweep whose "measurements"
// are built from Loom's own predictions, the file format's errors, and the
// shipped sweeps against their pins (docs/validation.md, "Layout sweeps").
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/resources.h"
#include "sim/layout_sweeps.h"

namespace loom {
namespace {

TEST(LayoutSweeps, KendallTauBMatchesHandCounts) {
  // One swapped pair of six: 5 concordant, 1 discordant: (5 - 1) / 6.
  EXPECT_NEAR(kendall_tau_b({1, 2, 3, 4}, {1, 3, 2, 4}), 4.0 / 6.0, 1e-12);
  EXPECT_NEAR(kendall_tau_b({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
  // Ties: pairs (2,3) tied in x, (3,4) tied in y, the other four concordant:
  // tau-b = 4 / sqrt((4 + 1) * (4 + 1)) = 0.8 (scipy.stats.kendalltau gives 0.8).
  EXPECT_NEAR(kendall_tau_b({1, 2, 2, 3}, {1, 2, 3, 3}), 0.8, 1e-12);
  EXPECT_EQ(kendall_tau_b({1}, {2}), 0.0);
  EXPECT_EQ(kendall_tau_b({1, 1, 1}, {1, 2, 3}), 0.0);
}

TEST(LayoutSweeps, SpearmanRhoUsesAverageRanks) {
  // y's ranks with the tie shared: 1, 2, 3.5, 5, 3.5; deviations from 3:
  // x -2 -1 0 1 2, y -2 -1 0.5 2 0.5: sxy 8, sxx 10, syy 9.5 -> 8 / sqrt(95)
  // = 0.82078 (scipy.stats.spearmanr gives 0.8208).
  EXPECT_NEAR(spearman_rho({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}), 8.0 / std::sqrt(95.0), 1e-12);
  EXPECT_NEAR(spearman_rho({3, 1, 2}, {30, 10, 20}), 1.0, 1e-12);
  EXPECT_EQ(spearman_rho({1, 2}, {5, 5}), 0.0);
}

std::string sweep_json(const std::string& settings_extra, const std::string& runs, const std::string& pins =
                           R"({"min_kendall_tau": 0.5, "max_pick_regret": 0.01, "max_wrong_fit_verdicts": 1})") {
  return R"({"sweeps": [{"id": "S", "source": "test", "settings": {"gpu": "A100", "model": "llama-3-8b",
    "hw": "dgx-a100-80gb", "gpus": 16, "seq": 2048, "precision": "bf16")" +
         settings_extra + R"(}, "pins": )" + pins + R"(, "runs": [)" + runs + "]}]}";
}

// A sweep whose measured steps are Loom's own, 30% slower, in Loom's order:
// the order is perfect, the pick is the measured best, and the fit verdicts
// are what the file says ran out of memory.
TEST(LayoutSweeps, ASweepMeasuredAsPredictedRanksPerfectly) {
  const std::vector<std::string> layouts = {
      "dp=16,tp=1,pp=1,zero=1,micro=1", "dp=8,tp=2,pp=1,zero=1,micro=1,sp=1", "dp=4,tp=4,pp=1,zero=1,micro=1,sp=1",
      "dp=2,tp=8,pp=1,zero=1,micro=1,sp=1", "dp=4,tp=2,pp=2,zero=1,micro=1,sp=1"};
  std::string runs;
  for (const std::string& l : layouts)
    runs += std::string(runs.empty() ? "" : ", ") + R"({"layout": ")" + l +
            R"(", "global_batch": 128, "step_time_s": 1})";
  auto first = parse_layout_sweeps(sweep_json("", runs), ".");
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  const SweepPrediction probe = predict_sweep((*first)[0]);
  ASSERT_TRUE(probe.error.empty()) << probe.error;
  LayoutSweep sweep = (*first)[0];
  for (size_t i = 0; i < layouts.size(); ++i) {
    ASSERT_TRUE(probe.runs[i].fits) << layouts[i];
    sweep.runs[i].measured_step_s = 1.3 * probe.runs[i].predicted;
  }
  // A sixth layout that ran out of memory: 8B without recompute at 8
  // sequences a micro-batch does not fit 80 GB, and Loom says so.
  sweep.runs.push_back(SweepRun{"dp=16,tp=1,pp=1,zero=1,micro=8,recompute=none", 128, 0, true, 0});
  const SweepPrediction p = predict_sweep(sweep);
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.ranked, 5);
  EXPECT_NEAR(p.kendall_tau, 1.0, 1e-12);
  EXPECT_NEAR(p.spearman, 1.0, 1e-12);
  EXPECT_EQ(p.pick, p.measured_best);
  EXPECT_EQ(p.pick_that_ran, p.measured_best);
  // The sixth is predicted faster than every layout that fits (larger
  // GEMMs, no recompute), and still not Loom's pick: a pick must fit.
  ASSERT_EQ(p.runs.size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_LT(p.runs[5].predicted, p.runs[i].predicted) << layouts[i];
  EXPECT_EQ(p.measured_best_place, 1);
  EXPECT_NEAR(p.pick_regret, 0.0, 1e-12);
  EXPECT_EQ(p.fit_right, 6);
  EXPECT_EQ(p.fit_wrong, 0);
  EXPECT_TRUE(p.holds());
  // The same sixth layout published as having run: one wrong verdict, within
  // the pin of one; a second wrong one leaves it.
  sweep.runs.back() = SweepRun{"dp=16,tp=1,pp=1,zero=1,micro=8,recompute=none", 128, 5.0, false, 0};
  SweepPrediction q = predict_sweep(sweep);
  EXPECT_EQ(q.fit_wrong, 1);
  EXPECT_TRUE(q.holds());
  sweep.runs[0].oom = true;  // Loom's fit verdict for run 1 is now wrong too
  q = predict_sweep(sweep);
  EXPECT_EQ(q.fit_wrong, 2);
  EXPECT_FALSE(q.holds());
  // Reversing the measured order reverses tau and makes the pick the slowest.
  LayoutSweep reversed = (*first)[0];
  for (size_t i = 0; i < layouts.size(); ++i) reversed.runs[i].measured_step_s = 1.0 / probe.runs[i].predicted;
  const SweepPrediction r = predict_sweep(reversed);
  EXPECT_NEAR(r.kendall_tau, -1.0, 1e-12);
  EXPECT_EQ(r.measured_best_place, 5);
  EXPECT_GT(r.pick_regret, 0.0);
  EXPECT_FALSE(r.holds());
}

TEST(LayoutSweeps, BadSweepsNameTheField) {
  const std::string run = R"({"layout": "dp=16", "global_batch": 64, "step_time_s": 1})";
  const std::string two = run + ", " + run;
  ASSERT_TRUE(parse_layout_sweeps(sweep_json("", two), ".").is_ok());
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto r = parse_layout_sweeps(text, ".");
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  expect_error(sweep_json(R"(, "layout": "dp=16")", two), "settings.layout");
  expect_error(sweep_json(R"(, "global_batch": 64)", two), "settings.global_batch");
  expect_error(sweep_json("", run), "at least two");
  expect_error(sweep_json("", run + R"(, {"layout": "dp=16", "global_batch": 64})"), "either \"step_time_s\"");
  expect_error(sweep_json("", run + R"(, {"layout": "dp=16", "global_batch": 64, "step_time_s": 1, "oom": true})"),
               "either \"step_time_s\"");
  expect_error(sweep_json("", run + R"(, {"layout": "dp=16", "global_batch": 64, "step_time_s": -2})"),
               "step_time_s");
  expect_error(sweep_json("", run + R"(, {"layout": "dp=16", "global_batch": 64, "oom": true, "memory_gib": -1})"),
               "memory_gib");
  expect_error(sweep_json("", two, R"({"min_kendall_tau": 2, "max_pick_regret": 0, "max_wrong_fit_verdicts": 0})"),
               "min_kendall_tau lies in");
  expect_error(sweep_json("", two, R"({"min_kendall_tau": 0})"), "max_pick_regret");
  // The settings go through the table's own row checks.
  expect_error(sweep_json(R"(, "cross_entropy": "te")", two), "cross_entropy_source is missing");
  expect_error(R"({"runs": []})", "\"sweeps\" array");
  // A misspelt field is refused, not dropped.
  expect_error(sweep_json("", run + R"(, {"layout": "dp=16", "global_batch": 64, "step_time_s": 1, "memory_gb": 5})"),
               "unknown field 'memory_gb'");
  expect_error(sweep_json("", two, R"({"min_kendall_tau": 0, "max_pick_regret": 0, "max_wrong_fit_verdicts": 0,
                                      "max_regret": 1})"),
               "unknown field 'max_regret'");
  expect_error(sweep_json("", two, R"({"min_kendall_tau": 0, "max_pick_regret": 0, "max_wrong_fit_verdicts": 3})"),
               "max_wrong_fit_verdicts lies between");
  // An order needs two layouts that ran.
  expect_error(sweep_json("", run + R"(, {"layout": "dp=8", "global_batch": 64, "oom": true})"),
               "at least two layouts");
  // Two sweeps with one id.
  std::string twice = sweep_json("", two);
  const std::string one = twice.substr(twice.find("{\"id\""), twice.rfind("]}") - twice.find("{\"id\""));
  expect_error(R"({"sweeps": [)" + one + ", " + one + "]}", "a second sweep with id 'S'");
}

TEST(LayoutSweeps, ARunThatCannotBePredictedIsAnError) {
  auto s = parse_layout_sweeps(
      sweep_json("", R"({"layout": "dp=16", "global_batch": 64, "step_time_s": 1},
                      {"layout": "dp=3,tp=5", "global_batch": 64, "step_time_s": 1})"),
      ".");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  const SweepPrediction p = predict_sweep((*s)[0]);
  EXPECT_NE(p.error.find("dp=3,tp=5"), std::string::npos) << p.error;
  EXPECT_FALSE(p.holds());
}

// The shipped sweeps hold their pins; the figures are in docs/validation.md.
TEST(LayoutSweeps, ShippedSweepsHoldTheirPins) {
  auto path = find_resource("validation/layout_sweeps.json");
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  auto sweeps = load_layout_sweeps(*path);
  ASSERT_TRUE(sweeps.is_ok()) << sweeps.status().to_string();
  ASSERT_FALSE(sweeps->empty());
  for (const LayoutSweep& sw : *sweeps) {
    const SweepPrediction p = predict_sweep(sw);
    EXPECT_TRUE(p.error.empty()) << sw.id << ": " << p.error;
    EXPECT_GE(p.kendall_tau, sw.min_kendall_tau) << sw.id;
    EXPECT_LE(p.pick_regret, sw.max_pick_regret) << sw.id;
    EXPECT_LE(p.fit_wrong, sw.max_wrong_fit_verdicts) << sw.id;
    EXPECT_TRUE(p.holds()) << sw.id;
  }
}

// docs/validation.md: on BigScience's 02-25 sweep, Loom's pick ran out of
// memory; any --memory-headroom from 0.072 to 0.25 gets all 24 fit verdicts
// right (#21 needs 79.7 of 85.9 GB; #12, the largest that ran, 63.7), and
// Loom's pick becomes #18, which ran.
TEST(LayoutSweeps, AMemoryHeadroomCallsEveryBloomVerdictRight) {
  auto path = find_resource("validation/layout_sweeps.json");
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  auto sweeps = load_layout_sweeps(*path);
  ASSERT_TRUE(sweeps.is_ok()) << sweeps.status().to_string();
  const LayoutSweep* bloom = nullptr;
  for (const LayoutSweep& sw : *sweeps)
    if (sw.id == "BLOOM-2022-02-25") bloom = &sw;
  ASSERT_NE(bloom, nullptr);
  ASSERT_EQ(bloom->runs.size(), 24u);
  const SweepPrediction none = predict_sweep(*bloom);
  EXPECT_TRUE(bloom->runs[size_t(none.pick)].oom) << "pick #" << none.pick + 1;
  EXPECT_EQ(none.fit_wrong, 2);
  for (double headroom : {0.08, 0.1, 0.25}) {
    LayoutSweep sw = *bloom;
    sw.base.memory_headroom = headroom;
    const SweepPrediction p = predict_sweep(sw);
    EXPECT_EQ(p.fit_wrong, 0) << headroom;
    EXPECT_EQ(p.pick, 17) << headroom;  // #18
    EXPECT_EQ(p.pick, p.pick_that_ran) << headroom;
  }
  for (double headroom : {0.07, 0.26}) {
    LayoutSweep sw = *bloom;
    sw.base.memory_headroom = headroom;
    EXPECT_GT(predict_sweep(sw).fit_wrong, 0) << headroom;
  }
}

// The summary's lines end where they should whatever Loom picks: a pick that
// ran out of memory with no layout that ran predicted to fit, and no pick.
TEST(LayoutSweeps, TheSummaryStatesAPickThatRanOutOfMemoryOrNoPick) {
  SweepPrediction p;
  p.sweep.id = "S";
  p.sweep.runs = {SweepRun{"dp=8", 8, 0, true, 0}, SweepRun{"dp=4,tp=2", 8, 2.0, false, 0}};
  p.runs.resize(2);
  p.runs[0].ok = p.runs[1].ok = true;
  p.runs[0].fits = true;   // predicted to fit, ran out of memory
  p.runs[1].fits = false;  // predicted not to fit, ran
  p.pick = 0;
  p.fit_wrong = 2;
  std::string text = format_sweeps_markdown({p});
  EXPECT_NE(text.find("* Loom's pick, #1, ran out of memory. None of the layouts that ran is predicted to fit.\n"
                      "* Fit verdicts: 0 right, 2 wrong"),
            std::string::npos)
      << text;
  p.runs[0].fits = false;
  p.pick = -1;
  text = format_sweeps_markdown({p});
  EXPECT_NE(text.find("* Loom predicts none of these layouts to fit.\n* Fit verdicts"), std::string::npos) << text;
}

}  // namespace
}  // namespace loom
