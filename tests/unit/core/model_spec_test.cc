// ModelSpec against independent truths: the parameter totals the model authors
// published, the Megatron-LM paper's closed-form parameter and FLOP formulas,
// and PaLM's model-FLOPs formula worked by hand.
#include "core/model_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace loom {
namespace {

ModelSpec load(const std::string& name) {
  Result<ModelSpec> m = load_model_spec(name);
  EXPECT_TRUE(m.is_ok()) << name << ": " << m.status().to_string();
  return m.is_ok() ? m.value() : ModelSpec{};
}

ModelSpec parse_ok(const std::string& text) {
  Result<ModelSpec> m = parse_model_spec(text, "fixture");
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? m.value() : ModelSpec{};
}

// x expressed in units of `unit` with `digits` decimals, rounded or truncated,
// the way a model card prints "30.5B".
double printed(int64_t x, double unit, int digits, bool truncate) {
  double scale = std::pow(10.0, digits);
  double v = static_cast<double>(x) / unit * scale;
  return (truncate ? std::floor(v) : std::round(v)) / scale;
}

// --- dense models: exact published totals --------------------------------------

TEST(ModelSpecParams, Gpt2FamilyMatchesPublishedTotals) {
  // HF model.num_parameters() of gpt2, gpt2-medium, gpt2-large, gpt2-xl.
  EXPECT_EQ(load("gpt2-124m").total_params(), 124439808);
  EXPECT_EQ(load("gpt2-355m").total_params(), 354823168);
  EXPECT_EQ(load("gpt2-774m").total_params(), 774030080);
  EXPECT_EQ(load("gpt2-1.5b").total_params(), 1557611200);
}

TEST(ModelSpecParams, Gpt2SmallComponentsByHand) {
  ModelSpec m = load("gpt2-124m");
  EXPECT_EQ(m.embedding_params(), 50257 * 768);  // wte
  EXPECT_EQ(m.position_params(), 1024 * 768);    // wpe
  EXPECT_EQ(m.lm_head_params(), 0);              // tied to wte
  // c_attn (768x2304 + 2304), attn c_proj (768x768 + 768), two LayerNorms (4*768),
  // c_fc (768x3072 + 3072), mlp c_proj (3072x768 + 768).
  EXPECT_EQ(m.layer_params(0), 768 * 2304 + 2304 + 768 * 768 + 768 + 4 * 768 + 768 * 3072 + 3072 + 3072 * 768 + 768);
  EXPECT_EQ(m.ffn_hidden, 4 * 768);  // n_inner absent => 4 * n_embd
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_EQ(m.position, PositionKind::kLearned);
  EXPECT_TRUE(m.tied_embeddings);
}

TEST(ModelSpecParams, LlamaFamilyMatchesPublishedTotals) {
  // safetensors totals reported for the HF checkpoints.
  EXPECT_EQ(load("llama-2-7b").total_params(), 6738415616);
  EXPECT_EQ(load("llama-3-8b").total_params(), 8030261248);
  EXPECT_EQ(load("llama-3-70b").total_params(), 70553706496);
  EXPECT_EQ(load("llama-3.1-405b").total_params(), 405853388800);
  ModelSpec m = load("llama-3-8b");
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.active_params(), m.total_params());  // dense
}

// --- MoE models ------------------------------------------------------------------

TEST(ModelSpecParams, MixtralTotalExactAndActiveRounded) {
  ModelSpec m = load("mixtral-8x7b");
  EXPECT_EQ(m.total_params(), 46702792704);
  EXPECT_EQ(printed(m.active_params(), 1e9, 1, false), 12.9);  // "12.9B active"
  EXPECT_EQ(m.num_moe_layers(), 32);
  EXPECT_EQ(m.expert_params(), 3 * 4096 * 14336);
}

TEST(ModelSpecParams, Qwen3MoeMatchesModelCards) {
  // The Qwen3 model cards print truncated values: 30.5B total, 3.3B activated,
  // 29.9B non-embedding; 235B total, 22B activated, 234B non-embedding.
  // Exact totals: the checkpoints' tensor element counts (HF safetensors
  // metadata / GGUF general.parameter_count).
  ModelSpec a = load("qwen3-30b-a3b");
  EXPECT_EQ(a.total_params(), 30532122624);
  EXPECT_TRUE(a.qk_norm);
  EXPECT_EQ(a.num_moe_layers(), 48);
  EXPECT_EQ(printed(a.total_params(), 1e9, 1, true), 30.5);
  EXPECT_EQ(printed(a.active_params(), 1e9, 1, true), 3.3);
  EXPECT_EQ(printed(a.total_params() - a.embedding_params() - a.lm_head_params(), 1e9, 1, true), 29.9);
  ModelSpec b = load("qwen3-235b-a22b");
  EXPECT_EQ(b.total_params(), 235093634560);
  EXPECT_EQ(b.head_dim, 128);  // explicit: 64 heads * 128 != hidden 4096
  EXPECT_EQ(printed(b.total_params(), 1e9, 0, true), 235);
  EXPECT_EQ(printed(b.active_params(), 1e9, 0, true), 22);
  EXPECT_EQ(printed(b.total_params() - b.embedding_params() - b.lm_head_params(), 1e9, 0, false), 234);
}

