// Weight gradients that their GEMMs add into the main gradient
// (SimOptions::wgrad_gemm_accumulate: Megatron's gradient_accumulation_fusion,
// Transformer Engine's fuse_wgrad_accumulation, DeepGEMM's accumulating
// kernels): the main gradient's read and write in the GEMM's epilogue,
// priced as exposed memory traffic (docs/simulator.md section 3.3).
#include <gtest/gtest.h>

#include "core/hw_profile.h"
#include "sim/compute_model.h"
#include "sim/compute_parts.h"
#include "sim/framework.h"
#include "sim/report.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

SimOptions accumulating(bool fp32_main_grads) {
  SimOptions o;
  o.wgrad_gemm_accumulate = true;
  o.fp32_main_grads = fp32_main_grads;
  return o;
}

// The independent truth: DeepGEMM's accumulating FP8 weight-gradient kernels
// (deepseek-ai/DeepGEMM PR #95, H800) against its plain GEMMs of the same
// layers (README @327ec92f). 16384 x 7168 outputs (K 4096): 2*16384*7168*4096
// = 9.62e11 FLOP at 994 TFLOP/s is 968 us, at 1520 TFLOP/s 633 us: 335 us
// more. 7168 x 4096 outputs: 85 us more. The H800 profile's streaming rate
// (3350 GB/s x 0.9) moves an fp32 main gradient's read and write (8 bytes an
// output) in 312 us and 78 us: within 10% of both.
TEST(WgradAccumulate, PricesDeepGemmsMeasuredExtraTime) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h800");
  const SimOptions opt = accumulating(true);
  const auto extra = [&](double rows, double cols) {
    return compute_parts::mem_time_s(hw, opt,
                                     compute_parts::wgrad_accumulate_bytes(hw, opt, Precision::kFp8, rows * cols), 0);
  };
  EXPECT_NEAR(extra(16384, 7168), 335e-6, 0.10 * 335e-6);
  EXPECT_NEAR(extra(7168, 4096), 85e-6, 0.10 * 85e-6);
  // A 16-bit main gradient is read and written at 2 bytes; a stack whose
  // GEMMs write a plain gradient pays nothing here (its hook's add instead).
  EXPECT_DOUBLE_EQ(compute_parts::wgrad_accumulate_bytes(hw, accumulating(false), Precision::kBf16, 1000), 4000);
  EXPECT_DOUBLE_EQ(compute_parts::wgrad_accumulate_bytes(hw, SimOptions{}, Precision::kBf16, 1000), 0);
}

// A profile that measured the share (gpu-validate stage 6c: the accumulating
// GEMM's extra time at the streaming rate over 8 bytes an output) prices that
// share: none where cuBLAS hides the read and write, half where it shows half.
TEST(WgradAccumulate, AMeasuredShareScalesIt) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ASSERT_LT(hw.accel.wgrad_accumulate_exposed, 0);  // not measured: all of it
  const SimOptions opt = accumulating(true);
  EXPECT_DOUBLE_EQ(compute_parts::wgrad_accumulate_bytes(hw, opt, Precision::kBf16, 1000), 8000);
  hw.accel.wgrad_accumulate_exposed = 0.5;
  EXPECT_DOUBLE_EQ(compute_parts::wgrad_accumulate_bytes(hw, opt, Precision::kBf16, 1000), 4000);
  hw.accel.wgrad_accumulate_exposed = 0;
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  const ComputeShape sh = compute_shape(Layout{}, 4096, hw);
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, opt, Precision::kBf16, sh, false).bwd_s,
                   layer_cost(m, hw, SimOptions{}, Precision::kBf16, sh, false).bwd_s);
}

