#!/usr/bin/env bash
# Train from an S3 bucket: a real S3-compatible server (moto) on loopback,
# shards written by `loom preprocess` uploaded to it, `loom execute --data
# s3://.../x.manifest.json --endpoint URL` under mpirun (credentials from an
# AWS_PROFILE of a credentials file, with a session token) fetches, verifies
# and caches them; a second run with the server stopped trains from the cache
# alone.
# Exit 77 (skipped) when moto is not installed.
# usage: s3_train.sh LOOM MPIEXEC [MPIEXEC_ARGS...]
set -u
loom=$1
shift
python3 -c "import moto.server, boto3" 2>/dev/null || { echo "SKIP: moto not installed (pip install 'moto[server]')"; exit 77; }
tmp=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
python3 -m moto.server -H 127.0.0.1 -p "$port" >"$tmp/moto.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do curl -s "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$port"
# Never instance metadata or a container agent, whatever machine runs this.
export AWS_EC2_METADATA_DISABLED=true
unset AWS_CONTAINER_CREDENTIALS_RELATIVE_URI AWS_CONTAINER_CREDENTIALS_FULL_URI

# Shards of the sample corpus with the shipped tokenizer, uploaded.
src=$(cd "$(dirname "$0")/../.." && pwd)
head -c 300000 "$src/data/tinyshakespeare.txt" | python3 -c "
import json, sys
text = sys.stdin.read()
for para in text.split('\n\n'):
    if para.strip(): print(json.dumps({'text': para}))" >"$tmp/corpus.jsonl"
"$loom" preprocess --input "$tmp/corpus.jsonl" --output "$tmp/shards/ts" --tokenizer "$src/data/tokenizer/shakespeare_bpe.model" \
  --shards 2 --quiet || { echo "FAIL: preprocess"; exit 1; }
python3 - "$tmp/shards" "$port" <<'PY' || { echo "FAIL: upload"; exit 1; }
import boto3, os, sys
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[2]}", region_name="us-east-1")
s3.create_bucket(Bucket="loom-data")
for name in os.listdir(sys.argv[1]):
    s3.upload_file(os.path.join(sys.argv[1], name), "loom-data", f"shakespeare/{name}")
# The raw corpus too, as JSONL and (with pyarrow) as Parquet, for preprocess.
raw = os.path.join(os.path.dirname(sys.argv[1]), "corpus.jsonl")
s3.upload_file(raw, "loom-data", "raw/corpus.jsonl")
try:
    import json, pyarrow as pa, pyarrow.parquet as pq
    texts = [json.loads(l)["text"] for l in open(raw, encoding="utf-8")]
    pq.write_table(pa.table({"text": texts}), raw + ".parquet", row_group_size=200)
    s3.upload_file(raw + ".parquet", "loom-data", "raw/corpus.parquet")
except ImportError:
    pass
