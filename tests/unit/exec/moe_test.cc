// The mixture-of-experts layer on one rank: the router's backward against
// central finite differences of its own forward (both weight normalizations,
// with the load-balancing and z-losses' terms), its tie-break, and a whole
// MoE model's gradients (router, experts, shared experts, and the losses'
// share of the objective) against finite differences of the loss; recompute
// gives the same gradients; capacity drops what it must.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/model_spec.h"
#include "exec/backend/cpu_kernels.h"
#include "exec/model/chunk.h"

namespace loom::exec {
namespace {

// L = sum c(t,j) w(t,j) + sum_e a_e sum_t p(t,e) + zg/2 sum_t lse(t)^2: its
// gradient wrt the logits is moe_router_backward's output for dw = c.
TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5, E = 6, K = 2;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> z(static_cast<size_t>(N * E)), c(static_cast<size_t>(N * K)), aux(static_cast<size_t>(E));
  for (float& v : z) v = 2 * nd(rng);
  for (float& v : c) v = nd(rng);
  for (float& v : aux) v = nd(rng);
  const float zg = 0.3f;
  CpuKernels k;
  for (bool norm : {false, true}) {
    std::vector<float> p(static_cast<size_t>(N * E)), lse(static_cast<size_t>(N)), w(static_cast<size_t>(N * K)), dz(static_cast<size_t>(N * E));
    std::vector<int32_t> idx(static_cast<size_t>(N * K));
    auto loss = [&](const std::vector<float>& logits) {
      std::vector<float> pp(static_cast<size_t>(N * E)), ll(static_cast<size_t>(N)), ww(static_cast<size_t>(N * K));
      std::vector<int32_t> ii(static_cast<size_t>(N * K));
      k.moe_router_forward({logits.data(), pp.data(), ll.data(), ii.data(), ww.data(), N, E, K, norm});
      EXPECT_EQ(ii, idx) << "the perturbation changed the routing";
      double L = 0;
      for (size_t i = 0; i < ww.size(); ++i) L += double(c[i]) * ww[i];
      for (int64_t t = 0; t < N; ++t) {
        for (int64_t e = 0; e < E; ++e) L += double(aux[size_t(e)]) * pp[size_t(t * E + e)];
        L += 0.5 * zg * double(ll[size_t(t)]) * ll[size_t(t)];
      }
      return L;
    };
    k.moe_router_forward({z.data(), p.data(), lse.data(), idx.data(), w.data(), N, E, K, norm});
    k.moe_router_backward({p.data(), lse.data(), idx.data(), w.data(), c.data(), aux.data(), zg, dz.data(), N, E, K,
                           norm});
    for (size_t i = 0; i < z.size(); ++i) {
      std::vector<float> up = z, down = z;
      const float eps = 1e-3f;
      up[i] += eps;
      down[i] -= eps;
      const double fd = (loss(up) - loss(down)) / (2 * eps);
      EXPECT_NEAR(dz[i], fd, 1e-3 + 1e-2 * std::fabs(fd)) << "logit " << i << (norm ? " normalized" : "");
    }
    if (norm)
      for (int64_t t = 0; t < N; ++t) EXPECT_NEAR(w[size_t(t * K)] + w[size_t(t * K + 1)], 1.0, 1e-6);
  }
}

TEST(MoeRouter, TiesGoToTheLowerExpertIndex) {
  const int64_t N = 1, E = 5, K = 3;
  std::vector<float> z{0.5f, 1.f, 0.5f, 1.f, 0.5f}, p(5), lse(1), w(3);
  std::vector<int32_t> idx(3);
  CpuKernels k;
  k.moe_router_forward({z.data(), p.data(), lse.data(), idx.data(), w.data(), N, E, K, false});
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 3, 0}));
}

// A two-layer Llama-style MoE model: layer 0 dense, layer 1 MoE with 4
// experts, top-2, a shared expert.
ModelDims moe_dims(bool shared, bool normalize, bool gated = false) {
  ModelDims d;
  d.gpt2 = false;
  d.C = 16;
  d.F = 40;
  d.Hq = 4;
  d.Hk = 2;
  d.D = 4;
  d.V = 61;
  d.Vp = 64;
  d.max_pos = 16;
  d.L = 2;
  d.tied = false;
  d.moe.E = 4;
  d.moe.k = 2;
  d.moe.F = 12;
  d.moe.Fs = shared ? 8 : 0;
  d.moe.shared_gate = shared && gated;
  d.moe.normalize = normalize;
  d.moe.layer_moe = {0, 1};
  return d;
}

