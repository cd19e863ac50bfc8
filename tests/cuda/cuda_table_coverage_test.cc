// The CUDA kernel table, every op at moderate sizes through
// ComputeBackend::kernels() against the CPU table (the per-op profiler proves
// none is missed), the bf16 weight copy, and LOOM_CUDA_SYNC_DEBUG naming the
// failing op. Part of the cuda_production_test program (tolerances and the
// other cases: cuda_production_test.cc).
#include "tests/cuda/cuda_test_support.h"

namespace loom::exec {
namespace {

using namespace cuda_test;

// ---------------------------------------------------------------------------
// Every op of the table

// bf16 of a float, round to nearest even (finite inputs).
float round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// Each virtual of Kernels on the CUDA table (fp32, so the CPU table is the
// reference up to summation order) at moderate sizes; the profiler in front
// of the table counts the calls, and every op must have been called.
TEST(CudaTableCoverage, EveryOpMatchesTheCpuTable) {
  SKIP_WITHOUT_GPU();
  auto be = cuda_backend(Precision::kFp32);
  auto prof = install_kernel_profiler(*be);
  ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
  Kernels& k = be->kernels();
  auto cpu = make_cpu_kernels();
  EXPECT_EQ(k.precision(), Precision::kFp32);
  const Tol f32{1e-5, 1e-5, 0};

  // GEMM, every transpose mode, beta 0 and not; K = 0 (C = beta C).
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 0.5f}) {
        const int64_t M = 67, N = 129, K = 96;
        auto a = random_vec(size_t(M * K), 1), bm = random_vec(size_t(K * N), 2), c = random_vec(size_t(M * N), 3);
        Dev<float> da(*be, a), db(*be, bm), dc(*be, c);
        cpu->gemm(ta, tb, M, N, K, 0.75f, a.data(), bm.data(), beta, c.data());
        k.gemm(ta, tb, M, N, K, 0.75f, da.p(), db.p(), beta, dc.p());
        expect_close(dc.get(), c, f32,
                     std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N") + (beta != 0 ? " beta .5" : ""));
      }
  for (float beta : {0.f, 0.5f}) {
    auto c = random_vec(50, 4);
    Dev<float> dc(*be, c);
    cpu->gemm(false, false, 5, 10, 0, 1.f, nullptr, nullptr, beta, c.data());
    k.gemm(false, false, 5, 10, 0, 1.f, nullptr, nullptr, beta, dc.p());
    expect_close(dc.get(), c, kExact, beta != 0 ? "gemm K=0 (C = beta C)" : "gemm K=0 beta 0 (C = 0)");
  }

  {  // LayerNorm over two 256-row chunks of the column sums
    const int64_t N = 300, C = 768;
    auto x = random_vec(size_t(N * C), 5, -2, 3), w = random_vec(size_t(C), 6), b = random_vec(size_t(C), 7),
         dy = random_vec(size_t(N * C), 8);
    std::vector<float> y(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dx(x.size()), dw(size_t(C), 0.5f),
        db(size_t(C), -0.25f);
    Dev<float> dx_(*be, x), dw_(*be, w), db_(*be, b), dy_(*be, dy), gy(*be, x.size()), gm(*be, size_t(N)),
        gr(*be, size_t(N)), gx(*be, x.size()), gw(*be, dw), gb(*be, db);
    cpu->layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
    cpu->layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(),
                            N, C);
    k.layernorm_forward(dx_.p(), dw_.p(), db_.p(), gy.p(), gm.p(), gr.p(), N, C, 1e-5f);
    k.layernorm_backward(dy_.p(), dx_.p(), dw_.p(), gm.p(), gr.p(), gx.p(), gw.p(), gb.p(), N, C);
    expect_close(gy.get(), y, f32, "layernorm_forward y");
    expect_close(gr.get(), rstd, f32, "layernorm_forward rstd");
    expect_close(gx.get(), dx, f32, "layernorm_backward dx");
    expect_close(gw.get(), dw, Tol{1e-4, 1e-5, 0}, "layernorm_backward dw");
    expect_close(gb.get(), db, Tol{1e-4, 1e-5, 0}, "layernorm_backward db");
  }
  {  // RMSNorm
    const int64_t N = 300, C = 1000;
    auto x = random_vec(size_t(N * C), 9, -2, 2), w = random_vec(size_t(C), 10), dy = random_vec(size_t(N * C), 11);
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(N)), dx(x.size()), dw(size_t(C), 0.5f);
    Dev<float> dx_(*be, x), dw_(*be, w), dy_(*be, dy), gy(*be, x.size()), gr(*be, size_t(N)), gx(*be, x.size()),
        gw(*be, dw);
    cpu->rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-6f);
    cpu->rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), N, C);
    k.rmsnorm_forward(dx_.p(), dw_.p(), gy.p(), gr.p(), N, C, 1e-6f);
    k.rmsnorm_backward(dy_.p(), dx_.p(), dw_.p(), gr.p(), gx.p(), gw.p(), N, C);
    expect_close(gy.get(), y, f32, "rmsnorm_forward y");
    expect_close(gx.get(), dx, f32, "rmsnorm_backward dx");
    expect_close(gw.get(), dw, Tol{1e-4, 1e-5, 0}, "rmsnorm_backward dw");
  }
  {  // GELU, SwiGLU
    const int64_t n = 100003;
    auto x = random_vec(size_t(n), 12, -6, 6), u = random_vec(size_t(n), 13), dy = random_vec(size_t(n), 14);
    std::vector<float> y(x.size()), dx(x.size()), s(x.size()), dg(x.size()), du(x.size());
    Dev<float> dx_(*be, x), du_(*be, u), ddy(*be, dy), gy(*be, x.size()), gx(*be, x.size()), gs(*be, x.size()),
        gg(*be, x.size()), gu(*be, x.size());
    cpu->gelu_forward(x.data(), y.data(), n);
    cpu->gelu_backward(dy.data(), x.data(), dx.data(), n);
    cpu->swiglu_forward(x.data(), u.data(), s.data(), n);
    cpu->swiglu_backward(dy.data(), x.data(), u.data(), dg.data(), du.data(), n);
    k.gelu_forward(dx_.p(), gy.p(), n);
    k.gelu_backward(ddy.p(), dx_.p(), gx.p(), n);
    k.swiglu_forward(dx_.p(), du_.p(), gs.p(), n);
    k.swiglu_backward(ddy.p(), dx_.p(), du_.p(), gg.p(), gu.p(), n);
    expect_close(gy.get(), y, f32, "gelu_forward");
    expect_close(gx.get(), dx, f32, "gelu_backward");
    expect_close(gs.get(), s, f32, "swiglu_forward");
    expect_close(gg.get(), dg, f32, "swiglu_backward dgate");
    expect_close(gu.get(), du, f32, "swiglu_backward dup");
  }
  {  // RoPE, forward on x and backward on a gradient
    const int64_t B = 2, T = 300, H = 3, D = 64;
    auto x = random_vec(size_t(B * T * H * D), 15), g = random_vec(size_t(B * T * H * D), 16);
    Dev<float> dx_(*be, x), dg_(*be, g);
    cpu->rope_forward(x.data(), B, T, H, D, 500000.f, 7);
    cpu->rope_backward(g.data(), B, T, H, D, 500000.f, 7);
    k.rope_forward(dx_.p(), B, T, H, D, 500000.f, 7);
    k.rope_backward(dg_.p(), B, T, H, D, 500000.f, 7);
    expect_close(dx_.get(), x, f32, "rope_forward");
    expect_close(dg_.get(), g, f32, "rope_backward");
    // The frequency-table form (Llama-3.1 rope scaling) on theta's own
    // frequencies: the GPU against the CPU, and the CPU against rope_forward.
    std::vector<double> inv_freq(size_t(D / 2));
    for (int64_t i = 0; i < D / 2; ++i) inv_freq[size_t(i)] = std::pow(500000.0, -2.0 * double(i) / double(D));
    auto x2 = random_vec(size_t(B * T * H * D), 15), g2 = random_vec(size_t(B * T * H * D), 16);
    Dev<float> dx2(*be, x2), dg2(*be, g2);
    cpu->rope_freqs_forward(x2.data(), B, T, H, D, inv_freq.data(), 7);
    cpu->rope_freqs_backward(g2.data(), B, T, H, D, inv_freq.data(), 7);
    k.rope_freqs_forward(dx2.p(), B, T, H, D, inv_freq.data(), 7);
    k.rope_freqs_backward(dg2.p(), B, T, H, D, inv_freq.data(), 7);
    expect_close(dx2.get(), x2, f32, "rope_freqs_forward");
    expect_close(dg2.get(), g2, f32, "rope_freqs_backward");
    expect_close(x2, x, f32, "rope_freqs_forward (CPU) = rope_forward (CPU)");
  }
  {  // attention (the cuBLAS path of this backend), small
    const int64_t B = 2, T = 77, Hq = 4, Hk = 2, D = 32;
    const size_t nq = size_t(B * T * Hq * D), nk = size_t(B * T * Hk * D), nl = size_t(B * Hq * T);
    auto q = random_vec(nq, 17), kk = random_vec(nk, 18), v = random_vec(nk, 19), dout = random_vec(nq, 20);
    std::vector<float> out(nq), lse(nl), dq(nq), dk(nk), dv(nk);
    cpu->attention_forward(q.data(), kk.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D);
    cpu->attention_backward(dout.data(), q.data(), kk.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                            dv.data(), B, T, Hq, Hk, D);
    Dev<float> q_(*be, q), k_(*be, kk), v_(*be, v), do_(*be, dout), o_(*be, nans(nq)), l_(*be, nans(nl)),
        gq(*be, nans(nq)), gk(*be, nans(nk)), gv(*be, nans(nk));
    k.attention_forward(q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), B, T, Hq, Hk, D);
    k.attention_backward(do_.p(), q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), gq.p(), gk.p(), gv.p(), B, T, Hq, Hk, D);
    expect_close(o_.get(), out, kAttentionFp32, "attention_forward out");
    expect_close(l_.get(), lse, kAttentionFp32, "attention_forward lse");
    expect_close(gq.get(), dq, kAttentionFp32, "attention_backward dq");
    expect_close(gk.get(), dk, kAttentionFp32, "attention_backward dk");
    expect_close(gv.get(), dv, kAttentionFp32, "attention_backward dv");
  }
  {  // embedding over a vocabulary slice, learned positions
    const int64_t N = 640, C = 48, V = 500, v_begin = 250;
    std::vector<int32_t> tok(static_cast<size_t>(N));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t(splitmix(i + 7) % 750);  // a third outside the slice
    auto wte = random_vec(size_t(V * C), 21), dout = random_vec(size_t(N * C), 22);
    std::vector<float> emb(size_t(N * C)), dwte(wte.size(), 0.25f);
    Dev<int32_t> dt(*be, tok);
    Dev<float> dw_(*be, wte), de(*be, emb.size()), ddo(*be, dout), dd(*be, dwte);
    cpu->embedding_forward(tok.data(), wte.data(), emb.data(), N, C, v_begin, V);
    cpu->embedding_backward(tok.data(), dout.data(), dwte.data(), N, C, v_begin, V);
    k.embedding_forward(dt.p(), dw_.p(), de.p(), N, C, v_begin, V);
    k.embedding_backward(dt.p(), ddo.p(), dd.p(), N, C, v_begin, V);
    expect_close(de.get(), emb, kExact, "embedding_forward");
    expect_close(dd.get(), dwte, kExact, "embedding_backward (rows in order, as the CPU)");

    const int64_t R = 3 * 16 + 5, T = 16, row0 = 7;
    auto x = random_vec(size_t(R * C), 23), wpe = random_vec(size_t(T * C), 24), dwpe = random_vec(size_t(T * C), 25);
    Dev<float> dx_(*be, x), dp(*be, wpe), ddp(*be, dwpe);
    cpu->add_positions(x.data(), wpe.data(), R, C, T, row0);
    cpu->positions_backward(x.data(), dwpe.data(), R, C, T, row0);
    k.add_positions(dx_.p(), dp.p(), R, C, T, row0);
    k.positions_backward(dx_.p(), ddp.p(), R, C, T, row0);
    expect_close(dx_.get(), x, kExact, "add_positions");
    expect_close(ddp.get(), dwpe, f32, "positions_backward");
  }
  {  // cross-entropy over a padded vocabulary slice
    const int64_t N = 64, V = 500, v_begin = 250, real = 700;
    auto logits = random_vec(size_t(N * V), 26, -8, 8);
    std::vector<int32_t> tok(static_cast<size_t>(N));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t(splitmix(i + 8) % uint64_t(real));
    std::vector<float> mx(static_cast<size_t>(N)), se(static_cast<size_t>(N)), tl(static_cast<size_t>(N)), loss(static_cast<size_t>(N)), dl(logits.size());
    Dev<float> dl_(*be, logits), dmx(*be, size_t(N)), dse(*be, size_t(N)), dtl(*be, size_t(N)), dls(*be, size_t(N)),
        dd(*be, logits.size());
    Dev<int32_t> dt(*be, tok);
    cpu->fill_columns(logits.data(), N, V, real - v_begin, V, -1e30f);
    cpu->xent_row_max(logits.data(), mx.data(), N, V);
    cpu->xent_sumexp_and_target(logits.data(), tok.data(), mx.data(), se.data(), tl.data(), N, V, v_begin);
    cpu->xent_loss(mx.data(), se.data(), tl.data(), loss.data(), N);
    cpu->xent_backward(logits.data(), tok.data(), mx.data(), se.data(), dl.data(), N, V, v_begin, 1.f / 64);
    k.fill_columns(dl_.p(), N, V, real - v_begin, V, -1e30f);
    k.xent_row_max(dl_.p(), dmx.p(), N, V);
    k.xent_sumexp_and_target(dl_.p(), dt.p(), dmx.p(), dse.p(), dtl.p(), N, V, v_begin);
    k.xent_loss(dmx.p(), dse.p(), dtl.p(), dls.p(), N);
    k.xent_backward(dl_.p(), dt.p(), dmx.p(), dse.p(), dd.p(), N, V, v_begin, 1.f / 64);
    expect_close(dl_.get(), logits, kExact, "fill_columns");
    expect_close(dmx.get(), mx, kExact, "xent_row_max");
    expect_close(dse.get(), se, Tol{0, 1e-6, 1e-6}, "xent_sumexp_and_target sum");
    expect_close(dtl.get(), tl, kExact, "xent_sumexp_and_target target");
    expect_close(dls.get(), loss, Tol{1e-6, 1e-6, 0}, "xent_loss");
    expect_close(dd.get(), dl, Tol{1e-6, 1e-6, 0}, "xent_backward");
  }
  {  // AdamW over steps
    const int64_t n = 50001;
    auto p = random_vec(size_t(n), 27);
    std::vector<float> m(size_t(n), 0.f), v(size_t(n), 0.f);
    Dev<float> dp(*be, p), dm(*be, m), dv(*be, v);
    for (int64_t step = 1; step <= 3; ++step) {
      auto g = random_vec(size_t(n), uint64_t(27 + step));
      Dev<float> dg(*be, g);
      cpu->adamw_update(p.data(), g.data(), m.data(), v.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      k.adamw_update(dp.p(), dg.p(), dm.p(), dv.p(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    }
    expect_close(dp.get(), p, Tol{1e-6, 1e-6, 0}, "adamw_update param");
    expect_close(dm.get(), m, Tol{1e-6, 1e-6, 0}, "adamw_update m");
    expect_close(dv.get(), v, Tol{1e-6, 1e-6, 0}, "adamw_update v");
  }
  {  // add, bias, bias gradient over 3000 rows, scale
    const int64_t N = 3000, C = 45, n = N * C;
    auto y = random_vec(size_t(n), 30), x = random_vec(size_t(n), 31), bias = random_vec(size_t(C), 32);
    std::vector<float> db(size_t(C), 0.25f);
    Dev<float> dy(*be, y), dx_(*be, x), dbias(*be, bias), ddb(*be, db);
    cpu->add_inplace(y.data(), x.data(), n);
    cpu->add_bias(y.data(), bias.data(), N, C);
    cpu->scale_inplace(y.data(), 0.375f, n);
    cpu->bias_backward(y.data(), db.data(), N, C);
    k.add_inplace(dy.p(), dx_.p(), n);
    k.add_bias(dy.p(), dbias.p(), N, C);
    k.scale_inplace(dy.p(), 0.375f, n);
    k.bias_backward(dy.p(), ddb.p(), N, C);
    expect_close(dy.get(), y, kExact, "add_inplace, add_bias, scale_inplace");
    expect_close(ddb.get(), db, Tol{1e-4, 1e-5, 0}, "bias_backward");
  }
  {  // 16-bit copies (bf16 on the fp32 table), sums
    const int64_t n = 100003;
    auto x = random_vec(size_t(n), 33, -1e3f, 1e3f);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::vector<float> back(static_cast<size_t>(n));
    cpu->to_16bit(x.data(), h.data(), n);
    cpu->from_16bit(h.data(), back.data(), n);
    Dev<float> dx_(*be, x), dback(*be, size_t(n));
    Dev<uint16_t> dh(*be, size_t(n));
    k.to_16bit(dx_.p(), dh.p(), n);
    k.from_16bit(dh.p(), dback.p(), n);
    EXPECT_EQ(dh.get(), h) << "to_16bit";
    expect_close(dback.get(), back, kExact, "from_16bit");

    double abs_sum = 0;
    for (float v : x) abs_sum += std::fabs(v);
    EXPECT_NEAR(k.sum(dx_.p(), n), cpu->sum(x.data(), n), 1e-12 * abs_sum) << "sum";
    for (int64_t piece : {int64_t(1000), int64_t(50000), n - 51000}) {
      const int64_t at = piece == 1000 ? 0 : piece == 50000 ? 1000 : 51000;
      k.add_sum_squares(dx_.p() + at, piece);
      cpu->add_sum_squares(x.data() + at, piece);
    }
    const double want = cpu->take_sum_squares();
    EXPECT_NEAR(k.take_sum_squares(), want, 1e-12 * want) << "add_sum_squares / take_sum_squares";
    EXPECT_EQ(k.take_sum_squares(), 0.0) << "taken: nothing pending";
  }
  be->synchronize();
  ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();

  // The profiler saw every op, and timed them on the GPU.
  const auto rows = (*prof)->report();
  std::printf("%s", format_op_profile(rows, 1).c_str());
  for (int i = 0; i < kNumKernelOps; ++i) {
    const std::string op = kernel_op_name(KernelOp(i));
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const OpProfileRow& r) { return r.op == op; });
    ASSERT_NE(it, rows.end()) << op << " was never called through the table";
    EXPECT_GT(it->calls, 0) << op;
    EXPECT_GE(it->seconds, 0) << op;
  }
  double total = 0;
  for (const OpProfileRow& r : rows) total += r.seconds;
  EXPECT_GT(total, 0) << "CUDA events timed the ops";
}

