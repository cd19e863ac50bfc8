// loom regress check: prediction errors against tolerances, measured
// throughput against this machine's baseline; table and SVG plot.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/resources.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/regress.h"
#include "core/json_util.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.0f%%", 100 * x);
  return b;
}

std::string number(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", x);
  return b;
}

struct Baseline {
  std::string commit, date;
  std::map<std::string, double> tokens_per_s;  // case -> measured
  std::map<std::string, double> machine_speed;  // case -> reference runs/s while it ran (absent: not measured)
};

Result<Baseline> load_baseline(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  const std::string w = "baseline " + path;
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, w));
  if (!j.is_object() || !j.contains("cases") || !j["cases"].is_object())
    return invalid_argument(w + ": no cases object; delete it to start a new baseline, or restore it from git");
  Baseline b;
  LOOM_ASSIGN_OR_RETURN(b.commit, json_string_or(j, "commit", "unknown", w));
  LOOM_ASSIGN_OR_RETURN(b.date, json_string_or(j, "date", "", w));
  for (const auto& [name, c] : j["cases"].items()) {
    LOOM_ASSIGN_OR_RETURN(double t, json_positive(c, "tokens_per_s", w + ": cases." + name));
    b.tokens_per_s[name] = t;
    if (c.contains("machine_speed")) {
      LOOM_ASSIGN_OR_RETURN(b.machine_speed[name], json_positive(c, "machine_speed", w + ": cases." + name));
    }
  }
  return b;
}

Status save_baseline(const std::string& path, const RegressResults& r, Baseline b) {
  OrderedJson j;
  j["suite"] = r.suite;
  j["machine"] = {{"key", r.machine.key}, {"cpu_model", r.machine.cpu_model}, {"cores", r.machine.cores},
                  {"memory_gib", r.machine.memory_gib}, {"hostname", r.machine.hostname}};
  j["commit"] = r.commit;
  j["date"] = r.date;
  for (const CaseResult& c : r.cases)
    if (c.error.empty() && c.figures.count("tokens_per_s")) {
      b.tokens_per_s[c.name] = c.figures.at("tokens_per_s").measured;
      if (c.machine_speed > 0) b.machine_speed[c.name] = c.machine_speed;
      else b.machine_speed.erase(c.name);
    }
  j["cases"] = OrderedJson::object();
  for (const auto& [name, t] : b.tokens_per_s) {
    j["cases"][name] = {{"tokens_per_s", t}};
    if (b.machine_speed.count(name)) j["cases"][name]["machine_speed"] = b.machine_speed.at(name);
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  return write_text_file(path, j.dump(2) + "\n");
}

}  // namespace

void print_results_table(const RegressResults& r) {
  std::printf("\n%s suite on %s (%s), commit %s, %s\n", r.suite.c_str(), r.machine.key.c_str(), r.machine.hostname.c_str(),
              r.commit.c_str(), r.date.c_str());
  std::printf("%-20s %5s  %-34s %11s %11s %7s %7s %7s %7s %8s %8s\n", "case", "ranks", "layout", "predicted",
              "measured", "error", "fwd", "bwd", "optim", "tok/s", "machine");
  for (const CaseResult& c : r.cases) {
    if (!c.error.empty()) {
      std::printf("%-20s %5d  %-34s  did not run: %.80s\n", c.name.c_str(), c.ranks, c.layout.c_str(), c.error.c_str());
      continue;
    }
    auto fig = [&](const char* k) { return c.figures.count(k) ? c.figures.at(k) : Figure{}; };
    auto err = [&](const char* k) { return c.figures.count(k) ? pct(c.figures.at(k).rel_error()) : std::string("-"); };
    Figure st = fig("step_time");
    const std::string drift = c.machine_speed > 0 && c.calibration_speed > 0
                                  ? pct(c.machine_speed / c.calibration_speed - 1) : std::string("-");
    std::printf("%-20s %5d  %-34s %9.1fms %9.1fms %7s %7s %7s %7s %8.0f %8s\n", c.name.c_str(), c.ranks,
                c.layout.c_str(), st.predicted * 1e3, st.measured * 1e3, pct(st.rel_error()).c_str(),
                err("forward").c_str(), err("backward").c_str(), err("optimizer").c_str(), fig("tokens_per_s").measured,
                drift.c_str());
  }
  std::printf("(step time: median of the measured steps; error = measured / predicted - 1; machine = its speed while "
              "the case ran against when its profile was calibrated, which the prediction cannot know)\n");
}