struct MoeFixture {
  ModelDims dims;
  std::unique_ptr<ComputeBackend> backend = make_cpu_backend();
  ParamStore params;
  std::unique_ptr<ModelChunk> chunk;
  std::vector<int32_t> tokens, targets;
  int next_micro = 0;
  const int64_t B = 2, T = 8;

  MoeFixture(const ModelDims& d, Recompute rc, const MoeRun& run) : dims(d) {
    add_chunk_params(params, dims, 0, dims.L, true, true, 1, 0);
    params.materialize(backend.get(), 7);
    for (int64_t i = 0; i < params.numel(); ++i) params.params()[i] *= 5.0f;
    ChunkConfig cc;
    cc.dims = dims;
    cc.num_layers = dims.L;
    cc.has_embedding = cc.has_head = true;
    cc.micro_batch = B;
    cc.seq = T;
    cc.recompute = rc;
    cc.moe = run;
    chunk = std::make_unique<ModelChunk>(cc, &params, backend.get(), nullptr);
    std::mt19937 rng(3);
    for (int64_t i = 0; i < B * T; ++i) {
      tokens.push_back(int32_t(rng() % dims.V));
      targets.push_back(int32_t(rng() % dims.V));
    }
  }
  // The objective: the token loss plus the MoE losses.
  double loss(MoeStats* stats = nullptr) {
    EXPECT_TRUE(
        chunk->forward(next_micro++, tokens.data(), nullptr, targets.data(), 1.0f / float(B * T), nullptr).is_ok());
    const double sum = chunk->take_loss();
    MoeStats s = chunk->take_moe_stats();
    if (stats) *stats = s;
    return sum + s.aux_loss + s.z_loss;
  }
  double loss_and_grads(MoeStats* stats = nullptr) {
    params.zero_grads();
    int micro = next_micro;
    double l = loss(stats);
    EXPECT_TRUE(chunk->backward(micro, nullptr, nullptr).is_ok());
    return l;
  }
};

MoeRun with_losses() {
  MoeRun r;
  r.aux_coeff = 0.5;  // large: its gradient must show in the router's
  r.z_coeff = 0.05;
  return r;
}

TEST(MoeModel, GradientsMatchFiniteDifferences) {
  for (bool normalize : {true, false}) {
    // Qwen2-MoE's gated shared expert with the raw weights, Mixtral's plain one with renormalized.
    MoeFixture f(moe_dims(true, normalize, /*gated=*/!normalize), Recompute::kNone, with_losses());
    MoeStats st;
    f.loss_and_grads(&st);
    EXPECT_GT(st.aux_loss, 0);
    EXPECT_GT(st.z_loss, 0);
    std::vector<float> grads(f.params.grads(), f.params.grads() + f.params.numel());
    std::mt19937 rng(11);
    int checked = 0, router = 0, experts = 0;
    for (const ParamInfo& p : f.params.infos()) {
      for (int k = 0; k < 6; ++k) {
        int64_t i = p.offset + int64_t(rng() % uint64_t(p.numel));
        float* w = f.params.params() + i;
        const float saved = *w, eps = 1e-3f;
        *w = saved + eps;
        double up = f.loss();
        *w = saved - eps;
        double down = f.loss();
        *w = saved;
        double fd = (up - down) / (2 * eps), g = grads[size_t(i)];
        EXPECT_NEAR(g, fd, 3e-3 + 0.03 * std::fabs(fd)) << p.name << "[" << i - int64_t(p.offset) << "]";
        ++checked;
        router += p.name.find("router") != std::string::npos && std::fabs(g) > 1e-4;
        experts += p.expert;
      }
    }
    EXPECT_GT(checked, 60);
    EXPECT_GT(router, 0) << "the router got no gradient";
    EXPECT_EQ(experts, 4 * 3 * 6);
  }
}

// The load-balancing loss alone: its gradient reaches the router.
TEST(MoeModel, AuxLossGradientReachesTheRouter) {
  MoeRun none, aux;
  aux.aux_coeff = 1.0;
  MoeFixture a(moe_dims(false, true), Recompute::kNone, none), b(moe_dims(false, true), Recompute::kNone, aux);
  MoeStats sa, sb;
  const double la = a.loss_and_grads(&sa), lb = b.loss_and_grads(&sb);
  EXPECT_EQ(sa.aux_loss, 0);
  // Perfect balance gives coeff * 1 (f_e = P_e = 1/E); the loss is at least near it.
  EXPECT_GT(sb.aux_loss, 0.5);
  EXPECT_NEAR(lb - la, sb.aux_loss, 1e-9);
  const float* ga = a.params.grad("layers.1.mlp.router.weight");
  const float* gb = b.params.grad("layers.1.mlp.router.weight");
  double diff = 0;
  for (int i = 0; i < 4 * 16; ++i) diff += std::fabs(ga[i] - gb[i]);
  EXPECT_GT(diff, 1e-4);
  // ... and nowhere else but below the router (the experts' weights see the same).
  EXPECT_EQ(a.params.grad("layers.1.mlp.experts.2.down.weight")[5], b.params.grad("layers.1.mlp.experts.2.down.weight")[5]);
}

