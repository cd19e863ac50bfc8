// The optimizer's and the host results' cases (kernel_cases.h): AdamW per
// tensor and over a segment table, the plain and accumulated sums, and the
// gradient norm's sums of squares.
#include <cstring>

#include "tests/support/kernel_cases.h"

namespace loom::exec::kernel_cases {

using test::random_vec;

namespace {

std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.f); }

}  // namespace

template <>
std::vector<Case> cases<AdamwUpdate>() {
  const int64_t n = 50001;
  Case c = make(KernelOp::kAdamwUpdate, "adamw_update (3 steps)");
  const int param = c.inout("param", random_vec(size_t(n), 30), kXent), m = c.inout("m", zeros(size_t(n)), kXent),
            v = c.inout("v", zeros(size_t(n)), kXent);
  std::vector<int> grads;
  for (int step = 1; step <= 3; ++step) grads.push_back(c.in("grad", random_vec(size_t(n), uint64_t(30 + step))));
  c.run = [=](Kernels& k, const Bound& p) {
    for (int64_t step = 1; step <= 3; ++step)
      k.adamw_update({p.f(param), p.f(grads[size_t(step - 1)]), p.f(m), p.f(v), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                      step, step == 3 ? 0.37f : 1.0f});  // the last step with a clipping factor folded in
    return std::vector<double>{};
  };
  return {c};
}

// An int64 table as the int32 words the case's buffers hold (little-endian).
std::vector<int32_t> int64_words(const std::vector<int64_t>& v) {
  std::vector<int32_t> w(2 * v.size());
  std::memcpy(w.data(), v.data(), v.size() * sizeof(int64_t));
  return w;
}

// Segments whose parameter and state offsets differ (a ZeRO shard's layout),
// of lengths 1, odd, and past one block row (4 x 256 elements per block).
const std::vector<int64_t> kAdamSegments = {
    0,     5,     1000,  1,  // param offset, state offset, n, decay
    1007,  2000,  30000, 0,  //
    40000, 40000, 1,     1,  //
    50000, 32001, 7999,  1,  //
    31010, 45000, 5001,  0,
};

template <>
std::vector<Case> cases<AdamwMulti>() {
  const int64_t n_param = 60000, n_state = 50001, count = int64_t(kAdamSegments.size() / 4);
  Case c = make(KernelOp::kAdamwMulti, "adamw_multi (5 segments, 3 steps)");
  const int param = c.inout("param", random_vec(size_t(n_param), 34), kXent),
            m = c.inout("m", zeros(size_t(n_state)), kXent), v = c.inout("v", zeros(size_t(n_state)), kXent);
  const int table = c.in("table", int64_words(kAdamSegments));
  std::vector<int> grads;
  for (int step = 1; step <= 3; ++step) grads.push_back(c.in("grad", random_vec(size_t(n_state), uint64_t(34 + step))));
  c.run = [=](Kernels& k, const Bound& p) {
    const auto* t = reinterpret_cast<const int64_t*>(p.i(table));
    for (int64_t step = 1; step <= 3; ++step)
      k.adamw_multi({p.f(param), p.f(grads[size_t(step - 1)]), p.f(m), p.f(v), t, count, 30000, 44001, 3e-4f, 0.9f,
                     0.95f, 1e-8f, 0.1f, step, step == 3 ? 0.37f : 1.0f});
    return std::vector<double>{};
  };
  return {c};
}

// |x| summed: the scale of a sum's rounding error.
double abs_sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += std::fabs(v);
  return s;
}

template <>
std::vector<Case> cases<Sum>() {
  auto xv = random_vec(size_t(kElementwise), 48, -1e3f, 1e3f);
  Case c = make(KernelOp::kSum, "sum");
  c.host_tol = {1e-12 * abs_sum(xv)};
  const int x = c.in("x", std::move(xv));
  c.run = [=](Kernels& k, const Bound& p) { return std::vector<double>{k.sum({p.f(x), kElementwise})}; };
  return {c};
}

template <>
std::vector<Case> cases<AccumulateSum>() {
  auto xv = random_vec(size_t(kElementwise), 50, -1e3f, 1e3f);
  Case c = make(KernelOp::kAccumulateSum, "accumulate_sum (3 blocks into a running total)");
  // A loss-like total: the running value, then three blocks, one scaled by 1/3.
  const int x = c.in("x", std::move(xv)), acc = c.inout("acc", std::vector<double>{0.25}, Tol{0, 0, 1e-12});
  c.run = [=](Kernels& k, const Bound& p) {
    k.accumulate_sum({p.f(x), 1000, 1.0, p.d(acc)});
    k.accumulate_sum({p.f(x) + 1000, 50000, 1.0 / 3.0, p.d(acc)});
    k.accumulate_sum({p.f(x) + 51000, kElementwise - 51000, 1.0, p.d(acc)});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<AddSumSquares>() {
  auto xv = random_vec(size_t(kElementwise), 49, -1e3f, 1e3f);
  double squares = 0;
  for (float v : xv) squares += double(v) * v;
  Case c = make(KernelOp::kAddSumSquares, "add_sum_squares (3 pieces), take_sum_squares twice");
  c.host_tol = {1e-12 * squares, 0};
  const int x = c.in("x", std::move(xv));
  c.run = [=](Kernels& k, const Bound& p) {
    k.add_sum_squares({p.f(x), 1000});
    k.add_sum_squares({p.f(x) + 1000, 50000});
    k.add_sum_squares({p.f(x) + 51000, kElementwise - 51000});
    const double total = k.take_sum_squares({});
    return std::vector<double>{total, k.take_sum_squares({})};  // the second: nothing pending
  };
  return {c};
}

template <>
std::vector<Case> cases<AddSumSquaresMulti>() {
  auto xv = random_vec(size_t(kElementwise), 51, -1e3f, 1e3f);
  // Four segments (one of a single element, one past a block row), out of order.
  const std::vector<int64_t> segs = {51000, kElementwise - 51000, 7, 1, 1000, 50000, 10, 990};
  double squares = 0;
  for (size_t s = 0; s < segs.size(); s += 2)
    for (int64_t i = segs[s]; i < segs[s] + segs[s + 1]; ++i) squares += double(xv[size_t(i)]) * xv[size_t(i)];
  Case c = make(KernelOp::kAddSumSquaresMulti, "add_sum_squares_multi (4 segments), then a single piece");
  c.host_tol = {1e-12 * squares, 0};
  const int x = c.in("x", std::move(xv)), table = c.in("table", int64_words(segs));
  c.run = [=](Kernels& k, const Bound& p) {
    k.add_sum_squares_multi({p.f(x), reinterpret_cast<const int64_t*>(p.i(table)), 4, kElementwise - 51000,
                             kElementwise - 51000 + 1 + 50000 + 990});
    k.add_sum_squares({p.f(x), 10});  // pieces after a multi call add to the same total
    const double total = k.take_sum_squares({});
    return std::vector<double>{total, k.take_sum_squares({})};
  };
  return {c};
}

template <>
std::vector<Case> cases<TakeSumSquares>() {
  Case c = make(KernelOp::kTakeSumSquares, "take_sum_squares (nothing pending)");
  c.host_tol = {0};
  c.run = [](Kernels& k, const Bound&) { return std::vector<double>{k.take_sum_squares({})}; };
  return {c};
}

}  // namespace loom::exec::kernel_cases
