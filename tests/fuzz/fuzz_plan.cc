// Plan JSON (core/plan.h parse_plan): what `loom execute`, `loom compare` and
// the GUI read. Accepted plans must re-serialize to a plan that parses to the
// same hashes; the layout's rank grid, stage split and program are built.
#include <algorithm>

#include "core/plan.h"
#include "core/program.h"
#include "core/stage_split.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace loom;

void write_seeds() {
  struct S {
    const char* model;
    const char* hw;
    const char* layout;
    int world;
    int64_t batch, seq;
  };
  const S seeds[] = {{"gpt2-124m", "cpu-local", "dp=2", 2, 8, 128},
                     {"llama-3-8b", "dgx-h100", "dp=2,tp=2,pp=2,sp=1,zero=1", 8, 16, 1024},
                     {"mixtral-8x7b", "dgx-h100", "dp=4,ep=2,tp=2,pp=2,zero=1", 16, 32, 512},
                     {"deepseek-v3", "dgx-b200", "dp=8,ep=8,pp=4,schedule=interleaved,v=2,recompute=full", 32, 64, 256},
                     {"gpt2-124m", "dgx-a100-80gb", "pp=4,schedule=gpipe,micro=2", 4, 16, 128}};
  int i = 0;
  for (const S& s : seeds) {
    Plan p;
    auto m = load_model_spec(s.model);
    auto hw = load_hw_profile(s.hw);
    auto l = parse_layout(s.layout);
    if (!m.is_ok() || !hw.is_ok() || !l.is_ok()) {
      std::fprintf(stderr, "fuzz_plan: seed %d: %s %s %s\n", i, m.status().to_string().c_str(),
                   hw.status().to_string().c_str(), l.status().to_string().c_str());
      std::abort();
    }
    p.model = *m;
    p.hw = *hw;
    p.layout = *l;
    p.world_size = s.world;
    p.train.global_batch = s.batch;
    p.train.seq_len = s.seq;
    p.train.steps = 10;
    p.prediction_json = R"({"step_time_s": 1.5, "mfu": 0.4})";
    loom::fuzz::write_seed("plan_" + std::to_string(i++) + ".json", plan_to_json(p));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    write_seeds();
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto plan = parse_plan(text, "fuzz plan");
  if (!plan.is_ok()) {
    FUZZ_CHECK(!plan.status().message().empty(), "an error without a message");
    return 0;
  }
  // Round trip: what was accepted re-serializes to a plan with the same hashes.
  const std::string again = plan_to_json(*plan);
  auto plan2 = parse_plan(again, "fuzz plan (re-serialized)");
  FUZZ_CHECK(plan2.is_ok(), plan2.status().to_string());
  FUZZ_CHECK(plan2->plan_hash() == plan->plan_hash(), "plan hash changed in a round trip");
  FUZZ_CHECK(plan_to_json(*plan2) == again, "plan text changed in a second round trip");

  // What the executor derives from it.
  const Layout& l = plan->layout;
  RankGrid grid(l);
  FUZZ_CHECK(grid.world() == plan->world_size, "rank grid world differs from the plan's");
  for (int r : {0, grid.world() - 1, grid.world() / 2}) {
    RankCoords c = grid.coords(r);
    FUZZ_CHECK(grid.rank_of(c) == r, "rank_of(coords(r)) != r");
    for (Dim d : {Dim::kDp, Dim::kTp, Dim::kPp, Dim::kEp}) {
      if (l.size(d) > 4096) continue;
      auto g = grid.group(d, r);
      FUZZ_CHECK(std::find(g.begin(), g.end(), r) != g.end(), "a rank is missing from its own group");
    }
  }
  StageSplit split = split_layers(plan->model, l);
  int layers = 0;
  for (int n : split.chunk_layers) {
    FUZZ_CHECK(n >= 1, "a model chunk without layers");
    layers += n;
  }
  FUZZ_CHECK(layers == plan->model.num_layers, "the stage split loses layers");
  ProgramConfig pc = program_config_for(l, plan->train.global_batch, 2);
  // Building is O(pp * v * m): only for sizes a test can afford.
  if (int64_t(pc.pp) * pc.virtual_stages * pc.micro_batches <= 4096) {
    auto prog = build_program(pc);
    FUZZ_CHECK(prog.is_ok(), prog.status().to_string());
  }
  return 0;
}
