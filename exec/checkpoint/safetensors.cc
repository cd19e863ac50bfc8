// safetensors export (see safetensors.h and docs/formats/checkpoint.md).
#include "exec/checkpoint/safetensors.h"


#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

#include "core/json_util.h"
#include "core/output_file.h"
#include "exec/checkpoint/ckpt_io.h"

namespace loom::ckpt {

namespace {

// One tensor of the output file: its HF name, shape and how to produce it.
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<Status(std::vector<float>*)> produce;
};

class Exporter {
 public:
  Exporter(const CheckpointReader& r, int64_t vocab) : r_(r), vocab_(vocab) {}

  // Same orientation; `clip_vocab` keeps only the first V rows.
  Status copy(const std::string& loom, const std::string& hf, bool clip_vocab = false) {
    LOOM_ASSIGN_OR_RETURN(auto shape, r_.global_shape(loom, false));
    if (clip_vocab && vocab_ > 0) {
      if (vocab_ > shape[0])
        return invalid_argument(loom + ": vocab_size " + std::to_string(vocab_) + " exceeds its " +
                                std::to_string(shape[0]) + " rows");
      shape[0] = vocab_;
    }
    out_.push_back({hf, shape, [this, loom, shape](std::vector<float>* v) {
                      v->resize(count(shape));
                      return r_.read(loom, false, std::vector<int64_t>(shape.size(), 0), shape, v->data());
                    }});
    return Status::ok();
  }

  // Conv1D (GPT-2): Linear weights (out_k, in) side by side, transposed:
  // result (in, sum out_k), result[i][base_k + j] = w_k[j][i].
  Status concat_transposed(const std::vector<std::string>& loom, const std::string& hf) {
    std::vector<std::vector<int64_t>> shapes;
    int64_t in = -1, total = 0;
    for (const auto& n : loom) {
      LOOM_ASSIGN_OR_RETURN(auto s, r_.global_shape(n, false));
      if (s.size() != 2 || (in >= 0 && s[1] != in)) return invalid_argument(n + ": not a (out, in) weight");
      in = s[1];
      total += s[0];
      shapes.push_back(s);
    }
    out_.push_back({hf, {in, total}, [this, loom, shapes, in, total](std::vector<float>* v) {
                      v->assign(static_cast<size_t>(in * total), 0.f);
                      std::vector<float> w;
                      int64_t base = 0;
                      for (size_t k = 0; k < loom.size(); ++k) {
                        w.resize(count(shapes[k]));
                        LOOM_RETURN_IF_ERROR(r_.read(loom[k], false, {0, 0}, shapes[k], w.data()));
                        for (int64_t j = 0; j < shapes[k][0]; ++j)
                          for (int64_t i = 0; i < in; ++i) (*v)[i * total + base + j] = w[j * in + i];
                        base += shapes[k][0];
                      }
                      return Status::ok();
                    }});
    return Status::ok();
  }

  // 1-D tensors end to end (the c_attn bias).
  Status concat(const std::vector<std::string>& loom, const std::string& hf) {
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (const auto& n : loom) {
      LOOM_ASSIGN_OR_RETURN(auto s, r_.global_shape(n, false));
      if (s.size() != 1) return invalid_argument(n + ": not a 1-D tensor");
      sizes.push_back(s[0]);
      total += s[0];
    }
    out_.push_back({hf, {total}, [this, loom, sizes, total](std::vector<float>* v) {
                      v->resize(static_cast<size_t>(total));
                      int64_t base = 0;
                      for (size_t k = 0; k < loom.size(); ++k) {
                        LOOM_RETURN_IF_ERROR(r_.read(loom[k], false, {0}, {sizes[k]}, v->data() + base));
                        base += sizes[k];
                      }
                      return Status::ok();
                    }});
    return Status::ok();
  }

  bool has(const std::string& loom) const { return r_.global_shape(loom, false).is_ok(); }
  std::vector<OutTensor>& tensors() { return out_; }

  static size_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t x : s) n *= x;
    return static_cast<size_t>(n);
  }

 private:
  const CheckpointReader& r_;
  int64_t vocab_;
  std::vector<OutTensor> out_;
};

Json model_config(const CheckpointReader& r) {
  Json meta = Json::parse(r.metadata_json(), nullptr, false);
  if (!meta.is_object()) return nullptr;
  for (const char* k : {"model_config", "model", "config"})
    if (meta.contains(k) && meta[k].is_object()) return meta[k];
  return meta;
}

int num_layers(const CheckpointReader& r) {
  int n = 0;
  for (const auto& name : r.tensor_names(false)) {
    if (name.rfind("layers.", 0) != 0) continue;
    n = std::max(n, std::atoi(name.c_str() + 7) + 1);
  }
  return n;
}

