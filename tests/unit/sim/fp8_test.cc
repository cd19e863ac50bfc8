// FP8 training in the compute model, against published measurements that no
// constant of the model was taken from:
// - Transformer Engine's GEMM profiling guide (docs/validation/
//   kernel_measurements_sources.md section 2.5): one layer's Fprop + Dgrad +
//   Wgrad GEMMs with quantization included ("autocast"), hidden 4096, FFN
//   16384, M = 15872 tokens, on H200 NVL: BF16 32.014 ms, FP8 current
//   scaling 20.285 ms (1.58x), delayed scaling 18.978 ms (1.69x).
// - Best-shape FP8 GEMM rates (MAMF, section 2.1) and DeepGEMM's H800 rates.
// - torchao's end-to-end Llama-3-8B on 8x H100, FSDP2, seq 8192: BF16 6150
//   tok/s, FP8 tensorwise 7689.5 (+25%) (section 3.4).
#include <gtest/gtest.h>

#include <cmath>

#include "sim/compute_model.h"
#include "sim/memory_model.h"
#include "sim/simulate.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

TEST(Fp8, BigGemmsRunAtTheMeasuredFp8Best) {
  const HwProfile sustained = testing::load_hw_or_die("dgx-h100");
  // The FP8 microbenchmarks below are short runs (boost clocks): they are
  // compared with the model without the FP8 power cap, which bounds a
  // training step's FP8 GEMMs (ComputeModel.PowerCapBoundsLargeGemms).
  HwProfile hw = sustained;
  hw.accel.sustained_gemm_fp8_flops = 0;
  // 8192 x 8192 x 8192: the cuBLASLt best measured on H100 SXM is 1402.6
  // TFLOP/s (MAMF); a GEMM this size runs at it, twice BF16's rate at most.
  const double n = 8192;
  const double fp8 = 2 * n * n * n / gemm_time_s(hw, Precision::kFp8, n, n, n);
  const double bf16 = 2 * n * n * n / gemm_time_s(hw, Precision::kBf16, n, n, n);
  EXPECT_NEAR(fp8 / 1402.6e12, 1.0, 0.01);
  EXPECT_GT(fp8 / bf16, 1.6);
  EXPECT_LT(fp8 / bf16, 2.0);
  // Held at the 700 W power cap, one run measured 16384^3 FP8 (e4m3
  // torch._scaled_mm) at 1175 TFLOP/s and bf16 at 708.4 on H100 SXM
  // (docs/validation/h100_gap_sources.md section 1): 1.66x. Since stop 55
  // the profile takes both caps from that run (until then bf16 took
  // gpu-fryer's 730, from another harness): a big GEMM's sustained ratio
  // is that run's, and under the short-run one.
  const double fp8_s = 2 * n * n * n / gemm_time_s(sustained, Precision::kFp8, n, n, n);
  const double bf16_s = 2 * n * n * n / gemm_time_s(sustained, Precision::kBf16, n, n, n);
  EXPECT_NEAR((fp8_s / bf16_s) / (1175.0 / 708.4), 1.0, 1e-6);
  EXPECT_LT(fp8_s / bf16_s, fp8 / bf16);
  // DeepGEMM (blockwise scaling, its own kernels) on H800, M = 4096:
  // 4096x4096x7168 1410 TFLOP/s, 4096x7168x16384 1520; a cuBLAS-rate model
  // sits within 10% of those (the same SM90 tensor cores).
  for (auto [m, nn, k, rate] : {std::tuple{4096.0, 4096.0, 7168.0, 1410e12}, {4096.0, 7168.0, 16384.0, 1520e12}}) {
    const double got = 2 * m * nn * k / gemm_time_s(hw, Precision::kFp8, m, nn, k);
    EXPECT_NEAR(got / rate, 1.0, 0.10) << m << "x" << nn << "x" << k;
  }
  // Grouped GEMMs (MoE experts as one kernel), DeepGEMM's contiguous-layout
  // FP8 runs on H800: 4 groups x 8192 x 4096 x 7168 1346 TFLOP/s, 8 groups x
  // 4096 x 4096 x 7168 1346; torchao's DeepGEMM grouped forward on H100, 8
  // groups x 4096 x 2048 x 7168 (M = 32768, DeepSeek-V3's FFN): 1234.
  for (auto [g, m, nn, k, rate] : {std::tuple{4.0, 8192.0, 4096.0, 7168.0, 1346e12}, {8.0, 4096.0, 4096.0, 7168.0, 1346e12},
                                   {8.0, 4096.0, 2048.0, 7168.0, 1234e12}}) {
    const double got = g * 2 * m * nn * k / grouped_gemm_time_s(hw, Precision::kFp8, g, m, nn, k);
    EXPECT_NEAR(got / rate, 1.0, 0.15) << g << " x " << m << "x" << nn << "x" << k;
  }
  // One group is the plain GEMM.
  EXPECT_DOUBLE_EQ(grouped_gemm_time_s(hw, Precision::kBf16, 1, 4096, 4096, 4096),
                   gemm_time_s(hw, Precision::kBf16, 4096, 4096, 4096));
  // Transformer Engine's default GroupedLinear path: one cuBLAS GEMM per
  // expert (on 4 streams). TE #2045 (H100, BF16, TE 2.7, CUDA 12.9) timed
  // general_grouped_gemm that way and as one CUTLASS grouped kernel:
  // (groups, M, N, K) = (8, 4096, 768, 2048) 627.9 against 650.6 TFLOP/s,
  // (16, 2048, 768, 2048) 553.9 against 636.9. The grouped kernel within
  // 15%; the per-expert GEMMs within 20% and below the measurement (what
  // the streams gain side by side is not credited); and, as measured, the
  // smaller GEMMs lose more to running apart.
  double ratio[2];
  int i = 0;
  for (auto [g, m, nn, k, apart_rate, grouped_rate] :
       {std::tuple{8.0, 4096.0, 768.0, 2048.0, 627.9e12, 650.6e12}, {16.0, 2048.0, 768.0, 2048.0, 553.9e12, 636.9e12}}) {
    const double flops = g * 2 * m * nn * k;
    const double apart = flops / expert_gemms_time_s(hw, Precision::kBf16, g, m, nn, k, ExpertGemm::kPerExpert);
    const double grouped = flops / expert_gemms_time_s(hw, Precision::kBf16, g, m, nn, k, ExpertGemm::kGrouped);
    EXPECT_NEAR(grouped / grouped_rate, 1.0, 0.15) << g << " x " << m;
    EXPECT_NEAR(apart / apart_rate, 1.0, 0.20) << g << " x " << m;
    EXPECT_LT(apart, apart_rate) << g << " x " << m;
    ratio[i++] = apart / grouped;
  }
  EXPECT_LT(ratio[1], ratio[0]) << "16 GEMMs of 2048 rows lose more to running apart than 8 of 4096";
  // Apart, the GEMMs are the sum of each alone.
  EXPECT_DOUBLE_EQ(expert_gemms_time_s(hw, Precision::kBf16, 16, 512, 1536, 2048, ExpertGemm::kPerExpert),
                   16 * gemm_time_s(hw, Precision::kBf16, 512, 1536, 2048));
  // A device without FP8 runs an fp8 request at its 16-bit rate.
  HwProfile a100 = testing::load_hw_or_die("dgx-a100-80gb");
  EXPECT_DOUBLE_EQ(gemm_time_s(a100, Precision::kFp8, n, n, n), gemm_time_s(a100, Precision::kBf16, n, n, n));
}