TEST(ModelSpecParams, DeepSeekV3MatchesPublishedCounts) {
  // deepseek-ai README_WEIGHTS.md: main model 671B total, 36.6B activated
  // "including 0.9B for the output head" (the input embedding is not counted);
  // the MTP module is separate and not in the total. Exact: the element count of
  // the checkpoint's main-model tensors (layers 0-60, embedding, norm, head).
  ModelSpec m = load("deepseek-v3");
  EXPECT_EQ(m.total_params(), 671026419200);
  EXPECT_TRUE(m.mla.enabled);
  EXPECT_EQ(m.num_mtp_layers, 1);
  EXPECT_EQ(m.num_dense_layers(), 3);
  EXPECT_EQ(m.num_moe_layers(), 58);
  EXPECT_EQ(m.moe.num_shared_experts, 1);
  EXPECT_TRUE(m.moe.router_bias);
  // n_group 8, topk_group 4: a token's 8 experts come from 4 of 8 groups
  // ("each token will be sent to at most 4 nodes", DeepSeek-V3 report 2.1.2).
  EXPECT_EQ(m.moe.num_groups, 8);
  EXPECT_EQ(m.moe.topk_groups, 4);
  EXPECT_EQ(printed(m.total_params(), 1e9, 0, false), 671);
  EXPECT_EQ(printed(m.active_params() - m.embedding_params(), 1e9, 1, false), 36.6);
  EXPECT_EQ(printed(m.active_params() - m.embedding_params(), 1e9, 0, false), 37);  // "37B activated"
  EXPECT_EQ(printed(m.lm_head_params(), 1e9, 1, false), 0.9);
  ModelSpec no_mtp = m;
  no_mtp.num_mtp_layers = 0;
  EXPECT_EQ(no_mtp.total_params(), m.total_params());
}

TEST(ModelSpecParams, DeepSeekV2AndQwen2MoeFixtures) {
  // DeepSeek-V2 (236B total, 21B activated; q_lora_rank given) and
  // Qwen1.5-MoE-A2.7B (qwen2_moe: 14.3B total, 2.7B activated; shared expert).
  ModelSpec v2 = parse_ok(R"({"model_type": "deepseek_v2", "hidden_size": 5120, "intermediate_size": 12288,
    "num_hidden_layers": 60, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 102400,
    "max_position_embeddings": 163840, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 160, "n_shared_experts": 2,
    "num_experts_per_tok": 6, "moe_intermediate_size": 1536, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "topk_method": "group_limited_greedy", "tie_word_embeddings": false})");
  EXPECT_FALSE(v2.moe.router_bias);
  EXPECT_EQ(printed(v2.total_params(), 1e9, 0, false), 236);
  EXPECT_EQ(printed(v2.active_params(), 1e9, 0, false), 21);
  ModelSpec q = parse_ok(R"({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936,
    "max_position_embeddings": 8192, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "tie_word_embeddings": false})");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.router_params(), 60 * 2048 + 2048);  // gate + shared_expert_gate
  EXPECT_EQ(printed(q.total_params(), 1e9, 1, false), 14.3);
  EXPECT_EQ(printed(q.active_params(), 1e9, 1, false), 2.7);
}

TEST(ModelSpecStructure, MoeLayerPatterns) {
  // Qwen: (layer + 1) % decoder_sparse_step == 0 and not in mlp_only_layers.
  ModelSpec q = parse_ok(R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "max_position_embeddings": 64, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "decoder_sparse_step": 2, "mlp_only_layers": [3]})");
  EXPECT_FALSE(q.is_moe_layer(0));
  EXPECT_TRUE(q.is_moe_layer(1));
  EXPECT_FALSE(q.is_moe_layer(3));  // mlp_only
  EXPECT_TRUE(q.is_moe_layer(5));
  EXPECT_EQ(q.num_moe_layers(), 2);
  EXPECT_EQ(q.layer_params(0) - q.attention_params() - q.norm_params_per_layer(), 3 * 64 * 128);
  EXPECT_EQ(q.active_params(), q.total_params() - 2 * 2 * q.expert_params());
  Result<ModelSpec> back = parse_model_spec(model_spec_to_json(q), "x");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->moe.dense_layer_ids, std::vector<int>{3});
  for (int l = 0; l < 6; ++l) EXPECT_EQ(back->is_moe_layer(l), q.is_moe_layer(l)) << "layer " << l;
}

// --- Megatron-LM 2021 GPT family ----------------------------------------------------

struct MegatronRow {
  const char* name;
  int64_t layers, hidden;
  double table_billions;  // Narayanan et al. SC'21 Table 1, as printed
};

TEST(ModelSpecParams, MegatronFamilyMatchesPaperFormulaAndTable1) {
  const MegatronRow rows[] = {{"megatron-gpt-1.7b", 24, 2304, 1.7},     {"megatron-gpt-3.6b", 30, 3072, 3.6},
                              {"megatron-gpt-7.5b", 36, 4096, 7.5},     {"megatron-gpt-18.4b", 40, 6144, 18.4},
                              {"megatron-gpt-39.1b", 48, 8192, 39.1},   {"megatron-gpt-76.1b", 60, 10240, 76.1},
                              {"megatron-gpt-145.6b", 80, 12288, 145.6}, {"megatron-gpt-310.1b", 96, 16384, 310.1},
                              {"megatron-gpt-529.6b", 105, 20480, 529.6}, {"megatron-gpt-1t", 128, 25600, 1008.0}};
  const int64_t V = 51200, s = 2048;
  for (const MegatronRow& r : rows) {
    SCOPED_TRACE(r.name);
    ModelSpec m = load(r.name);
    const int64_t L = r.layers, h = r.hidden;
    ASSERT_EQ(m.num_layers, L);
    ASSERT_EQ(m.hidden, h);
    // P = 12*L*h^2 * (1 + 13/(12h) + (V + s)/(12*L*h)) = 12Lh^2 + 13Lh + (V + s)h,
    // exact in integers. The paper's formula omits the final LayerNorm (2h).
    const int64_t paper = 12 * L * h * h + 13 * L * h + (V + s) * h;
    EXPECT_EQ(m.total_params(), paper + 2 * h);
    EXPECT_EQ(printed(m.total_params(), 1e9, 1, false), r.table_billions);
  }
}

