#!/usr/bin/env bash
# Builds (if needed) and runs every test: `scripts/test.sh [build-dir]`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${1:-build}
[ -f "$BUILD_DIR/CMakeCache.txt" ] || scripts/setup.sh "$BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$(nproc 2>/dev/null || echo 2)"
# Measure this machine for `--hw cpu-local` once, while it is quiet: the
# end-to-end tests plan on it, and a measurement taken while tests load the
# machine is not cached, so every later plan would measure again.
"$BUILD_DIR/cli/loom" plan --model gpt2-124m --scale layers=2,hidden=64,heads=4,vocab=256 --hw cpu-local --gpus 1 \
  --global-batch 4 --seq 64 --layout dp=1 >/dev/null || echo "test: warning: measuring --hw cpu-local failed (the tests will measure)"
cd "$BUILD_DIR"
# Tests run two at a time on small machines: idle OpenMP threads must not spin.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
cd "$ROOT"

# Issue #14, after the main tests, each stage in its own build directory:
# 1. every parser of a user file under libFuzzer + ASan + UBSan (clang),
#    LOOM_FUZZ_SECONDS (20) per harness; skipped, with a message, without clang.
if [ "${LOOM_TEST_FUZZ:-1}" != 0 ]; then
  echo "test: fuzzing the parsers of user files, ${LOOM_FUZZ_SECONDS:-20}s per harness (scripts/fuzz, build-fuzz/)"
  rc=0
  LOOM_BIN="$BUILD_DIR/cli/loom" scripts/fuzz "${LOOM_FUZZ_SECONDS:-20}" || rc=$?
  if [ "$rc" -eq 77 ]; then
    echo "test: fuzzing SKIPPED (no clang/libFuzzer)"
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
fi
# 2. the parser, plan, layout, checkpoint, data, TCP and MPI tests under
#    ASan + UBSan (g++, -DLOOM_SANITIZE=ON).
if [ "${LOOM_TEST_SANITIZE:-1}" != 0 ]; then
  echo "test: unit and MPI tests under ASan+UBSan (scripts/sanitize, build-asan/)"
  scripts/sanitize
fi