Status map_gpt2(Exporter& x, int L) {
  LOOM_RETURN_IF_ERROR(x.copy("embed.wte", "transformer.wte.weight", true));
  LOOM_RETURN_IF_ERROR(x.copy("embed.wpe", "transformer.wpe.weight"));
  for (int l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
    LOOM_RETURN_IF_ERROR(x.copy(p + "ln1.weight", h + "ln_1.weight"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "ln1.bias", h + "ln_1.bias"));
    LOOM_RETURN_IF_ERROR(x.concat_transposed({p + "attn.q.weight", p + "attn.k.weight", p + "attn.v.weight"},
                                             h + "attn.c_attn.weight"));
    LOOM_RETURN_IF_ERROR(x.concat({p + "attn.q.bias", p + "attn.k.bias", p + "attn.v.bias"}, h + "attn.c_attn.bias"));
    LOOM_RETURN_IF_ERROR(x.concat_transposed({p + "attn.o.weight"}, h + "attn.c_proj.weight"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "attn.o.bias", h + "attn.c_proj.bias"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "ln2.weight", h + "ln_2.weight"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "ln2.bias", h + "ln_2.bias"));
    LOOM_RETURN_IF_ERROR(x.concat_transposed({p + "mlp.fc1.weight"}, h + "mlp.c_fc.weight"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "mlp.fc1.bias", h + "mlp.c_fc.bias"));
    LOOM_RETURN_IF_ERROR(x.concat_transposed({p + "mlp.fc2.weight"}, h + "mlp.c_proj.weight"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "mlp.fc2.bias", h + "mlp.c_proj.bias"));
  }
  LOOM_RETURN_IF_ERROR(x.copy("final_norm.weight", "transformer.ln_f.weight"));
  LOOM_RETURN_IF_ERROR(x.copy("final_norm.bias", "transformer.ln_f.bias"));
  if (x.has("lm_head.weight")) LOOM_RETURN_IF_ERROR(x.copy("lm_head.weight", "lm_head.weight", true));
  return Status::ok();
}

// Llama-family blocks, and their Qwen / Mixtral variants by what the
// checkpoint holds: q/k/v/o and MLP biases, Qwen3's q/k norms, MoE layers
// (Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2}; Qwen-MoE's
// mlp.{gate, experts.E.*_proj, shared_expert.*_proj, shared_expert_gate}).
Status map_llama(Exporter& x, int L, const std::string& model_type) {
  // The executor's expert names (exec/model/params.h expert_prefix).
  auto expert_prefix = [](int layer, int e) {
    return "layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + ".";
  };
  auto copy_if = [&](const std::string& loom, const std::string& hf) {
    return x.has(loom) ? x.copy(loom, hf) : Status::ok();
  };
  LOOM_RETURN_IF_ERROR(x.copy("embed.wte", "model.embed_tokens.weight", true));
  for (int l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    LOOM_RETURN_IF_ERROR(x.copy(p + "ln1.weight", h + "input_layernorm.weight"));
    for (const char* m : {"q", "k", "v", "o"}) {
      LOOM_RETURN_IF_ERROR(x.copy(p + "attn." + m + ".weight", h + "self_attn." + m + "_proj.weight"));
      LOOM_RETURN_IF_ERROR(copy_if(p + "attn." + m + ".bias", h + "self_attn." + m + "_proj.bias"));
    }
    LOOM_RETURN_IF_ERROR(copy_if(p + "attn.q_norm.weight", h + "self_attn.q_norm.weight"));
    LOOM_RETURN_IF_ERROR(copy_if(p + "attn.k_norm.weight", h + "self_attn.k_norm.weight"));
    LOOM_RETURN_IF_ERROR(x.copy(p + "ln2.weight", h + "post_attention_layernorm.weight"));
    if (!x.has(p + "mlp.router.weight")) {
      for (const char* m : {"gate", "up", "down"}) {
        LOOM_RETURN_IF_ERROR(x.copy(p + "mlp." + m + ".weight", h + "mlp." + m + "_proj.weight"));
        LOOM_RETURN_IF_ERROR(copy_if(p + "mlp." + m + ".bias", h + "mlp." + m + "_proj.bias"));
      }
      continue;
    }
    const bool mixtral = model_type == "mixtral";
    const std::string moe = h + (mixtral ? "block_sparse_moe." : "mlp.");
    LOOM_RETURN_IF_ERROR(x.copy(p + "mlp.router.weight", moe + "gate.weight"));
    int experts = 0;
    for (int e = 0; x.has(expert_prefix(l, e) + "gate.weight"); ++e, ++experts) {
      const std::string q = expert_prefix(l, e), o = moe + "experts." + std::to_string(e) + ".";
      LOOM_RETURN_IF_ERROR(x.copy(q + "gate.weight", o + (mixtral ? "w1.weight" : "gate_proj.weight")));
      LOOM_RETURN_IF_ERROR(x.copy(q + "up.weight", o + (mixtral ? "w3.weight" : "up_proj.weight")));
      LOOM_RETURN_IF_ERROR(x.copy(q + "down.weight", o + (mixtral ? "w2.weight" : "down_proj.weight")));
    }
    if (experts == 0) return invalid_argument("export: layer " + std::to_string(l) + " has a router and no experts");
    for (const char* m : {"gate", "up", "down"})
      LOOM_RETURN_IF_ERROR(copy_if(p + "mlp.shared." + m + ".weight", moe + "shared_expert." + m + "_proj.weight"));
    LOOM_RETURN_IF_ERROR(copy_if(p + "mlp.shared_gate.weight", moe + "shared_expert_gate.weight"));
  }
  LOOM_RETURN_IF_ERROR(x.copy("final_norm.weight", "model.norm.weight"));
  if (x.has("lm_head.weight")) LOOM_RETURN_IF_ERROR(x.copy("lm_head.weight", "lm_head.weight", true));
  return Status::ok();
}

