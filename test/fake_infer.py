#!/usr/bin/env python3
"""A stand-in for infer_gpt2 / infer_gpt2cu in the sweep tests (test/test_sweep.cpp): it takes the inference
programs' flags that scripts/sweep.py passes and prints their --json output, with random numbers, so the test
checks what the sweep makes of them against this program's own log rather than against fixed values.

FAKE_INFER_MAX_BATCH=N refuses -b above N as the GPU programs refuse a request that does not fit;
FAKE_INFER_HANG_BATCH=N never finishes at -b N (the sweep's time limit must stop it);
FAKE_INFER_PLAN_MAX_BATCH=N: --memory-plan answers "fits: no" above -b N (and "fits: yes" otherwise);
FAKE_INFER_PLAN_ERROR=TEXT: --memory-plan fails instead, with "error: TEXT".
"""
import argparse
import json
import os
import random
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("-e", required=True)
p.add_argument("-b", type=int, default=1)
p.add_argument("--prompt-len", type=int, required=True)
p.add_argument("-n", type=int, default=64)
p.add_argument("--seed", type=int, default=1337)
p.add_argument("--json", action="store_true")
p.add_argument("--profile")
p.add_argument("--memory-plan", action="store_true")
p.add_argument("--device-memory")
a = p.parse_args()

if a.memory_plan and "FAKE_INFER_PLAN_ERROR" in os.environ:
    print(f"error: {os.environ['FAKE_INFER_PLAN_ERROR']}")
    sys.exit(1)
if a.memory_plan:
    print("fits: " + ("no" if a.b > int(os.environ.get("FAKE_INFER_PLAN_MAX_BATCH", "1000000")) else "yes"))
    sys.exit(0)

if a.b == int(os.environ.get("FAKE_INFER_HANG_BATCH", "0")):
    time.sleep(3600)
if a.b > int(os.environ.get("FAKE_INFER_MAX_BATCH", "1000000")):
    print(f"error: -b {a.b}: needs 99999 MiB of GPU memory, 80000 MiB are free; the largest batch that fits is "
          f"{os.environ['FAKE_INFER_MAX_BATCH']}")
    sys.exit(1)

r = random.Random()  # unseeded: the test must read the numbers from the output
for i in range(a.b):
    ids = [r.randrange(50257) for _ in range(a.n)]
    print(json.dumps({"prompt_ids": [r.randrange(50257) for _ in range(a.prompt_len)], "ids": ids, "text": "",
                      "ttft_ms": r.uniform(1, 10), "decode_tok_s": r.uniform(100, 1000)}))
print(json.dumps({"summary": {
    "prefill_tok_s": r.uniform(1e3, 1e4), "ttft_ms": r.uniform(1, 10), "decode_tok_s": r.uniform(100, 1000) * a.b,
    "latency_p50_ms": r.uniform(1, 5), "latency_p90_ms": r.uniform(5, 10), "peak_mem_mib": r.uniform(100, 200),
    "B": a.b, "prompt_len": a.prompt_len, "gen_len": a.n, "params": 3335104,
    "avg_power_w": r.uniform(100, 300), "j_per_token": r.uniform(0.01, 0.1)}}))
