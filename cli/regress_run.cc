// loom regress run SUITE: calibrate, plan, execute and record every case.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/machine_speed.h"
#include "cli/parse_args.h"
#include "core/output_file.h"
#include "cli/regress.h"
#include "cli/regress_json.h"
#include "core/json_util.h"
#include "core/plan.h"
#include "core/run_record.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

Result<Suite> load_suite(const std::string& path_or_name) {
  LOOM_ASSIGN_OR_RETURN(std::string path, find_description_file(path_or_name, "bench/suites"));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_suite(text, "suite " + path);
}

// Runs argv with stdout and stderr appended to `log`; kills its process group
// after `timeout_s`. Returns the exit status (128 + signal when killed).
int run_logged(const std::vector<std::string>& argv, const std::string& log, double timeout_s) {
  pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    ::setpgid(0, 0);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::perror(args[0]);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return 127;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

std::string tail_of(const std::string& path, size_t max_chars = 600) {
  auto text = read_text_file(path);
  if (!text.is_ok()) return "";
  std::string t = *text;
  if (t.size() > max_chars) t = "..." + t.substr(t.size() - max_chars);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::vector<std::string> launcher_argv(const std::string& launcher, int n) {
  std::vector<std::string> out;
  std::istringstream in(launcher);
  bool placed = false;
  for (std::string w; in >> w;) {
    if (auto p = w.find("{n}"); p != std::string::npos) {
      w.replace(p, 3, std::to_string(n));
      placed = true;
    }
    out.push_back(w);
  }
  if (!placed) {
    out.push_back("-np");
    out.push_back(std::to_string(n));
  }
  return out;
}

std::string default_launcher() {
  std::string l = "mpirun --oversubscribe";
  if (::geteuid() == 0) l += " --allow-run-as-root";
  return l + " -np {n}";
}

std::string git_commit() {
  if (const char* c = std::getenv("LOOM_COMMIT"); c && *c) return c;
  std::string cmd = std::string("git -C '") + LOOM_SOURCE_DIR + "' rev-parse --short=12 HEAD 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (out.empty()) return "unknown";
  std::string dirty = std::string("git -C '") + LOOM_SOURCE_DIR + "' status --porcelain --untracked-files=no 2>/dev/null";
  if (FILE* p = ::popen(dirty.c_str(), "r")) {
    char buf[8];
    if (std::fgets(buf, sizeof buf, p)) out += "+dirty";
    ::pclose(p);
  }
  return out;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

}  // namespace

void print_results_table(const RegressResults& r);  // regress_check.cc

namespace {

// What every command of a suite run shares.
struct RunEnv {
  std::string self;      // this loom binary
  std::string launcher;  // MPI launcher template
  std::string threads;   // compute threads per rank
  std::string work;      // plans, run records, logs
  double timeout_s = 900;
  double slowdown = 1.0;
  int64_t steps = 16;
};

// --cases: the names asked for, each of which the suite must have.
Result<std::set<std::string>> wanted_cases(const std::string& only, const Suite& suite) {
  std::set<std::string> wanted;
  for (std::istringstream in(only); in.good();) {
    std::string n;
    std::getline(in, n, ',');
    if (!n.empty()) wanted.insert(n);
  }
  for (const std::string& n : wanted) {
    bool known = std::any_of(suite.cases.begin(), suite.cases.end(), [&](const SuiteCase& c) { return c.name == n; });
    if (!known) return invalid_argument("--cases: no case '" + n + "' in suite " + suite.name);
  }
  return wanted;
}

// Each world size is calibrated as itself (ranks x threads running at once),
// just before its first case runs, so that calibration and measurement are
// close in time (a shared machine's speed drifts over minutes); a profile
// already in `profiles` is reused.
Result<std::string> calibrated_profile(const RunEnv& env, int n, const std::string& profiles) {
  std::error_code ec;
  std::string prof = profiles + "/cal" + std::to_string(n) + ".json";
  if (fs::exists(prof)) {
    std::printf("regress: reusing %s\n", prof.c_str());
    return prof;
  }
  std::printf("regress: calibrating %d rank(s) -> %s\n", n, prof.c_str());
  std::fflush(stdout);
  auto cmd = launcher_argv(env.launcher, n);
  for (std::string a : {env.self, std::string("calibrate"), std::string("--threads"), env.threads,
                        std::string("--out"), prof})
    cmd.push_back(a);
  std::string log = env.work + "/calibrate" + std::to_string(n) + ".log";
  fs::remove(log, ec);
  if (int rc = run_logged(cmd, log, env.timeout_s); rc != 0)
    return internal_error("`" + join(cmd) + "` exited " + std::to_string(rc) + ":\n" + tail_of(log));
  if (auto speed = reference_speed(0.3); speed.is_ok())
    (void)write_text_file(prof + ".speed", std::to_string(*speed) + "\n");
  return prof;
}

// The machine's speed when `profile` was calibrated: timed just after the
// calibration and kept beside it (PROFILE.speed), so a reused profile keeps
// its own; 0 when a reused profile has none.
double calibrated_speed(const std::string& profile) {
  const std::string side = profile + ".speed";
  if (auto text = read_text_file(side); text.is_ok()) {
    try {
      return std::stod(*text);
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

// One case: plan it on its calibrated profile, execute it, read the figures;
// a failure is recorded in the result, not returned.
CaseResult run_case(const RunEnv& env, const SuiteCase& c, const std::string& profile) {
  CaseResult cr;
  cr.name = c.name;
  cr.ranks = c.ranks;
  cr.layout = c.layout;
  cr.model = c.model + (c.scale.empty() ? "" : " (" + c.scale + ")");
  cr.tolerances = c.tolerances;
  std::printf("regress: %-20s %d rank(s) %s\n", c.name.c_str(), c.ranks, c.layout.c_str());
  std::fflush(stdout);
  const std::string plan_path = env.work + "/" + c.name + ".plan.json",
                    rec_path = env.work + "/" + c.name + ".run.json", log = env.work + "/" + c.name + ".log";
  std::error_code ec;
  fs::remove(log, ec);
  fs::remove(rec_path, ec);
  std::vector<std::string> plan_cmd = {env.self, "plan", "--model", c.model, "--hw", profile, "--gpus",
                                       std::to_string(c.ranks), "--global-batch", std::to_string(c.global_batch),
                                       "--seq", std::to_string(c.seq), "--precision", c.precision, "--layout",
                                       c.layout, "--steps", std::to_string(env.steps), "--grad-reduce",
                                       c.grad_reduce, "--out", plan_path};
  if (!c.scale.empty()) {
    plan_cmd.push_back("--scale");
    plan_cmd.push_back(c.scale);
  }
  if (int rc = run_logged(plan_cmd, log, env.timeout_s); rc != 0) {
    cr.error = "loom plan exited " + std::to_string(rc) + ": " + tail_of(log);
    return cr;
  }
  if (c.moe_load_imbalance == "measured") {
    // The router's load imbalance on this data, measured by a short probe
    // run of the same plan (routing, not timing: the step time is still
    // predicted from the profile), then the plan made again with it.
    const std::string probe = env.work + "/" + c.name + ".probe.jsonl";
    fs::remove(probe, ec);
    auto pcmd = launcher_argv(env.launcher, c.ranks);
    for (std::string a : {env.self, std::string("execute"), plan_path, std::string("--threads"), env.threads,
                          std::string("--quiet"), std::string("--steps"), std::string("4"), std::string("--metrics"),
                          probe})
      pcmd.push_back(a);
    if (int rc = run_logged(pcmd, log, env.timeout_s); rc != 0) {
      cr.error = "the probe run (loom execute) exited " + std::to_string(rc) + ": " + tail_of(log);
      return cr;
    }
    plan_cmd.push_back("--moe-load-imbalance-from");
    plan_cmd.push_back(probe);
    if (int rc = run_logged(plan_cmd, log, env.timeout_s); rc != 0) {
      cr.error = "loom plan exited " + std::to_string(rc) + ": " + tail_of(log);
      return cr;
    }
  }
  auto cmd = launcher_argv(env.launcher, c.ranks);
  for (std::string a : {env.self, std::string("execute"), plan_path, std::string("--threads"), env.threads,
                        std::string("--quiet"), std::string("--record"), rec_path})
    cmd.push_back(a);
  if (env.slowdown != 1.0) {
    cmd.push_back("--test-slowdown");
    cmd.push_back(std::to_string(env.slowdown));
  }
  if (int rc = run_logged(cmd, log, env.timeout_s); rc != 0) {
    cr.error = "loom execute exited " + std::to_string(rc) + (rc == 124 ? " (timed out)" : "") + ": " + tail_of(log);
    return cr;
  }
  auto plan = load_plan(plan_path);
  auto rec = load_run_record(rec_path);
  if (!plan.is_ok()) cr.error = plan.status().message();
  else if (!rec.is_ok()) cr.error = rec.status().message();
  else if (auto figures = case_figures(*plan, *rec); !figures.is_ok()) cr.error = figures.status().message();
  else cr.figures = std::move(figures).value();
  return cr;
}

}  // namespace

int regress_run(int argc, char** argv) {
  CLI::App app{"Run a predicted-vs-measured suite: calibrate, plan and execute every case, record the figures.",
               "loom regress run"};
  std::string suite_arg, out = "regress-results.json", profiles, only;
  RunEnv env;
  env.launcher = default_launcher();
  int64_t steps = 0;
  app.add_option("suite", suite_arg, "suite file, or a name in bench/suites/ (ci, bench)")->required();
  app.add_option("--out", out, "results file")->capture_default_str();
  app.add_option("--profiles", profiles,
                 "directory of calibrated profiles cal<N>.json to reuse (missing ones are measured into it); "
                 "default: <out>.d/");
  app.add_option("--launcher", env.launcher, "MPI launcher; {n} is the rank count (else -np N is appended)")
      ->capture_default_str();
  app.add_option("--cases", only, "comma-separated case names to run (default: all)");
  bool each = false;
  app.add_flag("--calibrate-each-case", each,
               "calibrate just before every case (into <profiles>/<case>/) instead of once per world size: "
               "a shared machine whose speed drifts over minutes then meets each case as it was measured");
  app.add_option("--steps", steps, "override the suite's steps per case");
  app.add_option("--timeout", env.timeout_s, "seconds per command before it is killed")->capture_default_str();
  app.add_option("--test-slowdown", env.slowdown, "test only: passed to loom execute to slow every step by this factor")
      ->group("");
  if (int rc = parse_args(app, "regress run", argc, argv); rc >= 0) return rc;
  auto suite = load_suite(suite_arg);
  if (!suite.is_ok()) return fail("regress run", suite.status());
  if (steps > 0) suite->steps = std::max<int64_t>(4, steps);
  auto wanted = wanted_cases(only, *suite);
  if (!wanted.is_ok()) return fail("regress run", wanted.status());
  // The results file is checked before the suite runs (core/output_file.h).
  if (Status s = check_output_path(out, "--out", false); !s.is_ok()) return fail("regress run", s);
  env.work = out + ".d";
  if (profiles.empty()) profiles = env.work;
  std::error_code ec;
  fs::create_directories(env.work, ec);
  fs::create_directories(profiles, ec);
  if (ec) return fail("regress run", io_error("cannot create " + profiles + ": " + ec.message()));
  env.self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) env.self = argv[0];
  env.threads = std::to_string(suite->threads);
  env.steps = suite->steps;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  ::setenv("OMP_NUM_THREADS", env.threads.c_str(), 1);

  RegressResults res;
  res.suite = suite->name;
  res.suite_description = suite->description;
  res.tolerance_note = suite->tolerance_note;
  res.throughput_margin = suite->throughput_margin;
  res.machine = this_machine();
  res.commit = git_commit();
  res.date = utc_now();
  res.loom_version = loom_version();
  res.launcher = env.launcher;
  auto chosen = [&](const SuiteCase& c) { return wanted->empty() || wanted->count(c.name); };
  std::map<int, std::string> profile_of;
  std::map<int, double> calibration_speed;
  bool all_ran = true;
  for (const SuiteCase& c : suite->cases) {
    if (!chosen(c)) continue;
    if (each || !profile_of.count(c.ranks)) {
      const std::string dir = each ? profiles + "/" + c.name : profiles;
      if (each) fs::create_directories(dir, ec);
      auto prof = calibrated_profile(env, c.ranks, dir);
      if (!prof.is_ok()) return fail("regress run", prof.status());
      profile_of[c.ranks] = *prof;
      calibration_speed[c.ranks] = calibrated_speed(*prof);
    }
    // The machine's speed just before and just after the case (for the
    // throughput check against the baseline; cli/machine_speed.h).
    auto before = reference_speed(0.3);
    CaseResult cr = run_case(env, c, profile_of[c.ranks]);
    auto after = reference_speed(0.3);
    if (before.is_ok() && after.is_ok()) cr.machine_speed = (*before + *after) / 2;
    cr.calibration_speed = calibration_speed[c.ranks];
    if (!cr.error.empty()) {
      all_ran = false;
      std::fprintf(stderr, "regress: case %s failed: %s\n", c.name.c_str(), cr.error.c_str());
    }
    res.cases.push_back(std::move(cr));
  }
  if (Status s = write_text_file(out, results_to_json(res)); !s.is_ok()) return fail("regress run", s);
  print_results_table(res);
  std::printf("results written to %s (plans, run records and logs in %s/); check them with `loom regress check %s`\n",
              out.c_str(), env.work.c_str(), out.c_str());
  return all_ran ? 0 : 1;
}

int cmd_regress(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "run") return regress_run(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "check") return regress_check(argc - 1, argv + 1);
  bool help = argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
  std::fprintf(help ? stdout : stderr,
               "usage: loom regress run SUITE [--out results.json] [--profiles DIR] [--launcher CMD] [--cases a,b]\n"
               "       loom regress check results.json [--baselines DIR] [--update-baseline] [--plot out.svg]\n"
               "SUITE is a file or a name in bench/suites/ (ci, bench); `loom regress run --help` has the details.\n");
  return help ? 0 : 2;
}

}  // namespace loom::cli
