// The validation table (validation/published_runs.json): every published
// run that is not pending is predicted, predicted to fit (it ran), and within
// the tolerance its row states, so that any change to the simulator that
// moves a prediction shows here. The table, the errors and the gaps are in
// docs/validation.md (`loom validate` prints it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/resources.h"
#include "sim/validation.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

// The shipped table (validation/published_runs.json).
void load_shipped_runs(std::vector<PublishedRun>* runs) {
  auto path = find_resource("validation/published_runs.json");
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  auto loaded = load_published_runs(*path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  *runs = std::move(loaded).value();
}

// The shipped rows with these ids, predicted, in the table's order.
void predict_shipped(std::initializer_list<std::string> ids, std::vector<RunPrediction>* rows) {
  std::vector<PublishedRun> runs;
  ASSERT_NO_FATAL_FAILURE(load_shipped_runs(&runs));
  for (const PublishedRun& r : runs)
    if (std::find(ids.begin(), ids.end(), r.id) != ids.end()) rows->push_back(predict_run(r));
  ASSERT_EQ(rows->size(), ids.size());
}

TEST(ValidationTable, EveryPublishedRunHoldsItsPinnedTolerance) {
  std::vector<PublishedRun> runs;
  ASSERT_NO_FATAL_FAILURE(load_shipped_runs(&runs));
  ASSERT_GE(runs.size(), 20u) << "the table must hold at least 20 published runs";
  int pinned = 0;
  std::vector<RunPrediction> rows;
  for (const PublishedRun& r : runs) {
    RunPrediction p = predict_run(r);
    rows.push_back(p);
    if (!r.pending.empty()) continue;
    ++pinned;
    ASSERT_TRUE(p.ok) << r.id << ": " << p.error;
    EXPECT_TRUE(p.fits) << r.id << " ran, so it must be predicted to fit (" << p.layout << ")";
    EXPECT_LE(std::fabs(p.rel_error), r.tolerance)
        << r.id << ": predicted " << p.predicted << " vs published " << r.published << " (" << 100 * p.rel_error
        << "%), pinned at " << 100 * r.tolerance << "%";
  }
  EXPECT_GE(pinned, 20);
  std::printf("%s", format_validation_markdown(rows).c_str());
}

// Slower hardware never predicts a faster run: with the shipped profiles made
// 10% slower in one respect at a time (every compute rate: the GEMM tables,
// the per-shape grid, the FP8 best, the power caps, the attention kernels;
// HBM bandwidth; the NICs; NVLink), or with a power cap 10% under the short-
// run best added to every profile, no row's predicted throughput rises (its
// error in throughput terms does not grow), searched rows included: every
// layout is at least as slow, so the best one is too. Stop 52 found a cap
// that made some GEMMs faster (ComputeModel.ThePowerCapOnlyBoundsTheRate):
// this holds the whole path to the property.
TEST(ValidationTable, SlowerHardwareNeverPredictsAFasterRun) {
  std::vector<PublishedRun> runs;
  ASSERT_NO_FATAL_FAILURE(load_shipped_runs(&runs));
  std::map<std::string, double> base;
  std::set<std::string> profiles;
  for (const PublishedRun& r : runs) {
    const RunPrediction p = predict_run(r);
    ASSERT_TRUE(p.ok) << r.id << ": " << p.error;
    if (p.fits) base[r.id] = p.rel_error;
    profiles.insert(r.hw);
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("loom_slower_hw_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  auto scale_table = [](Json& table, double f) {
    for (Json& e : table) e["efficiency"] = e["efficiency"].get<double>() * f;
  };
  std::function<void(Json&, double)> scale_all = [&](Json& x, double f) {
    if (x.is_array()) for (Json& y : x) scale_all(y, f);
    else if (x.is_number()) x = x.get<double>() * f;
  };
  using Perturb = std::function<void(Json&)>;
  const std::vector<std::pair<std::string, Perturb>> kinds = {
      {"compute",
       [&](Json& p) {
         Json& a = p["accelerator"];
         scale_table(a["gemm_efficiency"], 0.9);
         if (a.contains("gemm_shapes"))
           for (auto& [k, v] : a["gemm_shapes"].items())
             if (k.find("tflops") != std::string::npos && k.find("measured") == std::string::npos) scale_all(v, 0.9);
         if (a.contains("fp8_gemm_best_efficiency"))
           a["fp8_gemm_best_efficiency"] = a["fp8_gemm_best_efficiency"].get<double>() * 0.9;
         if (a.contains("sustained_gemm_tflops"))
           for (auto& [k, v] : a["sustained_gemm_tflops"].items())
             if (v.is_number()) v = v.get<double>() * 0.9;
         if (a.contains("attention_efficiency")) scale_table(a["attention_efficiency"], 0.9);
         if (a.contains("attention_kernels"))
           for (auto& [k, v] : a["attention_kernels"].items()) scale_table(v["attention_efficiency"], 0.9);
       }},
      {"power cap",
       [&](Json& p) {
         Json& a = p["accelerator"];
         double best = 0;
         for (const Json& e : a["gemm_efficiency"]) best = std::max(best, e["efficiency"].get<double>());
         Json& cap = a["sustained_gemm_tflops"];
         const double bf16 = cap.contains("bf16") ? cap["bf16"].get<double>()
                                                  : best * a["peak_bf16_tflops"].get<double>();
         cap["bf16"] = 0.9 * bf16;
         if (a.contains("peak_fp8_tflops") && a["peak_fp8_tflops"].get<double>() > 0) {
           const double fp8_best = a.contains("fp8_gemm_best_efficiency") ? a["fp8_gemm_best_efficiency"].get<double>() : best;
           const double fp8 = cap.contains("fp8") ? cap["fp8"].get<double>()
                                                  : fp8_best * a["peak_fp8_tflops"].get<double>();
           cap["fp8"] = 0.9 * fp8;
         }
       }},
      {"HBM", [&](Json& p) { p["accelerator"]["memory_bw_gb_per_s"] = p["accelerator"]["memory_bw_gb_per_s"].get<double>() * 0.9; }},
      {"NICs", [&](Json& p) { p["network"]["nic_bw_gbit_per_s"] = p["network"]["nic_bw_gbit_per_s"].get<double>() * 0.9; }},
      {"NVLink",
       [&](Json& p) {
         Json& n = p["node"];
         n["intra_bw_gb_per_s"] = n["intra_bw_gb_per_s"].get<double>() * 0.9;
         if (n.contains("intra_ring_busbw_gb_per_s"))
           n["intra_ring_busbw_gb_per_s"] = n["intra_ring_busbw_gb_per_s"].get<double>() * 0.9;
       }},
  };
  for (const auto& [kind, perturb] : kinds) {
    SCOPED_TRACE(kind);
    std::map<std::string, std::string> path_of;
    for (const std::string& name : profiles) {
      auto src = find_resource("hwprofiles/" + name + ".json");
      ASSERT_TRUE(src.is_ok()) << src.status().to_string();
      auto text = read_text_file(*src);
      ASSERT_TRUE(text.is_ok());
      auto j = parse_json(*text, name);
      ASSERT_TRUE(j.is_ok());
      perturb(*j);
      const std::filesystem::path out = dir / (name + ".json");
      std::ofstream(out) << j->dump();
      path_of[name] = out.string();
    }
    double moved = 0;
    int rows = 0;
    for (PublishedRun r : runs) {
      if (!base.count(r.id)) continue;
      r.hw = path_of[r.hw];
      const RunPrediction p = predict_run(r);
      ASSERT_TRUE(p.ok) << r.id << ": " << p.error;
      if (!p.fits) continue;  // slower hardware does not change what fits
      EXPECT_LE(p.rel_error, base[r.id] + 1e-9) << r.id << ": " << 100 * base[r.id] << "% -> " << 100 * p.rel_error << "%";
      moved += p.rel_error - base[r.id];
      ++rows;
    }
    EXPECT_GT(rows, 70);
    EXPECT_LT(moved / rows, -1e-3) << "the perturbation moved nothing";  // not vacuous
  }
  std::filesystem::remove_all(dir);
}

// Every Markdown table `loom validate` prints (docs/validation.md is its
// output) has as many separator cells as header cells; otherwise Markdown
// renders no table at all.
TEST(ValidationTable, MarkdownTablesHaveOneSeparatorPerColumn) {
  std::vector<RunPrediction> rows;
  ASSERT_NO_FATAL_FAILURE(predict_shipped({"D1", "P1"}, &rows));
  const std::string md = format_validation_markdown(rows) + "\n" + format_breakdown_markdown(rows);
  std::istringstream in(md);
  std::string line, prev;
  int tables = 0;
  while (std::getline(in, line)) {
    if (line.rfind("|---", 0) == 0) {
      ++tables;
      EXPECT_EQ(std::count(line.begin(), line.end(), '|'), std::count(prev.begin(), prev.end(), '|'))
          << "header: " << prev << "\nseparator: " << line;
    }
    prev = line;
  }
  EXPECT_EQ(tables, 3);  // the runs, the groups, the breakdown
}

// `loom validate --breakdown`: the engine's step splits into its phases (the
// parts add up to the step, within the 1% the engine's overlapped streams
// leave), and on a compute-bound row without recompute (D1: TP1 PP1, no
// recompute) the backward is about twice the forward, as a layer's backward
// GEMMs have twice its forward FLOPs.
TEST(ValidationTable, BreakdownAddsUpToTheStep) {
  std::vector<RunPrediction> rows;
  ASSERT_NO_FATAL_FAILURE(predict_shipped({"D1", "D2", "MC5", "B5"}, &rows));
  for (const RunPrediction& p : rows) {
    ASSERT_TRUE(p.ok) << p.run.id << ": " << p.error;
    const StepBreakdown& t = p.time;
    const double parts = t.forward_s + t.backward_s + t.recompute_s + t.tp_comm_s + t.ep_comm_s + t.cp_comm_s +
                         t.pp_comm_s + t.dp_comm_s + t.contention_s + t.bubble_s + t.optimizer_s;
    EXPECT_NEAR(parts / t.step_time_s, 1.0, 0.015) << p.run.id;
    if (p.run.id == "D1") {
      EXPECT_GT(t.backward_s / t.forward_s, 1.8);
      EXPECT_LT(t.backward_s / t.forward_s, 2.3);
    }
  }
  const std::string md = format_breakdown_markdown(rows);
  for (const char* id : {"| D1 |", "| D2 |", "| MC5 |", "| B5 |"}) EXPECT_NE(md.find(id), std::string::npos) << id;
  // Each row shows the closed form's step beside the engine's: D1 (no
  // pipeline, no DP overlap to price apart) has both at 11.48 s.
  EXPECT_NE(md.find("| step s | closed form s |"), std::string::npos);
  EXPECT_NE(md.find("| optimizer | memory GB |"), std::string::npos);
  for (const RunPrediction& p : rows) {
    if (p.run.id == "D1") {
      EXPECT_NEAR(p.closed_form_time.step_time_s / p.time.step_time_s, 1.0, 0.01);
    }
  }
}

// The search ranks layouts by the closed form and re-times only its top few
// with the event engine, so on the layouts of real runs the two must agree:
// every row within 10%, and every row whose stack is named (a framework
// file: Megatron-core, torchtitan) within 4%. The worst row is printed
// (stop 40: 2.6%, MC9; before stop 40 L2, P6, G1, B5 and T10-T12 were 8-13%
// apart).
//
// Known gap, pinned so that a change shows (stop 50): on the MLPerf GPT-3
// rows at scale (interleaved, 6-16 micro-batches of one a step, steps of
// 0.8-1.4 s) the engine's step is longer than the closed form's by 8.4% (P1,
// P2), 10.5% (P7) and 6.2% (P8): 0.064-0.085 s, of which 0.035-0.047 s is
// pipeline idle beyond the closed form's fill and drain and the rest exposed
// transfers and DP traffic. It comes with the overlapped DP collectives: on
// P1's layout the two agree within 0.1% at DP 1 and within 0.5% with the
// overlap off; docs/validation.md (stop 50) says what is known. Stop 51
// placed it (the SM contention of each stage's overlapped collectives paid
// along the serial chain of each chunk round) and priced the stage's first
// chunk's buckets in the closed form, which took the gaps to 6.6% (P1, P2),
// 9.7% (P7) and 5.7% (P8). Stop 52 priced their stack's buckets (Apex's,
// one a chunk under interleaving, docs/simulator.md §5): 5.2% (P1, P2),
// 9.1% (P7), 5.1% (P8) as the engine's step over the closed form's. Stop
// 53 took the engine's two side effects of the overlapped DP collectives
// apart (a scratch build switching each off): with neither, engine and
// closed form agree within 0.5% on all four (P7: 0.7099 s against 0.7064).
// NIC sharing alone adds 0.017 s (P1, P2) and 0.039 s (P7, P8) to the
// engine's step: the pipeline receives of the fill and the drain that run
// beside the receiving stage's parameter gather (at the step's start) and
// its chunks' gradient syncs (in the drain), which the closed form does not
// price (it charges NIC sharing to compute only). SM contention alone adds
// 0.047-0.053 s, of which the closed form prices 0.029 s (one stage's, not
// the chain's). A closed-form term for those receives (the forward path's
// hops inside the gather, a hop per drain block beside what is left of the
// chunk's sync) came within 2% of the engine's p2p time on these four, but
// overshot synthetic ZeRO-1 layouts (m = p, v = 2-4, four buckets a chunk)
// where the gathers, not the hops, pace the fill; it was not kept. Until
// the closed form prices both chains, these rows are held to the gap they
// show, and the worst gap is printed for the other rows apart.
const std::map<std::string, double> kKnownClosedFormGap = {{"P1", 0.06}, {"P2", 0.06}, {"P7", 0.095}, {"P8", 0.06}};
TEST(ValidationTable, ClosedFormAgreesWithTheEngineOnEveryRun) {
  std::vector<PublishedRun> runs;
  ASSERT_NO_FATAL_FAILURE(load_shipped_runs(&runs));
  double worst = 0;
  std::string worst_id;
  int known_seen = 0;
  for (const PublishedRun& r : runs) {
    RunPrediction p = predict_run(r);
    ASSERT_TRUE(p.ok) << r.id << ": " << p.error;
    if (!p.fits) continue;
    const double step = p.time.step_time_s;
    ASSERT_GT(step, 0) << r.id;
    const double gap = std::fabs(p.closed_form_time.step_time_s / step - 1);
    const auto known = kKnownClosedFormGap.find(r.id);
    if (known != kKnownClosedFormGap.end()) ++known_seen;
    else if (gap > worst) worst = gap, worst_id = r.id;
    EXPECT_LE(gap, known != kKnownClosedFormGap.end() ? known->second : r.framework.empty() ? 0.10 : 0.04)
        << r.id << " (" << p.layout << "): closed form " << p.closed_form_time.step_time_s << " s, engine " << step << " s";
  }
  // Every known-gap row is still in the table (a renamed row must not
  // leave its allowance behind).
  EXPECT_EQ(known_seen, int(kKnownClosedFormGap.size()));
  std::printf("closed form vs engine on the validation rows (the known-gap rows apart): worst %.1f%% (%s)\n",
              100 * worst, worst_id.c_str());
}

// The Megatron-family metric, against the figure NVIDIA's DGX Cloud
// benchmarking README states: Llama 3.1 8B is 4.74e14 model FLOPs per
// 8192-token sequence (attention 12 L h^2 (1 + G/H + s/h), MLP 18 L F h,
// embedding 6 V h).
TEST(ValidationTable, MegatronFlopsFormulaMatchesNvidiasFigure) {
  PublishedRun r;
  r.id = "formula";
  r.group_gpu = "H100";
  r.model = "llama-3-8b";
  r.hw = "dgx-h100";
  r.gpus = 8;
  r.global_batch = 8;
  r.seq = 8192;
  r.precision = "bf16";
  r.layout = "dp=8,zero=1";
  r.metric = RunMetric::kTflopsMegatron;
  r.published = 1;
  RunPrediction p = predict_run(r);
  ASSERT_TRUE(p.ok) << p.error;
  r.metric = RunMetric::kStepTime;
  RunPrediction step = predict_run(r);
  ASSERT_TRUE(step.ok) << step.error;
  // predicted TFLOP/s = F_seq * B / step / gpus / 1e12, so F_seq follows.
  const double f_seq = p.predicted * 1e12 * step.predicted * r.gpus / double(r.global_batch);
  EXPECT_NEAR(f_seq / 4.74e14, 1.0, 0.005);
}

// A row's layer_split says which splits its stack's release states: 32
// layers over pp=4 with v=3 are uneven chunks, which Megatron-core states
// since core_v0.13.0 and a release before core_r0.11 cannot.
TEST(ValidationTable, TheRowsReleaseBoundsTheSplitsSearched) {
  const std::string text = R"({"runs": [{"id": "X", "gpu": "H100", "model": "llama-3-8b", "hw": "dgx-h100",
    "gpus": 32, "global_batch": 64, "seq": 2048, "precision": "bf16", "framework": "megatron-core",
    "fix": "tp=8,pp=4,dp=1,schedule=interleaved,v=3,micro=1", "metric": "step_time_s",
    "published": 1.0, "tolerance": 0.1, "source": "s"}]})";
  auto runs = parse_published_runs(text, ".");
  ASSERT_TRUE(runs.is_ok()) << runs.status().to_string();
  PublishedRun row = (*runs)[0];
  RunPrediction now = predict_run(row);
  ASSERT_TRUE(now.ok) << now.error;
  EXPECT_TRUE(now.fits) << now.layout;
  EXPECT_NE(now.layout.find("v=3"), std::string::npos) << now.layout;
  row.layer_split = "equal_chunks";
  RunPrediction old = predict_run(row);
  EXPECT_FALSE(old.ok && old.fits) << old.layout;
}