// Llama-3-8B's layer on H100, by hand: the fused QKV 4096 x (32 + 2 x 8) x
// 128 = 25,165,824 weights, the projection 4096 x 4096 = 16,777,216, gate/up
// 2 x 4096 x 14336 = 117,440,512 and down 58,720,256: 218,103,808 in all, a
// 1/t share on each TP rank. Eight bytes each at 3350 GB/s x 0.9 is 0.579 ms
// at t = 1; only the backward moves.
TEST(WgradAccumulate, ALayerPaysItsLocalWeightsMainGradientEveryMicroBatch) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  const double bw = 3350e9 * 0.9, weights = 218103808.0;
  for (int tp : {1, 2}) {
    Layout l;
    l.tp = tp;
    l.sequence_parallel = tp > 1;
    const ComputeShape sh = compute_shape(l, 4096, hw);
    const PieceCost off = layer_cost(m, hw, SimOptions{}, Precision::kBf16, sh, false);
    const PieceCost fp32 = layer_cost(m, hw, accumulating(true), Precision::kBf16, sh, false);
    const PieceCost bf16 = layer_cost(m, hw, accumulating(false), Precision::kBf16, sh, false);
    EXPECT_NEAR(fp32.bwd_s - off.bwd_s, 8 * weights / tp / bw, 1e-9) << tp;
    EXPECT_NEAR(bf16.bwd_s - off.bwd_s, 4 * weights / tp / bw, 1e-9) << tp;
    EXPECT_DOUBLE_EQ(fp32.fwd_s, off.fwd_s);
  }
  EXPECT_NEAR(8 * weights / bw, 0.579e-3, 0.001e-3);
}

// Qwen3-30B-A3B's MoE layer at ep = 8: 16 local experts of 3 x 2048 x 768
// (75,497,472), the fused QKV 2048 x (32 + 2 x 4) x 128 = 10,485,760 and the
// projection 4096 x 2048 = 8,388,608: 94,371,840. The router's 128 x 2048
// weight has a plain autograd gradient (the hook's add) and is left out.
TEST(WgradAccumulate, ExpertsAccumulateAndTheRouterDoesNot) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("qwen3-30b-a3b");
  Layout l;
  l.ep = 8;
  l.dp = 8;
  const ComputeShape sh = compute_shape(l, 4096, hw);
  const PieceCost off = layer_cost(m, hw, SimOptions{}, Precision::kBf16, sh, true);
  const PieceCost on = layer_cost(m, hw, accumulating(true), Precision::kBf16, sh, true);
  EXPECT_NEAR(on.bwd_s - off.bwd_s, 8 * 94371840.0 / (3350e9 * 0.9), 1e-9);
}

// The output layer's GEMM accumulates too: Llama-3-8B's 128256 x 4096 head,
// half of it on each of two TP ranks.
TEST(WgradAccumulate, TheHeadsWeightGradientAccumulates) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  l.tp = 2;
  const ComputeShape sh = compute_shape(l, 4096, hw);
  const PieceCost off = head_cost(m, hw, SimOptions{}, Precision::kBf16, sh);
  const PieceCost on = head_cost(m, hw, accumulating(true), Precision::kBf16, sh);
  EXPECT_NEAR(on.bwd_s - off.bwd_s, 8 * 128256.0 * 4096 / 2 / (3350e9 * 0.9), 1e-9);
  EXPECT_DOUBLE_EQ(on.fwd_s, off.fwd_s);
}

// Megatron-core (and DeepSeek's stack) accumulate in the GEMM; torchtitan's
// and DeepSpeed's autograd gradients do not. The plan carries the setting,
// and a framework file that sets it must name its source.
TEST(WgradAccumulate, TheStacksThatAccumulateSaySoAndThePlanKeepsIt) {
  const auto load = [](const std::string& name) {
    auto f = load_framework(name);
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    return f.is_ok() ? *f : Framework{};
  };
  EXPECT_TRUE(load("megatron-core").wgrad_gemm_accumulate);
  EXPECT_TRUE(load("deepseek-v3").wgrad_gemm_accumulate);
  EXPECT_FALSE(load("torchtitan").wgrad_gemm_accumulate);
  EXPECT_FALSE(load("deepspeed").wgrad_gemm_accumulate);
  SimOptions opt;
  apply_framework(load("megatron-core"), &opt);
  EXPECT_TRUE(opt.wgrad_gemm_accumulate);
  auto back = parse_sim_options(sim_options_json(opt));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(back->wgrad_gemm_accumulate);
  // Off, it is not written (plans made before it keep their hash).
  EXPECT_EQ(sim_options_json(SimOptions{}).find("wgrad_gemm_accumulate"), std::string::npos);
}

}  // namespace
}  // namespace loom
