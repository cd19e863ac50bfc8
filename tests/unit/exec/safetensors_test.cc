// safetensors export: an independent reader written from the format spec
// (docs/reference: 8-byte LE header length, JSON header, data_offsets) reads
// the exported file; names, shapes, the GPT-2 Conv1D transposes and the
// c_attn q|k|v concatenation are checked element by element.
#include "exec/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

namespace loom::ckpt {
namespace {

namespace fs = std::filesystem;

struct StTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// The spec's reader: validates the header and the offsets (no holes, no
// overlaps, the buffer fully covered) and returns every F32 tensor.
std::map<std::string, StTensor> read_safetensors(const std::string& path, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::map<std::string, StTensor> out;
  if (bytes.size() < 8) return *error = "shorter than 8 bytes", out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > bytes.size() - 8) return *error = "header length past the end", out;
  if ((8 + n) % 8 != 0) return *error = "data buffer not 8-byte aligned", out;
  if (bytes[8] != '{') return *error = "header does not start with {", out;
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  const size_t base = 8 + n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : t.items())
        if (!v.is_string()) return *error = "__metadata__ value " + k + " is not a string", out;
      continue;
    }
    if (t["dtype"] != "F32") return *error = name + ": dtype is not F32", out;
    StTensor st;
    st.shape = t["shape"].get<std::vector<int64_t>>();
    const uint64_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    int64_t numel = 1;
    for (int64_t d : st.shape) numel *= d;
    if (e - b != static_cast<uint64_t>(numel) * 4) return *error = name + ": byte size does not match shape", out;
    st.data.resize(static_cast<size_t>(numel));
    std::memcpy(st.data.data(), bytes.data() + base + b, e - b);
    ranges.emplace_back(b, e);
    out[name] = std::move(st);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b, e] : ranges) {
    if (b != at) return *error = "hole or overlap in data_offsets", out;
    at = e;
  }
  if (base + at != bytes.size()) return *error = "data buffer not fully covered", out;
  return out;
}

float value(const std::string& name, int64_t i) {
  return static_cast<float>(std::hash<std::string>{}(name) % 997) + 0.001f * static_cast<float>(i);
}

struct Full {
  std::string name;
  std::vector<int64_t> shape;
};