TEST(ModelSpecFlops, MegatronIterationFlopsFromPerGemmCounts) {
  // Narayanan et al. count per layer the QKV, projection and two MLP GEMMs
  // (24*B*s*h^2 forward), attention scores and context (4*B*s^2*h forward,
  // non-causal), and the logits GEMM (2*B*s*h*V forward). Backward is 2x forward;
  // full recompute adds one more forward of the layers but not of the logits:
  //   F96 = 96*B*s*L*h^2 * (1 + s/(6h) + V/(16*L*h))   (4x layers + 3x logits).
  for (const char* name : {"megatron-gpt-1.7b", "megatron-gpt-39.1b", "megatron-gpt-1t"}) {
    SCOPED_TRACE(name);
    ModelSpec m = load(name);
    const double B = 512, s = 2048, L = m.num_layers, h = static_cast<double>(m.hidden), V = m.vocab;
    double layers_fwd = 0;
    for (int l = 0; l < m.num_layers; ++l) layers_fwd += m.layer_matmul_flops_fwd(l) + m.attention_flops_per_token_fwd(2048, false);
    const double logits_fwd = m.logits_flops_per_token_fwd();
    const double tokens = B * s;
    const double f96 = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    EXPECT_NEAR(tokens * (4 * layers_fwd + 3 * logits_fwd) / f96, 1.0, 1e-12);
    // Without recompute: 3x everything. The formulas.md variant "72 instead of 96"
    // scales the logits term too (4.5*B*s*h*V instead of 6*B*s*h*V), so the two
    // differ by exactly 1.5*B*s*h*V: 1.6% for 1.7B, 0.26% for 39.1B, <0.1% for 1T.
    const double f72 = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    const double ours = tokens * 3 * (layers_fwd + logits_fwd);
    EXPECT_NEAR((ours - f72) / (1.5 * B * s * h * V), 1.0, 1e-9);
    EXPECT_NEAR(tokens * 3 * layers_fwd / (72 * B * s * L * h * h * (1 + s / (6 * h))), 1.0, 1e-12);
    if (m.hidden >= 8192) {
      EXPECT_LT(std::abs(ours / f72 - 1), 0.01);
    }
  }
}

// --- FLOPs conventions ----------------------------------------------------------------

TEST(ModelSpecFlops, PalmFormulaByHandForGpt2Small) {
  ModelSpec m = load("gpt2-124m");
  // N = 124,439,808 - wpe (1024*768) = 123,653,376: nanoGPT's get_num_params()
  // (the tied wte counts once, as the LM head).
  EXPECT_EQ(m.palm_params(), 123653376);
  // 6N = 741,920,256; 12*L*H*Q*T = 12*12*12*64*1024 = 113,246,208.
  EXPECT_DOUBLE_EQ(m.model_flops_per_token_palm(1024), 855166464.0);
  // Per-layer pieces: 2 * 12h^2 matmul weights; attention 2*2*T*H*Q, halved causal.
  EXPECT_DOUBLE_EQ(m.layer_matmul_flops_fwd(0), 2.0 * 12 * 768 * 768);
  EXPECT_DOUBLE_EQ(m.attention_flops_per_token_fwd(1024, false), 4.0 * 1024 * 768);
  EXPECT_DOUBLE_EQ(m.attention_flops_per_token_fwd(1024, true), 2.0 * 1024 * 768);
  EXPECT_DOUBLE_EQ(m.logits_flops_per_token_fwd(), 2.0 * 768 * 50257);
}

TEST(ModelSpecFlops, UntiedHeadAndMoeCounting) {
  ModelSpec l = load("llama-3-8b");
  EXPECT_EQ(l.palm_params(), l.total_params() - l.embedding_params());  // lm_head kept
  // GQA: q and o are h x h, k and v are h x (8*128).
  EXPECT_DOUBLE_EQ(l.layer_matmul_flops_fwd(0), 2.0 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336));
  ModelSpec x = load("mixtral-8x7b");
  // Router (8 x h) + top-2 experts.
  const double attn = 2 * 4096.0 * 4096 + 2 * 4096.0 * 1024;
  EXPECT_DOUBLE_EQ(x.layer_matmul_flops_fwd(0), 2.0 * (attn + 8 * 4096.0 + 2 * 3 * 4096.0 * 14336));
  // Training FLOPs of the matmuls ~ 6 * active params (minus embeddings and norms).
  double sum = 0;
  for (int i = 0; i < x.num_layers; ++i) sum += x.layer_matmul_flops_fwd(i);
  sum += x.logits_flops_per_token_fwd();
  EXPECT_NEAR(sum / (2.0 * (x.active_params() - x.embedding_params())), 1.0, 1e-4);
  ModelSpec d = load("deepseek-v3");
  // MLA: QK over qk_nope + qk_rope = 192, AV over v_head_dim = 128.
  EXPECT_DOUBLE_EQ(d.attention_flops_per_token_fwd(4096, false), 2.0 * 4096 * 128 * (192 + 128));
}

// --- parsing: errors, defaults, nesting -------------------------------------------------

const char* kLlamaBody = R"("hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
  "num_attention_heads": 8, "vocab_size": 1000, "max_position_embeddings": 128)";

TEST(ModelSpecParse, MalformedJsonReportsLineAndColumn) {
  Result<ModelSpec> m = parse_model_spec("{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096,,\n}", "bad");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kParseError);
  EXPECT_NE(m.status().message().find("line 3, column"), std::string::npos) << m.status().message();
}

TEST(ModelSpecParse, UnknownModelTypeListsSupported) {
  Result<ModelSpec> m = parse_model_spec(R"({"model_type": "bert", "hidden_size": 768})", "x");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  for (const char* s : {"bert", "gpt2", "llama", "mixtral", "qwen3_moe", "deepseek_v3"})
    EXPECT_NE(m.status().message().find(s), std::string::npos) << s << " in " << m.status().message();
}