TEST(ValidationTable, BadRowsNameTheField) {
  const std::string good = R"({"runs": [{"id": "X", "gpu": "H100", "model": "llama-3-8b", "hw": "dgx-h100",
    "gpus": 8, "global_batch": 8, "seq": 1024, "precision": "bf16", "layout": "dp=8", "metric": "step_time_s",
    "published": 1.0, "tolerance": 0.1, "source": "s"}]})";
  ASSERT_TRUE(parse_published_runs(good, ".").is_ok()) << parse_published_runs(good, ".").status().to_string();
  auto expect_error = [&](const std::string& from, const std::string& to, const std::string& needle) {
    std::string text = good;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    auto r = parse_published_runs(text, ".");
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  expect_error(R"("metric": "step_time_s")", R"("metric": "mfu")", "metric 'mfu' is unknown");
  expect_error(R"("layout": "dp=8")", R"("layout": "dp=8", "fix": "tp=1")", "either \"layout\"");
  expect_error(R"("published": 1.0)", R"("published": -1)", "published");
  expect_error(R"("source": "s")", R"("src": "s")", "source");
  expect_error(R"("source": "s")", R"("source": "s", "cross_entropy": "liger", "cross_entropy_source": "s")",
               "cross_entropy must be");
  expect_error(R"("source": "s")", R"("source": "s", "cross_entropy": "te")", "cross_entropy_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "grad_nan_check": false)", "grad_buffer_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "qkv_bshd_copies": true)", "qkv_bshd_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "grad_bucket_params": 134217728)", "grad_bucket_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "bucketed_chunks": "none")", "grad_bucket_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "grad_bucket_layers": true)", "grad_bucket_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "grad_bucket_params": 0, "grad_bucket_source": "s")",
               "grad_bucket_params must be > 0");
  expect_error(R"("source": "s")", R"("source": "s", "bucketed_chunks": "odd", "grad_bucket_source": "s")",
               "bucketed_chunks must be all, first or none");
  expect_error(R"("source": "s")", R"("source": "s", "grad_scale_pass": 0, "grad_buffer_source": "s")",
               "grad_scale_pass must be true or false");
  expect_error(R"("source": "s")", R"("source": "s", "framework": "megatron-core", "layer_split": "even")",
               "layer_split must be any or equal_chunks");
  expect_error(R"("source": "s")", R"("source": "s", "layer_split": "equal_chunks")", "layer_split needs a framework");
  expect_error(R"("source": "s")", R"("source": "s", "attention_kernel": "fa2")", "attention_kernel_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "moe_dispatch_sms": 32)", "moe_dispatch_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "moe_dispatch_sms": -2, "moe_dispatch_source": "s")",
               "moe_dispatch_sms must be");
  expect_error(R"("source": "s")", R"("source": "s", "expert_gemm": "grouped")", "kernels_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "fp8_attention": true)", "kernels_source is missing");
  expect_error(R"("source": "s")", R"("source": "s", "expert_gemm": "loop", "kernels_source": "s")",
               "expert_gemm must be grouped or per_expert");
  // A row that cannot be predicted says why instead of a number.
  auto runs = parse_published_runs(good, ".");
  PublishedRun bad = (*runs)[0];
  bad.layout = "dp=3";
  RunPrediction p = predict_run(bad);
  EXPECT_FALSE(p.ok);
  EXPECT_FALSE(p.error.empty());
  // A kernel the profile has not measured: the row names it and the ones there are.
  PublishedRun kernel = (*runs)[0];
  kernel.attention_kernel = "fa3";
  p = predict_run(kernel);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.error.find("cudnn-9.19 (in use), cudnn-2024-07, fa2"), std::string::npos) << p.error;
  // One it has: the row is priced with it, slower than with cuDNN 9.19.
  kernel.attention_kernel = "fa2";
  kernel.seq = 16384;
  kernel.global_batch = 8;
  PublishedRun cudnn = kernel;
  cudnn.attention_kernel.clear();
  const RunPrediction with_fa2 = predict_run(kernel), with_cudnn = predict_run(cudnn);
  ASSERT_TRUE(with_fa2.ok && with_cudnn.ok) << with_fa2.error << with_cudnn.error;
  EXPECT_GT(with_fa2.predicted, 1.05 * with_cudnn.predicted);  // step_time_s: slower is larger
}

}  // namespace
}  // namespace loom
