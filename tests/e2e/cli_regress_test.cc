// End-to-end: `loom regress check` (tolerances, baselines at equal machine
// speed, figures a prediction lacks) and `loom plan --grad-reduce`, run as a
// user would (tests/e2e/cli_test_support.h).
#include "tests/e2e/cli_test_support.h"

// #17: FIGURE_over bounds only the measurement above the prediction (peak
// memory: a layout predicted to fit must not need more), while FIGURE bounds
// both sides; the shipped `models` suite names such tolerances and loads.
TEST_F(LoomCli, RegressCheckOverToleranceIsOneSided) {
  auto results = [](double measured_memory) {
    json c = {{"name", "m"},
              {"ranks", 1},
              {"layout", "dp=1"},
              {"tolerances", {{"peak_memory", 0.5}, {"peak_memory_over", 0.05}}},
              {"figures",
               {{"step_time", {{"predicted", 1.0}, {"measured", 1.0}}},
                {"peak_memory", {{"predicted", 100.0}, {"measured", measured_memory}}}}}};
    return json{{"schema_version", 1}, {"suite", "t"}, {"machine", {{"key", "test-machine"}}}, {"cases", json::array({c})}}
        .dump(2);
  };
  write_file(path("below.json"), results(70.0));  // 30% below: inside +-50%, and not above
  Outcome r = loom({"regress", "check", path("below.json").string(), "--baselines", path("base").string()});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("peak_memory_over"), std::string::npos) << describe(r);
  write_file(path("above.json"), results(108.0));  // 8% above: inside +-50%, beyond +5%
  r = loom({"regress", "check", path("above.json").string(), "--baselines", path("base").string()});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.err.find("m: peak_memory predicted +8% off (measured / predicted - 1), allowed <=+5% (measured above "
                       "the prediction)"),
            std::string::npos)
      << describe(r);
  Outcome bad = loom({"regress", "run", "models", "--cases", "nope", "--out", path("x.json").string()});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("no case 'nope' in suite models"), std::string::npos) << describe(bad);
}

// --grad-reduce: an unknown type and an fp8 export are refused naming the
// option; a bf16 plan records it and exports Megatron's flag.
TEST_F(LoomCli, GradReduceIsCheckedRecordedAndExported) {
  Outcome bad = loom({"plan", "--model", "gpt2-124m", "--hw", "cpu-local", "--gpus", "2", "--global-batch", "8",
                      "--seq", "64", "--grad-reduce", "int8", "--out", path("x.json").string()});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("grad_reduce 'int8' is not one of fp32, bf16, fp8 (--grad-reduce)"), std::string::npos)
      << describe(bad);
  Outcome fp8 = loom({"plan", "--model", "gpt2-124m", "--hw", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                      "--seq", "1024", "--grad-reduce", "fp8", "--export", "megatron"});
  EXPECT_EQ(fp8.exit_code, 2) << describe(fp8);
  EXPECT_NE(fp8.err.find("--grad-reduce fp8 has no Megatron-LM equivalent"), std::string::npos) << describe(fp8);
  Outcome bf16 = loom({"plan", "--model", "gpt2-124m", "--hw", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                       "--seq", "1024", "--grad-reduce", "bf16", "--layout", "dp=8", "--export", "megatron"});
  EXPECT_EQ(bf16.exit_code, 0) << describe(bf16);
  EXPECT_NE(bf16.out.find("--grad-reduce-in-bf16"), std::string::npos) << describe(bf16);
  Outcome plan = loom({"plan", "--model", "gpt2-124m", "--hw", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                       "--seq", "1024", "--grad-reduce", "bf16", "--layout", "dp=8", "--out", path("g.json").string()});
  ASSERT_EQ(plan.exit_code, 0) << describe(plan);
  EXPECT_EQ(json::parse(read_file(path("g.json")))["train"]["grad_reduce"], "bf16");
}

