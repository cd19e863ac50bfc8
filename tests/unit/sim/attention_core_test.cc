// The attention core's cost: the measured kernel the stack ran, its rate
// held at the power cap, materialized scores as GEMMs, measured backward
// ratios, and sliding windows (docs/simulator.md section 3.2).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "core/hw_profile.h"
#include "sim/compute_model.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

ComputeShape shape_for(const Layout& l, int64_t seq, const HwProfile& hw) { return compute_shape(l, seq, hw); }

// A stack that ran another attention kernel (FlashAttention-2, an older
// cuDNN) prices the core at that kernel's published rate: at 16k tokens the
// FlashAttention-3 paper measured FA2's causal head-dim-128 forward at 335
// TFLOP/s on H100 and cuDNN 9.19 runs it at 673 (cudnn-frontend CSV); the
// backward is 2.94 and 2.98 times the forward. Nothing else in the layer moves.
TEST(ComputeModel, TheAttentionKernelTheStackRanSetsTheCoreRate) {
  const HwProfile cudnn = testing::load_hw_or_die("dgx-h100");
  ASSERT_EQ(cudnn.accel.attention_kernel, "cudnn-9.19");
  HwProfile fa2 = cudnn;
  ASSERT_TRUE(select_attention_kernel(&fa2, "fa2").is_ok());
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  Layout l;
  const double s = 16384;
  const ComputeShape sh = shape_for(l, int64_t(s), cudnn);
  const PieceCost a = layer_cost(m, cudnn, opt, Precision::kBf16, sh, false);
  const PieceCost b = layer_cost(m, fa2, opt, Precision::kBf16, sh, false);
  const double core_flops = 4 * s * s * 128 * (s + 1) / (2 * s) * 32;  // 32 heads of 128, causal
  const double t_cudnn = core_flops / 673e12, t_fa2 = core_flops / 335e12;
  const double launches = 2 * opt.kernel_overhead_s;
  EXPECT_NEAR(b.fwd_s - a.fwd_s, t_fa2 - t_cudnn, 1e-3 * t_fa2);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, 2.94 * (t_fa2 + launches) - 2.98 * (t_cudnn + launches), 1e-3 * t_fa2);
  EXPECT_EQ(a.fwd_flops, b.fwd_flops);
  // Selecting the profile's own kernel again restores it exactly.
  ASSERT_TRUE(select_attention_kernel(&fa2, "cudnn-9.19").is_ok());
  EXPECT_EQ(layer_cost(m, fa2, opt, Precision::kBf16, sh, false).bwd_s, a.bwd_s);
}

// B200 throttles its clock under continuous tensor-core load: FlashAttention-4's
// forward (bf16, b = 4, s = 8192, 16 heads of 128, no mask) run 100 times back to
// back fell from 1450 TFLOP/s (iterations 10-19) to 1237 (70-79) as the SM
// clock went from 1965 to ~1580 MHz at ~1000 W (flashinfer PR #2899). The
// profile's cuDNN table (cudnn-frontend's microbenchmark, a different kernel)
// prices that kernel near FA4's burst rate, and with the profile's
// sustained_attention_ratio near its throttled one. In a layer the ratio
// slows the attention core, forward and backward, and nothing else.
TEST(ComputeModel, SustainedAttentionRatioHoldsTheCoreToItsThrottledRate) {
  const HwProfile b200 = testing::load_hw_or_die("dgx-b200");
  ASSERT_GT(b200.accel.sustained_attention_ratio, 0);
  const double s = 8192, d = 128, head_flops = 4 * s * s * d;  // no mask: the whole square
  const double burst = b200.accel.peak_bf16_flops * b200.accel.attention_efficiency.lookup(head_flops);
  EXPECT_NEAR(burst / 1450e12, 1.0, 0.03);
  EXPECT_NEAR(burst * b200.accel.sustained_attention_share() / 1237e12, 1.0, 0.03);

  HwProfile unthrottled = b200;
  unthrottled.accel.sustained_attention_ratio = 0;
  EXPECT_EQ(unthrottled.accel.sustained_attention_share(), 1.0);
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  Layout l;
  const ComputeShape sh = shape_for(l, int64_t(s), b200);
  const PieceCost held = layer_cost(m, b200, opt, Precision::kBf16, sh, false);
  const PieceCost free = layer_cost(m, unthrottled, opt, Precision::kBf16, sh, false);
  // Llama-3-8B's core: 32 heads of 128, causal, one kernel each way.
  const double core_flops = 4 * s * s * d * (s + 1) / (2 * s) * 32;
  const double t_free = core_flops / (b200.accel.peak_bf16_flops *
                                      b200.accel.attention_efficiency.lookup(4 * s * s * d * (s + 1) / (2 * s)));
  const double r = b200.accel.sustained_attention_ratio;
  EXPECT_NEAR(held.fwd_s - free.fwd_s, t_free * (1 / r - 1), 1e-6 * t_free);
  EXPECT_NEAR(held.bwd_s - free.bwd_s, b200.accel.attention_backward_ratio * t_free * (1 / r - 1), 1e-6 * t_free);
  EXPECT_EQ(held.fwd_flops, free.fwd_flops);
  EXPECT_EQ(held.bwd_flops, free.bwd_flops);
}