// One layer's GEMMs and quantization: the BF16/FP8 time ratio of TE's
// profile, within 10%. The layer's attention core and elementwise work are
// the same in both precisions (attention stays 16-bit), so the FP8 layer's
// GEMM + cast time is the BF16 GEMM time less the layers' difference. TE's
// autocast timing re-quantizes the weights every iteration, so the weight
// casts count here.
TEST(Fp8, LayerGemmsWithCastsMatchTransformerEnginesProfile) {
  HwProfile hw = testing::load_hw_or_die("dgx-h200");
  ModelSpec m = testing::gpt_block_model(4096, 32, 1);
  Layout l;
  l.micro_batch = 31;
  const ComputeShape sh = compute_shape(l, 512, hw);
  const double T = 31 * 512.0, h = 4096, f = 16384;
  double gemm_bf16 = 0;
  for (auto [n, k] : {std::pair{3 * h, h}, {h, h}, {f, h}, {h, f}}) gemm_bf16 += 3 * gemm_time_s(hw, Precision::kBf16, T, n, k);
  auto layer = [&](Precision p, Fp8Scaling s) {
    SimOptions opt;
    opt.fp8_scaling = s;
    PieceCost c = layer_cost(m, hw, opt, p, sh, false);
    return c.fwd_s + c.bwd_s + c.weight_cast_s;
  };
  const double bf16_layer = layer(Precision::kBf16, Fp8Scaling::kCurrent);
  for (auto [scaling, published] : {std::pair{Fp8Scaling::kCurrent, 32.014 / 20.285}, {Fp8Scaling::kDelayed, 32.014 / 18.978}}) {
    const double fp8_gemm_and_casts = gemm_bf16 - (bf16_layer - layer(Precision::kFp8, scaling));
    const double ratio = gemm_bf16 / fp8_gemm_and_casts;
    std::printf("%s scaling: BF16/FP8 layer GEMM time %.3f, TE measured %.3f\n", fp8_scaling_name(scaling), ratio,
                published);
    EXPECT_NEAR(ratio / published, 1.0, 0.10) << fp8_scaling_name(scaling);
  }
}

