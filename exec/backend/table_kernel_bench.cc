// The microbenchmarks `loom calibrate` times (kernel_bench.h), run through a
// compute backend's kernel table: the same calls, kernels and casts the
// executor makes, on the backend's own buffers, for every backend.
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "exec/backend/kernel_bench.h"
#include "exec/backend/kernels.h"

namespace loom::exec {

namespace {

// A device buffer holding `host`.
std::shared_ptr<DeviceBuffer> uploaded(ComputeBackend* be, const std::vector<float>& host) {
  auto b = std::make_shared<DeviceBuffer>(DeviceBuffer::uninitialized(be, host.size() * sizeof(float)));
  be->copy_to_device(b->f32(), host.data(), host.size() * sizeof(float));
  return b;
}

// A device buffer of n floats, each `value`.
std::shared_ptr<DeviceBuffer> filled(ComputeBackend* be, size_t n, float value) {
  return uploaded(be, std::vector<float>(n, value));
}

class TableKernelBench final : public KernelBench {
 public:
  TableKernelBench(std::unique_ptr<ComputeBackend> backend, const KernelBenchDevice& device,
                   std::unique_ptr<ComputeBackend> fp32_backend)
      : be_(std::move(backend)), fp32_(std::move(fp32_backend)), device_(device) {}

  std::string name() const override { return device_.name; }
  int sm_arch() const override { return device_.sm_arch; }
  double memory_bytes() const override { return device_.memory_bytes; }
  size_t cold_set_bytes() const override { return device_.cold_set_bytes; }

  Run gemm_fp32(int64_t m, int64_t n, int64_t k) override {
    if (!fp32_) return {};
    ComputeBackend* be = fp32_.get();
    auto a = filled(be, size_t(m * k), 0.5f), b = filled(be, size_t(n * k), 0.25f), c = filled(be, size_t(m * n), 0);
    return [=] { be->kernels().gemm({false, true, m, n, k, 1.f, a->f32(), b->f32(), 0.f, c->f32()}); };
  }

  // One buffer size fits every mode's operands: A (hot) is x (m x k) or dy
  // (m x n); B is W (n x k) or x (m x k); C is y, dx or dW. The B copies are
  // one flat buffer named as the table's weights, so a mixed-precision table
  // reads them through its 16-bit weight copy as the executor reads W.
  GemmRuns gemm(int64_t m, int64_t n, int64_t k, size_t cold_bytes) override {
    const GemmOperands ops = gemm_operands(m, n, k);
    const size_t b_bytes = be_->kernels().precision() == Precision::kFp32 ? 4 : 2;
    const size_t copies = ops.copies(cold_bytes, b_bytes, sizeof(float));
    struct State {
      std::shared_ptr<DeviceBuffer> a, b, c;
      size_t next = 0, copies = 0, b_size = 0, c_size = 0;
    };
    auto s = std::make_shared<State>();
    s->a = filled(be_.get(), ops.a, 0.5f);
    s->b = filled(be_.get(), ops.b * copies, 0.25f);
    s->c = filled(be_.get(), ops.c * copies, 0.f);
    s->copies = copies;
    s->b_size = ops.b;
    s->c_size = ops.c;
    Kernels& kt = be_->kernels();
    kt.set_weights(s->b->f32(), int64_t(ops.b * copies));
    kt.weights_changed(s->b->f32(), int64_t(ops.b * copies));
    Kernels* table = &kt;
    auto run = [s, table](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta) {
      const size_t i = s->next++ % s->copies;
      table->gemm({ta, tb, M, N, K, 1.f, s->a->f32(), s->b->f32() + i * s->b_size, beta, s->c->f32() + i * s->c_size});
    };
    GemmRuns r;
    r.forward = [=] { run(false, true, m, n, k, 0.f); };  // y = x W^T
    r.dgrad = [=] { run(false, false, m, k, n, 0.f); };   // dx = dy W
    r.wgrad = [=] { run(true, false, n, k, m, 1.f); };    // dW += dy^T x
    return r;
  }

  // The table's residual add, y += x: two streams read, one written (the
  // triad's 12 bytes per element).
  Run triad(size_t elems) override {
    auto x = filled(be_.get(), elems, 1.f), y = filled(be_.get(), elems, 2.f);
    Kernels* k = &be_->kernels();
    return [=] { k->add_inplace({y->f32(), x->f32(), int64_t(elems)}); };
  }

  FwdBwd layer_elementwise(int64_t N, int64_t C, int64_t F) override {
    ComputeBackend* be = be_.get();
    auto xa = filled(be, size_t(N * F), 0.3f), xb = filled(be, size_t(N * F), 0.7f), xc = filled(be, size_t(N * F), 0);
    auto w = filled(be, size_t(C), 1.f), b = filled(be, size_t(C), 0.f), dw = filled(be, size_t(C), 0.f),
         db = filled(be, size_t(C), 0.f), mean = filled(be, size_t(N), 0.f), rstd = filled(be, size_t(N), 0.f);
    Kernels* k = &be->kernels();
    FwdBwd r;
    r.forward = [=] {
      for (int i = 0; i < 2; ++i)
        k->layernorm_forward({xa->f32(), w->f32(), b->f32(), xc->f32(), mean->f32(), rstd->f32(), N, C, 1e-5f});
      for (int i = 0; i < 2; ++i) k->add_inplace({xc->f32(), xb->f32(), N * C});
      k->gelu_forward({xa->f32(), xc->f32(), N * F});
    };
    r.backward = [=] {
      for (int i = 0; i < 2; ++i)
        k->layernorm_backward({xb->f32(), xa->f32(), w->f32(), mean->f32(), rstd->f32(), xc->f32(), dw->f32(),
                              db->f32(), N, C});
      for (int i = 0; i < 2; ++i) k->add_inplace({xc->f32(), xb->f32(), N * C});
      k->gelu_backward({xb->f32(), xa->f32(), xc->f32(), N * F});
    };
    return r;
  }

