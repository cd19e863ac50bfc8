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

  Fixture(bool gpt2, Recompute rc) : dims(tiny_dims(gpt2)) {
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
    chunk = std::make_unique<ModelChunk>(cc, &params, backend.get(), nullptr);
    std::mt19937 rng(3);
    for (int64_t i = 0; i < B * T; ++i) {
      tokens.push_back(int32_t(rng() % dims.V));
      targets.push_back(int32_t(rng() % dims.V));
    }
  }
  double loss() {
    double sum = 0;
    EXPECT_TRUE(chunk->forward(next_micro++, tokens.data(), nullptr, targets.data(), 1.0f / float(B * T), nullptr, &sum)
                    .is_ok());
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

void check_gradients(bool gpt2) {
  Fixture f(gpt2, Recompute::kNone);
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

TEST(ModelChunk, Gpt2GradientsMatchFiniteDifferences) { check_gradients(true); }
TEST(ModelChunk, LlamaGradientsMatchFiniteDifferences) { check_gradients(false); }

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

}  // namespace
}  // namespace loom::exec
