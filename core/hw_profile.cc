// HwProfile: reading and writing hwprofiles/*.json (docs/formats/hwprofile.md).
//
// JSON keys carry their unit (`memory_gib`, `memory_bw_gb_per_s`,
// `nic_bw_gbit_per_s`, `latency_us`); the struct holds SI base units (bytes,
// bytes/s, FLOP/s, seconds). The conversions live in one table below so the
// reader and the writer cannot disagree.
#include "core/hw_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/json_util.h"
#include "core/model_spec.h"

namespace loom {
namespace {

// Unit conversions, JSON unit -> struct unit.
constexpr double kTera = 1e12;             // TFLOP/s -> FLOP/s
constexpr double kGiga = 1e9;              // GB/s -> B/s, GFLOP -> FLOP
constexpr double kGib = 1073741824.0;      // GiB -> bytes (2^30)
constexpr double kGbitToBytes = 1e9 / 8;   // Gbit/s -> B/s
constexpr double kMicro = 1e-6;            // us -> s

const char* const kFabrics[] = {"nvswitch", "nvlink", "pcie", "shm"};
const char* const kCpuVendors[] = {"intel", "amd", "arm", "mixed"};

template <size_t N>
bool one_of(const std::string& s, const char* const (&options)[N]) {
  return std::any_of(std::begin(options), std::end(options), [&](const char* o) { return s == o; });
}
template <size_t N>
std::string list_of(const char* const (&options)[N]) {
  std::string out;
  for (const char* o : options) {
    if (!out.empty()) out += '|';
    out += o;
  }
  return out;
}

// Appends the expected unit to a getter's error, so every message names the
// key (which carries the unit) and spells the unit out.
Status with_unit(const Status& s, const char* unit) {
  return Status(s.code(), s.message() + "; expected " + unit);
}

Result<double> positive(const Json& obj, const char* key, const std::string& where, const char* unit) {
  auto r = json_positive(obj, key, where);
  if (!r.is_ok()) return with_unit(r.status(), unit);
  // Every quantity a profile states (TFLOP/s, GB/s, GiB, µs, a collective's
  // bytes: nccl-tests sweeps reach 8 GiB) is far below 1e15 in its unit;
  // beyond, the conversion to bytes or FLOP/s can overflow to infinity (a
  // profile that "fits" anything) and the profile no longer round-trips
  // through JSON.
  if (*r > 1e15)
    return invalid_argument(where + "." + key + " = " + obj[key].dump() + " is out of range (at most 1e15); expected " +
                            unit);
  return *r;
}

// Optional: `fallback` when absent; present values must be positive.
Result<double> positive_or(const Json& obj, const char* key, double fallback, const std::string& where,
                           const char* unit) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  return positive(obj, key, where, unit);
}

// A fraction in (0, 1]: efficiencies.
Result<double> fraction(const Json& obj, const char* key, const std::string& where) {
  auto r = json_positive(obj, key, where);
  if (!r.is_ok()) return with_unit(r.status(), "a fraction in (0, 1]");
  if (*r > 1) return invalid_argument(where + "." + key + " must be at most 1, got " + obj[key].dump() +
                                      "; expected a fraction in (0, 1] (achieved / peak)");
  return *r;
}

Result<int> count(const Json& obj, const char* key, const std::string& where, int64_t fallback, int64_t min) {
  auto r = (fallback < 0) ? json_int(obj, key, where) : json_int_or(obj, key, fallback, where);
  if (!r.is_ok()) return with_unit(r.status(), "a whole number");
  if (*r < min || *r > 1000000)
    return invalid_argument(where + "." + key + " must be an integer >= " + std::to_string(min) + ", got " +
                            std::to_string(*r));
  return static_cast<int>(*r);
}

Result<const Json*> section(const Json& root, const char* key, const std::string& where) {
  if (!root.contains(key)) return invalid_argument(where + ": section '" + key + "' is missing; add it (an object)");
  const Json& s = root[key];
  if (!s.is_object()) return invalid_argument(where + "." + key + " must be an object, got " + s.type_name());
  return &s;
}

Result<std::string> source_of(const Json& obj, const std::string& where) {
  LOOM_ASSIGN_OR_RETURN(std::string s, json_string(obj, "source", where));
  if (s.empty()) return invalid_argument(where + ".source is empty; say where the numbers come from");
  return s;
}

Status parse_gemm_table(const Json& acc, const std::string& where, GemmEfficiencyTable& t,
                        const char* key = "gemm_efficiency") {
  const std::string w = where + "." + key;
  if (!acc.contains(key))
    return invalid_argument(w + " is missing; add [{\"gflop\": G, \"efficiency\": E}, ...] sorted by gflop");
  const Json& arr = acc[key];
  if (!arr.is_array() || arr.empty())
    return invalid_argument(w + " must be a non-empty array of {\"gflop\": G, \"efficiency\": E}");
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string wi = w + "[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) return invalid_argument(wi + " must be an object {\"gflop\": G, \"efficiency\": E}");
    LOOM_ASSIGN_OR_RETURN(double gflop, positive(arr[i], "gflop", wi, "GFLOP (1e9 FLOP) of one GEMM, 2*m*n*k"));
    LOOM_ASSIGN_OR_RETURN(double eff, fraction(arr[i], "efficiency", wi));
    if (!t.flops.empty() && gflop * kGiga <= t.flops.back())
      return invalid_argument(wi + ".gflop must be larger than the previous point's; sort the table by gflop");
    t.flops.push_back(gflop * kGiga);
    t.efficiency.push_back(eff);
    if (arr[i].contains("forward_share") != arr[0].contains("forward_share"))
      return invalid_argument(wi + ": give forward_share on every point of " + key + " or on none");
    if (arr[i].contains("forward_share")) {
      LOOM_ASSIGN_OR_RETURN(double share, fraction(arr[i], "forward_share", wi));
      if (share <= 0 || share >= 1)
        return invalid_argument(wi + ".forward_share must lie strictly between 0 and 1 (the forward GEMM's share "
                                     "of forward + input gradient + weight gradient time)");
      t.forward_share.push_back(share);
    }
  }
  return Status::ok();
}