TEST(ModelSpecParse, KvHeadsMustDivideHeads) {
  Result<ModelSpec> m =
      parse_model_spec(std::string(R"({"model_type": "llama", "num_key_value_heads": 3, )") + kLlamaBody + "}", "x");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("num_key_value_heads=3"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("{1,2,4,8}"), std::string::npos) << m.status().message();
}

TEST(ModelSpecParse, HeadsMustDivideHiddenUnlessHeadDimGiven) {
  Result<ModelSpec> bad = parse_model_spec(R"({"model_type": "mistral", "hidden_size": 100, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 10, "max_position_embeddings": 8})", "x");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("num_attention_heads=8"), std::string::npos);
  EXPECT_NE(bad.status().message().find("head_dim"), std::string::npos);
  ModelSpec ok = parse_ok(R"({"model_type": "mistral", "hidden_size": 100, "head_dim": 16, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 10, "max_position_embeddings": 8})");
  EXPECT_EQ(ok.head_dim, 16);
}

// The "use n_head in {...}" hint lists divisors of n_embd: 100 = 2^2 * 5^2
// has {1,2,4,5,10,20,25,50,100}; 720720 has 240 divisors, shown as the 12
// smallest and 12 largest; a fuzzed n_embd of 1.6e15 (once a 14 s stall
// in a linear scan) is answered at once without a list.
TEST(ModelSpecParse, DivisorHintIsCompleteShortAndFast) {
  auto gpt2 = [](const std::string& embd) {
    return parse_model_spec(R"({"model_type": "gpt2", "n_embd": )" + embd +
                                R"(, "n_head": 128, "n_layer": 2, "n_positions": 8, "vocab_size": 10})",
                            "x");
  };
  Result<ModelSpec> small = gpt2("100");
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("{1,2,4,5,10,20,25,50,100}"), std::string::npos)
      << small.status().message();
  Result<ModelSpec> long_list = parse_model_spec(
      R"({"model_type": "gpt2", "n_embd": 720720, "n_head": 7919, "n_layer": 2, "n_positions": 8, "vocab_size": 10})",
      "x");
  ASSERT_FALSE(long_list.is_ok());
  EXPECT_NE(long_list.status().message().find("{1,2,3,4,5,6,7,8,9,10,11,12,...,60060,65520,72072,80080,90090,"
                                              "102960,120120,144144,180180,240240,360360,720720}"),
            std::string::npos)
      << long_list.status().message();
  Result<ModelSpec> huge = gpt2("1638777777777774");
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("the divisors of 1638777777777774"), std::string::npos)
      << huge.status().message();
}

TEST(ModelSpecParse, MissingOrNonPositiveSizesNameTheKey) {
  Result<ModelSpec> missing = parse_model_spec(R"({"model_type": "llama", "num_hidden_layers": 2})", "x");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("hidden_size"), std::string::npos);
  Result<ModelSpec> zero =
      parse_model_spec(std::string(R"({"model_type": "llama", "vocab_size": 0, )") +
                           R"("hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                              "num_attention_heads": 8, "max_position_embeddings": 128})", "x");
  ASSERT_FALSE(zero.is_ok());
  EXPECT_NE(zero.status().message().find("vocab_size"), std::string::npos) << zero.status().message();
  Result<ModelSpec> topk = parse_model_spec(R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "max_position_embeddings": 8,
    "num_local_experts": 4, "num_experts_per_tok": 5})", "x");
  ASSERT_FALSE(topk.is_ok());
  EXPECT_NE(topk.status().message().find("num_experts_per_tok=5"), std::string::npos);
}

TEST(ModelSpecParse, MissingKvHeadsMeansMhaAndTextConfigIsRead) {
  ModelSpec m = parse_ok(std::string(R"({"model_type": "llama", )") + kLlamaBody + "}");
  EXPECT_EQ(m.num_kv_heads, m.num_heads);
  EXPECT_EQ(m.head_dim, 32);
  EXPECT_FALSE(m.tied_embeddings);
  ModelSpec n = parse_ok(std::string(R"({"model_type": "mistral3", "_name_or_path": "wrapped",
    "vision_config": {"hidden_size": 1024}, "text_config": {"model_type": "mistral", "num_key_value_heads": 2, )") +
                         kLlamaBody + "}}");
  EXPECT_EQ(n.model_type, "mistral");
  EXPECT_EQ(n.name, "wrapped");
  EXPECT_EQ(n.hidden, 256);
  EXPECT_EQ(n.num_kv_heads, 2);
}

TEST(ModelSpecParse, LoadByNameAndByPath) {
  Result<ModelSpec> missing = load_model_spec("no-such-model");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  std::string path = std::string(LOOM_SOURCE_DIR) + "/models/llama-2-7b.json";
  Result<ModelSpec> m = load_model_spec(path);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->name, "llama-2-7b");
}

// --- scaling and writing ------------------------------------------------------------------

TEST(ModelScaleTest, ParsesAndRejects) {
  Result<ModelScale> s = parse_model_scale("layers=4,hidden=256,heads=4,kv_heads=2,ffn=1024,vocab=512,experts=4,seq=256");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->num_layers, 4);
  EXPECT_EQ(s->hidden, 256);
  EXPECT_EQ(s->num_heads, 4);
  EXPECT_EQ(s->num_kv_heads, 2);
  EXPECT_EQ(s->ffn_hidden, 1024);
  EXPECT_EQ(s->vocab, 512);
  EXPECT_EQ(s->num_experts, 4);
  EXPECT_EQ(s->max_position, 256);
  for (const auto& [text, key] : {std::pair{"layers=4,depth=3", "depth"}, {"layers=x", "layers"},
                                  {"hidden=0", "hidden"}, {"heads", "heads"}, {"vocab=-5", "vocab"}}) {
    Result<ModelScale> bad = parse_model_scale(text);
    ASSERT_FALSE(bad.is_ok()) << text;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(key), std::string::npos) << bad.status().message();
  }
}