// Materialized scores (no flash kernel) run as two batched GEMMs (torch.bmm /
// baddbmm over the b x heads batch: one kernel each) at the GEMM table's rate
// at one bmm's FLOPs, and like every GEMM under the power cap. With the
// memory made too fast to matter, Llama-3-8B's 32 heads of 4096 x 4096 x 128
// scores are one 275 GFLOP bmm each, on the table's plateau (0.80 short-run),
// above the 708.4 / 989 = 0.716 a GEMM holds at 700 W; one head's 2.1 GFLOP
// alone would read the table near 0.3.
TEST(ComputeModel, MaterializedScoresAreBatchedGemmsAtThePowerCap) {
  HwProfile capped = testing::load_hw_or_die("dgx-h100");
  capped.accel.memory_bw_bytes_per_s *= 100;  // the bmms compute-bound
  HwProfile burst = capped;
  burst.accel.sustained_gemm_bf16_flops = burst.accel.sustained_gemm_fp8_flops = 0;
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  opt.flash_attention = false;
  Layout l;
  const double s = 4096, d = 128, bmm_flops = 2 * s * s * d * 32;
  const ComputeShape sh = shape_for(l, int64_t(s), capped);
  EXPECT_NEAR(capped.accel.gemm_efficiency.lookup(bmm_flops), 0.80, 0.01);
  EXPECT_LT(capped.accel.gemm_efficiency.lookup(2 * s * s * d), 0.5);
  const PieceCost held = layer_cost(m, capped, opt, Precision::kBf16, sh, false);
  const PieceCost free = layer_cost(m, burst, opt, Precision::kBf16, sh, false);
  // The scores alone: the two bmms' forward; the layer's other GEMMs take
  // the cap too, so compare the layer with flash on as well.
  SimOptions flash = opt;
  flash.flash_attention = true;
  const double gemms_held = layer_cost(m, capped, flash, Precision::kBf16, sh, false).fwd_s -
                            layer_cost(m, burst, flash, Precision::kBf16, sh, false).fwd_s;
  const double core = 2 * bmm_flops, peak = capped.accel.peak_bf16_flops;
  const double t_cap = core / (peak * capped.accel.sustained_gemm_efficiency(Precision::kBf16));
  const double t_free = core / (peak * capped.accel.gemm_efficiency.lookup(bmm_flops));
  EXPECT_NEAR(held.fwd_s - free.fwd_s - gemms_held, t_cap - t_free, 1e-6 * t_cap);
  // By hand: the table's plateau (XLA's sm_90 points, 0.80 of 989) over the
  // cap (708.4 of 989): the burst price is 11-12% faster. One head's lookup
  // would sit under the cap in both profiles and show no difference at all.
  EXPECT_NEAR(t_cap / t_free, 0.80 / (708.4 / 989), 0.015);
  EXPECT_GT(held.fwd_s - free.fwd_s - gemms_held, 0.05 * t_cap);
}

