#!/usr/bin/env python3
"""GPU kernel time of a PyTorch-profiler (Kineto) trace, by phase and kind.

A training stack's own profile is the nearest thing to a measurement of what
Loom predicts per layer: the kernels a step really launched, with their
durations. This reads a Chrome-trace JSON written by torch.profiler and
prints, for each user annotation on the host (record_function ranges such as
"attn(F)" or "mlp(B)"), the GPU time of the kernels launched inside it, split
into kinds:

  gemm   matrix multiplies (cuBLAS/cuBLASLt, CUTLASS, DeepGEMM names)
  attn   attention kernels (flash, fmha, cuDNN SDPA)
  cast   FP8 quantization, casts and transposes
  comm   communication kernels (NCCL, DeepEP)
  elem   everything else (norms, activations, copies, reductions)

A kernel belongs to the innermost annotation whose range holds the runtime
call that launched it (matched by correlation id): one on the launching host
thread where there is one, else one on any thread (autograd launches the
backward's kernels from its own thread, inside the main thread's annotation);
kernels launched outside every annotation are counted under "-". The kinds come from kernel
names only, so a stack with unusual names may need --kind RULE (a regular
expression and a kind, tried before the built-in rules).

Durations are summed, not merged: kernels that overlap on two streams both
count. --streams prints each stream's busy time and span.

usage: trace_phases.py TRACE.json [--per N] [--exclude NAME] ... [--streams]
                                  [--kind REGEX=KIND] ... [--json]
  --per N         divide every figure by N (e.g. the layers the trace holds)
  --exclude NAME  an annotation that is not a phase (e.g. ProfilerStep#1);
                  repeat for several
"""
import argparse
import bisect
import collections
import json
import re
import sys

BUILTIN_KINDS = [
    (r"nccl|dpsk::ep::|deep_ep|::internode::|::intranode::", "comm"),
    (r"flash|fmha|sdpa|attn_fwd|attn_bwd|cudnn.*(fprop|dgrad).*attn", "attn"),
    (r"cast|transpose|quantiz|amax", "cast"),
    (r"gemm|matmul|xmma|cutlass.*device_kernel|cublas|nvjet|sm90_|sm80_|ampere_.*(h|s)884", "gemm"),
]
KIND_ORDER = ["gemm", "attn", "cast", "elem", "comm"]


def classify(name, rules):
    low = name.lower()
    for rx, kind in rules:
        if rx.search(low):
            return kind
    return "elem"


def load_events(path):
    with open(path) as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--per", type=float, default=1.0)
    ap.add_argument("--exclude", action="append", default=[], metavar="NAME")
    ap.add_argument("--streams", action="store_true")
    ap.add_argument("--kind", action="append", default=[], metavar="REGEX=KIND")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.per <= 0:
        sys.exit("trace_phases.py: --per must be positive")
    rules = []
    for r in a.kind:
        rx, sep, kind = r.rpartition("=")
        if not sep or kind not in KIND_ORDER:
            sys.exit(f"trace_phases.py: --kind takes REGEX=KIND with KIND one of {', '.join(KIND_ORDER)}: {r!r}")
        rules.append((re.compile(rx.lower()), kind))
    rules += [(re.compile(rx), kind) for rx, kind in BUILTIN_KINDS]

    try:
        ev = load_events(a.trace)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"trace_phases.py: cannot read {a.trace} as a Chrome trace: {e}")
    kernels = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not kernels:
        sys.exit(f"trace_phases.py: {a.trace} holds no GPU kernels (was the profiler run with CUDA activities?)")
    launches = {}  # correlation id -> (host thread, time of the launch call)
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e:
            c = e["args"].get("correlation")
            if c is not None:
                launches[c] = ((e.get("pid"), e.get("tid")), e["ts"])
    spans = collections.defaultdict(list)  # host thread (None: every thread) -> annotations by start
    for e in ev:
        if e.get("cat") == "user_annotation" and e.get("ph") == "X" and e["name"] not in a.exclude:
            span = (e["ts"], e["ts"] + e["dur"], e["name"])
            spans[(e.get("pid"), e.get("tid"))].append(span)
            spans[None].append(span)
    starts = {}
    for thread, lst in spans.items():
        lst.sort()
        starts[thread] = [x[0] for x in lst]

    def innermost(thread, ts):
        # The latest-starting annotation that still holds ts: ranges on one
        # thread nest, so on the launching thread it is the innermost.
        lst = spans.get(thread, [])
        i = bisect.bisect_right(starts.get(thread, []), ts) - 1
        while i >= 0:
            s, t, n = lst[i]
            if ts <= t:
                return n
            i -= 1
        return None

    def phase_of(thread, ts):
        return innermost(thread, ts) or innermost(None, ts) or "-"

    table = collections.defaultdict(float)
    for k in kernels:
        launch = launches.get(k.get("args", {}).get("correlation"))
        phase = phase_of(*launch) if launch is not None else "-"
        table[(phase, classify(k["name"], rules))] += k["dur"] / 1e3 / a.per  # ms
    phases = sorted({p for p, _ in table}, key=lambda p: (p == "-", p))
    if a.json:
        out = {p: {kind: round(table.get((p, kind), 0.0), 4) for kind in KIND_ORDER} for p in phases}
        print(json.dumps(out, indent=1))
        return
    print(f"GPU kernel time in ms{' per ' + format(a.per, 'g') if a.per != 1 else ''}, by the host annotation that launched it")
    print("%-14s" % "phase" + "".join("%10s" % k for k in KIND_ORDER) + "%10s" % "total")
    for p in phases + ["all"]:
        row = [sum(table.get((q, k), 0.0) for q in phases) if p == "all" else table.get((p, k), 0.0) for k in KIND_ORDER]
        print("%-14s" % p + "".join("%10.3f" % v for v in row) + "%10.3f" % sum(row))
    if a.streams:
        by = collections.defaultdict(list)
        for k in kernels:
            by[(k.get("pid"), k.get("tid"))].append(k)
        print("\nstream            kernels   busy ms   span ms")
        for key, ks in sorted(by.items(), key=lambda x: str(x[0])):
            busy = sum(k["dur"] for k in ks) / 1e3
            span = (max(k["ts"] + k["dur"] for k in ks) - min(k["ts"] for k in ks)) / 1e3
            print("%-16s %8d %9.2f %9.2f" % (f"{key[0]}/{key[1]}", len(ks), busy / a.per, span / a.per))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BrokenPipeError:  # a reader that stopped early (| head): not an error of ours
        sys.stderr.close()
        sys.exit(0)