// "attention_kernel": the name of the kernel attention_efficiency measures;
// "attention_kernels": {name: {"attention_efficiency": [...],
// "attention_backward_ratio": R, "source": "..."}}, the other kernels
// measured on the device. Alternatives need the default named, so that a
// selection can always be undone.
Status parse_attention_kernels(const Json& a, const std::string& where, AcceleratorSpec& acc) {
  if (a.contains("attention_kernel")) {
    LOOM_ASSIGN_OR_RETURN(acc.attention_kernel, json_string(a, "attention_kernel", where));
    if (acc.attention_kernel.empty() || acc.attention_efficiency.flops.empty())
      return invalid_argument(where + ".attention_kernel names the kernel attention_efficiency measures; give both, "
                                      "the name not empty");
  }
  if (a.contains("attention_kernel_source")) {
    LOOM_ASSIGN_OR_RETURN(acc.attention_kernel_source, json_string(a, "attention_kernel_source", where));
    if (acc.attention_kernel.empty())
      return invalid_argument(where + ".attention_kernel_source needs attention_kernel, the kernel it describes");
  }
  if (!a.contains("attention_kernels")) return Status::ok();
  const std::string w = where + ".attention_kernels";
  const Json& o = a["attention_kernels"];
  if (!o.is_object() || o.empty())
    return invalid_argument(w + " must be an object {name: {\"attention_efficiency\": [...], "
                                "\"attention_backward_ratio\": R, \"source\": \"...\"}}");
  if (acc.attention_kernel.empty())
    return invalid_argument(w + " needs attention_kernel: name the kernel attention_efficiency measures");
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string wk = w + "." + it.key();
    if (it.key().empty() || it.key() == acc.attention_kernel)
      return invalid_argument(wk + ": each kernel needs its own non-empty name, other than attention_kernel's");
    if (!it.value().is_object()) return invalid_argument(wk + " must be an object");
    for (auto f = it.value().begin(); f != it.value().end(); ++f) {
      if (f.key() != "attention_efficiency" && f.key() != "attention_efficiency_no_mask" &&
          f.key() != "attention_backward_ratio" && f.key() != "source")
        return invalid_argument(wk + " has an unknown key '" + f.key() +
                                "'; the keys are attention_efficiency, attention_efficiency_no_mask, "
                                "attention_backward_ratio and source");
    }
    AcceleratorSpec::AttentionKernel k;
    LOOM_RETURN_IF_ERROR(parse_gemm_table(it.value(), wk, k.efficiency, "attention_efficiency"));
    if (it.value().contains("attention_efficiency_no_mask"))
      LOOM_RETURN_IF_ERROR(
          parse_gemm_table(it.value(), wk, k.efficiency_no_mask, "attention_efficiency_no_mask"));
    LOOM_ASSIGN_OR_RETURN(k.backward_ratio, positive_or(it.value(), "attention_backward_ratio", 0, wk,
                                                        "backward / forward time of attention"));
    LOOM_ASSIGN_OR_RETURN(k.source, source_of(it.value(), wk));
    acc.attention_kernels.emplace(it.key(), std::move(k));
  }
  return Status::ok();
}

// "fp8_attention_speedup": {"seq": [s...], "forward": [r...], "backward":
// [r...], "source": "..."}: FP8 over 16-bit throughput of the profile's
// attention kernel by sequence length (ascending, each > 0, one ratio each),
// on a device with an FP8 rate and a measured attention table.
Status parse_fp8_attention_speedup(const Json& a, const std::string& where, AcceleratorSpec& acc) {
  const std::string w = where + ".fp8_attention_speedup";
  const Json& o = a["fp8_attention_speedup"];
  const char* shape = " must be {\"seq\": [lengths, ascending], \"forward\": [FP8 / BF16 throughput], "
                      "\"backward\": [FP8 / BF16 throughput], \"source\": \"...\"}";
  if (!o.is_object()) return invalid_argument(w + shape);
  if (acc.peak_fp8_flops <= 0)
    return invalid_argument(w + " needs peak_fp8_tflops: the device has no FP8 rate");
  if (acc.attention_efficiency.flops.empty())
    return invalid_argument(w + " scales the attention_efficiency table's kernel; give the table too");
  for (auto f = o.begin(); f != o.end(); ++f)
    if (f.key() != "seq" && f.key() != "forward" && f.key() != "backward" && f.key() != "source")
      return invalid_argument(w + " has an unknown key '" + f.key() + "'; the keys are seq, forward, backward and source");
  auto numbers = [&](const char* key, std::vector<double>* out) -> Status {
    if (!o.contains(key) || !o[key].is_array() || o[key].empty()) return invalid_argument(w + "." + key + shape);
    for (const Json& x : o[key]) {
      if (!x.is_number() || !(x.get<double>() > 0))
        return invalid_argument(w + "." + key + " must hold positive numbers, got " + x.dump());
      out->push_back(x.get<double>());
    }
    return Status::ok();
  };
  AcceleratorSpec::Fp8AttentionSpeedup f;
  LOOM_RETURN_IF_ERROR(numbers("seq", &f.seq));
  LOOM_RETURN_IF_ERROR(numbers("forward", &f.forward));
  LOOM_RETURN_IF_ERROR(numbers("backward", &f.backward));
  if (f.forward.size() != f.seq.size() || f.backward.size() != f.seq.size())
    return invalid_argument(w + ": forward and backward need one ratio for each of the " + std::to_string(f.seq.size()) +
                            " sequence lengths");
  for (size_t i = 1; i < f.seq.size(); ++i)
    if (!(f.seq[i] > f.seq[i - 1])) return invalid_argument(w + ".seq must be ascending");
  LOOM_ASSIGN_OR_RETURN(acc.fp8_attention_speedup_source, source_of(o, w));
  acc.fp8_attention_speedup = std::move(f);
  return Status::ok();
}

