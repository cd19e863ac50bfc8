#!/usr/bin/env bash
# Builds (if needed) and runs every test: `scripts/test.sh [build-dir]`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
[ -f "$BUILD_DIR/CMakeCache.txt" ] || scripts/setup.sh "$BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$(nproc 2>/dev/null || echo 2)"
cd "$BUILD_DIR"
# Tests run two at a time on small machines: idle OpenMP threads must not spin.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
