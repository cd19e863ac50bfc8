#include "core/layout.h"
#include <string_view>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <set>
#include <sstream>

namespace loom {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kDualPipeV: return "dualpipev";
  }
  return "?";
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Result<Schedule> parse_schedule(const std::string& text) {
  if (text == "gpipe") return Schedule::kGpipe;
  if (text == "1f1b") return Schedule::k1F1B;
  if (text == "interleaved" || text == "interleaved-1f1b") return Schedule::kInterleaved;
  if (text == "dualpipev" || text == "dualpipe-v") return Schedule::kDualPipeV;
  return invalid_argument("layout: schedule '" + text + "' is unknown; use gpipe, 1f1b, interleaved or dualpipev");
}

const char* cp_comm_name(CpComm c) {
  switch (c) {
    case CpComm::kAllGather: return "all_gather";
    case CpComm::kA2a: return "a2a";
    case CpComm::kP2p: break;
  }
  return "p2p";
}

Result<CpComm> parse_cp_comm(const std::string& text) {
  if (text == "p2p" || text == "ring") return CpComm::kP2p;
  if (text == "all_gather" || text == "allgather") return CpComm::kAllGather;
  if (text == "a2a" || text == "ulysses") return CpComm::kA2a;
  return invalid_argument("layout: cp_comm '" + text +
                          "' is unknown; use p2p (ring attention), all_gather (K/V all-gathered, Llama 3's) or a2a "
                          "(heads exchanged, DeepSpeed-Ulysses)");
}

Result<Recompute> parse_recompute(const std::string& text) {
  if (text == "none" || text == "0") return Recompute::kNone;
  if (text == "selective") return Recompute::kSelective;
  if (text == "full" || text == "1") return Recompute::kFull;
  return invalid_argument("layout: recompute '" + text + "' is unknown; use none, selective or full");
}

const char* dim_name(Dim d) {
  switch (d) {
    case Dim::kDp: return "dp";
    case Dim::kTp: return "tp";
    case Dim::kPp: return "pp";
    case Dim::kEp: return "ep";
    case Dim::kCp: return "cp";
  }
  return "?";
}

int Layout::size(Dim d) const {
  switch (d) {
    case Dim::kDp: return dp;
    case Dim::kTp: return tp;
    case Dim::kPp: return pp;
    case Dim::kEp: return ep;
    case Dim::kCp: return cp;
  }
  return 1;
}

namespace {
constexpr const char* kModuleNames[] = {"core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp"};
}  // namespace

std::string recompute_modules_text(unsigned modules) {
  std::string out;
  for (unsigned i = 0; i < std::size(kModuleNames); ++i)
    if (modules & (1u << i)) out += (out.empty() ? "" : "+") + std::string(kModuleNames[i]);
  return out;
}

Result<unsigned> parse_recompute_modules(const std::string& text) {
  unsigned modules = 0;
  std::stringstream ss(text);
  std::string name;
  auto known = [] {
    std::string k;
    for (const char* n : kModuleNames) k += (k.empty() ? "" : ", ") + std::string(n);
    return k;
  };
  while (std::getline(ss, name, '+')) {
    unsigned bit = 0;
    for (unsigned i = 0; i < std::size(kModuleNames); ++i)
      if (name == kModuleNames[i]) bit = 1u << i;
    if (bit == 0)
      return invalid_argument("layout: recompute_modules: unknown module '" + name + "'; use " + known() +
                              " joined by '+' (Megatron's --recompute-modules; moe and shared_experts are not modelled)");
    if (modules & bit) return invalid_argument("layout: recompute_modules names '" + name + "' twice");
    modules |= bit;
  }
  if (modules == 0) return invalid_argument("layout: recompute_modules is empty; name modules from " + known());
  return modules;
}