// The throughput check compares a case with the baseline at equal machine
// speed where both runs timed the reference workload around the case: half
// the tokens/s on a machine running at half speed is no regression; the same
// fall at the same speed is.
TEST_F(LoomCli, RegressThroughputIsComparedAtEqualMachineSpeed) {
  auto results = [](double tokens_per_s, double speed) {
    json c = {{"name", "c"},
              {"ranks", 1},
              {"layout", "dp=1"},
              {"machine_speed", speed},
              {"tolerances", {{"step_time", 0.5}}},
              {"figures",
               {{"step_time", {{"predicted", 1.0}, {"measured", 1.0}}},
                {"tokens_per_s", {{"predicted", 1000.0}, {"measured", tokens_per_s}}}}}};
    return json{{"schema_version", 1}, {"suite", "t"}, {"throughput_margin", 0.25},
                {"machine", {{"key", "test-machine"}}}, {"cases", json::array({c})}}
        .dump(2);
  };
  write_file(path("base.json"), results(1000, 400));
  Outcome start = loom({"regress", "check", path("base.json").string(), "--baselines", path("b").string()});
  ASSERT_EQ(start.exit_code, 0) << describe(start);
  json stored = json::parse(read_file(path("b") / "test-machine" / "t.json"));
  EXPECT_EQ(stored["cases"]["c"]["machine_speed"], 400.0);
  write_file(path("slow_machine.json"), results(500, 200));
  Outcome same = loom({"regress", "check", path("slow_machine.json").string(), "--baselines", path("b").string()});
  EXPECT_EQ(same.exit_code, 0) << describe(same);
  EXPECT_NE(same.out.find("throughput@speed"), std::string::npos) << describe(same);
  EXPECT_NE(same.out.find("raw -50% at machine speed -50%"), std::string::npos) << describe(same);
  write_file(path("slow_code.json"), results(500, 400));
  Outcome slow = loom({"regress", "check", path("slow_code.json").string(), "--baselines", path("b").string()});
  EXPECT_EQ(slow.exit_code, 1) << describe(slow);
  EXPECT_NE(slow.err.find("c: measured throughput 500 tokens/s is -50% at equal machine speed (raw -50%, the machine "
                          "+0% against the baseline's run)"),
            std::string::npos)
      << describe(slow);
  // A results file without the reference (an older version's) is compared raw.
  json old = json::parse(results(500, 200));
  old["cases"][0].erase("machine_speed");
  write_file(path("old.json"), old.dump(2));
  Outcome raw = loom({"regress", "check", path("old.json").string(), "--baselines", path("b").string()});
  EXPECT_EQ(raw.exit_code, 1) << describe(raw);
  EXPECT_EQ(raw.out.find("throughput@speed"), std::string::npos) << describe(raw);
  json bad = json::parse(results(500, 200));
  bad["cases"][0]["machine_speed"] = -1;
  write_file(path("neg.json"), bad.dump(2));
  Outcome neg = loom({"regress", "check", path("neg.json").string(), "--baselines", path("b").string()});
  EXPECT_EQ(neg.exit_code, 2) << describe(neg);
  EXPECT_NE(neg.err.find("machine_speed"), std::string::npos) << describe(neg);
}

// `loom regress check` fails a figure predicted as 0 but measured (an infinite
// error) instead of passing it, naming the figure.
TEST_F(LoomCli, RegressCheckFailsAFigurePredictedAsZero) {
  auto results = [](double dp_predicted) {
    json fig = {{"predicted", 0.1}, {"measured", 0.1}};
    json c = {{"name", "dp2"},
              {"ranks", 2},
              {"layout", "dp=2"},
              {"tolerances", {{"step_time", 0.2}, {"dp_comm", 0.5}}},
              {"figures", {{"step_time", fig}, {"dp_comm", {{"predicted", dp_predicted}, {"measured", 0.01}}}}}};
    return json{{"schema_version", 1},
                {"suite", "t"},
                {"machine", {{"key", "test-machine"}}},
                {"cases", json::array({c})}}
        .dump(2);
  };
  write_file(path("good.json"), results(0.01));
  Outcome good = loom({"regress", "check", path("good.json").string(), "--baselines", path("base").string()});
  EXPECT_EQ(good.exit_code, 0) << describe(good);
  write_file(path("zero.json"), results(0.0));
  Outcome r = loom({"regress", "check", path("zero.json").string(), "--baselines", path("base").string()});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.err.find("dp2: dp_comm predicted 0 but measured 0.01: the relative error is not finite"),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << describe(r);
  // A failed check starts no baseline (a stalled run would set the bar low);
  // the next passing one does.
  Outcome fresh = loom({"regress", "check", path("zero.json").string(), "--baselines", path("base2").string()});
  EXPECT_EQ(fresh.exit_code, 1) << describe(fresh);
  EXPECT_NE(fresh.out.find("not starting one from a run that failed its check"), std::string::npos) << describe(fresh);
  EXPECT_FALSE(std::filesystem::exists(path("base2") / "test-machine" / "t.json"));
  Outcome start = loom({"regress", "check", path("good.json").string(), "--baselines", path("base2").string()});
  EXPECT_EQ(start.exit_code, 0) << describe(start);
  EXPECT_NE(start.out.find("this run starts it"), std::string::npos) << describe(start);
  EXPECT_TRUE(std::filesystem::exists(path("base2") / "test-machine" / "t.json"));
}

