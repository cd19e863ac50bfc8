// Memory model against the published formulas (shared/docs/reference/formulas.md):
// ZeRO's model-state bytes and worked example, Korthikanti et al.'s per-layer
// activations (all six settings and the 175B example), and the in-flight
// micro-batches each pipeline schedule implies.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/memory_model.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

using testing::gpt_block_model;

SimOptions korthikanti_options() {
  SimOptions o;
  o.flash_attention = false;  // the paper keeps the softmax output
  o.dropout = 1;              // ... and dropout masks
  o.loom_executor = false;    // the paper's accounting, not Loom's executor's buffers
  return o;
}

// Korthikanti 2022, Table 2, in bytes per layer.
double korthikanti(double s, double b, double h, double a, double t, bool sp, Recompute rc) {
  if (rc == Recompute::kFull) return 2 * s * b * h / (sp ? t : 1);
  double attn = 5 * a * s / (h * t);
  if (rc == Recompute::kSelective) attn = 0;
  if (t == 1) return s * b * h * (34 + attn);
  if (sp) return s * b * h * (34 / t + attn);
  return s * b * h * (10 + 24 / t + attn);
}

// What torchtitan's selective op AC keeps of a Llama block, by its policy
// (parallelize_llama.py _custom_policy): the block's input, the outputs of
// mms 1, 3, 5, 7 (wq, wv, w1, w2: q, v, the gate and the down projection's
// output), the flash SDPA's output and log-sum-exp. Llama-3-8B, one
// sequence of 8192 tokens, bf16, no TP: per token 2 bytes x (4096 input +
// 4096 q + 1024 v + 4096 attention out + 14336 gate + 4096 down) + 4 x 32
// log-sum-exp.
TEST(MemoryModel, SelectiveOpCheckpointingKeepsWhatItsPolicySaves) {
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  Layout l;
  l.recompute = Recompute::kSelective;
  SimOptions opt;
  opt.framework = "torchtitan";
  opt.selective_recompute = SelectiveRecompute::kEveryOtherMatmul;
  const double per_token = 2.0 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4.0 * 32;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l, opt, 8192, Precision::kBf16, false), 8192 * per_token);
  // Less than Megatron's selective recompute keeps (every GEMM input, the
  // SwiGLU intermediates).
  opt.selective_recompute = SelectiveRecompute::kAttentionCore;
  EXPECT_GT(layer_activation_bytes(m, l, opt, 8192, Precision::kBf16, false), 8192 * per_token);
  // A stage holds every layer's kept tensors, and during one layer's backward
  // that layer's re-run ones too: the stage's activations are its 32 layers
  // at the kept size plus one whole layer less one kept (the logits and the
  // rest beside them are the same with or without the policy).
  TrainSpec t;
  t.global_batch = 1;
  t.seq_len = 8192;
  t.precision = Precision::kBf16;
  const StageSplit split = split_layers(m, 1, 1);
  Layout none = l;
  none.recompute = Recompute::kNone;
  const double whole = layer_activation_bytes(m, none, opt, 8192, Precision::kBf16, false);
  opt.selective_recompute = SelectiveRecompute::kEveryOtherMatmul;
  const double with_policy = stage_memory(m, l, t, opt, split, 0).activations_bytes;
  const double without = stage_memory(m, none, t, opt, split, 0).activations_bytes;
  EXPECT_NEAR(without - with_policy, 31 * (whole - 8192 * per_token), 1.0);
}

TEST(MemoryModel, KorthikantiTable2AllSettings) {
  SimOptions opt = korthikanti_options();
  for (int64_t h : {2304, 12288}) {
    int a = h == 2304 ? 24 : 96;
    ModelSpec m = gpt_block_model(h, a, 4);
    for (int t : {1, 2, 8}) {
      for (int b : {1, 4}) {
        for (bool sp : {false, true}) {
          if (sp && t == 1) continue;
          for (Recompute rc : {Recompute::kNone, Recompute::kSelective}) {
            Layout l;
            l.tp = t;
            l.micro_batch = b;
            l.sequence_parallel = sp;
            l.recompute = rc;
            double got = layer_activation_bytes(m, l, opt, 2048, Precision::kBf16, false);
            double want = korthikanti(2048, b, double(h), a, t, sp, rc);
            EXPECT_NEAR(got / want, 1.0, 1e-12) << "h=" << h << " t=" << t << " b=" << b << " sp=" << sp
                                                << " recompute=" << recompute_name(rc);
          }
          Layout l;
          l.tp = t;
          l.micro_batch = b;
          l.sequence_parallel = sp;
          l.recompute = Recompute::kFull;
          EXPECT_DOUBLE_EQ(layer_checkpoint_bytes(m, l, 2048, Precision::kBf16),
                           korthikanti(2048, b, double(h), a, t, sp, Recompute::kFull));
        }
      }
    }
  }
}

