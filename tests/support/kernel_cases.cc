// The cases of every kernel op, and the runner (kernel_cases.h). Sizes are
// moderate: large enough to cross a GPU kernel's block and chunk boundaries
// (odd element counts, rows past 256, columns past a warp), small enough for
// the CPU reference to run them all in about a second. Inputs a backward op
// needs from its forward (mean, rstd, lse, out, row_max...) are made with the
// cpu:: reference here, so every case calls one op.
#include "tests/support/kernel_cases.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "exec/backend/cpu_kernels.h"
#include "exec/backend/cpu_ops.h"

namespace loom::exec::kernel_cases {

using test::kExact;
using test::random_vec;
using test::splitmix;

namespace {

constexpr Tol kF32Accumulated{1e-4, 1e-5, 0};  // column sums over hundreds of rows

std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.f); }

// Tokens in [0, range): with a slice [v_begin, v_begin + V) inside, some
// fall outside it (vocab parallel).
std::vector<int32_t> tokens(size_t n, uint64_t seed, int64_t range) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t(splitmix(i + seed) % uint64_t(range));
  return t;
}


}  // namespace

// ---------------------------------------------------------------------------
// The cases, op by op

template <>
std::vector<Case> cases<LayernormForward>() {
  const int64_t N = 300, C = 768;
  Case c = make(KernelOp::kLayernormForward, "layernorm_forward");
  const int x = c.in("x", random_vec(size_t(N * C), 5, -2, 3)), w = c.in("w", random_vec(size_t(C), 6)),
            b = c.in("b", random_vec(size_t(C), 7));
  const int y = c.out("y", size_t(N * C), kF32), mean = c.out("mean", size_t(N), kF32),
            rstd = c.out("rstd", size_t(N), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.layernorm_forward({p.f(x), p.f(w), p.f(b), p.f(y), p.f(mean), p.f(rstd), N, C, 1e-5f});
    return std::vector<double>{};
  };
  // The fused residual add: the row normalized is x + r, written to sum.
  Case f = make(KernelOp::kLayernormForward, "layernorm_forward + residual");
  const int fx = f.in("x", random_vec(size_t(N * C), 5, -2, 3)), fr = f.in("r", random_vec(size_t(N * C), 25, -1, 1)),
            fw = f.in("w", random_vec(size_t(C), 6)), fb = f.in("b", random_vec(size_t(C), 7));
  const int fy = f.out("y", size_t(N * C), kF32), fmean = f.out("mean", size_t(N), kF32),
            frstd = f.out("rstd", size_t(N), kF32), fsum = f.out("sum", size_t(N * C), kF32);
  f.run = [=](Kernels& k, const Bound& p) {
    k.layernorm_forward(
        {p.f(fx), p.f(fw), p.f(fb), p.f(fy), p.f(fmean), p.f(frstd), N, C, 1e-5f, p.f(fr), p.f(fsum)});
    return std::vector<double>{};
  };
  return {c, f};
}

template <>
std::vector<Case> cases<LayernormBackward>() {
  const int64_t N = 300, C = 768;
  auto xv = random_vec(size_t(N * C), 5, -2, 3), wv = random_vec(size_t(C), 6), bv = random_vec(size_t(C), 7);
  std::vector<float> yv(xv.size()), meanv(static_cast<size_t>(N)), rstdv(static_cast<size_t>(N));
  cpu::layernorm_forward(xv.data(), wv.data(), bv.data(), yv.data(), meanv.data(), rstdv.data(), N, C, 1e-5f);
  Case c = make(KernelOp::kLayernormBackward, "layernorm_backward");
  const int dy = c.in("dy", random_vec(size_t(N * C), 8)), x = c.in("x", xv), w = c.in("w", wv),
            mean = c.in("mean", meanv), rstd = c.in("rstd", rstdv);
  const int dx = c.out("dx", xv.size(), kF32), dw = c.inout("dw", std::vector<float>(size_t(C), 0.5f), kF32Accumulated),
            db = c.inout("db", std::vector<float>(size_t(C), -0.25f), kF32Accumulated);
  c.run = [=](Kernels& k, const Bound& p) {
    k.layernorm_backward({p.f(dy), p.f(x), p.f(w), p.f(mean), p.f(rstd), p.f(dx), p.f(dw), p.f(db), N, C});
    return std::vector<double>{};
  };
  // dx plus the residual branch's gradient, fused.
  Case f = c;
  f.label = "layernorm_backward + dx_add";
  const int add = f.in("dx_add", random_vec(size_t(N * C), 26));
  f.run = [=](Kernels& k, const Bound& p) {
    k.layernorm_backward(
        {p.f(dy), p.f(x), p.f(w), p.f(mean), p.f(rstd), p.f(dx), p.f(dw), p.f(db), N, C, p.f(add)});
    return std::vector<double>{};
  };
  return {c, f};
}

