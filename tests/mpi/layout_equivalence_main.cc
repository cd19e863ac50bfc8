// Layout equivalence under mpirun: every parallel layout trains a tiny model
// of each family for 10 steps and must reproduce, step by step, the losses of
// the single-rank run (computed here too, on a one-rank communicator) within
// 1e-5 relative. Run as `mpirun -np 8 layout_equivalence`; each case uses the
// first `ranks` ranks of the world, the others wait at the barrier. Pipeline
// layouts run a second time with a tagless communicator moving the tensors
// (transfers pair in call order, as with NCCL).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "exec/comm/mpi_communicator.h"
#include "tests/mpi/mpi_test_main.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/trainer.h"
#include "tests/mpi/tagless_communicator.h"

namespace loom::exec {
namespace {

struct Case {
  const char* layout;
  int ranks;
  int grad_buckets = kDefaultGradBuckets;  // the program's gradient buckets per chunk
};

const Case kCases[] = {
    {"dp=2", 2},
    {"dp=2,zero=1", 2},
    {"dp=2,zero=2", 2},
    {"dp=2,zero=3", 2},
    {"dp=2,micro=1", 2},  // gradient accumulation: 4 micro-batches per rank
    {"dp=1,tp=2", 2},
    {"dp=1,tp=2,sp=1", 2},
    {"dp=1,pp=2,schedule=gpipe,micro=2", 2},
    {"dp=1,pp=2,schedule=1f1b,micro=2", 2},
    {"dp=1,pp=2,schedule=interleaved,v=2,micro=2", 2},
    {"dp=1,tp=2,pp=2,sp=1,micro=2", 4},
    {"dp=2,tp=2,pp=2,zero=1,micro=2", 8},
    {"dp=2,tp=2,pp=2,schedule=interleaved,v=2,sp=1,zero=1,micro=2", 8},
    {"dp=2,pp=2,recompute=full,micro=1", 4},
    {"dp=2,pp=2,recompute=full,recompute_layers=1,micro=1", 4},
    // DualPipeV: the V placement (stage 0 holds the embedding and the head),
    // the last stage's hand-off between its two chunks, each arm's channels,
    // and backwards that defer their weight gradients to later W ops; with
    // DP + ZeRO-1 (m = 2pp, the least the order takes), TP + SP, recompute.
    {"dp=1,pp=2,schedule=dualpipev,micro=1", 2},
    {"dp=2,pp=2,schedule=dualpipev,zero=1,micro=1", 4},
    {"dp=1,tp=2,pp=2,sp=1,schedule=dualpipev,micro=1", 4},
    {"dp=1,pp=2,schedule=dualpipev,recompute=full,micro=1", 2},
    // Other gradient buckets: the chunk's last backward runs in that many
    // parts and each bucket syncs as its part ends (more buckets than the
    // chunk has layers leaves some empty); ZeRO with one DP rank is ZeRO-0.
    {"dp=2", 2, 1},
    {"dp=2,zero=1", 2, 3},
    {"dp=2,tp=2,sp=1", 4, 7},
    {"dp=2,pp=2,schedule=interleaved,v=2,zero=1,micro=1", 4, 3},
    {"dp=1,zero=1", 1, 2},
    {"dp=1,zero=3", 1, 2},
    // Context parallelism (issue #18): ring attention over 2 and 4 ranks in
    // the load-balanced chunk order, with TP (+SP), pipelines (also the
    // tagless run), DP/ZeRO over the DP x CP group, and recompute.
    {"dp=1,cp=2", 2},
    {"dp=1,cp=4", 4},
    {"dp=1,cp=2,tp=2,sp=1,micro=2", 4},
    {"dp=1,cp=4,tp=2", 8},
    {"dp=1,cp=2,pp=2,schedule=1f1b,micro=2", 4},
    {"dp=1,cp=4,pp=2,schedule=interleaved,v=2,micro=2", 8},
    {"dp=2,cp=2,zero=1", 4},
    {"dp=2,cp=2,zero=3,recompute=selective", 4},
    {"dp=1,cp=2,recompute=full,micro=2", 2},
    // The K/V all-gathered instead (cp_comm=all_gather, Llama 3's): over 2
    // and 4 ranks, with TP (+SP), a pipeline, ZeRO-3 and recompute.
    {"dp=1,cp=2,cp_comm=all_gather", 2},
    {"dp=1,cp=4,cp_comm=all_gather", 4},
    {"dp=1,cp=2,tp=2,sp=1,micro=2,cp_comm=all_gather", 4},
    {"dp=1,cp=2,pp=2,schedule=1f1b,micro=2,cp_comm=all_gather", 4},
    {"dp=2,cp=2,zero=3,recompute=selective,cp_comm=all_gather", 4},
    // The heads exchanged (cp_comm=a2a, DeepSpeed-Ulysses): the test models'
    // heads divide over 2 and 4 ranks (and over 2 under tp=2).
    {"dp=1,cp=2,cp_comm=a2a", 2},
    {"dp=1,cp=4,cp_comm=a2a", 4},
    {"dp=1,cp=2,tp=2,sp=1,micro=2,cp_comm=a2a", 4},
    {"dp=1,cp=2,pp=2,schedule=1f1b,micro=2,cp_comm=a2a", 4},
    {"dp=2,cp=2,zero=3,recompute=selective,cp_comm=a2a", 4},
};

// Mixture-of-experts layouts (issue #18): experts sharded over EP ranks of
// the DP group with all-to-all dispatch, alone and with ZeRO, TP (+SP) and
// pipelines; dp=4,ep=2 syncs experts over an expert-DP group of 2. The
// micro-batch stays the reference's (one sequence): the load-balancing loss
// is a micro-batch's statistic, as in Megatron, so another micro-batch size
// is another objective.
const Case kMoeCases[] = {
    {"dp=2,ep=2", 2},
    {"dp=4,ep=4", 4},
    {"dp=1,tp=2", 2},
    {"dp=1,tp=2,sp=1", 2},
    {"dp=1,pp=2,schedule=1f1b", 2},
    {"dp=2,ep=2,zero=1", 2},
    {"dp=4,ep=2,zero=2", 4},
    {"dp=2,ep=2,tp=2,sp=1", 4},
    {"dp=2,ep=2,pp=2,micro=1", 4},
    {"dp=2,ep=2,pp=2,schedule=dualpipev,micro=1", 4},
    {"dp=1,tp=2,sp=1,pp=2,schedule=dualpipev,micro=1", 4},
    {"dp=1,tp=2,sp=1,ep=2,etp=1,pp=2,schedule=dualpipev,micro=1", 4},
    {"dp=2,ep=2,recompute=full", 2},
    {"dp=2,ep=2,recompute=full,recompute_layers=1", 2},
    // With context parallelism: the routing statistics summed over the CP
    // group, experts synced over DP x CP.
    {"dp=1,cp=2", 2},
    {"dp=2,ep=2,cp=2", 4},
    {"dp=1,cp=2,tp=2,sp=1", 4},
    {"dp=2,ep=2,cp=2,zero=1,pp=2", 8},
    // Parallel folding (etp=1): experts whole, the EP group over TP x DP.
    {"dp=1,tp=2,sp=1,ep=2,etp=1", 2},
    {"dp=2,tp=2,sp=1,ep=4,etp=1", 4},
    {"dp=2,tp=2,sp=1,ep=2,etp=1,zero=1", 4},
    {"dp=1,tp=2,sp=1,ep=2,etp=1,cp=2", 4},
    {"dp=2,tp=2,sp=1,ep=4,etp=1,pp=2,micro=1", 8},
};

// The model families: GPT-2, Llama, and a Qwen3 block with every config field
// the executor honours (per-head q/k norm whose weights are shared across the
// TP-split heads, q/k/v/o and MLP biases, rope_theta, Llama-3.1 RoPE scaling,
// the norm epsilon); the last runs the layouts with tp > 1 only.
// The MoE families: Mixtral blocks (4 experts, top-2) without the router's
// losses, a Qwen3-MoE block (raw top-k weights, every other layer MoE) with
// the load-balancing and z-losses, and a Qwen2-MoE block (a sigmoid-gated
// shared expert beside the routed ones).
enum Family { kGpt2, kLlama, kQwen3EveryField, kMixtral, kQwen3MoeAux, kQwen2Moe };
const char* family_name(Family f) {
  switch (f) {
    case kGpt2: return "gpt2";
    case kLlama: return "llama";
    case kQwen3EveryField: return "qwen3+";
    case kMixtral: return "mixtral";
    case kQwen3MoeAux: return "qwen3moe+aux";
    case kQwen2Moe: return "qwen2moe";
  }
  return "?";
}
bool is_moe(Family f) { return f == kMixtral || f == kQwen3MoeAux || f == kQwen2Moe; }

ModelSpec tiny(Family f) {
  if (f == kMixtral)
    return parse_model_spec(R"({"model_type":"mixtral","hidden_size":32,"intermediate_size":48,"num_hidden_layers":4,
        "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"max_position_embeddings":64,
        "tie_word_embeddings":false,"num_local_experts":4,"num_experts_per_tok":2})", "tiny-mixtral").value();
  if (f == kQwen3MoeAux)
    return parse_model_spec(R"({"model_type":"qwen3_moe","hidden_size":32,"intermediate_size":64,"num_hidden_layers":4,
        "num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,"vocab_size":256,"max_position_embeddings":64,
        "tie_word_embeddings":false,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":24,
        "decoder_sparse_step":2,"norm_topk_prob":false})", "tiny-qwen3moe").value();
  if (f == kQwen2Moe)
    return parse_model_spec(R"({"model_type":"qwen2_moe","hidden_size":32,"intermediate_size":64,"num_hidden_layers":4,
        "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"max_position_embeddings":64,
        "tie_word_embeddings":false,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":24,
        "shared_expert_intermediate_size":32})", "tiny-qwen2moe").value();
  std::string json =
      f == kGpt2 ? R"({"model_type":"gpt2","n_embd":32,"n_layer":4,"n_head":4,"n_positions":64,"vocab_size":256})"
      : f == kLlama
          ? R"({"model_type":"llama","hidden_size":32,"intermediate_size":64,"num_hidden_layers":4,
                "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"max_position_embeddings":64,
                "tie_word_embeddings":false})"
          : R"({"model_type":"qwen3","hidden_size":32,"intermediate_size":64,"num_hidden_layers":4,
                "num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,"vocab_size":256,"max_position_embeddings":64,
                "tie_word_embeddings":false,"attention_bias":true,"mlp_bias":true,"rope_theta":500000.0,
                "rms_norm_eps":1e-5,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
                "high_freq_factor":4.0,"original_max_position_embeddings":16}})";
  return parse_model_spec(json, std::string("tiny-") + family_name(f)).value();
}

