// GEMM times: the efficiency table's measured shapes come back as measured,
// other shapes by the waves of their output relative to the shapes the table
// measured (table_wave_efficiency), against hand calculations and against
// XLA's per-shape timings; the power cap over large GEMMs.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/compute_model.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

TEST(ComputeModel, GemmTimeReproducesMeasuredCubesAndQuantizesOtherShapes) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  // The short-run table alone (PowerCapBoundsLargeGemms checks the cap).
  hw.accel.sustained_gemm_bf16_flops = 0;
  // The measurements the H100 table comes from (XLA's sm_90 matmul table,
  // bf16, near-square): 1024^3 236 TFLOP/s, 2048^3 632, 4096^3 783. A cube is
  // the shape measured, so its time comes back as measured: no second wave
  // correction and no second launch cost on top.
  const std::pair<double, double> measured[] = {{1024, 236e12}, {2048, 632e12}, {4096, 783e12}};
  for (auto [n, rate] : measured) {
    const double t = gemm_time_s(hw, Precision::kBf16, n, n, n);
    EXPECT_NEAR(2 * n * n * n / t / rate, 1.0, 0.02) << n << "^3";
  }
  // Wave quantization, by hand: 132 SMs, 256x128 tiles. An 8192 x 4352 output
  // is 32 x 34 = 1088 tiles = 8.24 waves -> 9 waves, 1088/1188 = 0.9158 busy;
  // the cube of the same FLOPs (K = 4096^3 / (8192 * 4352)) is 4096^2: 512
  // tiles = 3.88 -> 4 waves, 512/528 = 0.9697, which the measured 0.79 at
  // 137 GFLOP already contains. So this GEMM runs at 0.79 * 0.9158/0.9697 =
  // 0.7461 of 989 TFLOP/s = 737.9 TFLOP/s.
  const double k = 4096.0 * 4096 * 4096 / (8192.0 * 4352);
  const double rate = 2 * 8192.0 * 4352 * k / gemm_time_s(hw, Precision::kBf16, 8192, 4352, k);
  EXPECT_NEAR(rate / 737.9e12, 1.0, 0.005);
  // Fewer output tiles than SMs (a skinny GEMM: 128 x 4096 = 32 tiles):
  // cuBLAS splits K or picks smaller tiles, and the table's rate at those
  // FLOPs stands (0.79 at 137 GFLOP: 781 TFLOP/s), not 32/132 of it.
  const double skinny_k = 4096.0 * 4096 * 4096 / (128.0 * 4096);
  const double skinny = 2 * 128.0 * 4096 * skinny_k / gemm_time_s(hw, Precision::kBf16, 128, 4096, skinny_k);
  EXPECT_NEAR(skinny / 781e12, 1.0, 0.01);
  // Small GEMMs run far from the peak (the table's fixed cost per GEMM).
  double small = gemm_time_s(hw, Precision::kBf16, 64, 64, 64);
  EXPECT_GT(small / (2.0 * 64 * 64 * 64), 5 * gemm_time_s(hw, Precision::kBf16, 4096, 4096, 4096) / (2.0 * 4096 * 4096 * 4096));
}

// Non-square shapes the H100 table was not built from: the short-run table
// and the wave model against XLA's own per-shape timings of them (openxla/xla
// xla/service/gpu/model/default_matmul_perf_table.txtpb @ 336bb15c, section
// sm_90, bf16xbf16->bf16, b = 1; docs/validation/kernel_measurements_sources.md
// section 2.2). These are the shapes with every side >= 1024 that are not
// permutations of the table's near-square points. Every one is within 5%,
// the worst 1024 x 1024 x 4096 at +4.6%, with the waves taken relative to
// the shapes the table measured (table_wave_efficiency); relative to a cube of
// the same FLOPs, as before stop 46, 4096 x 4096 x 1024 came out +16.7%.
// Not covered, and known to be optimistic: outputs under one wave with a deep
// K (512 x 256 x 4096: 92.8 TFLOP/s measured, 144 priced) and K = 256.
TEST(ComputeModel, GemmTimeMatchesMeasuredNonSquareShapes) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  hw.accel.sustained_gemm_bf16_flops = 0;  // short-run timings, as the table's
  struct Shape {
    double m, n, k, tflops;
  };
  const Shape measured[] = {{1024, 4096, 1024, 494.4}, {1024, 4096, 2048, 639.1}, {1024, 1024, 4096, 472.6},
                            {1024, 2048, 4096, 665.7}, {1024, 4096, 4096, 751.9}, {2048, 4096, 1024, 596.5},
                            {2048, 1024, 4096, 663.6}, {4096, 1024, 1024, 497.6}, {4096, 2048, 1024, 604.6},
                            {4096, 4096, 1024, 685.2}, {4096, 1024, 2048, 643.7}, {4096, 1024, 4096, 751.7}};
  for (const Shape& x : measured) {
    const double rate = 2 * x.m * x.n * x.k / gemm_time_s(hw, Precision::kBf16, x.m, x.n, x.k);
    EXPECT_NEAR(rate / (x.tflops * 1e12), 1.0, 0.06) << x.m << " x " << x.n << " x " << x.k;
  }
}