// {"bf16": T, "fp8": T}: a large GEMM's throughput sustained at the power
// cap, each at most its precision's peak (fp8 only on a device with an FP8
// rate). Call after the peaks are parsed.
Status parse_sustained_gemm(const Json& a, const std::string& where, AcceleratorSpec& acc) {
  const std::string w = where + ".sustained_gemm_tflops";
  const Json& o = a["sustained_gemm_tflops"];
  if (!o.is_object() || o.empty())
    return invalid_argument(w + " must be an object {\"bf16\": TFLOP/s, \"fp8\": TFLOP/s} (either key or both)");
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (it.key() != "bf16" && it.key() != "fp8")
      return invalid_argument(w + " has an unknown key '" + it.key() + "'; the keys are bf16 (serves fp16 too) and fp8");
  }
  const char* unit = "TFLOP/s a large GEMM holds at the power cap";
  LOOM_ASSIGN_OR_RETURN(double bf16, positive_or(o, "bf16", 0, w, unit));
  LOOM_ASSIGN_OR_RETURN(double fp8, positive_or(o, "fp8", 0, w, unit));
  if (bf16 * kTera > acc.peak_bf16_flops)
    return invalid_argument(w + ".bf16 (" + o["bf16"].dump() + ") is above peak_bf16_tflops; a sustained rate "
                            "cannot beat the peak");
  if (fp8 > 0 && acc.peak_fp8_flops <= 0)
    return invalid_argument(w + ".fp8 needs peak_fp8_tflops: the device has no FP8 rate");
  if (fp8 * kTera > acc.peak_fp8_flops)
    return invalid_argument(w + ".fp8 (" + o["fp8"].dump() + ") is above peak_fp8_tflops; a sustained rate "
                            "cannot beat the peak");
  acc.sustained_gemm_bf16_flops = bf16 * kTera;
  acc.sustained_gemm_fp8_flops = fp8 * kTera;
  return Status::ok();
}