// Saves full tensors as a 2-rank checkpoint: 2-D tensors split by rows
// (TP-style), 1-D ones replicated on both ranks.
std::string save_model(const std::string& tag, const std::vector<Full>& tensors, const std::string& meta) {
  const std::string dir = (fs::temp_directory_path() / ("loom_st_" + tag + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  CheckpointOptions o;
  o.dir = dir;
  o.async = false;
  o.commit_timeout_s = 20;
  auto c0 = Checkpointer::create(o, 0, 2, meta);
  auto c1 = Checkpointer::create(o, 1, 2, meta);
  EXPECT_TRUE(c0.is_ok() && c1.is_ok());
  SaveRequest req[2];
  for (int r = 0; r < 2; ++r) {
    req[r].step = 7;
    for (const auto& t : tensors) {
      TensorSlice s{t.name, t.shape, std::vector<int64_t>(t.shape.size(), 0), t.shape, {}};
      if (t.shape.size() == 2) {
        s.extent[0] = t.shape[0] / 2;
        s.offset[0] = r * s.extent[0];
      }
      const int64_t cols = t.shape.size() == 2 ? t.shape[1] : t.shape[0];
      const int64_t rows = t.shape.size() == 2 ? s.extent[0] : 1;
      for (int64_t i = 0; i < rows * cols; ++i) s.data.push_back(value(t.name, s.offset[0] * cols + i));
      req[r].model.push_back(std::move(s));
    }
  }
  Status s0, s1;
  std::thread t1([&] { s1 = (*c1)->save(req[1]); });
  s0 = (*c0)->save(req[0]);
  t1.join();
  EXPECT_TRUE(s0.is_ok()) << s0.to_string();
  EXPECT_TRUE(s1.is_ok()) << s1.to_string();
  return dir;
}

constexpr int64_t C = 4, V = 50, Vp = 64, P = 8, F = 16;

TEST(Safetensors, Gpt2ConcatenatesQkvAndTransposesConv1D) {
  std::vector<Full> t = {{"embed.wte", {Vp, C}}, {"embed.wpe", {P, C}}, {"final_norm.weight", {C}},
                         {"final_norm.bias", {C}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* n : {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn.q.bias", "attn.k.bias",
                          "attn.v.bias", "attn.o.bias", "mlp.fc2.bias"})
      t.push_back({p + n, {C}});
    for (const char* n : {"attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight"}) t.push_back({p + n, {C, C}});
    t.push_back({p + "mlp.fc1.weight", {F, C}});
    t.push_back({p + "mlp.fc1.bias", {F}});
    t.push_back({p + "mlp.fc2.weight", {C, F}});
  }
  const std::string dir = save_model("gpt2", t, R"({"model_config":{"model_type":"gpt2","vocab_size":50}})");
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const std::string out = dir + "/model.safetensors";
  Status s = export_safetensors(**r, out, "gpt2");
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::string err;
  auto st = read_safetensors(out, &err);
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_EQ(st.size(), 4u + 12u * 2u);
  EXPECT_EQ(st.count("lm_head.weight"), 0u);  // tied
  const auto& wte = st.at("transformer.wte.weight");
  ASSERT_EQ(wte.shape, (std::vector<int64_t>{V, C}));
  for (int64_t i = 0; i < V * C; ++i) ASSERT_EQ(wte.data[i], value("embed.wte", i));
  EXPECT_EQ(st.at("transformer.ln_f.bias").data[2], value("final_norm.bias", 2));
  const auto& qkv = st.at("transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(qkv.shape, (std::vector<int64_t>{C, 3 * C}));
  const char* parts[3] = {"layers.1.attn.q.weight", "layers.1.attn.k.weight", "layers.1.attn.v.weight"};
  for (int64_t i = 0; i < C; ++i)      // input feature
    for (int64_t j = 0; j < 3 * C; ++j)  // output feature: q | k | v
      ASSERT_EQ(qkv.data[i * 3 * C + j], value(parts[j / C], (j % C) * C + i)) << i << "," << j;
  const auto& qkv_b = st.at("transformer.h.1.attn.c_attn.bias");
  ASSERT_EQ(qkv_b.shape, (std::vector<int64_t>{3 * C}));
  EXPECT_EQ(qkv_b.data[C + 1], value("layers.1.attn.k.bias", 1));
  const auto& fc = st.at("transformer.h.0.mlp.c_fc.weight");
  ASSERT_EQ(fc.shape, (std::vector<int64_t>{C, F}));
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < F; ++j) ASSERT_EQ(fc.data[i * F + j], value("layers.0.mlp.fc1.weight", j * C + i));
  const auto& proj = st.at("transformer.h.0.mlp.c_proj.weight");
  ASSERT_EQ(proj.shape, (std::vector<int64_t>{F, C}));
  for (int64_t i = 0; i < F; ++i)
    for (int64_t j = 0; j < C; ++j) ASSERT_EQ(proj.data[i * C + j], value("layers.0.mlp.fc2.weight", j * F + i));
  const auto& o = st.at("transformer.h.0.attn.c_proj.weight");
  EXPECT_EQ(o.data[1 * C + 2], value("layers.0.attn.o.weight", 2 * C + 1));
  EXPECT_EQ(export_safetensors(**r, out, "bert").code(), StatusCode::kInvalidArgument);
}

TEST(Safetensors, LlamaKeepsOrientationAndClipsPaddedVocab) {
  std::vector<Full> t = {{"embed.wte", {Vp, C}}, {"final_norm.weight", {C}}, {"lm_head.weight", {Vp, C}}};
  for (const char* n : {"ln1.weight", "ln2.weight"}) t.push_back({std::string("layers.0.") + n, {C}});
  for (const char* n : {"attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight"})
    t.push_back({std::string("layers.0.") + n, {C, C}});
  t.push_back({"layers.0.mlp.gate.weight", {F, C}});
  t.push_back({"layers.0.mlp.up.weight", {F, C}});
  t.push_back({"layers.0.mlp.down.weight", {C, F}});
  const std::string dir = save_model("llama", t, R"({"model":{"model_type":"llama","vocab_size":50}})");
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const std::string out = dir + "/llama.safetensors";
  Status s = export_safetensors(**r, out, "llama");
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::string err;
  auto st = read_safetensors(out, &err);
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_EQ(st.size(), 3u + 9u);
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight"}) {
    ASSERT_EQ(st.at(n).shape, (std::vector<int64_t>{V, C})) << n;
  }
  const auto& lm = st.at("lm_head.weight");
  for (int64_t i = 0; i < V * C; ++i) ASSERT_EQ(lm.data[i], value("lm_head.weight", i));
  const auto& q = st.at("model.layers.0.self_attn.q_proj.weight");
  for (int64_t i = 0; i < C * C; ++i) ASSERT_EQ(q.data[i], value("layers.0.attn.q.weight", i));
  const auto& down = st.at("model.layers.0.mlp.down_proj.weight");
  ASSERT_EQ(down.shape, (std::vector<int64_t>{C, F}));
  for (int64_t i = 0; i < C * F; ++i) ASSERT_EQ(down.data[i], value("layers.0.mlp.down.weight", i));
  EXPECT_EQ(st.at("model.norm.weight").data[3], value("final_norm.weight", 3));
  EXPECT_TRUE(st.count("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_TRUE(st.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(st.count("model.layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(st.count("model.layers.0.input_layernorm.weight"));
}

// MoE layers under the names transformers loads: Mixtral's block_sparse_moe
// (w1 = gate, w3 = up, w2 = down) and Qwen-MoE's mlp.experts / shared_expert
// (+ its gate), with Qwen3's q/k norms.
TEST(Safetensors, MoeLayersTakeTheirFamilysNames) {
  for (const std::string type : {"mixtral", "qwen2_moe"}) {
    const bool qwen = type != "mixtral";
    std::vector<Full> t = {{"embed.wte", {Vp, C}}, {"final_norm.weight", {C}}, {"lm_head.weight", {Vp, C}}};
    for (const char* n : {"ln1.weight", "ln2.weight"}) t.push_back({std::string("layers.0.") + n, {C}});
    for (const char* n : {"attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight"})
      t.push_back({std::string("layers.0.") + n, {C, C}});
    t.push_back({"layers.0.mlp.router.weight", {2, C}});
    for (int e = 0; e < 2; ++e) {
      const std::string q = "layers.0.mlp.experts." + std::to_string(e) + ".";
      t.push_back({q + "gate.weight", {F, C}});
      t.push_back({q + "up.weight", {F, C}});
      t.push_back({q + "down.weight", {C, F}});
    }
    if (qwen) {
      t.push_back({"layers.0.mlp.shared.gate.weight", {F, C}});
      t.push_back({"layers.0.mlp.shared.up.weight", {F, C}});
      t.push_back({"layers.0.mlp.shared.down.weight", {C, F}});
      t.push_back({"layers.0.mlp.shared_gate.weight", {2, C}});  // 2 rows: save_model splits 2-D tensors in two
      t.push_back({"layers.0.attn.q_norm.weight", {C}});
    }
    const std::string dir =
        save_model(type, t, R"({"model":{"model_type":")" + type + R"(","vocab_size":50}})");
    auto r = CheckpointReader::open(dir);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const std::string out = dir + "/moe.safetensors";
    Status s = export_safetensors(**r, out, "llama");
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    std::string err;
    auto st = read_safetensors(out, &err);
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_EQ(st.size(), t.size()) << type;
    const std::string moe = qwen ? "model.layers.0.mlp." : "model.layers.0.block_sparse_moe.";
    const auto& w2 = st.at(moe + "experts.1." + (qwen ? "down_proj" : "w2") + ".weight");
    ASSERT_EQ(w2.shape, (std::vector<int64_t>{C, F}));
    for (int64_t i = 0; i < C * F; ++i) ASSERT_EQ(w2.data[i], value("layers.0.mlp.experts.1.down.weight", i));
    EXPECT_EQ(st.at(moe + "gate.weight").data[5], value("layers.0.mlp.router.weight", 5));
    EXPECT_TRUE(st.count(moe + "experts.0." + (qwen ? "gate_proj" : "w1") + ".weight"));
    EXPECT_TRUE(st.count(moe + "experts.0." + (qwen ? "up_proj" : "w3") + ".weight"));
    if (qwen) {
      EXPECT_TRUE(st.count(moe + "shared_expert.down_proj.weight"));
      EXPECT_TRUE(st.count(moe + "shared_expert_gate.weight"));
      EXPECT_TRUE(st.count("model.layers.0.self_attn.q_norm.weight"));
    }
  }
}

}  // namespace
}  // namespace loom::ckpt