// Under bf16 the table keeps one bf16 copy of the parameters named by
// set_weights() and casts a range again only after weights_changed().
TEST(CudaTableCoverage, Bf16GemmReadsTheWeightCopyAndRecastsChangedRanges) {
  SKIP_WITHOUT_GPU();
  auto be = cuda_backend(Precision::kBf16);
  Kernels& k = be->kernels();
  EXPECT_EQ(k.precision(), Precision::kBf16);
  auto cpu = make_cpu_kernels();
  const int64_t M = 64, N = 96, K = 128, off = 1000, nparams = off + K * N + 17;
  auto params = random_vec(size_t(nparams), 50), a = random_vec(size_t(M * K), 51);
  Dev<float> dparams(*be, params), da(*be, a), dc(*be, size_t(M * N));
  k.set_weights(dparams.p(), nparams);
  auto reference = [&](const std::vector<float>& p) {
    std::vector<float> ar(a.size()), br(size_t(K * N)), c(size_t(M * N));
    for (size_t i = 0; i < ar.size(); ++i) ar[i] = round_bf16(a[i]);
    for (size_t i = 0; i < br.size(); ++i) br[i] = round_bf16(p[size_t(off) + i]);
    cpu->gemm(false, false, M, N, K, 1.f, ar.data(), br.data(), 0.f, c.data());
    return c;
  };
  k.gemm(false, false, M, N, K, 1.f, da.p(), dparams.p() + off, 0.f, dc.p());
  expect_close(dc.get(), reference(params), Tol{2e-3, 2e-3, 0}, "bf16 gemm on the weight copy");
  // An optimizer step changes the weights: the next GEMM sees the new ones.
  auto updated = random_vec(size_t(nparams), 52);
  dparams.set(updated);
  k.weights_changed(dparams.p(), nparams);
  k.gemm(false, false, M, N, K, 1.f, da.p(), dparams.p() + off, 0.f, dc.p());
  expect_close(dc.get(), reference(updated), Tol{2e-3, 2e-3, 0}, "bf16 gemm after weights_changed");
  be->synchronize();
  EXPECT_TRUE(k.status().is_ok()) << k.status().to_string();
}