  // As the executor's optimizer op: the gradient's sum of squares (taken to
  // the host), AdamW, then the gradients zeroed for the next step.
  Run discard_and_write(size_t bytes) override {
    ComputeBackend* be = be_.get();
    auto x = filled(be, bytes / sizeof(float), 1.f);
    return [=] {
      be->discard(x->f32(), x->bytes());
      be->reclaim(x->f32(), x->bytes());
      be->fill_zero(x->f32(), x->bytes());
    };
  }
  Run write(size_t bytes) override {
    ComputeBackend* be = be_.get();
    auto x = filled(be, bytes / sizeof(float), 1.f);
    return [=] { be->fill_zero(x->f32(), x->bytes()); };
  }

  Run optimizer_step(int64_t np) override {
    ComputeBackend* be = be_.get();
    auto p = filled(be, size_t(np), 0.1f), g = filled(be, size_t(np), 0.01f), m1 = filled(be, size_t(np), 0.f),
         m2 = filled(be, size_t(np), 0.f);
    auto step = std::make_shared<int64_t>(0);
    Kernels* k = &be->kernels();
    return [=] {
      k->add_sum_squares({g->f32(), np});
      volatile double sq = k->take_sum_squares({});
      (void)sq;
      k->adamw_update({p->f32(), g->f32(), m1->f32(), m2->f32(), np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++*step});
      be->fill_zero(g->f32(), size_t(np) * sizeof(float));
    };
  }

  FwdBwd attention(int64_t B, int64_t S, int64_t H, int64_t D) override {
    ComputeBackend* be = be_.get();
    const size_t n = size_t(B * S * H * D);
    std::vector<float> q(n), kk(n), v(n);
    for (size_t i = 0; i < n; ++i) {
      q[i] = float(int(i % 13) - 6) / 8.f;
      kk[i] = float(int(i % 11) - 5) / 8.f;
      v[i] = float(int(i % 7) - 3) / 8.f;
    }
    auto dq = uploaded(be, q), dk = uploaded(be, kk), dv = uploaded(be, v), o = filled(be, n, 0.f), dout = filled(be, n, 0.01f),
         gq = filled(be, n, 0.f), gk = filled(be, n, 0.f), gv = filled(be, n, 0.f),
         lse = filled(be, size_t(B * H * S), 0.f);
    Kernels* k = &be->kernels();
    FwdBwd r;
    r.forward = [=] { k->attention_forward({dq->f32(), dk->f32(), dv->f32(), o->f32(), lse->f32(), B, S, H, H, D}); };
    r.backward = [=] {
      k->attention_backward({dout->f32(), dq->f32(), dk->f32(), dv->f32(), o->f32(), lse->f32(), gq->f32(), gk->f32(),
                            gv->f32(), B, S, H, H, D});
    };
    return r;
  }

  FwdBwd cross_entropy(int64_t N, int64_t V) override {
    ComputeBackend* be = be_.get();
    std::vector<float> host(static_cast<size_t>(N * V));
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(int(i % 29) - 14) / 4.f;
    auto logits = uploaded(be, host), grad = filled(be, size_t(N * V), 0.f), row_max = filled(be, size_t(N), 0.f),
         sumexp = filled(be, size_t(N), 0.f), target_logit = filled(be, size_t(N), 0.f), loss = filled(be, size_t(N), 0.f);
    auto targets = std::make_shared<DeviceBuffer>(DeviceBuffer::uninitialized(be, size_t(N) * sizeof(int32_t)));
    std::vector<int32_t> t(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) t[size_t(n)] = int32_t((n * 7919) % V);
    be->copy_to_device(targets->i32(), t.data(), t.size() * sizeof(int32_t));
    Kernels* k = &be->kernels();
    FwdBwd r;
    r.forward = [=] {
      k->xent_row_max({logits->f32(), row_max->f32(), N, V});
      k->xent_sumexp_and_target({logits->f32(), targets->i32(), row_max->f32(), sumexp->f32(), target_logit->f32(), N, V, 0});
      k->xent_loss({row_max->f32(), sumexp->f32(), target_logit->f32(), loss->f32(), N});
    };
    r.backward = [=] {
      k->xent_backward({logits->f32(), targets->i32(), row_max->f32(), sumexp->f32(), grad->f32(), N, V, 0, 1.f / N});
    };
    return r;
  }

  void synchronize() override {
    be_->synchronize();
    if (fp32_) fp32_->synchronize();
  }

  Status status() override {
    LOOM_RETURN_IF_ERROR(be_->kernels().status());
    return fp32_ ? fp32_->kernels().status() : Status::ok();
  }

 private:
  std::unique_ptr<ComputeBackend> be_, fp32_;
  KernelBenchDevice device_;
};

}  // namespace

size_t host_cold_set_bytes() {
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<size_t>({4 * size_t(std::max(0L, l2)), size_t(std::max(0L, l3)), 8u << 20});
}

std::unique_ptr<KernelBench> make_table_kernel_bench(std::unique_ptr<ComputeBackend> backend,
                                                     const KernelBenchDevice& device,
                                                     std::unique_ptr<ComputeBackend> fp32_backend) {
  return std::make_unique<TableKernelBench>(std::move(backend), device, std::move(fp32_backend));
}

}  // namespace loom::exec
