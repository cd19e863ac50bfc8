// loom ckpt: inspect, verify and export Loom checkpoints
// (docs/formats/checkpoint.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "core/json_util.h"
#include "core/output_file.h"
#include "exec/checkpoint/checkpoint.h"
#include "exec/checkpoint/safetensors.h"

namespace loom::cli {

namespace fs = std::filesystem;

// The checkpoint's model config as Hugging Face's config.json: its keys, the
// architecture class transformers instantiates for the family, fp32 weights.
Result<std::string> hf_config_json(const std::string& saved, const std::string& family) {
  LOOM_ASSIGN_OR_RETURN(Json cfg, parse_json(saved, "the checkpoint's model config"));
  if (!cfg.is_object()) return invalid_argument("the checkpoint's model config is not a JSON object");
  static const std::map<std::string, std::string> kArch = {
      {"gpt2", "GPT2LMHeadModel"},     {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"}, {"mixtral", "MixtralForCausalLM"},
      {"qwen2_moe", "Qwen2MoeForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"}};
  const std::string type = cfg.value("model_type", family);
  if (!cfg.contains("architectures")) {
    auto it = kArch.find(type);
    if (it == kArch.end())
      return invalid_argument("model_type '" + type + "' has no Hugging Face architecture Loom knows; the weights "
                              "export needs one of gpt2, llama, mistral, qwen2, qwen3");
    cfg["architectures"] = Json::array({it->second});
  }
  cfg["model_type"] = type;
  cfg["torch_dtype"] = "float32";
  return cfg.dump(2) + "\n";
}

namespace {

std::string dims(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " x " : "") + std::to_string(v[i]);
  return s;
}

std::string box(const std::vector<int64_t>& offset, const std::vector<int64_t>& extent) {
  std::string s = "[";
  for (size_t i = 0; i < offset.size(); ++i)
    s += (i ? ", " : "") + std::to_string(offset[i]) + ":" + std::to_string(offset[i] + extent[i]);
  return s + "]";
}

int inspect(const std::string& path) {
  auto r = ckpt::CheckpointReader::open(path);
  if (!r.is_ok()) return fail("ckpt inspect", r.status());
  const auto& rd = **r;
  auto meta = parse_json(rd.metadata_json(), "metadata.json");
  std::printf("checkpoint %s\n", rd.path().c_str());
  std::printf("  step %lld, world %d, %s", static_cast<long long>(rd.step()), rd.world_size(),
              rd.has_model() ? "full" : "light (training state only)");
  if (meta.is_ok()) {
    std::printf(", loom %s, created %s", meta->value("loom_version", "?").c_str(), meta->value("created", "?").c_str());
  }
  std::printf("\nfiles:\n");
  uint64_t total = 0;
  for (const auto& [rel, size] : rd.files()) {
    std::printf("  %-40s %12llu bytes\n", rel.c_str(), static_cast<unsigned long long>(size));
    total += size;
  }
  std::printf("  total %.3f MB\n", static_cast<double>(total) / 1e6);
  for (bool opt : {false, true}) {
    const auto names = rd.tensor_names(opt);
    if (names.empty()) continue;
    std::printf("%s tensors:\n", opt ? "optimizer" : "model");
    for (const auto& n : names) {
      auto shape = rd.global_shape(n, opt);
      std::printf("  %-40s %-14s", n.c_str(), shape.is_ok() ? dims(*shape).c_str() : "?");
      for (const auto& s : rd.slices(n, opt)) {
        const auto slash = s.file.find('/');
        std::printf(" %s%s", s.file.substr(slash + 1, s.file.find('.') - slash - 1).c_str(),
                    box(s.offset, s.extent).c_str());
      }
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace

int cmd_ckpt(int argc, char** argv) {
  CLI::App app{"Inspect, verify or export a Loom checkpoint.", "loom ckpt"};
  app.require_subcommand(1);
  std::string path, out, family;
  auto* ins = app.add_subcommand("inspect", "step, files, tensors with global shapes and their slices");
  ins->add_option("path", path, "checkpoint directory (DIR uses DIR/latest) or step directory")->required();
  auto* ver = app.add_subcommand("verify", "recompute every file's size and XXH64; exit 1 if corrupt");
  ver->add_option("path", path, "checkpoint directory or step directory")->required();
  auto* exp = app.add_subcommand("export", "write the model weights as one Hugging Face safetensors file (fp32)");
  exp->add_option("path", path, "checkpoint directory or step directory")->required();
  exp->add_option("--out", out, "output file, e.g. model.safetensors")->required();
  exp->add_option("--family", family, "gpt2|llama (default: the metadata's model_type)");
  if (int rc = parse_args(app, "ckpt", argc, argv); rc >= 0) return rc;

  if (ins->parsed()) return inspect(path);
  if (ver->parsed()) {
    Status s = ckpt::verify_checkpoint(path);
    if (!s.is_ok()) {
      std::fprintf(stderr, "loom ckpt verify: %s\n", s.message().c_str());
      return 1;  // corrupt, missing or unreadable: not a usable checkpoint
    }
    auto dir = ckpt::resolve_checkpoint(path);
    std::printf("ok: %s\n", dir.is_ok() ? dir->c_str() : path.c_str());
    return 0;
  }
  // Not into the checkpoint directory named (any of its steps), nor the step read.
  if (Status s = refuse_output_inside(out, path, "--out"); !s.is_ok()) return fail("ckpt export", s);
  auto r = ckpt::CheckpointReader::open(path);
  if (!r.is_ok()) return fail("ckpt export", r.status());
  auto cfg = parse_json(ckpt::checkpoint_model_config(**r), "model config");
  const std::string saved_type = cfg.is_ok() && cfg->is_object() ? cfg->value("model_type", "") : "";
  if (family.empty()) {
    family = saved_type;
    if (family.empty())
      return fail("ckpt export", invalid_argument("the checkpoint's metadata names no model_type; pass --family "
                                                  "gpt2 or --family llama"));
  } else if ((saved_type == "gpt2" || saved_type == "llama") && saved_type != family) {
    // Another family's names and orientations would be a wrong file, not an error.
    return fail("ckpt export", invalid_argument("--family " + family + ": the checkpoint is of a " + saved_type +
                                                " model (its metadata's model_type); pass --family " + saved_type +
                                                " or leave --family out"));
  }
  // config.json beside the weights, so Hugging Face loads the directory as
  // is: the checkpoint's own config (HF keys), its architecture class and
  // the exported dtype. Checked before the weights are written.
  auto config = hf_config_json(ckpt::checkpoint_model_config(**r), family);
  if (!config.is_ok()) return fail("ckpt export", config.status());
  const std::string config_path = (fs::path(out).parent_path() / "config.json").string();
  if (fs::exists(config_path)) {
    auto old = read_text_file(config_path);
    if (!old.is_ok() || *old != *config)
      return fail("ckpt export", invalid_argument(config_path + " exists and is another model's config; export into "
                                                  "another directory, or remove it"));
  }
  Status s = ckpt::export_safetensors(**r, out, family);
  if (!s.is_ok()) return fail("ckpt export", s);
  if (Status c = write_text_file(config_path, *config); !c.is_ok()) return fail("ckpt export", c);
  std::printf("wrote %s and %s (%s, step %lld)\n", out.c_str(), config_path.c_str(), family.c_str(),
              static_cast<long long>((*r)->step()));
  return 0;
}

}  // namespace loom::cli
