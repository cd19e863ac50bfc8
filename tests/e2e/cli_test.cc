// End-to-end: runs the `loom` binary as a user would and checks what it prints
// and writes, not only its exit code.
//
// Exit codes under test (cli/main.cc): 0 ok, 2 bad input (the message names
// the field and the fix), 3 nothing fits in memory.
//
// Independent truths used: tokens/s = B * s / step time; per-GPU figures times
// the GPU count; per-link-class traffic = the sum over tp/pp/dp/ep; the trace's
// last event ends at the printed step time and has m * v forwards per stage;
// DeepSpeed's train_batch_size = micro * accumulation * dp; a config file that
// parses fine before one comma is removed.
//
// LOOM_BINARY (the `loom` target's file) and LOOM_SOURCE_DIR come from CMake.
#include "tests/e2e/cli_test_support.h"

namespace {

// --- happy paths -----------------------------------------------------------------

TEST_F(LoomCli, DefaultPlanPrintsTableChoosesAndWritesPlan) {
  Outcome r = loom({"plan", "--out", "plan.json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(r.err.empty()) << describe(r);
  // Defaults: llama-3-8b on 64 x dgx-h100, B=512, s=4096, bf16.
  EXPECT_NE(r.out.find("llama-3-8b on 64 x"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("searched "), std::string::npos);
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos);
  EXPECT_NE(r.out.find("MFU"), std::string::npos);
  EXPECT_NE(r.out.find("Pareto front"), std::string::npos);
  EXPECT_NE(r.out.find("chosen (#0)"), std::string::npos);

  ASSERT_TRUE(fs::exists(path("plan.json"))) << describe(r);
  json plan = parse_or_fail(read_file(path("plan.json")), "plan.json");
  ASSERT_TRUE(plan.is_object());
  EXPECT_TRUE(plan.contains("schema_version"));
  ASSERT_TRUE(plan.contains("plan_hash"));
  const std::string hash = plan["plan_hash"].get<std::string>();
  EXPECT_FALSE(hash.empty());
  // The hash printed is the hash written.
  EXPECT_NE(r.out.find("plan hash " + hash), std::string::npos) << describe(r);
  ASSERT_TRUE(plan.contains("model") && plan["model"].contains("config"));
  EXPECT_EQ(plan["model"]["config"].value("num_hidden_layers", 0), 32);
  ASSERT_TRUE(plan.contains("hardware") && plan["hardware"].contains("profile"));
  EXPECT_TRUE(plan["hardware"]["profile"].is_object());
  ASSERT_TRUE(plan.contains("layout"));
  const json& l = plan["layout"];
  EXPECT_EQ(l.value("dp", 0) * l.value("tp", 0) * l.value("pp", 0) * l.value("cp", 1), 64) << l.dump();
  ASSERT_TRUE(plan.contains("prediction") && plan["prediction"].contains("step_time_s"));
  const double step_s = plan["prediction"]["step_time_s"].get<double>();
  EXPECT_GT(step_s, 0);
  EXPECT_TRUE(std::isfinite(step_s));
}

TEST_F(LoomCli, SearchJsonHasFiguresMemoryAndTraffic) {
  Outcome r = loom({"plan", "--json", "--gpus", "8"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  json j = parse_or_fail(r.out, "stdout of --json");  // the whole stdout, nothing else
  ASSERT_TRUE(j.contains("prediction")) << j.dump().substr(0, 500);
  const json& p = j["prediction"];
  for (const char* key : {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"})
    EXPECT_TRUE(p.contains(key)) << key;
  const double step_s = p["step_time_s"], tps = p["tokens_per_s"];
  EXPECT_NEAR(tps, 512.0 * 4096 / step_s, 1e-6 * tps);
  EXPECT_NEAR(p["tokens_per_s_per_gpu"].get<double>() * 8, tps, 1e-6 * tps);
  EXPECT_GT(p["mfu"].get<double>(), 0.0);
  EXPECT_LT(p["mfu"].get<double>(), 1.0);
  ASSERT_TRUE(p.contains("memory_per_stage") && !p["memory_per_stage"].empty());
  EXPECT_GT(p["memory_per_stage"][0]["activations_bytes"].get<double>(), 0);
  ASSERT_TRUE(p.contains("traffic_per_rank_per_step"));
  const json& t = p["traffic_per_rank_per_step"];
  double nvlink = 0;
  for (const char* kind : {"tp", "pp", "dp", "ep"}) nvlink += t[kind]["nvlink_bytes"].get<double>();
  EXPECT_NEAR(t["per_link_class"]["nvlink_bytes"].get<double>(), nvlink, 1e-9 * (1 + nvlink));
  // One node of 8 GPUs: data parallelism goes over NVLink only.
  EXPECT_GT(nvlink, 0);
  EXPECT_EQ(t["per_link_class"]["network_bytes"].get<double>(), 0);
  // Search summary and candidates.
  EXPECT_LE(j["search"]["fitting"].get<int64_t>(), j["search"]["enumerated"].get<int64_t>());
  ASSERT_TRUE(j["candidates"].is_array());
  EXPECT_FALSE(j["candidates"].empty());
  EXPECT_LE(j["candidates"].size(), 10u);  // --top default
}

TEST_F(LoomCli, InterleavedLayoutWithJsonAndTrace) {
  Outcome r = loom({"plan", "--gpus", "16", "--layout", "dp=2,tp=4,pp=2,schedule=interleaved,v=2", "--json", "--trace",
                "t.json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  // --layout --json prints the prediction itself.
  json p = parse_or_fail(r.out, "stdout of --layout --json");
  for (const char* key : {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"})
    EXPECT_TRUE(p.contains(key)) << key;
  ASSERT_TRUE(p.contains("memory_per_stage"));
  EXPECT_EQ(p["memory_per_stage"].size(), 2u);  // pp=2
  EXPECT_GT(p["memory_per_stage"][0]["activations_bytes"].get<double>(), 0);
  EXPECT_TRUE(p["traffic_per_rank_per_step"]["per_link_class"].contains("nvlink_bytes"));
  const double step_s = p["step_time_s"];

  ASSERT_TRUE(fs::exists(path("t.json")));
  json trace = parse_or_fail(read_file(path("t.json")), "t.json");
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  // m = 512 / (dp * micro) = 256 micro-batches, v = 2 chunks: 512 forwards per stage.
  int fwd[2] = {0, 0};
  double last_end_us = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const int pid = e.value("pid", -1);
    ASSERT_TRUE(pid == 0 || pid == 1) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    last_end_us = std::max(last_end_us, e["ts"].get<double>() + e["dur"].get<double>());
    if (e.value("cat", "") == "fwd") ++fwd[pid];
  }
  EXPECT_EQ(fwd[0], 512);
  EXPECT_EQ(fwd[1], 512);
  EXPECT_NEAR(last_end_us * 1e-6, step_s, 1e-6 * step_s);
}

TEST_F(LoomCli, ExportMegatronPrintsParallelSizes) {
  Outcome r = loom({"plan", "--gpus", "16", "--layout", "dp=2,tp=4,pp=2,zero=1,schedule=interleaved,v=2", "--export",
                "megatron"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("--tensor-model-parallel-size 4\n"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("--pipeline-model-parallel-size 2\n"), std::string::npos);
  // 32 layers / (pp * v) = 8 layers per model chunk.
  EXPECT_NE(r.out.find("--num-layers-per-virtual-pipeline-stage 8\n"), std::string::npos);
  EXPECT_NE(r.out.find("--global-batch-size 512\n"), std::string::npos);
  EXPECT_NE(r.out.find("--use-distributed-optimizer"), std::string::npos);  // zero=1
}

TEST_F(LoomCli, ExportDeepspeedPrintsConsistentConfig) {
  Outcome r = loom({"plan", "--gpus", "16", "--layout", "dp=2,tp=4,pp=2,zero=1,micro=2", "--export", "deepspeed"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  json ds = parse_or_fail(json_tail(r.out), "deepspeed config");
  ASSERT_TRUE(ds.contains("train_batch_size")) << ds.dump();
  EXPECT_EQ(ds["train_batch_size"].get<int64_t>(), 512);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"].get<int64_t>(), 2);
  // B = micro * accumulation * dp.
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"].get<int64_t>() * ds["gradient_accumulation_steps"].get<int64_t>() * 2,
            512);
  EXPECT_EQ(ds["zero_optimization"]["stage"].get<int>(), 1);
}

TEST_F(LoomCli, ModelFromConfigFilePath) {
  // Positive control for the malformed-file case below: the same file, intact.
  fs::path cfg = model_copy("llama-3-8b", "good.json");
  Outcome r = loom({"plan", "--model", cfg.string(), "--gpus", "8", "--layout", "tp=8"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

// --- bad input: exit 2 and a message naming the problem ------------------------------

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string> message_has;  // substrings of stderr
  // Known bug: checked only after the report was printed (see
  // UnknownExportIsRejectedBeforeAnyOutput); drop once fixed.
  bool report_printed_first = false;
};

void expect_bad_input(const Outcome& r, const std::vector<std::string>& message_has, bool report_printed_first = false) {
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(r.err.rfind("loom plan: ", 0), 0u) << describe(r);
  for (const std::string& s : message_has) EXPECT_NE(r.err.find(s), std::string::npos) << "'" << s << "'\n" << describe(r);
  if (!report_printed_first) {
    EXPECT_EQ(r.out.find("chosen"), std::string::npos) << describe(r);
  }
}

TEST_F(LoomCli, MalformedModelFileNamesLineAndColumn) {
  // Drop the comma after "hidden_size": 4096 -> a syntax error on that line.
  fs::path cfg = model_copy("llama-3-8b", "broken.json", "\"hidden_size\": 4096,", "\"hidden_size\": 4096");
  Outcome r = loom({"plan", "--model", cfg.string()});
  expect_bad_input(r, {"broken.json", "line", "column"});
}

TEST_F(LoomCli, UnknownModelTypeIsNamed) {
  fs::path cfg = model_copy("llama-3-8b", "odd.json", "\"model_type\": \"llama\"", "\"model_type\": \"mamba_x\"");
  Outcome r = loom({"plan", "--model", cfg.string()});
  expect_bad_input(r, {"model_type", "mamba_x", "llama"});
}

TEST_F(LoomCli, BadInputsExitTwoWithTheReason) {
  const std::vector<BadInput> cases = {
      {"unknown model name", {"--model", "no-such-model"}, {"no-such-model", "not found"}},
      {"unknown hardware", {"--hw", "no-such-hw"}, {"no-such-hw", "not found"}},
      {"tp not dividing heads", {"--layout", "tp=3", "--gpus", "3"}, {"tp=3", "num_attention_heads=32"}},
      // tp=8 fits one NVLink domain and divides the 32 query heads; only the 4 KV heads refuse it.
      {"tp not dividing kv heads", {"--model", "qwen3-30b-a3b", "--layout", "tp=8", "--gpus", "8"},
       {"tp=8", "num_key_value_heads=4"}},
      {"tp not dividing kv heads (llama)", {"--layout", "tp=16", "--gpus", "16"}, {"tp=16", "num_key_value_heads=8"}},
      {"pp > layers", {"--model", "gpt2-124m", "--layout", "pp=16", "--gpus", "16"}, {"pp=16", "12 layers"}},
      {"world size mismatch", {"--layout", "dp=4", "--gpus", "8"}, {"= 4", "8 ranks"}},
      {"batch not divisible", {"--global-batch", "10", "--layout", "dp=4", "--gpus", "4"}, {"global batch 10", "divisible"}},
      {"interleaved m % pp", {"--model", "gpt2-124m", "--global-batch", "5", "--layout", "pp=2,schedule=interleaved,v=2", "--gpus", "2"},
       {"micro-batches (5)", "pp=2"}},
      {"negative gpus", {"--gpus", "-1"}, {"--gpus", "-1"}},
      {"zero gpus", {"--gpus", "0"}, {"--gpus"}},
      {"negative seq", {"--seq", "-5"}, {"seq", "-5"}},
      {"negative batch", {"--global-batch", "-3"}, {"global_batch", "-3"}},
      {"negative layout size", {"--layout", "tp=-2"}, {"tp=-2"}},
      {"zero micro batch", {"--layout", "micro=0", "--gpus", "1", "--model", "gpt2-124m"}, {"micro=0"}},
      {"unknown layout key", {"--layout", "foo=1", "--gpus", "1"}, {"'foo'"}},
      {"ep on a dense model", {"--layout", "dp=4,ep=2", "--gpus", "4"}, {"ep=2", "no experts"}},
      {"non-numeric gpus", {"--gpus", "abc"}, {"--gpus", "abc"}},
      {"unknown precision", {"--precision", "fp7"}, {"fp7", "bf16"}},
      {"fp8 without fp8 cores", {"--precision", "fp8", "--hw", "dgx-a100-80gb", "--gpus", "8"}, {"fp8", "bf16"}},
      {"unknown export", {"--gpus", "8", "--export", "foo"}, {"'foo'", "megatron", "deepspeed"}},
      {"unknown fix key", {"--gpus", "8", "--fix", "bogus=1"}, {"'bogus'"}},
      {"unknown loss implementation", {"--gpus", "8", "--cross-entropy", "liger"}, {"--cross-entropy liger", "megatron"}},
      // NaN passes the option ranges; it must not fall back to the default.
      {"nan learning rate", {"--gpus", "8", "--lr", "nan"}, {"--lr", "finite"}},
      {"nan load imbalance", {"--model", "mixtral-8x7b", "--gpus", "64", "--moe-load-imbalance", "nan"},
       {"--moe-load-imbalance", "finite"}},
      {"negative seed", {"--gpus", "8", "--seed", "-1"}, {"--seed", "out of range"}},
      {"fix key twice", {"--gpus", "8", "--fix", "tp=8,tp=2"}, {"'tp' is given twice"}},
  };
  for (const BadInput& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> args{"plan"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    expect_bad_input(loom(args), c.message_has, c.report_printed_first);
  }
}

// --- nothing fits: exit 3 and what does not fit ------------------------------------------

TEST_F(LoomCli, NothingFitsExitsThreeAndSaysWhy) {
  Outcome r = loom({"plan", "--model", "llama-3.1-405b", "--gpus", "1", "--out", "plan.json"});
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  for (const char* s : {"no layout of llama-3.1-405b fits on 1 x", "closest", "needs", "over by", "weights",
                        "optimizer", "use more GPUs"})
    EXPECT_NE(r.err.find(s), std::string::npos) << "'" << s << "'\n" << describe(r);
  EXPECT_FALSE(fs::exists(path("plan.json"))) << "a plan was written although nothing fits";
}

TEST_F(LoomCli, OneLayoutThatDoesNotFitExitsThree) {
  Outcome r = loom({"plan", "--model", "llama-3.1-405b", "--gpus", "1", "--layout", "dp=1"});
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("over by"), std::string::npos) << describe(r);
}

// --- known bugs: enable each once fixed (see the e2e report) -----------------------------------

// `--layout` that does not fit exits 3 with an empty stderr: scripts that show
// stderr on failure print nothing. Expected: a one-line reason on stderr.
TEST_F(LoomCli, LayoutThatDoesNotFitSaysWhyOnStderr) {
  Outcome r = loom({"plan", "--model", "llama-3.1-405b", "--gpus", "1", "--layout", "dp=1"});
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.err.find("over by"), std::string::npos) << describe(r);
}

// `--export foo` is checked only after the search, the tables and --out: bad
// input then leaves a plan file behind and a full report on stdout.
TEST_F(LoomCli, UnknownExportIsRejectedBeforeAnyOutput) {
  Outcome r = loom({"plan", "--gpus", "8", "--export", "foo", "--out", "plan.json"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
  EXPECT_FALSE(fs::exists(path("plan.json")));
}

// --dropout accepts any integer although only -1, 0, 1 mean something.
TEST_F(LoomCli, DropoutOutOfRangeIsBadInput) {
  Outcome r = loom({"plan", "--gpus", "8", "--dropout", "5"});
  expect_bad_input(r, {"--dropout"});
}

// v=3 with 16 layers per stage gives uneven chunks, which Megatron's
// --num-layers-per-virtual-pipeline-stage cannot express (it once printed 5:
// 5 * 2 * 3 = 30 != 32 layers). The export states every virtual stage with
// --pipeline-model-parallel-layout: 32 layers over 6 chunks, the two extra
// ones on middle chunks (core/stage_split.h), in Megatron's order
// (chunk * pp + stage): 5, 6, 6, 5, 5, 5 layers, runs of equal stages as
// "(...|)*n".
TEST_F(LoomCli, MegatronExportStatesUnevenChunksByLayout) {
  Outcome r = loom({"plan", "--gpus", "16", "--layout", "dp=2,tp=4,pp=2,zero=1,schedule=interleaved,v=3", "--export",
                "megatron"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("--pipeline-model-parallel-layout \"Ettttt|(tttttt|)*2,(ttttt|)*2,tttttL\"\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos) << r.out;
}

// With more GPUs than sequences the suggested fix is an empty set: "... or a
// micro batch in {}".
TEST_F(LoomCli, NoEmptySetInBatchAdvice) {
  Outcome r = loom({"plan", "--model", "gpt2-124m", "--gpus", "100000"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(r.err.find("{}"), std::string::npos) << describe(r);
}

// --fix sp=yes (or sp=true) silently means sp=0; only "1" turns it on.
TEST_F(LoomCli, FixBooleanRejectsUnknownValues) {
  Outcome r = loom({"plan", "--gpus", "8", "--fix", "sp=yes"});
  expect_bad_input(r, {"sp=yes"});
}

// A pinned dimension that no layout can have is reported as "no layout in the
// search space is valid", without naming the pin that emptied it.
TEST_F(LoomCli, ImpossibleFixIsNamed) {
  Outcome r = loom({"plan", "--gpus", "8", "--fix", "tp=3"});
  expect_bad_input(r, {"tp=3"});
}

// `loom execute`'s backend and precision are checked before any training:
// the CPU computes in fp32 only, an unknown backend is named, and without a
// GPU `--backend cuda` says so (where a GPU is visible it trains one step).
TEST_F(LoomCli, ExecuteChecksBackendAndPrecisionFirst) {
  Outcome p = loom({"plan", "--model", "gpt2-124m", "--scale", "layers=2,hidden=64,heads=4,vocab=256", "--hw",
                    "cpu-local", "--gpus", "1", "--global-batch", "2", "--seq", "32", "--layout",
                    "dp=1,tp=1,pp=1,micro=2", "--out", path("plan.json").string()});
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  Outcome r = loom({"execute", path("plan.json").string(), "--steps", "1", "--precision", "bf16"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("the CPU backend computes in fp32"), std::string::npos) << describe(r);
  r = loom({"execute", path("plan.json").string(), "--steps", "1", "--backend", "tpu"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--backend tpu: expected cpu or cuda"), std::string::npos) << describe(r);
  r = loom({"execute", path("plan.json").string(), "--steps", "1", "--backend", "cuda", "--quiet"});
  if (r.exit_code == 0) {
    EXPECT_NE(r.out.find("backend"), std::string::npos) << describe(r);
  } else {
    EXPECT_NE(r.exit_code, -SIGSEGV) << describe(r);
    const bool explained = r.err.find("no NVIDIA GPU is visible") != std::string::npos ||
                           r.err.find("built without CUDA") != std::string::npos;
    EXPECT_TRUE(explained) << describe(r);
  }
}

// Megatron's recompute modules: planned under --framework megatron-core (and
// refused without it), and a plan with them is refused by `loom execute`,
// whose executor re-runs the attention core only, with the fix.
TEST_F(LoomCli, RecomputeModulesArePlannedForMegatronNotExecuted) {
  const std::vector<std::string> base = {"plan", "--model", "gpt2-124m", "--scale",
                                         "layers=2,hidden=64,heads=4,vocab=256", "--hw", "cpu-local", "--gpus", "1",
                                         "--global-batch", "2", "--seq", "32", "--layout",
                                         "dp=1,micro=2,recompute=selective,recompute_modules=layernorm+mlp"};
  Outcome own = loom(base);
  expect_bad_input(own, {"recompute_modules", "--framework megatron-core"});
  std::vector<std::string> megatron = base;
  for (const char* a : {"--framework", "megatron-core", "--out"}) megatron.push_back(a);
  megatron.push_back(path("modules.json").string());
  Outcome p = loom(megatron);
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  Outcome r = loom({"execute", path("modules.json").string(), "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("recompute_modules"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("--export megatron"), std::string::npos) << describe(r);
}

// DualPipeV: planned with Loom's own stack (whose executor runs it:
// tests/e2e/compare_ops.sh executes one) and under --framework torchtitan,
// and refused where the stack does not run it, naming the one that does.
TEST_F(LoomCli, DualPipeVIsPlannedWhereTheStackRunsIt) {
  const std::vector<std::string> base = {"plan", "--model", "gpt2-124m", "--scale",
                                         "layers=4,hidden=64,heads=4,vocab=256", "--hw", "cpu-local", "--gpus", "2",
                                         "--global-batch", "8", "--seq", "32", "--layout",
                                         "dp=1,pp=2,micro=1,schedule=dualpipev"};
  for (const char* stack : {"", "torchtitan"}) {
    std::vector<std::string> args = base;
    if (*stack) args.insert(args.end(), {"--framework", stack});
    Outcome p = loom(args);
    ASSERT_EQ(p.exit_code, 0) << stack << ": " << describe(p);
    EXPECT_NE(p.out.find("schedule=dualpipev,v=2"), std::string::npos) << describe(p);
  }
  std::vector<std::string> megatron = base;
  megatron.insert(megatron.end(), {"--framework", "megatron-core"});
  expect_bad_input(loom(megatron), {"schedule=dualpipev"});
}

// The heads exchange of context parallelism (cp_comm=a2a) needs cp to
// divide each TP rank's query and key/value heads: a layout where it does
// not is refused with the counts and the other exchanges, exit 2.
TEST_F(LoomCli, HeadsExchangeNeedsHeadsThatDivide) {
  const std::vector<std::string> base = {"plan", "--model", "gpt2-124m", "--scale",
                                         "layers=2,hidden=96,heads=6,vocab=256", "--hw", "cpu-local", "--gpus", "4",
                                         "--global-batch", "2", "--seq", "32", "--layout", "dp=1,cp=4,micro=2,cp_comm=a2a"};
  Outcome r = loom(base);
  expect_bad_input(r, {"cp_comm=a2a", "6 query", "cp_comm=p2p"});
  std::vector<std::string> two = base;
  two.back() = "dp=2,cp=2,micro=1,cp_comm=a2a";
  Outcome ok = loom(two);
  EXPECT_EQ(ok.exit_code, 0) << describe(ok);
}

// --- issue #14: no silent wrong results, no crashes ------------------------------

class LoomExecuteChecks : public LoomCli {
 protected:
  // `loom plan` of `model` scaled to 2 layers of hidden 64, on one CPU rank.
  void plan(const std::string& model, const std::string& out = "plan.json") {
    Outcome p = loom({"plan", "--model", model, "--scale", "layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=256",
                      "--hw", "cpu-local", "--gpus", "1", "--global-batch", "2", "--seq", "32", "--layout",
                      "dp=1,tp=1,pp=1,micro=2", "--out", path(out).string()});
    ASSERT_EQ(p.exit_code, 0) << describe(p);
  }
  // The plan with `edit` applied to its JSON and the hashes dropped (a hand edit).
  void edit_plan(const std::function<void(json&)>& edit, const std::string& out = "edited.json") {
    json j = parse_or_fail(read_file(path("plan.json")), "plan.json");
    edit(j);
    j.erase("plan_hash");
    j["model"].erase("hash");
    write_file(path(out), j.dump(2));
  }
  void expect_refused(const Outcome& r, const std::vector<std::string>& message_has) {
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(r.err.rfind("loom execute: ", 0), 0u) << describe(r);
    for (const std::string& s : message_has)
      EXPECT_NE(r.err.find(s), std::string::npos) << "'" << s << "'\n" << describe(r);
    EXPECT_EQ(r.out.find("step "), std::string::npos) << describe(r);
  }
};

// Finding 7: a head size RoPE cannot rotate (hidden 60 / 4 heads = 15) was planned and then
// aborted in the RoPE kernel (SIGABRT); now both commands refuse it up front.
TEST_F(LoomExecuteChecks, OddRopeHeadDimIsRefusedAtPlanAndExecute) {
  Outcome r = loom({"plan", "--model", "llama-3-8b", "--scale", "layers=2,hidden=60,heads=4,kv_heads=2,ffn=128,vocab=256",
                    "--hw", "cpu-local", "--gpus", "1", "--global-batch", "2", "--seq", "32", "--layout",
                    "dp=1,tp=1,pp=1,micro=2", "--out", path("odd.json").string()});
  expect_bad_input(r, {"head_dim=15", "even"});
  plan("llama-3-8b");
  r = loom({"execute", path("plan.json").string(), "--steps", "1", "--scale", "hidden=60,heads=4,kv_heads=2"});
  expect_refused(r, {"head_dim=15", "even"});
}

// #17: `execute --scale` runs another model than the plan's, so it re-plans
// the plan's layout for it (and says so): the run is compared with the scaled
// model's prediction, the record carries that plan's hash, `--plan-out` writes
// the plan `loom compare` accepts, and the unscaled plan is refused.
TEST_F(LoomExecuteChecks, ScaleReplansAndCompareRefusesTheUnscaledPlan) {
  plan("llama-3-8b");
  Outcome r = loom({"execute", path("plan.json").string(), "--steps", "2", "--scale", "layers=1",
                    "--record", path("run.json").string(), "--plan-out", path("scaled.json").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("scaled by --scale layers=1; the plan's layout re-planned"), std::string::npos) << describe(r);
  json scaled = parse_or_fail(read_file(path("scaled.json")), "scaled.json");
  json rec = parse_or_fail(read_file(path("run.json")), "run.json");
  EXPECT_EQ(scaled["model"]["config"]["num_hidden_layers"], 1);
  EXPECT_EQ(rec["plan_hash"], scaled["plan_hash"]);
  Outcome c = loom({"compare", path("scaled.json").string(), path("run.json").string()});
  EXPECT_EQ(c.exit_code, 0) << describe(c);
  // The executor's buffers at its peak, class by class beside the prediction's
  // terms; nothing allocated outside the classes.
  EXPECT_NE(c.out.find("peak memory by class (rank 0, stage 0"), std::string::npos) << describe(c);
  ASSERT_TRUE(rec.contains("peak_memory_by_class")) << rec.dump(2);
  EXPECT_EQ(rec["peak_memory_by_class"][0]["other"], 0.0);
  Outcome cj = loom({"compare", path("scaled.json").string(), path("run.json").string(), "--json"});
  ASSERT_EQ(cj.exit_code, 0) << describe(cj);
  const json classes = parse_or_fail(cj.out, "compare --json")["peak_memory_by_class"]["classes"];
  for (const char* k : {"weights", "grads", "optimizer", "activations", "workspace", "inputs"}) {
    const double want = classes[k]["predicted"], got = classes[k]["measured"];
    EXPECT_NEAR(got, want, 0.02 * want + 1) << k << "\n" << cj.out;
  }
  c = loom({"compare", path("plan.json").string(), path("run.json").string()});
  EXPECT_EQ(c.exit_code, 2) << describe(c);
  EXPECT_NE(c.err.find("different model"), std::string::npos) << describe(c);
  r = loom({"execute", path("plan.json").string(), "--steps", "1", "--plan-out", path("x.json").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("drop --plan-out"), std::string::npos) << describe(r);
}

// #17: `--hw cpu-local` is this machine, measured on first use (a line on
// stderr says so) and cached; an unreadable cache is measured again, named.
// MFU divides by the peak of the threads the rank runs: mfu x step time x
// threads is the same for --threads 1 and 2 (the model FLOPs per step are).
TEST_F(LoomCli, CpuLocalIsMeasuredOnFirstUseAndMfuTakesTheThreadsPeak) {
  ::setenv("LOOM_CACHE_DIR", path("cache").c_str(), 1);
  // Tests run two at a time: whether this machine counts as busy is pinned.
  // A measurement that is too noisy is used for the plan but not cached.
  ::setenv("LOOM_CPU_LOCAL_MAX_SPREAD", "0", 1);
  const std::vector<std::string> plan = {"plan", "--model", "gpt2-124m", "--scale", "layers=2,hidden=64,vocab=256",
                                         "--hw", "cpu-local", "--gpus", "1", "--global-batch", "4", "--seq", "32",
                                         "--precision", "fp32", "--layout", "dp=1,micro=2", "--steps", "6", "--out",
                                         path("plan.json").string()};
  Outcome p = loom(plan);
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  EXPECT_NE(p.err.find("too busy to measure reliably"), std::string::npos) << describe(p);
  EXPECT_FALSE(fs::exists(path("cache") / "hw")) << describe(p);
  ::setenv("LOOM_CPU_LOCAL_MAX_SPREAD", "1e9", 1);
  p = loom(plan);
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  EXPECT_NE(p.err.find("--hw cpu-local: measuring this machine once"), std::string::npos) << describe(p);
  std::vector<fs::path> cached;
  for (const auto& e : fs::directory_iterator(path("cache") / "hw")) cached.push_back(e.path());
  ASSERT_EQ(cached.size(), 1u);
  p = loom(plan);
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  EXPECT_EQ(p.err.find("measuring"), std::string::npos) << describe(p);
  write_file(cached[0], "{ not a profile");
  p = loom(plan);
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  EXPECT_NE(p.err.find("is unreadable"), std::string::npos) << describe(p);
  EXPECT_NE(p.err.find("measuring this machine once"), std::string::npos) << describe(p);
  ::unsetenv("LOOM_CACHE_DIR");
  ::unsetenv("LOOM_CPU_LOCAL_MAX_SPREAD");
  json pj = parse_or_fail(read_file(path("plan.json")), "plan.json");
  EXPECT_EQ(pj["hardware"]["profile"]["accelerator"]["cpu_threads"], 2);

  double product[2] = {0, 0};
  for (int threads : {1, 2}) {
    const std::string metrics = path("m" + std::to_string(threads) + ".jsonl").string();
    Outcome r = loom({"execute", path("plan.json").string(), "--threads", std::to_string(threads), "--quiet",
                      "--metrics", metrics});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::istringstream lines(read_file(metrics));
    for (std::string line; std::getline(lines, line);) {
      json m = json::parse(line);
      EXPECT_GT(m["mfu"].get<double>(), 0);
      EXPECT_LE(m["mfu"].get<double>(), 1.0) << line;
      product[threads - 1] = m["mfu"].get<double>() * m["step_time_s"].get<double>() * threads;
    }
  }
  EXPECT_NEAR(product[0] / product[1], 1.0, 1e-6);
}

// Finding 8: absurd sizes are range errors before any arithmetic or allocation
// (they were std::bad_alloc, 134, or the OOM killer, 137).
TEST_F(LoomExecuteChecks, AbsurdSizesAreRangeErrors) {
  plan("llama-3-8b");
  for (const char* scale : {"hidden=4000000000", "vocab=2000000000", "layers=10000000"}) {
    Outcome r = loom({"execute", path("plan.json").string(), "--steps", "1", "--scale", scale});
    expect_refused(r, {"out of range"});
  }
  edit_plan([](json& j) { j["train"]["seq_len"] = 1000000000; });
  Outcome r = loom({"execute", path("edited.json").string(), "--steps", "1"});
  expect_refused(r, {"seq_len=1000000000", "out of range"});
}

// Finding 8: a model in range that this host cannot hold is refused with the
// numbers before anything is allocated; --scale does not bypass the check.
TEST_F(LoomExecuteChecks, AModelThatDoesNotFitThisHostIsRefused) {
  plan("llama-3-8b");
  // 64 layers of hidden 65536: about 2e12 parameters, tens of terabytes.
  Outcome r = loom({"execute", path("plan.json").string(), "--steps", "1", "--scale",
                    "layers=64,hidden=65536,heads=512,kv_heads=128,ffn=131072"});
  expect_refused(r, {"needs about", "GB", "MemAvailable", "nothing was allocated"});
}

// Finding 3: a config field the executor cannot honour is refused, named; the
// ones it honours (Llama-3.1's rope_scaling, theta, eps) train.
TEST_F(LoomExecuteChecks, ConfigFieldsAreHonouredOrRefused) {
  plan("llama-3.1-405b");
  json j = parse_or_fail(read_file(path("plan.json")), "plan.json");
  EXPECT_EQ(j["model"]["config"]["rope_theta"], 500000.0);
  EXPECT_EQ(j["model"]["config"]["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["model"]["config"]["rms_norm_eps"], 1e-5);
  Outcome r = loom({"execute", path("plan.json").string(), "--steps", "2", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  edit_plan([](json& j) { j["model"]["config"]["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; });
  r = loom({"execute", path("edited.json").string(), "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("rope_scaling type \"yarn\""), std::string::npos) << describe(r);
  edit_plan([](json& j) { j["model"]["config"]["hidden_act"] = "gelu"; });
  r = loom({"execute", path("edited.json").string(), "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("hidden_act=\"gelu\""), std::string::npos) << describe(r);
  // Dense Qwen3 (q/k norm implied by the model_type) and Qwen2 (q/k/v biases) train.
  for (const char* type : {"qwen3", "qwen2"}) {
    const std::string cfg = path(std::string(type) + ".json").string();
    write_file(cfg, std::string(R"({"model_type": ")") + type + R"(", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
      "max_position_embeddings": 64, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6})");
    plan(cfg, std::string(type) + "-plan.json");
    r = loom({"execute", path(std::string(type) + "-plan.json").string(), "--steps", "2", "--quiet"});
    EXPECT_EQ(r.exit_code, 0) << type << "\n" << describe(r);
  }
}
}  // namespace

// Findings 9 and 12: counts out of range are refused before anything runs
// (--steps -3 and --stop-after -1 used to run 20 steps; --threads 65535 crashed).
TEST_F(LoomExecuteChecks, CountsOutOfRangeAreRefused) {
  plan("llama-3-8b");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--steps", "-3"}, "--steps"},        {{"--steps", "0"}, "--steps"},
      {{"--stop-after", "-1"}, "--stop-after"}, {{"--threads", "65535"}, "--threads 65535"},
      {{"--threads", "-2"}, "--threads"},    {{"--keep", "-1"}, "--keep"},
      {{"--device", "-4"}, "--device"},      {{"--timeout", "-1"}, "--timeout"},
  };
  for (const auto& [args, named] : cases) {
    std::vector<std::string> cmd{"execute", path("plan.json").string()};
    cmd.insert(cmd.end(), args.begin(), args.end());
    Outcome r = loom(cmd);
    SCOPED_TRACE(args[0] + " " + args[1]);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.err.find(named), std::string::npos) << describe(r);
    EXPECT_EQ(r.out.find("step "), std::string::npos) << describe(r);
  }
  Outcome dup = loom({"execute", path("plan.json").string(), "--steps", "1"});
  EXPECT_EQ(dup.exit_code, 0) << describe(dup);
  EXPECT_NE(dup.out.find("threads: "), std::string::npos) << "the thread count is said at start\n" << describe(dup);
}

// A hand-edited plan's optimizer settings are held to AdamW's ranges, and a
// plan without its plan_hash (nothing checks it against its prediction) says
// so when it runs.
TEST_F(LoomExecuteChecks, EditedOptimizerSettingsAreRangeCheckedAndAnUncheckedPlanSaysSo) {
  plan("llama-3-8b");
  const std::vector<std::pair<std::string, double>> bad = {
      {"beta1", 1.5}, {"beta2", -3}, {"adam_eps", -1}, {"weight_decay", -5}, {"min_lr", 10}, {"grad_clip", -1}};
  for (const auto& [key, value] : bad) {
    SCOPED_TRACE(key);
    edit_plan([&, key = key, value = value](json& j) { j["train"][key] = value; });
    Outcome r = loom({"execute", path("edited.json").string(), "--steps", "1"});
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.err.find(key), std::string::npos) << describe(r);
    EXPECT_EQ(r.out.find("step "), std::string::npos) << describe(r);
  }
  edit_plan([](json&) {});
  Outcome r = loom({"execute", path("edited.json").string(), "--steps", "1"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("has no plan_hash"), std::string::npos) << describe(r);
  Outcome checked = loom({"execute", path("plan.json").string(), "--steps", "1"});
  EXPECT_EQ(checked.out.find("has no plan_hash"), std::string::npos) << describe(checked);
}

// Finding 12: a key given twice in --layout is refused, not silently the last one.
TEST_F(LoomCli, LayoutKeyGivenTwiceIsRefused) {
  Outcome r = loom({"plan", "--model", "gpt2-124m", "--gpus", "2", "--layout", "dp=1,dp=2"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'dp' is given twice"), std::string::npos) << describe(r);
}

// Finding 13: `loom compare plan.json plan.json` said "single.json.model must be a string".
TEST_F(LoomExecuteChecks, ComparingAPlanWithAPlanSaysSo) {
  plan("llama-3-8b");
  Outcome r = loom({"compare", path("plan.json").string(), path("plan.json").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("is a plan, not a run record"), std::string::npos) << describe(r);
}

// --- issue #15: predicted vs measured never passes silently ----------------------

// A run record of plan.json written by hand (the executor's keys, version 2).
json record_of(const json& plan, const std::string& model) {
  json phases = {{"forward_s", 0.01},         {"backward_s", 0.02},        {"tp_comm_exposed_s", nullptr},
                 {"pipeline_wait_s", 0.0},    {"dp_comm_exposed_s", 0.0},  {"optimizer_s", 0.005},
                 {"data_wait_s", 0.0001}};
  return {{"schema_version", 2}, {"plan_hash", plan["plan_hash"]}, {"model", model}, {"layout", "x"},
          {"world_size", 1},     {"steps", 6},                       {"tokens_per_step", 64},
          {"warmup_steps", 2},   {"step_time_s", 0.04},              {"step_time_median_s", 0.039},
          {"phases", phases},    {"tokens_per_s", 1600},             {"peak_memory_bytes", {1e6}}};
}

// A renamed prediction key is refused by `loom compare` naming it and the fix;
// a version-1 record (pp_comm_s, dp_comm_s) still compares.
TEST_F(LoomExecuteChecks, CompareRefusesAPredictionLackingAFigure) {
  plan("llama-3-8b");
  const json p = parse_or_fail(read_file(path("plan.json")), "plan.json");
  const std::string model = p["model"]["name"];
  write_file(path("run.json"), record_of(p, model).dump(2));
  Outcome ok = loom({"compare", path("plan.json").string(), path("run.json").string(), "--json"});
  ASSERT_EQ(ok.exit_code, 0) << describe(ok);
  json rows = parse_or_fail(ok.out, "compare --json");
  for (const char* id : {"step_time", "step_time_mean", "compute", "forward", "backward", "optimizer",
                         "tokens_per_s", "peak_memory"})
    EXPECT_TRUE(rows.contains(id) && rows.contains(std::string(id) + "_rel_error")) << id << "\n" << ok.out;
  EXPECT_EQ(rows["step_time"]["measured"], 0.039) << "step_time is the median step";
  EXPECT_EQ(rows["step_time_mean"]["measured"], 0.04);

  json renamed = p;
  renamed["prediction"]["phases"]["forward_compute_s"] = renamed["prediction"]["phases"]["forward_s"];
  renamed["prediction"]["phases"].erase("forward_s");
  write_file(path("renamed.json"), renamed.dump(2));
  Outcome r = loom({"compare", path("renamed.json").string(), path("run.json").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("forward_s"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("re-create it with this `loom plan`"), std::string::npos) << describe(r);

  json v1 = record_of(p, model);
  v1["schema_version"] = 1;
  v1["phases"] = {{"forward_s", 0.01}, {"backward_s", 0.02}, {"pp_comm_s", 0.0},
                  {"dp_comm_s", 0.0},  {"optimizer_s", 0.005}, {"data_wait_s", 0.0001}};
  write_file(path("v1.json"), v1.dump(2));
  Outcome old = loom({"compare", path("plan.json").string(), path("v1.json").string()});
  EXPECT_EQ(old.exit_code, 0) << describe(old);
  EXPECT_NE(old.out.find("step_time "), std::string::npos) << describe(old);
}
