// Compute model: FLOPs per layer against the model's own parameter-based
// count (2 FLOPs per multiply-add of every weight a token touches), the
// backward/recompute ratios, and the TP split.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/compute_model.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

ComputeShape shape_for(const Layout& l, int64_t seq, const HwProfile& hw) { return compute_shape(l, seq, hw); }

TEST(ComputeModel, LayerFlopsMatchTheModelsParameterCount) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  SimOptions opt;
  for (const char* name : {"llama-3-8b", "gpt2-124m", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"}) {
    ModelSpec m = testing::load_model_or_die(name);
    Layout l;
    const int64_t seq = 1024;
    ComputeShape sh = shape_for(l, seq, hw);
    for (bool moe : {false, true}) {
      if (moe && !m.is_moe()) continue;
      if (!moe && m.is_moe() && m.num_dense_layers() == 0) continue;
      int layer = 0;
      while (m.is_moe_layer(layer) != moe) ++layer;
      PieceCost c = layer_cost(m, hw, opt, Precision::kBf16, sh, moe);
      const double tokens = double(seq);
      double expect = tokens * (m.layer_matmul_flops_fwd(layer) + m.attention_flops_per_token_fwd(seq, true));
      // Flash attention skips masked blocks: (s+1)/(2s) of the full scores, vs
      // ModelSpec's exact half; the router of a MoE layer is counted alike.
      EXPECT_NEAR(c.fwd_flops / expect, 1.0, 2e-3) << name << (moe ? " moe" : " dense");
      EXPECT_NEAR(c.bwd_flops / c.fwd_flops, 2.0, 0.1) << name;  // dgrad + wgrad (+ flash's recompute of scores)
    }
  }
}

TEST(ComputeModel, QkNormAddsItsMemoryBoundPass) {
  // Qwen3's per-head q/k RMSNorm reads and writes q and k once more: a small,
  // memory-bound addition (no FLOPs counted, as for the other norms).
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  Layout l;
  PieceCost base = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
  m.qk_norm = true;
  PieceCost with = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
  EXPECT_GT(with.fwd_s, base.fwd_s);
  EXPECT_LT(with.fwd_s, base.fwd_s * 1.05);
  EXPECT_EQ(with.fwd_flops, base.fwd_flops);
}

TEST(ComputeModel, EagerLayerOpsAddTheirPasses) {
  // torchtitan's eager Llama block against the fused one, Llama-3-8B, 8192
  // tokens, no TP (q: 32 heads, k: 8, head dim 128; FFN 14336), bf16:
  // * the q, k and v projections run as three GEMMs, not one;
  // * RoPE: cast to fp32, complex multiply, cast back = 2+4 + 4+4 + 4+2 = 20
  //   bytes a q/k element against the fused 4 (backward: 20 against 8):
  //   8192 x 40 x 128 = 41,943,040 elements, +16 (+12) bytes each;
  // * repeat_kv: K and V copied from 8 to 32 heads (read 8, write 32 heads,
  //   2 bytes): 2 x 8192 x 40 x 128 x 2 = 167,772,160 bytes, and the same
  //   summed back in backward;
  // * SwiGLU: silu (4 bytes) and the multiply (6) against one 6-byte kernel,
  //   backward 18 against 12: 8192 x 14336 = 117,440,512 elements, +4 (+6).
  // Forward: 671,088,640 + 167,772,160 + 469,762,048 = 1,308,622,848 bytes
  // and 8 more kernels; backward: 503,316,480 + 167,772,160 + 704,643,072 =
  // 1,375,731,712 bytes and 8 more kernels.
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions fused;
  SimOptions eager;
  eager.layer_ops = LayerOps::kTorchEager;
  Layout l;
  const ComputeShape sh = shape_for(l, 8192, hw);
  const PieceCost a = layer_cost(m, hw, fused, Precision::kBf16, sh, false);
  const PieceCost b = layer_cost(m, hw, eager, Precision::kBf16, sh, false);
  const double T = 8192, bw = 2039e9 * 0.88, launch = fused.kernel_overhead_s;
  // This profile measures no forward share: a GEMM's backward is twice its forward.
  const double qkv = gemm_time_s(hw, Precision::kBf16, T, 4096, 4096) +
                     2 * gemm_time_s(hw, Precision::kBf16, T, 1024, 4096) -
                     gemm_time_s(hw, Precision::kBf16, T, 6144, 4096);
  EXPECT_NEAR(b.fwd_s - a.fwd_s, qkv + 1308622848.0 / bw + 8 * launch, 1e-9);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, 2 * qkv + 1375731712.0 / bw + 8 * launch, 1e-9);
  EXPECT_EQ(b.fwd_flops, a.fwd_flops);
  // MoE layers keep their own (fused) path.
  ModelSpec moe = testing::load_model_or_die("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(layer_cost(moe, hw, fused, Precision::kBf16, sh, true).fwd_s,
                   layer_cost(moe, hw, eager, Precision::kBf16, sh, true).fwd_s);
}

TEST(ComputeModel, RecomputeCostsWhatItRecomputes) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  Layout l;
  PieceCost none = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
  EXPECT_EQ(none.recompute_s, 0);
  l.recompute = Recompute::kFull;
  PieceCost full = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
  EXPECT_DOUBLE_EQ(full.recompute_flops, full.fwd_flops);
  EXPECT_DOUBLE_EQ(full.recompute_s, full.fwd_s);
  l.recompute = Recompute::kSelective;
  PieceCost sel = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
  EXPECT_GT(sel.recompute_flops, 0);
  EXPECT_NEAR(sel.recompute_flops, m.attention_flops_per_token_fwd(4096, true) * 4096, 0.01 * sel.recompute_flops);
}