TEST(ModelScaleTest, KeepsFamily) {
  ModelSpec base = load("llama-3-8b");
  Result<ModelSpec> s = scale_model(base, *parse_model_scale("layers=4,hidden=256,heads=8,ffn=512,vocab=512,seq=256"));
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->model_type, "llama");
  EXPECT_EQ(s->norm, NormKind::kRmsNorm);
  EXPECT_EQ(s->mlp, MlpKind::kSwiGlu);
  EXPECT_EQ(s->position, PositionKind::kRope);
  EXPECT_EQ(s->head_dim, 32);
  EXPECT_EQ(s->num_kv_heads, 2);  // GQA ratio 4 kept
  EXPECT_EQ(s->num_layers, 4);
  EXPECT_EQ(s->max_position, 256);

  ModelSpec g = *scale_model(load("gpt2-124m"), *parse_model_scale("layers=2,hidden=128,heads=4"));
  EXPECT_EQ(g.norm, NormKind::kLayerNorm);
  EXPECT_EQ(g.position, PositionKind::kLearned);
  EXPECT_TRUE(g.tied_embeddings && g.qkv_bias && g.linear_bias);
  EXPECT_EQ(g.num_kv_heads, 4);

  ModelSpec d = *scale_model(load("deepseek-v3"), *parse_model_scale("layers=4,hidden=256,heads=4,ffn=512,experts=8"));
  EXPECT_TRUE(d.mla.enabled);
  EXPECT_EQ(d.moe.num_experts, 8);
  EXPECT_EQ(d.moe.experts_per_token, 8);
  EXPECT_EQ(d.num_moe_layers(), 1);  // 3 leading dense layers kept, one MoE layer left
  EXPECT_EQ(d.moe.num_shared_experts, 1);

  EXPECT_FALSE(scale_model(base, *parse_model_scale("hidden=250,heads=8")).is_ok());
  Result<ModelSpec> dense_experts = scale_model(base, *parse_model_scale("experts=4"));
  ASSERT_FALSE(dense_experts.is_ok());
  EXPECT_NE(dense_experts.status().message().find("experts"), std::string::npos);
  EXPECT_FALSE(scale_model(base, *parse_model_scale("kv_heads=3")).is_ok());
}

// Scaling follows Hugging Face semantics (independent truths: the configs'
// own ratios). GPT-2's config leaves n_inner unset, i.e. 4 x n_embd, and has
// 64 per head; Llama-3-8B's intermediate_size is 14336 = 3.5 x 4096 with 128
// per head; Mixtral's experts are 14336 wide at hidden 4096.
TEST(ModelScaleTest, HiddenKeepsTheConfigsRatios) {
  ModelSpec g = *scale_model(load("gpt2-124m"), *parse_model_scale("layers=4,hidden=256"));
  EXPECT_EQ(g.hidden, 256);
  EXPECT_EQ(g.ffn_hidden, 1024);  // 4 x 256, not the unscaled 3072
  EXPECT_EQ(g.num_heads, 4);      // 64 per head kept
  EXPECT_EQ(g.head_dim, 64);
  ModelSpec g2 = *scale_model(load("gpt2-124m"), *parse_model_scale("hidden=256,heads=8"));
  EXPECT_EQ(g2.head_dim, 32);     // heads given: they win
  EXPECT_EQ(g2.ffn_hidden, 1024);
  ModelSpec g3 = *scale_model(load("gpt2-124m"), *parse_model_scale("hidden=256,ffn=640"));
  EXPECT_EQ(g3.ffn_hidden, 640);  // ffn given: it wins

  ModelSpec l = *scale_model(load("llama-3-8b"), *parse_model_scale("layers=2,hidden=512"));
  EXPECT_EQ(l.ffn_hidden, 1792);  // 3.5 x 512
  EXPECT_EQ(l.num_heads, 4);      // 128 per head kept
  EXPECT_EQ(l.num_kv_heads, 1);   // GQA ratio 32/8 kept
  ModelSpec l2 = *scale_model(load("llama-2-7b"), *parse_model_scale("hidden=1024"));
  EXPECT_EQ(l2.ffn_hidden, 2752);  // 11008 x 1024/4096
  // hidden=100: neither GPT-2's head size (64) nor its 12 heads divide it.
  Result<ModelSpec> odd = scale_model(load("gpt2-124m"), *parse_model_scale("hidden=100"));
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.status().message().find("heads="), std::string::npos);

  ModelSpec x = *scale_model(load("mixtral-8x7b"), *parse_model_scale("layers=2,hidden=1024"));
  EXPECT_EQ(x.ffn_hidden, 3584);
  EXPECT_EQ(x.moe.expert_ffn_hidden, 3584);
}