Status parse_accelerator(const Json& a, const std::string& where, AcceleratorSpec& acc) {
  LOOM_ASSIGN_OR_RETURN(acc.name, json_string(a, "name", where));
  LOOM_ASSIGN_OR_RETURN(acc.sm_arch, count(a, "sm_arch", where, -1, 0));
  const char* tf = "TFLOP/s (dense, no sparsity)";
  LOOM_ASSIGN_OR_RETURN(double fp32, positive(a, "peak_fp32_tflops", where, tf));
  acc.peak_fp32_flops = fp32 * kTera;
  // GPUs must state their 16-bit matmul rate; CPUs may leave it out (they run
  // 16-bit recipes at the fp32 rate, see peak_flops()).
  double bf16 = 0;
  if (acc.sm_arch > 0 || a.contains("peak_bf16_tflops")) {
    LOOM_ASSIGN_OR_RETURN(bf16, positive(a, "peak_bf16_tflops", where, tf));
  }
  acc.peak_bf16_flops = bf16 * kTera;
  LOOM_ASSIGN_OR_RETURN(double fp16, positive_or(a, "peak_fp16_tflops", bf16, where, tf));
  acc.peak_fp16_flops = fp16 * kTera;
  LOOM_ASSIGN_OR_RETURN(double fp8, positive_or(a, "peak_fp8_tflops", 0, where, tf));
  acc.peak_fp8_flops = fp8 * kTera;
  LOOM_ASSIGN_OR_RETURN(double gib, positive(a, "memory_gib", where, "GiB (2^30 bytes) of device memory"));
  acc.memory_bytes = gib * kGib;
  LOOM_ASSIGN_OR_RETURN(double bw, positive(a, "memory_bw_gb_per_s", where, "GB/s (1e9 bytes/s), datasheet peak"));
  acc.memory_bw_bytes_per_s = bw * kGiga;
  acc.memory_bw_efficiency = 1;
  if (a.contains("memory_bw_efficiency")) {
    LOOM_ASSIGN_OR_RETURN(acc.memory_bw_efficiency, fraction(a, "memory_bw_efficiency", where));
  }
  if (a.contains("optimizer_bw_efficiency")) {
    LOOM_ASSIGN_OR_RETURN(acc.optimizer_bw_efficiency, fraction(a, "optimizer_bw_efficiency", where));
  }
  LOOM_ASSIGN_OR_RETURN(double discard, positive_or(a, "discard_gb_per_s", 0, where,
                                                   "GB/s at which discarded memory is written again (loom calibrate)"));
  acc.discard_bytes_per_s = discard * kGiga;
  LOOM_RETURN_IF_ERROR(parse_gemm_table(a, where, acc.gemm_efficiency));
  if (a.contains("gemm_shapes")) {
    if (acc.sm_arch <= 0)
      return invalid_argument(where + ".gemm_shapes is a GPU's measurement; a CPU profile has none");
    LOOM_RETURN_IF_ERROR(parse_gemm_shape_grid(a["gemm_shapes"], where, acc.gemm_shapes));
    const GemmShapeGrid& g = acc.gemm_shapes;
    const double most = *std::max_element(g.flops_per_s.begin(), g.flops_per_s.end());
    const double peak = g.measured_peak_flops > 0 ? g.measured_peak_flops : acc.peak_bf16_flops;
    if (most > peak * (1 + 1e-9))
      return invalid_argument(where + ".gemm_shapes.bf16_tflops holds " + std::to_string(most / kTera) +
                              " TFLOP/s, above " +
                              (g.measured_peak_flops > 0 ? "measured_peak_bf16_tflops" : "peak_bf16_tflops") +
                              ": a transcription error or the wrong device's table");
  }
  if (a.contains("fp8_gemm_best_efficiency")) {
    if (fp8 <= 0)
      return invalid_argument(where + ".fp8_gemm_best_efficiency needs peak_fp8_tflops: the device has no FP8 rate");
    LOOM_ASSIGN_OR_RETURN(acc.fp8_gemm_best_efficiency, fraction(a, "fp8_gemm_best_efficiency", where));
  }
  if (a.contains("sustained_gemm_tflops")) {
    LOOM_RETURN_IF_ERROR(parse_sustained_gemm(a, where, acc));
  }
  if (a.contains("attention_efficiency")) {
    LOOM_RETURN_IF_ERROR(parse_gemm_table(a, where, acc.attention_efficiency, "attention_efficiency"));
  }
  if (a.contains("attention_efficiency_no_mask")) {
    if (acc.attention_efficiency.flops.empty())
      return invalid_argument(where + ".attention_efficiency_no_mask is the unmasked rate of the kernel "
                              "attention_efficiency measures; give attention_efficiency too");
    LOOM_RETURN_IF_ERROR(
        parse_gemm_table(a, where, acc.attention_efficiency_no_mask, "attention_efficiency_no_mask"));
  }
  if (a.contains("head_gemm_efficiency")) {
    LOOM_RETURN_IF_ERROR(parse_gemm_table(a, where, acc.head_gemm_efficiency, "head_gemm_efficiency"));
  }
  LOOM_ASSIGN_OR_RETURN(acc.attention_backward_ratio,
                        positive_or(a, "attention_backward_ratio", 0, where, "backward / forward time of attention"));
  if (a.contains("sustained_attention_ratio")) {
    if (acc.attention_efficiency.flops.empty())
      return invalid_argument(where + ".sustained_attention_ratio scales a measured attention_efficiency table; "
                              "give the table too, or drop the ratio");
    LOOM_ASSIGN_OR_RETURN(acc.sustained_attention_ratio,
                          positive(a, "sustained_attention_ratio", where, "a share of the table's rate"));
    if (acc.sustained_attention_ratio > 1)
      return invalid_argument(where + ".sustained_attention_ratio must be in (0, 1], got " +
                              a["sustained_attention_ratio"].dump() +
                              "; it is the share of its short-run rate an attention kernel keeps held at the power "
                              "cap (held / burst), and a held kernel is never faster");
  }
  if (a.contains("wgrad_accumulate_exposed")) {
    const Json& x = a["wgrad_accumulate_exposed"];
    if (!x.is_number() || !(x.get<double>() >= 0 && x.get<double>() <= 1))
      return invalid_argument(where + ".wgrad_accumulate_exposed must be a number in [0, 1], got " + x.dump() +
                              "; it is the share of the main gradient's read and write an accumulating weight-gradient "
                              "GEMM shows in its time (gpu-validate stage 6c)");
    acc.wgrad_accumulate_exposed = x.get<double>();
  }
  LOOM_RETURN_IF_ERROR(parse_attention_kernels(a, where, acc));
  if (a.contains("fp8_attention_speedup")) LOOM_RETURN_IF_ERROR(parse_fp8_attention_speedup(a, where, acc));
  LOOM_ASSIGN_OR_RETURN(acc.sm_count, count(a, "sm_count", where, 0, 0));
  LOOM_ASSIGN_OR_RETURN(acc.cpu_threads, positive_or(a, "cpu_threads", 0, where,
                                                     "compute threads per rank the CPU figures are for"));
  LOOM_ASSIGN_OR_RETURN(double xf, positive_or(a, "cross_entropy_fwd_ns_per_logit", 0, where,
                                              "ns per logit of the cross-entropy's forward"));
  LOOM_ASSIGN_OR_RETURN(double xb, positive_or(a, "cross_entropy_bwd_ns_per_logit", 0, where,
                                              "ns per logit of the cross-entropy's backward"));
  if ((xf > 0) != (xb > 0))
    return invalid_argument(where + ": cross_entropy_fwd_ns_per_logit and cross_entropy_bwd_ns_per_logit go together "
                            "(both measured by `loom calibrate`); give both or neither");
  acc.xent_fwd_ns_per_logit = xf;  // kept in ns: the plan's hash needs an exact round trip
  acc.xent_bwd_ns_per_logit = xb;
  if (a.contains("cross_entropy_vocab_measured")) {
    const Json& v = a["cross_entropy_vocab_measured"];
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
        v[0].get<int64_t>() < 1 || v[1].get<int64_t>() < v[0].get<int64_t>() || v[1].get<int64_t>() > kMaxVocab)
      return invalid_argument(where + ".cross_entropy_vocab_measured must be [min, max], the vocabularies `loom "
                              "calibrate` measured (positive integers, min <= max <= " + std::to_string(kMaxVocab) + ")");
    acc.xent_vocab_min = v[0].get<int64_t>();
    acc.xent_vocab_max = v[1].get<int64_t>();
  }
  if (acc.cpu_threads > 65536)
    return invalid_argument(where + ".cpu_threads=" + std::to_string(acc.cpu_threads) +
                            " is out of range: at most 65536 threads per rank");
  if (a.contains("gemm_tile")) {
    const Json& t = a["gemm_tile"];
    if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() || !t[1].is_number_integer() ||
        t[0].get<int64_t>() < 1 || t[1].get<int64_t>() < 1 || t[0].get<int64_t>() > 65536 ||
        t[1].get<int64_t>() > 65536)
      return invalid_argument(where + ".gemm_tile must be [tile_m, tile_n], two positive integers (output tile of the "
                              "GEMM kernels, e.g. [256, 128]; at most 65536)");
    acc.gemm_tile_m = int(t[0].get<int64_t>());
    acc.gemm_tile_n = int(t[1].get<int64_t>());
  }
  LOOM_ASSIGN_OR_RETURN(acc.source, source_of(a, where));
  return Status::ok();
}