std::string Layout::to_string() const {
  std::ostringstream ss;
  ss << "dp=" << dp << ",tp=" << tp << ",pp=" << pp << ",ep=" << ep << ",cp=" << cp << ",zero=" << zero
     << ",micro=" << micro_batch << ",schedule=" << schedule_name(schedule) << ",v=" << virtual_stages
     << ",sp=" << (sequence_parallel ? 1 : 0) << ",recompute=" << recompute_name(recompute);
  if (etp > 0 && etp != tp) ss << ",etp=" << etp;
  if (recompute_layers > 0) ss << ",recompute_layers=" << recompute_layers;
  if (recompute_modules) ss << ",recompute_modules=" << recompute_modules_text(recompute_modules);
  if (first_stage_layers > 0) ss << ",first=" << first_stage_layers;
  if (last_stage_layers > 0) ss << ",last=" << last_stage_layers;
  if (!overlap_grad_reduce) ss << ",overlap_grad=0";
  if (!overlap_param_gather) ss << ",overlap_param=0";
  if (cp_comm != CpComm::kP2p) ss << ",cp_comm=" << cp_comm_name(cp_comm);
  if (rank_order != Layout{}.rank_order) ss << ",order=" << rank_order;
  return ss.str();
}

namespace {

Result<int> parse_int_value(const std::string& key, const std::string& value) {
  if (value.empty()) return invalid_argument("layout: " + key + "= has no value; give an integer");
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  // The whole value (a NUL inside it, "2\0x", ends c_str() early: not an integer).
  if (end != value.c_str() + value.size() || value.find_first_of(" \t\n+") != std::string::npos)
    return invalid_argument("layout: " + key + "=" + value + " is not an integer");
  if (v < 0) return invalid_argument("layout: " + key + "=" + value + " must not be negative");
  if (v > kMaxLayoutValue)
    return invalid_argument("layout: " + key + "=" + value + " is too large (at most " +
                            std::to_string(kMaxLayoutValue) + ")");
  return static_cast<int>(v);
}

Result<bool> parse_bool_value(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "on") return true;
  if (value == "0" || value == "false" || value == "off") return false;
  return invalid_argument("layout: " + key + "=" + value + " must be 0 or 1");
}

}  // namespace

Result<Layout> parse_layout(const std::string& text, const Layout& base) {
  Layout l = base;
  bool v_given = false;
  std::set<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos)
      return invalid_argument("layout: '" + item + "' is not key=value (e.g. dp=2,tp=4,pp=2)");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    // A key given twice is a typo, not an override (as --scale refuses too).
    std::string canonical = key == "mbs" || key == "micro_batch" ? "micro" : key == "virtual_stages" ? "v" : key;
    if (!seen.insert(canonical).second)
      return invalid_argument("layout: '" + key + "' is given twice in '" + text + "'; give each key once");
    auto set_int = [&](int& field) -> Status {
      auto r = parse_int_value(key, value);
      if (!r.is_ok()) return r.status();
      field = *r;
      return Status::ok();
    };
    auto set_bool = [&](bool& field) -> Status {
      auto r = parse_bool_value(key, value);
      if (!r.is_ok()) return r.status();
      field = *r;
      return Status::ok();
    };
    if (key == "dp") LOOM_RETURN_IF_ERROR(set_int(l.dp));
    else if (key == "tp") LOOM_RETURN_IF_ERROR(set_int(l.tp));
    else if (key == "pp") LOOM_RETURN_IF_ERROR(set_int(l.pp));
    else if (key == "ep") LOOM_RETURN_IF_ERROR(set_int(l.ep));
    else if (key == "cp") LOOM_RETURN_IF_ERROR(set_int(l.cp));
    else if (key == "etp") LOOM_RETURN_IF_ERROR(set_int(l.etp));
    else if (key == "zero") LOOM_RETURN_IF_ERROR(set_int(l.zero));
    else if (key == "micro" || key == "mbs" || key == "micro_batch") LOOM_RETURN_IF_ERROR(set_int(l.micro_batch));
    else if (key == "v" || key == "virtual_stages") {
      LOOM_RETURN_IF_ERROR(set_int(l.virtual_stages));
      v_given = true;
    }
    else if (key == "sp") LOOM_RETURN_IF_ERROR(set_bool(l.sequence_parallel));
    else if (key == "recompute_layers") LOOM_RETURN_IF_ERROR(set_int(l.recompute_layers));
    else if (key == "recompute_modules") {
      LOOM_ASSIGN_OR_RETURN(l.recompute_modules, parse_recompute_modules(value));
    }
    else if (key == "first") LOOM_RETURN_IF_ERROR(set_int(l.first_stage_layers));
    else if (key == "last") LOOM_RETURN_IF_ERROR(set_int(l.last_stage_layers));
    else if (key == "overlap_grad") LOOM_RETURN_IF_ERROR(set_bool(l.overlap_grad_reduce));
    else if (key == "overlap_param") LOOM_RETURN_IF_ERROR(set_bool(l.overlap_param_gather));
    else if (key == "schedule") {
      LOOM_ASSIGN_OR_RETURN(l.schedule, parse_schedule(value));
    } else if (key == "recompute") {
      LOOM_ASSIGN_OR_RETURN(l.recompute, parse_recompute(value));
    } else if (key == "cp_comm") {
      LOOM_ASSIGN_OR_RETURN(l.cp_comm, parse_cp_comm(value));
    } else if (key == "order") {
      LOOM_RETURN_IF_ERROR(parse_rank_order(value).status());
      l.rank_order = value;
    } else {
      return invalid_argument("layout: unknown key '" + key +
                              "'; known keys: dp, tp, pp, ep, cp, etp, zero, micro, schedule, v, sp, recompute, "
                              "recompute_layers, recompute_modules, first, last, overlap_grad, overlap_param, cp_comm, order");
    }
  }
  // dp*tp*pp*cp is formed in int everywhere (Layout::world()): refuse a
  // product that could not be a world.
  // One factor at a time: each is <= 2^24, so no partial product overflows.
  int64_t world = 1;
  for (int size : {l.dp, l.tp, l.pp, l.cp}) {
    world *= size;
    if (world > kMaxLayoutValue)
      return invalid_argument("layout: dp*tp*pp*cp = " + std::to_string(l.dp) + "*" + std::to_string(l.tp) + "*" +
                              std::to_string(l.pp) + "*" + std::to_string(l.cp) + " ranks is too large (at most " +
                              std::to_string(kMaxLayoutValue) + ")");
  }
  // A schedule named interleaved with v left at 1 gets the smallest useful v.
  // etp equal to tp is the default (experts split like the MLP): one spelling
  // of it, so that the text round-trips (fuzz_layout found "etp=6,tp=6").
  if (l.etp == l.tp) l.etp = 0;
  if (l.schedule == Schedule::kInterleaved && l.virtual_stages == 1 && !v_given)
    l.virtual_stages = 2;
  // DualPipeV holds two chunks per stage, always.
  if (l.schedule == Schedule::kDualPipeV && !v_given) l.virtual_stages = 2;
  return l;
}