TEST(MemoryModel, Korthikanti175BWorkedExample) {
  // GPT-3 175B, t = 8, s = 2048, b = 1: TP only ~579 MB per layer; TP + SP +
  // selective recompute ~107 MB per layer.
  ModelSpec m = gpt_block_model(12288, 96, 96);
  SimOptions opt = korthikanti_options();
  Layout l;
  l.tp = 8;
  EXPECT_NEAR(layer_activation_bytes(m, l, opt, 2048, Precision::kBf16, false) / 1e6, 579, 1.0);
  l.sequence_parallel = true;
  l.recompute = Recompute::kSelective;
  EXPECT_NEAR(layer_activation_bytes(m, l, opt, 2048, Precision::kBf16, false) / 1e6, 107, 1.0);
}

TEST(MemoryModel, ZeroWorkedExample) {
  // Rajbhandari et al. (ZeRO, SC'20, Figure 1): Psi = 7.5B, Nd = 64, K = 12
  // -> 120 / 31.4 / 16.6 / 1.9 GB of model states per device, the paper's own
  // figures, against stage_memory() on the 7.5B block stack (its Psi is
  // within 1% of 7.5B; the figures are scaled by Psi / 7.5B).
  ModelSpec m = gpt_block_model(4096, 32, 36);
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 2048;
  StageSplit split = split_layers(m, 1, 1);
  Layout l;
  l.dp = 64;
  const double psi = stage_params(m, l, split, 0).total();
  ASSERT_NEAR(psi / 7.5e9, 1.0, 0.01);
  const double paper_gb[4] = {120, 31.4, 16.6, 1.9};
  SimOptions deepspeed;  // the paper's ZeRO (no framework named means Loom's own executor)
  deepspeed.framework = "deepspeed";
  for (int stage = 0; stage <= 3; ++stage) {
    l.zero = stage;
    StageMemory sm = stage_memory(m, l, t, deepspeed, split, 0);
    const double got_gb = (sm.weights_bytes + sm.grads_bytes + sm.optimizer_bytes) / 1e9;
    EXPECT_NEAR(got_gb, paper_gb[stage] * psi / 7.5e9, 0.01 * paper_gb[stage] + 0.05) << "stage " << stage;
  }
}

// Loom's own executor (no framework): ZeRO >= 1 adds the owned shard's fp32
// gradient buffer beside the full gradient; ZeRO-2 gives a chunk's full
// gradient back after its reduce-scatter (one chunk's live); ZeRO-3 gathers
// one chunk's weights in place. Hand-worked for fp32 (4 B weights and
// gradients, 8 B of Adam moments), Psi parameters, Nd = 4, v chunks:
//   ZeRO-1: 4 Psi + (4 Psi + 4 Psi/4) + 8 Psi/4 = 11 Psi
//   ZeRO-2, 1 chunk: the same 11 Psi; 2 chunks (interleaved): 4 + 2 + 1 + 2 = 9 Psi
//   ZeRO-3, 1 chunk: 4 Psi/4 + 4 Psi (1 - 1/4) + 4 Psi + Psi + 2 Psi = 11 Psi
// (the executor measured ZeRO-1 and ZeRO-3 at the same peak: bench/suites/models.json).
TEST(MemoryModel, LoomExecutorZeroBuffers) {
  ModelSpec m = gpt_block_model(512, 8, 4);
  TrainSpec t;
  t.global_batch = 8;
  t.seq_len = 64;
  t.precision = Precision::kFp32;
  Layout l;
  l.dp = 4;
  StageSplit split = split_layers(m, 1, 1);
  const double psi = stage_params(m, l, split, 0).total();
  auto states = [&](const Layout& lay, const StageSplit& sp) {
    StageMemory sm = stage_memory(m, lay, t, SimOptions{}, sp, 0);
    return (sm.weights_bytes + sm.grads_bytes + sm.optimizer_bytes) / psi;
  };
  l.zero = 1;
  EXPECT_NEAR(states(l, split), 11, 1e-9);
  l.zero = 2;
  EXPECT_NEAR(states(l, split), 11, 1e-9);
  l.zero = 3;
  EXPECT_NEAR(states(l, split), 11, 1e-9);
  EXPECT_EQ(stage_memory(m, l, t, SimOptions{}, split, 0).comm_buffer_bytes, 0);  // gathered in place
  Layout v2 = l;
  v2.zero = 2;
  v2.pp = 1;
  v2.schedule = Schedule::kInterleaved;
  v2.virtual_stages = 2;
  StageSplit split2 = split_layers(m, 1, 2);
  EXPECT_NEAR(stage_params(m, v2, split2, 0).total(), psi, 1);
  EXPECT_NEAR(states(v2, split2), 9, 1e-9);
}

