# Sourced (POSIX sh) by the bundle's launchers: finds the GPU libraries a
# Loom bundle does not carry on this node and puts their folders first on
# LD_LIBRARY_PATH. Looked for, in order:
#   $LOOM_CUDA_LIBS (a colon-separated list of folders, when set),
#   $CUDA_HOME, $CUDA_PATH, /usr/local/cuda (lib64/, lib/, targets/*/lib/),
#   the NVIDIA wheels of a Python environment (nvidia/*/lib, nvidia/cu13/lib:
#   $LOOM_PYTHON, then python3 on PATH, $VIRTUAL_ENV, $CONDA_PREFIX),
#   the driver's folders (/usr/local/nvidia/lib64, /usr/lib/wsl/lib, ...),
#   then the system's (ldconfig).
# Sets LOOM_BUNDLE (the bundle root) and LOOM_GPU_LIB_DIRS (what was added).
: "${PATH:=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
export PATH

# libcudnn.so.9 is optional: the fused attention (LOOM_CUDA_ATTENTION=cudnn) loads it at run time.
LOOM_GPU_LIBS="libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcuda.so.1 libcudnn.so.9"

# Prints the Python environments' nvidia/ package folders, one per line.
loom_nvidia_wheel_roots() {
  for py in ${LOOM_PYTHON:-} python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" -c 'import nvidia; print("\n".join(list(nvidia.__path__)))' 2>/dev/null && break
  done
  for env in ${VIRTUAL_ENV:-} ${CONDA_PREFIX:-}; do
    for d in "$env"/lib/python3*/site-packages/nvidia; do [ -d "$d" ] && echo "$d"; done
  done
}

# Prints candidate library folders, best first.
loom_gpu_lib_candidates() {
  if [ -n "${LOOM_CUDA_LIBS:-}" ]; then echo "$LOOM_CUDA_LIBS" | tr ':' '\n'; fi
  for root in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda; do
    for d in "$root/lib64" "$root/lib" "$root"/targets/*/lib; do [ -d "$d" ] && echo "$d"; done
  done
  loom_nvidia_wheel_roots | while IFS= read -r n; do
    for d in "$n"/*/lib "$n"/cu*/lib; do [ -d "$d" ] && echo "$d"; done
  done
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib /usr/lib64/nvidia /usr/lib/x86_64-linux-gnu/nvidia/current; do
    [ -d "$d" ] && echo "$d"
  done
  return 0
}

# Whether the system's loader already finds library $1.
loom_system_has() {
  command -v ldconfig >/dev/null 2>&1 || return 1
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 "
}

# Prints "lib<TAB>path" for every GPU library, the path empty when missing.
loom_find_gpu_libs() {
  cands=$(loom_gpu_lib_candidates)
  for lib in $LOOM_GPU_LIBS; do
    found=""
    for d in $cands; do
      if [ -e "$d/$lib" ]; then found="$d/$lib"; break; fi
    done
    if [ -z "$found" ] && loom_system_has "$lib"; then
      found=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
    fi
    printf '%s\t%s\n' "$lib" "$found"
  done
}

LOOM_GPU_LIB_DIRS=""
for entry in $(loom_find_gpu_libs | awk -F '\t' '$2 != "" { print $2 }'); do
  d=$(dirname "$entry")
  case ":$LOOM_GPU_LIB_DIRS:" in *":$d:"*) ;; *) LOOM_GPU_LIB_DIRS="${LOOM_GPU_LIB_DIRS:+$LOOM_GPU_LIB_DIRS:}$d" ;; esac
done
export LOOM_BUNDLE LOOM_GPU_LIB_DIRS
if [ -n "$LOOM_GPU_LIB_DIRS" ]; then
  LD_LIBRARY_PATH="$LOOM_GPU_LIB_DIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
fi