PY
# From here on loom gets its credentials from a profile of a credentials file,
# with a session token (moto accepts any), and the endpoint from --endpoint.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL
mkdir -p "$tmp/aws"
printf '[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n[train]\naws_access_key_id = testing\naws_secret_access_key = testing\naws_session_token = FwoGZXIvYXdzEXAMPLE//token==\n' >"$tmp/aws/credentials"
: >"$tmp/aws/config"
export AWS_SHARED_CREDENTIALS_FILE="$tmp/aws/credentials" AWS_CONFIG_FILE="$tmp/aws/config" AWS_PROFILE=train
endpoint=(--endpoint "http://127.0.0.1:$port")
# preprocess reads s3:// inputs (fetched into its cache) and gives the shards
# the local corpus gave.
remote_inputs=(s3://loom-data/raw/corpus.jsonl)
[ -f "$tmp/corpus.jsonl.parquet" ] && "$loom" preprocess --input "$tmp/corpus.jsonl.parquet" --output "$tmp/probe/x" \
  --quiet >/dev/null 2>&1 && remote_inputs+=(s3://loom-data/raw/corpus.parquet)
for in in "${remote_inputs[@]}"; do
  "$loom" preprocess --input "$in" --output "$tmp/remote/ts" --tokenizer "$src/data/tokenizer/shakespeare_bpe.model" \
    --shards 2 --quiet --cache-dir "$tmp/pcache" "${endpoint[@]}" >"$tmp/pre.out" 2>&1 ||
    { cat "$tmp/pre.out"; echo "FAIL: preprocess of $in"; exit 1; }
  for f in ts_00000.bin ts_00000.idx ts_00001.bin ts_00001.idx; do
    cmp -s "$tmp/shards/$f" "$tmp/remote/$f" || { echo "FAIL: preprocess of $in: $f differs from the local corpus's"; exit 1; }
  done
  grep -q "\"$in\"" "$tmp/remote/ts.manifest.json" || { echo "FAIL: the manifest does not name $in"; exit 1; }
done
echo "preprocess from ${remote_inputs[*]}: the local corpus's shards"
# A folder and a pattern are listed (ListObjectsV2): every raw object in key
# order, as the same local files in the same order give.
local_inputs=("$tmp/corpus.jsonl")
[ ${#remote_inputs[@]} -gt 1 ] && local_inputs+=("$tmp/corpus.jsonl.parquet")
"$loom" preprocess --input "${local_inputs[@]}" --output "$tmp/both/ts" --quiet >/dev/null || { echo "FAIL: local"; exit 1; }
for in in s3://loom-data/raw/ 's3://loom-data/raw/corpus.*'; do
  "$loom" preprocess --input "$in" --output "$tmp/listed/ts" --quiet --cache-dir "$tmp/pcache" "${endpoint[@]}" \
    >"$tmp/pre.out" 2>&1 || { cat "$tmp/pre.out"; echo "FAIL: preprocess of $in"; exit 1; }
  for f in ts.bin ts.idx; do
    cmp -s "$tmp/both/$f" "$tmp/listed/$f" || { echo "FAIL: preprocess of $in: $f differs"; exit 1; }
  done
done
"$loom" preprocess --input 's3://loom-data/raw/*.zst' --output "$tmp/none/ts" --cache-dir "$tmp/pcache" "${endpoint[@]}" \
  >"$tmp/pre.out" 2>&1 && { echo "FAIL: a pattern matching nothing was accepted"; exit 1; }
grep -q "matches no object" "$tmp/pre.out" || { cat "$tmp/pre.out"; echo "FAIL: no clear error for an empty pattern"; exit 1; }
echo "preprocess of s3://loom-data/raw/ and a pattern: listed, the local files' shards"
"$loom" plan --model gpt2-124m --scale layers=2,hidden=64,heads=4,vocab=4096 --hw cpu-local --gpus 2 \
  --global-batch 8 --seq 32 --layout dp=2 --steps 6 --out "$tmp/plan.json" >/dev/null || { echo "FAIL: plan"; exit 1; }
data=s3://loom-data/shakespeare/ts.manifest.json
"$@" -np 2 "$loom" execute "$tmp/plan.json" --data "$data" --cache-dir "$tmp/cache" --threads 1 "${endpoint[@]}" \
  --record "$tmp/run1.json" >"$tmp/out1" 2>&1 || { cat "$tmp/out1"; echo "FAIL: training from S3"; exit 1; }
ls "$tmp/cache" | grep -q "ts_00001.bin$" || { echo "FAIL: shards not published in the cache"; ls "$tmp/cache"; exit 1; }
ls "$tmp/cache" | grep -qE "\.(part|map)$" && { echo "FAIL: a partial download was left"; ls "$tmp/cache"; exit 1; }
kill "$server"; wait "$server" 2>/dev/null; server=""
"$@" -np 2 "$loom" execute "$tmp/plan.json" --data "$data" --cache-dir "$tmp/cache" --threads 1 "${endpoint[@]}" \
  --record "$tmp/run2.json" >"$tmp/out2" 2>&1 || { cat "$tmp/out2"; echo "FAIL: training from the cache"; exit 1; }
python3 - "$tmp/run1.json" "$tmp/run2.json" <<'PY' || exit 1
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:])
assert a == b, f"losses differ between the S3 run and the cached run: {a} vs {b}"
assert a[-1] < a[0], f"loss did not fall: {a}"
print("losses", [round(x, 4) for x in a])
PY
# A bucket that does not exist: a clear error and a non-zero exit.
"$@" -np 2 "$loom" execute "$tmp/plan.json" --data s3://loom-data/nope/x.manifest.json --cache-dir "$tmp/cache2" "${endpoint[@]}" \
  >"$tmp/out3" 2>&1 && { echo "FAIL: a missing remote manifest was accepted"; exit 1; }
grep -qiE "cannot reach|not found" "$tmp/out3" || { cat "$tmp/out3"; echo "FAIL: no clear error"; exit 1; }
echo "PASS: trained from S3, then from the cache; a missing remote is refused"