// At head dim 128 a score bmm does 128 FLOP a byte of the s x s scores it
// writes or reads, under an H100's ridge (708.4 TFLOP/s over 3.35 TB/s x 0.9
// is 235): the bmms are memory-bound. Forward QK^T writes the scores and PV
// reads them (2 passes); the fused scale-mask-softmax reads and writes them.
// So raising the memory bandwidth by half takes, beyond what it takes from
// the rest of the layer (the layer with flash on), exactly
// (2 + 2) x 2 bytes a score x (1/bw - 1/1.5bw) from the forward, and
// (4 + 3) x 2 bytes from the backward (dP written, P and dS read for dV, dQ
// and dK; the softmax backward reads two and writes one). Llama-3-8B: no
// dropout.
TEST(ComputeModel, MaterializedScoreBmmsAreHeldToTheirScoreTraffic) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  HwProfile fast = hw;
  fast.accel.memory_bw_bytes_per_s *= 1.5;
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions off;
  off.flash_attention = false;
  SimOptions on = off;
  on.flash_attention = true;
  Layout l;
  const double s = 4096;
  const ComputeShape sh = shape_for(l, int64_t(s), hw);
  auto drop = [&](const SimOptions& o) {
    const PieceCost a = layer_cost(m, hw, o, Precision::kBf16, sh, false);
    const PieceCost b = layer_cost(m, fast, o, Precision::kBf16, sh, false);
    return std::make_pair(a.fwd_s - b.fwd_s, a.bwd_s - b.bwd_s);
  };
  const auto [f_off, b_off] = drop(off);
  const auto [f_on, b_on] = drop(on);
  const double scores = 32 * s * s;
  const double bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  const double per_byte = 1 / bw - 1 / (1.5 * bw);
  EXPECT_NEAR(f_off - f_on, (2 + 2) * 2 * scores * per_byte, 1e-6 * f_off);
  EXPECT_NEAR(b_off - b_on, (4 + 3) * 2 * scores * per_byte, 1e-6 * b_off);
}

TEST(ComputeModel, MeasuredAttentionAndOptimizerRatesReplaceTheDefaults) {
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  // Start from the GEMM table's rate for the core (the shipped profile has FA2's).
  hw.accel.attention_efficiency = {};
  hw.accel.attention_backward_ratio = 0;
  ModelSpec m = testing::load_model_or_die("gpt2-124m");
  SimOptions opt;
  Layout l;
  l.micro_batch = 2;
  const ComputeShape sh = shape_for(l, 1024, hw);
  PieceCost base = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
  // The attention core at an efficiency table of its own (backward 2.5 x the
  // forward for flash); everything else is unchanged.
  const double s = 1024, d = double(m.head_dim), causal = (s + 1) / (2 * s);
  const double head_flops = 4 * s * s * d * causal, core_flops = head_flops * 2 * m.num_heads;
  const double eff_gemm = hw.accel.gemm_efficiency.lookup(head_flops);
  hw.accel.attention_efficiency.flops = {head_flops / 10, head_flops * 10};
  hw.accel.attention_efficiency.efficiency = {0.05, 0.05};
  PieceCost slow = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
  const double t_gemm = core_flops / (hw.accel.peak_bf16_flops * eff_gemm);
  const double t_att = core_flops / (hw.accel.peak_bf16_flops * 0.05);
  EXPECT_NEAR(slow.fwd_s - base.fwd_s, t_att - t_gemm, 1e-9);
  EXPECT_NEAR(slow.bwd_s - base.bwd_s, 2.5 * (t_att - t_gemm), 1e-9);
  EXPECT_EQ(slow.fwd_flops, base.fwd_flops);
  // A measured backward/forward time ratio replaces flash's 2.5; FLOPs keep 2.5.
  hw.accel.attention_backward_ratio = 1.25;
  PieceCost ratio = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
  const double launch = 2 * opt.kernel_overhead_s;  // the core's two kernels scale with it
  EXPECT_NEAR(ratio.bwd_s - base.bwd_s, 1.25 * (t_att + launch) - 2.5 * (t_gemm + launch), 1e-9);
  EXPECT_EQ(ratio.fwd_s, slow.fwd_s);
  EXPECT_EQ(ratio.bwd_flops, base.bwd_flops);
  // The table and the ratio measure a fused flash kernel: materialized
  // scores (batched GEMMs) keep the GEMM table and the FLOP ratio.
  SimOptions no_flash = opt;
  no_flash.flash_attention = false;
  HwProfile plain = testing::load_hw_or_die("dgx-a100-80gb");
  plain.accel.attention_efficiency = {};
  plain.accel.attention_backward_ratio = 0;
  EXPECT_EQ(layer_cost(m, hw, no_flash, Precision::kBf16, sh, false).fwd_s,
            layer_cost(m, plain, no_flash, Precision::kBf16, sh, false).fwd_s);
  EXPECT_EQ(layer_cost(m, hw, no_flash, Precision::kBf16, sh, false).bwd_s,
            layer_cost(m, plain, no_flash, Precision::kBf16, sh, false).bwd_s);
  // Optimizer: 16 B/param of fp32 state traffic + 2 gradient reads -> 32 B in fp32.
  const double params = 1e8, bw = hw.accel.memory_bw_bytes_per_s;
  const double t0 = optimizer_time_s(hw, opt, Precision::kFp32, params);
  EXPECT_NEAR(t0, params * 32 / (bw * hw.accel.memory_bw_efficiency) + 4 * opt.kernel_overhead_s, 1e-12);
  hw.accel.optimizer_bw_efficiency = 0.1;
  EXPECT_NEAR(optimizer_time_s(hw, opt, Precision::kFp32, params),
              params * 32 / (bw * 0.1) + 4 * opt.kernel_overhead_s, 1e-12);
}

