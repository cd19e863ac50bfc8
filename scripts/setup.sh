#!/usr/bin/env bash
# Installs what Loom needs on Debian (idempotent), then configures and builds.
# Usage: scripts/setup.sh [build-dir]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

# clang and libclang-rt-dev (libFuzzer, the sanitizer runtimes): the fuzzing
# stage of scripts/test.sh (scripts/fuzz, docs/fuzzing.md).
PKGS=(cmake ninja-build g++ pkg-config clang libclang-rt-dev
      nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
      libeigen3-dev libopenmpi-dev openmpi-bin libxxhash-dev libicu-dev patchelf
      libsentencepiece-dev zlib1g-dev libzstd-dev libcurl4-openssl-dev libssl-dev libhdf5-dev
      qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libxkbcommon-dev libgl-dev fonts-dejavu-core)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The data pipeline's remote-storage tests run a real S3-compatible server
# (moto) on loopback.
if command -v python3 >/dev/null && ! python3 -c "import moto.server, flask, boto3" 2>/dev/null; then
  echo "setup: installing moto[server] (S3-compatible test server) from PyPI"
  python3 -m pip install -q 'moto[server]' || echo "setup: moto could not be installed; its tests will skip"
fi

# Parquet input (`loom preprocess --input X.parquet`) reads with Apache Arrow's
# C++ library, which Debian 12 does not package; pyarrow's PyPI wheel ships
# its headers and shared libraries (cmake/LoomArrow.cmake). Without it Loom
# builds without Parquet input.
if command -v python3 >/dev/null && ! python3 -c "import pyarrow" 2>/dev/null; then
  echo "setup: installing pyarrow (Apache Arrow C++ headers and libraries, for Parquet input) from PyPI"
  python3 -m pip install -q 'pyarrow>=15' || echo "setup: pyarrow could not be installed; Parquet input is disabled"
fi

# The CUDA backend's fused attention compiles against the cudnn-frontend
# headers (cmake/LoomCudnn.cmake), which NVIDIA ships on PyPI; cuDNN itself is
# loaded at run time. Without them the CUDA attention keeps its cuBLAS path.
if command -v nvcc >/dev/null && command -v python3 >/dev/null &&
   ! python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()['platlib'] + '/include/cudnn_frontend.h'))" 2>/dev/null; then
  echo "setup: installing nvidia-cudnn-frontend (cuDNN graph API headers, for the fused attention) from PyPI"
  python3 -m pip install -q 'nvidia-cudnn-frontend>=1.10' || echo "setup: nvidia-cudnn-frontend could not be installed; the CUDA attention stays on cuBLAS"
fi

JOBS=$(nproc 2>/dev/null || echo 2)
# The GUI builds when Qt6 is present (it is, after the packages above);
# -DLOOM_BUILD_GUI=OFF skips it.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
