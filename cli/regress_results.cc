// The regression results file (docs/formats/regress.md) and the machine it
// was measured on.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "cli/regress.h"
#include "cli/regress_json.h"
#include "core/json_util.h"

namespace loom::cli {

namespace {

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace

Result<std::map<std::string, double>> parse_tolerances(const Json& obj, const std::string& where) {
  std::map<std::string, double> t;
  if (!obj.contains("tolerances")) return t;
  if (!obj["tolerances"].is_object())
    return invalid_argument(where + ".tolerances must be an object {\"step_time\": 0.2, ...} (fractions)");
  for (const auto& [k, v] : obj["tolerances"].items()) {
    if (!v.is_number() || v.get<double>() <= 0)
      return invalid_argument(where + ".tolerances." + k + " must be a positive fraction (0.2 = 20%)");
    t[k] = v.get<double>();
  }
  return t;
}

MachineInfo this_machine() {
  MachineInfo m;
  char host[256] = "unknown";
  ::gethostname(host, sizeof host);
  m.hostname = host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown cpu";
  m.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  m.memory_gib = double(pages) * double(page) / double(1ull << 30);
  // Throughput baselines compare like with like: the processor, how many cores
  // and how much memory, not the host name (CI machines get a new one each run).
  m.key = slug(m.cpu_model) + "-" + std::to_string(m.cores) + "c-" + std::to_string(int(m.memory_gib + 0.5)) + "g";
  return m;
}

std::string results_to_json(const RegressResults& r) {
  OrderedJson j;
  j["schema_version"] = r.schema_version;
  j["suite"] = r.suite;
  j["suite_description"] = r.suite_description;
  j["tolerance_note"] = r.tolerance_note;
  j["throughput_margin"] = r.throughput_margin;
  j["machine"] = {{"key", r.machine.key}, {"hostname", r.machine.hostname}, {"cpu_model", r.machine.cpu_model},
                  {"cores", r.machine.cores}, {"memory_gib", r.machine.memory_gib}};
  j["commit"] = r.commit;
  j["date"] = r.date;
  j["loom_version"] = r.loom_version;
  j["launcher"] = r.launcher;
  OrderedJson cases = OrderedJson::array();
  for (const CaseResult& c : r.cases) {
    OrderedJson cj;
    cj["name"] = c.name;
    cj["ranks"] = c.ranks;
    cj["model"] = c.model;
    cj["layout"] = c.layout;
    if (!c.error.empty()) cj["error"] = c.error;
    if (c.machine_speed > 0) cj["machine_speed"] = c.machine_speed;
    if (c.calibration_speed > 0) cj["calibration_speed"] = c.calibration_speed;
    cj["tolerances"] = OrderedJson::object();
    for (const auto& [k, v] : c.tolerances) cj["tolerances"][k] = v;
    cj["figures"] = OrderedJson::object();
    for (const auto& [k, f] : c.figures)
      cj["figures"][k] = {{"predicted", f.predicted}, {"measured", f.measured}, {"rel_error", f.rel_error()}};
    cases.push_back(cj);
  }
  j["cases"] = cases;
  return j.dump(2) + "\n";
}

Result<RegressResults> parse_results(const std::string& text, const std::string& what) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  if (!j.is_object()) return parse_error(what + ": not a JSON object; give a file written by `loom regress run`");
  RegressResults r;
  LOOM_ASSIGN_OR_RETURN(int64_t v, json_int(j, "schema_version", what));
  if (v != 1)
    return invalid_argument(what + ": schema_version " + std::to_string(v) + " is not 1; re-run `loom regress run`");
  LOOM_ASSIGN_OR_RETURN(r.suite, json_string(j, "suite", what));
  LOOM_ASSIGN_OR_RETURN(r.suite_description, json_string_or(j, "suite_description", "", what));
  LOOM_ASSIGN_OR_RETURN(r.tolerance_note, json_string_or(j, "tolerance_note", "", what));
  LOOM_ASSIGN_OR_RETURN(r.throughput_margin, json_number_or(j, "throughput_margin", 0.25, what));
  if (!j.contains("machine") || !j["machine"].is_object())
    return invalid_argument(what + ": machine is missing; re-run `loom regress run`");
  const Json& m = j["machine"];
  LOOM_ASSIGN_OR_RETURN(r.machine.key, json_string(m, "key", what + ": machine"));
  LOOM_ASSIGN_OR_RETURN(r.machine.hostname, json_string_or(m, "hostname", "", what + ": machine"));
  LOOM_ASSIGN_OR_RETURN(r.machine.cpu_model, json_string_or(m, "cpu_model", "", what + ": machine"));
  LOOM_ASSIGN_OR_RETURN(int64_t cores, json_int_or(m, "cores", 0, what + ": machine"));
  if (cores < 0 || cores > (int64_t{1} << 20))
    return invalid_argument(what + ": machine.cores = " + std::to_string(cores) + " is out of range");
  r.machine.cores = int(cores);
  LOOM_ASSIGN_OR_RETURN(r.machine.memory_gib, json_number_or(m, "memory_gib", 0, what + ": machine"));
  LOOM_ASSIGN_OR_RETURN(r.commit, json_string_or(j, "commit", "unknown", what));
  LOOM_ASSIGN_OR_RETURN(r.date, json_string_or(j, "date", "", what));
  LOOM_ASSIGN_OR_RETURN(r.loom_version, json_string_or(j, "loom_version", "", what));
  LOOM_ASSIGN_OR_RETURN(r.launcher, json_string_or(j, "launcher", "", what));
  if (!j.contains("cases") || !j["cases"].is_array() || j["cases"].empty())
    return invalid_argument(what + ": cases is missing or empty; re-run `loom regress run`");
  for (size_t i = 0; i < j["cases"].size(); ++i) {
    const Json& cj = j["cases"][i];
    const std::string w = what + ": cases[" + std::to_string(i) + "]";
    if (!cj.is_object()) return invalid_argument(w + " must be an object");
    CaseResult c;
    LOOM_ASSIGN_OR_RETURN(c.name, json_string(cj, "name", w));
    LOOM_ASSIGN_OR_RETURN(int64_t ranks, json_positive_int(cj, "ranks", w));
    if (ranks > (int64_t{1} << 24))
      return invalid_argument(w + ".ranks = " + std::to_string(ranks) + " is out of range (at most 2^24)");
    c.ranks = int(ranks);
    LOOM_ASSIGN_OR_RETURN(c.model, json_string_or(cj, "model", "", w));
    LOOM_ASSIGN_OR_RETURN(c.layout, json_string_or(cj, "layout", "", w));
    LOOM_ASSIGN_OR_RETURN(c.error, json_string_or(cj, "error", "", w));
    LOOM_ASSIGN_OR_RETURN(c.tolerances, parse_tolerances(cj, w));
    if (cj.contains("machine_speed")) {
      LOOM_ASSIGN_OR_RETURN(c.machine_speed, json_positive(cj, "machine_speed", w));
    }
    if (cj.contains("calibration_speed")) {
      LOOM_ASSIGN_OR_RETURN(c.calibration_speed, json_positive(cj, "calibration_speed", w));
    }
    if (cj.contains("figures")) {
      if (!cj["figures"].is_object()) return invalid_argument(w + ".figures must be an object");
      for (const auto& [k, v] : cj["figures"].items()) {
        const std::string wf = w + ".figures." + k;
        Figure f;
        LOOM_ASSIGN_OR_RETURN(f.predicted, json_number(v, "predicted", wf));
        LOOM_ASSIGN_OR_RETURN(f.measured, json_number(v, "measured", wf));
        c.figures[k] = f;
      }
    }
    if (c.error.empty() && !c.figures.count("step_time"))
      return invalid_argument(w + ": no step_time figure and no error; the file is incomplete, re-run `loom regress run`");
    r.cases.push_back(std::move(c));
  }
  return r;
}

}  // namespace loom::cli
