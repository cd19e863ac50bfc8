// The kernel cases' arrays and builders (kernel_cases.h), and the runner:
// a case through a backend's table, through the CPU reference table, and
// the comparison of the two. The cases themselves: kernel_cases.cc.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tests/support/kernel_cases.h"

namespace loom::exec::kernel_cases {


size_t Array::bytes() const {
  switch (kind) {
    case Kind::kF32: return f32.size() * sizeof(float);
    case Kind::kI32: return i32.size() * sizeof(int32_t);
    case Kind::kU16: return u16.size() * sizeof(uint16_t);
    case Kind::kF64: return f64.size() * sizeof(double);
  }
  return 0;
}

const void* Array::data() const {
  switch (kind) {
    case Kind::kF32: return f32.data();
    case Kind::kI32: return i32.data();
    case Kind::kU16: return u16.data();
    case Kind::kF64: return f64.data();
  }
  return nullptr;
}

int Case::in(std::string name, std::vector<float> v) {
  Array a;
  a.name = std::move(name);
  a.f32 = std::move(v);
  arrays.push_back(std::move(a));
  return int(arrays.size()) - 1;
}

int Case::in(std::string name, std::vector<int32_t> v) {
  Array a;
  a.name = std::move(name);
  a.kind = Array::Kind::kI32;
  a.i32 = std::move(v);
  arrays.push_back(std::move(a));
  return int(arrays.size()) - 1;
}

int Case::in(std::string name, std::vector<uint16_t> v) {
  Array a;
  a.name = std::move(name);
  a.kind = Array::Kind::kU16;
  a.u16 = std::move(v);
  arrays.push_back(std::move(a));
  return int(arrays.size()) - 1;
}

int Case::inout(std::string name, std::vector<double> v, Tol tol) {
  Array a;
  a.name = std::move(name);
  a.kind = Array::Kind::kF64;
  a.f64 = std::move(v);
  a.checked = true;
  a.tol = tol;
  arrays.push_back(std::move(a));
  return int(arrays.size()) - 1;
}

int Case::inout(std::string name, std::vector<float> v, Tol tol) {
  const int i = in(std::move(name), std::move(v));
  arrays[size_t(i)].checked = true;
  arrays[size_t(i)].tol = tol;
  return i;
}

int Case::out(std::string name, size_t n, Tol tol) {
  const int i = inout(std::move(name), std::vector<float>(n, std::nanf("")), tol);
  arrays[size_t(i)].overwritten = true;
  return i;
}

int Case::out16(std::string name, size_t n) {
  const int i = in(std::move(name), std::vector<uint16_t>(n, 0xFFFFu));
  arrays[size_t(i)].checked = true;
  arrays[size_t(i)].overwritten = true;
  return i;
}

// ---------------------------------------------------------------------------
// Running and comparing

Outcome run_on(const Case& c, ComputeBackend& be, Kernels& k) {
  std::vector<DeviceBuffer> bufs;
  std::vector<void*> ptrs;
  for (const Array& a : c.arrays) {
    bufs.push_back(DeviceBuffer::uninitialized(&be, std::max<size_t>(a.bytes(), 4)));
    be.copy_to_device(bufs.back().f32(), a.data(), a.bytes());
    ptrs.push_back(bufs.back().f32());
  }
  Outcome o;
  o.host = c.run(k, Bound(ptrs));
  be.synchronize();
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    o.arrays.emplace_back(c.arrays[i].bytes());
    be.copy_to_host(o.arrays.back().data(), bufs[i].f32(), c.arrays[i].bytes());
  }
  return o;
}

Outcome run_reference(const Case& c) {
  // 64-byte aligned host copies, as the CPU backend allocates: Eigen's
  // vectorized exp() peels an unaligned head into scalar code that rounds
  // differently, so the CPU kernels are bit for bit the same only at the same
  // alignment.
  std::vector<std::unique_ptr<void, decltype(&std::free)>> mem;
  std::vector<void*> ptrs;
  for (const Array& a : c.arrays) {
    const size_t bytes = (std::max<size_t>(a.bytes(), 1) + 63) / 64 * 64;
    mem.emplace_back(std::aligned_alloc(64, bytes), &std::free);
    std::memcpy(mem.back().get(), a.data(), a.bytes());
    ptrs.push_back(mem.back().get());
  }
  auto k = make_cpu_kernels();
  Outcome o;
  o.host = c.run(*k, Bound(ptrs));
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(ptrs[i]);
    o.arrays.emplace_back(p, p + c.arrays[i].bytes());
  }
  return o;
}

