// loom: plan and run distributed LLM training.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "core/output_file.h"
#include "core/plan.h"
#include "exec/runtime/devices.h"

namespace loom::cli {

int exit_code(const Status& status) { return status_exit_code(status.code()); }

int fail(const std::string& cmd, const Status& status) {
  std::fprintf(stderr, "loom %s: %s\n", cmd.c_str(), status.message().c_str());
  return exit_code(status);
}

}  // namespace loom::cli

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "loom %s — plan and run distributed LLM training\n\n"
               "usage: loom <command> [options]\n\n"
               "commands:\n"
               "  plan      search layouts (or evaluate one) for a model on a cluster; write a plan\n"
               "  execute   train with a plan's layout (mpirun -np N loom execute plan.json)\n"
               "  compare   predicted (plan) vs measured (run record); --ops: two traces op by op\n"
               "  preprocess  tokenize JSONL (plain, .gz, .zst) into Megatron .bin/.idx shards\n"
               "  tokenizer   train a SentencePiece model / encode text\n"
               "  ckpt      inspect / verify / export (safetensors) a checkpoint\n"
               "  calibrate measure this machine into a hardware profile (mpirun -np N loom calibrate)\n"
               "  regress   run a predicted-vs-measured suite (regress run SUITE) and check it (regress check)\n"
               "  validate  predict the published training runs of validation/published_runs.json and compare\n"
               "\n"
               "`loom <command> --help` describes each command's options.\n",
               loom::loom_version());
}

}  // namespace

int main(int argc, char** argv) {
  // Past `ulimit -f` a write fails with EFBIG (and every writer says so)
  // instead of SIGXFSZ killing the process mid-file without a word.
  loom::ignore_file_size_signal();
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("loom %s\n", loom::loom_version());
    std::printf("%s", loom::exec::accelerator_report().c_str());
    return 0;
  }
  if (cmd == "plan") return loom::cli::cmd_plan(argc - 1, argv + 1);
  if (cmd == "execute") return loom::cli::cmd_execute(argc - 1, argv + 1);
  if (cmd == "compare") return loom::cli::cmd_compare(argc - 1, argv + 1);
  if (cmd == "preprocess") return loom::cli::cmd_preprocess(argc - 1, argv + 1);
  if (cmd == "tokenizer") return loom::cli::cmd_tokenizer(argc - 1, argv + 1);
  if (cmd == "ckpt") return loom::cli::cmd_ckpt(argc - 1, argv + 1);
  if (cmd == "calibrate") return loom::cli::cmd_calibrate(argc - 1, argv + 1);
  if (cmd == "regress") return loom::cli::cmd_regress(argc - 1, argv + 1);
  if (cmd == "validate") return loom::cli::cmd_validate(argc - 1, argv + 1);
  std::fprintf(stderr, "loom: unknown command '%s'; run `loom --help` for the list\n", cmd.c_str());
  return 2;
}