Status parse_measured_collectives(const Json& n, const std::string& where, MeasuredCollectives& m) {
  const std::string w = where + ".measured_collectives";
  const Json& mc = n["measured_collectives"];
  const char* shape = "{\"ranks\": N, \"all_reduce\": [{\"bytes\": B, \"time_us\": T}, ...], ...}";
  if (!mc.is_object()) return invalid_argument(w + " must be an object " + shape);
  LOOM_ASSIGN_OR_RETURN(m.ranks, count(mc, "ranks", w, -1, 2));
  for (const char* name : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"}) {
    if (!mc.contains(name)) continue;
    const Json& arr = mc[name];
    const std::string wn = w + "." + name;
    if (!arr.is_array() || arr.empty())
      return invalid_argument(wn + " must be a non-empty array of {\"bytes\": B, \"time_us\": T}");
    CommTimeTable t;
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string wi = wn + "[" + std::to_string(i) + "]";
      if (!arr[i].is_object()) return invalid_argument(wi + " must be an object {\"bytes\": B, \"time_us\": T}");
      LOOM_ASSIGN_OR_RETURN(double b, positive(arr[i], "bytes", wi, "bytes, nccl-tests convention"));
      LOOM_ASSIGN_OR_RETURN(double us, positive(arr[i], "time_us", wi, "microseconds per call"));
      if (!t.bytes.empty() && b <= t.bytes.back())
        return invalid_argument(wi + ".bytes must be larger than the previous point's; sort the table by bytes");
      t.bytes.push_back(b);
      t.time_s.push_back(us * kMicro);
    }
    m.tables[name] = std::move(t);
  }
  if (m.tables.empty()) return invalid_argument(w + " has no collective; give at least one table, " + shape);
  return Status::ok();
}

Status parse_node(const Json& n, const std::string& where, NodeSpec& node) {
  LOOM_ASSIGN_OR_RETURN(node.devices_per_node, count(n, "devices_per_node", where, -1, 1));
  LOOM_ASSIGN_OR_RETURN(node.fabric, json_string(n, "fabric", where));
  if (!one_of(node.fabric, kFabrics))
    return invalid_argument(where + ".fabric is '" + node.fabric + "'; use one of " + list_of(kFabrics));
  const char* gbs = "GB/s (1e9 bytes/s) per device per direction";
  LOOM_ASSIGN_OR_RETURN(double intra, positive(n, "intra_bw_gb_per_s", where, gbs));
  node.intra_bw_bytes_per_s = intra * kGiga;
  LOOM_ASSIGN_OR_RETURN(double ring, positive(n, "intra_ring_busbw_gb_per_s", where,
                                              "GB/s, nccl-tests ring all-reduce busbw over the whole node"));
  if (ring > intra)
    return invalid_argument(where + ".intra_ring_busbw_gb_per_s (" + n["intra_ring_busbw_gb_per_s"].dump() +
                            ") exceeds intra_bw_gb_per_s (" + n["intra_bw_gb_per_s"].dump() +
                            "); a ring cannot beat the link it runs on");
  node.intra_ring_busbw_bytes_per_s = ring * kGiga;
  LOOM_ASSIGN_OR_RETURN(double lat, positive(n, "intra_latency_us", where, "microseconds per hop"));
  node.intra_latency_s = lat * kMicro;
  LOOM_ASSIGN_OR_RETURN(node.nvls, json_bool_or(n, "nvls", false, where));
  LOOM_ASSIGN_OR_RETURN(node.nvlink_domain_size, count(n, "nvlink_domain_size", where, 0, 0));
  if (node.nvlink_domain_size != 0 && node.nvlink_domain_size % node.devices_per_node != 0)
    return invalid_argument(where + ".nvlink_domain_size=" + std::to_string(node.nvlink_domain_size) +
                            " is not a multiple of devices_per_node=" + std::to_string(node.devices_per_node) +
                            "; use 0 (the node) or a whole number of nodes");
  LOOM_ASSIGN_OR_RETURN(double pcie, positive_or(n, "pcie_bw_gb_per_s", 0, where, gbs));
  node.pcie_bw_bytes_per_s = pcie * kGiga;
  LOOM_ASSIGN_OR_RETURN(node.nccl_p2p_channels_per_peer, count(n, "nccl_p2p_channels_per_peer", where, 0, 0));
  if (node.nccl_p2p_channels_per_peer > 64)
    return invalid_argument(where + ".nccl_p2p_channels_per_peer=" + std::to_string(node.nccl_p2p_channels_per_peer) +
                            " exceeds NCCL's 64 channels (MAXCHANNELS); use NCCL's p2p channels per peer, e.g. 32");
  if (n.contains("measured_collectives")) LOOM_RETURN_IF_ERROR(parse_measured_collectives(n, where, node.measured));
  LOOM_ASSIGN_OR_RETURN(node.source, source_of(n, where));
  return Status::ok();
}

Status parse_network(const Json& n, const std::string& where, NetworkSpec& net) {
  LOOM_ASSIGN_OR_RETURN(net.nics_per_node, count(n, "nics_per_node", where, -1, 1));
  LOOM_ASSIGN_OR_RETURN(double gbit, positive(n, "nic_bw_gbit_per_s", where, "Gbit/s per NIC per direction"));
  net.nic_bw_bytes_per_s = gbit * kGbitToBytes;
  LOOM_ASSIGN_OR_RETURN(double lat, positive(n, "latency_us", where, "microseconds per network hop"));
  net.latency_s = lat * kMicro;
  LOOM_ASSIGN_OR_RETURN(net.topology, json_string(n, "topology", where));
  LOOM_ASSIGN_OR_RETURN(net.cpu_vendor, json_string_or(n, "cpu_vendor", "intel", where));
  if (!one_of(net.cpu_vendor, kCpuVendors))
    return invalid_argument(where + ".cpu_vendor is '" + net.cpu_vendor + "'; use one of " + list_of(kCpuVendors));
  LOOM_ASSIGN_OR_RETURN(net.source, source_of(n, where));
  return Status::ok();
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

Result<Precision> parse_precision(const std::string& text) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8})
    if (text == precision_name(p)) return p;
  return invalid_argument("precision '" + text + "' is not known; use one of fp32|bf16|fp16|fp8");
}

namespace {

// ys over xs (sorted ascending) at x, linear in log(x), clamped at both ends;
// `fallback` when the table is empty or malformed.
double interpolate_log(const std::vector<double>& xs, const std::vector<double>& ys, double x, double fallback) {
  const size_t n = xs.size();
  if (n == 0 || ys.size() != n) return fallback;
  if (!(x > xs.front())) return ys.front();  // also NaN and <= 0
  if (x >= xs.back()) return ys.back();
  size_t hi = std::upper_bound(xs.begin(), xs.end(), x) - xs.begin();
  size_t lo = hi - 1;
  double t = std::log(x / xs[lo]) / std::log(xs[hi] / xs[lo]);
  return ys[lo] + t * (ys[hi] - ys[lo]);
}

}  // namespace