// transformers 5 writes RoPE as rope_parameters (rope_theta and the scaling
// keys together; LlamaConfig has no rope_theta or rope_scaling field). Read
// without it, Llama 3.1 would train with theta 10000 and no llama3 scaling.
TEST(ModelSpec, TransformersFiveRopeParametersAreRead) {
  const std::string base = R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
    "max_position_embeddings": 131072)";
  const std::string llama3 = R"("rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192)";
  Result<ModelSpec> v5 = parse_model_spec(base + R"(, "rope_parameters": {"rope_theta": 500000.0, )" + llama3 + "}}", "v5");
  ASSERT_TRUE(v5.is_ok()) << v5.status().message();
  EXPECT_EQ(v5->rope_theta, 500000.0);
  EXPECT_EQ(v5->rope_scaling.type, "llama3");
  EXPECT_EQ(v5->rope_scaling.factor, 8.0);
  EXPECT_EQ(v5->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(v5->rope_scaling.original_max_position, 8192);
  // The same model in transformers 4's keys reads the same.
  Result<ModelSpec> v4 = parse_model_spec(base + R"(, "rope_theta": 500000.0, "rope_scaling": {)" + llama3 + "}}", "v4");
  ASSERT_TRUE(v4.is_ok()) << v4.status().message();
  EXPECT_EQ(v4->rope_theta, v5->rope_theta);
  EXPECT_EQ(v4->rope_scaling.type, v5->rope_scaling.type);
  // "default" is unscaled RoPE at its theta.
  Result<ModelSpec> plain = parse_model_spec(base + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})", "d");
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_EQ(plain->rope_theta, 1e6);
  EXPECT_TRUE(plain->rope_scaling.type.empty());
  // Both forms, disagreeing: refused, naming both.
  Result<ModelSpec> clash = parse_model_spec(
      base + R"(, "rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})", "c");
  ASSERT_FALSE(clash.is_ok());
  EXPECT_NE(clash.status().message().find("rope_parameters.rope_theta"), std::string::npos) << clash.status().message();
  Result<ModelSpec> bad = parse_model_spec(base + R"(, "rope_parameters": {"rope_theta": 500000.0}})", "b");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("rope_type"), std::string::npos) << bad.status().message();
}

// A sliding window's share of the causal pairs, against a count of the pairs
// each query keeps (itself and the W - 1 keys before it).
TEST(ModelSpec, SlidingWindowShareCountsTheKeptPairs) {
  ModelSpec m;
  for (int64_t w : {1, 3, 16, 100}) {
    m.sliding_window = w;
    for (int64_t s : {1, 2, 3, 17, 100, 333}) {
      double kept = 0, all = 0;
      for (int64_t q = 0; q < s; ++q)
        for (int64_t k = 0; k <= q; ++k) {
          all += 1;
          kept += q - k < w ? 1 : 0;
        }
      EXPECT_NEAR(m.attention_window_share(s), kept / all, 1e-12) << "w " << w << " s " << s;
    }
  }
  m.sliding_window = 0;
  EXPECT_EQ(m.attention_window_share(1 << 20), 1.0);
}

// Keys transformers fills with a family's own numbers (Qwen3's head_dim 128
// and 32 K/V heads, Qwen3-MoE's 4; DeepSeek's routed experts and the rest)
// are refused when absent, naming that default, rather than derived or read
// as none; Qwen's sliding window slides the layers the config names.
TEST(ModelSpec, AbsentKeysWithAFamilysOwnDefaultAreRefused) {
  const std::string base = R"({"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
    "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 4096)";
  Result<ModelSpec> q3 = parse_model_spec(base + R"(, "model_type": "qwen3", "num_key_value_heads": 8})", "q3");
  ASSERT_FALSE(q3.is_ok());
  EXPECT_NE(q3.status().message().find("head_dim is missing; transformers would take 128"), std::string::npos)
      << q3.status().message();
  Result<ModelSpec> q3m = parse_model_spec(base + R"(, "model_type": "qwen3_moe", "num_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 256})", "q3m");
  ASSERT_FALSE(q3m.is_ok());
  EXPECT_NE(q3m.status().message().find("num_key_value_heads is missing; transformers would take 4"),
            std::string::npos) << q3m.status().message();
  Result<ModelSpec> q3n = parse_model_spec(base + R"(, "model_type": "qwen3", "num_key_value_heads": null,
    "head_dim": 64})", "q3n");
  ASSERT_TRUE(q3n.is_ok()) << q3n.status().message();
  EXPECT_EQ(q3n->num_kv_heads, 16);  // null: the head count
  EXPECT_EQ(q3n->head_dim, 64);
  Result<ModelSpec> l = parse_model_spec(base + R"(, "model_type": "llama"})", "l");
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->head_dim, 64);  // Llama: hidden / heads
  EXPECT_EQ(l->num_kv_heads, 16);
  // DeepSeek without its routing keys: refused, naming the key.
  const std::string ds = R"({"model_type": "deepseek_v3", "hidden_size": 1024, "num_hidden_layers": 4,
    "num_attention_heads": 16, "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 4096,
    "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32)";
  Result<ModelSpec> d = parse_model_spec(ds + "}", "d");
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("n_routed_experts is missing"), std::string::npos) << d.status().message();
  Result<ModelSpec> d2 = parse_model_spec(ds + R"(, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 256, "q_lora_rank": null})", "d2");
  ASSERT_FALSE(d2.is_ok());
  EXPECT_NE(d2.status().message().find("n_shared_experts is missing"), std::string::npos) << d2.status().message();
  // Qwen3's window slides from max_window_layers up (default 28): a 4-layer
  // model slides none; all from 0; some: refused.
  const std::string q = base + R"(, "model_type": "qwen3", "num_key_value_heads": 8, "head_dim": 64,
    "use_sliding_window": true, "sliding_window": 512)";
  EXPECT_EQ(parse_model_spec(q + "}", "q")->sliding_window, 0);
  EXPECT_EQ(parse_model_spec(q + R"(, "max_window_layers": 0})", "q")->sliding_window, 512);
  Result<ModelSpec> some = parse_model_spec(q + R"(, "max_window_layers": 2})", "q");
  ASSERT_FALSE(some.is_ok());
  EXPECT_NE(some.status().message().find("2 of 4 layers slide"), std::string::npos) << some.status().message();
  // The canonical form says which layers slide, so it reads back the same.
  // Qwen2-MoE slides the even-numbered layers below max_window_layers: some.
  Result<ModelSpec> moe = parse_model_spec(base + R"(, "model_type": "qwen2_moe", "num_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 256, "shared_expert_intermediate_size": 512,
    "use_sliding_window": true, "sliding_window": 512})", "q2m");
  ASSERT_FALSE(moe.is_ok());
  EXPECT_NE(moe.status().message().find("2 of 4 layers slide"), std::string::npos) << moe.status().message();
  ModelSpec all = *parse_model_spec(q + R"(, "max_window_layers": 0})", "q");
  Result<ModelSpec> back = parse_model_spec(model_spec_to_json(all), "back");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->sliding_window, 512);
}

