// Layout equivalence over the TCP communicator, launched the torchrun way
// (no MPI): every process gets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (run_tcp_job.sh starts them). Each layout trains tiny GPT-2 and Llama
// models for a few steps and must reproduce, step by step, the losses of the
// single-rank run (computed here too, on a one-rank communicator) within
// 1e-5 relative. Pipeline layouts run a second time with a tagless
// communicator moving the tensors (transfers pair in call order, as NCCL's).
//
//   tcp_layout_equivalence [--timeout S] [--rendezvous-timeout S]
//                          [--kill-rank 1 --after-steps N] [corpus]
// --kill-rank: that rank SIGKILLs itself after N steps of the first case; the
// others must then fail promptly, naming it (tcp_dead_rank).
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "exec/comm/self_communicator.h"
#include "exec/comm/tcp_communicator.h"
#include "exec/runtime/trainer.h"
#include "tests/mpi/tagless_communicator.h"

namespace loom::exec {
namespace {

struct Case {
  const char* layout;
  int ranks;
};

const Case kCases[] = {
    {"dp=2", 2},
    {"dp=2,zero=1", 2},
    {"dp=1,tp=2", 2},
    {"dp=1,tp=2,sp=1", 2},
    {"dp=1,pp=2,schedule=1f1b,micro=2", 2},
    {"dp=1,pp=2,schedule=1f1b,micro=2,last=1", 2},  // 3 layers on stage 0, 1 on stage 1
    {"dp=1,pp=2,schedule=interleaved,v=2,micro=2", 2},
    {"dp=2,tp=2", 4},
    {"dp=1,tp=2,pp=2,sp=1,micro=2", 4},
    {"dp=2,pp=2,recompute=full,micro=1", 4},
};

ModelSpec tiny(bool gpt2) {
  std::string json =
      gpt2 ? R"({"model_type":"gpt2","n_embd":32,"n_layer":4,"n_head":4,"n_positions":64,"vocab_size":256})"
           : R"({"model_type":"llama","hidden_size":32,"intermediate_size":64,"num_hidden_layers":4,
                "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"max_position_embeddings":64,
                "tie_word_embeddings":false})";
  return parse_model_spec(json, gpt2 ? "tiny-gpt2" : "tiny-llama").value();
}

TrainerConfig config(bool gpt2, const Layout& layout) {
  TrainerConfig c;
  c.model = tiny(gpt2);
  c.train.global_batch = 8;
  c.train.seq_len = 32;
  c.train.steps = 10;
  c.train.lr = 2e-3;
  c.train.min_lr = 2e-4;
  c.train.warmup_steps = 2;
  c.layout = layout;
  return c;
}