double GemmEfficiencyTable::lookup(double gemm_flops) const { return interpolate_log(flops, efficiency, gemm_flops, 1.0); }

double GemmEfficiencyTable::forward_share_at(double gemm_flops) const {
  return interpolate_log(flops, forward_share, gemm_flops, 1.0 / 3.0);
}

double CommTimeTable::lookup(double b) const {
  const size_t n = bytes.size();
  if (n == 0 || time_s.size() != n) return 0;
  if (!(b > bytes.front())) return time_s.front();
  if (b >= bytes.back()) return time_s.back() * b / bytes.back();
  size_t hi = std::upper_bound(bytes.begin(), bytes.end(), b) - bytes.begin();
  size_t lo = hi - 1;
  double t = std::log(b / bytes[lo]) / std::log(bytes[hi] / bytes[lo]);
  return std::exp(std::log(time_s[lo]) + t * (std::log(time_s[hi]) - std::log(time_s[lo])));
}

bool AcceleratorSpec::supports(Precision p) const {
  switch (p) {
    case Precision::kFp32: return peak_fp32_flops > 0;
    case Precision::kBf16: return peak_bf16_flops > 0;
    case Precision::kFp16: return peak_fp16_flops > 0;
    case Precision::kFp8: return peak_fp8_flops > 0;
  }
  return false;
}

double AcceleratorSpec::sustained_gemm_efficiency(Precision p) const {
  const bool fp8 = p == Precision::kFp8 && peak_fp8_flops > 0;
  const double sustained = fp8 ? sustained_gemm_fp8_flops
                               : (p == Precision::kFp32 ? 0.0 : sustained_gemm_bf16_flops);
  const double peak = peak_flops(p);
  return sustained > 0 && peak > 0 ? std::min(1.0, sustained / peak) : 1.0;
}

double AcceleratorSpec::peak_flops(Precision p) const {
  // A precision the device lacks runs at the next wider one it has.
  switch (p) {
    case Precision::kFp8:
      if (peak_fp8_flops > 0) return peak_fp8_flops;
      [[fallthrough]];
    case Precision::kFp16:
      if (p == Precision::kFp16 && peak_fp16_flops > 0) return peak_fp16_flops;
      [[fallthrough]];
    case Precision::kBf16:
      if (peak_bf16_flops > 0) return peak_bf16_flops;
      if (peak_fp16_flops > 0) return peak_fp16_flops;
      [[fallthrough]];
    case Precision::kFp32:
      return peak_fp32_flops;
  }
  return peak_fp32_flops;
}

Result<HwProfile> parse_hw_profile(const std::string& json_text, const std::string& name) {
  const std::string where = "hwprofile " + name;
  LOOM_ASSIGN_OR_RETURN(Json root, parse_json(json_text, where));
  if (!root.is_object()) return invalid_argument(where + ": the top level must be an object");
  HwProfile hw;
  LOOM_ASSIGN_OR_RETURN(hw.name, json_string_or(root, "name", name, where));
  LOOM_ASSIGN_OR_RETURN(hw.description, json_string_or(root, "description", "", where));
  LOOM_ASSIGN_OR_RETURN(hw.nccl_version, json_string(root, "nccl_version", where));
  LOOM_ASSIGN_OR_RETURN(const Json* acc, section(root, "accelerator", where));
  LOOM_RETURN_IF_ERROR(parse_accelerator(*acc, where + ": accelerator", hw.accel));
  LOOM_ASSIGN_OR_RETURN(const Json* node, section(root, "node", where));
  LOOM_RETURN_IF_ERROR(parse_node(*node, where + ": node", hw.node));
  LOOM_ASSIGN_OR_RETURN(const Json* net, section(root, "network", where));
  LOOM_RETURN_IF_ERROR(parse_network(*net, where + ": network", hw.net));
  return hw;
}

Result<HwProfile> load_hw_profile(const std::string& path_or_name) {
  LOOM_ASSIGN_OR_RETURN(std::string path, find_description_file(path_or_name, "hwprofiles"));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_hw_profile(text, std::filesystem::path(path).stem().string());
}

namespace {

OrderedJson gemm_table_json(const GemmEfficiencyTable& t) {
  OrderedJson table = OrderedJson::array();
  const bool shares = t.forward_share.size() == t.flops.size();
  for (size_t i = 0; i < t.flops.size() && i < t.efficiency.size(); ++i) {
    table.push_back({{"gflop", t.flops[i] / kGiga}, {"efficiency", t.efficiency[i]}});
    if (shares) table.back()["forward_share"] = t.forward_share[i];
  }
  return table;
}

}  // namespace

double AcceleratorSpec::Fp8AttentionSpeedup::at(const std::vector<double>& ratio, double s) const {
  if (seq.empty() || ratio.size() != seq.size()) return 1.0;
  if (s <= seq.front()) return ratio.front();
  if (s >= seq.back()) return ratio.back();
  size_t i = 1;
  while (seq[i] < s) ++i;
  const double f = std::log(s / seq[i - 1]) / std::log(seq[i] / seq[i - 1]);
  return ratio[i - 1] + f * (ratio[i] - ratio[i - 1]);
}

