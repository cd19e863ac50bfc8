// What a named stack's kernels move around the layer's GEMMs, against hand
// counts of their bytes: the fused backward's passes, Megatron-core
// r0.5-v0.13's q/k/v bshd copies, Transformer Engine's fused norm + FP8 cast,
// and flash attention's query tiles against the SMs (docs/simulator.md
// sections 3.2-3.3).
#include <gtest/gtest.h>

#include <cmath>

#include "sim/compute_model.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

TEST(ComputeModel, NamedStacksFusedBackwardMovesWhatItsKernelsMove) {
  // A named stack's fused layer (Megatron-core + Transformer Engine), one
  // Llama-3-8B layer at 2048 tokens in bf16, against the twice-the-forward
  // count Loom's executor keeps. U = 2048 x 4096 x 2 = 16,777,216 bytes.
  // * the two norms' backward: 3U each, not 4U: -2U;
  // * no bias or dropout on the residual branches: each add's backward is
  //   one accumulation (3U), not 6U: -6U;
  // * SwiGLU's backward 5 passes of its output's size, not 6: -2048 x 14336
  //   x 2 = -58,720,256;
  // * fused RoPE's backward reads and writes q and k once (2 passes, not 4):
  //   -2 x 2048 x (32 + 8) x 128 x 2 = -41,943,040.
  // Total: 8U + 58,720,256 + 41,943,040 = 234,881,024 bytes, 0.131 ms at the
  // A100 profile's 1794 GB/s; the forward and the kernel counts unchanged.
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  // With RoPE the fused kernel writes dq and dk apart, so the three
  // gradients are concatenated for the fused QKV: + 2 x 2048 x (32 + 16) x
  // 128 x 2 = 50,331,648 bytes and one kernel. Net 184,549,376 bytes less.
  SimOptions executor;
  SimOptions stack;
  stack.framework = "megatron-core";
  stack.fused_layer_backward = true;
  Layout l;
  const ComputeShape sh = compute_shape(l, 2048, hw);
  const PieceCost a = layer_cost(m, hw, executor, Precision::kBf16, sh, false);
  const PieceCost b = layer_cost(m, hw, stack, Precision::kBf16, sh, false);
  const double bw = 2039e9 * 0.88, launch = stack.kernel_overhead_s;
  EXPECT_NEAR(a.bwd_s - b.bwd_s, (234881024.0 - 50331648.0) / bw - launch, 1e-9);
  EXPECT_NEAR(a.bwd_s - b.bwd_s, 0.000099, 0.000002);
  EXPECT_DOUBLE_EQ(a.fwd_s, b.fwd_s);
  // Only where the stack says its kernels are these: a framework named
  // without it (DeepSpeed's Hugging Face layers), or an unnamed stack, keeps
  // twice the forward.
  SimOptions other;
  other.framework = "deepspeed";
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, other, Precision::kBf16, sh, false).bwd_s, a.bwd_s);
  SimOptions unnamed;
  unnamed.loom_executor = false;
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, unnamed, Precision::kBf16, sh, false).bwd_s, a.bwd_s);
  // GPT-2 (LayerNorm, biases, dropout): only the norms change, 3U not 4U
  // each: 2 x 1024 x 768 x 2 = 3,145,728 bytes at 1024 tokens.
  ModelSpec g = testing::load_model_or_die("gpt2-124m");
  const ComputeShape gs = compute_shape(l, 1024, hw);
  EXPECT_NEAR(layer_cost(g, hw, executor, Precision::kBf16, gs, false).bwd_s -
                  layer_cost(g, hw, stack, Precision::kBf16, gs, false).bwd_s,
              3145728.0 / bw, 1e-9);
}

TEST(ComputeModel, SelectiveRecomputeRerunsTheBshdCopiesWithTheAttentionCore) {
  // Megatron's core_attn checkpoint wraps TEDotProductAttention.forward,
  // where the bshd copies run: GPT-2 124M at 1024 tokens re-copies q, k and
  // v (9,437,184 bytes, three kernels) with the attention core.
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  ModelSpec g = testing::load_model_or_die("gpt2-124m");
  SimOptions off;
  off.framework = "megatron-core";
  SimOptions on = off;
  on.qkv_bshd_copies = true;
  Layout l;
  l.recompute = Recompute::kSelective;
  const ComputeShape sh = compute_shape(l, 1024, hw);
  const double bw = 2039e9 * 0.88;
  EXPECT_NEAR(layer_cost(g, hw, on, Precision::kBf16, sh, false).recompute_s -
                  layer_cost(g, hw, off, Precision::kBf16, sh, false).recompute_s,
              9437184.0 / bw + 3 * off.kernel_overhead_s, 1e-9);
}


