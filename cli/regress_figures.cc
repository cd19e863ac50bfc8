// A regression case's figures (cli/regress.h): the comparison rows by id.
#include "cli/regress.h"
#include "core/compare.h"

namespace loom::cli {

double Figure::rel_error() const { return relative_error(predicted, measured); }

Result<std::map<std::string, Figure>> case_figures(const Plan& plan, const RunRecord& rec) {
  LOOM_ASSIGN_OR_RETURN(std::vector<ComparisonRow> rows, compare_rows(plan, rec));
  std::map<std::string, Figure> f;
  for (const ComparisonRow& r : rows) f[r.id] = {r.predicted, r.measured};
  return f;
}

}  // namespace loom::cli
