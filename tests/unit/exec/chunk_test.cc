// Whole-model gradients of a ModelChunk against central finite differences of
// the loss, for both block families (GPT-2: LayerNorm, GELU, learned
// positions, tied embeddings; Llama: RMSNorm, SwiGLU, RoPE, GQA, untied), and
// recompute (full, selective) giving the same gradients as none.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "exec/model/chunk.h"

namespace loom::exec {
namespace {

ModelDims tiny_dims(bool gpt2) {
  ModelDims d;
  d.gpt2 = gpt2;
  d.C = 16;
  d.F = 40;
  d.Hq = 4;
  d.Hk = gpt2 ? 4 : 2;
  d.D = 4;
  d.V = 61;   // padded to 64: the padded logits must not leak into the loss
  d.Vp = 64;
  d.max_pos = 16;
  d.L = 2;
  d.tied = gpt2;
  return d;
}

struct Fixture {
  ModelDims dims;
  std::unique_ptr<ComputeBackend> backend = make_cpu_backend();
  ParamStore params;
  std::unique_ptr<ModelChunk> chunk;
  std::vector<int32_t> tokens, targets;
  int next_micro = 0;
  const int64_t B = 2, T = 8;

  Fixture(bool gpt2, Recompute rc) : Fixture(tiny_dims(gpt2), rc) {}
  // fused_rows > 0: the fused head (core/executor_head.h) in blocks of that many rows.
  Fixture(const ModelDims& d, Recompute rc, int64_t fused_rows = 0) : dims(d) {
    add_chunk_params(params, dims, 0, dims.L, true, true, 1, 0);
    params.materialize(backend.get(), 7);
    // Larger-than-default weights make the gradients large enough to check.
    for (int64_t i = 0; i < params.numel(); ++i) params.params()[i] *= 5.0f;
    ChunkConfig cc;
    cc.dims = dims;
    cc.num_layers = dims.L;
    cc.has_embedding = cc.has_head = true;
    cc.micro_batch = B;
    cc.seq = T;
    cc.recompute = rc;
    cc.head_grad_in_forward = fused_rows > 0;
    cc.head_block_rows = fused_rows;
    chunk = std::make_unique<ModelChunk>(cc, &params, backend.get(), nullptr);
    std::mt19937 rng(3);
    for (int64_t i = 0; i < B * T; ++i) {
      tokens.push_back(int32_t(rng() % dims.V));
      targets.push_back(int32_t(rng() % dims.V));
    }
  }
  double loss() {
    EXPECT_TRUE(
        chunk->forward(next_micro++, tokens.data(), nullptr, targets.data(), 1.0f / float(B * T), nullptr).is_ok());
    const double sum = chunk->take_loss();
    return sum;
  }
  double loss_and_grads() {
    params.zero_grads();
    int micro = next_micro;
    double l = loss();
    EXPECT_TRUE(chunk->backward(micro, nullptr, nullptr).is_ok());
    return l;
  }
};

void check_gradients(const ModelDims& dims, int64_t fused_rows = 0) {
  Fixture f(dims, Recompute::kNone, fused_rows);
  f.loss_and_grads();
  std::vector<float> grads(f.params.grads(), f.params.grads() + f.params.numel());
  std::mt19937 rng(11);
  int checked = 0;
  for (const ParamInfo& p : f.params.infos()) {
    // A few elements of every tensor, chosen at random.
    for (int k = 0; k < 4; ++k) {
      int64_t i = p.offset + int64_t(rng() % uint64_t(p.numel));
      if (p.name == "embed.wte" && (i - int64_t(p.offset)) / f.dims.C >= f.dims.V) continue;  // padded rows
      float* w = f.params.params() + i;
      const float saved = *w, eps = 2e-3f;
      *w = saved + eps;
      double up = f.loss();
      *w = saved - eps;
      double down = f.loss();
      *w = saved;
      double fd = (up - down) / (2 * eps), g = grads[size_t(i)];
      EXPECT_NEAR(g, fd, 2e-3 + 0.03 * std::fabs(fd)) << p.name << "[" << i - int64_t(p.offset) << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(ModelChunk, Gpt2GradientsMatchFiniteDifferences) { check_gradients(tiny_dims(true)); }
TEST(ModelChunk, LlamaGradientsMatchFiniteDifferences) { check_gradients(tiny_dims(false)); }
// The fused head: loss and head gradients in the forward, in blocks of 5 of
// the 16 rows (the last block short).
TEST(ModelChunk, FusedHeadGradientsMatchFiniteDifferences) {
  check_gradients(tiny_dims(true), 5);
  check_gradients(tiny_dims(false), 5);
}

TEST(ModelChunk, PaddedVocabularyTakesNoPartInTheLoss) {
  Fixture f(true, Recompute::kNone);
  double before = f.loss();
  // Changing the padded rows of the tied embedding changes nothing.
  const ParamInfo& p = f.params.info("embed.wte");
  for (int64_t r = f.dims.V; r < f.dims.Vp; ++r)
    for (int64_t c = 0; c < f.dims.C; ++c) f.params.params()[p.offset + r * f.dims.C + c] = 3.0f;
  EXPECT_DOUBLE_EQ(f.loss(), before);
  // A uniform model scores log(V) per token: the loss sits near it at init.
  EXPECT_GT(before, 0.5 * std::log(61.0));
}

TEST(ModelChunk, RecomputeGivesTheSameGradients) {
  for (bool gpt2 : {true, false}) {
    Fixture ref(gpt2, Recompute::kNone);
    double l0 = ref.loss_and_grads();
    for (Recompute rc : {Recompute::kSelective, Recompute::kFull}) {
      Fixture f(gpt2, rc);
      double l = f.loss_and_grads();
      EXPECT_DOUBLE_EQ(l, l0);
      for (int64_t i = 0; i < f.params.numel(); ++i)
        ASSERT_FLOAT_EQ(f.params.grads()[i], ref.params.grads()[i]) << "element " << i << " " << recompute_name(rc);
    }
  }
}

TEST(ModelChunk, InitializationDependsOnGlobalNamesOnly) {
  // The same tensor split over 2 TP ranks holds exactly the rows of the unsplit one.
  ModelDims d = tiny_dims(false);
  auto be = make_cpu_backend();
  ParamStore whole, half0, half1;
  add_chunk_params(whole, d, 0, 2, true, true, 1, 0);
  add_chunk_params(half0, d, 0, 2, true, true, 2, 0);
  add_chunk_params(half1, d, 0, 2, true, true, 2, 1);
  whole.materialize(be.get(), 5);
  half0.materialize(be.get(), 5);
  half1.materialize(be.get(), 5);
  for (const char* name : {"layers.1.attn.q.weight", "layers.0.mlp.down.weight", "embed.wte"}) {
    const ParamInfo& w = whole.info(name);
    const ParamInfo& h = half1.info(name);
    const int64_t cols = w.local_shape[1], hcols = h.local_shape[1];
    for (int64_t r = 0; r < h.local_shape[0]; ++r) {
      for (int64_t c = 0; c < hcols; ++c) {
        int64_t gr = h.shard == ShardKind::kSplitDim0 ? r + h.shard_offset : r;
        int64_t gc = h.shard == ShardKind::kSplitDim1 ? c + h.shard_offset : c;
        ASSERT_EQ(half1.param(name)[r * hcols + c], whole.param(name)[gr * cols + gc]) << name;
      }
    }
  }
}


// --- config.json fields the executor honours (issue #14, finding 3) -------------

// A tiny Llama-family config (the shapes of tiny_dims(false)) with `extra` keys.
ModelSpec tiny_spec(const std::string& model_type, const std::string& extra = "") {
  std::string text = R"({"model_type": ")" + model_type + R"(", "hidden_size": 16, "intermediate_size": 40,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 61,
    "max_position_embeddings": 16, "tie_word_embeddings": false)" +
                     std::string(model_type == "qwen3" ? R"(, "head_dim": 4)" : "") + extra + "}";
  Result<ModelSpec> m = parse_model_spec(text, "tiny");
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? *m : ModelSpec{};
}

ModelDims dims_of(const ModelSpec& m) {
  Result<ModelDims> d = model_dims(m);
  EXPECT_TRUE(d.is_ok()) << d.status().to_string();
  return d.is_ok() ? *d : ModelDims{};
}

double loss_of(const ModelSpec& m) {
  Fixture f(dims_of(m), Recompute::kNone);
  return f.loss();
}

TEST(ModelChunkConfig, RopeThetaIsHonoured) {
  const double base = loss_of(tiny_spec("llama", R"(, "rope_theta": 10000.0)"));
  EXPECT_NE(loss_of(tiny_spec("llama", R"(, "rope_theta": 500000.0)")), base);
  EXPECT_EQ(dims_of(tiny_spec("llama", R"(, "rope_theta": 500000.0)")).rope_theta, 500000.0f);
}

TEST(ModelChunkConfig, NormEpsilonIsHonoured) {
  EXPECT_EQ(dims_of(tiny_spec("llama", R"(, "rms_norm_eps": 1e-6)")).norm_eps, 1e-6f);
  const double base = loss_of(tiny_spec("llama", R"(, "rms_norm_eps": 1e-5)"));
  EXPECT_NE(loss_of(tiny_spec("llama", R"(, "rms_norm_eps": 0.5)")), base);
}

TEST(ModelChunkConfig, Llama31RopeScalingIsHonoured) {
  // Pair 1 of a head of 4 has wavelength 2*pi*100 = 628 > 64 / 1: its frequency is divided by 8.
  const std::string scaling =
      R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})";
  ModelDims d = dims_of(tiny_spec("llama", scaling));
  ASSERT_EQ(d.rope_inv_freq.size(), 2u);
  EXPECT_DOUBLE_EQ(d.rope_inv_freq[0], 1.0);
  EXPECT_DOUBLE_EQ(d.rope_inv_freq[1], 0.01 / 8);
  EXPECT_NE(loss_of(tiny_spec("llama", scaling)), loss_of(tiny_spec("llama")));
}

TEST(ModelChunkConfig, Qwen2BiasesAndQwen3QkNormAreTrained) {
  auto names = [](const ModelSpec& m) {
    ModelDims d = dims_of(m);
    ParamStore st;
    add_chunk_params(st, d, 0, d.L, true, true, 1, 0);
    return st;
  };
  ParamStore q2 = names(tiny_spec("qwen2"));  // q, k, v biases; none on o
  EXPECT_TRUE(q2.has("layers.0.attn.q.bias"));
  EXPECT_TRUE(q2.has("layers.1.attn.v.bias"));
  EXPECT_FALSE(q2.has("layers.0.attn.o.bias"));
  ParamStore q3 = names(tiny_spec("qwen3"));  // per-head RMSNorm of q and k
  EXPECT_TRUE(q3.has("layers.0.attn.q_norm.weight"));
  EXPECT_TRUE(q3.has("layers.1.attn.k_norm.weight"));
  EXPECT_EQ(q3.info("layers.0.attn.q_norm.weight").numel, 4);
  ParamStore ll = names(tiny_spec("llama", R"(, "attention_bias": true, "mlp_bias": true)"));
  for (const char* n : {"layers.0.attn.q.bias", "layers.0.attn.o.bias", "layers.0.mlp.gate.bias",
                        "layers.0.mlp.up.bias", "layers.0.mlp.down.bias"})
    EXPECT_TRUE(ll.has(n)) << n;
  // The parameter count the executor trains equals the planner's.
  for (const ModelSpec& m : {tiny_spec("qwen2"), tiny_spec("qwen3"),
                             tiny_spec("llama", R"(, "attention_bias": true, "mlp_bias": true)")}) {
    ModelDims d = dims_of(m);
    ParamStore st;
    add_chunk_params(st, d, 0, d.L, true, true, 1, 0);
    // The executor pads the vocabulary (Vp rows) of the embedding and the head.
    EXPECT_EQ(st.numel() - 2 * (d.Vp - d.V) * d.C, m.total_params()) << m.model_type;
  }
}

ModelDims every_field_dims() {
  return dims_of(tiny_spec("qwen3", R"(, "rope_theta": 500000.0, "rms_norm_eps": 1e-3, "attention_bias": true,
    "mlp_bias": true, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64})"));
}

TEST(ModelChunkConfig, EveryFieldGradientsMatchFiniteDifferences) {
  ModelDims d = every_field_dims();
  ASSERT_TRUE(d.qk_norm && d.qkv_bias && d.o_bias && d.mlp_bias && !d.rope_inv_freq.empty());
  check_gradients(d);
}

TEST(ModelChunkConfig, EveryFieldRecomputeGivesTheSameGradients) {
  Fixture ref(every_field_dims(), Recompute::kNone);
  double l0 = ref.loss_and_grads();
  for (Recompute rc : {Recompute::kSelective, Recompute::kFull}) {
    Fixture f(every_field_dims(), rc);
    EXPECT_DOUBLE_EQ(f.loss_and_grads(), l0);
    for (int64_t i = 0; i < f.params.numel(); ++i)
      ASSERT_FLOAT_EQ(f.params.grads()[i], ref.params.grads()[i]) << "element " << i << " " << recompute_name(rc);
  }
}

TEST(ModelChunkConfig, FieldsTheExecutorCannotHonourAreRefused) {
  struct Case {
    ModelSpec spec;
    int64_t seq;
    const char* expect;
  };
  for (const Case& c : {
           Case{tiny_spec("llama", R"(, "rope_scaling": {"type": "yarn", "factor": 4.0})"), 8, "yarn"},
           Case{tiny_spec("llama", R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0})"), 8, "linear"},
           Case{tiny_spec("llama", R"(, "hidden_act": "gelu")"), 8, "hidden_act"},
           Case{tiny_spec("mistral", R"(, "sliding_window": 4)"), 8, "sliding_window=4"},
       }) {
    Result<ModelDims> d = model_dims(c.spec, c.seq);
    ASSERT_FALSE(d.is_ok()) << c.expect;
    EXPECT_EQ(d.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos) << d.status().to_string();
  }
  // A window covering the whole sequence is full causal attention: accepted.
  EXPECT_TRUE(model_dims(tiny_spec("mistral", R"(, "sliding_window": 8)"), 8).is_ok());
}
// The program's split backward: the parts, run in order, give exactly the
// gradients (and input gradient) of one whole backward, whatever the count of
// parts against the chunk's layers (more parts than layers leaves some empty).
TEST(ModelChunk, BackwardInPartsEqualsOneBackward) {
  for (bool gpt2 : {true, false})
    for (int parts : {2, 3, 5}) {
      ModelDims d = tiny_dims(gpt2);
      d.L = 3;
      Fixture whole(d, Recompute::kNone), split(d, Recompute::kNone);
      whole.loss_and_grads();
      split.params.zero_grads();
      const int micro = split.next_micro;
      split.loss();
      for (int k = 0; k < parts; ++k) ASSERT_TRUE(split.chunk->backward_part(micro, nullptr, nullptr, k, parts).is_ok());
      EXPECT_EQ(split.chunk->in_flight(), 0u);
      for (int64_t i = 0; i < whole.params.numel(); ++i)
        ASSERT_EQ(whole.params.grads()[i], split.params.grads()[i]) << (gpt2 ? "gpt2" : "llama") << " parts " << parts;
      // Out of order is refused, not silently wrong.
      const int m2 = split.next_micro;
      split.loss();
      EXPECT_FALSE(split.chunk->backward_part(m2, nullptr, nullptr, 1, parts).is_ok());
    }
}

// DualPipeV's zero-bubble backward: a backward that defers its weight
// gradients and the W run after it give one whole backward's gradients and
// input gradient, exactly for one micro-batch; in between, the deferred
// weights' gradients are untouched while the rest (norms, biases, head,
// embedding) are already there. With a second micro-batch's whole backward
// run between them the sums agree to rounding (the order of the two
// micro-batches' adds differs). Recompute and both block kinds included.
TEST(ModelChunk, DeferredWeightGradientsEqualOneBackward) {
  for (bool gpt2 : {true, false})
    for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
      ModelDims d = tiny_dims(gpt2);
      d.L = 2;
      Fixture whole(d, rc), split(d, rc);
      whole.loss_and_grads();
      split.params.zero_grads();
      const int micro = split.next_micro;
      split.loss();
      ASSERT_TRUE(split.chunk->backward_part(micro, nullptr, nullptr, 0, 1, /*defer_wgrad=*/true).is_ok());
      EXPECT_EQ(split.chunk->in_flight(), 0u);
      EXPECT_EQ(split.chunk->deferred_wgrads(), 1u);
      const std::string w0 = "layers.0.attn.o.weight", mlp0 = gpt2 ? "layers.0.mlp.fc1.weight" : "layers.0.mlp.up.weight";
      for (const std::string& n : {w0, mlp0})
        for (int64_t i = 0; i < split.params.info(n).numel; ++i)
          ASSERT_EQ(split.params.grad(n)[i], 0.f) << n << " before its W";
      ASSERT_NE(split.params.grad("layers.0.ln1.weight")[0], 0.f);  // not deferred
      ASSERT_TRUE(split.chunk->weight_grad(micro).is_ok());
      EXPECT_EQ(split.chunk->deferred_wgrads(), 0u);
      for (int64_t i = 0; i < whole.params.numel(); ++i)
        ASSERT_EQ(whole.params.grads()[i], split.params.grads()[i]) << (gpt2 ? "gpt2" : "llama") << " element " << i;
      // A W with nothing deferred, or a second deferral of one micro-batch, is refused.
      EXPECT_FALSE(split.chunk->weight_grad(micro).is_ok());

      // Two micro-batches: B(0, deferred), B(1), W(0) against B(0), B(1).
      Fixture ref2(d, rc), two(d, rc);
      ref2.params.zero_grads();
      two.params.zero_grads();
      for (Fixture* f : {&ref2, &two}) {
        f->loss();
        f->loss();
      }
      ASSERT_TRUE(ref2.chunk->backward(0, nullptr, nullptr).is_ok());
      ASSERT_TRUE(ref2.chunk->backward(1, nullptr, nullptr).is_ok());
      ASSERT_TRUE(two.chunk->backward_part(0, nullptr, nullptr, 0, 1, true).is_ok());
      ASSERT_TRUE(two.chunk->backward(1, nullptr, nullptr).is_ok());
      ASSERT_TRUE(two.chunk->weight_grad(0).is_ok());
      for (int64_t i = 0; i < ref2.params.numel(); ++i)
        ASSERT_NEAR(two.params.grads()[i], ref2.params.grads()[i], 1e-5f * (1 + std::fabs(ref2.params.grads()[i])))
            << "element " << i;
    }
}

}  // namespace
}  // namespace loom::exec