namespace {

std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> f(bytes.size() / sizeof(float));
  std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
  return f;
}

// Elements that are NaN in `got` where `want` has a number.
int64_t new_nans(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) n += std::isnan(got[i]) && !std::isnan(want[i]) ? 1 : 0;
  return n;
}

// bf16 elements that differ, counting any two NaN (whatever their payload:
// CUDA's cast makes the canonical one) as equal.
int64_t bf16_mismatches(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return -1;
  std::vector<uint16_t> g(got.size() / 2), w(want.size() / 2);
  std::memcpy(g.data(), got.data(), g.size() * 2);
  std::memcpy(w.data(), want.data(), w.size() * 2);
  auto is_nan = [](uint16_t h) { return (h & 0x7fffu) > 0x7f80u; };
  int64_t n = 0;
  for (size_t i = 0; i < g.size(); ++i) n += g[i] == w[i] || (is_nan(g[i]) && is_nan(w[i])) ? 0 : 1;
  return n;
}

}  // namespace

void expect_match(const Case& c, const Outcome& got, const Outcome& want, bool exact) {
  ASSERT_EQ(got.arrays.size(), c.arrays.size()) << c.label;
  ASSERT_EQ(want.arrays.size(), c.arrays.size()) << c.label;
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    const Array& a = c.arrays[i];
    if (!a.checked) continue;
    const std::string what = c.label + ": " + a.name;
    if (a.overwritten && a.kind == Array::Kind::kF32) {
      const std::vector<float> w = as_floats(want.arrays[i]);
      int64_t unwritten = 0;
      for (float v : w) unwritten += std::isnan(v) ? 1 : 0;
      // The reference's own NaN are the inputs' (from_16bit of NaN patterns).
      if (c.op != KernelOp::kFrom16bit) EXPECT_EQ(unwritten, 0) << what << ": the reference left elements unwritten";
      EXPECT_EQ(new_nans(as_floats(got.arrays[i]), w), 0) << what << ": elements left unwritten (NaN)";
    }
    if (exact || a.kind == Array::Kind::kI32) {
      EXPECT_TRUE(got.arrays[i] == want.arrays[i]) << what << ": not bit for bit the reference";
      continue;
    }
    if (a.kind == Array::Kind::kF64) {
      std::vector<double> g(got.arrays[i].size() / sizeof(double)), w(want.arrays[i].size() / sizeof(double));
      std::memcpy(g.data(), got.arrays[i].data(), got.arrays[i].size());
      std::memcpy(w.data(), want.arrays[i].data(), want.arrays[i].size());
      ASSERT_EQ(g.size(), w.size()) << what;
      for (size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(g[j], w[j], a.tol.elem_rel * std::fabs(w[j])) << what << "[" << j << "]";
      continue;
    }
    if (a.kind == Array::Kind::kU16) {  // bf16 (the fp32 tables' 16-bit format): equal, or NaN in both
      EXPECT_EQ(bf16_mismatches(got.arrays[i], want.arrays[i]), 0) << what;
      continue;
    }
    test::expect_close(as_floats(got.arrays[i]), as_floats(want.arrays[i]), a.tol, what);
  }
  ASSERT_EQ(got.host.size(), want.host.size()) << c.label;
  for (size_t i = 0; i < got.host.size(); ++i) {
    if (exact) {
      EXPECT_EQ(got.host[i], want.host[i]) << c.label << ": host result " << i;
    } else {
      const double tol = i < c.host_tol.size() ? c.host_tol[i] : 0;
      EXPECT_NEAR(got.host[i], want.host[i], tol) << c.label << ": host result " << i;
    }
  }
}

}  // namespace loom::exec::kernel_cases
