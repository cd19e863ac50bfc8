#include "sim/coverage.h"

#include <algorithm>
#include <cstdio>

namespace loom {

namespace {

std::string gflop(double flops) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g GFLOP", flops / 1e9);
  return b;
}

}  // namespace

std::vector<std::string> outside_measured(const ModelSpec& m, const HwProfile& hw, const TrainSpec& train,
                                          const Layout& l) {
  std::vector<std::string> notes;
  const AcceleratorSpec& a = hw.accel;
  const double t = std::max(1, l.tp), T = double(l.micro_batch) * double(train.seq_len), h = double(m.hidden);
  const double q = double(m.num_heads) * double(m.head_dim), kv = double(m.num_kv_heads) * double(m.head_dim);
  const double ffn = double(m.ffn_hidden), mlp_in = m.mlp == MlpKind::kSwiGlu ? 2 * ffn : ffn;
  // A layer's weight GEMMs and the LM head, forward (m x n x k, 2mnk FLOP).
  struct Gemm {
    const char* name;
    double m, n, k;
    bool head = false;
  };
  std::vector<Gemm> gemms = {{"the QKV projection", T, (q + 2 * kv) / t, h},
                             {"the attention output projection", T, h, q / t},
                             {"the LM head (logits)", T, double(m.vocab) / t, h, true}};
  if (m.num_moe_layers() < m.num_layers) {  // dense MLP layers
    gemms.push_back({"the MLP up projection", T, mlp_in / t, h});
    gemms.push_back({"the MLP down projection", T, h, ffn / t});
  }
  for (const Gemm& x : gemms) {
    // The head is priced by its own table when the profile measured one.
    const bool own = x.head && !a.head_gemm_efficiency.flops.empty() &&
                     double(m.vocab) / t >= double(AcceleratorSpec::kHeadGemmMinVocab);
    const GemmEfficiencyTable& g = own ? a.head_gemm_efficiency : a.gemm_efficiency;
    if (g.flops.size() >= 2) {
      // An FP8 GEMM reads the 16-bit table at half its FLOPs (sim/gemm_time.cc).
      const bool fp8_gemm = train.precision == Precision::kFp8 && !x.head && a.peak_fp8_flops > 0;
      const double f = 2 * x.m * x.n * x.k, f_table = fp8_gemm ? f / 2 : f;
      const bool below = f_table < g.flops.front(), above = f_table > g.flops.back();
      if (!below && !above) continue;
      // The ceiling the note names: for a 16-bit GEMM (the head under FP8
      // too) the power cap as a fraction of the 16-bit peak; for an FP8 GEMM
      // (its efficiency is the table's at half its FLOPs) the lower of the
      // FP8 best and the FP8 power cap, as a fraction of the FP8 peak.
      const Precision p = x.head && train.precision == Precision::kFp8 ? Precision::kBf16 : train.precision;
      const double e = below ? g.efficiency.front() : g.efficiency.back();
      const double fp8_best = a.fp8_gemm_best_efficiency > 0 ? a.fp8_gemm_best_efficiency : 1.0;
      const double cap = fp8_gemm ? std::min(fp8_best, a.sustained_gemm_efficiency(Precision::kFp8))
                             : a.sustained_gemm_efficiency(p);
      char capped[128] = "";
      if (fp8_gemm && cap < 1.0)
        std::snprintf(capped, sizeof capped, "; in FP8 at most %.3f of the FP8 peak (its best, or what a large FP8 GEMM sustains)",
                      cap);
      else if (!fp8_gemm && cap < e)
        std::snprintf(capped, sizeof capped, ", capped at the %.2f a large GEMM sustains", cap);
      // The per-shape grid corrects these GEMMs too (sim/gemm_time.cc), with
      // the correction of its nearest shape; a head priced by its own
      // measured table (`loom calibrate`) is not.
      const char* grid = !own && !a.gemm_shapes.empty()
                             ? "; the per-shape grid's measured correction (gemm_shapes), held at its nearest shape, "
                               "scales it"
                             : "";
      char b[640];
      std::snprintf(b, sizeof b,
                    "gemm: %s (%.0f x %.0f x %.0f, %s) is %s the %sGEMMs %s measured (%s to %s): its efficiency is "
                    "the table's %s point's, %.2f%s%s",
                    x.name, x.m, x.n, x.k, gflop(f).c_str(), below ? "below" : "above", own ? "head " : "",
                    hw.name.c_str(),
                    gflop(g.flops.front()).c_str(), gflop(g.flops.back()).c_str(), below ? "first" : "last", e,
                    capped, grid);
      notes.push_back(b);
    }
  }
  const GemmEfficiencyTable& at = a.attention_efficiency;
  if (at.flops.size() >= 2 && m.head_dim > 0) {
    const double s = double(train.seq_len), d = double(m.head_dim);
    const double f = 4.0 * s * s * d * (s + 1) / (2 * s);
    if (f < at.flops.front() || f > at.flops.back()) {
      char held[96] = "";
      if (a.sustained_attention_ratio > 0)
        std::snprintf(held, sizeof held, ", held to %.3f of it at the power cap (sustained_attention_ratio)",
                      a.sustained_attention_ratio);
      char b[416];
      std::snprintf(b, sizeof b,
                    "attention: one head at sequence %lld, head_dim %lld (%s) is outside the attention kernels %s "
                    "measured (%s to %s): the table's nearest end is used%s",
                    (long long)train.seq_len, (long long)m.head_dim, gflop(f).c_str(), hw.name.c_str(),
                    gflop(at.flops.front()).c_str(), gflop(at.flops.back()).c_str(), held);
      notes.push_back(b);
    }
  }
  if (a.xent_fwd_ns_per_logit > 0 && a.xent_vocab_max > 0) {
    const double v = double(m.vocab) / t;
    if (v < double(a.xent_vocab_min) || v > double(a.xent_vocab_max)) {
      char b[320];
      std::snprintf(b, sizeof b,
                    "cross-entropy: a vocabulary slice of %.0f tokens is outside the vocabularies %s measured (%lld to "
                    "%lld): the median time per logit is used",
                    v, hw.name.c_str(), (long long)a.xent_vocab_min, (long long)a.xent_vocab_max);
      notes.push_back(b);
    }
  }
  return notes;
}

}  // namespace loom