// Per-step losses; calls on_step(step) after each.
template <typename OnStep>
Result<std::vector<double>> train(Communicator* comm, const TrainerConfig& cfg, TokenSource* data, OnStep on_step) {
  LOOM_ASSIGN_OR_RETURN(auto t, Trainer::create(comm, cfg, data));
  std::vector<double> losses;
  for (int64_t s = 0; s < cfg.train.steps; ++s) {
    LOOM_ASSIGN_OR_RETURN(StepResult r, t->step(s));
    losses.push_back(r.loss);
    on_step(s);
  }
  return losses;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace
}  // namespace loom::exec

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::exec;
  double timeout_s = 60, rendezvous_s = 30;
  int kill_rank = -1, kill_after = 2;
  std::string path = LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--timeout" && has_value) {
      timeout_s = std::atof(argv[++i]);
    } else if (a == "--rendezvous-timeout" && has_value) {
      rendezvous_s = std::atof(argv[++i]);
    } else if (a == "--kill-rank" && has_value) {
      kill_rank = std::atoi(argv[++i]);
    } else if (a == "--after-steps" && has_value) {
      kill_after = std::atoi(argv[++i]);
    } else if (!a.empty() && a[0] != '-') {
      path = a;
    } else {
      std::fprintf(stderr, "usage: %s [--timeout S] [--rendezvous-timeout S] [--kill-rank R --after-steps N] "
                   "[corpus]\n", argv[0]);
      return 2;
    }
  }

  LaunchEnv env = detect_launch_env();
  if (!env.warning.empty()) std::fprintf(stderr, "warning: %s\n", env.warning.c_str());
  if (env.world < 2) {
    std::fprintf(stderr, "tcp_layout_equivalence: needs several ranks; start it with RANK, WORLD_SIZE, MASTER_ADDR "
                         "and MASTER_PORT set (tests/tcp/run_tcp_job.sh)\n");
    return 2;
  }
  TcpOptions o;
  o.rank = env.rank;
  o.world = env.world;
  o.master_addr = env_or("MASTER_ADDR", "127.0.0.1");
  o.master_port = std::atoi(env_or("MASTER_PORT", "29500").c_str());
  o.timeout_s = timeout_s;
  o.rendezvous_timeout_s = rendezvous_s;
  auto world_or = tcp_world(o);
  if (!world_or.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank, world_or.status().to_string().c_str());
    return 1;
  }
  auto& world = *world_or;
  const int me = world->rank();
  auto data = open_byte_text(path, 1234);
  if (!data.is_ok()) world->abort(2, data.status().to_string());

  int failures = 0, cases = 0;
  bool first_case = true;
  for (bool gpt2 : {true, false}) {
    auto self = make_self_communicator("reference");
    auto ref = train(self.get(), config(gpt2, Layout{}), data->get(), [](int64_t) {});
    if (!ref.is_ok()) world->abort(2, "reference: " + ref.status().to_string());
    for (const Case& c : kCases) {
      if (c.ranks > world->size()) continue;
      const bool member = me < c.ranks;
      auto sub = world->split(member ? 0 : 1, me, "case");
      if (!sub.is_ok()) world->abort(3, sub.status().to_string());
      double worst = 0;
      bool ok = true;
      std::string error;
      if (member) {
        auto layout = parse_layout(c.layout);
        for (bool tagless : {false, true}) {
          if (tagless && layout->pp == 1) continue;
          TrainerConfig cfg = config(gpt2, *layout);
          TaglessCommunicator in_order(sub->get());
          if (tagless) cfg.device_world = &in_order;
          auto got = train(sub->get(), cfg, data->get(), [&](int64_t step) {
            if (first_case && me == kill_rank && step + 1 >= kill_after) {
              std::fprintf(stderr, "tcp_layout_equivalence: rank %d kills itself (SIGKILL) after %d steps\n", me,
                           int(step + 1));
              std::fflush(stderr);
              std::raise(SIGKILL);
            }
          });
          first_case = false;
          if (!got.is_ok()) {
            ok = false;
            error = got.status().to_string() + (tagless ? " (tagless)" : "");
            break;
          }
          for (size_t i = 0; i < ref->size(); ++i) worst = std::max(worst, std::fabs((*got)[i] / (*ref)[i] - 1.0));
          ok = ok && worst <= 1e-5;
        }
      }
      first_case = false;
      if (!error.empty()) std::fprintf(stderr, "rank %d %s: %s\n", me, c.layout, error.c_str());
      double flag = ok ? 0 : 1, w = worst;
      Status s = world->all_reduce(&flag, 1, ReduceOp::kMax);
      if (s.is_ok()) s = world->all_reduce(&w, 1, ReduceOp::kMax);
      if (!s.is_ok()) world->abort(3, s.to_string() + (error.empty() ? "" : " (after: " + error + ")"));
      if (me == 0) {
        std::printf("%-6s %-46s %d ranks  max rel. loss difference %.2e  %s\n", gpt2 ? "gpt2" : "llama", c.layout,
                    c.ranks, w, flag == 0 ? "ok" : "FAILED");
        std::fflush(stdout);
      }
      failures += flag != 0;
      ++cases;
    }
  }
  if (me == 0)
    std::printf("%d passed, %d failed (TCP communicator, %d ranks)\n", cases - failures, failures, world->size());
  world.reset();
  return failures ? 1 : 0;
}