TEST(ComputeModel, PowerCapBoundsLargeGemms) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  // huggingface/gpu-fryer's README: an 8192^3 bf16 cuBLASLt GEMM sustains
  // ~730 TFLOP/s on H100 SXM over a whole run, where the short-run table
  // gives 0.80 x 989 = 791. The cap takes the measured long-run rate.
  const double n = 8192;
  EXPECT_NEAR(2 * n * n * n / gemm_time_s(hw, Precision::kBf16, n, n, n) / 730e12, 1.0, 1e-9);
  // A GEMM the table already puts below it is untouched: 1024^3 at 236 TFLOP/s.
  EXPECT_NEAR(2 * 1024.0 * 1024 * 1024 / gemm_time_s(hw, Precision::kBf16, 1024, 1024, 1024) / 236e12, 1.0, 0.02);
  // FP8 sustains 1530 TFLOP/s there, above the best FP8 GEMM mamf-finder
  // measured (1402.6): the FP8 rate stays at that best.
  EXPECT_NEAR(2 * n * n * n / gemm_time_s(hw, Precision::kFp8, n, n, n) / 1402.6e12, 1.0, 0.002);
  // The same GEMM without the cap runs at the table's plateau.
  HwProfile burst = hw;
  burst.accel.sustained_gemm_bf16_flops = 0;
  EXPECT_NEAR(2 * n * n * n / gemm_time_s(burst, Precision::kBf16, n, n, n) / (0.80 * 989e12), 1.0, 1e-9);
  // A100 sustains its short-run rate (gpu-fryer: ~270 TFLOP/s, the table's
  // best is 0.859 x 312 = 268): no change there.
  const HwProfile a100 = testing::load_hw_or_die("dgx-a100-80gb");
  EXPECT_NEAR(2 * n * n * n / gemm_time_s(a100, Precision::kBf16, n, n, n) / (0.859 * 312e12), 1.0, 0.01);
}

// The waves the efficiency table already holds, by hand for H100 (132 SMs,
// 256 x 128 tiles): 4096^3 is a 4096 x 4096 output, 512 tiles in 4 waves =
// 512/528; 2048 x 2048 x 4096 averages its three outputs, 2048 x 2048 (128
// tiles, under a wave: counted full) and twice 2048 x 4096 (256 tiles in 2
// waves = 256/264), (1 + 2 x 0.9697)/3; two batches of 4096^3 are 1024 tiles
// in 8 waves = 1024/1056; between chain points linear in FLOPs.
TEST(ComputeModel, TableWavesAreThoseOfTheMeasuredChainShapes) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const AcceleratorSpec& a = hw.accel;
  const double f36 = 2.0 * 4096 * 4096 * 4096, f34 = 2.0 * 2048 * 2048 * 4096;
  EXPECT_NEAR(a.table_wave_efficiency(f36), 512.0 / 528, 1e-12);
  EXPECT_NEAR(a.table_wave_efficiency(f34), (1 + 2 * 256.0 / 264) / 3, 1e-12);
  EXPECT_NEAR(a.table_wave_efficiency(2 * f36), 1024.0 / 1056, 1e-12);
  EXPECT_NEAR(a.table_wave_efficiency(1.5 * f34),
              0.5 * a.table_wave_efficiency(f34) + 0.5 * a.table_wave_efficiency(2 * f34), 1e-12);
  // A measured chain shape comes back as measured: 2048 x 4096 x 2048 is an
  // orientation of the 2048 x 2048 x 4096 point, its wave ratio is its own
  // 256/264 over that mean.
  EXPECT_NEAR(a.relative_wave_efficiency(2048, 4096, 2048), (256.0 / 264) / ((1 + 2 * 256.0 / 264) / 3), 1e-12);
  // Small outputs and CPUs: no correction.
  EXPECT_EQ(a.relative_wave_efficiency(512, 512, 65536), 1.0);
  AcceleratorSpec cpu;
  EXPECT_EQ(cpu.table_wave_efficiency(f36), 1.0);
}

TEST(ComputeModel, WaveQuantization) {
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");  // 108 SMs, 256x128 tiles
  ASSERT_EQ(hw.accel.sm_count, 108);
  // 12 x 9 = 108 tiles: one full wave.
  EXPECT_DOUBLE_EQ(hw.accel.wave_efficiency(256 * 12, 128 * 9), 1.0);
  // 218 tiles (either orientation) need a third, nearly empty wave.
  EXPECT_NEAR(hw.accel.wave_efficiency(256 * 109, 256), 218.0 / 324.0, 1e-12);
  // Megatron 1T's QKV GEMM per TP rank (2048 x 9600): the better tiling has
  // 16 x 38 = 608 tiles in 6 waves of 108.
  EXPECT_NEAR(hw.accel.wave_efficiency(2048, 9600), 608.0 / 648.0, 1e-12);
  // CPUs have no waves.
  HwProfile cpu = testing::load_hw_or_die("cpu-local");
  EXPECT_DOUBLE_EQ(cpu.accel.wave_efficiency(100, 100), 1.0);
}

}  // namespace
}  // namespace loom
