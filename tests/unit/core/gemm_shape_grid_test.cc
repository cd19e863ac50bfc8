// The per-shape GEMM grid (core/gemm_shape_grid.h): read back against the
// source's numbers, interpolated as stated, its shapes clamped and batched as
// stated, and the premise behind the batching checked on the measurements.
#include "core/gemm_shape_grid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/hw_profile.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

// XLA's sm_90 table (openxla/xla default_matmul_perf_table.txtpb @ 336bb15c,
// bf16xbf16->bf16) as the H100 profile carries it, to 4 significant figures:
// b=1 256 x 256 x 512 at 11459846994535 FLOP/s, 256 x 4096 x 4096 at
// 418449658612626, 512 x 2048 x 2048 at 342829445721583. A grid point is
// its own only corner.
TEST(GemmShapeGrid, TheH100GridReadsBackTheSourcesNumbers) {
  const GemmShapeGrid& g = testing::load_hw_or_die("dgx-h100").accel.gemm_shapes;
  ASSERT_FALSE(g.empty());
  auto rate = [&](double m, double n, double k) {
    GemmShapeGrid::Corner c[16];
    EXPECT_EQ(g.corners(g.nearest(m, n, k), c), 1);
    EXPECT_EQ(c[0].weight, 1.0);
    return 2 * m * n * k / c[0].time_s;
  };
  EXPECT_NEAR(rate(256, 256, 512) / 11459846994535.0, 1.0, 5e-4);
  EXPECT_NEAR(rate(256, 4096, 4096) / 418449658612626.0, 1.0, 5e-4);
  EXPECT_NEAR(rate(512, 2048, 2048) / 342829445721583.0, 1.0, 5e-4);
  // Every profile that carries a grid holds 3 batches of 5^3 shapes.
  for (const char* name : {"dgx-h100", "dgx-h200", "dgx-h800", "dgx-b200", "gb200-nvl72"}) {
    const GemmShapeGrid& x = testing::load_hw_or_die(name).accel.gemm_shapes;
    EXPECT_EQ(x.flops_per_s.size(), 375u) << name;
  }
}

