#!/usr/bin/env bash
# loom-gui --screenshot with a bad argument prints one message and exits 2
# at once (it used to print the error and wait forever).
set -u
gui=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export QT_QPA_PLATFORM=offscreen
fails=0
for args in "--gpus 0" "--gpus -5" "--global-batch 0" "--seq 99999999999" "--precision fp4" "--gpus x"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout 30 "$gui" --screenshot "$tmp/shots" $args >"$tmp/out" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" = 2 ] && grep -q "loom-gui: --" "$tmp/out"; then
    echo "PASS: $args -> exit 2 in ${took} s: $(grep -m1 "loom-gui: --" "$tmp/out")"
  else
    echo "FAIL: $args -> exit $rc in ${took} s:"; cat "$tmp/out"; fails=$((fails + 1))
  fi
done
exit $(( fails > 0 ))