TrainerConfig config(Family f, const Layout& layout) {
  TrainerConfig c;
  c.model = tiny(f);
  c.train.global_batch = 8;
  c.train.seq_len = 32;
  c.train.steps = 10;
  c.train.lr = 2e-3;
  c.train.min_lr = 2e-4;
  c.train.warmup_steps = 2;
  c.layout = layout;
  if (f == kQwen3MoeAux) {
    c.train.moe_aux_loss_coeff = 0.1;
    c.train.moe_z_loss_coeff = 0.01;
  }
  return c;
}

}  // namespace
}  // namespace loom::exec

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::exec;
  MpiTestSetup setup = mpi_test_setup(&argc, &argv, 60);
  if (!setup.world) return 1;
  auto& world = setup.world;
  auto data = &setup.data;
  int failures = 0;
  // LOOM_EQUIV_FAMILIES=gpt2,llama,qwen3+ runs only the families named (default: all).
  const char* only = std::getenv("LOOM_EQUIV_FAMILIES");
  // LOOM_EQUIV_MATCH=cp= runs only the layouts containing that text (default: all).
  const char* match = std::getenv("LOOM_EQUIV_MATCH");
  int runs = 0;
  for (Family family : {kGpt2, kLlama, kQwen3EveryField, kMixtral, kQwen3MoeAux, kQwen2Moe}) {
    if (only && std::string(",").append(only).append(",").find(std::string(",") + family_name(family) + ",") ==
                    std::string::npos)
      continue;
    // The single-rank reference, on every rank (it is tiny).
    auto self = make_self_communicator("reference");
    auto ref = train_losses(self.get(), config(family, Layout{}), data->get());
    if (!ref.is_ok()) {
      std::fprintf(stderr, "reference: %s\n", ref.status().to_string().c_str());
      return 1;
    }
    const std::vector<Case> cases = is_moe(family) ? std::vector<Case>(std::begin(kMoeCases), std::end(kMoeCases))
                                                   : std::vector<Case>(std::begin(kCases), std::end(kCases));
    for (const Case& c : cases) {
      if (c.ranks > world->size()) continue;
      if (match && std::string(c.layout).find(match) == std::string::npos) continue;
      if (family == kQwen3EveryField && std::string(c.layout).find("tp=2") == std::string::npos) continue;
      // The heads exchange runs where cp divides the family's (TP-local)
      // heads: GPT-2's 4 over 2 and 4 ranks, Llama's 2 KV heads over cp=2.
      if (std::string(c.layout).find("cp_comm=a2a") != std::string::npos) {
        const Layout l = parse_layout(c.layout).value();
        const TrainerConfig cfg = config(family, l);
        if (!validate_layout(l, cfg.model, cfg.train, c.ranks).is_ok()) continue;
      }
      bool member = world->rank() < c.ranks;
      auto sub = world->split(member ? 0 : 1, world->rank(), "case");
      if (!sub.is_ok()) return 1;
      double worst = 0;
      bool ok = true;
      std::string error;
      if (member) {
        auto layout = parse_layout(c.layout);
        // Pipelines also run with the tensors moved by a tagless communicator
        // (transfers pair in call order, as NCCL's do): same losses expected.
        for (bool tagless : {false, true}) {
          if (tagless && layout->pp == 1) continue;
          TrainerConfig cfg = config(family, *layout);
          cfg.grad_buckets = c.grad_buckets;
          TaglessCommunicator in_order(sub->get());
          if (tagless) cfg.device_world = &in_order;
          auto got = train_losses(sub->get(), cfg, data->get());
          if (!got.is_ok()) {
            ok = false;
            error = got.status().to_string() + (tagless ? " (tagless)" : "");
            break;
          }
          for (size_t i = 0; i < ref->size(); ++i)
            worst = std::max(worst, std::fabs((*got)[i] / (*ref)[i] - 1.0));
          // The Qwen3 family is held tighter (observed <= 4e-9): its q/k-norm weights
          // train slowly, and a q/k-norm gradient not summed over TP moves the
          // losses by only ~1e-6 in 10 steps.
          // The MoE families likewise (observed <= 1.7e-7): a gated shared expert's
          // gate gradient not summed over TP moves them by ~1e-6.
          ok = ok && worst <= (family == kQwen3EveryField ? 1e-7 : is_moe(family) ? 5e-7 : 1e-5);
        }
      }
      double flag = ok ? 0 : 1, w = worst;
      world->all_reduce(&flag, 1, ReduceOp::kMax);
      world->all_reduce(&w, 1, ReduceOp::kMax);
      if (world->rank() == 0)
        std::printf("%-6s %-62s %d ranks %d buckets  max rel. loss difference %.2e  %s\n", family_name(family),
                    c.layout, c.ranks, c.grad_buckets, w, flag == 0 ? "ok" : "FAILED");
      if (!error.empty()) std::fprintf(stderr, "rank %d %s: %s\n", world->rank(), c.layout, error.c_str());
      failures += flag != 0;
      ++runs;
    }
  }
  // ZeRO-1 really shards the optimizer: peak bytes per rank fall (dp = 2, a
  // model whose states outweigh its activations). ZeRO-2/3 gather and release
  // per model chunk, so with one chunk per rank their peak is ZeRO-1's (the
  // executor's documented limit); they must not exceed it beyond the
  // optimizer's segment tables (48 B per owned slice of a tensor: a rank's
  // slices differ in number between ZeRO-1's buckets and ZeRO-2's chunks, by
  // a few dozen here).
  {
    bool member = world->rank() < 2;
    auto sub = world->split(member ? 0 : 1, world->rank(), "zero-memory");
    double peaks[4] = {0, 0, 0, 0};
    if (member) {
      for (int z = 0; z <= 3; ++z) {
        Layout l;
        l.dp = 2;
        l.zero = z;
        l.micro_batch = 4;
        TrainerConfig cfg = config(kLlama, l);
        cfg.model = parse_model_spec(R"({"model_type":"llama","hidden_size":256,"intermediate_size":512,
            "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,
            "max_position_embeddings":64,"tie_word_embeddings":false})", "states-heavy").value();
        cfg.train.steps = 2;
        cfg.train.seq_len = 16;
        auto got = train_losses(sub->get(), cfg, data->get(), &peaks[z]);
        if (!got.is_ok()) std::fprintf(stderr, "zero=%d: %s\n", z, got.status().to_string().c_str());
      }
    }
    const double tables = 4096;
    double ok =
        member ? (peaks[1] < 0.95 * peaks[0] && peaks[2] <= peaks[1] + tables && peaks[3] <= peaks[1] + tables) : 1;
    if (!ok || std::getenv("LOOM_TEST_VERBOSE"))
      std::fprintf(stderr, "rank %d: peak bytes, ZeRO 0/1/2/3: %.0f / %.0f / %.0f / %.0f\n", world->rank(), peaks[0],
                   peaks[1], peaks[2], peaks[3]);
    world->all_reduce(&ok, 1, ReduceOp::kMin);
    if (world->rank() == 0)
      std::printf("peak bytes per rank, ZeRO 0/1/2/3: %.0f / %.0f / %.0f / %.0f  %s\n", peaks[0], peaks[1], peaks[2],
                  peaks[3], ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  }
  if (world->rank() == 0) std::printf("%d passed, %d failed\n", runs + 1 - failures, failures);
  world.reset();
  mpi_finalize();
  return failures ? 1 : 0;
}
