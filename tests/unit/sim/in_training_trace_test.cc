// The compute model against kernels measured inside a real training step:
// DeepSeek's published PyTorch-profiler trace of DeepSeek-V3 training on
// H800 (deepseek-ai/profile-data train.json @ 4496024: "a pair of individual
// forward and backward chunks in DualPipe. Each chunk contains 4 MoE layers
// ... EP64, TP1 with 4K sequence length", routing "absolutely balanced").
// docs/validation.md ("In-training kernels") gives the derivation; the
// figures below are what scripts/trace_phases.py prints for that file with
// --per 4 --exclude ProfilerStep#1 --exclude 1F1B: GPU kernel time by the host
// annotation (DualPipe's attn/mlp F, B and W phases) that launched it, per
// layer, communication kernels (DeepEP's dispatch and combine) left out.
#include <gtest/gtest.h>

#include "sim/compute_model.h"
#include "sim/framework.h"
#include "sim/plan_request.h"
#include "tests/support/sim_test_support.h"

namespace loom {
namespace {

// One DeepSeek-V3 MoE layer of one 4096-token micro-batch as row R3 of the
// validation table prices it (validation/published_runs.json): DeepSeek's
// stack (frameworks/deepseek-v3.json), FP8, deduplicated FP8 dispatch, the
// all-to-alls overlapped with the paired micro-batch, EP64, TP1, selective
// recompute of the norms, the MLA up-projections and the MoE activation.
PieceCost deepseek_v3_moe_layer() {
  const ModelSpec m = testing::load_model_or_die("deepseek-v3");
  const HwProfile hw = testing::load_hw_or_die("dgx-h800");
  PlanRequest req;
  req.gpus = 2048;
  req.global_batch = 15360;
  req.seq = 4096;
  req.precision = "fp8";
  req.framework = "deepseek-v3";
  req.moe_dedup_dispatch = true;
  req.moe_fp8_dispatch = true;
  req.ep_comm_overlap = true;
  const Framework fw = testing::framework_or_die("deepseek-v3");
  SimOptions opt = make_sim_options(req, hw, &fw);
  opt.loom_executor = false;
  const Layout l = testing::layout_or_die(
      "dp=256,tp=1,pp=8,ep=64,cp=1,zero=1,micro=1,schedule=dualpipev,v=2,sp=0,recompute=selective,"
      "recompute_modules=layernorm+mla_up_proj+moe_act");
  return layer_cost(m, hw, opt, Precision::kFp8, compute_shape(l, 4096, hw), /*moe_layer=*/true);
}

TEST(InTrainingTrace, DeepSeekV3ForwardComputeMatchesTheH800Trace) {
  // The trace's forward of one layer: attn(F) 4.370 ms (GEMMs 1.720, MLA
  // attention 1.237, FP8 casts 0.509, the rest 0.904) + mlp(F) 4.604 ms
  // (GEMMs 3.296, casts 0.524, the rest 0.783) = 8.974 ms. It ran on the
  // 112 SMs DeepEP's 20 leave; Loom's compute carries that as the
  // contention of the hidden all-to-alls (docs/simulator.md section 3.4).
  // Loom: 8.35 ms (-7%). Tolerance: +-10%.
  const PieceCost c = deepseek_v3_moe_layer();
  const double fwd = c.fwd_s - c.fwd_tp_s - c.fwd_ep_s - c.fwd_cp_s;
  EXPECT_NEAR(fwd / 8.974e-3, 1.0, 0.10) << "forward compute " << fwd * 1e3 << " ms";
}

TEST(InTrainingTrace, DeepSeekV3BackwardKnownGapIsTheBlockScaledWeightGradients) {
  // The trace's backward of one layer, recompute included: attn(B) 9.341 +
  // attn(W) 2.389 + mlp(B) 5.306 + mlp(W) 6.378 = 23.414 ms. Its weight-
  // gradient GEMMs (the W phases' 8.189 ms) take 1.6x its forward GEMMs'
  // 5.016 ms for the same FLOPs: DeepSeek's block-scaled FP8 (1x128 scales on
  // both operands of dW = X^T dY, promoted on CUDA cores every 128 tokens)
  // ran at about 640 TFLOP/s there, where Loom prices every FP8 GEMM pass at
  // the forward's rate (per-tensor scaling; docs/simulator.md section 7
  // lists block-scaled recipes as not modelled apart). Loom: 16.9 ms, 0.72 of
  // the trace. Pinned between 0.65 and 0.80 so a change to the backward
  // shows; the gap closes only with a block-scaled recipe, not by tuning.
  const PieceCost c = deepseek_v3_moe_layer();
  const double bwd = c.bwd_s - c.bwd_tp_s - c.bwd_ep_s - c.bwd_cp_s + c.recompute_s;
  EXPECT_GT(bwd / 23.414e-3, 0.65) << "backward compute " << bwd * 1e3 << " ms";
  EXPECT_LT(bwd / 23.414e-3, 0.80) << "backward compute " << bwd * 1e3 << " ms";
  // The weight gradients alone: Loom's are half its backward GEMMs, the
  // forward's time; the trace's are 1.63x its forward GEMMs.
  EXPECT_NEAR(c.wgrad_s / 8.189e-3, 0.50, 0.05) << "weight gradients " << c.wgrad_s * 1e3 << " ms";
}

}  // namespace
}  // namespace loom