// torchtitan's selective op AC (parallelize_llama.py _custom_policy at
// 1ea476e9f): the outputs of aten.mm and of the SDPA kernel are kept "except
// every second mm", and every other op re-runs. A Llama block's mms in
// forward order are wq, wk, wv, wo, w1 (gate), w3 (up), w2 (down), so wk, wo
// and w3 re-run, with the elementwise ops, and the attention kernel does not.
TEST(ComputeModel, SelectiveOpCheckpointingRerunsEverySecondMatmul) {
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  const double T = 8192, h = 4096, kv = 1024, f = 14336;
  Layout l;
  SimOptions opt;
  opt.framework = "torchtitan";  // a framework's option: Loom's executor has its own
  const PieceCost none = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 8192, hw), false);
  l.recompute = Recompute::kSelective;
  opt.selective_recompute = SelectiveRecompute::kEveryOtherMatmul;
  const PieceCost op = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 8192, hw), false);
  auto mm = [&](double n, double k) { return gemm_time_s(hw, Precision::kBf16, T, n, k); };
  // The forward is its GEMMs (the fused QKV, o, gate+up, down), the attention
  // core and the memory-bound ops; the last are what the recompute re-runs
  // beside wk, wo and w3.
  const double core = none.fwd_s - (mm(h + 2 * kv, h) + mm(h, h) + mm(2 * f, h) + mm(h, f));
  const double rerun_mms = mm(kv, h) + mm(h, h) + mm(f, h);
  EXPECT_NEAR(op.recompute_flops, 2 * T * (kv * h + h * h + f * h), 1e-6 * op.recompute_flops);
  EXPECT_GT(op.recompute_s, rerun_mms);
  EXPECT_LT(op.recompute_s, rerun_mms + core);  // not the attention core
  // Megatron's selective re-runs the attention core alone.
  opt.selective_recompute = SelectiveRecompute::kAttentionCore;
  const PieceCost megatron = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 8192, hw), false);
  EXPECT_NEAR(megatron.recompute_flops, m.attention_flops_per_token_fwd(8192, true) * 8192,
              0.01 * megatron.recompute_flops);
  EXPECT_LT(megatron.recompute_s, core);
  // The memory-bound part the op policy re-runs is the forward's own: the
  // recompute minus its three mms equals the forward minus its GEMMs and its
  // attention core, so the two differences agree.
  const double elementwise = op.recompute_s - rerun_mms;
  EXPECT_NEAR(elementwise + megatron.recompute_s, core, 1e-3 * core);
  // Without a framework (Loom's executor) the option does not apply.
  SimOptions loom = opt;
  loom.framework.clear();
  loom.selective_recompute = SelectiveRecompute::kEveryOtherMatmul;
  EXPECT_DOUBLE_EQ(layer_cost(m, hw, loom, Precision::kBf16, shape_for(l, 8192, hw), false).recompute_s,
                   megatron.recompute_s);
  // Under context parallelism the op policy re-runs no ring (the attention
  // kernel's outputs are kept): no second ring's traffic.
  Layout cp = l;
  cp.cp = 2;
  SimOptions titan = opt;
  titan.selective_recompute = SelectiveRecompute::kEveryOtherMatmul;
  Layout cp_none = cp;
  cp_none.recompute = Recompute::kNone;
  EXPECT_EQ(layer_cost(m, hw, titan, Precision::kBf16, shape_for(cp, 8192, hw), false).cp_calls,
            layer_cost(m, hw, titan, Precision::kBf16, shape_for(cp_none, 8192, hw), false).cp_calls);
}

TEST(ComputeModel, TensorParallelSplitsTheGemmsAndAddsCollectives) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-70b");
  SimOptions opt;
  Layout l1;
  PieceCost one = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l1, 4096, hw), false);
  EXPECT_EQ(one.tp_calls, 0);
  for (int tp : {2, 4, 8}) {
    Layout l;
    l.tp = tp;
    l.dp = 1;
    PieceCost c = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
    EXPECT_NEAR(c.fwd_flops * tp / one.fwd_flops, 1.0, 1e-9) << "tp=" << tp;
    EXPECT_EQ(c.tp_calls, 4);        // Megatron: 2 all-reduces in forward (attention, MLP), 2 in backward
    EXPECT_GT(c.fwd_tp_s, 0);
    EXPECT_LT(c.fwd_s, one.fwd_s);   // less compute per rank outweighs the collectives here
    l.sequence_parallel = true;
    PieceCost s = layer_cost(m, hw, opt, Precision::kBf16, shape_for(l, 4096, hw), false);
    EXPECT_EQ(s.tp_calls, 8);        // each all-reduce becomes a reduce-scatter + all-gather pair
    // Megatron-core's async backward re-gathers each block's input for the
    // weight gradient: backward has per block the output gradient's
    // all-gather, that re-gather and the input gradient's reduce-scatter.
    SimOptions async = opt;
    async.tp_async_backward = true;
    EXPECT_EQ(layer_cost(m, hw, async, Precision::kBf16, shape_for(l, 4096, hw), false).tp_calls, 10);
  }
}

// Megatron-core's backward TP overlap (LinearWithGradAccumulationAndAsync-
// Communication, SimOptions::tp_async_backward): the input-gradient
// all-reduce after QKV's and FC1's dgrad
// runs while their wgrad computes. Llama-3-70B, tp = 8 on one H100 node, 4096
// tokens: the all-reduce of 4096 x 8192 bf16 (64 MiB) outlasts QKV's wgrad
// (4096 x 1280 x 8192, 86 GFLOP) but not FC1's (gate+up 4096 x 7168 x 8192,
// 481 GFLOP), so backward exposes the all-reduce less QKV's GEMM, and
// nothing of the MLP's; forward exposes both all-reduces.
TEST(ComputeModel, BackwardTensorParallelHidesBehindWeightGradients) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-70b");
  Layout l;
  l.tp = 8;
  const ComputeShape sh = shape_for(l, 4096, hw);
  SimOptions async;
  async.tp_async_backward = true;
  PieceCost c = layer_cost(m, hw, async, Precision::kBf16, sh, false);
  const double ar = collective_cost(hw, Collective::kAllReduce, sh.tp_group, 4096.0 * 8192 * 2).time_s;
  const double qkv = gemm_time_s(hw, Precision::kBf16, 4096, (64 + 2 * 8) * 128 / 8, 8192);
  const double fc1 = gemm_time_s(hw, Precision::kBf16, 4096, 2 * 28672 / 8, 8192);
  std::printf("all-reduce %.3f ms, QKV wgrad %.3f ms, FC1 wgrad %.3f ms\n", ar * 1e3, qkv * 1e3, fc1 * 1e3);
  ASSERT_GT(ar, qkv);
  ASSERT_LT(ar, fc1);
  EXPECT_NEAR(c.fwd_tp_s, 2 * ar, 1e-12);
  EXPECT_NEAR(c.bwd_tp_s, ar - qkv, 1e-12);
  EXPECT_NEAR(c.tp_comm_total_s, 4 * ar, 1e-12) << "all four all-reduces still run";
  // Synchronous (Loom's executor, Megatron-LM 2021): both exposed.
  PieceCost sync = layer_cost(m, hw, SimOptions{}, Precision::kBf16, sh, false);
  EXPECT_NEAR(sync.bwd_tp_s, 2 * ar, 1e-12);
}