namespace {

// --tolerance FIGURE=FRACTION overrides and --tolerance-scale, applied to every case.
Status apply_tolerances(const std::vector<std::string>& overrides_text, double scale, RegressResults* res) {
  std::map<std::string, double> overrides;
  for (const std::string& o : overrides_text) {
    auto eq = o.find('=');
    double v = 0;
    try {
      v = eq == std::string::npos ? 0 : std::stod(o.substr(eq + 1));
    } catch (...) {
    }
    if (eq == std::string::npos || eq == 0 || !(v > 0))
      return invalid_argument("--tolerance '" + o + "' must be FIGURE=FRACTION, e.g. step_time=0.2");
    overrides[o.substr(0, eq)] = v;
  }
  if (!(scale > 0)) return invalid_argument("--tolerance-scale must be positive, e.g. 1.75");
  for (CaseResult& c : res->cases) {
    for (const auto& [k, v] : overrides) c.tolerances[k] = v;
    for (auto& [k, v] : c.tolerances) v *= scale;
  }
  return Status::ok();
}

// Each tolerance of a case against its figure's error; adds to `failures`.
// FIGURE_over bounds only how far the measurement may exceed the prediction
// (peak_memory_over: a layout predicted to fit must not need more).
void check_figures(const CaseResult& c, std::vector<std::string>* failures) {
  static const std::string kOver = "_over";
  for (const auto& [key, tol] : c.tolerances) {
    const bool over = key.size() > kOver.size() && key.compare(key.size() - kOver.size(), kOver.size(), kOver) == 0;
    const std::string k = over ? key.substr(0, key.size() - kOver.size()) : key;
    if (!c.figures.count(k)) {
      failures->push_back(c.name + ": the tolerance names figure '" + k + "', which the results do not have");
      continue;
    }
    const Figure& f = c.figures.at(k);
    double e = f.rel_error();
    // A non-finite error (a prediction of 0 against a measured figure, or a
    // NaN) fails: it is a figure the prediction lacks, never a pass.
    bool ok = std::isfinite(e) && (over ? e <= tol : std::fabs(e) <= tol);
    const std::string allowed = (over ? "<=+" : "±") + std::to_string(int(std::lround(100 * tol)));
    std::printf("%-20s %-16s %9s %8s%%  %s\n", c.name.c_str(), key.c_str(), pct(e).c_str(), allowed.c_str(),
                ok ? "ok" : "FAIL");
    if (!std::isfinite(e))
      failures->push_back(c.name + ": " + k + " predicted " + number(f.predicted) + " but measured " +
                          number(f.measured) + ": the relative error is not finite, so the prediction lacks this "
                          "figure; re-create the case's plan with this `loom plan` (re-run `loom regress run`)");
    else if (!ok)
      failures->push_back(c.name + ": " + k + " predicted " + pct(e) + " off (measured / predicted - 1), allowed " +
                          allowed + "%" + (over ? " (measured above the prediction)" : ""));
  }
}

// A case's measured throughput against this machine's baseline. Where both
// runs timed the machine's reference workload around the case
// (cli/machine_speed.h), the throughput is compared at equal machine speed:
// tokens/s divided by reference runs/s, so that a shared machine running
// slower today is not read as a slower executor; the raw change is printed
// beside it.
void check_throughput(const CaseResult& c, const Baseline& base, double margin, std::vector<std::string>* failures) {
  if (!base.tokens_per_s.count(c.name) || !c.figures.count("tokens_per_s")) return;
  const double was = base.tokens_per_s.at(c.name), now = c.figures.at("tokens_per_s").measured;
  const double raw = now / was - 1;
  const bool normalized = c.machine_speed > 0 && base.machine_speed.count(c.name);
  const double speed = normalized ? c.machine_speed / base.machine_speed.at(c.name) : 1.0;
  const double change = now / was / speed - 1;
  const bool ok = change >= -margin;
  const std::string allowed = "-" + std::to_string(int(std::lround(100 * margin)));
  std::printf("%-20s %-16s %9s %8s%%  %s (baseline %.0f tok/s, commit %s", c.name.c_str(),
              normalized ? "throughput@speed" : "throughput", pct(change).c_str(), allowed.c_str(), ok ? "ok" : "FAIL",
              was, base.commit.c_str());
  if (normalized) std::printf("; raw %s at machine speed %s", pct(raw).c_str(), pct(speed - 1).c_str());
  std::printf(")\n");
  if (!ok)
    failures->push_back(c.name + ": measured throughput " + std::to_string(int(now)) + " tokens/s is " + pct(change) +
                        (normalized ? " at equal machine speed (raw " + pct(raw) + ", the machine " + pct(speed - 1) +
                                          " against the baseline's run)"
                                    : std::string()) +
                        " against this machine's baseline " + std::to_string(int(was)) + " (commit " + base.commit +
                        ", " + base.date + "); allowed " + allowed + "%");
}

// Starts this machine's baseline from a run without one that passed its
// check (a stalled run would set the bar low), or replaces it with
// --update-baseline.
Status update_baseline(const RegressResults& res, const std::string& base_path, bool have_base, const Baseline& base,
                       bool update, bool check_passed) {
  const bool all_ran = std::all_of(res.cases.begin(), res.cases.end(), [](const CaseResult& c) { return c.error.empty(); });
  if (!have_base && all_ran && check_passed) {
    update = true;
    std::printf("no throughput baseline for machine %s and suite %s yet: this run starts it (%s)\n",
                res.machine.key.c_str(), res.suite.c_str(), base_path.c_str());
  } else if (!have_base) {
    std::printf("no throughput baseline for machine %s yet; not starting one from a run %s\n", res.machine.key.c_str(),
                all_ran ? "that failed its check" : "with failed cases");
  }
  if (!update) return Status::ok();
  LOOM_RETURN_IF_ERROR(save_baseline(base_path, res, base));
  if (have_base) std::printf("baseline updated: %s\n", base_path.c_str());
  return Status::ok();
}

}  // namespace