// Mistral's sliding window: flash attention skips the blocks beyond it, so
// the attention core's FLOPs are the window's share of the causal ones (at
// 32K tokens and a 4096 window, 0.234); within the window nothing changes.
TEST(ComputeModel, SlidingWindowAttentionCostsTheWindowsShare) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  SimOptions opt;
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  for (int64_t seq : {4096, 32768}) {
    const ComputeShape sh = shape_for(l, seq, hw);
    m.sliding_window = 0;
    const PieceCost full = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
    m.sliding_window = 4096;
    const PieceCost win = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
    const double core = double(seq) * m.attention_flops_per_token_fwd(seq, true) * (seq + 1.0) / seq;
    // The kept pairs by hand: 4096 * 4097 / 2 + 28672 * 4096 of 32768 * 32769 / 2.
    const double share = seq <= 4096 ? 1.0 : 125831168.0 / 536887296.0;
    if (seq > 4096) {
      EXPECT_NEAR(share, 0.2344, 1e-4);
    }
    EXPECT_NEAR(full.fwd_flops - win.fwd_flops, core * (1 - share), core * 1e-9) << seq;
    if (seq > 4096) {
      EXPECT_LT(win.fwd_s, full.fwd_s);
    } else {
      EXPECT_EQ(win.fwd_s, full.fwd_s);
    }
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Context parallelism's ring (Transformer Engine's AttnFuncWithCPAndKVP2P)
// runs its first step causal and the other cp - 1 steps unmasked: 3/4 of a
// rank's attention work at cp = 4. Llama-3-8B at 131,072 tokens over cp = 4:
// every step's kernel (512 s^2 / 32 = 275 GFLOP) is past both FA2 tables'
// last points, the FlashAttention-3 paper's FA2 bars at 16k: 335 TFLOP/s
// causal, 370 unmasked (Figure 5d, 5c). So the unmasked table saves
// 3/4 x (1/335 - 1/370) of the core's FLOP over the causal-only pricing,
// forward, and the kernel's backward ratio (2.94) times that in backward.
TEST(ComputeModel, RingStepsAfterTheFirstRunAtTheUnmaskedRate) {
  HwProfile with = testing::load_hw_or_die("dgx-h100");
  ASSERT_TRUE(select_attention_kernel(&with, "fa2").is_ok());
  ASSERT_FALSE(with.accel.attention_efficiency_no_mask.flops.empty());
  HwProfile causal_only = with;
  causal_only.accel.attention_efficiency_no_mask = GemmEfficiencyTable{};
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  opt.loom_executor = false;  // a stack's ring, one kernel a step (Loom's executor runs one a block)
  Layout l;
  l.cp = 4;
  const double s = 131072;
  const ComputeShape sh = compute_shape(l, int64_t(s), with);
  const PieceCost a = layer_cost(m, causal_only, opt, Precision::kBf16, sh, false);
  const PieceCost b = layer_cost(m, with, opt, Precision::kBf16, sh, false);
  const double core_flops = 4 * s * s * 128 * (s + 1) / (2 * s) * 32 / 4;  // 32 heads, a quarter a rank
  const double saved = core_flops * 0.75 * (1 / 335e12 - 1 / 370e12);
  EXPECT_NEAR(a.fwd_s - b.fwd_s, saved, 0.01 * saved);
  EXPECT_NEAR(a.bwd_s - b.bwd_s, 2.94 * saved, 0.01 * 2.94 * saved);
  // Without context parallelism every kernel is causal: nothing changes.
  const ComputeShape one = compute_shape(Layout{}, 16384, with);
  EXPECT_DOUBLE_EQ(layer_cost(m, with, opt, Precision::kBf16, one, false).fwd_s,
                   layer_cost(m, causal_only, opt, Precision::kBf16, one, false).fwd_s);
}

}  // namespace
}  // namespace loom
