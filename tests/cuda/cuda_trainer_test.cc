// The executor on one GPU against the CPU executor: the same Trainer, model,
// data and layout, with the CUDA backend (its kernel table) and a one-rank
// NCCL world. fp32 (TF32 off) must track the CPU losses to 1e-4 relative
// over the run (summation orders differ); bf16 GEMM operands to 2e-2 (bf16
// has 8 mantissa bits; losses of a small model in its first steps move by
// more than that only if something is wrong); fp16 with loss scaling to
// 1e-2. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "exec/backend/cuda/cuda_backend.h"
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/comm/self_communicator.h"
#include "exec/model/chunk.h"
#include "exec/model/params.h"
#include "exec/runtime/trainer.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

TrainerConfig config(bool gpt2, const std::string& layout) {
  return test_support::tiny_config(gpt2, layout, /*steps=*/12, /*hidden=*/64);
}

// Losses of `steps` steps; on the GPU when `precision` is given.
std::vector<double> run(TrainerConfig cfg, bool gpu, Precision precision = Precision::kFp32) {
  auto world = make_self_communicator("world");
  std::unique_ptr<ComputeBackend> backend;
  std::unique_ptr<Communicator> nccl;
  if (gpu) {
    auto be = make_cuda_backend(0, precision);
    LOOM_CHECK(be.is_ok(), be.status().to_string());
    backend = std::move(be).value();
    NcclOptions no;
    no.timeout_s = 60;
    no.device = 0;
    no.compute_stream = backend->native_stream();
    auto w = nccl_world(world.get(), 0, no);
    LOOM_CHECK(w.is_ok(), w.status().to_string());
    nccl = std::move(w).value();
    cfg.backend = backend.get();
    cfg.device_world = nccl.get();
  }
  auto data = open_byte_text(test_support::corpus_path(), cfg.train.seed);
  LOOM_CHECK(data.is_ok(), data.status().to_string());
  std::vector<double> losses;
  {
    auto t = Trainer::create(world.get(), cfg, data->get());
    LOOM_CHECK(t.is_ok(), t.status().to_string());
    for (int64_t s = 0; s < cfg.train.steps; ++s) {
      auto r = (*t)->step(s);
      LOOM_CHECK(r.is_ok(), r.status().to_string());
      losses.push_back(r->loss);
    }
  }
  return losses;
}

void expect_tracks(const std::vector<double>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i])) << what << " step " << i + 1;
  EXPECT_LT(want.back(), want.front()) << "the reference run must learn";
}

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible: the GPU executor runs on an NVIDIA GPU"

TEST(CudaTrainer, Fp32TracksCpuForGpt2AndLlamaLayouts) {
  SKIP_WITHOUT_GPU();
  for (const char* layout : {"dp=1,tp=1,pp=1,micro=2", "dp=1,tp=1,pp=1,micro=4,zero=1,recompute=selective",
                             "dp=1,tp=1,pp=1,micro=8,recompute=full"}) {
    for (bool gpt2 : {true, false}) {
      TrainerConfig c = config(gpt2, layout);
      expect_tracks(run(c, true), run(c, false), 1e-4, std::string(gpt2 ? "gpt2 " : "llama ") + layout);
    }
  }
}

TEST(CudaTrainer, Bf16TracksFp32Cpu) {
  SKIP_WITHOUT_GPU();
  for (bool gpt2 : {true, false}) {
    TrainerConfig c = config(gpt2, "dp=1,tp=1,pp=1,micro=2");
    expect_tracks(run(c, true, Precision::kBf16), run(c, false), 2e-2, gpt2 ? "gpt2 bf16" : "llama bf16");
  }
}

// fp16 operands keep 11 significant bits; with the default loss scale this
// small model never overflows, so no step is skipped.
TEST(CudaTrainer, Fp16WithLossScalingTracksFp32Cpu) {
  SKIP_WITHOUT_GPU();
  TrainerConfig c = config(true, "dp=1,tp=1,pp=1,micro=2");
  expect_tracks(run(c, true, Precision::kFp16), run(c, false), 1e-2, "gpt2 fp16");
}

