#!/usr/bin/env python3
"""Loads `loom plan --export deepspeed` configs with DeepSpeed's own parser
(deepspeed.runtime.config.DeepSpeedConfig: the batch identity, ZeRO, dtypes,
optimizer and scheduler sections), as a training job's engine would.

Needs DeepSpeed and torch (not part of the build): pip install torch deepspeed.
Usage: scripts/check_deepspeed_config.py DP CONFIG.json...   (DP: the plan's data-parallel size)
"""
import json
import sys

import deepspeed.runtime.config as C

C.dist.get_rank = lambda *a, **k: 0  # no process group: rank 0 of the DP group below
dp = int(sys.argv[1])


class Mpu:
    def get_data_parallel_world_size(self):
        return dp

    def get_model_parallel_world_size(self):
        return 1

    def get_data_parallel_rank(self):
        return 0


failed = 0
for path in sys.argv[2:]:
    try:
        c = C.DeepSpeedConfig(json.load(open(path)), mpu=Mpu())
        print(f"{path}: ok (train batch {c.train_batch_size}, micro {c.train_micro_batch_size_per_gpu}, "
              f"accumulation {c.gradient_accumulation_steps}, ZeRO {c.zero_optimization_stage}, "
              f"communication {c.communication_data_type})")
    except Exception as e:  # the parser's own refusal
        failed += 1
        print(f"{path}: REFUSED: {type(e).__name__}: {e}")
sys.exit(1 if failed else 0)
