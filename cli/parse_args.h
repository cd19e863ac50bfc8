// Argument parsing shared by the `loom` subcommands (CLI11).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

namespace loom::cli {

// Parses argv into `app`. Returns -1 to go on, else the exit code: 0 after
// printing --help, 2 after naming the bad argument and pointing at --help.
inline int parse_args(CLI::App& app, const char* cmd, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "loom %s: %s; run `loom %s --help`\n", cmd, e.what(), cmd);
    return 2;
  }
  return -1;
}

}  // namespace loom::cli