void expect_same(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.max_position, b.max_position);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.linear_bias, b.linear_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position, b.rope_scaling.original_max_position);
  EXPECT_EQ(a.num_mtp_layers, b.num_mtp_layers);
  EXPECT_EQ(a.moe.num_experts, b.moe.num_experts);
  EXPECT_EQ(a.moe.experts_per_token, b.moe.experts_per_token);
  EXPECT_EQ(a.moe.expert_ffn_hidden, b.moe.expert_ffn_hidden);
  EXPECT_EQ(a.moe.first_dense_layers, b.moe.first_dense_layers);
  EXPECT_EQ(a.moe.dense_layer_ids, b.moe.dense_layer_ids);
  EXPECT_EQ(a.moe.num_groups, b.moe.num_groups);
  EXPECT_EQ(a.moe.topk_groups, b.moe.topk_groups);
  for (int l = 0; l < a.num_layers; ++l) EXPECT_EQ(a.is_moe_layer(l), b.is_moe_layer(l)) << "layer " << l;
  EXPECT_EQ(a.mla.kv_lora_rank, b.mla.kv_lora_rank);
  EXPECT_EQ(a.mla.q_lora_rank, b.mla.q_lora_rank);
  EXPECT_EQ(a.total_params(), b.total_params());
  EXPECT_EQ(a.active_params(), b.active_params());
}

TEST(ModelSpecJson, EveryShippedModelRoundTrips) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(LOOM_SOURCE_DIR) + "/models")) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    ModelSpec a = load(entry.path().string());
    Result<ModelSpec> b = parse_model_spec(model_spec_to_json(a), "other-name");
    ASSERT_TRUE(b.is_ok()) << b.status().to_string() << "\n" << model_spec_to_json(a);
    expect_same(a, *b);
    ++count;
  }
  EXPECT_GE(count, 22);
}

TEST(ModelSpecJson, ScaledAndFixtureSpecsRoundTrip) {
  ModelSpec d = *scale_model(load("deepseek-v3"), *parse_model_scale("layers=4,hidden=256,heads=4,experts=8"));
  expect_same(d, *parse_model_spec(model_spec_to_json(d), "x"));
  ModelSpec q = *scale_model(load("qwen3-30b-a3b"), *parse_model_scale("layers=2,hidden=128,heads=4,ffn=256"));
  EXPECT_EQ(q.num_kv_heads, 1);  // ratio 8 cannot be kept with 4 heads
  expect_same(q, *parse_model_spec(model_spec_to_json(q), "x"));
  ModelSpec lite = parse_ok(R"({"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
    "num_hidden_layers": 27, "num_attention_heads": 16, "vocab_size": 102400, "max_position_embeddings": 163840,
    "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
    "first_k_dense_replace": 1})");
  EXPECT_EQ(lite.mla.q_lora_rank, 0);
  expect_same(lite, *parse_model_spec(model_spec_to_json(lite), "x"));
  // DeepSeek-V2-Lite: 15.7B total (model card).
  EXPECT_EQ(printed(lite.total_params(), 1e9, 1, false), 15.7);
}


// --- the fields the math needs (issue #14, finding 3) --------------------------