// The last stage holds one micro-batch of logits: a framework keeps 16-bit
// logits and its loss's fp32 copy (e + 4 bytes each); Loom's executor one fp32
// buffer of the vocabulary padded to a multiple of 64 that becomes the
// gradient in place, beside the gathered normed input and the head's input
// (fp32) and the final norm's statistics. With GPT-2's vocabulary the peak
// comes in the head's backward, with those and the head's workspace live.
// That is under ZeRO-2/3; under ZeRO 0-1 the fused head (core/executor_head.h)
// keeps the input's gradient instead, and the peak comes in its forward, at
// the logits of a block of rows (here all 512: a block holds up to 1280 rows
// of 50,304 logits).
TEST(MemoryModel, LogitsAsTheExecutorHoldsThem) {
  ModelSpec m = testing::load_model_or_die("gpt2-124m");
  TrainSpec t;
  t.global_batch = 4;
  t.seq_len = 128;
  t.precision = Precision::kBf16;
  Layout l;
  l.micro_batch = 4;
  StageSplit split = split_layers(m, 1, 1);
  SimOptions megatron;
  megatron.framework = "megatron-core";
  const double fw = stage_memory(m, l, t, megatron, split, 0).activations_bytes;
  const double korthikanti_layers = 12 * layer_activation_bytes(m, l, megatron, 128, Precision::kBf16, false);
  // (and GPT-2's embedding dropout mask, 1 byte per element, on the first stage)
  EXPECT_NEAR(fw - korthikanti_layers, 512.0 * 50257 * (2 + 4) + 512.0 * 768 * 2 + 512.0 * 768, 1);
  const double layers = 12 * executor_layer_activation_bytes(m, l, 128, Precision::kBf16);
  Layout zero2 = l;
  zero2.zero = 2;
  const StageMemory unfused = stage_memory(m, zero2, t, SimOptions{}, split, 0);
  EXPECT_NEAR(unfused.activations_bytes - layers, 4 * (512.0 * 50304 + 2 * 512.0 * 768 + 2 * 512.0), 1);
  EXPECT_DOUBLE_EQ(unfused.workspace_bytes, executor_backward_workspace(m, zero2, 128).head);
  EXPECT_DOUBLE_EQ(unfused.workspace_bytes, 4 * (2 * 512.0 * 768 + 512.0 * 768 + 512.0 * 768));  // dx, dy, dh_part, dh
  const StageMemory loom = stage_memory(m, l, t, SimOptions{}, split, 0);
  // Kept: dh_part, the head's input, mean and rstd; beside them in the
  // forward: the normed input, local and gathered, and the last layer's
  // spare output; the workspace: the block's logits and 4 values per row.
  EXPECT_NEAR(loom.activations_bytes - layers, 4 * (2 * 512.0 * 768 + 2 * 512.0) + 4 * (3 * 512.0 * 768), 1);
  EXPECT_DOUBLE_EQ(loom.workspace_bytes, 4 * (512.0 * 50304 + 4 * 512.0));
  EXPECT_LT(loom.activations_bytes + loom.workspace_bytes, unfused.activations_bytes + unfused.workspace_bytes);
  // The step's token ids and targets (int32).
  EXPECT_DOUBLE_EQ(loom.inputs_bytes, 2 * 4 * 4 * 128.0);
}