// DualPipeV's zero-bubble backward on the GPU: a backward that defers its
// weight gradients, then the W, gives one backward's gradients (the same
// cuBLAS calls on the kept tensors, so equal to rounding at most), in fp32
// and bf16; the deferred tensors outlive their layer on the device stream.
// (The pipeline around it needs two ranks: the CPU equivalence tests run it.)
TEST(CudaTrainer, DeferredWeightGradientsMatchOneBackward) {
  SKIP_WITHOUT_GPU();
  for (Precision precision : {Precision::kFp32, Precision::kBf16})
    for (bool gpt2 : {true, false}) {
      const ModelSpec spec = test_support::tiny_model(gpt2, 64);
      auto dims = model_dims(spec, 32);
      ASSERT_TRUE(dims.is_ok()) << dims.status().to_string();
      auto be = make_cuda_backend(0, precision);
      ASSERT_TRUE(be.is_ok()) << be.status().to_string();
      ComputeBackend* backend = be->get();
      const int64_t B = 2, T = 32;
      std::vector<int32_t> tok(size_t(B * T)), tgt(size_t(B * T));
      for (int64_t i = 0; i < B * T; ++i) {
        tok[size_t(i)] = int32_t((i * 37 + 11) % 256);
        tgt[size_t(i)] = int32_t((i * 53 + 5) % 256);
      }
      DeviceBuffer dtok(backend, tok.size() * sizeof(int32_t)), dtgt(backend, tgt.size() * sizeof(int32_t));
      backend->copy_to_device(dtok.i32(), tok.data(), tok.size() * sizeof(int32_t));
      backend->copy_to_device(dtgt.i32(), tgt.data(), tgt.size() * sizeof(int32_t));
      std::vector<float> grads[2];
      for (int deferred = 0; deferred < 2; ++deferred) {
        ParamStore params;
        add_chunk_params(params, *dims, 0, dims->L, true, true, 1, 0);
        params.materialize(backend, 7);
        ChunkConfig cc;
        cc.dims = *dims;
        cc.num_layers = dims->L;
        cc.has_embedding = cc.has_head = true;
        cc.micro_batch = B;
        cc.seq = T;
        ModelChunk chunk(cc, &params, backend, nullptr);
        ASSERT_TRUE(chunk.forward(0, dtok.i32(), nullptr, dtgt.i32(), 1.0f / float(B * T), nullptr).is_ok());
        if (deferred) {
          ASSERT_TRUE(chunk.backward_part(0, nullptr, nullptr, 0, 1, /*defer_wgrad=*/true).is_ok());
          EXPECT_EQ(chunk.deferred_wgrads(), 1u);
          ASSERT_TRUE(chunk.weight_grad(0).is_ok());
        } else {
          ASSERT_TRUE(chunk.backward(0, nullptr, nullptr).is_ok());
        }
        backend->synchronize();
        grads[deferred].resize(size_t(params.numel()));
        backend->copy_to_host(grads[deferred].data(), params.grads(), grads[deferred].size() * sizeof(float));
      }
      for (size_t i = 0; i < grads[0].size(); ++i)
        ASSERT_NEAR(grads[1][i], grads[0][i], 1e-6f * (1 + std::fabs(grads[0][i])))
            << (gpt2 ? "gpt2 " : "llama ") << precision_name(precision) << " element " << i;
    }
}

// Checked before any device is looked for, so this runs without a GPU too.
TEST(CudaTrainer, RefusesUnsupportedPrecisions) {
  auto be = make_cuda_backend(0, Precision::kFp8);
  ASSERT_FALSE(be.is_ok());
  EXPECT_EQ(be.status().code(), StatusCode::kUnsupported) << be.status().to_string();
  EXPECT_NE(be.status().message().find("not fp8"), std::string::npos) << be.status().to_string();
}

}  // namespace
}  // namespace loom::exec