Result<std::vector<Dim>> parse_rank_order(const std::string& text) {
  std::vector<Dim> dims;
  bool seen[kNumDims] = {};
  for (size_t pos = 0; pos <= text.size();) {
    size_t dash = text.find('-', pos);
    if (dash == std::string::npos) dash = text.size();
    std::string_view item(text.data() + pos, dash - pos);
    pos = dash + 1;
    if (item.empty() && dash == text.size()) break;
    Dim d;
    if (item == "dp") d = Dim::kDp;
    else if (item == "tp") d = Dim::kTp;
    else if (item == "pp") d = Dim::kPp;
    else if (item == "ep") d = Dim::kEp;
    else if (item == "cp") d = Dim::kCp;
    else
      return invalid_argument("layout: rank order '" + text + "' has unknown dimension '" + std::string(item) +
                              "'; use dimensions from dp, tp, pp, ep, cp, e.g. tp-cp-ep-dp-pp");
    if (seen[static_cast<int>(d)])
      return invalid_argument("layout: rank order '" + text + "' names " + std::string(item) + " twice");
    seen[static_cast<int>(d)] = true;
    dims.push_back(d);
  }
  for (Dim d : {Dim::kDp, Dim::kTp, Dim::kPp, Dim::kCp}) {
    if (!seen[static_cast<int>(d)]) {
      // cp may be left out when it is 1; add it fastest-after-tp so sizes line up.
      if (d == Dim::kCp) {
        dims.insert(dims.begin(), Dim::kCp);
        continue;
      }
      return invalid_argument("layout: rank order '" + text + "' does not name " + dim_name(d) +
                              "; name each of tp, cp, dp, pp once (ep optional), e.g. tp-cp-ep-dp-pp");
    }
  }
  if (!seen[static_cast<int>(Dim::kEp)]) {
    // ep lives inside dp: place it just before dp (fastest part of dp).
    auto it = std::find(dims.begin(), dims.end(), Dim::kDp);
    dims.insert(it, Dim::kEp);
  }
  return dims;
}

}  // namespace loom
