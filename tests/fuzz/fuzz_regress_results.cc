// Regression results (cli/regress.h parse_results): what `loom regress run`
// writes and `loom regress check` reads. Accepted results must round-trip
// through results_to_json, and their SVG plot is drawn.
#include "cli/regress.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    cli::RegressResults r;
    r.suite = "ci";
    r.suite_description = "two-rank smoke suite";
    r.machine.key = "amd-epyc-2c-8g";
    r.machine.hostname = "ci";
    r.machine.cpu_model = "AMD EPYC";
    r.machine.cores = 2;
    r.machine.memory_gib = 8;
    r.commit = "abcdef012345";
    r.date = "2026-12-01T00:00:00Z";
    cli::CaseResult c;
    c.name = "gpt2-dp2";
    c.ranks = 2;
    c.model = "gpt2-124m";
    c.layout = "dp=2";
    c.tolerances = {{"step_time", 0.3}, {"peak_memory", 0.2}};
    c.figures["step_time"] = {0.31, 0.35};
    c.figures["tokens_per_s"] = {3000, 2800};
    c.figures["peak_memory"] = {1e8, 1.2e8};
    r.cases.push_back(c);
    cli::CaseResult e;
    e.name = "broken";
    e.ranks = 4;
    e.error = "plan failed";
    r.cases.push_back(e);
    loom::fuzz::write_seed("results_0.json", cli::results_to_json(r));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = cli::parse_results(text, "fuzz results");
  if (!r.is_ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string canon = cli::results_to_json(*r);
  auto r2 = cli::parse_results(canon, "fuzz results (re-serialized)");
  FUZZ_CHECK(r2.is_ok(), r2.status().to_string() + "\n" + canon);
  FUZZ_CHECK(cli::results_to_json(*r2) == canon, "the results changed in a round trip");
  const std::string svg = cli::results_svg(*r);
  FUZZ_CHECK(svg.find("<svg") != std::string::npos, "no SVG");
  return 0;
}