// Between grid points the corners are weighted multilinearly in the logs of
// the sides, by hand: halfway in log m between 256 and 512 (m = 362.04) the
// two rows weigh 1/2 each; at m = 256 * 2^0.25, n = 1024 * 2^0.5 (k = 2048 a
// grid point) the four weigh the products of (3/4, 1/4) and (1/2, 1/2); with
// 6144 columns (1.5 batches of 4096, b between 1 and 2 in log2(1.5) = 0.585)
// and m, k between points, eight corners.
TEST(GemmShapeGrid, CornersWeighTheNeighboursInTheLogOfEachSide) {
  const GemmShapeGrid& g = testing::load_hw_or_die("dgx-h100").accel.gemm_shapes;
  GemmShapeGrid::Corner c[16];
  ASSERT_EQ(g.corners(g.nearest(256 * std::sqrt(2.0), 256, 512), c), 2);
  EXPECT_NEAR(c[0].weight, 0.5, 1e-12);
  EXPECT_NEAR(c[1].weight, 0.5, 1e-12);
  EXPECT_EQ(c[0].shape.m + c[1].shape.m, 256 + 512);
  // Interior on three axes: 8 corners, the weights a product and summing to 1.
  const int n = g.corners(g.nearest(256 * std::pow(2.0, 0.25), 1024 * std::sqrt(2.0), 2048), c);
  ASSERT_EQ(n, 4);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double wm = c[i].shape.m == 256 ? 0.75 : 0.25;
    EXPECT_NEAR(c[i].weight, wm * 0.5, 1e-12);
    sum += c[i].weight;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  const int all = g.corners(g.nearest(300, 6144, 700), c);  // b = 1.5 on the columns, m and k between points
  ASSERT_EQ(all, 8);
  sum = 0;
  for (int i = 0; i < all; ++i) {
    EXPECT_EQ(c[i].shape.bm, 1);  // the batch stacks on the columns, which overflowed
    const double wb = c[i].shape.bn == 1 ? 1 - std::log2(1.5) : std::log2(1.5);
    EXPECT_GT(c[i].weight, 0);
    EXPECT_LE(c[i].weight, wb + 1e-12);
    sum += c[i].weight;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(GemmShapeGrid, ClampsSidesAndRunsWideOutputsAsBatches) {
  const GemmShapeGrid& g = testing::load_hw_or_die("dgx-h100").accel.gemm_shapes;
  GemmShapeGrid::Shape s = g.nearest(100, 8192, 10000);  // m up to 256, n as 2 batches of 4096, k down to 4096
  EXPECT_EQ(s.m, 256);
  EXPECT_EQ(s.n, 4096);
  EXPECT_EQ(s.bn, 2);
  EXPECT_EQ(s.bm, 1);
  EXPECT_EQ(s.k, 4096);
  EXPECT_EQ(s.cols(), 8192);
  s = g.nearest(32768, 8192, 512);  // 8 x 2 batches, more than the 4 measured: m shrinks first
  EXPECT_EQ(s.batch(), 4);
  EXPECT_EQ(s.bm, 2);
  EXPECT_EQ(s.bn, 2);
  s = g.nearest(6144, 3000, 512);  // 1.5 batches of 4096 rows: between the measured 1 and 2
  EXPECT_DOUBLE_EQ(s.batch(), 1.5);
  EXPECT_EQ(s.n, 3000);
}

// The premise of running rows beyond the grid as batches: b GEMMs of m rows
// run b times the output tiles of one, each with the same K-loop, like one
// GEMM of b*m rows. XLA's own timings agree: on H100, 2 x (m x n x k) against
// (2m) x n x k within 10% over every m <= 2048, n, k (mean +0.7%); on B200
// within 31% (the worst 30.0%, small outputs), the mean within 2%.
TEST(GemmShapeGrid, ABatchRunsAsAGemmOfItsStackedRows) {
  const double sides[] = {256, 512, 1024, 2048, 4096};
  for (const char* name : {"dgx-h100", "dgx-b200"}) {
    const GemmShapeGrid& g = testing::load_hw_or_die(name).accel.gemm_shapes;
    double sum = 0, worst = 0;
    int count = 0;
    for (size_t mi = 0; mi + 1 < 5; ++mi)
      for (size_t ni = 0; ni < 5; ++ni)
        for (size_t ki = 0; ki < 5; ++ki) {
          const double m = sides[mi], n = sides[ni], k = sides[ki];
          const double batched = 2 * 2 * m * n * k / g.at(1, mi, ni, ki);
          const double stacked = 2 * 2 * m * n * k / g.at(0, mi + 1, ni, ki);
          const double e = batched / stacked - 1;
          sum += e;
          worst = std::max(worst, std::fabs(e));
          ++count;
        }
    const bool h100 = std::string(name) == "dgx-h100";
    EXPECT_LT(worst, h100 ? 0.10 : 0.31) << name;
    EXPECT_LT(std::fabs(sum / count), h100 ? 0.01 : 0.02) << name;
  }
}

TEST(GemmShapeGrid, BadGridsNameTheKeyAndTheFix) {
  auto parse = [](const std::string& text) {
    GemmShapeGrid g;
    return parse_gemm_shape_grid(Json::parse(text), "hwprofile x: accelerator", g);
  };
  const std::string ok_axes = R"("sides": [256, 512], "batches": [1], "source": "s")";
  EXPECT_TRUE(parse("{" + ok_axes + R"(, "bf16_tflops": [[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]]})").is_ok());
  Status st = parse("{" + ok_axes + R"(, "bf16_tflops": [[[[1, 2], [3, 4]], [[5, 6], [7]]]]})");
  EXPECT_NE(st.message().find("bf16_tflops[0][1][1] must be an array of 2"), std::string::npos) << st.message();
  st = parse(R"({"sides": [512, 256], "batches": [1], "source": "s", "bf16_tflops": []})");
  EXPECT_NE(st.message().find("sides must be ascending"), std::string::npos) << st.message();
  st = parse(R"({"sides": [256], "batches": [2], "source": "s", "bf16_tflops": []})");
  EXPECT_NE(st.message().find("batches must start at 1"), std::string::npos) << st.message();
  st = parse("{" + ok_axes + R"(, "bf16_tflops": [[[[1, 2], [3, -4]], [[5, 6], [7, 8]]]]})");
  EXPECT_NE(st.message().find("[0][0][1][1] must be a positive TFLOP/s"), std::string::npos) << st.message();
  st = parse("{" + ok_axes + R"(, "tflops": 1})");
  EXPECT_NE(st.message().find("unknown key 'tflops'"), std::string::npos) << st.message();
  // A grid above the device's peak is the wrong device's table.
  HwProfile hw = testing::load_hw_or_die("dgx-a100-80gb");
  std::string json = hw_profile_to_json(hw);
  const std::string key = "\"gemm_efficiency\":";
  json.insert(json.find(key),
              R"("gemm_shapes": {"sides": [256], "batches": [1], "bf16_tflops": [[[[400]]]], "source": "s"}, )");
  auto r = parse_hw_profile(json, "a100");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("above peak_bf16_tflops"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace loom