template <>
std::vector<Case> cases<RmsnormForward>() {
  const int64_t N = 300, C = 1000;
  Case c = make(KernelOp::kRmsnormForward, "rmsnorm_forward");
  const int x = c.in("x", random_vec(size_t(N * C), 9, -2, 2)), w = c.in("w", random_vec(size_t(C), 10));
  const int y = c.out("y", size_t(N * C), kF32), rstd = c.out("rstd", size_t(N), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.rmsnorm_forward({p.f(x), p.f(w), p.f(y), p.f(rstd), N, C, 1e-6f});
    return std::vector<double>{};
  };
  Case f = c;
  f.label = "rmsnorm_forward + residual";
  const int r = f.in("r", random_vec(size_t(N * C), 27, -1, 1)), sum = f.out("sum", size_t(N * C), kF32);
  f.run = [=](Kernels& k, const Bound& p) {
    k.rmsnorm_forward({p.f(x), p.f(w), p.f(y), p.f(rstd), N, C, 1e-6f, p.f(r), p.f(sum)});
    return std::vector<double>{};
  };
  return {c, f};
}

template <>
std::vector<Case> cases<RmsnormBackward>() {
  const int64_t N = 300, C = 1000;
  auto xv = random_vec(size_t(N * C), 9, -2, 2), wv = random_vec(size_t(C), 10);
  std::vector<float> yv(xv.size()), rstdv(static_cast<size_t>(N));
  cpu::rmsnorm_forward(xv.data(), wv.data(), yv.data(), rstdv.data(), N, C, 1e-6f);
  Case c = make(KernelOp::kRmsnormBackward, "rmsnorm_backward");
  const int dy = c.in("dy", random_vec(size_t(N * C), 11)), x = c.in("x", xv), w = c.in("w", wv),
            rstd = c.in("rstd", rstdv);
  const int dx = c.out("dx", xv.size(), kF32),
            dw = c.inout("dw", std::vector<float>(size_t(C), 0.5f), kF32Accumulated);
  c.run = [=](Kernels& k, const Bound& p) {
    k.rmsnorm_backward({p.f(dy), p.f(x), p.f(w), p.f(rstd), p.f(dx), p.f(dw), N, C});
    return std::vector<double>{};
  };
  Case f = c;
  f.label = "rmsnorm_backward + dx_add";
  const int add = f.in("dx_add", random_vec(size_t(N * C), 28));
  f.run = [=](Kernels& k, const Bound& p) {
    k.rmsnorm_backward({p.f(dy), p.f(x), p.f(w), p.f(rstd), p.f(dx), p.f(dw), N, C, p.f(add)});
    return std::vector<double>{};
  };
  return {c, f};
}


