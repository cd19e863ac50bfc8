// The executor on one GPU against the CPU executor: the same Trainer, model,
// data and layout, with the CUDA backend (its kernel table) and a one-rank
// NCCL world. fp32 (TF32 off) must track the CPU losses to 1e-4 relative
// over the run (summation orders differ); bf16 GEMM operands to 2e-2 (bf16
// has 8 mantissa bits; losses of a small model in its first steps move by
// more than that only if something is wrong). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "exec/backend/cuda/cuda_backend.h"
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/trainer.h"

namespace loom::exec {
namespace {

ModelSpec tiny_model(bool gpt2) {
  std::string json = gpt2 ? R"({"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":4,"n_positions":64,"vocab_size":256})"
                          : R"({"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
                               "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,
                               "max_position_embeddings":64,"tie_word_embeddings":false})";
  auto m = parse_model_spec(json, gpt2 ? "tiny-gpt2" : "tiny-llama");
  LOOM_CHECK(m.is_ok(), m.status().to_string());
  return *m;
}

TrainerConfig config(bool gpt2, const std::string& layout) {
  TrainerConfig c;
  c.model = tiny_model(gpt2);
  c.train.global_batch = 8;
  c.train.seq_len = 32;
  c.train.steps = 12;
  c.train.lr = 3e-3;
  c.train.min_lr = 3e-4;
  c.train.warmup_steps = 3;
  auto l = parse_layout(layout);
  LOOM_CHECK(l.is_ok(), l.status().to_string());
  c.layout = *l;
  return c;
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
  auto data = open_byte_text(std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt", cfg.train.seed);
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

TEST(CudaTrainer, RefusesUnsupportedPrecisions) {
  auto be = make_cuda_backend(0, Precision::kFp8);
  ASSERT_FALSE(be.is_ok());
  EXPECT_EQ(be.status().code(), StatusCode::kUnsupported) << be.status().to_string();
}

}  // namespace
}  // namespace loom::exec
