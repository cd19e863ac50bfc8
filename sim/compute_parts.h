// Parts the compute model's pieces share (sim/compute_model.cc for the
// layers, sim/model_ends_cost.cc for the embedding, the head, the MTP
// projection and the step's memory passes): the memory-bound time of a pass
// and the GEMM accumulator. Internal to sim/.
#pragma once

#include "sim/compute_model.h"

namespace loom::compute_parts {

// Memory-bound time of moving `bytes` through HBM, plus kernel overheads.
inline double mem_time_s(const HwProfile& hw, const SimOptions& opt, double bytes, int kernels) {
  double bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  return bytes / bw + kernels * opt.kernel_overhead_s;
}

// Bytes of one main-gradient element: fp32 in an fp32 run or with
// fp32_main_grads (Megatron's convention), else the 16-bit type.
inline double main_grad_bytes(const SimOptions& opt, Precision p) {
  return (p == Precision::kFp32 || opt.fp32_main_grads) ? 4.0 : 2.0;
}

// Extra HBM bytes of weight-gradient GEMMs that add into the main gradient
// in their epilogue (SimOptions::wgrad_gemm_accumulate), for `weights`
// elements of their outputs: a read and a write of the main gradient each
// (fp32 main gradients: 8 bytes; 16-bit: 4), taken as exposed. Source:
// DeepGEMM's accumulating FP8 weight-gradient kernels (deepseek-ai/DeepGEMM
// PR #95, H800) take 2.85 ns an output element longer than its plain GEMMs
// of the same layers (README @327ec92f): 335 us on 16384 x 7168 outputs,
// 85 us on 7168 x 4096, the time of 8 bytes at 2.8 TB/s (the plain kernel's
// own 16-bit store hidden behind its next tile). That cuBLAS's BF16 and
// Transformer Engine's FP8 accumulating GEMMs expose it as well is
// [INFERRED]; gpu-validate stage 6c measures it, and a profile that holds
// the measured share (AcceleratorSpec::wgrad_accumulate_exposed) scales it
// (docs/simulator.md §3.3).
inline double wgrad_accumulate_bytes(const HwProfile& hw, const SimOptions& opt, Precision p, double weights) {
  if (!opt.wgrad_gemm_accumulate) return 0;
  return weights * 2 * main_grad_bytes(opt, p) * hw.accel.wgrad_accumulate_share();
}

// Splits three passes' time (the table's mean rate x 3) into forward and
// backward (input + weight gradient) by the table's measured forward share
// at those FLOPs (1/3 where none is measured).
inline void split_passes(const GemmEfficiencyTable& t, double three_passes_s, double lookup_flops, double* fwd_s,
                  double* bwd_s) {
  const double share = t.forward_share_at(lookup_flops);
  *fwd_s += three_passes_s * share;
  *bwd_s += three_passes_s * (1 - share);
}

// Accumulates GEMMs of a piece: forward and backward (dgrad + wgrad).
struct GemmSum {
  const HwProfile& hw;
  Precision p;
  const SimOptions& opt;
  double fwd_s = 0, bwd_s = 0, fwd_flops = 0;
  // FP8 linears: elements of their inputs (cast in forward), of their output
  // gradients (cast in backward), and of their weights (cast once a step).
  double fp8_inputs = 0, fp8_output_grads = 0, fp8_weights = 0;
  int fp8_casts = 0;  // cast kernels per tensor kind (one per linear or grouped kernel)
  // Elements of the weights of every GEMM added (their weight gradients' outputs).
  double weight_elems = 0;
  // Weight GEMM: activations (m x k) times weights (k x n), `count` alike. No
  // launch cost on top: the efficiency table's timings include each GEMM's
  // fixed cost. A linear that FP8 training keeps in 16 bits passes
  // fp8_layer = false.
  void weight(double m, double n, double k, double count = 1, bool fp8_layer = true) {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
    const Precision gp = fp8_layer ? p : sixteen_bit(p);
    add(count * gemm_time_s(hw, gp, m, n, k), gp, count, int(count), m, n, k);
  }
  // A tensor-parallel linear under Transformer Engine's userbuffers
  // (SimOptions::tp_comm_overlap, sim/tp_overlap.h), `count` alike: each
  // pass priced as its overlap runs it, relative to the plain GEMM of its own
  // shape (forward m x n x k, input gradient m x k x n, weight gradient
  // n x k x m). `fprop` / `dgrad` / `wgrad` are the layer's settings for
  // that pass, null where the pass runs alone; `t` the TP size.
  void ub_linear(double m, double n, double k, double count, double t, const UbGemm* fprop, const UbGemm* dgrad,
                 const UbGemm* wgrad) {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
    const double whole = gemm_time_s(hw, p, m, n, k);
    const double f_f = ub_factor(fprop, t, m, n, k);
    const double f_b = 0.5 * (ub_factor(dgrad, t, m, k, n) + ub_factor(wgrad, t, n, k, m));
    const bool fp8 = p == Precision::kFp8 && hw.accel.supports(Precision::kFp8);
    const double share = hw.accel.gemm_efficiency.forward_share_at((fp8 ? 1 : 2) * m * n * k);
    fwd_s += count * 3 * whole * share * f_f;
    bwd_s += count * 3 * whole * (1 - share) * f_b;
    count_flops(p, count, int(count), m, n, k);
  }
  // The LM head priced on its own measured table (`loom calibrate`).
  void measured(const GemmEfficiencyTable& t, double peak, double m, double n, double k) {
    const double flops = 2 * m * n * k;
    const double eff = std::min(t.lookup(flops), hw.accel.sustained_gemm_efficiency(sixteen_bit(p)));
    split_passes(t, 3 * flops / (peak * eff), flops, &fwd_s, &bwd_s);
    fwd_flops += flops;
    weight_elems += n * k;
  }
  // The experts of a MoE layer: `groups` GEMMs of (m x k) * (k x n), as one
  // grouped kernel or one GEMM each on the stack's streams
  // (SimOptions::expert_gemm). Their FP8 casts stay one pass over all the
  // groups' elements (TE's split_quantize spreads them over its streams).
  void grouped(double groups, double m, double n, double k) {
    if (m <= 0 || n <= 0 || k <= 0 || groups <= 0) return;
    add(expert_gemms_time_s(hw, p, groups, m, n, k, opt.expert_gemm), p, groups, 1, m, n, k);
  }
  // The casts' memory time of `elements` (inputs in forward, output gradients
  // in backward, weights once a step: cached across micro-batches as
  // Megatron's Transformer Engine layers do with is_first_microbatch).
  double cast_s(double elements) const { return fp8_casts ? fp8_cast_time_s(hw, opt, elements, fp8_casts) : 0; }