TEST(MemoryModel, ModelStatesFollowZeroStagesOnARealModel) {
  // A whole stage_memory() call reproduces (2+2+K)Psi, 4Psi + K Psi/Nd, ...
  ModelSpec m = gpt_block_model(4096, 32, 36);  // the Megatron 7.5B block stack
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 2048;
  SimOptions opt;
  opt.framework = "deepspeed";  // ZeRO as the paper and DeepSpeed shard it
  StageSplit split = split_layers(m, 1, 1);
  Layout l;
  l.dp = 64;
  const double psi = stage_params(m, l, split, 0).total();
  EXPECT_NEAR(psi / 1e9, 7.5, 0.05);
  const double nd = 64;
  const double want[4] = {16 * psi, 4 * psi + 12 * psi / nd, 2 * psi + 14 * psi / nd, 16 * psi / nd};
  double previous = 1e30;
  for (int z = 0; z <= 3; ++z) {
    l.zero = z;
    StageMemory sm = stage_memory(m, l, t, opt, split, 0);
    EXPECT_NEAR(sm.weights_bytes + sm.grads_bytes + sm.optimizer_bytes, want[z], 1e-6 * want[z]) << "zero " << z;
    EXPECT_LT(sm.total_bytes(), previous) << "memory per rank must fall with the ZeRO stage";
    previous = sm.total_bytes();
  }
  // Megatron's convention: 18 bytes / param, or 6 + 12/Nd with the distributed optimizer.
  opt.fp32_main_grads = true;
  l.zero = 0;
  StageMemory sm = stage_memory(m, l, t, opt, split, 0);
  EXPECT_NEAR(sm.weights_bytes + sm.grads_bytes + sm.optimizer_bytes, 18 * psi, 1e-6 * psi);
  l.zero = 1;
  sm = stage_memory(m, l, t, opt, split, 0);
  EXPECT_NEAR(sm.weights_bytes + sm.grads_bytes + sm.optimizer_bytes, 6 * psi + 12 * psi / nd, 1e-6 * psi);
}

TEST(MemoryModel, QkNormKeepsQAndKBeforeTheNorm) {
  // Qwen3's per-head q/k RMSNorm: the executor keeps q and k before the norm
  // (T*(a+g)*d elements) and an fp32 rstd per (token, head), over tp.
  ModelSpec m = gpt_block_model(1024, 16, 4);
  m.num_kv_heads = 4;
  Layout l;
  l.tp = 2;
  l.micro_batch = 2;
  SimOptions opt;
  const int64_t seq = 256;
  const double base = layer_activation_bytes(m, l, opt, seq, Precision::kBf16, false);
  m.qk_norm = true;
  const double with = layer_activation_bytes(m, l, opt, seq, Precision::kBf16, false);
  const double T = 2.0 * 256, d = 1024 / 16;
  EXPECT_DOUBLE_EQ(with - base, T * (16 + 4) * (d * 2 + 4) / 2);
}

TEST(MemoryModel, InFlightMicroBatchesPerSchedule) {
  Layout l;
  l.pp = 4;
  l.schedule = Schedule::kGpipe;
  EXPECT_EQ(in_flight_micro_batches(l, 16, 0), 16);
  EXPECT_EQ(in_flight_micro_batches(l, 16, 3), 16);
  l.schedule = Schedule::k1F1B;
  EXPECT_EQ(in_flight_micro_batches(l, 16, 0), 4);
  EXPECT_EQ(in_flight_micro_batches(l, 16, 3), 1);
  EXPECT_EQ(in_flight_micro_batches(l, 2, 0), 2);  // min(m, p)
  // Interleaved: the first stage holds p * (1 + (p-1)/(p*v)) stage-equivalents.
  l.schedule = Schedule::kInterleaved;
  for (int v : {2, 4}) {
    l.virtual_stages = v;
    double stage_equivalents = double(in_flight_micro_batches(l, 64, 0)) / v;
    EXPECT_DOUBLE_EQ(stage_equivalents, 4.0 * (1.0 + 3.0 / (4.0 * v))) << "v=" << v;
    // Megatron-core's all-to-all overlap warms up one chunk more.
    EXPECT_EQ(in_flight_micro_batches(l, 64, 0, true), in_flight_micro_batches(l, 64, 0) + 1) << "v=" << v;
  }
  EXPECT_EQ(in_flight_micro_batches(l, 1, 0, true), 4);  // never more than the m x v there are
  // DualPipeV: 2p + 1 chunk-micro-batches on every stage (deepseek-ai/DualPipe
  // README: PP + 1 activations for PP = 2p stages), 4.5 stage-equivalents
  // where 1F1B's first stage holds 4.
  l.schedule = Schedule::kDualPipeV;
  l.virtual_stages = 2;
  for (int s = 0; s < 4; ++s) EXPECT_EQ(in_flight_micro_batches(l, 16, s), 9) << "stage " << s;
}

