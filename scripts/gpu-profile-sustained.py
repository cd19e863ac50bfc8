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

usage: gpu-profile-sustained.py PROFILE.json SUSTAINED.json
Exits 0 and changes nothing when there is no 8192^3 figure to take.
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
for s in skipped:
    print("gpu-profile-sustained: not taken, " + s)
if not taken:
    print("gpu-profile-sustained: no 8192^3 sustained rate to take; %s unchanged" % profile_path)
    sys.exit(0)
# Merged with what the profile already holds (a precision not measured now
# keeps its figure); the source's sentence about it replaced, not repeated.
merged = dict(acc.get("sustained_gemm_tflops", {}))
merged.update(taken)
acc["sustained_gemm_tflops"] = merged
marker = " sustained_gemm_tflops: gpu-validate stage 6c"
source = acc.get("source", "")
if marker in source:
    source = source[:source.index(marker)]
acc["source"] = (source + marker + " (scripts/gpu-sustained-gemm.py), an 8192^3 GEMM back to back for %s s on %s, "
                 "torch %s: %s." % (sustained.get("sustain_s"), sustained.get("device"), sustained.get("torch"),
                                   json.dumps(taken))).strip()
with open(profile_path, "w") as f:
    json.dump(profile, f, indent=1)
    f.write("\n")
print("gpu-profile-sustained: %s now has sustained_gemm_tflops %s" % (profile_path, json.dumps(taken)))