 private:
  // One pass of an (rows x cols x depth) GEMM as a userbuffers overlap runs
  // it, over the plain GEMM's time (ub_gemm_time_s): a ring exchange in t
  // slices of its rows (t/2 of twice the rows aggregated), a pipeline in
  // num_splits chunks of its columns, a bulk overlap or an atomic GEMM whole;
  // with set_sm_margin on the SMs the communication leaves it. 1 for a pass
  // that runs alone.
  double ub_factor(const UbGemm* u, double t, double rows, double cols, double depth) const {
    if (!u) return 1.0;
    const double whole = gemm_model_time_s(hw, p, rows, cols, depth);
    if (!(whole > 0)) return 1.0;
    double row_slices = 1, col_slices = 1;  // an atomic GEMM is one kernel signalling its chunks
    if (!u->atomic_gemm && u->method == UbMethod::kRingExchange) row_slices = std::max(1.0, u->aggregate ? t / 2 : t);
    if (!u->atomic_gemm && u->method == UbMethod::kPipeline) col_slices = std::max(1, u->num_splits);
    const int sms = hw.accel.sm_count;
    const double fraction =
        u->set_sm_margin && sms > 0 && u->num_sm < sms ? double(sms - u->num_sm) / double(sms) : 1.0;
    return ub_gemm_time_s(hw, p, rows, cols, depth, row_slices, col_slices, fraction) / whole;
  }
  void count_flops(Precision gp, double gemms, int kernels, double m, double n, double k) {
    fwd_flops += gemms * 2 * m * n * k;
    weight_elems += gemms * k * n;
    if (gp != Precision::kFp8) return;
    fp8_inputs += gemms * m * k;
    fp8_output_grads += gemms * m * n;
    fp8_weights += gemms * k * n;
    fp8_casts += kernels;
  }
  void add(double time_s, Precision gp, double gemms, int kernels, double m, double n, double k) {
    const bool fp8 = gp == Precision::kFp8 && hw.accel.supports(Precision::kFp8);
    split_passes(hw.accel.gemm_efficiency, 3 * time_s, gemms / kernels * (fp8 ? 1 : 2) * m * n * k, &fwd_s, &bwd_s);
    count_flops(gp, gemms, kernels, m, n, k);
  }
};

}  // namespace loom::compute_parts
