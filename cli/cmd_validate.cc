// loom validate: predict every published run of the validation table and
// compare (sim/validation.h). Exit 1 when a pinned row leaves its tolerance,
// is predicted not to fit, or cannot be predicted.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "core/resources.h"
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
               "communication, bubble, optimizer) as shares of the step");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
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