// The LM head is column-parallel over the vocabulary: each TP rank holds a
// partial gradient of its replicated input, all-reduced in backward (4096 x
// 8192 bf16 for 70B at tp = 8), exposed unless the async backward hides it
// behind the head's weight gradient (4096 x 16032 x 8192: far longer).
TEST(ComputeModel, TheHeadAllReducesItsInputGradientInBackward) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-70b");
  Layout l;
  l.tp = 8;
  const ComputeShape sh = shape_for(l, 4096, hw);
  const double ar = collective_cost(hw, Collective::kAllReduce, sh.tp_group, 4096.0 * 8192 * 2).time_s;
  PieceCost sync = head_cost(m, hw, SimOptions{}, Precision::kBf16, sh);
  EXPECT_EQ(sync.tp_calls, 4);  // 3 loss all-reduces + the input gradient's
  EXPECT_NEAR(sync.bwd_tp_s, ar, 1e-12);
  SimOptions async;
  async.tp_async_backward = true;
  EXPECT_EQ(head_cost(m, hw, async, Precision::kBf16, sh).bwd_tp_s, 0.0);
}

// The loss's passes over the logits, counted from each implementation's code
// (sim/sim_options.h), bf16 logits (e = 2) and fp32 (4, no cast):
//  megatron (megatron/core/tensor_parallel/cross_entropy.py): .float() 2+4,
//    max 4, sub_ 8, exp 8, sum 4, div_ 8 = 38; backward mul_ 8, cast 4+2 = 14.
//    fp32: 32 and 8.
//  megatron_fused (fused_cross_entropy.py under torch.compile): the copy with
//    its max 6, shift+exp+sum 8, div 8 = 22; backward 14. fp32: 20 and 8.
//  te (TE's triton/cross_entropy.py): two reads and a write of the row,
//    3 x 2 = 6; backward element_mul 4.
//  torch (F.cross_entropy on .float()): cast 6, log_softmax 3 reads + 1 write
//    16 = 22; backward nll's zeroed gradient 4, softmax backward 16, cast 6
//    = 26. fp32: 16 and 20.
//  fused: 2+4+4 = 10 and 4+2 = 6.
TEST(ComputeModel, CrossEntropyPassesFollowTheImplementation) {
  struct Row {
    CrossEntropyImpl impl;
    double fwd16, bwd16, fwd32, bwd32;
  } rows[] = {{CrossEntropyImpl::kMegatron, 38, 14, 32, 8},
              {CrossEntropyImpl::kMegatronFused, 22, 14, 20, 8},
              {CrossEntropyImpl::kTe, 6, 4, 12, 8},
              {CrossEntropyImpl::kTorch, 22, 26, 16, 20},
              {CrossEntropyImpl::kFused, 10, 6, 12, 8}};
  for (const Row& r : rows) {
    const CrossEntropyBytes b16 = cross_entropy_bytes(r.impl, 2), b32 = cross_entropy_bytes(r.impl, 4);
    EXPECT_EQ(b16.forward, r.fwd16) << cross_entropy_name(r.impl);
    EXPECT_EQ(b16.backward, r.bwd16) << cross_entropy_name(r.impl);
    EXPECT_EQ(b32.forward, r.fwd32) << cross_entropy_name(r.impl);
    EXPECT_EQ(b32.backward, r.bwd32) << cross_entropy_name(r.impl);
    CrossEntropyImpl back;
    ASSERT_TRUE(parse_cross_entropy(cross_entropy_name(r.impl), &back));
    EXPECT_EQ(back, r.impl);
  }
  CrossEntropyImpl unused;
  EXPECT_FALSE(parse_cross_entropy("liger", &unused));

  // In the head: Megatron's unfused loss over Llama-3-8B's 128,256 logits a
  // token, 4096 tokens, bf16 on an H100, costs (38 - 10) bytes a logit and
  // 4 kernels more than the fused default in forward, (14 - 6) bytes in
  // backward, and nothing else.
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  const ComputeShape sh = shape_for(l, 4096, hw);
  SimOptions fused, megatron;
  megatron.cross_entropy = CrossEntropyImpl::kMegatron;
  const PieceCost a = head_cost(m, hw, fused, Precision::kBf16, sh), b = head_cost(m, hw, megatron, Precision::kBf16, sh);
  const double logits = 4096.0 * 128256, bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  EXPECT_NEAR(b.fwd_s - a.fwd_s, logits * 28 / bw + 4 * fused.kernel_overhead_s, 1e-12);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, logits * 8 / bw, 1e-12);
  EXPECT_EQ(b.fwd_flops, a.fwd_flops);
  // About 8.4 ms a micro-batch more at 3.35 TB/s: not a rounding error next
  // to the head's ~12 ms of GEMMs.
  EXPECT_GT(b.fwd_s + b.bwd_s - a.fwd_s - a.bwd_s, 5e-3);
}

