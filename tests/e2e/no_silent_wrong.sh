#!/usr/bin/env bash
# Issue #14: no silent wrong results, no crashes, no clobbered files. One mode
# per finding, each run as its own ctest (single-process runs, no MPI needed):
#   resume_model  a checkpoint of one model is refused by a plan of another
#                 (fewer/more layers, narrower, another ffn or vocab), exit 2,
#                 "checkpoint is for a different model" naming the fields;
#   jsonl_data    --data corpus.jsonl / .jsonl.gz / .jsonl.zst (and a .bin) is
#                 refused and points to `loom preprocess`, exit 2;
#   compare_model `loom compare` of a run made with --scale against the
#                 unscaled plan is refused naming both models, exit 2;
#   outputs       --out through a symlink writes the target (the link stays),
#                 a FIFO / a directory is refused, `-` streams to stdout,
#                 `ckpt export --out` inside the checkpoint is refused;
#   ulimit        `ulimit -f` during a checkpoint: a message naming the limit,
#                 exit != 0, no step_*.tmp left;
#   early_paths   unwritable --record/--trace/--ckpt-dir/--profile-ops-json
#                 are refused before the first step;
#   data_errors   a corrupt .idx does not suggest a flag that does not exist;
#                 preprocess writes no empty shards; an empty corpus is named.
# usage: no_silent_wrong.sh MODE LOOM
set -u
mode=$1 loom=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOOM_LAUNCH=single
fail() { echo "FAIL: $*"; exit 1; }
plan() {  # plan NAME SCALE [extra]
  local name=$1 scale=$2
  shift 2
  "$loom" plan --model llama-3-8b --scale "$scale" --hw cpu-local --gpus 1 --global-batch 4 --seq 32 \
    --layout dp=1 --steps 4 --lr 2e-3 --out "$tmp/$name.json" "$@" >/dev/null || fail "plan $name $scale"
}
# expect RC PATTERN CMD...: CMD exits with RC and its output matches PATTERN (grep -E)
expect() {
  local want=$1 pat=$2
  shift 2
  timeout 120 "$@" >"$tmp/o" 2>&1
  local rc=$?
  [ "$rc" = "$want" ] || { cat "$tmp/o"; fail "exit $rc (expected $want): $*"; }
  grep -qE -- "$pat" "$tmp/o" || { cat "$tmp/o"; fail "no '$pat' in the output of: $*"; }
}
base=layers=5,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=320

case "$mode" in
resume_model)
  plan a "$base"
  "$loom" execute "$tmp/a.json" --threads 1 --quiet --ckpt-dir "$tmp/ck" --stop-after 2 --sync-save >"$tmp/o" 2>&1 ||
    { cat "$tmp/o"; fail "first run"; }
  plan fewer layers=3,hidden=32,heads=4,kv_heads=2,ffn=64,vocab=320
  expect 2 "checkpoint is for a different model.*layers" \
    "$loom" execute "$tmp/fewer.json" --threads 1 --quiet --resume "$tmp/ck/step_000002"
  grep -q "hidden" "$tmp/o" || { cat "$tmp/o"; fail "the message does not name hidden"; }
  plan more layers=6,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=320
  expect 2 "checkpoint is for a different model" "$loom" execute "$tmp/more.json" --threads 1 --quiet --resume "$tmp/ck/step_000002"
  grep -q "rectangle" "$tmp/o" && { cat "$tmp/o"; fail "a larger model is reported as a read rectangle"; }
  plan wider layers=5,hidden=128,heads=4,kv_heads=2,ffn=128,vocab=320
  expect 2 "checkpoint is for a different model.*hidden" "$loom" execute "$tmp/wider.json" --quiet --resume "$tmp/ck/step_000002"
  plan ffn layers=5,hidden=64,heads=4,kv_heads=2,ffn=96,vocab=320
  expect 2 "checkpoint is for a different model.*ffn" "$loom" execute "$tmp/ffn.json" --quiet --resume "$tmp/ck/step_000002"
  plan vocab layers=5,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=384
  expect 2 "checkpoint is for a different model.*vocab" "$loom" execute "$tmp/vocab.json" --quiet --resume "$tmp/ck/step_000002"
  # The same model under another layout still resumes (resharding).
  "$loom" plan --model llama-3-8b --scale "$base" --hw cpu-local --gpus 1 --global-batch 4 --seq 32 \
    --layout dp=1,micro=2 --steps 4 --lr 2e-3 --out "$tmp/same.json" >/dev/null || fail "plan same"
  expect 0 "resumed from" "$loom" execute "$tmp/same.json" --threads 1 --quiet --resume "$tmp/ck/step_000002"
  ;;
