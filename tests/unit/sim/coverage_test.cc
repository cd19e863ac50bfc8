// Which shapes a prediction prices beyond its profile's measured tables
// (sim/coverage.h): hand-built tables and shapes whose FLOPs are worked out
// in the comments.
#include <gtest/gtest.h>

#include "core/hw_profile.h"
#include "core/model_spec.h"
#include "sim/coverage.h"

namespace loom {
namespace {

bool any_has(const std::vector<std::string>& notes, const std::string& s) {
  for (const std::string& n : notes)
    if (n.find(s) != std::string::npos) return true;
  return false;
}

TEST(Coverage, NamesEachTableAShapeFallsOutside) {
  ModelSpec m = *load_model_spec("gpt2-124m");  // hidden 768, 12 heads of 64, MLP 3072, vocab 50257
  HwProfile hw = *load_hw_profile("cpu-local");
  hw.name = "t";
  hw.accel.gemm_efficiency.flops = {1e6, 1e10};
  hw.accel.gemm_efficiency.efficiency = {0.5, 0.9};
  hw.accel.attention_efficiency = {};
  hw.accel.xent_fwd_ns_per_logit = 1;
  hw.accel.xent_bwd_ns_per_logit = 1;
  hw.accel.xent_vocab_min = 4096;
  hw.accel.xent_vocab_max = 128256;
  TrainSpec train;
  train.seq_len = 128;
  Layout l;
  l.micro_batch = 1;
  // T = 128 tokens: QKV 2*128*2304*768 = 0.45 GFLOP, output 0.15, MLP 0.60 each, logits
  // 2*128*50257*768 = 9.9 GFLOP: all inside [1e6, 1e10].
  EXPECT_TRUE(outside_measured(m, hw, train, l).empty());
  // T = 1024: the logits GEMM is 79 GFLOP, above 10 GFLOP; the MLP's 4.8 is inside.
  l.micro_batch = 8;
  auto notes = outside_measured(m, hw, train, l);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(any_has(notes, "the LM head (logits) (1024 x 50257 x 768")) << notes[0];
  EXPECT_TRUE(any_has(notes, "above the GEMMs t measured")) << notes[0];
  EXPECT_TRUE(any_has(notes, "last point's, 0.90")) << notes[0];
  // A byte-level vocabulary is below the measured vocabularies; tp=2 halves
  // the slice of a 5000-token vocabulary to 2500.
  l.micro_batch = 1;
  m.vocab = 5000;
  l.tp = 2;
  notes = outside_measured(m, hw, train, l);
  EXPECT_TRUE(any_has(notes, "a vocabulary slice of 2500 tokens is outside the vocabularies t measured (4096 to 128256)"));
  // Attention: one head at s = 128, d = 64 is 4*128^2*64*(129/256) = 2.1 MFLOP.
  l.tp = 1;
  m.vocab = 50257;
  hw.accel.attention_efficiency.flops = {1e7, 1e9};
  hw.accel.attention_efficiency.efficiency = {0.2, 0.4};
  notes = outside_measured(m, hw, train, l);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(any_has(notes, "attention: one head at sequence 128, head_dim 64")) << notes[0];
  EXPECT_FALSE(any_has(notes, "held to")) << notes[0];
  // A part that throttles attention run back to back says so with the end it uses.
  hw.accel.sustained_attention_ratio = 0.853;
  notes = outside_measured(m, hw, train, l);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(any_has(notes, "the table's nearest end is used, held to 0.853 of it at the power cap")) << notes[0];
}

// FP8: a layer GEMM reads the 16-bit table at half its FLOPs, and its note
// names the FP8 ceiling (the lower of the FP8 best and the FP8 power cap, as
// a fraction of the FP8 peak). H100: best 1402.6 / 1979 = 0.709, cap
// 1175 / 1979 = 0.594.
TEST(Coverage, Fp8GemmsReadTheTableAtHalfTheirFlopsAndNameTheFp8Ceiling) {
  ModelSpec m = *load_model_spec("llama-3-70b");  // hidden 8192, MLP 28672 (SwiGLU: up 57344)
  HwProfile hw = *load_hw_profile("dgx-h100");     // table to 550 GFLOP
  TrainSpec train;
  train.precision = Precision::kFp8;
  train.seq_len = 4096;
  Layout l;
  l.micro_batch = 2;
  l.tp = 8;
  // T = 8192: up projection 2*8192*7168*8192 = 962 GFLOP, above the table,
  // but 481 at half: inside.
  auto notes = outside_measured(m, hw, train, l);
  EXPECT_FALSE(any_has(notes, "the MLP up projection"));
  // T = 16384: 1924 GFLOP, 962 at half: above 550.
  l.micro_batch = 4;
  notes = outside_measured(m, hw, train, l);
  EXPECT_TRUE(any_has(notes, "the MLP up projection (16384 x 7168 x 8192"));
  EXPECT_TRUE(any_has(notes, "in FP8 at most 0.594 of the FP8 peak"));
}

}  // namespace
}  // namespace loom