// #17: a profile that measured the executor's cross-entropy prices the loss
// per logit, forward and backward parts both in the forward pass (Loom's
// executor writes the logits' gradient there): GPT-2's vocabulary, 512 tokens
// at 3 + 2 ns per logit = 512 x 50257 x 5 ns = 128.7 ms more forward than the
// same profile without the measurement charges as memory traffic, and the
// backward loses exactly its memory-traffic share (T x V x (4 + e) bytes).
TEST(ComputeModel, MeasuredCrossEntropyIsForwardTimePerLogit) {
  HwProfile hw = testing::load_hw_or_die("cpu-local");
  ModelSpec m = testing::load_model_or_die("gpt2-124m");
  Layout l;
  l.micro_batch = 4;
  const ComputeShape sh = shape_for(l, 128, hw);
  const SimOptions opt;
  PieceCost traffic = head_cost(m, hw, opt, Precision::kFp32, sh);
  HwProfile measured = hw;
  measured.accel.xent_fwd_ns_per_logit = 3;
  measured.accel.xent_bwd_ns_per_logit = 2;
  PieceCost timed = head_cost(m, measured, opt, Precision::kFp32, sh);
  const double logits = 512.0 * 50257;
  const double bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  const double fwd_traffic = logits * (4 + 4 + 4) / bw + 2 * opt.kernel_overhead_s;
  const double bwd_traffic = logits * (4 + 4) / bw + 2 * opt.kernel_overhead_s;
  EXPECT_NEAR(timed.fwd_s - traffic.fwd_s, logits * 5e-9 - fwd_traffic, 1e-9);
  EXPECT_NEAR(traffic.bwd_s - timed.bwd_s, bwd_traffic, 1e-9);
  EXPECT_EQ(timed.fwd_flops, traffic.fwd_flops);  // the loss adds time, not model FLOPs
}

// A profile that measured the LM head's own GEMMs prices the head by them:
// 512 tokens x 50257 x 768 is 2 x 512 x 50257 x 768 = 39.5 GFLOP forward; at
// efficiency 0.25 of a 100 GFLOP/s peak that is 1.581 s forward and twice
// that in backward, whatever the main table says.
TEST(ComputeModel, MeasuredHeadGemmsPriceTheHead) {
  HwProfile hw = testing::load_hw_or_die("cpu-local");
  hw.accel.peak_fp32_flops = 100e9;
  hw.accel.head_gemm_efficiency.flops = {1e9, 1e11};
  hw.accel.head_gemm_efficiency.efficiency = {0.25, 0.25};
  ModelSpec m = testing::load_model_or_die("gpt2-124m");
  Layout l;
  l.micro_batch = 4;
  const ComputeShape sh = shape_for(l, 128, hw);
  HwProfile without = hw;
  without.accel.head_gemm_efficiency = {};
  PieceCost with_table = head_cost(m, hw, SimOptions{}, Precision::kFp32, sh);
  PieceCost main_table = head_cost(m, without, SimOptions{}, Precision::kFp32, sh);
  const double flops = 2.0 * 512 * 50257 * 768, t = flops / (100e9 * 0.25);
  const double main_t = gemm_time_s(without, Precision::kFp32, 512, 50257, 768);
  EXPECT_NEAR(with_table.fwd_s - main_table.fwd_s, t - main_t, 1e-9);
  EXPECT_NEAR(with_table.bwd_s - main_table.bwd_s, 2 * (t - main_t), 1e-9);
  EXPECT_EQ(with_table.fwd_flops, flops);
}

// A measured forward share moves GEMM time between the passes and keeps
// their sum: with share s the forward GEMMs take 3 s of the mean pass's time.
TEST(ComputeModel, MeasuredForwardSharesSplitTheGemmPasses) {
  HwProfile even = testing::load_hw_or_die("cpu-local");
  HwProfile skew = even;
  skew.accel.gemm_efficiency.forward_share.assign(skew.accel.gemm_efficiency.flops.size(), 0.5);
  skew.accel.head_gemm_efficiency.flops = {1e9, 1e11};
  skew.accel.head_gemm_efficiency.efficiency = {0.25, 0.25};
  skew.accel.head_gemm_efficiency.forward_share = {0.2, 0.2};
  HwProfile head_even = skew;
  head_even.accel.head_gemm_efficiency.forward_share.clear();
  ModelSpec m = testing::load_model_or_die("gpt2-124m");
  Layout l;
  l.micro_batch = 4;
  const ComputeShape sh = shape_for(l, 128, even);
  const PieceCost a = layer_cost(m, even, SimOptions{}, Precision::kFp32, sh, false);
  const PieceCost b = layer_cost(m, skew, SimOptions{}, Precision::kFp32, sh, false);
  // Hand calculation: GEMM time G per pass at share 1/3 (forward G, backward
  // 2G); at share 1/2 forward 1.5 G and backward 1.5 G.
  const double T = 512, h = 768, G = gemm_time_s(even, Precision::kFp32, T, 3 * h, h) +
                                     gemm_time_s(even, Precision::kFp32, T, h, h) +
                                     gemm_time_s(even, Precision::kFp32, T, 4 * h, h) +
                                     gemm_time_s(even, Precision::kFp32, T, h, 4 * h);
  EXPECT_NEAR(b.fwd_s - a.fwd_s, 0.5 * G, 1e-9 * G);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, -0.5 * G, 1e-9 * G);
  // The head on its own table: 3 passes of flops / (peak x 0.25), forward 20%.
  const PieceCost h_even = head_cost(m, head_even, SimOptions{}, Precision::kFp32, sh);
  const PieceCost h_skew = head_cost(m, skew, SimOptions{}, Precision::kFp32, sh);
  const double t = 2.0 * 512 * 50257 * 768 / (skew.accel.peak_fp32_flops * 0.25);
  EXPECT_NEAR(h_skew.fwd_s - h_even.fwd_s, (0.6 - 1) * t, 1e-9 * t);
  EXPECT_NEAR(h_skew.bwd_s - h_even.bwd_s, (2.4 - 2) * t, 1e-9 * t);
}

}  // namespace
}  // namespace loom