template <>
std::vector<Case> cases<GeluForward>() {
  const int64_t n = kElementwise;
  Case c = make(KernelOp::kGeluForward, "gelu_forward");
  const int x = c.in("x", random_vec(size_t(n), 12, -6, 6)), y = c.out("y", size_t(n), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.gelu_forward({p.f(x), p.f(y), n});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<GeluBackward>() {
  const int64_t n = kElementwise;
  Case c = make(KernelOp::kGeluBackward, "gelu_backward");
  const int dy = c.in("dy", random_vec(size_t(n), 14)), x = c.in("x", random_vec(size_t(n), 12, -6, 6)),
            dx = c.out("dx", size_t(n), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.gelu_backward({p.f(dy), p.f(x), p.f(dx), n});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<SwigluForward>() {
  const int64_t n = kElementwise;
  Case c = make(KernelOp::kSwigluForward, "swiglu_forward");
  const int g = c.in("gate", random_vec(size_t(n), 12, -6, 6)), u = c.in("up", random_vec(size_t(n), 13)),
            y = c.out("y", size_t(n), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.swiglu_forward({p.f(g), p.f(u), p.f(y), n});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<SwigluBackward>() {
  const int64_t n = kElementwise;
  Case c = make(KernelOp::kSwigluBackward, "swiglu_backward");
  const int dy = c.in("dy", random_vec(size_t(n), 14)), g = c.in("gate", random_vec(size_t(n), 12, -6, 6)),
            u = c.in("up", random_vec(size_t(n), 13));
  const int dg = c.out("dgate", size_t(n), kF32), du = c.out("dup", size_t(n), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.swiglu_backward({p.f(dy), p.f(g), p.f(u), p.f(dg), p.f(du), n});
    return std::vector<double>{};
  };
  return {c};
}

// RoPE: B=2, T=300 at offset 7, 3 heads of 64, Llama-3's theta.
constexpr int64_t kRopeB = 2, kRopeT = 300, kRopeH = 3, kRopeD = 64, kRopeOffset = 7;
constexpr float kRopeTheta = 500000.f;

template <>
std::vector<Case> cases<RopeForward>() {
  Case c = make(KernelOp::kRopeForward, "rope_forward");
  const int x = c.inout("x", random_vec(size_t(kRopeB * kRopeT * kRopeH * kRopeD), 15), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.rope_forward({p.f(x), kRopeB, kRopeT, kRopeH, kRopeD, kRopeTheta, kRopeOffset});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<RopeBackward>() {
  Case c = make(KernelOp::kRopeBackward, "rope_backward");
  const int dx = c.inout("dx", random_vec(size_t(kRopeB * kRopeT * kRopeH * kRopeD), 16), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.rope_backward({p.f(dx), kRopeB, kRopeT, kRopeH, kRopeD, kRopeTheta, kRopeOffset});
    return std::vector<double>{};
  };
  return {c};
}

// Llama-3.1-style scaled frequencies (a factor 8 on the low ones), in host
// memory as the op takes them.
std::shared_ptr<std::vector<double>> scaled_inv_freq() {
  auto f = std::make_shared<std::vector<double>>(size_t(kRopeD / 2));
  for (int64_t i = 0; i < kRopeD / 2; ++i) {
    const double base = std::pow(double(kRopeTheta), -2.0 * double(i) / double(kRopeD));
    (*f)[size_t(i)] = i >= kRopeD / 4 ? base / 8 : base;
  }
  return f;
}

template <>
std::vector<Case> cases<RopeFreqsForward>() {
  Case c = make(KernelOp::kRopeFreqsForward, "rope_freqs_forward");
  const int x = c.inout("x", random_vec(size_t(kRopeB * kRopeT * kRopeH * kRopeD), 17), kF32);
  auto freqs = scaled_inv_freq();
  c.run = [=](Kernels& k, const Bound& p) {
    k.rope_freqs_forward({p.f(x), kRopeB, kRopeT, kRopeH, kRopeD, freqs->data(), kRopeOffset});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<RopeFreqsBackward>() {
  Case c = make(KernelOp::kRopeFreqsBackward, "rope_freqs_backward");
  const int dx = c.inout("dx", random_vec(size_t(kRopeB * kRopeT * kRopeH * kRopeD), 18), kF32);
  auto freqs = scaled_inv_freq();
  c.run = [=](Kernels& k, const Bound& p) {
    k.rope_freqs_backward({p.f(dx), kRopeB, kRopeT, kRopeH, kRopeD, freqs->data(), kRopeOffset});
    return std::vector<double>{};
  };
  return {c};
}

// Embedding over the slice [250, 750) of a 750-token vocabulary: a third of
// the tokens fall outside it.
constexpr int64_t kEmbN = 640, kEmbC = 48, kEmbV = 500, kEmbBegin = 250;

template <>
std::vector<Case> cases<EmbeddingForward>() {
  Case c = make(KernelOp::kEmbeddingForward, "embedding_forward");
  const int t = c.in("tokens", tokens(size_t(kEmbN), 7, kEmbBegin + kEmbV)),
            wte = c.in("wte", random_vec(size_t(kEmbV * kEmbC), 23));
  const int out = c.out("out", size_t(kEmbN * kEmbC), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.embedding_forward({p.i(t), p.f(wte), p.f(out), kEmbN, kEmbC, kEmbBegin, kEmbV});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<EmbeddingBackward>() {
  Case c = make(KernelOp::kEmbeddingBackward, "embedding_backward");
  const int t = c.in("tokens", tokens(size_t(kEmbN), 7, kEmbBegin + kEmbV)),
            dout = c.in("dout", random_vec(size_t(kEmbN * kEmbC), 24));
  // Rows in token order, as the CPU adds them: bit for bit.
  const int dwte = c.inout("dwte", std::vector<float>(size_t(kEmbV * kEmbC), 0.25f), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.embedding_backward({p.i(t), p.f(dout), p.f(dwte), kEmbN, kEmbC, kEmbBegin, kEmbV});
    return std::vector<double>{};
  };
  return {c};
}

// Learned positions over 53 rows starting at global row 7 of T = 16.
constexpr int64_t kPosR = 3 * 16 + 5, kPosC = 48, kPosT = 16, kPosRow0 = 7;

template <>
std::vector<Case> cases<AddPositions>() {
  Case c = make(KernelOp::kAddPositions, "add_positions");
  const int x = c.inout("x", random_vec(size_t(kPosR * kPosC), 25), kExact),
            wpe = c.in("wpe", random_vec(size_t(kPosT * kPosC), 26));
  c.run = [=](Kernels& k, const Bound& p) {
    k.add_positions({p.f(x), p.f(wpe), kPosR, kPosC, kPosT, kPosRow0});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<PositionsBackward>() {
  Case c = make(KernelOp::kPositionsBackward, "positions_backward");
  const int dx = c.in("dx", random_vec(size_t(kPosR * kPosC), 27)),
            dwpe = c.inout("dwpe", random_vec(size_t(kPosT * kPosC), 28), kF32);
  c.run = [=](Kernels& k, const Bound& p) {
    k.positions_backward({p.f(dx), p.f(dwpe), kPosR, kPosC, kPosT, kPosRow0});
    return std::vector<double>{};
  };
  return {c};
}

// Cross-entropy over the slice [250, 750) of a vocabulary of 700 real tokens
// padded to 750: columns past 700 - 250 are masked.
constexpr int64_t kXentN = 64, kXentV = 500, kXentBegin = 250, kXentReal = 700;

struct XentInputs {
  std::vector<float> logits, row_max, row_sumexp, target_logit;
  std::vector<int32_t> targets;
};
XentInputs xent_inputs() {
  XentInputs in;
  in.logits = random_vec(size_t(kXentN * kXentV), 29, -8, 8);
  for (int64_t r = 0; r < kXentN; ++r)
    for (int64_t col = kXentReal - kXentBegin; col < kXentV; ++col) in.logits[size_t(r * kXentV + col)] = -1e30f;
  in.targets = tokens(size_t(kXentN), 8, kXentReal);
  in.row_max.resize(size_t(kXentN));
  in.row_sumexp.resize(size_t(kXentN));
  in.target_logit.resize(size_t(kXentN));
  cpu::xent_row_max(in.logits.data(), in.row_max.data(), kXentN, kXentV);
  cpu::xent_sumexp_and_target(in.logits.data(), in.targets.data(), in.row_max.data(), in.row_sumexp.data(),
                              in.target_logit.data(), kXentN, kXentV, kXentBegin);
  return in;
}

template <>
std::vector<Case> cases<FillColumns>() {
  Case c = make(KernelOp::kFillColumns, "fill_columns");
  const int x = c.inout("x", random_vec(size_t(kXentN * kXentV), 29, -8, 8), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.fill_columns({p.f(x), kXentN, kXentV, kXentReal - kXentBegin, kXentV, -1e30f});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<XentRowMax>() {
  const XentInputs in = xent_inputs();
  Case c = make(KernelOp::kXentRowMax, "xent_row_max");
  const int l = c.in("logits", in.logits), m = c.out("row_max", size_t(kXentN), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.xent_row_max({p.f(l), p.f(m), kXentN, kXentV});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<XentSumexpAndTarget>() {
  const XentInputs in = xent_inputs();
  Case c = make(KernelOp::kXentSumexpAndTarget, "xent_sumexp_and_target");
  const int l = c.in("logits", in.logits), t = c.in("targets", in.targets), m = c.in("row_max", in.row_max);
  const int se = c.out("row_sumexp", size_t(kXentN), Tol{0, 1e-6, 1e-6}),
            tl = c.out("target_logit", size_t(kXentN), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.xent_sumexp_and_target({p.f(l), p.i(t), p.f(m), p.f(se), p.f(tl), kXentN, kXentV, kXentBegin});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<XentLoss>() {
  const XentInputs in = xent_inputs();
  Case c = make(KernelOp::kXentLoss, "xent_loss");
  const int m = c.in("row_max", in.row_max), se = c.in("row_sumexp", in.row_sumexp),
            tl = c.in("target_logit", in.target_logit), loss = c.out("loss", size_t(kXentN), kXent);
  c.run = [=](Kernels& k, const Bound& p) {
    k.xent_loss({p.f(m), p.f(se), p.f(tl), p.f(loss), kXentN});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<XentBackward>() {
  std::vector<Case> all;
  for (bool in_place : {false, true}) {
    const XentInputs in = xent_inputs();
    Case c = make(KernelOp::kXentBackward, in_place ? "xent_backward (in place)" : "xent_backward");
    const int t = c.in("targets", in.targets), m = c.in("row_max", in.row_max),
              se = c.in("row_sumexp", in.row_sumexp);
    const int l = in_place ? c.inout("logits / dlogits", in.logits, kXent) : c.in("logits", in.logits);
    const int d = in_place ? l : c.out("dlogits", in.logits.size(), kXent);
    c.run = [=](Kernels& k, const Bound& p) {
      k.xent_backward({p.f(l), p.i(t), p.f(m), p.f(se), p.f(d), kXentN, kXentV, kXentBegin, 1.f / 64});
      return std::vector<double>{};
    };
    all.push_back(std::move(c));
  }
  return all;
}

constexpr int64_t kRowsN = 3000, kRowsC = 45;  // column sums over 3000 rows

template <>
std::vector<Case> cases<AddInplace>() {
  const int64_t n = kRowsN * kRowsC;
  Case c = make(KernelOp::kAddInplace, "add_inplace");
  const int y = c.inout("y", random_vec(size_t(n), 40), kExact), x = c.in("x", random_vec(size_t(n), 41));
  c.run = [=](Kernels& k, const Bound& p) {
    k.add_inplace({p.f(y), p.f(x), n});
    return std::vector<double>{};
  };
  // Out of place: y = base + x, y's old contents unread.
  Case o = make(KernelOp::kAddInplace, "add_inplace (base)");
  const int oy = o.out("y", size_t(n), kExact), ox = o.in("x", random_vec(size_t(n), 41)),
            ob = o.in("base", random_vec(size_t(n), 42));
  o.run = [=](Kernels& k, const Bound& p) {
    k.add_inplace({p.f(oy), p.f(ox), n, p.f(ob)});
    return std::vector<double>{};
  };
  return {c, o};
}

template <>
std::vector<Case> cases<AddBias>() {
  Case c = make(KernelOp::kAddBias, "add_bias");
  const int y = c.inout("y", random_vec(size_t(kRowsN * kRowsC), 42), kExact),
            b = c.in("bias", random_vec(size_t(kRowsC), 43));
  c.run = [=](Kernels& k, const Bound& p) {
    k.add_bias({p.f(y), p.f(b), kRowsN, kRowsC});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<BiasBackward>() {
  Case c = make(KernelOp::kBiasBackward, "bias_backward");
  const int dy = c.in("dy", random_vec(size_t(kRowsN * kRowsC), 44)),
            db = c.inout("dbias", std::vector<float>(size_t(kRowsC), 0.25f), kF32Accumulated);
  c.run = [=](Kernels& k, const Bound& p) {
    k.bias_backward({p.f(dy), p.f(db), kRowsN, kRowsC});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<ScaleInplace>() {
  const int64_t n = kElementwise;
  Case c = make(KernelOp::kScaleInplace, "scale_inplace");
  const int y = c.inout("y", random_vec(size_t(n), 45), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.scale_inplace({p.f(y), 0.375f, n});
    return std::vector<double>{};
  };
  return {c};
}

// 16-bit storage: finite values over a wide range, halfway cases, and the
// non-finite ones (NaN stays NaN, infinities stay infinite).
std::vector<float> sixteen_bit_inputs() {
  auto x = random_vec(size_t(kElementwise), 46, -1e3f, 1e3f);
  const float special[] = {1.00390625f, 1.01171875f, -0.f, 1e-40f, 65504.f, 3e38f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::nanf("")};
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); ++i) x[i * 97] = special[i];
  return x;
}

template <>
std::vector<Case> cases<To16bit>() {
  Case c = make(KernelOp::kTo16bit, "to_16bit");
  const int x = c.in("x", sixteen_bit_inputs()), y = c.out16("y", size_t(kElementwise));
  c.run = [=](Kernels& k, const Bound& p) {
    k.to_16bit({p.f(x), p.u(y), kElementwise});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<From16bit>() {
  std::vector<uint16_t> h(static_cast<size_t>(kElementwise));
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(splitmix(i + 47) & 0xFFFFu);  // every pattern, NaNs too
  Case c = make(KernelOp::kFrom16bit, "from_16bit");
  const int x = c.in("x", h), y = c.out("y", h.size(), kExact);
  c.run = [=](Kernels& k, const Bound& p) {
    k.from_16bit({p.u(x), p.f(y), kElementwise});
    return std::vector<double>{};
  };
  return {c};
}

// The compressed gradient reduction's formats (exec/backend/grad_format.h):
// gradients over a wide range with rounding boundaries of both formats, and
// fp8's subnormals. Packed bytes live in 16-bit arrays (compared exactly).
std::vector<float> grad_pack_inputs() {
  auto x = random_vec(size_t(kElementwise), 48, -3.f, 3.f);
  const float special[] = {0.f, -0.f, 1e-30f, 3.f, -3.f, 2.9999f, 1.00390625f, 1.0625f, 0.001953125f, 1e-5f};
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); ++i) x[i * 131] = special[i];
  return x;
}

template <>
std::vector<Case> cases<GradPack>() {
  std::vector<Case> all;
  for (GradFormat f : {GradFormat::kBf16, GradFormat::kFp8}) {
    Case c = make(KernelOp::kGradPack, f == GradFormat::kBf16 ? "grad_pack (bf16)" : "grad_pack (fp8)");
    const int64_t bytes = grad_packed_bytes(f, kElementwise);
    const int x = c.in("x", grad_pack_inputs()), y = c.in("y", std::vector<uint16_t>(size_t((bytes + 1) / 2), 0));
    c.arrays[size_t(y)].checked = true;  // the odd fp8 tail byte stays 0 in both
    c.run = [=](Kernels& k, const Bound& p) {
      k.grad_pack({p.f(x), reinterpret_cast<uint8_t*>(p.u(y)), kElementwise, f});
      return std::vector<double>{};
    };
    all.push_back(c);
  }
  return all;
}

template <>
std::vector<Case> cases<GradUnpack>() {
  std::vector<Case> all;
  for (GradFormat f : {GradFormat::kBf16, GradFormat::kFp8})
    for (bool acc : {false, true}) {
      // Finite packed values: bf16 patterns below the exponent's all-ones,
      // fp8 bytes other than 0x7f / 0xff, and an amax of 2.5 in the header.
      const int64_t bytes = grad_packed_bytes(f, kElementwise);
      std::vector<uint16_t> packed(size_t((bytes + 1) / 2));
      for (size_t i = 0; i < packed.size(); ++i) {
        uint16_t v = uint16_t(splitmix(i + 49) & 0xFFFFu);
        if (f == GradFormat::kBf16) v &= 0xBFFFu;  // exponent never all ones
        else {  // no NaN byte
          if ((v & 0x7Fu) == 0x7Fu) v ^= 0x0001u;
          if (((v >> 8) & 0x7Fu) == 0x7Fu) v ^= 0x0100u;
        }
        packed[i] = v;
      }
      if (f == GradFormat::kFp8) {
        const float amax = 2.5f;
        std::memcpy(packed.data(), &amax, 4);
      }
      Case c = make(KernelOp::kGradUnpack, std::string("grad_unpack (") + (f == GradFormat::kBf16 ? "bf16" : "fp8") +
                                               (acc ? ", accumulate)" : ")"));
      const int x = c.in("x", packed);
      const int y = acc ? c.inout("y", random_vec(size_t(kElementwise), 50), kExact)
                        : c.out("y", size_t(kElementwise), kExact);
      c.run = [=](Kernels& k, const Bound& p) {
        k.grad_unpack({reinterpret_cast<const uint8_t*>(p.u(x)), p.f(y), kElementwise, f, acc});
        return std::vector<double>{};
      };
      all.push_back(c);
    }
  return all;
}

// MoE: 300 tokens, 12 experts, top-3; logits with ties (every third token
// has all-equal logits) to pin the tie-break; 64 channels.
constexpr int64_t kMoeN = 300, kMoeE = 12, kMoeK = 3, kMoeC = 64;
std::vector<float> moe_logits() {
  std::vector<float> z = random_vec(size_t(kMoeN * kMoeE), 41, -3, 3);
  for (int64_t t = 0; t < kMoeN; t += 3)
    for (int64_t e = 0; e < kMoeE; ++e) z[size_t(t * kMoeE + e)] = 0.25f;
  return z;
}
// A permutation's slots: token t's slot j is row (t * k + j) * 7 mod (N * k)
// (7 is prime to N * k), every fifth slot dropped (-1).
std::vector<int32_t> moe_slot_rows(bool drop) {
  const int64_t M = kMoeN * kMoeK;
  std::vector<int32_t> r(static_cast<size_t>(M));
  for (int64_t s = 0; s < M; ++s) r[size_t(s)] = int32_t((s * 7) % M);
  if (drop)
    for (int64_t s = 0; s < M; s += 5) r[size_t(s)] = -1;
  return r;
}

template <>
std::vector<Case> cases<MoeRouterForward>() {
  std::vector<Case> all;
  for (bool norm : {false, true}) {
    Case c = make(KernelOp::kMoeRouterForward, norm ? "moe_router_forward (normalized)" : "moe_router_forward");
    const int z = c.in("logits", moe_logits());
    const int p = c.out("probs", size_t(kMoeN * kMoeE), kF32), l = c.out("lse", size_t(kMoeN), kF32);
    const int idx = c.in("topk_idx", std::vector<int32_t>(size_t(kMoeN * kMoeK), -7));
    c.arrays[size_t(idx)].checked = true;
    const int w = c.out("topk_w", size_t(kMoeN * kMoeK), kF32);
    c.run = [=](Kernels& k, const Bound& b) {
      k.moe_router_forward({b.f(z), b.f(p), b.f(l), b.i(idx), b.f(w), kMoeN, kMoeE, kMoeK, norm});
      return std::vector<double>{};
    };
    all.push_back(c);
  }
  return all;
}

template <>
std::vector<Case> cases<MoeRouterBackward>() {
  std::vector<Case> all;
  for (bool norm : {false, true}) {
    Case c = make(KernelOp::kMoeRouterBackward, norm ? "moe_router_backward (normalized)" : "moe_router_backward");
    // A consistent forward state, from the CPU router itself.
    std::vector<float> probs(static_cast<size_t>(kMoeN * kMoeE)), lse(static_cast<size_t>(kMoeN)),
        w(static_cast<size_t>(kMoeN * kMoeK));
    std::vector<int32_t> idx(static_cast<size_t>(kMoeN * kMoeK));
    const std::vector<float> z = moe_logits();
    CpuKernels ref;
    ref.moe_router_forward({z.data(), probs.data(), lse.data(), idx.data(), w.data(), kMoeN, kMoeE, kMoeK, norm});
    const int p = c.in("probs", probs), l = c.in("lse", lse), ix = c.in("topk_idx", idx), tw = c.in("topk_w", w);
    const int dw = c.in("dw", random_vec(size_t(kMoeN * kMoeK), 42)), aux = c.in("aux_grad", random_vec(size_t(kMoeE), 43));
    const int dz = c.out("dlogits", size_t(kMoeN * kMoeE), kF32);
    c.run = [=](Kernels& k, const Bound& b) {
      k.moe_router_backward({b.f(p), b.f(l), b.i(ix), b.f(tw), b.f(dw), b.f(aux), 0.37f, b.f(dz), kMoeN, kMoeE, kMoeK,
                             norm});
      return std::vector<double>{};
    };
    all.push_back(c);
  }
  return all;
}

template <>
std::vector<Case> cases<MoeGather>() {
  Case c = make(KernelOp::kMoeGather, "moe_gather");
  const int64_t M = kMoeN * kMoeK;
  std::vector<int32_t> rows(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) rows[size_t(r)] = int32_t((r * 11) % kMoeN);
  const int x = c.in("x", random_vec(size_t(kMoeN * kMoeC), 44)), ri = c.in("rows", rows);
  const int y = c.out("y", size_t(M * kMoeC), kF32);
  c.run = [=](Kernels& k, const Bound& b) {
    k.moe_gather({b.f(x), b.i(ri), b.f(y), M, kMoeC});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<MoeUnpermute>() {
  std::vector<Case> all;
  for (bool weighted : {false, true})
    for (bool acc : {false, true}) {
      Case c = make(KernelOp::kMoeUnpermute, std::string("moe_unpermute (") + (weighted ? "weighted" : "sum") +
                                                  (acc ? ", accumulate)" : ")"));
      const int64_t M = kMoeN * kMoeK;
      const int y = c.in("y", random_vec(size_t(M * kMoeC), 45)), sr = c.in("slot_rows", moe_slot_rows(true));
      const int w = c.in("w", random_vec(size_t(M), 46, 0, 1));
      const int o = acc ? c.inout("out", random_vec(size_t(kMoeN * kMoeC), 47), kF32)
                        : c.out("out", size_t(kMoeN * kMoeC), kF32);
      c.run = [=](Kernels& k, const Bound& b) {
        k.moe_unpermute({b.f(y), b.i(sr), weighted ? b.f(w) : nullptr, b.f(o), kMoeN, kMoeK, kMoeC, acc});
        return std::vector<double>{};
      };
      all.push_back(c);
    }
  return all;
}

template <>
std::vector<Case> cases<MoeUnpermuteBackward>() {
  Case c = make(KernelOp::kMoeUnpermuteBackward, "moe_unpermute_backward");
  const int64_t M = kMoeN * kMoeK;
  const int d = c.in("dout", random_vec(size_t(kMoeN * kMoeC), 48)), y = c.in("y", random_vec(size_t(M * kMoeC), 49));
  const int sr = c.in("slot_rows", moe_slot_rows(false)), w = c.in("w", random_vec(size_t(M), 50, 0, 1));
  const int dy = c.out("dy", size_t(M * kMoeC), kF32), dw = c.out("dw", size_t(M), kF32);
  c.run = [=](Kernels& k, const Bound& b) {
    k.moe_unpermute_backward({b.f(d), b.f(y), b.i(sr), b.f(w), b.f(dy), b.f(dw), kMoeN, kMoeK, kMoeC});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<SigmoidGateForward>() {
  Case c = make(KernelOp::kSigmoidGateForward, "sigmoid_gate_forward");
  const int g = c.in("g", random_vec(size_t(kMoeN), 51, -6, 6)), y = c.in("y", random_vec(size_t(kMoeN * kMoeC), 52));
  const int o = c.inout("out", random_vec(size_t(kMoeN * kMoeC), 53), kF32);
  c.run = [=](Kernels& k, const Bound& b) {
    k.sigmoid_gate_forward({b.f(g), b.f(y), b.f(o), kMoeN, kMoeC});
    return std::vector<double>{};
  };
  return {c};
}

template <>
std::vector<Case> cases<SigmoidGateBackward>() {
  Case c = make(KernelOp::kSigmoidGateBackward, "sigmoid_gate_backward");
  const int d = c.in("dout", random_vec(size_t(kMoeN * kMoeC), 54)), g = c.in("g", random_vec(size_t(kMoeN), 55, -6, 6)),
            y = c.in("y", random_vec(size_t(kMoeN * kMoeC), 56));
  const int dy = c.out("dy", size_t(kMoeN * kMoeC), kF32), dg = c.out("dg", size_t(kMoeN), kF32);
  c.run = [=](Kernels& k, const Bound& b) {
    k.sigmoid_gate_backward({b.f(d), b.f(g), b.f(y), b.f(dy), b.f(dg), kMoeN, kMoeC});
    return std::vector<double>{};
  };
  return {c};
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
#define LOOM_APPEND_CASES(Type, name)                     \
  for (Case& c : cases<Type>()) {                         \
    LOOM_CHECK(c.op == KernelOp::k##Type, c.label);       \
    all.push_back(std::move(c));                          \
  }
  LOOM_KERNEL_OPS(LOOM_APPEND_CASES)
#undef LOOM_APPEND_CASES
  return all;
}

}  // namespace loom::exec::kernel_cases