// The MoE load imbalance measured by a run, as a plan's input: the median of
// the metrics file's expert_load_imbalance (here 1.8 among 1.2, 1.8, 2.4)
// lands in the plan's simulator options and slows the predicted step, as
// --moe-load-imbalance 1.8 does; a file without it, a malformed line or
// both options are refused with exit 2.
TEST_F(LoomCli, MoeLoadImbalanceMeasuredByARunIsThePlansInput) {
  const std::vector<std::string> base = {"plan", "--model", "mixtral-8x7b", "--scale",
                                         "layers=2,hidden=128,heads=4,kv_heads=4,ffn=256,vocab=256,experts=4",
                                         "--hw", "cpu-local", "--gpus", "2", "--global-batch", "16", "--seq", "64",
                                         "--layout", "dp=2,ep=2,micro=8"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return loom(a);
  };
  write_file(path("m.jsonl"), "{\"step\":0,\"loss\":5.5,\"expert_load_imbalance\":1.2}\n"
                              "{\"step\":1,\"loss\":5.4,\"expert_load_imbalance\":2.4}\n\n"
                              "{\"step\":2,\"loss\":5.3,\"expert_load_imbalance\":1.8}\n");
  Outcome measured = with({"--moe-load-imbalance-from", path("m.jsonl").string(), "--out", "measured.json"});
  ASSERT_EQ(measured.exit_code, 0) << describe(measured);
  EXPECT_NE(measured.err.find("MoE load imbalance 1.800, the median measured in"), std::string::npos)
      << describe(measured);
  Outcome given = with({"--moe-load-imbalance", "1.8", "--out", "given.json"});
  Outcome balanced = with({"--out", "balanced.json"});
  ASSERT_EQ(given.exit_code, 0) << describe(given);
  ASSERT_EQ(balanced.exit_code, 0) << describe(balanced);
  auto step_of = [&](const char* f) {
    const json p = json::parse(read_file(path(f)));
    return std::make_pair(p["sim_options"]["moe_load_imbalance"].get<double>(),
                          p["prediction"]["step_time_s"].get<double>());
  };
  EXPECT_EQ(step_of("measured.json").first, 1.8);
  EXPECT_EQ(step_of("measured.json").second, step_of("given.json").second);
  EXPECT_GT(step_of("measured.json").second, step_of("balanced.json").second);

  auto refused = [&](const Outcome& r, const std::vector<std::string>& has) {
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    for (const std::string& h : has) EXPECT_NE(r.err.find(h), std::string::npos) << "'" << h << "'\n" << describe(r);
    EXPECT_EQ(r.out.find("chosen"), std::string::npos) << describe(r);
  };
  write_file(path("dense.jsonl"), "{\"step\":0,\"loss\":5.5}\n");
  refused(with({"--moe-load-imbalance-from", path("dense.jsonl").string()}),
                   {"no step records expert_load_imbalance", "--moe-load-imbalance X"});
  write_file(path("bad.jsonl"), "{\"step\":0,\"expert_load_imbalance\":1.2}\nnot json\n");
  refused(with({"--moe-load-imbalance-from", path("bad.jsonl").string()}), {"line 2", "--metrics"});
  refused(with({"--moe-load-imbalance-from", path("m.jsonl").string(), "--moe-load-imbalance", "1.5"}),
                   {"use one"});
}