std::string hw_profile_to_json(const HwProfile& hw) {
  const AcceleratorSpec& a = hw.accel;
  OrderedJson acc;
  acc["name"] = a.name;
  acc["sm_arch"] = a.sm_arch;
  acc["peak_fp32_tflops"] = a.peak_fp32_flops / kTera;
  if (a.peak_bf16_flops > 0) acc["peak_bf16_tflops"] = a.peak_bf16_flops / kTera;
  if (a.peak_fp16_flops > 0) acc["peak_fp16_tflops"] = a.peak_fp16_flops / kTera;
  if (a.peak_fp8_flops > 0) acc["peak_fp8_tflops"] = a.peak_fp8_flops / kTera;
  acc["memory_gib"] = a.memory_bytes / kGib;
  acc["memory_bw_gb_per_s"] = a.memory_bw_bytes_per_s / kGiga;
  acc["memory_bw_efficiency"] = a.memory_bw_efficiency;
  if (a.optimizer_bw_efficiency > 0) acc["optimizer_bw_efficiency"] = a.optimizer_bw_efficiency;
  if (a.discard_bytes_per_s > 0) acc["discard_gb_per_s"] = a.discard_bytes_per_s / kGiga;
  acc["gemm_efficiency"] = gemm_table_json(a.gemm_efficiency);
  if (!a.gemm_shapes.empty()) acc["gemm_shapes"] = gemm_shape_grid_json(a.gemm_shapes);
  if (a.fp8_gemm_best_efficiency > 0) acc["fp8_gemm_best_efficiency"] = a.fp8_gemm_best_efficiency;
  if (a.sustained_gemm_bf16_flops > 0 || a.sustained_gemm_fp8_flops > 0) {
    OrderedJson sus;
    if (a.sustained_gemm_bf16_flops > 0) sus["bf16"] = a.sustained_gemm_bf16_flops / kTera;
    if (a.sustained_gemm_fp8_flops > 0) sus["fp8"] = a.sustained_gemm_fp8_flops / kTera;
    acc["sustained_gemm_tflops"] = sus;
  }
  if (!a.attention_efficiency.flops.empty()) acc["attention_efficiency"] = gemm_table_json(a.attention_efficiency);
  if (!a.attention_efficiency.flops.empty() && !a.attention_efficiency_no_mask.flops.empty())
    acc["attention_efficiency_no_mask"] = gemm_table_json(a.attention_efficiency_no_mask);
  if (!a.head_gemm_efficiency.flops.empty()) acc["head_gemm_efficiency"] = gemm_table_json(a.head_gemm_efficiency);
  if (a.attention_backward_ratio > 0) acc["attention_backward_ratio"] = a.attention_backward_ratio;
  if (a.sustained_attention_ratio > 0 && !a.attention_efficiency.flops.empty())
    acc["sustained_attention_ratio"] = a.sustained_attention_ratio;
  if (a.wgrad_accumulate_exposed >= 0) acc["wgrad_accumulate_exposed"] = a.wgrad_accumulate_exposed;
  if (!a.attention_kernel.empty()) acc["attention_kernel"] = a.attention_kernel;
  if (!a.attention_kernel_source.empty()) acc["attention_kernel_source"] = a.attention_kernel_source;
  if (!a.attention_kernels.empty()) {
    OrderedJson ks = OrderedJson::object();
    for (const auto& [name, k] : a.attention_kernels) {
      OrderedJson kj;
      kj["attention_efficiency"] = gemm_table_json(k.efficiency);
      if (!k.efficiency_no_mask.flops.empty())
        kj["attention_efficiency_no_mask"] = gemm_table_json(k.efficiency_no_mask);
      if (k.backward_ratio > 0) kj["attention_backward_ratio"] = k.backward_ratio;
      kj["source"] = k.source;
      ks[name] = kj;
    }
    acc["attention_kernels"] = ks;
  }
  if (!a.fp8_attention_speedup.empty()) {
    OrderedJson f;
    f["seq"] = a.fp8_attention_speedup.seq;
    f["forward"] = a.fp8_attention_speedup.forward;
    f["backward"] = a.fp8_attention_speedup.backward;
    f["source"] = a.fp8_attention_speedup_source;
    acc["fp8_attention_speedup"] = f;
  }
  if (a.cpu_threads > 0) acc["cpu_threads"] = a.cpu_threads;
  if (a.xent_fwd_ns_per_logit > 0) {
    acc["cross_entropy_fwd_ns_per_logit"] = a.xent_fwd_ns_per_logit;
    acc["cross_entropy_bwd_ns_per_logit"] = a.xent_bwd_ns_per_logit;
  }
  if (a.xent_vocab_max > 0) acc["cross_entropy_vocab_measured"] = {a.xent_vocab_min, a.xent_vocab_max};
  if (a.sm_count > 0) {
    acc["sm_count"] = a.sm_count;
    acc["gemm_tile"] = {a.gemm_tile_m, a.gemm_tile_n};
  }
  acc["source"] = a.source;

  const NodeSpec& n = hw.node;
  OrderedJson node;
  node["devices_per_node"] = n.devices_per_node;
  node["fabric"] = n.fabric;
  node["intra_bw_gb_per_s"] = n.intra_bw_bytes_per_s / kGiga;
  node["intra_ring_busbw_gb_per_s"] = n.intra_ring_busbw_bytes_per_s / kGiga;
  node["intra_latency_us"] = n.intra_latency_s / kMicro;
  node["nvls"] = n.nvls;
  node["nvlink_domain_size"] = n.nvlink_domain_size;
  if (n.pcie_bw_bytes_per_s > 0) node["pcie_bw_gb_per_s"] = n.pcie_bw_bytes_per_s / kGiga;
  if (n.nccl_p2p_channels_per_peer > 0) node["nccl_p2p_channels_per_peer"] = n.nccl_p2p_channels_per_peer;
  if (n.measured.ranks > 0) {
    OrderedJson mc;
    mc["ranks"] = n.measured.ranks;
    for (const auto& [name, t] : n.measured.tables) {
      OrderedJson arr = OrderedJson::array();
      for (size_t i = 0; i < t.bytes.size(); ++i) arr.push_back({{"bytes", t.bytes[i]}, {"time_us", t.time_s[i] / kMicro}});
      mc[name] = arr;
    }
    node["measured_collectives"] = mc;
  }
  node["source"] = n.source;

  const NetworkSpec& w = hw.net;
  OrderedJson net;
  net["nics_per_node"] = w.nics_per_node;
  net["nic_bw_gbit_per_s"] = w.nic_bw_bytes_per_s / kGbitToBytes;
  net["latency_us"] = w.latency_s / kMicro;
  net["topology"] = w.topology;
  net["cpu_vendor"] = w.cpu_vendor;
  net["source"] = w.source;

  OrderedJson root;
  root["name"] = hw.name;
  root["description"] = hw.description;
  root["nccl_version"] = hw.nccl_version;
  root["accelerator"] = std::move(acc);
  root["node"] = std::move(node);
  root["network"] = std::move(net);
  return root.dump(2) + "\n";
}

}  // namespace loom