TEST(ComputeModel, MegatronBshdCopiesOfQkvAndTheirGradients) {
  // Megatron-core r0.5-v0.13 with RoPE fusion: q, k and v go to Transformer
  // Engine through x.transpose(0, 1).contiguous(). GPT-2 124M (learned
  // positions, 12 heads of 64) at 1024 tokens: all three are views into the
  // fused QKV output, so all three are copied, read + write 3 x 1024 x 768 x
  // 2 bytes = 9,437,184, three kernels; their gradients are concatenated
  // back, the same bytes, one kernel. Llama-3-8B (RoPE: q and k rewritten by
  // the fused kernel, 8 K/V heads of 128) at 2048 tokens: v alone, 2 x 2048 x
  // 1024 x 2 = 8,388,608 bytes; the concatenation 2 x 2048 x (32 + 16) x 128
  // x 2 = 50,331,648.
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  SimOptions off;
  off.framework = "megatron-core";
  SimOptions on = off;
  on.qkv_bshd_copies = true;
  const double bw = 2039e9 * 0.88, launch = off.kernel_overhead_s;
  Layout l;
  struct Case {
    const char* model;
    int tokens;
    double fwd_bytes, bwd_bytes;
    int fwd_kernels;
  };
  for (const Case& c : {Case{"gpt2-124m", 1024, 9437184, 9437184, 3}, Case{"llama-3-8b", 2048, 8388608, 50331648, 1}}) {
    ModelSpec m = testing::load_model_or_die(c.model);
    const ComputeShape sh = compute_shape(l, c.tokens, hw);
    const PieceCost a = layer_cost(m, hw, off, Precision::kBf16, sh, false);
    const PieceCost b = layer_cost(m, hw, on, Precision::kBf16, sh, false);
    EXPECT_NEAR(b.fwd_s - a.fwd_s, c.fwd_bytes / bw + c.fwd_kernels * launch, 1e-9) << c.model;
    EXPECT_NEAR(b.bwd_s - a.bwd_s, c.bwd_bytes / bw + launch, 1e-9) << c.model;
  }
}

TEST(ComputeModel, TransformerEngineFusesTheNormAndItsFp8CastUnderDelayedScaling) {
  // The QKV's and FC1's input norms of a dense layer write FP8 and its
  // transpose (read 2, write 1, then read 1 and write 1: 5 bytes an element)
  // instead of a 16-bit output and a separate cast (4 + 4): 3 bytes less for
  // each of 2 x 2048 x 4096 elements of Llama-3-8B at 2048 tokens,
  // 50,331,648 bytes of the forward. Current scaling casts in a pass of its
  // own: no change.
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions off;
  off.framework = "megatron-core";
  off.fp8_scaling = Fp8Scaling::kDelayed;
  SimOptions on = off;
  on.fp8_norm_cast_fused = true;
  Layout l;
  const ComputeShape sh = compute_shape(l, 2048, hw);
  const PieceCost a = layer_cost(m, hw, off, Precision::kFp8, sh, false);
  const PieceCost b = layer_cost(m, hw, on, Precision::kFp8, sh, false);
  const double bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  EXPECT_NEAR(a.fwd_s - b.fwd_s, 50331648.0 / bw, 1e-9);
  EXPECT_DOUBLE_EQ(a.bwd_s, b.bwd_s);
  off.fp8_scaling = on.fp8_scaling = Fp8Scaling::kCurrent;
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, off, Precision::kFp8, sh, false).fwd_s,
                   layer_cost(m, hw, on, Precision::kFp8, sh, false).fwd_s);
  // In 16 bits there is no cast to fuse.
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, off, Precision::kBf16, sh, false).fwd_s,
                   layer_cost(m, hw, on, Precision::kBf16, sh, false).fwd_s);
}


TEST(ComputeModel, FewAttentionTilesLeaveSmsIdle) {
  // One query tile of 128 rows per CTA, one CTA per SM, tile i of a causal
  // head scanning i key blocks: the kernel lasts max(total / SMs, longest).
  // 7 heads x 32 tiles (4096 tokens) on 132 SMs: total 7 x 528 = 3696
  // blocks, 28 an SM, longest 32: 0.875. 4 heads x 16 tiles: 544 / 132 =
  // 4.12 against 16: 0.2576. 64 heads x 32 tiles: every SM full.
  EXPECT_NEAR(attention_tile_occupancy(7, 4096, 132), 0.875, 1e-12);
  EXPECT_NEAR(attention_tile_occupancy(4, 2048, 132), 4.0 * 17 / 264, 1e-12);
  EXPECT_DOUBLE_EQ(attention_tile_occupancy(64, 4096, 132), 1.0);
  // Llama-3-8B at tp = 8 (4 query heads a rank), one 2048-token sequence on
  // H100: the attention core's FLOPs 4 x 2048^2 x 128 x 4 heads x 2049/4096
  // = 4.297e9, at the cuDNN table's 0.4894 (one head's causal forward,
  // 1.074 GFLOP, is its point) of 989 TFLOP/s: 8.88 us at full occupancy,
  // 34.5 us at 0.2576 (+25.6 us forward, x 2.98 backward). A profile's
  // table that names no kernel (`loom calibrate`'s own) is taken as is.
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  HwProfile unnamed = hw;
  unnamed.accel.attention_kernel.clear();
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  l.tp = 8;
  const ComputeShape sh = compute_shape(l, 2048, hw);
  SimOptions opt;
  const PieceCost a = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
  const PieceCost b = layer_cost(m, unnamed, opt, Precision::kBf16, sh, false);
  const double core = 4.0 * 2048 * 2048 * 128 * 4 * 2049 / 4096 / (989e12 * 0.4894);
  const double extra = core * (264.0 / 68 - 1);
  // (Within 0.1%: the TP collectives take SM time in proportion to the
  // compute beside them.)
  EXPECT_NEAR(a.fwd_s - b.fwd_s, extra, extra * 1e-3);
  EXPECT_NEAR(extra, 25.6e-6, 0.1e-6);
  EXPECT_NEAR(a.bwd_s - b.bwd_s, extra * 2.98, extra * 2.98 * 1e-3);
  // At tp = 1 (32 heads: 32 x 17 / 264 > 1) nothing changes.
  const ComputeShape one = compute_shape(Layout{}, 2048, hw);
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, opt, Precision::kBf16, one, false).fwd_s,
                   layer_cost(m, unnamed, opt, Precision::kBf16, one, false).fwd_s);
}

}  // namespace
}  // namespace loom