// The V puts the embedding and the head on stage 0 (global chunks 0 and
// 2p-1): its parameters are the two chunks' layers plus both ends, and a
// tied embedding needs no copy (one stage holds both uses).
TEST(MemoryModel, DualPipeVHoldsBothEndsOnTheFirstStage) {
  ModelSpec m = gpt_block_model(1024, 16, 8);  // GPT-style: tied embeddings
  ASSERT_TRUE(m.tied_embeddings);
  Layout l;
  l.pp = 2;
  l.schedule = Schedule::kDualPipeV;
  l.virtual_stages = 2;
  const StageSplit split = split_layers(m, l);
  const double layer = double(m.attention_params()) + double(m.norm_params_per_layer()) + double(m.dense_mlp_params());
  const double ends = double(m.embedding_params()) + double(m.position_params()) + double(m.final_norm_params());
  EXPECT_EQ(split.stage_layers(0), 4);
  EXPECT_EQ(split.stage_layers(1), 4);
  EXPECT_DOUBLE_EQ(stage_params(m, l, split, 0).dense, 4 * layer + ends);
  EXPECT_DOUBLE_EQ(stage_params(m, l, split, 1).dense, 4 * layer);
  EXPECT_FALSE(embedding_copy_on_last_stage(m, l));
  l.schedule = Schedule::k1F1B;
  l.virtual_stages = 1;
  EXPECT_TRUE(embedding_copy_on_last_stage(m, l));
}

// DualPipeV's peak on stage s holds 2p - s micro-batches of chunk 0 and
// s + 1 of chunk 1 (the reference order replayed). With p = 2, stage 0
// holds 4 of the first chunk and 1 of the last: pinning 2 layers first and
// 1 last holds 4*2 + 1*1 = 9 layers' activations, 1 first and 2 last
// 4*1 + 1*2 = 6; the head's terms are the same in both.
TEST(MemoryModel, DualPipeVHoldsItsChunksInTheirOwnCounts) {
  ModelSpec m = gpt_block_model(1024, 16, 8);
  TrainSpec t;
  t.global_batch = 16;
  t.seq_len = 1024;
  SimOptions opt = korthikanti_options();
  auto acts = [&](int first, int last) {
    Layout l;
    l.pp = 2;
    l.schedule = Schedule::kDualPipeV;
    l.virtual_stages = 2;
    l.first_stage_layers = first;
    l.last_stage_layers = last;
    return stage_memory(m, l, t, opt, split_layers(m, l), 0).activations_bytes;
  };
  Layout plain;
  const double per_layer = layer_activation_bytes(m, plain, opt, 1024, Precision::kBf16, false);
  EXPECT_NEAR(acts(2, 1) - acts(1, 2), 3 * per_layer, 1e-6 * per_layer);
}

TEST(MemoryModel, FirstStageActivationsScaleWithSchedule) {
  ModelSpec m = gpt_block_model(4096, 32, 32);
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 2048;
  SimOptions opt = korthikanti_options();
  Layout l;
  l.pp = 4;
  l.tp = 1;
  l.dp = 1;
  StageSplit split = split_layers(m, 4, 1);
  l.schedule = Schedule::kGpipe;
  double gpipe = stage_memory(m, l, t, opt, split, 1).activations_bytes;
  l.schedule = Schedule::k1F1B;
  double one_f_one_b = stage_memory(m, l, t, opt, split, 1).activations_bytes;
  double per_layer = layer_activation_bytes(m, l, opt, 2048, Precision::kBf16, false);
  EXPECT_DOUBLE_EQ(gpipe, 64.0 * 8 * per_layer);      // m micro-batches x 8 layers
  EXPECT_DOUBLE_EQ(one_f_one_b, 3.0 * 8 * per_layer);  // stage 1 holds p - 1 = 3
}