// DualPipe-style EP overlap, by hand: a MoE layer's forward + backward pair
// hides its four all-to-alls behind its own compute and exposes only what
// that compute cannot cover; the hidden part costs the SMs NCCL holds.
namespace loom {
namespace {

TEST(ComputeModel, EpOverlapExposesOnlyWhatThePairCannotCover) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  Layout l;
  l.dp = 8;
  l.ep = 8;
  const ComputeShape sh = compute_shape(l, 4096, hw);
  SimOptions opt;
  const PieceCost base = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  ASSERT_GT(base.ep_comm_total_s, 0);
  EXPECT_NEAR(base.fwd_ep_s + base.bwd_ep_s, base.ep_comm_total_s, 1e-12);  // all exposed without overlap
  opt.ep_comm_overlap = true;
  const PieceCost ov = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  const double compute = base.fwd_s + base.bwd_s - base.ep_comm_total_s;
  const double exposed = std::max(0.0, base.ep_comm_total_s - compute);
  const double hidden = base.ep_comm_total_s - exposed;
  EXPECT_NEAR(ov.fwd_ep_s + ov.bwd_ep_s, exposed, 1e-12);
  EXPECT_NEAR(ov.fwd_s + ov.bwd_s, compute + exposed + hidden * comm_contention_fraction(hw), 1e-12);
  EXPECT_LT(ov.fwd_s + ov.bwd_s, base.fwd_s + base.bwd_s);
}

// FP8 attention (Transformer Engine's fp8_dot_product_attention) is the
// 16-bit kernel's time over the FP8 speedup the profile measured, forward
// and backward apart: with a forward speedup of 2 the forward loses half its
// attention core and the backward nothing; with 4, three quarters, 1.5 times
// the first drop. Without a measurement (another head dim than the measured
// 128, or materialized scores, for which no fused FP8 kernel exists) it
// costs what the 16-bit kernel does.
TEST(ComputeModel, Fp8AttentionIsTheMeasuredSpeedupOverSixteenBits) {
  HwProfile hw = testing::load_hw_or_die("dgx-b200");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  const ComputeShape sh = compute_shape(l, 4096, hw);
  SimOptions opt;
  auto cost = [&](double fwd, double bwd, bool fp8_attention) {
    HwProfile h = hw;
    h.accel.fp8_attention_speedup.seq = {1024, 8192};
    h.accel.fp8_attention_speedup.forward = {fwd, fwd};
    h.accel.fp8_attention_speedup.backward = {bwd, bwd};
    SimOptions o = opt;
    o.fp8_attention = fp8_attention;
    return layer_cost(m, h, o, Precision::kFp8, sh, false);
  };
  const PieceCost bf16 = cost(2, 1, false), f2 = cost(2, 1, true), f4 = cost(4, 1, true), b2 = cost(1, 2, true);
  const double half = bf16.fwd_s - f2.fwd_s;
  ASSERT_GT(half, 0);
  EXPECT_NEAR(f2.bwd_s, bf16.bwd_s, 1e-12);
  EXPECT_NEAR(bf16.fwd_s - f4.fwd_s, 1.5 * half, 1e-12);
  EXPECT_NEAR(b2.fwd_s, bf16.fwd_s, 1e-12);
  EXPECT_LT(b2.bwd_s, bf16.bwd_s);
  // The shipped B200 profile measured 1.079 forward and 1.167 backward at
  // 4096 (cuDNN 9.13.1): the forward core shrinks by 1 - 1/1.079 of itself,
  // 2 x half of it being the whole 16-bit core.
  SimOptions on = opt;
  on.fp8_attention = true;
  const PieceCost shipped = layer_cost(m, hw, on, Precision::kFp8, sh, false);
  EXPECT_NEAR(bf16.fwd_s - shipped.fwd_s, 2 * half * (1 - 1 / 1.079), 1e-9);
  HwProfile none = hw;
  none.accel.fp8_attention_speedup = {};
  const PieceCost unmeasured = layer_cost(m, none, on, Precision::kFp8, sh, false);
  EXPECT_NEAR(unmeasured.fwd_s, bf16.fwd_s, 1e-12);
  EXPECT_NEAR(unmeasured.bwd_s, bf16.bwd_s, 1e-12);
  SimOptions materialized = on;
  materialized.flash_attention = false;
  SimOptions materialized_off = materialized;
  materialized_off.fp8_attention = false;
  EXPECT_NEAR(layer_cost(m, hw, materialized, Precision::kFp8, sh, false).fwd_s,
              layer_cost(m, hw, materialized_off, Precision::kFp8, sh, false).fwd_s, 1e-12);
  // The ratios measure head dim 128: MLA's 192/128 heads have none, and
  // price the 16-bit kernel.
  ModelSpec mla = testing::load_model_or_die("deepseek-v3");
  SimOptions off = on;
  off.fp8_attention = false;
  EXPECT_NEAR(layer_cost(mla, hw, on, Precision::kFp8, sh, false).fwd_s,
              layer_cost(mla, hw, off, Precision::kFp8, sh, false).fwd_s, 1e-12);
}

// A dispatcher that states its SMs (DeepEP's and HybridEP's num_sms;
// Megatron-Bridge's performance recipes give HybridEP 32 of an H100's 132)
// takes that share from the compute its hidden all-to-alls run beside, in
// place of NCCL's 16 channels: the pair lengthens by hidden x (32 - 16) / 132.
// And one that held every SM would leave the compute nothing to run on while
// it communicates, so the overlap would save nothing: the pair costs what it
// does without the overlap, compute plus all of its communication.
TEST(ComputeModel, EpOverlapContentionIsTheDispatchersShareOfTheSms) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ASSERT_EQ(hw.accel.sm_count, 132);
  ModelSpec m = testing::load_model_or_die("qwen3-30b-a3b");
  Layout l;
  l.dp = 16;
  l.ep = 16;
  const ComputeShape sh = compute_shape(l, 4096, hw);
  SimOptions opt;
  const PieceCost base = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  opt.ep_comm_overlap = true;
  const PieceCost nccl = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  const double hidden = base.ep_comm_total_s - (nccl.fwd_ep_s + nccl.bwd_ep_s);
  ASSERT_GT(hidden, 0);
  opt.moe_dispatch_sms = 32;
  const PieceCost hybridep = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  EXPECT_NEAR(hybridep.fwd_ep_s + hybridep.bwd_ep_s, nccl.fwd_ep_s + nccl.bwd_ep_s, 1e-12);  // the same windows
  EXPECT_NEAR((hybridep.fwd_s + hybridep.bwd_s) - (nccl.fwd_s + nccl.bwd_s), hidden * (32.0 - 16.0) / 132.0, 1e-9);
  opt.moe_dispatch_sms = 132;
  const PieceCost all = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  EXPECT_NEAR(all.fwd_s + all.bwd_s, base.fwd_s + base.bwd_s, 1e-9);
}