TEST(ModelSpecMath, ConfigFieldsAreKept) {
  ModelSpec l3 = load("llama-3-8b");
  EXPECT_EQ(l3.rope_theta, 500000.0);
  EXPECT_EQ(l3.norm_eps, 1e-5);
  EXPECT_FALSE(l3.rope_scaling.enabled());
  ModelSpec l31 = load("llama-3.1-405b");
  EXPECT_EQ(l31.rope_scaling.type, "llama3");
  EXPECT_EQ(l31.rope_scaling.factor, 8.0);
  EXPECT_EQ(l31.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(l31.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(l31.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(load("qwen3-30b-a3b").norm_eps, 1e-6);
  EXPECT_EQ(load("qwen3-30b-a3b").rope_theta, 1e6);
  EXPECT_EQ(load("gpt2-124m").norm_eps, 1e-5);
  EXPECT_EQ(load("deepseek-v3").rope_scaling.type, "yarn");  // kept by name (the executor refuses it)
  // transformers' defaults when a key is absent: LlamaConfig rms_norm_eps 1e-6, rope_theta 10000;
  // MistralConfig sliding_window 4096; a Qwen window only with use_sliding_window.
  const char* base = R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64, "model_type": )";
  ModelSpec llama = parse_ok(std::string(base) + R"("llama"})");
  EXPECT_EQ(llama.norm_eps, 1e-6);
  EXPECT_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(parse_ok(std::string(base) + R"("mistral"})").sliding_window, 4096);
  EXPECT_EQ(parse_ok(std::string(base) + R"("qwen2", "sliding_window": 32})").sliding_window, 0);
  // (Qwen2 slides layers from max_window_layers up, default 28: none of two.)
  EXPECT_EQ(parse_ok(std::string(base) + R"("qwen2", "sliding_window": 32, "use_sliding_window": true})").sliding_window,
            0);
  EXPECT_EQ(parse_ok(std::string(base) +
                     R"("qwen2", "sliding_window": 32, "use_sliding_window": true, "max_window_layers": 0})")
                .sliding_window,
            32);
  // Qwen3 implies q/k norm; Qwen2 implies q/k/v biases (no key needed).
  EXPECT_TRUE(parse_ok(std::string(base) + R"("qwen3", "num_key_value_heads": 4, "head_dim": 16})").qk_norm);
  EXPECT_TRUE(parse_ok(std::string(base) + R"("qwen2"})").qkv_bias);
  // rope_type "default" is plain RoPE.
  EXPECT_FALSE(parse_ok(std::string(base) + R"("llama", "rope_scaling": {"rope_type": "default"}})").rope_scaling.enabled());
  // Every one of them survives the canonical JSON a plan embeds.
  for (const char* t : {"llama-3.1-405b", "qwen3-30b-a3b", "gpt2-124m", "mixtral-8x7b", "deepseek-v3"}) {
    ModelSpec a = load(t);
    Result<ModelSpec> b = parse_model_spec(model_spec_to_json(a), "x");
    ASSERT_TRUE(b.is_ok()) << t << ": " << b.status().to_string();
    expect_same(a, *b);
  }
}

TEST(ModelSpecMath, Llama31ScaledInverseFrequencies) {
  // Llama-3.1: theta 500000, head dim 128, factor 8, low 1, high 4, original context 8192.
  ModelSpec m = load("llama-3.1-405b");
  std::vector<double> f = rope_inverse_frequencies(m, 128);
  ASSERT_EQ(f.size(), 64u);
  // By hand from transformers' _compute_llama3_parameters: the wavelength of pair i is
  // 2*pi / theta^(-i/64); below 8192/4 = 2048 it is kept, above 8192/1 divided by 8, and
  // between, with s = (8192 / wavelength - 1) / (4 - 1), (1 - s) * f / 8 + s * f.
  // i = 0: f = 1, wavelength 6.28 -> 1.
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  // i = 20: f = 500000^(-20/64) = 0.01656044008099445, wavelength 379.4 < 2048 -> kept.
  EXPECT_NEAR(f[20], 0.016560440080994446, 1e-15);
  // i = 32: f = 500000^(-1/2) = sqrt(2)/1000, wavelength 2*pi*1000/sqrt(2) = 4442.88 (medium):
  // s = (8192/4442.8829 - 1)/3 = 0.2812808, f' = f * ((1 - s)/8 + s) = 5.248461609929547e-4.
  EXPECT_NEAR(f[32], 5.248461609929547e-4, 1e-15);
  // i = 29 and 34: the band's ends, 2401.7 and 6695.1.
  EXPECT_NEAR(f[29], 0.002166570763503359, 1e-15);
  EXPECT_NEAR(f[34], 0.0001785078127679964, 1e-16);
  // i = 35: wavelength 8218.7 > 8192 -> f / 8; i = 63: f / 8.
  EXPECT_NEAR(f[35], 0.0007644969883171747 / 8, 1e-17);
  EXPECT_NEAR(f[63], 2.455140791131609e-06 / 8, 1e-20);
  // The independent formula at every index.
  for (int i = 0; i < 64; ++i) {
    const double inv = std::pow(500000.0, -2.0 * i / 128), wl = 2 * M_PI / inv;
    double want = inv;
    if (wl > 8192) want = inv / 8;
    else if (wl >= 2048) {
      const double s = (8192 / wl - 1) / 3;
      want = (1 - s) * inv / 8 + s * inv;
    }
    EXPECT_NEAR(f[size_t(i)], want, 1e-12 * want) << i;
  }
  // Without scaling: theta^(-2i/D).
  ModelSpec l3 = load("llama-3-8b");
  EXPECT_NEAR(rope_inverse_frequencies(l3, 128)[32], std::sqrt(2.0) / 1000, 1e-18);
}

// --- kernel preconditions and ranges (issue #14, findings 7 and 8) -------------

TEST(ModelSpecValidate, OddRopeHeadDimIsRefused) {
  // hidden 60 over 4 heads: head_dim 15, which RoPE cannot rotate (pairs i, i + d/2).
  Result<ModelScale> sc = parse_model_scale("layers=2,hidden=60,heads=4,kv_heads=2,ffn=128,vocab=256");
  ASSERT_TRUE(sc.is_ok());
  Result<ModelSpec> m = scale_model(load("llama-3-8b"), *sc);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("head_dim=15"), std::string::npos) << m.status().to_string();
  EXPECT_NE(m.status().message().find("even"), std::string::npos) << m.status().to_string();
  Result<ModelSpec> cfg = parse_model_spec(R"({"model_type": "llama", "hidden_size": 60, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64})", "odd");
  EXPECT_FALSE(cfg.is_ok());
  // GPT-2 (learned positions) has no such constraint.
  EXPECT_TRUE(scale_model(load("gpt2-124m"), *parse_model_scale("hidden=60,heads=4")).is_ok());
}

TEST(ModelSpecValidate, AbsurdSizesAreOutOfRange) {
  for (const char* text : {"hidden=4000000000", "vocab=2000000000", "layers=10000000", "ffn=999999999999",
                           "heads=100000000", "seq=1000000000", "experts=1000000"}) {
    Result<ModelScale> s = parse_model_scale(text);
    ASSERT_FALSE(s.is_ok()) << text;
    EXPECT_NE(s.status().message().find("out of range"), std::string::npos) << s.status().to_string();
  }
  // A spec built in code (or from a config) meets the same bounds.
  ModelSpec m = load("llama-3-8b");
  m.vocab = 2000000000;
  EXPECT_FALSE(validate_model_spec(m).is_ok());
  // Each size in range but the product absurd: 60000 layers of hidden 1M.
  ModelScale big;
  big.num_layers = 60000;
  big.hidden = 1 << 20;
  big.num_heads = 8192;
  Result<ModelSpec> huge = scale_model(m = load("llama-3-8b"), big);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("parameters is out of range"), std::string::npos)
      << huge.status().to_string();
}
}  // namespace
}  // namespace loom