TEST(MemoryModel, UnevenSplitAndDoesNotFitMessage) {
  ModelSpec m = gpt_block_model(4096, 32, 30);
  StageSplit s = split_layers(m, 4, 1);
  int total = 0;
  for (int st = 0; st < 4; ++st) total += s.stage_layers(st);
  EXPECT_EQ(total, 30);
  EXPECT_EQ(s.stage_layers(0), 7);  // extras go to the middle stages first
  EXPECT_EQ(s.stage_layers(1), 8);

  HwProfile hw;
  hw.accel.memory_bytes = 1e9;
  TrainSpec t;
  t.global_batch = 8;
  t.seq_len = 2048;
  Layout l;
  l.dp = 1;
  MemoryReport r = memory_report(m, hw, l, t, SimOptions{});
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.why_not().find("over by"), std::string::npos) << r.why_not();
}

}  // namespace
}  // namespace loom

// DeepSeek-V3's multi-token-prediction module lives on the last stage. The
// released checkpoint has 685B parameters: 671B for the main model and 14B
// for the MTP module, which includes its own copies of the embedding and the
// output head (2 x 129280 x 7168 = 1.853B). Training shares those two, so
// the module adds 685 - 671 - 1.85 = about 11.6B: a MoE block like layer 60
// (11.51B), the 2h x h projection (0.103B) and its norms.
namespace loom {
namespace {

TEST(MemoryModel, MtpModuleOnTheLastStage) {
  ModelSpec m = testing::load_model_or_die("deepseek-v3");
  ASSERT_EQ(m.num_mtp_layers, 1);
  ModelSpec no_mtp = m;
  no_mtp.num_mtp_layers = 0;
  Layout l;
  l.pp = 4;
  const StageSplit split = split_layers(m, 4, 1);
  const double with = stage_params(m, l, split, 3).total(), without = stage_params(no_mtp, l, split, 3).total();
  // Pipelined, the last stage also keeps a copy of the (untied) embedding,
  // 129280 x 7168 = 0.927B, as Megatron-core builds it on the MTP stage.
  EXPECT_NEAR((with - without) / 1e9, 11.6 + 0.927, 0.05);
  EXPECT_EQ(stage_params(m, l, split, 0).total(), stage_params(no_mtp, l, split, 0).total());
  // Every in-flight micro-batch keeps the block's activations there too.
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 4096;
  SimOptions megatron;  // Loom's executor runs no MTP; a framework's accounting
  megatron.framework = "megatron-core";
  EXPECT_GT(stage_memory(m, l, t, megatron, split, 3).activations_bytes,
            stage_memory(no_mtp, l, t, megatron, split, 3).activations_bytes);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The executor's pipeline buffers from the program: none without a pipeline;
// under GPipe the first stage's first backward waits for a gradient the last
// stage sends after receiving every activation, so nothing it sent can still
// be pending; otherwise between the buffers surely live and those possibly so.
TEST(MemoryModel, ExecutorPipelineBuffersFromTheProgram) {
  Layout l;
  EXPECT_EQ(executor_p2p_buffers(l, 8, 0).at_most, 0);
  l.pp = 2;
  l.micro_batch = 1;
  l.schedule = Schedule::kGpipe;
  const P2pBuffers g0 = executor_p2p_buffers(l, 8, 0), g1 = executor_p2p_buffers(l, 8, 1);
  EXPECT_EQ(g0.surely, 1) << "the received gradient";
  EXPECT_EQ(g0.at_most, g0.surely);
  EXPECT_EQ(g1.surely, 1) << "the input's gradient, allocated before the backward";
  for (Schedule s : {Schedule::k1F1B, Schedule::kInterleaved}) {
    l.schedule = s;
    l.pp = 4;
    l.virtual_stages = s == Schedule::kInterleaved ? 2 : 1;
    for (int stage = 0; stage < 4; ++stage) {
      const P2pBuffers b = executor_p2p_buffers(l, 16, stage);
      EXPECT_GE(b.surely, 1) << int(s) << " stage " << stage;
      EXPECT_LE(b.surely, b.at_most) << int(s) << " stage " << stage;
      EXPECT_LE(b.at_most, 8) << "never every transfer of the step";
    }
  }
}

}  // namespace
}  // namespace loom
