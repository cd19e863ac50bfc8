// GEMM times from the profile's efficiency table: one GEMM, a grouped kernel,
// and a MoE layer's expert GEMMs as the stack runs them (declared in
// sim/compute_model.h; docs/simulator.md section 3.1).
#include "sim/compute_model.h"

#include <algorithm>
#include <cmath>

namespace loom {

namespace {

// The ceilings of a GEMM's efficiency: the best the tables measured (FP8:
// the measured FP8 best), and that or the power cap's sustained rate,
// whichever is lower (the table is short microbenchmarks, at boost clocks).
struct GemmCeilings {
  double best = 1.0;  // no shape beats the best measurement
  double cap = 1.0;   // nor, run for long, the power cap
};
GemmCeilings gemm_ceilings(const AcceleratorSpec& a, Precision precision, bool fp8) {
  const GemmEfficiencyTable& t = a.gemm_efficiency;
  GemmCeilings c;
  const double table_best = t.efficiency.empty() ? 1.0 : *std::max_element(t.efficiency.begin(), t.efficiency.end());
  c.best = fp8 && a.fp8_gemm_best_efficiency > 0 ? a.fp8_gemm_best_efficiency : table_best;
  c.cap = std::min(c.best, a.sustained_gemm_efficiency(precision));
  return c;
}

// Efficiency of `groups` GEMMs (m x k) * (k x n) run as one kernel (groups =
// 1: a plain GEMM), before the ceilings: the table's efficiency at the
// kernel's FLOPs (measured on near-square shapes, their waves and fixed cost
// included) times the waves of all the groups' output tiles relative to those
// shapes' (table_wave_efficiency). An FP8 GEMM runs the same output tiles with
// half the K-steps: the 16-bit table at half the FLOPs.
double table_efficiency(const AcceleratorSpec& a, bool fp8, double groups, double m, double n, double k) {
  const double flops = groups * 2 * m * n * k;
  const double depth = fp8 ? k / 2 : k;
  double wave = 1.0;
  if (groups <= 1) {
    wave = a.relative_wave_efficiency(m, n, depth);
  } else if (a.sm_count > 0) {
    const double tiles = groups * a.output_tiles(m, n);
    if (tiles >= a.sm_count)
      wave = tiles / (std::ceil(tiles / a.sm_count) * a.sm_count) /
             a.table_wave_efficiency(2 * groups * m * n * depth);
  }
  return a.gemm_efficiency.lookup(fp8 ? flops / 2 : flops) * wave;
}

// Its time, never above the best the table measured (FP8: the measured FP8
// best) nor the power cap's sustained rate.
double gemm_kernel_time_s(const HwProfile& hw, Precision precision, double groups, double m, double n, double k) {
  const AcceleratorSpec& a = hw.accel;
  const bool fp8 = precision == Precision::kFp8 && a.supports(Precision::kFp8);
  const double eff = std::min(gemm_ceilings(a, precision, fp8).cap, table_efficiency(a, fp8, groups, m, n, k));
  return groups * 2 * m * n * k / (a.peak_flops(precision) * eff);
}

}  // namespace

double gemm_model_time_s(const HwProfile& hw, Precision precision, double m, double n, double k) {
  return gemm_kernel_time_s(hw, precision, 1, m, n, k);
}

namespace {

// `groups` GEMMs run as one kernel with the profile's per-shape grid: the
// model's time times the measured over the modelled time at the grid points
// around the nearest held shape, interpolated in their logs (the model keeps
// the waves of the kernel's own output between the points). A grouped kernel
// is held as the GEMM of its stacked rows (groups x m), as the grid's batches
// are; groups = 1 is the plain GEMM.
double grid_corrected_time_s(const HwProfile& hw, Precision precision, double groups, double m, double n, double k) {
  const double model = gemm_kernel_time_s(hw, precision, groups, m, n, k);
  const AcceleratorSpec& a = hw.accel;
  const GemmShapeGrid& grid = a.gemm_shapes;
  if (grid.empty() || precision == Precision::kFp32 || !(model > 0)) return model;  // the grid is 16-bit
  // An FP8 GEMM runs the 16-bit GEMM's output tiles with half the K-steps.
  const bool fp8 = precision == Precision::kFp8 && a.supports(Precision::kFp8);
  const double depth = fp8 ? 2.0 : 1.0;
  const double peak = a.peak_flops(precision);
  const double ceiling = peak * gemm_ceilings(a, precision, fp8).cap;
  // A measured time as an efficiency of the part measured (the grid's own
  // peak on another part: GB200 reads B200's), at this precision's peak; FP8
  // at twice the FLOPs of its half-depth 16-bit GEMM.
  const double measured_peak = grid.measured_peak_flops > 0 ? grid.measured_peak_flops : a.peak_bf16_flops;
  const double part = measured_peak * depth / peak;
  // The correction is measured over modelled at the corners, both before the
  // ceilings, and the ceilings come once, at the kernel's own shape. Taken
  // after them, a corner held at a ceiling would read 1 and pass the
  // uncorrected model on to a kernel below it: a lower cap would make such a
  // kernel faster.
  auto free_time = [&](double g, double rows, double cols, double depth_k) {
    const double e = table_efficiency(a, fp8, g, rows, cols, depth_k);
    return e > 0 ? g * 2 * rows * cols * depth_k / (peak * e) : 0.0;
  };
  const double model_free = free_time(groups, m, n, k);
  if (!(model_free > 0)) return model;
  GemmShapeGrid::Corner c[16];
  const int count = grid.corners(grid.nearest(groups * m, n, k / depth), c);
  double log_ratio = 0;
  for (int i = 0; i < count; ++i) {
    const GemmShapeGrid::Shape& s = c[i].shape;
    const double measured = c[i].time_s * part;
    const double modelled = free_time(1, s.rows(), s.cols(), s.k * depth);
    if (!(measured > 0) || !(modelled > 0)) return model;
    log_ratio += c[i].weight * std::log(measured / modelled);
  }
  return std::max(model_free * std::exp(log_ratio), groups * 2 * m * n * k / ceiling);
}

}  // namespace

double gemm_time_s(const HwProfile& hw, Precision precision, double m, double n, double k) {
  return grid_corrected_time_s(hw, precision, 1, m, n, k);
}

double ub_gemm_time_s(const HwProfile& hw, Precision precision, double m, double n, double k, double row_slices,
                      double col_slices, double sm_fraction) {
  const double flops = 2 * m * n * k;
  if (!(flops > 0)) return 0;
  const AcceleratorSpec& a = hw.accel;
  const bool fp8 = precision == Precision::kFp8 && a.supports(Precision::kFp8);
  const double wave = a.relative_wave_efficiency(m, n, fp8 ? k / 2 : k);
  const double piece = flops / (std::max(1.0, row_slices) * std::max(1.0, col_slices));
  const GemmCeilings c = gemm_ceilings(a, precision, fp8);
  const double fraction = std::clamp(sm_fraction, 1e-3, 1.0);  // a guard: callers give (SMs - num_sm) / SMs > 0
  const double eff = std::min(c.cap, std::min(c.best, a.gemm_efficiency.lookup(fp8 ? piece / 2 : piece) * wave) * fraction);
  return flops / (a.peak_flops(precision) * eff);
}

double grouped_gemm_time_s(const HwProfile& hw, Precision precision, double groups, double m, double n, double k) {
  if (groups <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  return grid_corrected_time_s(hw, precision, groups, m, n, k);
}

double expert_gemms_time_s(const HwProfile& hw, Precision precision, double groups, double m, double n, double k,
                           ExpertGemm how) {
  if (groups <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  const double grouped = grouped_gemm_time_s(hw, precision, groups, m, n, k);
  if (how == ExpertGemm::kGrouped) return grouped;
  return std::max(grouped, groups * gemm_time_s(hw, precision, m, n, k));
}

}  // namespace loom
