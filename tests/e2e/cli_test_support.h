// The `loom` binary run as a user would, for the end-to-end tests
// (cli_test.cc, cli_regress_test.cc): a scratch directory per test, the
// command's exit code, stdout and stderr, and small file helpers.
// LOOM_BINARY and LOOM_SOURCE_DIR come from CMake.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace loom_cli_test {

namespace fs = std::filesystem;
using nlohmann::json;

struct Outcome {
  int exit_code = -1;  // -N: killed by signal N
  std::string out;     // stdout
  std::string err;     // stderr
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// Everything from the first line that starts with '{' to the end: a JSON
// document printed after the human-readable tables (nested lines are indented).
inline std::string json_tail(const std::string& out) {
  if (out.rfind('{', 0) == 0) return out;
  size_t at = out.find("\n{");
  return at == std::string::npos ? std::string() : out.substr(at + 1);
}

class LoomCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "loom_e2e_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `loom <args>` in the temp dir; stdout and stderr kept apart.
  Outcome loom(const std::vector<std::string>& args) const {
    std::string cmd = "cd " + shell_quote(dir_.string()) + " && " + shell_quote(LOOM_BINARY);
    for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
    const fs::path err_path = dir_ / "stderr.txt";
    cmd.append(" 2>").append(shell_quote(err_path.string()));
    Outcome r;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) {
      ADD_FAILURE() << "popen failed: " << cmd;
      return r;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
    int status = pclose(pipe);
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) r.exit_code = -WTERMSIG(status);
    r.err = read_file(err_path);
    return r;
  }

  fs::path path(const std::string& name) const { return dir_ / name; }

  // A copy of models/<name>.json under the temp dir, with `from` replaced by `to`.
  fs::path model_copy(const std::string& name, const std::string& file, const std::string& from = "",
                      const std::string& to = "") const {
    std::string text = read_file(fs::path(LOOM_SOURCE_DIR) / "models" / (name + ".json"));
    EXPECT_FALSE(text.empty()) << "models/" << name << ".json";
    if (!from.empty()) {
      size_t at = text.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) text.replace(at, from.size(), to);
    }
    fs::path p = path(file);
    write_file(p, text);
    return p;
  }

  fs::path dir_;
};

inline std::string describe(const Outcome& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 3000) +
         "\n--- stderr ---\n" + r.err.substr(0, 3000);
}

inline json parse_or_fail(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << what << " is not valid JSON:\n" << text.substr(0, 2000);
  return j;
}

}  // namespace loom_cli_test

// The tests' own namespaces see the helpers unqualified.
using namespace loom_cli_test;  // NOLINT(google-build-using-namespace): test-only header
