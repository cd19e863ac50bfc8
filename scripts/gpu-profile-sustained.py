#!/usr/bin/env python3
"""Adds a measured long-run GEMM rate to a calibrated profile.

gpu-validate's stage 6c (scripts/gpu-sustained-gemm.py) runs an 8192^3 GEMM
back to back for SUSTAIN_S seconds. Its sustained rate is what a profile's
`sustained_gemm_tflops` holds (docs/formats/hwprofile.md): the power cap that
caps every GEMM of the simulator (docs/simulator.md section 3.1). This writes
it into PROFILE (the `loom calibrate --backend cuda` profile gpu-validate made)
for each precision the profile has a peak for and the rate does not exceed
(in a `loom calibrate` profile the peak is the best GEMM rate calibrate
measured, so a long-run rate above it is refused as suspect), merged with
what the profile holds, and names the run in the accelerator's source (once:
a second run replaces the sentence).

Where the stage also held an attention kernel back to back ("attention"),
the share of its burst rate it kept becomes the profile's
`sustained_attention_ratio` (at most 1; only beside a measured
attention_efficiency table, which it scales: docs/simulator.md 3.2).

Where it timed weight-gradient GEMMs accumulating into an fp32 main gradient
against the same GEMMs writing bf16 ("wgrad_accumulate"), the median over
those shapes of the extra time times the profile's streaming rate
(memory_bw_gb_per_s x memory_bw_efficiency) over the main gradient's read and
write (8 bytes an output element), clamped to [0, 1], becomes the profile's
`wgrad_accumulate_exposed` (docs/simulator.md 3.3).

usage: gpu-profile-sustained.py PROFILE.json SUSTAINED.json
Exits 0 and changes nothing when there is no figure to take.
"""
import json
import sys

if len(sys.argv) != 3:
    sys.exit("usage: gpu-profile-sustained.py PROFILE.json SUSTAINED.json")
profile_path, sustained_path = sys.argv[1], sys.argv[2]
with open(profile_path) as f:
    profile = json.load(f)
with open(sustained_path) as f:
    sustained = json.load(f)
acc = profile["accelerator"]
peaks = {"bf16": acc.get("peak_bf16_tflops", 0), "fp8": acc.get("peak_fp8_tflops", 0)}
taken, skipped = {}, []
for g in sustained.get("gemms", []):
    dtype, rate = g.get("dtype"), g.get("sustained_tflops")
    if g.get("shape") != [8192, 8192, 8192] or dtype not in peaks or not rate:
        continue
    if not peaks[dtype]:
        skipped.append("%s: the profile has no %s peak" % (dtype, dtype))
    elif rate > peaks[dtype]:
        skipped.append("%s: %.1f TFLOP/s is above the profile's peak %.1f" % (dtype, rate, peaks[dtype]))
    else:
        taken[dtype] = rate
att = sustained.get("attention") or {}
share = att.get("sustained_over_burst")
attention_ratio = None
if share:
    if not acc.get("attention_efficiency"):
        skipped.append("attention: the profile has no attention_efficiency table for the held share to scale")
    elif not 0 < share <= 1.05:
        skipped.append("attention: a held/burst share of %s is not a measurement of throttling" % share)
    else:
        attention_ratio = round(min(1.0, share), 4)
exposed = None
shares = []
for r in sustained.get("wgrad_accumulate") or []:
    plain, fused, shape = r.get("bf16_out_tflops"), r.get("fp32_accumulate_tflops"), r.get("shape") or []
    if not plain or not fused or len(shape) != 3:
        continue
    inp, out, t = shape
    flops = 2.0 * inp * out * t
    shares.append((flops / (fused * 1e12) - flops / (plain * 1e12), 8.0 * inp * out))
if shares:
    bw = acc.get("memory_bw_gb_per_s", 0) * acc.get("memory_bw_efficiency", 1.0) * 1e9
    if not bw > 0:
        skipped.append("wgrad_accumulate: the profile has no memory_bw_gb_per_s to put the extra time against")
    else:
        ratios = sorted(extra_s * bw / nbytes for extra_s, nbytes in shares)
        exposed = round(min(1.0, max(0.0, ratios[len(ratios) // 2])), 4)
for s in skipped:
    print("gpu-profile-sustained: not taken, " + s)
if not taken and attention_ratio is None and exposed is None:
    print("gpu-profile-sustained: no 8192^3 sustained rate, attention share or weight-gradient accumulation to take; "
          "%s unchanged" % profile_path)
    sys.exit(0)
# Merged with what the profile already holds (a precision not measured now
# keeps its figure). Each field names its run in a sentence of its own, which
# a later run replaces, not repeats; a run that takes one field keeps the
# other's sentence.
GEMM_MARK = " sustained_gemm_tflops: gpu-validate stage 6c"
ATTN_MARK = " sustained_attention_ratio: gpu-validate stage 6c"
WGRAD_MARK = " wgrad_accumulate_exposed: gpu-validate stage 6c"
MARKS = (GEMM_MARK, ATTN_MARK, WGRAD_MARK)


def drop_sentence(text, mark):
    """text without the sentence that starts at mark (up to our other mark or the end)."""
    if mark not in text:
        return text
    start = text.index(mark)
    ends = [text.index(m, start + 1) for m in MARKS if m != mark and m in text[start + 1:]]
    return text[:start] + (text[min(ends):] if ends else "")


source = acc.get("source", "")
run = "(scripts/gpu-sustained-gemm.py) on %s, torch %s" % (sustained.get("device"), sustained.get("torch"))
if taken:
    merged = dict(acc.get("sustained_gemm_tflops", {}))
    merged.update(taken)
    acc["sustained_gemm_tflops"] = merged
    source = drop_sentence(source, GEMM_MARK) + GEMM_MARK + " %s: an 8192^3 GEMM back to back for %s s: %s." % (
        run, sustained.get("sustain_s"), json.dumps(taken))
if attention_ratio is not None:
    acc["sustained_attention_ratio"] = attention_ratio
    source = drop_sentence(source, ATTN_MARK) + ATTN_MARK + " %s: %s %s held back to back, %s TFLOP/s against %s burst." % (
        run, att.get("kernel"), "x".join(map(str, att.get("shape", []))), att.get("sustained_tflops"),
        att.get("burst_tflops"))
if exposed is not None:
    acc["wgrad_accumulate_exposed"] = exposed
    source = drop_sentence(source, WGRAD_MARK) + WGRAD_MARK + (
        " %s: %d weight-gradient GEMMs accumulating into an fp32 C (torch.addmm out_dtype fp32, beta = 1) against a "
        "bf16 output; the median extra time showed %s of the main gradient's read and write at the streaming rate." % (
            run, len(shares), exposed))
acc["source"] = source.strip()
with open(profile_path, "w") as f:
    json.dump(profile, f, indent=1)
    f.write("\n")
print("gpu-profile-sustained: %s now has %s" % (profile_path, ", ".join(
    (["sustained_gemm_tflops %s" % json.dumps(taken)] if taken else []) +
    (["sustained_attention_ratio %s" % attention_ratio] if attention_ratio is not None else []) +
    (["wgrad_accumulate_exposed %s" % exposed] if exposed is not None else []))))