jsonl_data)
  plan a "$base"
  python3 - "$tmp" <<'PY'
import gzip, json, sys
t = sys.argv[1]
docs = "".join(json.dumps({"text": "To be, or not to be, that is the question %d." % i}) + "\n" for i in range(200))
open(t + "/corpus.jsonl", "w").write(docs)
gzip.open(t + "/corpus.jsonl.gz", "wt").write(docs)
# a zstd frame (magic 28 b5 2f fd) without the zstd module: a raw block
open(t + "/corpus.jsonl.zst", "wb").write(bytes([0x28, 0xb5, 0x2f, 0xfd]) + b"\x00" * 4096)
PY
  for f in corpus.jsonl corpus.jsonl.gz corpus.jsonl.zst; do
    expect 2 "loom preprocess" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/$f"
  done
  # the same bytes under another name are found by their content
  cp "$tmp/corpus.jsonl.gz" "$tmp/corpus.txt"
  expect 2 "loom preprocess" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/corpus.txt"
  "$loom" preprocess --input "$tmp/corpus.jsonl" --output "$tmp/sh" --quiet >/dev/null || fail "preprocess"
  expect 2 "PREFIX|prefix" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/sh.bin"
  expect 0 "" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/sh.manifest.json"
  ;;
compare_model)
  plan a layers=4,hidden=128,heads=4,kv_heads=2,ffn=256,vocab=256
  "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 3 --scale layers=2,hidden=64,heads=4,kv_heads=2,ffn=128 \
    --record "$tmp/r.json" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "scaled run"; }
  expect 2 "different model.*llama-3-8b-scaled" "$loom" compare "$tmp/a.json" "$tmp/r.json"
  expect 2 "different model" "$loom" compare "$tmp/a.json" "$tmp/r.json" --json
  expect 2 "different model|differ in more than the hardware" "$loom" compare "$tmp/a.json" "$tmp/r.json" --other-hardware
  # the same run without --scale compares, also against the plan made on another profile
  "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 3 --record "$tmp/r2.json" >"$tmp/o" 2>&1 ||
    { cat "$tmp/o"; fail "unscaled run"; }
  expect 0 "step_time" "$loom" compare "$tmp/a.json" "$tmp/r2.json"
  "$loom" plan --model llama-3-8b --scale layers=4,hidden=128,heads=4,kv_heads=2,ffn=256,vocab=256 --hw dgx-h100 \
    --gpus 1 --global-batch 4 --seq 32 --layout dp=1 --steps 4 --lr 2e-3 --out "$tmp/h.json" >/dev/null || fail "plan h"
  expect 0 "step_time" "$loom" compare "$tmp/h.json" "$tmp/r2.json" --other-hardware
  ;;
outputs)
  # --out through a symlink: the target gets the plan, the link stays a link
  mkdir "$tmp/real"
  echo old >"$tmp/real/target.json"
  ln -s real/target.json "$tmp/link.json"
  plan s "$base"
  "$loom" plan --model llama-3-8b --scale "$base" --hw cpu-local --gpus 1 --global-batch 4 --seq 32 --layout dp=1 \
    --out "$tmp/link.json" >/dev/null || fail "plan through a symlink"
  [ -L "$tmp/link.json" ] || fail "the symlink was replaced by a file"
  grep -q plan_hash "$tmp/real/target.json" || fail "the symlink's target was not written"
  # a FIFO is refused (and nothing blocks on it), so is a directory
  mkfifo "$tmp/fifo"
  expect 2 "not a regular file|FIFO" "$loom" plan --model llama-3-8b --scale "$base" --hw cpu-local --gpus 1 \
    --global-batch 4 --seq 32 --layout dp=1 --out "$tmp/fifo"
  [ -p "$tmp/fifo" ] || fail "the FIFO was replaced"
  expect 2 "directory" "$loom" plan --model llama-3-8b --scale "$base" --hw cpu-local --gpus 1 \
    --global-batch 4 --seq 32 --layout dp=1 --out "$tmp/real"
  # a character device: /dev/null is refused, not replaced (never /dev/full: as root it was replaced)
  expect 2 "not a regular file|device" "$loom" plan --model llama-3-8b --scale "$base" --hw cpu-local --gpus 1 \
    --global-batch 4 --seq 32 --layout dp=1 --trace /dev/null
  [ -c /dev/null ] || fail "/dev/null is no longer a device"
  # `-`: the plan on stdout
  "$loom" plan --model llama-3-8b --scale "$base" --hw cpu-local --gpus 1 --global-batch 4 --seq 32 --layout dp=1 \
    --out - >"$tmp/stdout" 2>&1 || { cat "$tmp/stdout"; fail "--out -"; }
  grep -q '"plan_hash"' "$tmp/stdout" || fail "--out - did not print the plan"
  [ -e "$tmp/-" ] || [ -e ./- ] && fail "--out - wrote a file named -"
  # ckpt export into the checkpoint it reads
  "$loom" execute "$tmp/s.json" --threads 1 --quiet --ckpt-dir "$tmp/ck" --stop-after 2 --sync-save >"$tmp/o" 2>&1 ||
    { cat "$tmp/o"; fail "checkpoint run"; }
  expect 2 "inside the checkpoint" "$loom" ckpt export "$tmp/ck" --out "$tmp/ck/step_000002/metadata.json"
  expect 2 "inside the checkpoint" "$loom" ckpt export "$tmp/ck/step_000002" --out "$tmp/ck/step_000002/x.safetensors"
  "$loom" ckpt verify "$tmp/ck" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "the checkpoint was damaged"; }
  # a llama checkpoint exported under GPT-2 names would be a wrong file
  expect 2 "is of a llama model" "$loom" ckpt export "$tmp/ck" --family gpt2 --out "$tmp/g.safetensors"
  # export through a symlink writes its target
  ln -s real/model.safetensors "$tmp/m.safetensors"
  "$loom" ckpt export "$tmp/ck" --out "$tmp/m.safetensors" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "export via link"; }
  [ -L "$tmp/m.safetensors" ] && [ -s "$tmp/real/model.safetensors" ] || fail "export replaced the symlink"
  # config.json beside the weights (Hugging Face loads the directory as is);
  # another model's config there is refused before anything is written
  python3 - "$tmp/config.json" <<'PY' || fail "config.json beside the export"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama", c
