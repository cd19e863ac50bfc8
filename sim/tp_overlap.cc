#include "sim/tp_overlap.h"

#include <filesystem>
#include <initializer_list>
#include <utility>

#include "core/json_util.h"

namespace loom {

namespace {

// The layers in TE's order, with where each lives in the config and which
// methods TE allows there (initialize_ub: pipeline only for reduce-scatters;
// the all-gathers ring-exchanged; the backward's overlaps bulk).
struct Slot {
  const char* key;
  UbGemm TpOverlapConfig::*field;
  bool ring, pipeline, bulk;
};
constexpr Slot kSlots[] = {
    {"qkv_fprop", &TpOverlapConfig::qkv_fprop, true, false, false},
    {"fc1_fprop", &TpOverlapConfig::fc1_fprop, true, false, false},
    {"proj_dgrad", &TpOverlapConfig::proj_dgrad, true, false, false},
    {"fc2_dgrad", &TpOverlapConfig::fc2_dgrad, true, false, false},
    {"proj_fprop", &TpOverlapConfig::proj_fprop, true, true, false},
    {"fc2_fprop", &TpOverlapConfig::fc2_fprop, true, true, false},
    {"qkv_dgrad", &TpOverlapConfig::qkv_dgrad, false, false, true},
    {"qkv_wgrad", &TpOverlapConfig::qkv_wgrad, false, false, true},
    {"fc1_dgrad", &TpOverlapConfig::fc1_dgrad, false, false, true},
    {"fc1_wgrad", &TpOverlapConfig::fc1_wgrad, false, false, true},
};

bool parse_method(const std::string& s, UbMethod* out) {
  if (s == "ring_exchange") *out = UbMethod::kRingExchange;
  else if (s == "pipeline") *out = UbMethod::kPipeline;
  else if (s == "bulk") *out = UbMethod::kBulk;
  else return false;
  return true;
}

TpOverlapConfig defaults(bool te2) {
  TpOverlapConfig c;
  c.name = te2 ? "te2_defaults" : "te1_defaults";
  UbGemm ring;
  ring.method = UbMethod::kRingExchange;
  ring.num_sm = te2 ? 1 : 16;  // TE 1.x passed its add_ub default; the copy engines move the data either way
  ring.set_sm_margin = false;
  UbGemm pipe;
  pipe.method = UbMethod::kPipeline;
  pipe.num_sm = 16;
  pipe.set_sm_margin = te2;
  pipe.num_splits = 4;
  UbGemm bulk = pipe;
  bulk.method = UbMethod::kBulk;
  for (UbGemm TpOverlapConfig::*f : {&TpOverlapConfig::qkv_fprop, &TpOverlapConfig::fc1_fprop, &TpOverlapConfig::proj_dgrad,
                  &TpOverlapConfig::fc2_dgrad})
    c.*f = ring;
  c.proj_fprop = c.fc2_fprop = pipe;
  for (UbGemm TpOverlapConfig::*f : {&TpOverlapConfig::qkv_dgrad, &TpOverlapConfig::qkv_wgrad, &TpOverlapConfig::fc1_dgrad,
                  &TpOverlapConfig::fc1_wgrad})
    c.*f = bulk;
  return c;
}

}  // namespace

const char* ub_method_name(UbMethod m) {
  switch (m) {
    case UbMethod::kRingExchange: return "ring_exchange";
    case UbMethod::kPipeline: return "pipeline";
    case UbMethod::kBulk: return "bulk";
  }
  return "?";
}

TpOverlapConfig te2_default_tp_overlap() { return defaults(true); }
TpOverlapConfig te1_default_tp_overlap() { return defaults(false); }

Result<TpOverlapConfig> parse_tp_overlap_config(const std::string& json_text, const std::string& name,
                                                bool require_source) {
  const std::string w = "tp_comm_overlap_cfg " + name;
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(json_text, w));
  if (!j.is_object()) return invalid_argument(w + ": the file must hold a JSON object");
  LOOM_ASSIGN_OR_RETURN(std::string source, json_string_or(j, "source", "", w));
  if (require_source && source.empty())
    return invalid_argument(w + ".source is missing: say where these settings were read");
  LOOM_ASSIGN_OR_RETURN(std::string base, json_string_or(j, "base", "te2_defaults", w));
  if (base != "te1_defaults" && base != "te2_defaults")
    return invalid_argument(w + ".base must be \"te1_defaults\" or \"te2_defaults\" (the Transformer Engine whose "
                                "defaults fill the layers left out), got \"" + base + "\"");
  TpOverlapConfig c = defaults(base == "te2_defaults");
  c.name = name;
  if (!require_source) {
    LOOM_ASSIGN_OR_RETURN(c.name, json_string_or(j, "name", name, w));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "name" || key == "source" || key == "base" || key == "notes") continue;
    const Slot* slot = nullptr;
    for (const Slot& s : kSlots)
      if (key == s.key) slot = &s;
    if (!slot)
      return invalid_argument(w + ": unknown key \"" + key +
                              "\"; the layers are qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad, proj_fprop, "
                              "fc2_fprop, qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad");
    const std::string lw = w + "." + key;
    if (!it->is_object()) return invalid_argument(lw + " must be an object ({\"method\": ..., \"num_sm\": ...})");
    UbGemm& g = c.*(slot->field);
    LOOM_ASSIGN_OR_RETURN(std::string method, json_string_or(*it, "method", ub_method_name(g.method), lw));
    UbMethod m;
    if (!parse_method(method, &m))
      return invalid_argument(lw + ".method must be ring_exchange, pipeline or bulk, got \"" + method + "\"");
    if ((m == UbMethod::kRingExchange && !slot->ring) || (m == UbMethod::kPipeline && !slot->pipeline) ||
        (m == UbMethod::kBulk && !slot->bulk))
      return invalid_argument(lw + ".method " + method + " is not one Transformer Engine runs for " + key +
                              " (pipeline only for the forward reduce-scatters proj_fprop and fc2_fprop, "
                              "ring_exchange for those and the all-gathers, bulk for the dgrad/wgrad overlaps)");
    if (m != g.method) {
      // A method change takes that method's TE defaults for what is not given.
      const TpOverlapConfig d = defaults(base == "te2_defaults");
      g = m == UbMethod::kRingExchange ? d.qkv_fprop : m == UbMethod::kPipeline ? d.proj_fprop : d.qkv_dgrad;
    }
    LOOM_ASSIGN_OR_RETURN(int64_t num_sm, json_int_or(*it, "num_sm", g.num_sm, lw));
    LOOM_ASSIGN_OR_RETURN(g.set_sm_margin, json_bool_or(*it, "set_sm_margin", g.set_sm_margin, lw));
    LOOM_ASSIGN_OR_RETURN(int64_t splits, json_int_or(*it, "num_splits", g.num_splits, lw));
    LOOM_ASSIGN_OR_RETURN(g.aggregate, json_bool_or(*it, "aggregate", g.aggregate, lw));
    LOOM_ASSIGN_OR_RETURN(g.atomic_gemm, json_bool_or(*it, "atomic_gemm", g.atomic_gemm, lw));
    if (g.atomic_gemm && m == UbMethod::kBulk)
      return invalid_argument(lw + ".atomic_gemm: Transformer Engine runs no atomic GEMM in a bulk overlap");
    if (num_sm < 1 || num_sm > 1024) return invalid_argument(lw + ".num_sm must be 1-1024 SMs, got " + std::to_string(num_sm));
    if (splits < 1 || splits > 1024)
      return invalid_argument(lw + ".num_splits must be 1-1024 chunks, got " + std::to_string(splits));
    g.num_sm = int(num_sm);
    g.num_splits = int(splits);
    // Settings another method's (TE ignores them there): kept at their defaults.
    if (g.method != UbMethod::kPipeline) g.num_splits = UbGemm{}.num_splits;
    if (g.method != UbMethod::kRingExchange) g.aggregate = false;
    for (auto f = it->begin(); f != it->end(); ++f) {
      static const char* known[] = {"method", "num_sm", "set_sm_margin", "num_splits", "aggregate", "cga_size",
                                    "fp8_buf", "atomic_gemm", "use_ce"};
      bool ok = false;
      for (const char* k : known) ok = ok || f.key() == k;
      if (!ok)
        return invalid_argument(lw + ": unknown setting \"" + f.key() +
                                "\" (method, num_sm, set_sm_margin, num_splits, aggregate, atomic_gemm; cga_size, "
                                "fp8_buf and use_ce are accepted and not priced)");
    }
  }
  return c;
}

