// One transformer layer against a published measurement of that layer alone:
// Transformer Engine's "Getting Started" benchmark (NVIDIA/TransformerEngine
// docs/getting_started/getting_started_pytorch.py, its output
// getting_started_pytorch.out at 04e03e99 and the summary CSV; run on "an
// NVIDIA H100 GPU", docs/getting_started/index.rst). A GPT layer, hidden 4096,
// 32 heads, FFN 16384 with GeLU, biases, causal attention through
// te.DotProductAttention, sequence 2048, batch 8 (16,384 tokens), bf16
// weights; forward and backward timed over 100 iterations after 10 warm-up
// (CUDA events), no optimizer, no communication:
//   TE Unfused (bf16, attention in plain PyTorch, dropout 0.1) 49.342 ms
//   TE Unfused + TE Attention (bf16, dropout 0.1)            35.709 ms
//   TE Unfused + TE Attention + FP8 (delayed, dropout 0.1)    23.406 ms
//   TE TransformerLayer + FP8 (delayed, dropout 0)            21.670 ms
// Loom prices the layer as Megatron-core runs Transformer Engine's fused
// modules (the megatron-core framework: LayerNormLinear, LayerNormMLP, the
// weight gradients added into fp32 main gradients, where the benchmark's
// autograd adds them into bf16 .grad; docs/validation.md "One layer on one
// GPU"). The FP8 TransformerLayer is that layer; the bf16 figure ran unfused
// (separate norms, GeLU, dropouts and residual adds), which moves more bytes
// than the fused layer Loom prices, so Loom's bf16 error is a bound on its
// GEMM and attention rates' error, not the error itself.
//
// The first ran the attention in plain PyTorch (getting_started_utils_pytorch.py
// DotProductAttention: two bmm over all s x s scores, the scale, softmax and
// dropout as separate kernels, no mask): Loom's materialized attention
// (flash_attention off) prices its bmms and its softmax and dropout; the
// separate scale (bmm1 / norm_factor, where Megatron's fused
// scale-mask-softmax folds it in) is one more read and write of the scores
// each way, 8 bytes a score, added here at the profile's memory rate.
//
// The pins hold today's errors within +-10% (bf16 -6.6%, bf16 materialized
// -8.1%, FP8 TransformerLayer +8.2%, FP8 unfused +0.7%) so that a change to
// the layer's pricing shows; no constant is set from them.
#include <gtest/gtest.h>

#include "core/hw_profile.h"
#include "sim/compute_model.h"
#include "sim/framework.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

double layer_ms(Precision p, int dropout, bool flash = true) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::gpt_block_model(4096, 32, 1, 50304, 2048);
  SimOptions opt;
  auto mc = load_framework("megatron-core");
  EXPECT_TRUE(mc.is_ok()) << mc.status().to_string();
  apply_framework(mc.value(), &opt);
  opt.dropout = dropout;
  opt.fp8_scaling = Fp8Scaling::kDelayed;  // DelayedScaling(HYBRID, amax_history_len=16)
  opt.flash_attention = flash;
  Layout l;
  l.micro_batch = 8;
  const ComputeShape sh = compute_shape(l, 2048, hw);
  EXPECT_EQ(sh.tokens, 8 * 2048);
  const PieceCost c = layer_cost(m, hw, opt, p, sh, false);
  return (c.fwd_s + c.bwd_s) * 1e3;
}

TEST(LayerBenchmark, TransformerEngineGettingStartedGptLayerOnH100) {
  // The model is TE's: 12 h^2 weights a layer plus biases, a 4h MLP.
  const ModelSpec m = testing::gpt_block_model(4096, 32, 1);
  EXPECT_EQ(m.ffn_hidden, 16384);
  const double bf16 = layer_ms(Precision::kBf16, 1);
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const double scores = 8.0 * 32 * 2048 * 2048;
  const double scale_ms =
      (8 * scores / (hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency) + 2 * SimOptions{}.kernel_overhead_s) * 1e3;
  const double bf16_materialized = layer_ms(Precision::kBf16, 1, false) + scale_ms;
  const double fp8_unfused = layer_ms(Precision::kFp8, 1);
  const double fp8_layer = layer_ms(Precision::kFp8, 0);
  RecordProperty("bf16_ms", std::to_string(bf16));
  RecordProperty("bf16_materialized_ms", std::to_string(bf16_materialized));
  RecordProperty("fp8_ms", std::to_string(fp8_layer));
  EXPECT_NEAR(bf16 / 35.709 - 1, 0, 0.10) << bf16 << " ms against 35.709";
  EXPECT_NEAR(bf16_materialized / 49.342 - 1, 0, 0.10) << bf16_materialized << " ms against 49.342";
  EXPECT_NEAR(fp8_unfused / 23.406 - 1, 0, 0.10) << fp8_unfused << " ms against 23.406";
  EXPECT_NEAR(fp8_layer / 21.670 - 1, 0, 0.10) << fp8_layer << " ms against 21.670";
  // What the measurement says beyond the pins (docs/validation.md): FP8 runs
  // this layer 35.709 / 21.670 = 1.65 times as fast as bf16 (against the
  // unfused bf16 layer, so at least that against a fused one); Loom gives
  // less, from its profile's caps (bf16 708.4, FP8 1175 TFLOP/s). Recorded,
  // not pinned: the ratio moves with both caps.
  RecordProperty("fp8_speedup", std::to_string(bf16 / fp8_layer));
}

}  // namespace
}  // namespace loom