// FP8 gathered under sequence parallelism with current scaling: every TP
// rank casts its shard with the tensor's one scale, so the ranks all-reduce
// the amax first, as Transformer Engine does for the column-parallel inputs
// (QKV, FC1) in forward and the row-parallel output gradients (proj, FC2) in
// backward: 2 + 2 latency-bound all-reduces a layer, on the compute path.
// Delayed scaling (last step's amax) and 16-bit gathers have none.
TEST(Fp8, CurrentScalingReducesTheGatheredTensorsAmaxOverTp) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-70b");
  Layout l = *parse_layout("dp=1,tp=8,sp=1");
  const ComputeShape sh = compute_shape(l, 8192, hw);
  auto layer = [&](Precision p, Fp8Scaling s, const ComputeShape& shape) {
    SimOptions opt;
    opt.fp8_scaling = s;
    return layer_cost(m, hw, opt, p, shape, false);
  };
  const PieceCost cur = layer(Precision::kFp8, Fp8Scaling::kCurrent, sh);
  const PieceCost del = layer(Precision::kFp8, Fp8Scaling::kDelayed, sh);
  EXPECT_EQ(cur.tp_calls - del.tp_calls, 4);
  const double fwd = cur.fwd_tp_s - del.fwd_tp_s, bwd = cur.bwd_tp_s - del.bwd_tp_s;
  EXPECT_GT(fwd, 0);
  EXPECT_DOUBLE_EQ(fwd, bwd);
  // Latency-bound: a few microseconds each, and far below the layer.
  EXPECT_GT(fwd / 2, 1e-6);
  EXPECT_LT(fwd / 2, 50e-6);
  EXPECT_LT(2 * (fwd + bwd), 0.02 * (cur.fwd_s + cur.bwd_s));
  // BF16 gathers need no common scale; without SP nothing is gathered.
  EXPECT_EQ(layer(Precision::kBf16, Fp8Scaling::kCurrent, sh).tp_calls, layer(Precision::kBf16, Fp8Scaling::kDelayed, sh).tp_calls);
  const ComputeShape no_sp = compute_shape(*parse_layout("dp=1,tp=8,sp=0"), 8192, hw);
  EXPECT_EQ(layer(Precision::kFp8, Fp8Scaling::kCurrent, no_sp).tp_calls,
            layer(Precision::kFp8, Fp8Scaling::kDelayed, no_sp).tp_calls);
}