std::string tp_overlap_config_yaml(const TpOverlapConfig& c) {
  std::string out = "# " + c.name + ": Transformer Engine userbuffers settings (loom plan --export tp-comm-overlap-cfg)\n";
  for (const Slot& s : kSlots) {
    const UbGemm& g = c.*(s.field);
    out += std::string(s.key) + ":\n  method: " + ub_method_name(g.method) + "\n  num_sm: " + std::to_string(g.num_sm) +
           "\n  set_sm_margin: " + (g.set_sm_margin ? "1" : "0") + "\n";
    if (g.method == UbMethod::kPipeline) out += "  num_splits: " + std::to_string(g.num_splits) + "\n";
    if (g.method == UbMethod::kRingExchange) out += std::string("  aggregate: ") + (g.aggregate ? "1" : "0") + "\n";
    if (g.method != UbMethod::kBulk) out += std::string("  atomic_gemm: ") + (g.atomic_gemm ? "1" : "0") + "\n";
  }
  return out;
}

bool is_te_default_tp_overlap(const TpOverlapConfig& c) {
  TpOverlapConfig a = c;
  for (bool te2 : {true, false}) {
    TpOverlapConfig d = defaults(te2);
    a.name = d.name;
    if (a == d) return true;
  }
  return false;
}

Result<TpOverlapConfig> load_tp_overlap_config(const std::string& path_or_name) {
  if (path_or_name == "te2_defaults") return te2_default_tp_overlap();
  if (path_or_name == "te1_defaults") return te1_default_tp_overlap();
  LOOM_ASSIGN_OR_RETURN(std::string path, find_description_file(path_or_name, "frameworks/tp_overlap"));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_tp_overlap_config(text, std::filesystem::path(path).stem().string(), true);
}

std::string tp_overlap_config_json(const TpOverlapConfig& c) {
  OrderedJson j;
  j["name"] = c.name;
  for (const Slot& s : kSlots) {
    const UbGemm& g = c.*(s.field);
    OrderedJson e;
    e["method"] = ub_method_name(g.method);
    e["num_sm"] = g.num_sm;
    e["set_sm_margin"] = g.set_sm_margin;
    if (g.method == UbMethod::kPipeline) e["num_splits"] = g.num_splits;
    if (g.method == UbMethod::kRingExchange) e["aggregate"] = g.aggregate;
    if (g.atomic_gemm) e["atomic_gemm"] = true;
    j[s.key] = e;
  }
  return j.dump();
}

}  // namespace loom