int regress_check(int argc, char** argv) {
  CLI::App app{"Check a `loom regress run` results file: prediction errors against their tolerances, measured "
               "throughput against this machine's stored baseline. Exit 0 pass, 1 fail, 2 bad input.",
               "loom regress check"};
  std::string path, plot;
  auto shipped = find_resource("bench/baselines");
  std::string baselines = shipped.is_ok() ? *shipped : "bench/baselines";
  bool update = false;
  double margin = -1, tol_scale = 1;
  std::vector<std::string> tol_overrides;
  app.add_option("results", path, "results file written by `loom regress run`")->required();
  app.add_option("--baselines", baselines, "baseline directory (one subdirectory per machine)")->capture_default_str();
  app.add_flag("--update-baseline", update, "store these measurements as this machine's baseline");
  app.add_option("--margin", margin, "allowed throughput fall below the baseline (default: the suite's)");
  app.add_option("--tolerance", tol_overrides, "FIGURE=FRACTION for every case, e.g. step_time=0.2");
  app.add_option("--tolerance-scale", tol_scale, "multiply every tolerance (CI on shared machines: see the suite's note)")
      ->capture_default_str();
  app.add_option("--plot", plot, "SVG plot of predicted vs measured (default: the results path with .svg)");
  if (int rc = parse_args(app, "regress check", argc, argv); rc >= 0) return rc;
  auto text = read_text_file(path);
  if (!text.is_ok()) return fail("regress check", text.status());
  auto res = parse_results(*text, "results " + path);
  if (!res.is_ok()) return fail("regress check", res.status());
  if (Status s = apply_tolerances(tol_overrides, tol_scale, &*res); !s.is_ok()) return fail("regress check", s);
  if (margin < 0) margin = res->throughput_margin;
  if (!(margin > 0 && margin < 1)) return fail("regress check", invalid_argument("--margin must be in (0, 1), e.g. 0.25"));

  print_results_table(*res);
  if (!res->tolerance_note.empty()) std::printf("tolerances: %s\n", res->tolerance_note.c_str());
  const std::string base_path = baselines + "/" + res->machine.key + "/" + res->suite + ".json";
  Baseline base;
  const bool have_base = fs::exists(base_path);
  if (have_base) {
    auto b = load_baseline(base_path);
    if (!b.is_ok()) return fail("regress check", b.status());
    base = *b;
  }
  std::vector<std::string> failures;
  std::printf("\n%-20s %-16s %9s %9s  %s\n", "case", "figure", "error", "allowed", "verdict");
  for (const CaseResult& c : res->cases) {
    if (!c.error.empty()) {
      failures.push_back(c.name + ": did not run (" + c.error.substr(0, 200) + ")");
      continue;
    }
    check_figures(c, &failures);
    if (have_base) check_throughput(c, base, margin, &failures);
  }
  if (plot.empty()) plot = (path.size() > 5 && path.substr(path.size() - 5) == ".json" ? path.substr(0, path.size() - 5) : path) + ".svg";
  if (Status s = write_text_file(plot, results_svg(*res)); !s.is_ok()) return fail("regress check", s);
  std::printf("\nplot: %s\n", plot.c_str());
  if (Status s = update_baseline(*res, base_path, have_base, base, update, failures.empty()); !s.is_ok())
    return fail("regress check", s);
  if (!failures.empty()) {
    std::fprintf(stderr, "loom regress check: %zu failure(s):\n", failures.size());
    for (const std::string& f : failures) std::fprintf(stderr, "  %s\n", f.c_str());
    return 1;
  }
  std::printf("regress check: all %zu case(s) pass\n", res->cases.size());
  return 0;
}

}  // namespace loom::cli