TEST(ComputeModel, EpOverlapHidesEachAllToAllBehindItsPartnerOnly) {
  // Megatron-core's schedule pairs each all-to-all with one compute window
  // (combine_bwd with attention_fwd, dispatch_fwd -> dispatch_bwd with
  // mlp_bwd -> mlp_fwd, combine_fwd with attention_bwd), so a pair exposes at
  // least what pooling all its compute against all its communication would
  // (max(0, comm - compute)), at most all of its communication, and more than
  // the pool where the two are near equal but split differently: DeepSeek-V3
  // at TP 8 / EP 8 (about 4.4 ms of all-to-all against 4.4 ms of compute a
  // layer pair, the attention windows shorter than their combines).
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"}) {
    ModelSpec m = testing::load_model_or_die(name);
    for (int tp : {1, 2, 8}) {
      for (int ep : {8, 32}) {
        Layout l;
        l.dp = 64;
        l.tp = tp;
        l.ep = ep;
        l.sequence_parallel = tp > 1;
        const ComputeShape sh = compute_shape(l, 4096, hw);
        SimOptions opt;
        const PieceCost base = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
        opt.ep_comm_overlap = true;
        const PieceCost ov = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
        const double comm = base.ep_comm_total_s;
        const double compute = base.fwd_s + base.bwd_s - comm - base.fwd_tp_s - base.bwd_tp_s;
        const double exposed = ov.fwd_ep_s + ov.bwd_ep_s;
        SCOPED_TRACE(std::string(name) + " tp" + std::to_string(tp) + " ep" + std::to_string(ep));
        EXPECT_GE(exposed, std::max(0.0, comm - compute) - 1e-12);
        EXPECT_LE(exposed, comm + 1e-12);
        if (std::string(name) == "deepseek-v3" && tp == 8 && ep == 8) {
          EXPECT_LT(comm, compute * 1.05);  // the pool would hide nearly all of it
          EXPECT_GT(exposed, 0.1 * comm);
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom

// Megatron's --tp-comm-overlap (userbuffers) with Transformer Engine 1.x's
// defaults, by hand for Llama-3-70B at tp = 8 with SP on one H100 node, 4096
// tokens. The all-gathers are ring-exchanged with their GEMM in 8 slices of
// 512 tokens (the GEMM's time is the slices'): an all-gather exposes what 7/8
// of it cannot cover. The forward reduce-scatters are pipelined with their
// GEMM in 4 chunks of its output features: at least the last chunk's (1/4)
// shows. Here every GEMM outlasts its collective, so forward exposes the two
// reduce-scatters' last chunks only; backward exposes the output-gradient
// gathers beyond 7/8 of the row-parallel dgrad (nothing) and the bulk
// overlaps beyond the column-parallel GEMMs (nothing for the MLP; QKV's
// window is the shortest).
namespace loom {
namespace {

// TP 8 with sequence parallelism: the userbuffers tests' layout.
Layout tp8_sp() {
  Layout l;
  l.tp = 8;
  l.sequence_parallel = true;
  return l;
}

TEST(ComputeModel, UserbuffersPipelineTpCollectivesWithTheirGemms) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  hw.accel.gemm_shapes = {};  // the model's GEMM times, which these hand calculations follow
  ModelSpec m = testing::load_model_or_die("llama-3-70b");
  const Layout l = tp8_sp();
  const ComputeShape sh = compute_shape(l, 4096, hw);
  const double bytes = 4096.0 * 8192 * 2, t = 8;
  const double ag = collective_cost(hw, Collective::kAllGather, sh.tp_group, bytes).time_s;
  const double rs = collective_cost(hw, Collective::kReduceScatter, sh.tp_group, bytes).time_s;
  const Precision bf = Precision::kBf16;
  const double qkv = ub_gemm_time_s(hw, bf, 4096, (64 + 2 * 8) * 128 / 8, 8192, 8, 1, 1);
  const double proj = ub_gemm_time_s(hw, bf, 4096, 8192, 64 * 128 / 8, 1, 4, 1);
  const double fc1 = ub_gemm_time_s(hw, bf, 4096, 2 * 28672 / 8, 8192, 8, 1, 1);
  const double fc2 = ub_gemm_time_s(hw, bf, 4096, 8192, 28672 / 8, 1, 4, 1);
  const double tf = (t - 1) / t;
  const double fwd = std::max(0.0, ag - qkv * tf) + std::max(rs / 4, rs - proj * 3 / 4) +
                     std::max(0.0, ag - fc1 * tf) + std::max(rs / 4, rs - fc2 * 3 / 4);
  const double bwd = std::max(0.0, ag - proj * tf) + std::max(0.0, ag - qkv) + std::max(0.0, rs - qkv) +
                     std::max(0.0, ag - fc2 * tf) + std::max(0.0, ag - fc1) + std::max(0.0, rs - fc1);
  SimOptions ub;
  ub.tp_comm_overlap = true;
  ub.tp_overlap = te1_default_tp_overlap();
  const PieceCost c = layer_cost(m, hw, ub, bf, sh, false);
  EXPECT_NEAR(c.fwd_tp_s, fwd, 1e-12);
  EXPECT_NEAR(c.bwd_tp_s, bwd, 1e-12);
  // Less exposed than the async backward alone, which exposes every forward
  // collective.
  SimOptions async;
  async.tp_async_backward = true;
  const PieceCost a = layer_cost(m, hw, async, bf, sh, false);
  EXPECT_NEAR(a.fwd_tp_s, 2 * ag + 2 * rs, 1e-12);
  EXPECT_LT(c.fwd_tp_s + c.bwd_tp_s, a.fwd_tp_s + a.bwd_tp_s);
  // Without SP there is no userbuffers overlap (Megatron requires it).
  Layout no_sp = l;
  no_sp.sequence_parallel = false;
  const ComputeShape sh2 = compute_shape(no_sp, 4096, hw);
  EXPECT_EQ(layer_cost(m, hw, ub, bf, sh2, false).fwd_tp_s,
            layer_cost(m, hw, SimOptions{}, bf, sh2, false).fwd_tp_s);
}

// The GEMM side of userbuffers, same layer, by one setting at a time. A
// piece runs at the H100 table's rate at its own FLOPs, with the whole GEMM's
// waves, never above the power cap's sustained rate (708.4 of 989 TFLOP/s).
// 2048 tokens here.
// * Aggregated ring exchange (TE's aggregate): FC1's forward, 2048 x 7168 x
//   8192 (241 GFLOP), runs as 4 GEMMs of 512 tokens (60 GFLOP, the table's
//   0.74 between its 34 and 69 GFLOP points, about the cap) instead of 8 of
//   256 (30 GFLOP, about 0.71): the forward changes by exactly the difference
//   (its all-gather stays hidden, and a ring exchange's copy engines take no
//   SMs).
// * set_sm_margin on FC1's weight-gradient bulk overlap (16 SMs): the wgrad
//   GEMM runs on 116 of 132 SMs: 116/132 of the table's boost-clock rate,
//   0.81 x 0.879 = 0.71, a little under the cap it ran at (FC1's wgrad costs
//   its forward's time); and the reduce-scatter beside it no longer takes SM
//   time from it (16/132 of the collective, TE 1.x's SM sharing).
TEST(ComputeModel, UserbuffersPriceTheGemmSlicesAndTheSmMargin) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  hw.accel.gemm_shapes = {};  // the model's GEMM times, which these hand calculations follow
  ModelSpec m = testing::load_model_or_die("llama-3-70b");
  const double T = 2048;
  const ComputeShape sh = compute_shape(tp8_sp(), int64_t(T), hw);
  const Precision bf = Precision::kBf16;
  SimOptions base;
  base.tp_comm_overlap = true;
  base.tp_overlap = te1_default_tp_overlap();
  const PieceCost c0 = layer_cost(m, hw, base, bf, sh, false);

  SimOptions agg = base;
  agg.tp_overlap.fc1_fprop.aggregate = true;
  const PieceCost c1 = layer_cost(m, hw, agg, bf, sh, false);
  const double n = 2 * 28672 / 8, k = 8192, flops = 2.0 * T * n * k;
  const AcceleratorSpec& a = hw.accel;
  const double cap = a.sustained_gemm_efficiency(bf), wave = a.relative_wave_efficiency(T, n, k);
  ASSERT_NEAR(cap, 708.4 / 989, 1e-12);
  auto at = [&](double pieces, double fraction) {
    const double eff = std::min(cap, std::min(0.81, a.gemm_efficiency.lookup(flops / pieces) * wave) * fraction);
    return flops / (a.peak_flops(bf) * eff);
  };
  const double eight = at(8, 1), four = at(4, 1);
  EXPECT_GT(eight, 1.02 * four);
  EXPECT_NEAR(c0.fwd_s - c1.fwd_s, eight - four, 1e-12);
  EXPECT_NEAR(c0.bwd_s, c1.bwd_s, 1e-12);
  EXPECT_NEAR(c0.fwd_tp_s, c1.fwd_tp_s, 1e-15);

  SimOptions margin = base;
  margin.tp_overlap.fc1_wgrad.set_sm_margin = true;
  const PieceCost c2 = layer_cost(m, hw, margin, bf, sh, false);
  const double rs = collective_cost(hw, Collective::kReduceScatter, sh.tp_group, T * 8192 * 2).time_s;
  const double fc1 = gemm_time_s(hw, bf, T, n, k);
  // The weight gradient's own shape, n x k x T (7168 x 8192 x 2048): full
  // waves, at the cap on all SMs.
  const double wave_w = a.relative_wave_efficiency(n, k, T);
  auto eff_w = [&](double fraction) {
    return std::min(cap, std::min(0.81, a.gemm_efficiency.lookup(flops) * wave_w) * fraction);
  };
  const double slower = eff_w(1) / eff_w(116.0 / 132);
  EXPECT_NEAR(eff_w(1), cap, 1e-12);
  // On all SMs the table's 0.806 is held to the cap's 0.716; on 116 of
  // 132 it runs at 0.806 x 116/132 = 0.708, about 1% slower.
  EXPECT_GT(slower, 1.005) << "16 SMs of 132 cost a few percent under the power cap, not 14%";
  EXPECT_LT(slower, 1.06);
  EXPECT_NEAR(c2.bwd_s - c0.bwd_s, fc1 * (slower - 1) - rs * 16 / 132, 1e-12);
  EXPECT_NEAR(c2.fwd_s, c0.fwd_s, 1e-15);
}

}  // namespace
}  // namespace loom

// MoE dispatch mechanisms on DeepSeek-V3 at EP64 over 8 DGX nodes (8 ranks
// each, 32 experts a node, 4 a rank), checked against counts by hand:
// * node-limited routing (n_group 8 = one group per node, topk_group 4):
//   a token reaches exactly 4 of the 8 nodes, so a node is hit with
//   probability 1/2 = 1 - C(7,4)/C(8,4); with unrestricted top-8 over 256
//   experts it would be 1 - C(224,8)/C(256,8) = 0.66183 (5.29 nodes);
// * the alltoall dispatcher sends every copy to another node over the network:
//   k (n - ppn)/n = 8 x 56/64 = 7 hidden states a token; deduplicated dispatch
//   sends one per remote node reached, (8 - 1) x 1/2 = 3.5: half;
// * FP8 dispatch moves 1 + 4/128 bytes an element instead of 2 (the combine
//   stays 16-bit);
// * a capacity factor caps the busiest expert's load: imbalance 2 with
//   capacity 1.25 costs what imbalance 1.25 costs.
namespace loom {
namespace {

TEST(ComputeModel, MoeDispatchNodeLimitedDeduplicatedFp8AndCapacity) {
  HwProfile hw = testing::load_hw_or_die("dgx-h800");
  ModelSpec m = testing::load_model_or_die("deepseek-v3");
  EXPECT_DOUBLE_EQ(moe_node_hit_probability(m.moe, 8), 0.5);
  MoeSpec free_routing = m.moe;
  free_routing.num_groups = free_routing.topk_groups = 0;
  EXPECT_NEAR(moe_node_hit_probability(free_routing, 8), 0.66183, 1e-5);
  EXPECT_DOUBLE_EQ(moe_node_hit_probability(m.moe, 1), 1.0);

  Layout l;
  l.dp = 64;
  l.ep = 64;
  const ComputeShape sh = compute_shape(l, 4096, hw);
  ASSERT_EQ(sh.ep_group.nodes, 8);
  const int net = static_cast<int>(LinkClass::kNetwork);
  SimOptions opt;
  const PieceCost plain = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  opt.moe_dedup_dispatch = true;
  const PieceCost dedup = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  ASSERT_GT(plain.ep_bytes.bytes[net], 0);
  EXPECT_NEAR(dedup.ep_bytes.bytes[net] / plain.ep_bytes.bytes[net], 3.5 / 7, 1e-9);
  EXPECT_LT(dedup.ep_comm_total_s, plain.ep_comm_total_s);
  // FP8 dispatch: one of the four exchanges (the forward dispatch) at 1.03125 bytes.
  opt.moe_fp8_dispatch = true;
  const PieceCost fp8 = layer_cost(m, hw, opt, Precision::kBf16, sh, true);
  EXPECT_NEAR(fp8.ep_bytes.bytes[net] / dedup.ep_bytes.bytes[net], (1.03125 / 2 + 3) / 4, 1e-9);

  // Capacity: the busiest expert's grouped GEMMs and exchanges at min(2, 1.25).
  SimOptions capped, loaded;
  capped.moe_load_imbalance = 2;
  capped.moe_capacity_factor = 1.25;
  loaded.moe_load_imbalance = 1.25;
  const PieceCost a = layer_cost(m, hw, capped, Precision::kBf16, sh, true);
  const PieceCost b = layer_cost(m, hw, loaded, Precision::kBf16, sh, true);
  EXPECT_DOUBLE_EQ(a.fwd_s, b.fwd_s);
  EXPECT_DOUBLE_EQ(a.bwd_s, b.bwd_s);
  capped.moe_capacity_factor = 0;  // dropless: the full imbalance
  EXPECT_GT(layer_cost(m, hw, capped, Precision::kBf16, sh, true).fwd_s, a.fwd_s);
}

// FP8 casts against an independent measurement: Transformer Engine's GEMM
// profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst, "Worked
// Example: 5B Model on H200", H200 NVL, 4.8 TB/s) times each of a layer's
// GEMMs through te.Linear under Float8CurrentScaling autocast and again
// pre-quantized; per pass (four GEMMs: QKV, attention out, MLP up, MLP down
// at M = 31 x 512 = 15872 tokens, hidden 4096, FFN 16384) the difference is
// what the casts cost: fprop 6.503 - 5.577, dgrad 6.795 - 5.661, wgrad
// 6.987 - 5.547 ms. Each call casts its activation operand (M x K) with its
// transpose, as Loom's training casts are priced, and its weight operand
// (K x N) without one (linear.py: the weight's columnwise copy only when the
// input needs a gradient, which the benchmark's does not), one byte an
// element less. The profile's streaming efficiency (0.9, a STREAM copy) and
// per-kernel cost price them within 8% on every pass.
TEST(ComputeModel, Fp8CastsPriceTransformerEnginesMeasuredQuantization) {
  HwProfile hw = testing::load_hw_or_die("dgx-h200");
  ASSERT_DOUBLE_EQ(hw.accel.memory_bw_bytes_per_s, 4.8e12);  // H200 NVL's too
  SimOptions opt;
  opt.fp8_scaling = Fp8Scaling::kCurrent;
  ASSERT_EQ(fp8_cast_bytes(opt), 6);  // amax read 2, cast read 2, write 1 + transpose 1
  const double M = 15872, h = 4096, f = 16384;
  struct Pass {
    const char* name;
    double shapes[4][3];  // M x K x N as the guide writes them
    double measured_ms;
  };
  const Pass passes[] = {
      {"fprop", {{M, h, 3 * h}, {M, h, h}, {M, h, f}, {M, f, h}}, 6.503 - 5.577},
      {"dgrad", {{M, 3 * h, h}, {M, h, h}, {M, f, h}, {M, h, f}}, 6.795 - 5.661},
      {"wgrad", {{h, M, 3 * h}, {h, M, h}, {h, M, f}, {f, M, h}}, 6.987 - 5.547},
  };
  const double bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  for (const Pass& p : passes) {
    double t = 0;
    for (const auto& s : p.shapes) {
      t += fp8_cast_time_s(hw, opt, s[0] * s[1], 1);             // activation, with its transpose
      t += fp8_cast_time_s(hw, opt, s[1] * s[2], 1) - s[1] * s[2] / bw;  // weight, without
    }
    EXPECT_NEAR(t * 1e3 / p.measured_ms, 1.0, 0.08) << p.name << ": " << t * 1e3 << " ms";
  }
  // Delayed scaling fuses the amax into the cast: 4 bytes, one kernel.
  opt.fp8_scaling = Fp8Scaling::kDelayed;
  EXPECT_EQ(fp8_cast_bytes(opt), 4);
  EXPECT_EQ(fp8_cast_kernels(opt), 1);
}

}  // namespace
}  // namespace loom
