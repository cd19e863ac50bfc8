// loom validate: predict every published run of the validation table and
// compare (sim/validation.h); with --sweeps, the published layout sweeps
// instead (sim/layout_sweeps.h). Exit 1 when a pinned row leaves its
// tolerance, is predicted not to fit, or cannot be predicted, or a sweep
// leaves its pins.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "core/resources.h"
#include "sim/layout_sweeps.h"
#include "sim/validation.h"

namespace loom::cli {

int cmd_validate(int argc, char** argv) {
  CLI::App app{"Predict the published training runs of the validation table and compare.", "loom validate"};
  std::string table;
  std::string only;
  app.add_option("--table", table, "validation table (default: validation/published_runs.json of the install)");
  app.add_option("--only", only, "comma-separated row IDs, e.g. M1,B2");
  bool breakdown = false;
  app.add_flag("--breakdown", breakdown,
               "after the table, each row's predicted step by phase (forward, backward, recompute, exposed "
               "communication, bubble, optimizer) as shares of the step, and the worst stage's memory against the "
               "usable memory");
  bool sweeps = false;
  app.add_flag("--sweeps", sweeps,
               "the layout sweeps instead of the table: published measurements of several layouts of one model on "
               "one cluster, each predicted; whether Loom orders them as measured (Kendall's tau), how its pick ran, "
               "and its fit verdicts against the layouts that ran out of memory");
  std::string sweep_table;
  app.add_option("--sweep-table", sweep_table,
                 "layout sweeps file (default: validation/layout_sweeps.json of the install); implies --sweeps");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (sweeps || !sweep_table.empty()) {
    if (!table.empty() || !only.empty() || breakdown)
      return fail("validate", invalid_argument("--sweeps reads the layout sweeps; --table, --only and --breakdown "
                                               "are the table's options"));
    if (sweep_table.empty()) {
      auto found = find_resource("validation/layout_sweeps.json");
      if (!found.is_ok()) return fail("validate", found.status());
      sweep_table = *found;
    }
    auto loaded = load_layout_sweeps(sweep_table);
    if (!loaded.is_ok()) return fail("validate", loaded.status());
    std::vector<SweepPrediction> predicted;
    for (const LayoutSweep& sw : *loaded) predicted.push_back(predict_sweep(sw));
    std::printf("%s", format_sweeps_markdown(predicted).c_str());
    int bad = 0;
    for (const SweepPrediction& p : predicted)
      if (!p.holds()) {
        ++bad;
        std::fprintf(stderr, "loom validate: sweep %s %s\n", p.sweep.id.c_str(),
                     !p.error.empty() ? ("not predicted: " + p.error).c_str() : "outside its pins");
      }
    return bad ? 1 : 0;
  }
  if (table.empty()) {
    auto found = find_resource("validation/published_runs.json");
    if (!found.is_ok()) return fail("validate", found.status());
    table = *found;
  }
  auto runs = load_published_runs(table);
  if (!runs.is_ok()) return fail("validate", runs.status());
  std::set<std::string> ids;
  std::stringstream ss(only);
  for (std::string id; std::getline(ss, id, ',');)
    if (!id.empty()) ids.insert(id);
  std::vector<RunPrediction> rows;
  for (const PublishedRun& r : *runs)
    if (ids.empty() || ids.count(r.id)) rows.push_back(predict_run(r));
  if (rows.empty()) return fail("validate", invalid_argument("--only " + only + ": no such row in " + table));
  std::printf("%s", format_validation_markdown(rows).c_str());
  if (breakdown) std::printf("\n%s", format_breakdown_markdown(rows).c_str());
  int bad = 0;
  for (const RunPrediction& p : rows)
    if (!p.holds()) {
      ++bad;
      std::fprintf(stderr, "loom validate: %s %s\n", p.run.id.c_str(),
                   !p.ok     ? ("not predicted: " + p.error).c_str()
                   : !p.fits ? "predicted not to fit, but it ran"
                             : "outside its pinned tolerance");
    }
  return bad ? 1 : 0;
}

}  // namespace loom::cli
