// HwProfile: one cluster's hardware as the cost models see it.
//
// Read from hwprofiles/*.json (format: docs/formats/hwprofile.md). Every
// number carries its unit in its key (`memory_gib`, `memory_bw_gb_per_s`,
// `nic_bw_gbit_per_s`, `latency_us`) and every section has a `source` saying
// where the numbers come from (datasheet, microbenchmark, nccl-tests run,
// calibration). Efficiency factors come from hardware measurements, never from
// fitting published training runs.
//
// Units inside the struct: bytes, bytes/s, FLOP/s, seconds (SI, 1 GB = 1e9 B).
// Thread-safety: an immutable value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/gemm_shape_grid.h"
#include "core/status.h"

namespace loom {

enum class Precision { kFp32, kBf16, kFp16, kFp8 };
const char* precision_name(Precision p);
Result<Precision> parse_precision(const std::string& text);
// Bytes of one activation or 16/32-bit weight element in `p`: 4 in fp32, 2
// otherwise (fp8 training keeps 16-bit activations and weights; its fp8
// GEMM copies are costed where they are made). The one definition the
// simulator's compute, memory and communication models use.
inline double element_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

// GEMM efficiency (achieved / peak) as a function of the GEMM's work. Points
// are (flops, efficiency) sorted by flops; lookups interpolate linearly in
// log(flops) and clamp at both ends.
//
// Optional `forward_share`, one per point: the forward GEMM's share of the
// three passes' time (forward y = x W^T, input gradient, weight gradient), as
// `loom calibrate` measures it; the efficiency is the three passes' mean rate.
// Empty: the three run at one rate (share 1/3), as cuBLAS's best kernels do
// on large GEMMs.
struct GemmEfficiencyTable {
  std::vector<double> flops;
  std::vector<double> efficiency;
  std::vector<double> forward_share;
  double lookup(double gemm_flops) const;
  double forward_share_at(double gemm_flops) const;  // 1/3 without measured shares
};

struct AcceleratorSpec {
  std::string name;         // "H100-SXM5-80GB"
  int sm_arch = 0;          // 80 Ampere, 90 Hopper, 100 Blackwell; 0 = CPU
  double peak_fp32_flops = 0;  // FLOP/s, dense; fp32 is the CUDA-core rate
  double peak_bf16_flops = 0;
  double peak_fp16_flops = 0;
  double peak_fp8_flops = 0;   // 0 when the device has none
  double memory_bytes = 0;     // HBM capacity
  double memory_bw_bytes_per_s = 0;
  double memory_bw_efficiency = 1;  // achievable fraction for streaming kernels
  // The optimizer step's streaming kernels (grad norm, AdamW, grad zeroing);
  // 0 = as memory_bw_efficiency. `loom calibrate` measures it on CPUs, where
  // AdamW's sqrt and division keep it below the memory rate.
  double optimizer_bw_efficiency = 0;
  // The rate at which memory the executor discarded (ComputeBackend::discard:
  // ZeRO-2/3's full gradient after its reduce-scatter) is written again, over
  // what the same write costs undiscarded: bytes / extra second. `loom
  // calibrate` measures it (a CPU: the OS takes the pages back and zero-fills
  // each on its next touch). 0 = not measured: a discard is one memset pass
  // at memory_bw x memory_bw_efficiency, as the CUDA backend's is.
  double discard_bytes_per_s = 0;
  GemmEfficiencyTable gemm_efficiency;
  // Optional: 16-bit GEMM throughput measured per shape (core/gemm_shape_grid.h).
  // Where given, a GEMM's time is the model's times the measured over the
  // modelled time at the grid points around the nearest held shape,
  // interpolated in their logs (sim/gemm_time.cc): the measurement at a grid
  // point, the model with the measured correction between points and, held at
  // the grid's edge, beyond it.
  GemmShapeGrid gemm_shapes;
  // The best FP8 GEMM efficiency measured (achieved / peak_fp8), e.g. the
  // maximum achievable matmul FLOPS of torch._scaled_mm (cuBLASLt). An FP8
  // GEMM runs the same output tiles as the 16-bit GEMM with half as many
  // K-steps (each FP8 MMA instruction covers twice the K at twice the rate),
  // so its efficiency at F FLOPs follows the 16-bit table at F/2, capped here.
  // 0 = the 16-bit table's best.
  double fp8_gemm_best_efficiency = 0;
  // Optional: the throughput a large GEMM holds at the device's power cap
  // on non-constant data (FLOP/s; the bf16 figure serves fp16 too). A short
  // microbenchmark runs at boost clocks before the power limit pulls them
  // down, so a GEMM table measured that way can sit above
  // what training sustains; every GEMM's efficiency is capped at
  // sustained / peak of its precision. 0 = not measured (no cap).
  double sustained_gemm_bf16_flops = 0, sustained_gemm_fp8_flops = 0;
  // That cap as a fraction of peak_flops(p); 1 when not measured.
  double sustained_gemm_efficiency(Precision p) const;
  // Optional: the attention kernel's forward efficiency, keyed
  // by one head's forward FLOP (causal share included). Empty: the attention
  // core runs at the GEMM table's rate (fused flash kernels on GPUs). `loom
  // calibrate` measures it on CPUs, where the softmax's exp is not hidden
  // behind the matrix products.
  GemmEfficiencyTable attention_efficiency;
  // Optional, beside attention_efficiency: the same kernel without a mask,
  // keyed by one head's forward FLOP 4 s^2 d (no causal share). A causal
  // kernel skips the masked blocks but runs the diagonal ones partly
  // masked, so for the same FLOP it runs below the unmasked rate, most at
  // short sequences. Context parallelism's ring runs all its steps but the
  // first without a mask (docs/simulator.md 3.2b). Empty: unmasked kernels
  // take the causal table.
  GemmEfficiencyTable attention_efficiency_no_mask;
  // Optional, measured by `loom calibrate`: the LM head's GEMMs (tokens x
  // vocabulary x hidden: a short reduction in the weight gradient and a wide
  // output), keyed by their forward FLOP like gemm_efficiency. Empty: the
  // head runs at the gemm_efficiency table's rate.
  GemmEfficiencyTable head_gemm_efficiency;
  // The narrowest vocabulary that table is measured at, and used for: a
  // narrower head (a byte-level vocabulary) is a layer-shaped GEMM.
  static constexpr int64_t kHeadGemmMinVocab = 4096;
  // Optional: the rate a fused attention kernel holds run back to back at the
  // device's power cap, over the rate it bursts at when timed alone (a
  // measured fraction in (0, 1]). The attention tables are short
  // microbenchmarks: where the part throttles its clock under continuous
  // tensor-core load, a training step's attention runs at this share of
  // them. 0 = not measured (the tables' rates as they stand).
  double sustained_attention_ratio = 0;
  // That ratio, 1 when not measured.
  double sustained_attention_share() const { return sustained_attention_ratio > 0 ? sustained_attention_ratio : 1.0; }
  // Optional: the share of the main gradient's read and write that shows in
  // a weight-gradient GEMM accumulating into it (beta = 1, an fp32 C), over
  // the same GEMM writing a 16-bit output: its extra time times the
  // streaming rate over 8 bytes an output element, in [0, 1] (gpu-validate
  // stage 6c measures it). -1 = not measured: all of it, as DeepGEMM's
  // accumulating kernels show it (sim: SimOptions::wgrad_gemm_accumulate).
  double wgrad_accumulate_exposed = -1;
  double wgrad_accumulate_share() const { return wgrad_accumulate_exposed >= 0 ? wgrad_accumulate_exposed : 1.0; }
  // Backward / forward time of the attention kernel; 0 = 2.5 for flash-style
  // kernels (scores recomputed), 2 for materialized scores. CPU kernels measure
  // about 1.2-1.3 (`loom calibrate`).
  double attention_backward_ratio = 0;
  // Optional: which attention kernel (and release) attention_efficiency and
  // attention_backward_ratio measure, e.g. "cudnn-9.19"; the other kernels
  // measured on this device sit in attention_kernels under their names. A run
  // whose stack ran another kernel (an older cuDNN, FlashAttention-2) selects
  // it with select_attention_kernel. Empty when the profile names none.
  std::string attention_kernel;
  struct AttentionKernel {
    GemmEfficiencyTable efficiency;
    double backward_ratio = 0;
    std::string source;
    GemmEfficiencyTable efficiency_no_mask;  // attention_efficiency_no_mask's; may be empty
  };
  std::map<std::string, AttentionKernel> attention_kernels;  // the others, by name
  // Optional: how much faster the profile's attention kernel runs with FP8
  // inputs than in 16 bits (Transformer Engine's fp8_dot_product_attention
  // through cuDNN), measured on this device by the same benchmark as
  // attention_efficiency: FP8 over BF16 throughput of a causal head-dim-128
  // forward and backward, by sequence length. Read by the kernel's query
  // length, interpolated in log(sequence) and held at the ends. Empty: no
  // measurement, and FP8 attention is priced as the 16-bit kernel.
  struct Fp8AttentionSpeedup {
    std::vector<double> seq, forward, backward;
    double at(const std::vector<double>& ratio, double s) const;
    double forward_at(double s) const { return at(forward, s); }
    double backward_at(double s) const { return at(backward, s); }
    bool empty() const { return seq.empty(); }
  };
  Fp8AttentionSpeedup fp8_attention_speedup;
  std::string fp8_attention_speedup_source;
  // Where the table in use comes from when select_attention_kernel put
  // another kernel in use; empty: accelerator.source describes it.
  std::string attention_kernel_source;
  // Wave quantization: a GEMM runs as ceil(m/tile_m)*ceil(n/tile_n) output
  // tiles over `sm_count` SMs; a partly filled last wave idles SMs (NVIDIA,
  // "Matrix Multiplication Background", tile and wave quantization). The
  // efficiency table is measured on near-square shapes with their own waves
  // (relative_wave_efficiency).
  // sm_count = 0 turns the correction off (CPUs).
  int sm_count = 0;
  int gemm_tile_m = 256, gemm_tile_n = 128;
  // CPU profiles: the compute threads per rank the figures are for (`loom
  // calibrate --threads`; may be a fraction of a core). The executor's MFU
  // takes the peak of the threads it actually runs: peak x threads /
  // cpu_threads. 0 = not stated (GPUs).
  double cpu_threads = 0;
  // Measured by `loom calibrate` on the executor's kernels: the vocabulary
  // cross-entropy's time per logit, forward (row max, sum of exponentials,
  // loss) and backward (the logits' gradient), and the vocabularies measured
  // [min, max]. 0 = not measured: the loss is priced as memory traffic.
  double xent_fwd_ns_per_logit = 0, xent_bwd_ns_per_logit = 0;  // ns: an exact JSON round trip
  int64_t xent_vocab_min = 0, xent_vocab_max = 0;
  // Output tiles of an m x n GEMM in the better orientation of gemm_tile.
  double output_tiles(double m, double n) const;
  // Fraction of the SMs busy over the waves of an m x n output: 1 when full.
  double wave_efficiency(double m, double n) const;
  // The waves of the shapes the efficiency table measured at `flops`
  // (table_wave_efficiency), which its rates already include: XLA's
  // near-square chain of powers of two (a^3, a x a x 2a, a x 2a x 2a, up to
  // 4096^3, then b = 2, 4, ... batches of 4096^3), each (m, n) orientation of
  // a chain shape alike (the tables are the mean over them), an output under
  // one wave counted as full; interpolated linearly in FLOPs between chain
  // points (which double).
  double table_wave_efficiency(double flops) const;
  // The wave quantization of an m x n output relative to those shapes: 1 for
  // a measured shape's mean, below 1 for a shape that fills its last wave
  // worse. 1 when the output has fewer tiles than one wave: cuBLAS then picks
  // smaller tiles or split-K, and the table's small-GEMM points measured
  // what it does.
  double relative_wave_efficiency(double m, double n, double k) const;
  // The matmul peak for that precision. A precision the device lacks (0 above)
  // falls back to the next wider one it has (fp8 -> bf16 -> fp32), so the
  // result is never 0 for a parsed profile; check supports() to reject plans.
  double peak_flops(Precision p) const;
  bool supports(Precision p) const;  // the device has a nonzero peak for p
  std::string source;
};

// Measured time of one collective by message size on one group of `ranks`
// ranks (loom calibrate's nccl-tests-style sweep). Lookups interpolate in
// log(bytes)/log(time) between points, keep the smallest message's time below
// it (latency-bound) and scale the largest's linearly above it
// (bandwidth-bound).
struct CommTimeTable {
  std::vector<double> bytes;   // nccl-tests convention (sim/comm_model.h)
  std::vector<double> time_s;
  double lookup(double b) const;
};

// Every collective loom calibrate measured, keyed by name ("all_reduce",
// "reduce_scatter", "all_gather", "all_to_all", "send_recv").
struct MeasuredCollectives {
  int ranks = 0;  // 0: none measured
  std::map<std::string, CommTimeTable> tables;
  const CommTimeTable* find(const std::string& name) const {
    auto it = tables.find(name);
    return it == tables.end() ? nullptr : &it->second;
  }
};

struct NodeSpec {
  int devices_per_node = 8;
  // Intra-node fabric, per device per direction (NVLink aggregate, or PCIe).
  std::string fabric = "nvswitch";          // "nvswitch", "nvlink", "pcie", "shm"
  double intra_bw_bytes_per_s = 0;          // e.g. H100: 18 links x 25 GB/s = 450e9
  // What NCCL's topology search reaches on this fabric: the bus bandwidth of a
  // ring over the whole node (nccl-tests all-reduce busbw for large messages).
  double intra_ring_busbw_bytes_per_s = 0;
  double intra_latency_s = 0;               // per hop
  bool nvls = false;                        // NVLink SHARP (NVSwitch 3+)
  int nvlink_domain_size = 0;               // devices that share NVLink (72 on NVL72); 0 = node
  double pcie_bw_bytes_per_s = 0;           // host <-> device, per device
  // The channels NCCL opens a peer for send/recv within this node (its
  // p2pnChannelsPerPeer); 0 = not stated: NCCL's point-to-point buffers are
  // not counted (sim/nccl_buffers.h).
  int nccl_p2p_channels_per_peer = 0;
  // Optional (calibrated CPU profiles): measured collective times, which the
  // comm model uses instead of its latency + bandwidth formula for groups on
  // one node.
  MeasuredCollectives measured;
  std::string source;
};

struct NetworkSpec {
  int nics_per_node = 0;
  double nic_bw_bytes_per_s = 0;            // per NIC per direction (400 Gbit/s -> 50e9)
  double latency_s = 0;                     // one network hop, end to end
  std::string topology = "fat-tree";        // "fat-tree", "rail-optimized", ...
  std::string cpu_vendor = "intel";         // NCCL's LL cap quirk keys on it
  double node_bw_bytes_per_s() const { return nics_per_node * nic_bw_bytes_per_s; }
  std::string source;
};

struct HwProfile {
  std::string name;            // file stem, e.g. "dgx-h100"
  std::string description;
  std::string nccl_version;    // the NCCL release whose constants the comm model mimics
  AcceleratorSpec accel;
  NodeSpec node;
  NetworkSpec net;
  bool is_cpu() const { return accel.sm_arch == 0; }
};

// Makes `name` the profile's attention kernel: its table and backward ratio
// become attention_efficiency and attention_backward_ratio, and the kernel
// they replace moves into attention_kernels, so the profile (and a plan that
// embeds it) still holds every measurement. The current kernel's name is a
// no-op. kInvalidArgument naming the kernels the profile has otherwise.
Status select_attention_kernel(HwProfile* hw, const std::string& name);
// "cudnn-9.19 (in use), cudnn-2024-07, fa2": the profile's attention kernels.
std::string attention_kernel_names(const HwProfile& hw);

// Parses hwprofile JSON text. Errors name the key and its expected unit
// ("hwprofile dgx-h100: accelerator.memory_gib must be a positive number").
Result<HwProfile> parse_hw_profile(const std::string& json_text, const std::string& name);
// Reads a file; a bare name is looked up as hwprofiles/<name>.json as well.
Result<HwProfile> load_hw_profile(const std::string& path_or_name);
std::string hw_profile_to_json(const HwProfile& hw);
// The profile as its JSON reads back: unit conversions (GB/s <-> bytes/s)
// can move a computed value by an ulp, and a plan's hardware hash must be
// the same when the plan is written and when it is read.
HwProfile canonical_hw_profile(const HwProfile& hw);

}  // namespace loom