assert c["torch_dtype"] == "float32" and c["hidden_size"] > 0 and c["vocab_size"] > 0, c
PY
  mkdir -p "$tmp/other" && echo '{"model_type": "gpt2"}' >"$tmp/other/config.json"
  expect 2 "exists and is another model's config" "$loom" ckpt export "$tmp/ck" --out "$tmp/other/w.safetensors"
  [ -e "$tmp/other/w.safetensors" ] && fail "weights written beside another model's config"
  # execute: --record/--metrics through a symlink, --record -
  ln -s real/run.json "$tmp/run.json"
  expect 0 "" "$loom" execute "$tmp/s.json" --threads 1 --quiet --steps 2 --record "$tmp/run.json"
  [ -L "$tmp/run.json" ] && grep -q plan_hash "$tmp/real/run.json" || fail "--record replaced the symlink"
  expect 0 '"plan_hash"' "$loom" execute "$tmp/s.json" --threads 1 --quiet --steps 2 --record -
  expect 2 "not a regular file|FIFO" "$loom" execute "$tmp/s.json" --threads 1 --quiet --steps 2 --metrics "$tmp/fifo"
  # an output that is the plan being read
  cp "$tmp/s.json" "$tmp/s_copy.json"
  expect 2 "plan being read" "$loom" execute "$tmp/s.json" --threads 1 --quiet --steps 2 --record "$tmp/s.json"
  cmp -s "$tmp/s.json" "$tmp/s_copy.json" || fail "--record replaced the plan"
  # preprocess: the output prefix may not name a directory's files through a FIFO
  printf '{"text":"hello world"}\n{"text":"again"}\n' >"$tmp/c.jsonl"
  mkfifo "$tmp/pp.manifest.json"
  expect 2 "not a regular file|FIFO" "$loom" preprocess --input "$tmp/c.jsonl" --output "$tmp/pp" --quiet
  ;;
ulimit)
  plan a "$base"
  # the model's checkpoint files are ~1 MB; metrics and plan stay far below 200 KB
  (ulimit -f 200; exec "$loom" execute "$tmp/a.json" --threads 1 --quiet --ckpt-dir "$tmp/ck" --save-every 1) \
    >"$tmp/o" 2>&1
  rc=$?
  [ "$rc" != 0 ] || { cat "$tmp/o"; fail "exit 0 past the file size limit"; }
  [ "$rc" -lt 128 ] || { cat "$tmp/o"; fail "killed by a signal (exit $rc)"; }
  grep -q "file size limit (ulimit -f) reached writing" "$tmp/o" || { cat "$tmp/o"; fail "no message naming the limit"; }
  ls "$tmp/ck" | grep -q '\.tmp' && { ls -la "$tmp/ck"; fail "a step_*.tmp directory was left behind"; }
  # the same for a plain JSON output (SIGXFSZ must not kill loom plan)
  (ulimit -f 1; exec "$loom" plan --model llama-3-8b --hw dgx-h100 --gpus 64 --global-batch 512 --seq 4096 \
    --layout dp=8,tp=8 --trace "$tmp/t.json") >"$tmp/o" 2>&1
  rc=$?
  [ "$rc" != 0 ] && [ "$rc" -lt 128 ] || { cat "$tmp/o"; fail "plan --trace past the limit: exit $rc"; }
  grep -q "file size limit (ulimit -f) reached writing" "$tmp/o" || { cat "$tmp/o"; fail "no message (plan)"; }
  ls "$tmp" | grep -q 't.json.tmp' && fail "a temporary trace file was left behind"
  # loom preprocess: the shard past the limit
  python3 -c "
