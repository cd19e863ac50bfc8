// GemmShapeGrid: a device's 16-bit GEMM throughput measured per shape, m, n
// and k each over a list of sides, plainly and in batches (XLA's GPU matmul
// performance table: sides 256..4096, batches 1, 2, 4). The near-square
// efficiency table (AcceleratorSpec::gemm_efficiency) prices a GEMM by its
// FLOPs and corrects for its waves; a shape's own measurement also holds what
// that model cannot see, the library's choice of tiles, split-K and stream-K
// for skinny and deep shapes (sim/gemm_time.cc, docs/simulator.md 3.1).
//
// Part of a hardware profile (`accelerator.gemm_shapes`, docs/formats/hwprofile.md).
#pragma once

#include <string>
#include <vector>

#include "core/json_util.h"
#include "core/status.h"

namespace loom {

struct GemmShapeGrid {
  std::vector<double> sides;        // ascending, > 0
  std::vector<double> batches;      // ascending, the first 1
  std::vector<double> flops_per_s;  // [batch][m][n][k] (k fastest), sides^3 per batch
  // The 16-bit peak of the part the grid was measured on, when another than
  // the profile's (GB200 carries B200's grid): the rates are then read as
  // efficiencies of that peak, as the profile's gemm_efficiency is. 0: the
  // profile's own part.
  double measured_peak_flops = 0;
  std::string source;

  bool empty() const { return flops_per_s.empty(); }

  // A shape the grid holds: `b` = bm x bn GEMMs of m x n x k, each side
  // within [sides.front(), sides.back()], b at most batches.back().
  struct Shape {
    double bm = 1, bn = 1, m = 0, n = 0, k = 0;
    double batch() const { return bm * bn; }
    // The one GEMM whose output tiles the batch runs: (bm m) x (bn n) x k.
    double rows() const { return bm * m; }
    double cols() const { return bn * n; }
  };
  // The held shape nearest to an m x n x k GEMM: each side clamped into the
  // grid, and an m or n beyond the largest side run as that many batches of
  // it (a batch of b GEMMs has b times the output tiles of one, each with the
  // same K-loop, as a GEMM of b times the rows has; XLA's table agrees within
  // 10% on H100, tests/unit/core/gemm_shape_grid_test.cc), at most the
  // largest batch measured (m first shrunk back, then n).
  Shape nearest(double m, double n, double k) const;
  // The grid points around the held shape `s` and their weights, multilinear
  // in the logs of b, m, n and k (the weights sum to 1; at most 16, fewer on
  // an axis of one point). A corner's batch lies on the side `s` batches
  // (its rows unless only its columns overflowed).
  struct Corner {
    double weight = 0;
    Shape shape;
    double time_s = 0;  // measured
  };
  int corners(const Shape& s, Corner out[16]) const;

  // The throughput stored at grid point (batch index, m, n, k side indices).
  double at(size_t b, size_t m, size_t n, size_t k) const;
};

// "gemm_shapes": {"sides": [...], "batches": [...], "bf16_tflops": nested
// [batch][m][n][k] arrays, optional "measured_peak_bf16_tflops", "source":
// "..."}. Errors name the key and the fix.
Status parse_gemm_shape_grid(const Json& obj, const std::string& where, GemmShapeGrid& grid);
OrderedJson gemm_shape_grid_json(const GemmShapeGrid& grid);

}  // namespace loom
