#include "core/gemm_shape_grid.h"

#include <algorithm>
#include <cmath>

namespace loom {

namespace {

constexpr double kTera = 1e12;

// The bracket of x in an ascending axis and the weight of its upper end, in
// log space; x must lie within the axis.
struct Bracket {
  size_t lo = 0;
  double t = 0;
};
Bracket bracket(const std::vector<double>& axis, double x) {
  Bracket b;
  if (axis.size() < 2) return b;
  size_t i = 0;
  while (i + 2 < axis.size() && x > axis[i + 1]) ++i;
  b.lo = i;
  b.t = std::clamp(std::log(x / axis[i]) / std::log(axis[i + 1] / axis[i]), 0.0, 1.0);
  return b;
}

Status ascending_axis(const Json& obj, const char* key, const std::string& where, std::vector<double>& out,
                      const char* what) {
  const std::string w = where + "." + key;
  if (!obj.contains(key) || !obj[key].is_array() || obj[key].empty())
    return invalid_argument(w + " must be a non-empty array of " + what + ", ascending");
  for (const Json& v : obj[key]) {
    if (!v.is_number() || !(v.get<double>() > 0))
      return invalid_argument(w + " must hold positive numbers (" + what + ")");
    if (!out.empty() && v.get<double>() <= out.back()) return invalid_argument(w + " must be ascending");
    out.push_back(v.get<double>());
  }
  return Status::ok();
}

}  // namespace

double GemmShapeGrid::at(size_t b, size_t m, size_t n, size_t k) const {
  const size_t s = sides.size();
  return flops_per_s[((b * s + m) * s + n) * s + k];
}

GemmShapeGrid::Shape GemmShapeGrid::nearest(double m, double n, double k) const {
  const double lo = sides.front(), hi = sides.back(), most = batches.back();
  Shape s;
  s.k = std::clamp(k, lo, hi);
  m = std::max(m, lo);
  n = std::max(n, lo);
  s.bm = std::max(1.0, m / hi);
  s.bn = std::max(1.0, n / hi);
  s.m = std::min(m, hi);
  s.n = std::min(n, hi);
  if (s.batch() > most) {
    s.bm = std::max(1.0, most / s.bn);
    if (s.batch() > most) s.bn = most / s.bm;
  }
  return s;
}

int GemmShapeGrid::corners(const Shape& s, Corner out[16]) const {
  const double point[4] = {s.batch(), s.m, s.n, s.k};
  const std::vector<double>* axes[4] = {&batches, &sides, &sides, &sides};
  Bracket br[4];
  for (int a = 0; a < 4; ++a) br[a] = bracket(*axes[a], point[a]);
  const bool rows = !(s.bn > 1 && s.bm == 1);  // the side the batch stacks on
  int count = 0;
  for (int corner = 0; corner < 16; ++corner) {
    double w = 1;
    size_t idx[4];
    for (int a = 0; a < 4 && w > 0; ++a) {
      const bool up = (corner >> a) & 1;
      if (up && axes[a]->size() < 2) w = 0;
      idx[a] = br[a].lo + (up ? 1 : 0);
      w *= up ? br[a].t : 1 - br[a].t;
    }
    if (!(w > 0)) continue;
    Corner& c = out[count++];
    c.weight = w;
    const double b = batches[idx[0]];
    c.shape.bm = rows ? b : 1;
    c.shape.bn = rows ? 1 : b;
    c.shape.m = sides[idx[1]];
    c.shape.n = sides[idx[2]];
    c.shape.k = sides[idx[3]];
    c.time_s = 2 * b * c.shape.m * c.shape.n * c.shape.k / at(idx[0], idx[1], idx[2], idx[3]);
  }
  return count;
}

Status parse_gemm_shape_grid(const Json& obj, const std::string& where, GemmShapeGrid& grid) {
  const std::string w = where + ".gemm_shapes";
  if (!obj.is_object())
    return invalid_argument(w + " must be an object {\"sides\": [...], \"batches\": [...], \"bf16_tflops\": "
                                "[batch][m][n][k], \"source\": \"...\"}");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (it.key() != "sides" && it.key() != "batches" && it.key() != "bf16_tflops" && it.key() != "source" &&
        it.key() != "measured_peak_bf16_tflops")
      return invalid_argument(w + " has an unknown key '" + it.key() +
                              "'; the keys are sides, batches, bf16_tflops, measured_peak_bf16_tflops and source");
  GemmShapeGrid g;
  LOOM_RETURN_IF_ERROR(ascending_axis(obj, "sides", w, g.sides, "GEMM sides m, n, k"));
  LOOM_RETURN_IF_ERROR(ascending_axis(obj, "batches", w, g.batches, "batch counts"));
  if (g.batches.front() != 1) return invalid_argument(w + ".batches must start at 1 (the plain GEMM)");
  if (obj.contains("measured_peak_bf16_tflops")) {
    const Json& v = obj["measured_peak_bf16_tflops"];
    if (!v.is_number() || !(v.get<double>() > 0))
      return invalid_argument(w + ".measured_peak_bf16_tflops must be a positive TFLOP/s: the dense 16-bit peak of "
                                  "the part the grid was measured on (leave it out for this profile's own part)");
    g.measured_peak_flops = v.get<double>() * kTera;
  }
  LOOM_ASSIGN_OR_RETURN(g.source, json_string(obj, "source", w));
  if (g.source.empty()) return invalid_argument(w + ".source is empty; say where the numbers come from");
  const std::string wt = w + ".bf16_tflops";
  const size_t s = g.sides.size();
  auto nested = [&](const Json& j, size_t n, const std::string& at) -> Status {
    if (!j.is_array() || j.size() != n)
      return invalid_argument(at + " must be an array of " + std::to_string(n) +
                              " (bf16_tflops is nested [batch][m][n][k] over batches and sides)");
    return Status::ok();
  };
  if (!obj.contains("bf16_tflops")) return invalid_argument(wt + " is missing");
  const Json& t = obj["bf16_tflops"];
  LOOM_RETURN_IF_ERROR(nested(t, g.batches.size(), wt));
  for (size_t b = 0; b < g.batches.size(); ++b) {
    const std::string wb = wt + "[" + std::to_string(b) + "]";
    LOOM_RETURN_IF_ERROR(nested(t[b], s, wb));
    for (size_t m = 0; m < s; ++m) {
      const std::string wm = wb + "[" + std::to_string(m) + "]";
      LOOM_RETURN_IF_ERROR(nested(t[b][m], s, wm));
      for (size_t n = 0; n < s; ++n) {
        const std::string wn = wm + "[" + std::to_string(n) + "]";
        LOOM_RETURN_IF_ERROR(nested(t[b][m][n], s, wn));
        for (size_t k = 0; k < s; ++k) {
          const Json& v = t[b][m][n][k];
          if (!v.is_number() || !(v.get<double>() > 0))
            return invalid_argument(wn + "[" + std::to_string(k) + "] must be a positive TFLOP/s");
          g.flops_per_s.push_back(v.get<double>() * kTera);
        }
      }
    }
  }
  grid = std::move(g);
  return Status::ok();
}

OrderedJson gemm_shape_grid_json(const GemmShapeGrid& g) {
  OrderedJson o;
  o["sides"] = g.sides;
  o["batches"] = g.batches;
  const size_t s = g.sides.size();
  OrderedJson t = OrderedJson::array();
  for (size_t b = 0; b < g.batches.size(); ++b) {
    OrderedJson tb = OrderedJson::array();
    for (size_t m = 0; m < s; ++m) {
      OrderedJson tm = OrderedJson::array();
      for (size_t n = 0; n < s; ++n) {
        OrderedJson tn = OrderedJson::array();
        for (size_t k = 0; k < s; ++k) tn.push_back(g.at(b, m, n, k) / kTera);
        tm.push_back(tn);
      }
      tb.push_back(tm);
    }
    t.push_back(tb);
  }
  o["bf16_tflops"] = t;
  if (g.measured_peak_flops > 0) o["measured_peak_bf16_tflops"] = g.measured_peak_flops / kTera;
  o["source"] = g.source;
  return o;
}

}  // namespace loom