namespace loom {

double AcceleratorSpec::wave_efficiency(double m, double n) const {
  if (sm_count <= 0 || m <= 0 || n <= 0) return 1.0;
  // cuBLAS may lay the tile either way round: take the better orientation.
  auto waves = [&](double tm, double tn) {
    double tiles = std::ceil(m / tm) * std::ceil(n / tn);
    double full = std::ceil(tiles / sm_count);
    return tiles / (full * sm_count);
  };
  return std::max(waves(gemm_tile_m, gemm_tile_n), waves(gemm_tile_n, gemm_tile_m));
}

double AcceleratorSpec::output_tiles(double m, double n) const {
  return std::max(std::ceil(m / gemm_tile_m) * std::ceil(n / gemm_tile_n),
                  std::ceil(m / gemm_tile_n) * std::ceil(n / gemm_tile_m));
}

double AcceleratorSpec::table_wave_efficiency(double flops) const {
  if (sm_count <= 0 || !(flops > 0)) return 1.0;
  // One output's waves, an output under one wave counted as full.
  auto waves = [&](double m, double n) { return output_tiles(m, n) < sm_count ? 1.0 : wave_efficiency(m, n); };
  // Chain point e: the shape of m*n*k = 2^e, its three (m, n) orientations.
  constexpr int kLargestSide = 12;  // 2^12 = 4096: the largest side XLA's tables time
  auto at = [&](int e) {
    if (e > 3 * kLargestSide) {  // b batches of 4096^3: b times the 4096 x 4096 output's tiles
      const double side = std::ldexp(1.0, kLargestSide);
      const double b = std::ldexp(1.0, e - 3 * kLargestSide), tiles = b * output_tiles(side, side);
      return tiles / (std::ceil(tiles / sm_count) * sm_count);
    }
    const int j = e >= 0 ? e / 3 : -((-e + 2) / 3), r = e - 3 * j;  // 2^e = a^3 * 2^r, a = 2^j
    const double a = std::ldexp(1.0, j);
    if (r == 0) return waves(a, a);  // a x a x a
    // a x a x 2a: outputs a x a and (twice) a x 2a; a x 2a x 2a: 2a x 2a and
    // (twice) a x 2a. A tile may lie either way, so m x n and n x m are alike.
    return r == 1 ? (waves(a, a) + 2 * waves(a, 2 * a)) / 3 : (waves(2 * a, 2 * a) + 2 * waves(a, 2 * a)) / 3;
  };
  // flops / 2 = mantissa x 2^exp, mantissa in [0.5, 1): chain point exp - 1
  // below, exp above; the weight linear in FLOPs between them (they double).
  int exp = 0;
  const double t = 2 * std::frexp(flops / 2, &exp) - 1;
  return at(exp - 1) * (1 - t) + at(exp) * t;
}

double AcceleratorSpec::relative_wave_efficiency(double m, double n, double k) const {
  if (sm_count <= 0 || m <= 0 || n <= 0 || k <= 0) return 1.0;
  if (output_tiles(m, n) < sm_count) return 1.0;
  return wave_efficiency(m, n) / table_wave_efficiency(2 * m * n * k);
}

std::string attention_kernel_names(const HwProfile& hw) {
  const AcceleratorSpec& a = hw.accel;
  if (a.attention_kernel.empty()) return "none named";
  std::string out = a.attention_kernel + " (in use)";
  for (const auto& [name, k] : a.attention_kernels) out += ", " + name;
  return out;
}

Status select_attention_kernel(HwProfile* hw, const std::string& name) {
  AcceleratorSpec& a = hw->accel;
  if (name == a.attention_kernel) return Status::ok();
  auto it = a.attention_kernels.find(name);
  if (it == a.attention_kernels.end())
    return invalid_argument("attention kernel '" + name + "': hwprofile " + hw->name + " has " +
                            (a.attention_kernel.empty() ? std::string("no named attention kernels")
                                                        : attention_kernel_names(*hw)) +
                            "; add its measured table to the profile's accelerator.attention_kernels");
  // The profile's own table is described by accelerator.source; a kernel
  // moved out keeps its source, so every selection can be undone exactly.
  static const std::string kOwn = "as accelerator.source describes attention_efficiency";
  AcceleratorSpec::AttentionKernel chosen = std::move(it->second);
  a.attention_kernels.erase(it);
  a.attention_kernels.emplace(
      a.attention_kernel,
      AcceleratorSpec::AttentionKernel{a.attention_efficiency, a.attention_backward_ratio,
                                       a.attention_kernel_source.empty() ? kOwn : a.attention_kernel_source,
                                       a.attention_efficiency_no_mask});
  a.attention_efficiency = std::move(chosen.efficiency);
  a.attention_efficiency_no_mask = std::move(chosen.efficiency_no_mask);
  a.attention_backward_ratio = chosen.backward_ratio;
  a.attention_kernel = name;
  a.attention_kernel_source = chosen.source == kOwn ? std::string() : std::move(chosen.source);
  return Status::ok();
}

HwProfile canonical_hw_profile(const HwProfile& hw) {
  HwProfile cur = hw;
  std::string text = hw_profile_to_json(cur);
  for (int i = 0; i < 4; ++i) {
    Result<HwProfile> back = parse_hw_profile(text, cur.name);
    if (!back.is_ok()) return cur;
    std::string again = hw_profile_to_json(*back);
    if (again == text) return *back;
    cur = *back;
    text = std::move(again);
  }
  return cur;
}

}  // namespace loom