Status write_all(std::FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n) return write_error("write", path, errno);
  return Status::ok();
}

}  // namespace

std::string checkpoint_model_config(const CheckpointReader& reader) { return model_config(reader).dump(); }

Status export_safetensors(const CheckpointReader& reader, const std::string& out_path, const std::string& family) {
  if (family != "gpt2" && family != "llama")
    return invalid_argument("export: family '" + family + "' is unknown; use gpt2 or llama");
  if (!reader.has_model())
    return invalid_argument(reader.path() + " is a light checkpoint (training state only); export a full one");
  if (is_stdout_path(out_path))
    return invalid_argument("--out -: a safetensors file is binary and is not written to standard output; name a file");
  // Writing into the checkpoint being read would replace its files (metadata.json, a shard).
  LOOM_RETURN_IF_ERROR(refuse_output_inside(out_path, reader.path(), "--out"));
  LOOM_RETURN_IF_ERROR(check_output_path(out_path, "--out", false));
  Json cfg = model_config(reader);
  int64_t vocab = 0;
  if (cfg.is_object() && cfg.contains("vocab_size") && cfg["vocab_size"].is_number_integer())
    vocab = cfg["vocab_size"].get<int64_t>();
  Exporter x(reader, vocab);
  const int L = num_layers(reader);
  const std::string model_type =
      cfg.is_object() && cfg.contains("model_type") && cfg["model_type"].is_string() ? cfg["model_type"].get<std::string>()
                                                                                      : "";
  LOOM_RETURN_IF_ERROR(family == "gpt2" ? map_gpt2(x, L) : map_llama(x, L, model_type));
  auto& ts = x.tensors();
  std::sort(ts.begin(), ts.end(), [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });

  // Header: __metadata__ then the tensors in offset order (all F32: equal alignment, so by name).
  OrderedJson header;
  header["__metadata__"] = {{"format", "pt"}, {"loom_step", std::to_string(reader.step())}};
  uint64_t off = 0;
  for (const auto& t : ts) {
    const uint64_t bytes = Exporter::count(t.shape) * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + N is a multiple of 8
  const uint64_t n = text.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(n >> (8 * i));

  // Through a symlink to its target; never over a FIFO, a device or a directory.
  LOOM_ASSIGN_OR_RETURN(OutputTarget target, begin_output(out_path, "--out"));
  const std::string& tmp = target.tmp;
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return write_error("create", tmp, errno);
  Status s = write_all(f, len_le, 8, out_path);
  if (s.is_ok()) s = write_all(f, text.data(), text.size(), out_path);
  std::vector<float> buf;
  for (size_t i = 0; s.is_ok() && i < ts.size(); ++i) {
    s = ts[i].produce(&buf);
    if (s.is_ok()) s = write_all(f, buf.data(), buf.size() * sizeof(float), out_path);  // x86/ARM: little-endian
  }
  if (std::fflush(f) != 0 && s.is_ok()) s = write_error("write", out_path, errno);
  if (std::fclose(f) != 0 && s.is_ok()) s = write_error("close", out_path, errno);
  if (s.is_ok()) s = fsync_path(tmp);
  if (s.is_ok()) s = commit_output(target);
  if (!s.is_ok()) abort_output(target);
  return s;
}

}  // namespace loom::ckpt
