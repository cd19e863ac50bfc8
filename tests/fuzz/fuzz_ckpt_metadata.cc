// Checkpoint metadata.json (exec/checkpoint/checkpoint.h CheckpointReader::open,
// verify_checkpoint). At start the harness saves a real two-tensor, two-rank
// checkpoint with the project's Checkpointer; each input replaces its
// metadata.json. A checkpoint that opens is read the way a resume and
// `loom ckpt` read it: every tensor whole, every training state.
#include <thread>

#include "exec/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::ckpt;

namespace {

std::string g_step_dir;

SaveRequest request(int rank) {
  SaveRequest r;
  r.step = 7;
  TensorSlice w{"layers.0.w", {4, 3}, {int64_t(rank) * 2, 0}, {2, 3}, {}};
  for (int i = 0; i < 6; ++i) w.data.push_back(float(rank * 6 + i) + 0.5f);
  TensorSlice b{"b", {5}, {rank ? 2 : 0}, {rank ? 3 : 2}, {}};
  for (int i = 0; i < b.extent[0]; ++i) b.data.push_back(float(i));
  r.model = {w, b};
  TensorSlice m{"exp_avg/layers.0.w", {4, 3}, {int64_t(rank) * 2, 0}, {2, 3}, std::vector<float>(6, 0.25f)};
  r.optimizer = {m};
  r.training_state_json = "{\"rank\":" + std::to_string(rank) + ",\"step\":7}";
  return r;
}

void save_checkpoint() {
  CheckpointOptions o;
  o.dir = loom::fuzz::scratch_dir() + "/ckpt";
  o.async = false;
  o.commit_timeout_s = 30;
  auto c0 = Checkpointer::create(o, 0, 2, R"({"model_config":{"vocab_size":7},"plan_hash":"0123456789abcdef"})");
  auto c1 = Checkpointer::create(o, 1, 2, "{}");
  if (!c0.is_ok() || !c1.is_ok()) std::abort();
  Status s0, s1;
  std::thread t1([&] { s1 = (*c1)->save(request(1)); });
  s0 = (*c0)->save(request(0));
  t1.join();
  if (!s0.is_ok() || !s1.is_ok()) {
    std::fprintf(stderr, "fuzz_ckpt_metadata: %s %s\n", s0.to_string().c_str(), s1.to_string().c_str());
    std::abort();
  }
  auto dir = resolve_checkpoint(o.dir);
  if (!dir.is_ok()) std::abort();
  g_step_dir = *dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  save_checkpoint();
  if (loom::fuzz::seed_dir()) {
    loom::fuzz::write_seed("metadata_0.json", loom::fuzz::read_file(g_step_dir + "/metadata.json"));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::write_file(g_step_dir + "/metadata.json", data, size);
  auto r = CheckpointReader::open(g_step_dir);
  if (!r.is_ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error without a message");
    return 0;
  }
  const CheckpointReader& c = **r;
  (void)verify_checkpoint(g_step_dir);
  FUZZ_CHECK(c.world_size() >= 1, "a checkpoint with world_size < 1 was opened");
  FUZZ_CHECK(c.step() >= 0, "a checkpoint with a negative step was opened");
  for (bool opt : {false, true}) {
    for (const std::string& name : c.tensor_names(opt)) {
      auto shape = c.global_shape(name, opt);
      FUZZ_CHECK(shape.is_ok(), shape.status().to_string());
      int64_t n = 1;
      for (int64_t d : *shape) n *= d;
      if (n > (1 << 20)) continue;
      std::vector<float> out(size_t(std::max<int64_t>(n, 1)));
      (void)c.read(name, opt, std::vector<int64_t>(shape->size(), 0), *shape, out.data());
      (void)c.slices(name, opt);
    }
  }
  for (int rank = 0; rank < c.world_size() && rank < 16; ++rank) (void)c.training_state(rank);
  (void)c.files();
  (void)c.metadata_json();
  return 0;
}