// ---------------------------------------------------------------------------
// LOOM_CUDA_SYNC_DEBUG

// A shape the fused kernel refuses is reported naming the op and its shape;
// the ops before it ran as usual.
TEST(CudaSyncDebug, NamesTheOpOfARefusedShape) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<ComputeBackend> be;
  {
    ScopedEnv debug("LOOM_CUDA_SYNC_DEBUG", "1");
    be = cuda_backend(Precision::kFp32, /*fused_attention=*/true);
  }
  Kernels& k = be->kernels();
  auto cpu = make_cpu_kernels();
  auto x = random_vec(4096, 60), y = random_vec(4096, 61);
  Dev<float> dx(*be, x), dy(*be, y);
  cpu->add_inplace(y.data(), x.data(), 4096);
  k.add_inplace(dy.p(), dx.p(), 4096);
  EXPECT_TRUE(k.status().is_ok()) << k.status().to_string();
  expect_close(dy.get(), y, kExact, "add_inplace under sync debug");

  const int64_t T = 12161, D = 64;  // one row past the fused kernel's shared memory
  Dev<float> q(*be, size_t(T * D)), o(*be, size_t(T * D)), lse(*be, size_t(T));
  testing::internal::CaptureStderr();
  k.attention_forward(q.p(), q.p(), q.p(), o.p(), lse.p(), 1, T, 1, 1, D);
  const std::string err = testing::internal::GetCapturedStderr();
  const Status s = k.status();
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("in attention_forward (B=1, T=12161, Hq=1, Hk=1, D=64)"), std::string::npos)
      << s.to_string();
  EXPECT_NE(err.find("LOOM_CUDA_SYNC_DEBUG"), std::string::npos) << err;
  EXPECT_NE(err.find("attention_forward (B=1, T=12161"), std::string::npos) << err;
}

// A kernel that faults (an unmapped device address) is named with the CUDA
// error. The fault ends the CUDA context, so it runs in a child process.
TEST(CudaSyncDebug, NamesTheKernelThatFaulted) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("LOOM_CUDA_SYNC_DEBUG", "1", 1);
        auto be = make_cuda_backend(0, Precision::kFp32);
        if (!be.is_ok()) std::_Exit(2);
        Kernels& k = (*be)->kernels();
        // 16 KB from 4 KB: below the lowest address Linux ever maps
        // (vm.mmap_min_addr, 64 KB), so not reachable through HMM either.
        float* unmapped = reinterpret_cast<float*>(uintptr_t(4096));
        k.add_inplace(unmapped, unmapped, 4096);
        const Status s = k.status();
        std::fprintf(stderr, "status: %s\n", s.to_string().c_str());
        std::_Exit(s.is_ok() ? 0 : 3);
      },
      testing::ExitedWithCode(3), "CUDA error '.+' \\(cuda[A-Za-z]+\\) in add_inplace \\(n=4096\\)");
}


}  // namespace
}  // namespace loom::exec
