#!/usr/bin/env bash
# Parquet ≡ JSONL at size, in bounded memory: a 210 MB corpus (documents of
# the sample text, with non-ASCII) written as one Parquet file with a single
# 210 MB row group (the worst case for memory: pyarrow's default of 1Mi rows
# per group) and as JSONL; `loom preprocess` of each must give byte-identical
# shards, and the peak resident size of the Parquet run must stay within
# 128 MiB of the program's own (its libraries, measured by `--help`) while the
# input's text is 210 MB and its tokens 840 MB. Also the sample corpus with
# the shipped SentencePiece model, from several row groups.
# Exit 77 (skipped) when pyarrow is not installed or Loom has no Parquet plugin.
# usage: parquet_large.sh LOOM SOURCE_DIR
set -u
loom=$1
src=$2
python3 -c "import pyarrow" 2>/dev/null || { echo "SKIP: pyarrow not installed (pip install pyarrow)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" "$src/data/tinyshakespeare.txt" <<'PY' || { echo "FAIL: generating the corpus"; exit 1; }
import json, random, sys
import pyarrow as pa, pyarrow.parquet as pq
out, corpus = sys.argv[1], sys.argv[2]
paras = [p for p in open(corpus, encoding="utf-8").read().split("\n\n") if p.strip()]
# The sample corpus, one document per paragraph, in row groups of 1000.
pq.write_table(pa.table({"id": list(range(len(paras))), "text": paras}), f"{out}/sample.parquet", row_group_size=1000)
with open(f"{out}/sample.jsonl", "w", encoding="utf-8") as f:
    for p in paras: f.write(json.dumps({"text": p}) + "\n")
# 210 MB of documents of 1..12 paragraphs; one row group.
rng = random.Random(1)
docs, total = [], 0
while total < 210e6:
    d = "\n\n".join(rng.choice(paras) for _ in range(rng.randint(1, 12)))
    if rng.random() < 0.1: d += " caf\u00e9 \u65e5\u672c\u8a9e \u2713 \U0001F600"
    docs.append(d)
    total += len(d.encode())
pq.write_table(pa.table({"text": docs}), f"{out}/big.parquet")
with open(f"{out}/big.jsonl", "w", encoding="utf-8") as f:
    for d in docs: f.write(json.dumps({"text": d}) + "\n")
print(f"corpus: {len(docs)} documents, {total / 1e6:.0f} MB of text, "
      f"{pq.ParquetFile(f'{out}/big.parquet').metadata.num_row_groups} row group(s)")
PY

run() {  # run NAME ARGS...: runs loom, prints "NAME rc peak_MiB seconds"
  local name=$1
  shift
  python3 - "$name" "$loom" "$@" <<'PY'
import os, subprocess, sys, time
name, argv = sys.argv[1], sys.argv[2:]
t0 = time.time()
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execv(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
print(name, os.waitstatus_to_exitcode(status), usage.ru_maxrss // 1024, f"{time.time() - t0:.1f}")
PY
}

read -r _ rc base _ < <(run base preprocess --help)
[ "$rc" = 0 ] || { echo "FAIL: loom preprocess --help"; exit 1; }
# A loom without the Parquet plugin says so: skip.
if ! "$loom" preprocess --input "$tmp/sample.parquet" --output "$tmp/probe/x" --quiet >/dev/null 2>"$tmp/probe.err"; then
  if grep -q "plugin" "$tmp/probe.err"; then echo "SKIP: $(cat "$tmp/probe.err")"; exit 77; fi
  echo "FAIL: preprocess of the sample Parquet file"; cat "$tmp/probe.err"; exit 1
fi

fail=0
tok=$src/data/tokenizer/shakespeare_bpe.model
for w in 1 2; do
  "$loom" preprocess --input "$tmp/sample.jsonl" --output "$tmp/sj$w/x" --tokenizer "$tok" --workers $w --shards 2 >/dev/null &&
    "$loom" preprocess --input "$tmp/sample.parquet" --output "$tmp/sp$w/x" --tokenizer "$tok" --workers $w --shards 2 \
      >/dev/null || { echo "FAIL: preprocess of the sample corpus"; exit 1; }
  for f in x_00000.bin x_00000.idx x_00001.bin x_00001.idx; do
    cmp -s "$tmp/sj$w/$f" "$tmp/sp$w/$f" || { echo "FAIL: sample corpus, $w worker(s): $f differs"; fail=1; }
  done
done

read -r _ rc_j peak_j secs_j < <(run jsonl preprocess --input "$tmp/big.jsonl" --output "$tmp/bj/x" --workers 2)
rm -f "$tmp/big.jsonl"
read -r _ rc_p peak_p secs_p < <(run parquet preprocess --input "$tmp/big.parquet" --output "$tmp/bp/x" --workers 2)
[ "$rc_j" = 0 ] && [ "$rc_p" = 0 ] || { echo "FAIL: preprocess of the 210 MB corpus (jsonl rc $rc_j, parquet rc $rc_p)"; exit 1; }
for f in x.bin x.idx; do
  cmp -s "$tmp/bj/$f" "$tmp/bp/$f" || { echo "FAIL: 210 MB corpus: $f differs between JSONL and Parquet"; fail=1; }
done
echo "peak resident: loom itself $base MiB; JSONL run $peak_j MiB (${secs_j} s); Parquet run $peak_p MiB (${secs_p} s)"
if [ $((peak_p - base)) -gt 128 ]; then
  echo "FAIL: the Parquet run's peak is $((peak_p - base)) MiB above loom's own, over 128 MiB"
  fail=1
fi
[ $fail = 0 ] && echo "parquet_large: ok"
exit $fail
