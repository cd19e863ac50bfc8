// The CPU backend's microbenchmarks for `loom calibrate` (kernel_bench.h):
// the executor's own kernels from cpu_ops.h on host buffers.
#include <algorithm>
#include <unistd.h>
#include <vector>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/kernel_bench.h"

namespace loom::exec {

namespace {

using Vec = std::vector<float>;

class CpuKernelBench final : public KernelBench {
 public:
  explicit CpuKernelBench(int threads) { cpu::set_num_threads(std::max(1, threads)); }
  std::string name() const override { return "cpu"; }

  size_t cold_set_bytes() const override {
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    return std::max<size_t>({4 * size_t(std::max(0L, l2)), size_t(std::max(0L, l3)), 8u << 20});
  }

  GemmRuns gemm(int64_t m, int64_t n, int64_t k, size_t cold_bytes) override {
    // One buffer size fits every mode's operands: A (hot) is x (m x k) or dy
    // (m x n); B is W (n x k) or x (m x k); C is y, dx or dW.
    struct State {
      Vec a;
      std::vector<Vec> b, c;
      size_t next = 0;
    };
    const GemmOperands ops = gemm_operands(m, n, k);
    const size_t copies = ops.copies(cold_bytes, sizeof(float), sizeof(float));
    auto s = std::make_shared<State>();
    s->a.assign(ops.a, 0.5f);
    s->b.assign(copies, Vec(ops.b, 0.25f));
    s->c.assign(copies, Vec(ops.c, 0.f));
    auto step = [s] {
      size_t i = s->next++ % s->b.size();
      return std::pair<const float*, float*>{s->b[i].data(), s->c[i].data()};
    };
    GemmRuns r;
    r.forward = [=] {
      auto [b, c] = step();
      cpu::gemm(false, true, m, n, k, 1.f, s->a.data(), b, 0.f, c);  // y = x W^T
    };
    r.dgrad = [=] {
      auto [b, c] = step();
      cpu::gemm(false, false, m, k, n, 1.f, s->a.data(), b, 0.f, c);  // dx = dy W
    };
    r.wgrad = [=] {
      auto [b, c] = step();
      cpu::gemm(true, false, n, k, m, 1.f, s->a.data(), b, 1.f, c);  // dW += dy^T x
    };
    return r;
  }

  Run triad(size_t elems) override {
    struct State {
      Vec x, y, z;
    };
    auto s = std::make_shared<State>(State{Vec(elems, 1.f), Vec(elems, 2.f), Vec(elems, 0.f)});
    return [s] {
      const size_t n = s->z.size();
      float *z = s->z.data();
      const float *x = s->x.data(), *y = s->y.data();
      for (size_t i = 0; i < n; ++i) z[i] = x[i] + 0.5f * y[i];
    };
  }

  FwdBwd layer_elementwise(int64_t N, int64_t C, int64_t F) override {
    struct State {
      Vec xa, xb, xc, w, b, dw, db, mean, rstd;
    };
    auto s = std::make_shared<State>();
    s->xa.assign(size_t(N * F), 0.3f);
    s->xb.assign(size_t(N * F), 0.7f);
    s->xc.assign(size_t(N * F), 0.f);
    s->w.assign(size_t(C), 1.f);
    s->b.assign(size_t(C), 0.f);
    s->dw.assign(size_t(C), 0.f);
    s->db.assign(size_t(C), 0.f);
    s->mean.assign(size_t(N), 0.f);
    s->rstd.assign(size_t(N), 0.f);
    for (size_t i = 0; i < s->xa.size(); ++i) s->xa[i] = float(int(i % 97) - 48) / 32.f;
    FwdBwd r;
    r.forward = [=] {
      for (int i = 0; i < 2; ++i)
        cpu::layernorm_forward(s->xa.data(), s->w.data(), s->b.data(), s->xc.data(), s->mean.data(), s->rstd.data(),
                               N, C, 1e-5f);
      for (int i = 0; i < 2; ++i) cpu::add_inplace(s->xc.data(), s->xb.data(), N * C);
      cpu::gelu_forward(s->xa.data(), s->xc.data(), N * F);
    };
    r.backward = [=] {
      for (int i = 0; i < 2; ++i)
        cpu::layernorm_backward(s->xb.data(), s->xa.data(), s->w.data(), s->mean.data(), s->rstd.data(), s->xc.data(),
                                s->dw.data(), s->db.data(), N, C);
      for (int i = 0; i < 2; ++i) cpu::add_inplace(s->xc.data(), s->xb.data(), N * C);
      cpu::gelu_backward(s->xb.data(), s->xa.data(), s->xc.data(), N * F);
    };
    return r;
  }

  Run optimizer_step(int64_t np) override {
    struct State {
      Vec p, g, m1, m2;
      int64_t step = 0;
    };
    auto s = std::make_shared<State>(State{Vec(size_t(np), 0.1f), Vec(size_t(np), 0.01f), Vec(size_t(np), 0.f),
                                           Vec(size_t(np), 0.f), 0});
    return [s, np] {
      volatile double sq = cpu::sum_squares(s->g.data(), np);
      (void)sq;
      cpu::adamw_update(s->p.data(), s->g.data(), s->m1.data(), s->m2.data(), np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                        ++s->step);
      std::fill(s->g.begin(), s->g.end(), 0.01f);  // the executor zeroes the gradients for the next step
    };
  }

  FwdBwd attention(int64_t B, int64_t S, int64_t H, int64_t D) override {
    struct State {
      Vec q, k, v, o, dout, dq, dk, dv, lse;
    };
    const size_t n = size_t(B * S * H * D);
    auto s = std::make_shared<State>();
    for (Vec* x : {&s->q, &s->k, &s->v, &s->o, &s->dq, &s->dk, &s->dv}) x->assign(n, 0.f);
    s->dout.assign(n, 0.01f);
    s->lse.assign(size_t(B * H * S), 0.f);
    for (size_t i = 0; i < n; ++i) {
      s->q[i] = float(int(i % 13) - 6) / 8.f;
      s->k[i] = float(int(i % 11) - 5) / 8.f;
      s->v[i] = float(int(i % 7) - 3) / 8.f;
    }
    FwdBwd r;
    r.forward = [=] { cpu::attention_forward(s->q.data(), s->k.data(), s->v.data(), s->o.data(), s->lse.data(), B, S, H, H, D); };
    r.backward = [=] {
      cpu::attention_backward(s->dout.data(), s->q.data(), s->k.data(), s->v.data(), s->o.data(), s->lse.data(),
                              s->dq.data(), s->dk.data(), s->dv.data(), B, S, H, H, D);
    };
    return r;
  }

  void synchronize() override {}
};

}  // namespace

std::unique_ptr<KernelBench> make_cpu_kernel_bench(int threads) { return std::make_unique<CpuKernelBench>(threads); }

}  // namespace loom::exec
