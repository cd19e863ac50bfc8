// The `loom` subcommands. Each parses its own arguments and returns the exit
// code: 0 success, 2 bad input (a message names the problem and the fix),
// 3 nothing fits in memory (loom plan), 1 any other failure.
#pragma once

#include <string>

#include "core/status.h"

namespace loom::cli {

int cmd_plan(int argc, char** argv);
int cmd_execute(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_preprocess(int argc, char** argv);
int cmd_tokenizer(int argc, char** argv);
int cmd_ckpt(int argc, char** argv);
int cmd_calibrate(int argc, char** argv);
int cmd_regress(int argc, char** argv);
int cmd_validate(int argc, char** argv);

// Prints "loom <cmd>: <message>" to stderr and maps the Status to an exit code.
int fail(const std::string& cmd, const Status& status);
// The exit code fail() returns for `status` (2 bad input, 1 otherwise), without printing.
int exit_code(const Status& status);

}  // namespace loom::cli