TEST(Fp8, TheAttentionCoreAndTheHeadStaySixteenBit) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  const ComputeShape sh = compute_shape(l, 8192, hw);
  SimOptions opt;
  // The head is one 16-bit GEMM and a cross-entropy: the same in both.
  EXPECT_DOUBLE_EQ(head_cost(m, hw, opt, Precision::kFp8, sh).fwd_s, head_cost(m, hw, opt, Precision::kBf16, sh).fwd_s);
  // fp8_attention runs the core at the FP8 speedup the H100 profile carries
  // (cuDNN 9.19.1's, 1.50x forward at 8192): a faster forward.
  SimOptions fa = opt;
  fa.fp8_attention = true;
  EXPECT_LT(layer_cost(m, hw, fa, Precision::kFp8, sh, false).fwd_s,
            layer_cost(m, hw, opt, Precision::kFp8, sh, false).fwd_s);
}

// End to end: torchao's FP8 tensorwise (current scaling) Llama-3-8B on 8x
// H100 under FSDP2 ran 1.25x the BF16 run (6150 -> 7689.5 tok/s). The
// speedup predicted for the same model, layout and sequence is within 0.1.
// MFU is reported against the BF16 peak for both (NVIDIA's and Meta's
// convention), and apart against the FP8 peak.
TEST(Fp8, EndToEndSpeedupAndMfuConvention) {
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  auto run = [&](Precision p) {
    TrainSpec t;
    t.global_batch = 8;
    t.seq_len = 8192;
    t.precision = p;
    Evaluator eval(m, hw, t, SimOptions{});
    auto l = parse_layout("dp=8,zero=3,micro=1,recompute=selective");
    EXPECT_TRUE(l.is_ok());
    auto r = simulate_layout(eval, *l);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r->figures;
  };
  const Figures bf16 = run(Precision::kBf16), fp8 = run(Precision::kFp8);
  const double speedup = fp8.tokens_per_s / bf16.tokens_per_s;
  std::printf("FP8/BF16 tokens/s: %.3f (torchao measured 1.250)\n", speedup);
  EXPECT_NEAR(speedup, 1.25, 0.10);
  EXPECT_NEAR(fp8.mfu, fp8.model_tflops_per_gpu * 1e12 / 989e12, 1e-9);
  EXPECT_NEAR(fp8.mfu_fp8_peak, fp8.model_tflops_per_gpu * 1e12 / 1979e12, 1e-9);
  EXPECT_EQ(bf16.mfu_fp8_peak, 0);
}

// Memory under FP8, by hand for a GPT block (h 4096, 32 heads, FFN 16384) at
// tp = 4 with SP, one micro-batch of 2048 tokens: Transformer Engine saves
// the four linear inputs (QKV and MLP input T h / t each under SP, the
// projection input T h / t, FC2's input T f / t) as FP8, 1 byte instead of
// 2; everything else stays 16-bit. FP8 parameters hold 2 bytes of weights
// (FP8 + transpose) instead of 3 (16-bit + an FP8 copy).
TEST(Fp8, LinearInputsAreSavedAsFp8AndFp8ParamsHoldTwoBytes) {
  ModelSpec m = testing::gpt_block_model(4096, 32, 1);
  Layout l;
  l.tp = 4;
  l.sequence_parallel = true;
  SimOptions opt;
  opt.dropout = 0;
  const double T = 2048, h = 4096, f = 16384, t = 4;
  const double saved = T * h / t + T * h / t + T * h / t + T * f / t;  // bytes saved: one per element
  const double bf16 = layer_activation_bytes(m, l, opt, 2048, Precision::kBf16, false);
  const double fp8 = layer_activation_bytes(m, l, opt, 2048, Precision::kFp8, false);
  EXPECT_NEAR(bf16 - fp8, saved, 1e-6);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp8, opt).weights, 3);
  opt.fp8_params = true;
  EXPECT_EQ(state_bytes_per_param(Precision::kFp8, opt).weights, 2);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp8, opt).optimizer, 12) << "the fp32 master stays in the optimizer";
}

}  // namespace
}  // namespace loom