import json, sys
open(sys.argv[1], 'w').write(''.join(json.dumps({'text': 'word ' * 200 + str(i)}) + '\\n' for i in range(2000)))" "$tmp/big.jsonl"
  mkdir "$tmp/pp"
  (ulimit -f 100; exec "$loom" preprocess --input "$tmp/big.jsonl" --output "$tmp/pp/big" --quiet) >"$tmp/o" 2>&1
  rc=$?
  [ "$rc" != 0 ] && [ "$rc" -lt 128 ] || { cat "$tmp/o"; fail "preprocess past the limit: exit $rc"; }
  grep -q "file size limit (ulimit -f) reached writing" "$tmp/o" || { cat "$tmp/o"; fail "no message (preprocess)"; }
  [ -z "$(ls "$tmp/pp")" ] || { ls -la "$tmp/pp"; fail "preprocess left files behind"; }
  ;;
early_paths)
  plan a "$base"
  touch "$tmp/file"
  for opt in --record --trace --metrics --profile-ops-json; do
    expect 2 "$opt" "$loom" execute "$tmp/a.json" --threads 1 --steps 3 $opt /nonexistent-loom-dir/x.json
    grep -q "^step" "$tmp/o" && { cat "$tmp/o"; fail "$opt: trained before failing"; }
  done
  expect 2 "ckpt-dir" "$loom" execute "$tmp/a.json" --threads 1 --steps 3 --ckpt-dir "$tmp/file/ck"
  grep -q "^step" "$tmp/o" && { cat "$tmp/o"; fail "--ckpt-dir: trained before failing"; }
  ;;
data_errors)
  plan a "$base"
  python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
open(t + "/two.jsonl", "w").write(json.dumps({"text": "first document " * 40}) + "\n" + json.dumps({"text": "second one " * 40}) + "\n")
open(t + "/none.jsonl", "w").write("\n")
PY
  "$loom" preprocess --input "$tmp/two.jsonl" --output "$tmp/two" --shards 5 --quiet >"$tmp/o" 2>&1
  rc=$?
  if [ "$rc" = 0 ]; then
    python3 - "$tmp/two.manifest.json" <<'PY' || { cat "$tmp/o"; fail "empty shards written"; }
import json, sys
m = json.load(open(sys.argv[1]))
assert all(s["tokens"] > 0 for s in m["shards"]), m["shards"]
PY
    expect 0 "" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/two.manifest.json"
  else
    grep -qi "shard" "$tmp/o" || { cat "$tmp/o"; fail "preprocess refused without naming the shards"; }
  fi
  "$loom" preprocess --input "$tmp/none.jsonl" --output "$tmp/none" --quiet >"$tmp/o" 2>&1
  rc=$?
  if [ "$rc" = 0 ]; then
    expect 2 "no tokens|empty" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/none.manifest.json"
    grep -q "nan" "$tmp/o" && { cat "$tmp/o"; fail "nan in the message"; }
  else
    [ "$rc" = 2 ] && grep -qi "no documents\|empty" "$tmp/o" || { cat "$tmp/o"; fail "empty corpus: exit $rc"; }
  fi
  # a truncated .idx
  "$loom" preprocess --input "$tmp/two.jsonl" --output "$tmp/one" --quiet >/dev/null || fail "preprocess one"
  python3 -c "import sys; p=sys.argv[1]; b=open(p,'rb').read(); open(p,'wb').write(b[:-3])" "$tmp/one.idx"
  expect 2 "one.idx" "$loom" execute "$tmp/a.json" --threads 1 --quiet --steps 1 --data "$tmp/one"
  grep -q "multimodal=true" "$tmp/o" && { cat "$tmp/o"; fail "the message suggests a flag that does not exist"; }
  ;;
*) fail "unknown mode $mode" ;;
esac
echo "PASS: $mode"