TEST(MoeModel, RecomputeGivesTheSameGradients) {
  MoeFixture ref(moe_dims(true, true), Recompute::kNone, with_losses());
  MoeStats s0;
  const double l0 = ref.loss_and_grads(&s0);
  for (Recompute rc : {Recompute::kSelective, Recompute::kFull}) {
    MoeFixture f(moe_dims(true, true), rc, with_losses());
    MoeStats s;
    EXPECT_DOUBLE_EQ(f.loss_and_grads(&s), l0);
    EXPECT_DOUBLE_EQ(s.aux_loss, s0.aux_loss) << "a recomputed forward was counted twice";
    for (int64_t i = 0; i < f.params.numel(); ++i)
      ASSERT_FLOAT_EQ(f.params.grads()[i], ref.params.grads()[i]) << "element " << i << " " << recompute_name(rc);
  }
}

// Capacity: 16 tokens * top-2 over 4 experts is 8 copies each when balanced;
// a factor of 0.25 keeps 2 per expert, so at least 32 - 8 = 24 are dropped,
// and the gradients stay those of the function computed (finite differences).
TEST(MoeModel, CapacityDropsTokenCopies) {
  MoeRun run;
  run.capacity_factor = 0.25;
  MoeFixture f(moe_dims(false, true), Recompute::kNone, run);
  MoeStats st;
  f.loss_and_grads(&st);
  EXPECT_EQ(st.dropped, 32 - 4 * 2);
  MoeFixture dropless(moe_dims(false, true), Recompute::kNone, MoeRun{});
  EXPECT_NE(dropless.loss(), f.loss());
  std::vector<float> grads(f.params.grads(), f.params.grads() + f.params.numel());
  const ParamInfo& p = f.params.info("layers.1.mlp.experts.1.up.weight");
  for (int64_t j = 0; j < 6; ++j) {
    const int64_t i = int64_t(p.offset) + j * 31;
    float* w = f.params.params() + i;
    const float saved = *w, eps = 1e-3f;
    *w = saved + eps;
    const double up = f.loss();
    *w = saved - eps;
    const double down = f.loss();
    *w = saved;
    EXPECT_NEAR(grads[size_t(i)], (up - down) / (2 * eps), 3e-3);
  }
}

// config.json: Mixtral, Qwen3-MoE and Qwen2-MoE (gated shared expert) are read.
TEST(MoeModel, ConfigsAreReadOrRefused) {
  auto spec = [](const std::string& extra) {
    Result<ModelSpec> m = parse_model_spec(R"({"hidden_size": 16, "intermediate_size": 40,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 61,
      "max_position_embeddings": 16)" + extra + "}",
                                           "tiny");
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    return *m;
  };
  Result<ModelDims> mix = model_dims(spec(R"(, "model_type": "mixtral", "num_local_experts": 4,
      "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02)"));
  ASSERT_TRUE(mix.is_ok()) << mix.status().to_string();
  EXPECT_EQ(mix->moe.E, 4);
  EXPECT_EQ(mix->moe.F, 40);
  EXPECT_TRUE(mix->moe.normalize);
  EXPECT_TRUE(mix->moe.is_moe(0) && mix->moe.is_moe(1));
  Result<ModelDims> qwen = model_dims(spec(R"(, "model_type": "qwen3_moe", "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 12, "decoder_sparse_step": 2, "head_dim": 4)"));
  ASSERT_TRUE(qwen.is_ok()) << qwen.status().to_string();
  EXPECT_FALSE(qwen->moe.normalize);  // transformers' default norm_topk_prob
  EXPECT_FALSE(qwen->moe.is_moe(0));
  EXPECT_TRUE(qwen->moe.is_moe(1));
  Result<ModelDims> gated = model_dims(spec(R"(, "model_type": "qwen2_moe", "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 12, "shared_expert_intermediate_size": 24)"));
  ASSERT_TRUE(gated.is_ok()) << gated.status().to_string();
  EXPECT_TRUE(gated->moe.shared_gate);
  EXPECT_EQ(gated->moe.Fs, 24);
}

}  // namespace
}  // namespace loom::exec
