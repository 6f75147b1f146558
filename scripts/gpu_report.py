#!/usr/bin/env python3
"""The parsers behind scripts/gpu_check.sh: each stage's log turned into its key numbers, and report.md.

    gpu_report.py parse KIND LOG [--kernels KERNELS_CSV]   one log's numbers as JSON (KIND below)
    gpu_report.py judge STAGE DIR                          one line: STAGE status key numbers
    gpu_report.py report DIR [-o REPORT_MD]                DIR/report.md and DIR/summary.txt; prints the summary
    gpu_report.py versions [--binary PROGRAM]              CUDA runtime, driver, cuBLASLt and CUPTI versions

KIND: inventory, build, gtest, sanitizer, ladder, data, train, benchmark, decode, torch, profile, ncu, nsys.
DIR is a gpu_check.sh output directory: stages.tsv (stage, rc or "skip", seconds, limit, note) and
logs/STAGE.log. Standard library only; the formats parsed are those of the programs in this repository
(llmc/train/loop.cpp, llmc/profiler/writers.cpp, dev/cuda/bench_common.cuh, scripts/benchmark_gpu.sh,
dev/torch_gpt2_baseline.py), of GoogleTest, compute-sanitizer, ncu --csv and nsys.
"""
import argparse
import csv
import ctypes
import io
import json
import os
import re
import statistics
import subprocess
import sys

# (stage, parser kind, what it checks), in the order gpu_check.sh runs them.
STAGES = [
    ("inventory", "inventory", "GPU, driver, CUDA, cuBLAS, CUPTI; which tools exist"),
    ("build", "build", "make: the binaries that are missing or stale"),
    ("gpu_tests", "gtest", "GPU suites of make test"),
    ("memcheck", "sanitizer", "compute-sanitizer memcheck, kernel and model tests"),
    ("racecheck", "sanitizer", "compute-sanitizer racecheck, kernel and model tests"),
    ("synccheck", "sanitizer", "compute-sanitizer synccheck, kernel and model tests"),
    ("initcheck", "sanitizer", "compute-sanitizer initcheck, kernel and model tests"),
    ("kernel_ladder", "ladder", "dev/cuda kernel benchmarks"),
    ("data", "data", "tinyshakespeare from local files"),
    ("train", "train", "train_gpt2cu d12 T=1024 on tinyshakespeare"),
    ("benchmark", "benchmark", "scripts/benchmark_gpu.sh, d12 T=1024"),
    ("decode", "decode", "scripts/benchmark_gpu.sh -I: decode eager and as CUDA graphs against the HBM floor"),
    ("torch_baseline", "torch", "compiled PyTorch on the same model and batches; our tok/s over its"),
    ("profile", "profile", "profile_gpt2cu at its defaults"),
    ("profile_counters", "profile", "profile_gpt2cu --counters"),
    ("energy", "profile", "profile_gpt2cu --energy: joules per sub-block, each replayed for NVML's energy counter"),
    ("ncu", "ncu", "ncu gpu__time_duration vs the profiler's kernels.csv, one layer; ncu's memory counters vs the "
     "emulated ones (make emu_counters), the GPT-2 slice's training step"),
    ("nsys", "nsys", "nsys profile of profile_gpt2cu"),
]
KIND = {name: kind for name, kind, _ in STAGES}
# The directory (under the report directory) whose kernels.csv the ncu stage is joined with.
NCU_PROFILE_DIR = "profile_1layer"


def fnum(s):
    """A float from a printed number ("1,234.5", "40.1%", "-"); None when it is not one."""
    if s is None:
        return None
    s = s.strip().rstrip("%").replace(",", "")
    try:
        return float(s)
    except ValueError:
        return None


def fmt(x, spec=".3g"):
    return "?" if x is None else format(x, spec)


# ---------------------------------------------------------------- GoogleTest

def parse_gtest(text):
    r = {"summary": False, "tests": None, "suites": None, "ms": None, "passed": 0, "skipped": 0, "failed": 0,
         "failed_tests": [], "crashed_in": None, "skip_reasons": {}}
    m = re.search(r"^\[==========\] (\d+) tests? from (\d+) test suites? ran\. \((\d+) ms total\)", text, re.M)
    if m:
        r.update(summary=True, tests=int(m[1]), suites=int(m[2]), ms=int(m[3]))
    for key, pat in (("passed", r"^\[  PASSED  \] (\d+) tests?\."),
                     ("skipped", r"^\[  SKIPPED \] (\d+) tests?, listed below:"),
                     ("failed", r"^\[  FAILED  \] (\d+) tests?, listed below:")):
        m = re.search(pat, text, re.M)
        if m:
            r[key] = int(m[1])
    for m in re.finditer(r"^\[  FAILED  \] ([A-Za-z_]\w*(?:/\w+)?\.[\w/]+)", text, re.M):
        if m[1] not in r["failed_tests"]:
            r["failed_tests"].append(m[1])
    # GTEST_SKIP() prints "file:line: Skipped" and its message on the next line.
    for m in re.finditer(r"^\S+:\d+: Skipped\n(.*)$", text, re.M):
        reason = m[1].strip() or "(no message)"
        r["skip_reasons"][reason] = r["skip_reasons"].get(reason, 0) + 1
    # A test that started and never finished: the one running when the process died or was killed.
    running = None
    for m in re.finditer(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] ([\w/]+\.[\w/]+)", text, re.M):
        running = m[2] if m[1] == "RUN" else None
    if not r["summary"]:
        r["crashed_in"] = running
    return r


def gtest_key(g):
    if not g["summary"]:
        return "no gtest summary" + (f" (stopped in {g['crashed_in']})" if g["crashed_in"] else "")
    s = f"{g['passed']} passed, {g['skipped']} skipped, {g['failed']} failed"
    if g["failed_tests"]:
        s += " (failed: " + ", ".join(g["failed_tests"][:4]) + (", ..." if len(g["failed_tests"]) > 4 else "") + ")"
    if g["skip_reasons"]:
        top = sorted(g["skip_reasons"].items(), key=lambda kv: -kv[1])[:2]
        s += " (skipped: " + "; ".join(f"{n} {why[:60]}" for why, n in top) + ")"
    return s + f", {g['ms'] / 1000:.0f} s"


def gtest_ok(g):
    """A run with no failure that ran something, on a device the tests could see."""
    no_device = any("no CUDA device" in why for why in g["skip_reasons"])
    return g["summary"] and g["failed"] == 0 and g["passed"] > 0 and not no_device


# ---------------------------------------------------------------- compute-sanitizer

def parse_sanitizer(text):
    r = {"gtest": parse_gtest(text), "errors": None, "hazards": None, "warnings": None, "first_error": None}
    m = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
    if m:
        r["hazards"], r["errors"], r["warnings"] = int(m[1]), int(m[2]), int(m[3])
    m = re.search(r"ERROR SUMMARY: (\d+) errors?", text)
    if m and r["errors"] is None:
        r["errors"] = int(m[1])
    for line in text.splitlines():
        if not line.startswith("========="):
            continue
        body = line.strip("= ").strip()
        if not body or "SUMMARY" in body or body.startswith(("COMPUTE-SANITIZER", "at ", "by thread", "Address ",
                                                              "Saved host backtrace", "Host Frame", "Device Frame")):
            continue
        if re.search(r"Invalid|Race|hazard|Uninitiali[sz]ed|Barrier|Misaligned|error|Error|not supported|leak",
                     body):
            r["first_error"] = body
            break
    return r


# ---------------------------------------------------------------- dev/cuda kernel ladder

def parse_ladder(text):
    programs, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^=== (\S+)(?: (missing|exit (\d+)))?$", line)
        if m:
            if m[2] is None:
                cur = {"program": os.path.basename(m[1]), "exit": None, "device": None, "checks_ok": 0,
                       "checks_failed": [], "timings": [], "speedups": {}}
                programs.append(cur)
            elif m[2] == "missing":
                programs.append({"program": os.path.basename(m[1]), "exit": None, "missing": True, "device": None,
                                 "checks_ok": 0, "checks_failed": [], "timings": [], "speedups": {}})
                cur = None
            elif cur is not None:
                cur["exit"] = int(m[3])
                cur = None
            continue
        if cur is None:
            continue
        if line.startswith("device: "):
            cur["device"] = line[len("device: "):].split(" | ")[0]
            continue
        m = re.match(r"^\s+check (.+?)\s+(?:rel err \S+ \(tol \S+\) )?(OK|FAILED)$", line)
        if m:
            if m[2] == "OK":
                cur["checks_ok"] += 1
            else:
                cur["checks_failed"].append(m[1])
            continue
        m = re.match(r"^(\S.*?)\s+(\d+\.\d+) ms(?: \|.*)?$", line)
        if m:
            t = {"name": m[1], "ms": float(m[2]), "gbps": None, "pct_dram": None, "tflops": None, "pct_bf16": None}
            g = re.search(r"([\d.]+) GB/s \(\s*([\d.]+)% of", line)
            if g:
                t["gbps"], t["pct_dram"] = float(g[1]), float(g[2])
            f = re.search(r"([\d.]+) TFLOP/s(?: \(\s*([\d.]+)% of)?", line)
            if f:
                t["tflops"], t["pct_bf16"] = float(f[1]), fnum(f[2])
            cur["timings"].append(t)
            continue
        m = re.match(r"^(.+?): ([\d.]+)x$", line)
        if m:
            cur["speedups"][m[1]] = float(m[2])
    return {"programs": programs}


def ladder_key(p):
    progs = p["programs"]
    ok = sum(x["checks_ok"] for x in progs)
    failed = [f"{x['program']}: {c}" for x in progs for c in x["checks_failed"]]
    s = f"{len(progs)} programs, {ok} checks OK, {len(failed)} failed"
    bad = [x["program"] + (" missing" if x.get("missing") else f" exit {x['exit']}") for x in progs
           if x.get("missing") or x["exit"] != 0]
    if bad:
        s += "; " + ", ".join(bad)
    sp = [f"{x['program']} {v:.2f}x" for x in progs for k, v in x["speedups"].items()]
    if sp:
        s += "; fused speedup " + ", ".join(sp)
    pcts = [(max(t["pct_dram"] or 0, t["pct_bf16"] or 0), f"{x['program']}/{t['name']}") for x in progs
            for t in x["timings"]]
    if pcts:
        lo, hi = min(pcts), max(pcts)
        s += f"; % of ceiling {lo[0]:.0f} ({lo[1]}) to {hi[0]:.0f} ({hi[1]})"
    return s


# ---------------------------------------------------------------- train_gpt2cu

STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \| norm (\S+) \| lr (\S+) \| (\S+) ms \| (\d+) tok/s(.*)$")
# The CPU reference's step lines (gpu_bundle/ref/train_gpt2.log), which gpu_check.sh --lease appends as "ref: ...".
REF_RE = re.compile(r"^ref: step\s+(\d+)/\d+ \| loss (\S+) \| norm \S+ \| lr (\S+) \|")
# The GPU's loss against the fp32 CPU reference's, relative: the bf16 tolerance of the GPU tests over AdamW steps
# (test/gpu/test_gpt2.cu, GPT2GPU.AdamWStepsTrackTheCPU).
REF_LOSS_TOL = 2e-2


def parse_train(text):
    steps, val, sample, in_sample, errors, ref = [], [], [], False, [], []
    params = None
    for line in text.splitlines():
        m = REF_RE.match(line)
        if m:
            ref.append({"step": int(m[1]), "loss": float(m[2]), "lr": m[3]})
            continue
        if in_sample:
            if line.startswith("----------------"):
                in_sample = False
            else:
                sample.append(line)
            continue
        if line == "---- sample ----":
            in_sample = True
            continue
        m = STEP_RE.match(line)
        if m:
            extras = m[8]
            mfu = re.search(r"MFU ([\d.]+)%", extras)
            mem = re.search(r"mem ([\d.]+) GiB", extras)
            steps.append({"step": int(m[1]), "of": int(m[2]), "loss": float(m[3]), "norm": float(m[4]),
                          "lr": m[5], "ms": float(m[6]), "tok_s": int(m[7]), "mfu": float(mfu[1]) if mfu else None,
                          "mem_gib": float(mem[1]) if mem else None})
            continue
        m = re.match(r"^(?:step\s+\d+/\d+ \| )?val loss (\S+)$", line)  # older logs: no step
        if m:
            val.append(float(m[1]))
            continue
        m = re.match(r"^\| parameters\s+\| (\d+)", line)
        if m:
            params = int(m[1])
            continue
        if line.startswith("error") or ": error:" in line:
            errors.append(line.strip())
    r = {"steps": len(steps), "parameters": params, "val_losses": val, "sample": "\n".join(sample).strip() or None,
         "errors": errors[:3], "first_loss": None, "last_loss": None, "train_falls": None, "val_falls": None,
         "tok_s": None, "mfu": None, "mem_gib": None, "ms": None, "max_steps": None, "reference": []}
    # Each reference step against the GPU's step of that number: the losses' relative difference.
    by_step = {s["step"]: s for s in steps}
    for x in ref:
        g = by_step.get(x["step"])
        rel = None if g is None or x["loss"] == 0 else (g["loss"] - x["loss"]) / x["loss"]
        r["reference"].append({"step": x["step"], "cpu": x["loss"], "gpu": g["loss"] if g else None,
                               "rel": None if rel is None else round(rel, 5),
                               "same_lr": g is not None and g["lr"] == x["lr"]})
    if steps:
        r["max_steps"] = steps[-1]["of"]
        losses = [s["loss"] for s in steps]
        k = max(1, min(5, len(losses) // 4))
        r.update(first_loss=losses[0], last_loss=losses[-1],
                 train_falls=statistics.mean(losses[-k:]) < statistics.mean(losses[:k]))
        # Throughput after the first steps (cuBLASLt heuristics, lazy module loading).
        steady = steps[min(3, len(steps) - 1):]
        r["tok_s"] = statistics.mean(s["tok_s"] for s in steady)
        r["ms"] = statistics.mean(s["ms"] for s in steady)
        mfus = [s["mfu"] for s in steady if s["mfu"] is not None]
        r["mfu"] = statistics.mean(mfus) if mfus else None
        mems = [s["mem_gib"] for s in steps if s["mem_gib"] is not None]
        r["mem_gib"] = max(mems) if mems else None
    if len(val) >= 2:
        r["val_falls"] = val[-1] < val[0]
    return r


# ---------------------------------------------------------------- scripts/benchmark_gpu.sh

def parse_benchmark(text):
    rows, profiled = [], False
    num = r"(-?[\d.]+)"
    for line in text.splitlines():
        if line.startswith("model ") and "ms/step" in line:
            profiled = "overhead" in line
            continue
        m = re.match(r"^(\S+)\s+(\d+)\s+(\d+)\s+failed: (.*)$", line)
        if m:
            rows.append({"model": m[1], "T": int(m[2]), "B": int(m[3]), "error": m[4].strip()})
            continue
        m = re.match(rf"^(\S+)\s+(\d+)\s+(\d+)\s+{num}\s+(\d+)\s+{num}%\s+{num} GiB(.*)$", line)
        if not m:
            continue
        row = {"model": m[1], "T": int(m[2]), "B": int(m[3]), "ms": float(m[4]), "tok_s": int(m[5]),
               "mfu": float(m[6]), "mem_gib": float(m[7]), "tok_s_profiled": None, "overhead_pct": None,
               "error": None}
        rest = m[8].strip()
        p = re.match(rf"^(\d+)\s+{num}%$", rest)
        if p:
            row["tok_s_profiled"], row["overhead_pct"] = int(p[1]), float(p[2])
        elif rest.startswith("profiled run failed:"):
            row["error"] = rest
        rows.append(row)
    return {"profiled": profiled, "rows": rows}


def parse_decode(text):
    """benchmark_gpu.sh -I's rows: model, B, graphs (0/1), decode tok/s, us/step, floor us, x floor, graph steps
    ("launched/steps"), speed-up over the eager row ("1.85x", "-"); or model, B, graphs, "failed: why"."""
    rows = []
    num = r"([\d.]+)"
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+(\d+)\s+([01])\s+failed: (.*)$", line)
        if m:
            rows.append({"model": m[1], "B": int(m[2]), "graphs": int(m[3]), "error": m[4].strip()})
            continue
        m = re.match(rf"^(\S+)\s+(\d+)\s+([01])\s+{num}\s+{num}\s+{num}\s+{num}\s+(-?\d+)/(\d+)\s+(\S+)$", line)
        if m:
            rows.append({"model": m[1], "B": int(m[2]), "graphs": int(m[3]), "tok_s": float(m[4]), "us": float(m[5]),
                         "floor_us": float(m[6]), "x_floor": float(m[7]), "graph_steps": int(m[8]),
                         "steps": int(m[9]), "speedup": fnum(m[10].rstrip("x")), "error": None})
    return {"rows": rows}


# ---------------------------------------------------------------- dev/torch_gpt2_baseline.py

def parse_torch(text):
    """Its rows (scripts/benchmark_gpu.sh's columns less MFU) and its first line (torch version, device)."""
    r = {"setup": None, "rows": [], "error": None}
    for line in text.splitlines():
        if line.startswith("torch ") and r["setup"] is None:
            r["setup"] = line.strip()
            continue
        m = re.match(r"^(\S+)\s+(\d+)\s+(\d+)\s+failed: (.*)$", line)
        if m:
            r["rows"].append({"model": m[1], "T": int(m[2]), "B": int(m[3]), "error": m[4].strip()})
            continue
        m = re.match(r"^(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+) GiB$", line)
        if m:
            r["rows"].append({"model": m[1], "T": int(m[2]), "B": int(m[3]), "ms": float(m[4]), "tok_s": int(m[5]),
                              "mem_gib": float(m[6]), "error": None})
            continue
        if r["error"] is None and re.match(r"^(torch_gpt2_baseline\.py: |Traceback|\w*Error: )", line):
            r["error"] = line.strip()
    return r


def torch_ratios(ours, theirs):
    """Per B of both runs: our tok/s over PyTorch's."""
    mine = {(x["model"], x["T"], x["B"]): x for x in ours["rows"] if x.get("tok_s")}
    out = []
    for x in theirs["rows"]:
        o = mine.get((x["model"], x["T"], x["B"]))
        if o and x.get("tok_s"):
            out.append({"B": x["B"], "ours": o["tok_s"], "torch": x["tok_s"], "ratio": round(o["tok_s"] / x["tok_s"], 3)})
    return out


# ---------------------------------------------------------------- profile_gpt2cu

# What profile_gpt2cu's output says beyond its profile directory: (pattern, conversion).
PROFILE_LOG_FIELDS = {
    "config": (r"^profile_gpt2cu: (.*)$", str),
    "ceilings": (r"^ceilings: (.*)$", str),
    "written_to": (r"^profile written to (\S+?)/? \(", str),
    "counters": (r"^counters: (\d+) kernels counted", int),
    "counters_note": (r"^counters: (?!\d+ kernels counted)(.*)$", str),
}
# The numbers read from the profile directory's profile.json (llmc/profiler/writers.cpp), None without it.
PROFILE_JSON_FIELDS = ("tok_s", "ms_per_step", "gpu_ms_per_step", "mfu", "peak_mem_gib", "kernels", "dropped",
                       "cupti_overhead_ms", "top_kernel", "findings", "measured", "energy")


def profile_json_numbers(path):
    """Throughput, records, the top kernel, the findings' rules and the "Measured vs analytic" rows (counters
    "subblocks", --counters only) of a profile.json; None when it is missing."""
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    t, rec = j["throughput"], j["records"]
    per_step = (lambda v: round(v / t["steps"], 3)) if t["steps"] else (lambda v: None)
    rounded = lambda v, n: round(v, n) if v is not None else None
    top = j["kernels"][0]["kernel"] if j["kernels"] else None
    return {"tok_s": rounded(t["tokens_per_s"], 0), "ms_per_step": per_step(t["wall_s"] * 1e3),
            "gpu_ms_per_step": per_step(t["gpu_time_us"] / 1e3), "mfu": rounded(t["mfu_pct"], 1),
            "peak_mem_gib": round(j["context"]["peak_memory_bytes"] / 2**30, 2), "kernels": rec["kernels"],
            "dropped": rec["dropped"], "cupti_overhead_ms": rec["cupti_overhead_ms"],
            "top_kernel": kernel_key(top).split("::")[-1] if top else None,
            "findings": [f["rule"] for f in j["findings"]],
            "measured": (j.get("counters") or {}).get("subblocks", []),
            "energy": j.get("energy")}


def parse_profile(text, report_dir=None):
    """profile_gpt2cu's log and the profile.json it wrote: the directory of its "profile written to" line, looked for
    in report_dir (gpu_check.sh writes it there; the log names the path on the machine that ran it)."""
    lines = text.splitlines()
    r = {"steps": [], "no_profile": False, "measured": [], "gemm_hw_over_analytic": None, "worst_gemm_row": None,
         "errors": [], "profile_json": None}
    for key, (pattern, conv) in PROFILE_LOG_FIELDS.items():
        m = re.search(pattern, text, re.M)
        r[key] = conv(m[1]) if m else None
    numbers = None
    if r["written_to"] and report_dir:
        path = os.path.join(report_dir, os.path.basename(r["written_to"]), "profile.json")
        numbers = profile_json_numbers(path)
        r["profile_json"] = path if numbers else None
    r.update(numbers or {k: None for k in PROFILE_JSON_FIELDS})
    r["findings"] = r["findings"] or []
    r["measured"] = r["measured"] or []
    for m in map(STEP_RE.match, lines):  # the training driver's step lines, warmup steps first
        if m:
            r["steps"].append({"step": int(m[1]), "loss": float(m[3]), "ms": float(m[6]), "tok_s": int(m[7])})
    r["no_profile"] = "profiler: no in-process profile written" in text
    for line in lines:
        if line.startswith("error") or "CUDA error" in line:
            r["errors"].append(line.strip())
    total = next((x for x in r["measured"] if x["subblock"] == "total"), None)
    if total and total.get("gemm_flops_analytic") and total.get("tensor_flops_counted") is not None:
        r["gemm_hw_over_analytic"] = round(total["tensor_flops_counted"] / total["gemm_flops_analytic"], 4)
    worst = None
    for x in r["measured"]:
        if x["subblock"] != "total" and x.get("gemm_flops_analytic") and x.get("tensor_flops_counted") is not None:
            ratio = x["tensor_flops_counted"] / x["gemm_flops_analytic"]
            if worst is None or abs(ratio - 1) > abs(worst[1] - 1):
                worst = (f"{x['subblock']} {x['phase']}".strip(), ratio)
    if worst:
        r["worst_gemm_row"] = {"row": worst[0], "ratio": round(worst[1], 4)}
    return r


# ---------------------------------------------------------------- ncu --csv joined with kernels.csv

def kernel_key(name):
    """A kernel name as both sides can agree on it: no return type, no argument list, no spaces
    (cxxabi writes "f<64, 64>(int*)", ncu "void f<64, 64>(int *)" or "f<64, 64>(T1)")."""
    s = name.strip().replace("(anonymous namespace)", "{anonymous}")
    depth, cut = 0, len(s)
    for i, c in enumerate(s):  # the argument list starts at the first '(' outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            cut = i
            break
    s = s[:cut]
    if s.startswith("void "):
        s = s[5:]
    return re.sub(r"\s+", "", s)


UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "nsecond(s)": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
           "s": 1e9, "second": 1e9, "": 1.0}


def ncu_csv_rows(text):
    """The rows of `ncu --csv` output, its header first; the profiled program's own output and ==PROF== lines
    around the CSV are ignored. [] without one."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    return [] if start is None else list(csv.reader(io.StringIO("\n".join(lines[start:]))))


def ncu_launches(text):
    """(ID, kernel name, gpu__time_duration in ns) per launch from `ncu --csv` output, long or wide layout;
    the profiled program's own output and ==PROF== lines around the CSV are ignored."""
    rows = ncu_csv_rows(text)
    if not rows:
        return []
    head, out = rows[0], []
    if "Metric Name" in head:  # one row per (launch, metric)
        ix = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
        for row in rows[1:]:
            if len(row) != len(head) or row[ix["Metric Name"]] != "gpu__time_duration.sum":
                continue
            v = fnum(row[ix["Metric Value"]])
            scale = UNIT_NS.get(row[ix["Metric Unit"]].strip())
            if v is not None and scale is not None:
                out.append((row[ix["ID"]], row[ix["Kernel Name"]], v * scale))
    elif "gpu__time_duration.sum" in head:  # one row per launch, a units row first
        col, name_col = head.index("gpu__time_duration.sum"), head.index("Kernel Name")
        scale = 1.0
        for row in rows[1:]:
            if len(row) != len(head):
                continue
            if not row[0]:
                scale = UNIT_NS.get(row[col].strip(), 1.0)
                continue
            v = fnum(row[col])
            if v is not None:
                out.append((row[0], row[name_col], v * scale))
    return out


def parse_ncu(text, kernels_csv=None):
    r = {"launches": 0, "kernels": [], "ncu_only": [], "profiler_only": [], "joined": 0, "ratio_median": None,
         "ratio_min": None, "ratio_max": None, "ratio_total": None, "error": None}
    if "ERR_NVGPUCTRPERM" in text:
        r["error"] = "no permission to read GPU performance counters (ERR_NVGPUCTRPERM)"
    else:
        m = re.search(r"^==ERROR== (.*)$", text, re.M)
        if m:
            r["error"] = m[1].strip()
    ncu = {}
    for _, name, ns in ncu_launches(text):
        e = ncu.setdefault(kernel_key(name), {"name": name, "launches": 0, "ns": 0.0})
        e["launches"] += 1
        e["ns"] += ns
    r["launches"] = sum(e["launches"] for e in ncu.values())
    prof = {}
    if kernels_csv is not None:
        for row in csv.DictReader(io.StringIO(kernels_csv)):
            if row.get("category") in ("memcpy", "memset") or row["kernel"].startswith("["):
                continue
            e = prof.setdefault(kernel_key(row["kernel"]), {"name": row["kernel"], "calls": 0, "us": 0.0})
            e["calls"] += int(row["calls"])
            e["us"] += float(row["total_us"])
    ratios, ncu_weighted, prof_total = [], 0.0, 0.0
    for key, p in sorted(prof.items(), key=lambda kv: -kv[1]["us"]):
        if key not in ncu:
            r["profiler_only"].append(p["name"])
            continue
        n = ncu[key]
        ncu_avg, prof_avg = n["ns"] / n["launches"] / 1e3, p["us"] / p["calls"]
        ratio = ncu_avg / prof_avg if prof_avg > 0 else None
        r["kernels"].append({"kernel": key, "ncu_launches": n["launches"], "ncu_avg_us": round(ncu_avg, 3),
                             "profiler_calls": p["calls"], "profiler_avg_us": round(prof_avg, 3),
                             "ratio": None if ratio is None else round(ratio, 4)})
        if ratio is not None:
            ratios.append(ratio)
            ncu_weighted += ncu_avg * p["calls"]
            prof_total += p["us"]
    r["ncu_only"] = sorted(n["name"] for k, n in ncu.items() if k not in prof) if prof else []
    r["joined"] = len(ratios)
    if ratios:
        r.update(ratio_median=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios),
                 ratio_total=ncu_weighted / prof_total if prof_total > 0 else None)
    return r


# ---------------------------------------------------------------- ncu counters against the emulated ones

# The line the ncu stage prints before its counters run; what follows it in the log is that run's CSV.
NCU_COUNTERS_MARK = "# ncu counters"
# The emulated counters' CSV (make emu_counters; the bundle carries it) as the ncu stage copies it.
EMU_COUNTERS_CSV = os.path.join("ncu", "emu_counters.csv")
# Each metric's emulated counterpart in emu_counters.csv: the column of the same name, except DRAM bytes, which
# the emulator bounds (min: distinct sectors, max: every request's sectors) rather than counts.
DRAM_BOUNDS = {"dram__bytes_read.sum": ("dram_read_bytes_min", "dram_read_bytes_max"),
               "dram__bytes_write.sum": ("dram_write_bytes_min", "dram_write_bytes_max")}


def ncu_metric_names(path=None):
    """The metrics of scripts/ncu_metrics.txt, in order."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncu_metrics.txt")
    with open(path, encoding="utf-8") as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


def base_kernel(name):
    """A kernel's function name alone, as the emulator names it (its launch's source text) and ncu does (the
    demangled signature): no namespace, template arguments or argument list."""
    key = kernel_key(name)
    return re.sub(r"<.*", "", key).split("::")[-1]


def split_ncu_log(text):
    """The ncu stage's log: the timing run's part and the counters run's part (after NCU_COUNTERS_MARK)."""
    i = text.find("\n" + NCU_COUNTERS_MARK + "\n")
    return (text, "") if i < 0 else (text[:i + 1], text[i + len(NCU_COUNTERS_MARK) + 2:])


def ncu_metric_rows(text):
    """{kernel: {"launches": n, metric: sum}} from `ncu --csv` long output (one row per launch and metric)."""
    rows = ncu_csv_rows(text)
    if not rows:
        return {}
    head, out, seen = rows[0], {}, set()
    if "Metric Name" not in head:
        return {}
    ix = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    for row in rows[1:]:
        if len(row) != len(head):
            continue
        v = fnum(row[ix["Metric Value"]])
        if v is None:
            continue
        k = out.setdefault(base_kernel(row[ix["Kernel Name"]]), {"launches": 0})
        if row[ix["ID"]] not in seen:
            seen.add(row[ix["ID"]])
            k["launches"] += 1
        k[row[ix["Metric Name"]]] = k.get(row[ix["Metric Name"]], 0.0) + v
    return out


def emulated_rows(emu_csv):
    """{kernel: {"launches": n, column: sum}} over the training step's rows of emu_counters.csv (the ncu stage
    profiles training steps; the decode rows stay out)."""
    out = {}
    for row in csv.DictReader(io.StringIO(emu_csv)):
        if row.get("counted") != "yes" or row.get("phase") not in ("fwd", "bwd", "opt"):
            continue
        k = out.setdefault(base_kernel(row["kernel"]), {"launches": 0})
        k["launches"] += int(row["launches"])
        for col, v in row.items():
            x = fnum(v) if col not in ("kernel", "subblock", "phase", "layer", "counted") else None
            if x is not None and col != "launches":
                k[col] = k.get(col, 0.0) + x
    return out


def parse_ncu_counters(text, emu_csv, metrics):
    """Per kernel and metric, ncu's count per launch against the emulator's (per launch of the same kernel in one
    training step of the same shapes): equal within 1%, or for DRAM bytes within the emulated bounds."""
    r = {"kernels": [], "compared": 0, "equal": 0, "differ": [], "ncu_only": [], "emulated_only": [],
         "status": None}
    ncu = ncu_metric_rows(text)
    if not ncu:
        r["status"] = "no ncu counters in the log"
        return r
    if emu_csv is None:
        r["status"] = "emulated; not yet compared with ncu (no emulated counters)"
        return r
    emu = emulated_rows(emu_csv)
    r["ncu_only"] = sorted(k for k in ncu if k not in emu)
    r["emulated_only"] = sorted(k for k in emu if k not in ncu)
    for kernel in sorted(k for k in ncu if k in emu):
        n, e = ncu[kernel], emu[kernel]
        for m in metrics:
            if m not in n:
                continue
            measured = n[m] / n["launches"]
            if m in DRAM_BOUNDS:
                lo, hi = (e.get(c, 0.0) / e["launches"] for c in DRAM_BOUNDS[m])
                ok = lo <= measured <= hi * 1.01
                row = {"kernel": kernel, "metric": m, "ncu_per_launch": round(measured, 3),
                       "emulated_per_launch": f"{lo:.0f}..{hi:.0f}", "ratio": None, "agrees": ok}
            else:
                emulated = e.get(m, 0.0) / e["launches"]
                ratio = measured / emulated if emulated else (1.0 if measured == 0 else None)
                ok = ratio is not None and abs(ratio - 1.0) <= 0.01
                row = {"kernel": kernel, "metric": m, "ncu_per_launch": round(measured, 3),
                       "emulated_per_launch": round(emulated, 3), "ratio": None if ratio is None else round(ratio, 4),
                       "agrees": ok}
            r["kernels"].append(row)
            r["compared"] += 1
            r["equal"] += ok
            if not ok:
                r["differ"].append(f"{kernel} {m}")
    r["status"] = "compared"
    return r


def table_csv(rows, columns, cell=lambda row, col: row[col]):
    """rows (dicts) as CSV with these columns."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([cell(row, c) for c in columns])
    return out.getvalue()


def counters_table_csv(p):
    return table_csv(p["kernels"], ["kernel", "metric", "ncu_per_launch", "emulated_per_launch", "ratio", "agrees"],
                     lambda row, col: ("yes" if row[col] else "no") if col == "agrees" else row[col])


def ncu_table_csv(p):
    return table_csv(p["kernels"], ["kernel", "ncu_launches", "ncu_avg_us", "profiler_calls", "profiler_avg_us", "ratio"])


# ---------------------------------------------------------------- inventory, build, data, nsys

def parse_inventory(text):
    r = {"gpu": None, "driver": None, "compute_cap": None, "memory": None, "driver_cuda": None, "nvcc": None,
         "cuda_runtime": None, "cublaslt": None, "cupti": None, "tools": {}, "libs": {}, "clocks": None}
    for line in text.splitlines():
        m = re.match(r"^gpu: (.*)$", line)
        if m and r["gpu"] is None:
            # nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,... --format=csv,noheader
            r.update(zip(("gpu", "driver", "compute_cap", "memory"), (x.strip() for x in m[1].split(","))))
        m = re.search(r"CUDA Version: ([\d.]+)", line)
        if m:
            r["driver_cuda"] = m[1]
        m = re.search(r"Cuda compilation tools, release ([\d.]+), V([\d.]+)", line)
        if m:
            r["nvcc"] = m[2]
        m = re.match(r"^(cuda_runtime|cublaslt|cupti): (\S+)", line)
        if m:
            r[m[1]] = m[2]
        m = re.match(r"^(tool|lib) (\S+): (.*)$", line)
        if m:
            r[m[1] + "s"][m[2]] = None if m[3].startswith("not found") else m[3]
        m = re.match(r"^clocks: (.*)$", line)  # SM, memory, max SM, max memory (nvidia-smi)
        if m:
            r["clocks"] = m[1].strip()
    return r


def parse_build(text):
    compiles = len(re.findall(r"^(?:nvcc|g\+\+|c\+\+|\S*/nvcc)\s.*\s-o\s", text, re.M))
    err = re.search(r"^.*(?:error:|Error \d+|No rule to make target).*$", text, re.M)
    return {"compiled": compiles, "up_to_date": compiles == 0, "error": err[0].strip() if err else None}


def parse_data(text):
    r = {"already_prepared": bool(re.search(r"^\S+: already prepared$", text, re.M)), "train_tokens": None, "val_tokens": None, "error": None}
    for m in re.finditer(r"^wrote (\d+) tokens to (\S+)$", text, re.M):
        r["val_tokens" if "val" in os.path.basename(m[2]) else "train_tokens"] = int(m[1])
    m = re.search(r"^.*error.*$", text, re.M)
    if m:
        r["error"] = m[0].strip()
    return r


def parse_nsys(text):
    r = {"report": None, "report_bytes": None, "steps": 0, "tok_s": None, "nvtx_llmc": False, "error": None}
    m = re.search(r"^nsys report: (\S+) \((\d+) bytes\)$", text, re.M)
    if m:
        r["report"], r["report_bytes"] = m[1], int(m[2])
    # The training driver's step lines, the warmup steps first: the profiled ones are those after them.
    m = re.search(r"(\d+) warmup \+ \d+ profiled steps", text)
    warmup = int(m[1]) if m else 0
    steps = [int(m[7]) for m in map(STEP_RE.match, text.splitlines()) if m][warmup:]
    r["steps"] = len(steps)
    if steps:
        r["tok_s"] = statistics.mean(steps)
    r["nvtx_llmc"] = bool(re.search(r"\bllmc[:@/](step|forward|backward|optimizer)\b", text))
    m = re.search(r"^.*(?:Error|ERROR|error:).*$", text, re.M)
    if m:
        r["error"] = m[0].strip()
    return r


PARSERS = {"inventory": parse_inventory, "build": parse_build, "gtest": parse_gtest, "sanitizer": parse_sanitizer,
           "ladder": parse_ladder, "data": parse_data, "train": parse_train, "benchmark": parse_benchmark,
           "decode": parse_decode,
           "torch": parse_torch, "profile": parse_profile, "nsys": parse_nsys}


# ---------------------------------------------------------------- stage verdicts

class JudgeContext:
    """What a stage's verdict may look at besides its log: the report directory (other stages' logs and files),
    whether to write files there, whether the stage was killed (its log ends early)."""

    def __init__(self, kind, report_dir=None, write_files=False, killed=False):
        self.kind, self.report_dir, self.write_files, self.killed = kind, report_dir, write_files, killed


def judge_ncu(stage, rc, text, ctx):
    """Ncu launches joined with the profiler's kernels.csv; writes ncu_vs_profiler.csv (write_files)."""
    kcsv = None
    if ctx.report_dir:
        path = os.path.join(ctx.report_dir, NCU_PROFILE_DIR, "kernels.csv")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                kcsv = f.read()
    timing, counters = split_ncu_log(text)
    p = parse_ncu(timing, kcsv)
    if ctx.write_files and ctx.report_dir and p["kernels"]:
        with open(os.path.join(ctx.report_dir, "ncu_vs_profiler.csv"), "w", encoding="utf-8") as f:
            f.write(ncu_table_csv(p))
    emu_csv = None
    if ctx.report_dir and os.path.exists(os.path.join(ctx.report_dir, EMU_COUNTERS_CSV)):
        with open(os.path.join(ctx.report_dir, EMU_COUNTERS_CSV), encoding="utf-8") as f:
            emu_csv = f.read()
    c = parse_ncu_counters(counters, emu_csv, ncu_metric_names())
    if ctx.write_files and ctx.report_dir and c["kernels"]:
        with open(os.path.join(ctx.report_dir, "ncu_vs_emulated.csv"), "w", encoding="utf-8") as f:
            f.write(counters_table_csv(c))
    if c["status"] == "compared":
        differ = ""
        if c["differ"]:
            differ = " (differ: " + ", ".join(c["differ"][:4]) + ("..." if len(c["differ"]) > 4 else "") + ")"
        counted = (f"; counters: {c['equal']} of {c['compared']} (kernel, metric) equal to the emulated ones{differ}"
                   " (ncu_vs_emulated.csv)")
    else:
        counted = f"; counters: {c['status']}"
    if p["error"]:
        return "fail", p["error"]
    if kcsv is None:
        return "fail", f"no {NCU_PROFILE_DIR}/kernels.csv from the profiler run; {p['launches']} ncu launches"
    key = (f"{p['launches']} launches, {p['joined']} kernels joined; ncu/profiler per-launch time: median "
           f"{fmt(p['ratio_median'], '.3f')}, range {fmt(p['ratio_min'], '.2f')}-{fmt(p['ratio_max'], '.2f')}, "
           f"step total {fmt(p['ratio_total'], '.3f')} (ncu_vs_profiler.csv)")
    if p["profiler_only"]:
        key += f"; {len(p['profiler_only'])} profiled kernels not seen by ncu"
    if p["ncu_only"]:
        key += f"; {len(p['ncu_only'])} only under ncu (outside the profiled steps)"
    key += counted
    return ("pass" if rc == 0 and p["joined"] > 0 and not c["differ"] else "fail"), key


def judge_inventory(stage, rc, text, ctx):
    """The GPU, driver and libraries found."""
    p = PARSERS[ctx.kind](text)
    tools = ", ".join(f"{t} {'yes' if v else 'no'}" for t, v in {**p["tools"], **p["libs"]}.items())
    key = (f"{p['gpu'] or '?'} (sm {p['compute_cap'] or '?'}, {p['memory'] or '?'}), driver {p['driver'] or '?'} "
           f"(CUDA {p['driver_cuda'] or '?'}), nvcc {p['nvcc'] or '?'}, cuBLASLt {p['cublaslt'] or '?'}, "
           f"CUPTI {p['cupti'] or '?'}; {tools}")
    if p["clocks"]:
        key += f"; clocks (SM, memory, max SM, max memory) {p['clocks']}"
    return ("pass" if rc == 0 and p["gpu"] else "fail"), key


def judge_build(stage, rc, text, ctx):
    """What make compiled."""
    p = PARSERS[ctx.kind](text)
    if ctx.killed:
        return "fail", f"{p['compiled']} compiler runs before it was stopped"
    if rc != 0:
        return "fail", p["error"] or f"make exited {rc}"
    return "pass", "up to date" if p["up_to_date"] else f"{p['compiled']} compiler runs"


def judge_gtest(stage, rc, text, ctx):
    """The GoogleTest summary."""
    p = PARSERS[ctx.kind](text)
    return ("pass" if rc == 0 and gtest_ok(p) else "fail"), gtest_key(p)


def judge_sanitizer(stage, rc, text, ctx):
    """Compute-sanitizer's summary and the tests it ran."""
    p = PARSERS[ctx.kind](text)
    g = p["gtest"]
    if p["errors"] is None:
        key = "no sanitizer summary"
    elif p["hazards"] is not None:
        key = f"{p['hazards']} hazards ({p['errors']} errors, {p['warnings']} warnings)"
    else:
        key = f"{p['errors']} errors"
    if p["first_error"] and p["errors"]:
        key += f" (first: {p['first_error'][:100]})"
    key += "; tests: " + gtest_key(g)
    ok = rc == 0 and p["errors"] == 0 and gtest_ok(g)
    return ("pass" if ok else "fail"), key


def judge_ladder(stage, rc, text, ctx):
    """Every kernel benchmark ran and validated."""
    p = PARSERS[ctx.kind](text)
    progs = p["programs"]
    ok = rc == 0 and progs and all(x["exit"] == 0 and not x["checks_failed"] and not x.get("missing")
                                   for x in progs)
    return ("pass" if ok else "fail"), ladder_key(p)


def judge_data(stage, rc, text, ctx):
    """The shards written (or already there)."""
    p = PARSERS[ctx.kind](text)
    if rc != 0:
        return "fail", p["error"] or f"exited {rc}"
    if p["already_prepared"]:
        return "pass", "already prepared"
    if p["train_tokens"] is None or ctx.killed:
        return "fail", "no shards written"
    return "pass", f"{p['train_tokens']} train, {p['val_tokens']} val tokens"


def judge_train(stage, rc, text, ctx):
    """Steps, losses against the CPU reference, val, sample."""
    p = PARSERS[ctx.kind](text)
    v = p["val_losses"]
    key = (f"{p['steps']} steps, loss {fmt(p['first_loss'], '.3f')} -> {fmt(p['last_loss'], '.3f')}, val "
           + (" -> ".join(f"{x:.3f}" for x in v) if v else "none")
           + f"; {fmt(p['tok_s'], '.0f')} tok/s, {fmt(p['ms'], '.1f')} ms/step, MFU {fmt(p['mfu'], '.1f')}%, "
           f"{fmt(p['mem_gib'], '.1f')} GiB; sample {'yes' if p['sample'] else 'no'}")
    problems = []
    if p["max_steps"] is None or p["steps"] < p["max_steps"]:
        problems.append(f"only {p['steps']} steps" + (f" of {p['max_steps']}" if p["max_steps"] else ""))
    if p["reference"]:
        ref = p["reference"]
        key += ("; vs CPU reference (tolerance " + f"{REF_LOSS_TOL:.0%}): "
                + ", ".join(f"step {x['step']} {fmt(x['gpu'], '.4f')}/{x['cpu']:.4f}"
                            + ("" if x["rel"] is None else f" ({x['rel']:+.2%})") for x in ref))
        off = [x for x in ref if x["rel"] is None or abs(x["rel"]) > REF_LOSS_TOL or not x["same_lr"]]
        if off:
            problems.append("losses off the CPU reference at step " + ", ".join(str(x["step"]) for x in off))
    if p["train_falls"] is False:
        problems.append("train loss did not fall")
    if p["val_falls"] is not True:
        problems.append("val loss did not fall" if p["val_falls"] is False else "fewer than 2 val losses")
    if not p["sample"]:
        problems.append("no sample")
    if p["errors"]:
        problems.append(p["errors"][0])
    if rc != 0 or problems:
        return "fail", "; ".join(problems or [f"exited {rc}"]) + "; " + key
    return "pass", key


def judge_benchmark(stage, rc, text, ctx):
    """One row per batch size, and the profiling overhead."""
    p = PARSERS[ctx.kind](text)
    rows = p["rows"]
    parts = []
    for x in rows:
        if x.get("ms") is None:
            parts.append(f"B={x['B']} failed: {x['error']}")
            continue
        s = f"B={x['B']} {x['tok_s']} tok/s {x['ms']:.1f} ms MFU {x['mfu']:.1f}% {x['mem_gib']:.1f} GiB"
        if x["overhead_pct"] is not None:
            s += f", profiling overhead {x['overhead_pct']:.2f}%"
        if x["error"]:
            s += f" ({x['error']})"
        parts.append(s)
    over = [x["overhead_pct"] for x in rows if x.get("overhead_pct") is not None]
    if over:
        parts.append(f"overhead target <= 2%: {'met' if max(over) <= 2 else 'missed'}")
    ok = rc == 0 and rows and all(x.get("ms") is not None and not x["error"] for x in rows)
    return ("pass" if ok else "fail"), "; ".join(parts) or "no result rows"


def judge_decode(stage, rc, text, ctx):
    """Each B's step eager and as a graph, against the HBM floor; the graph rows must have replayed graphs. The goal
    (doc/gpu_trainer.md): B=1 with graphs within 1.5x its floor."""
    rows = PARSERS[ctx.kind](text)["rows"]
    parts, ok = [], rc == 0 and bool(rows)
    for x in rows:
        what = f"B={x['B']} {'graph' if x['graphs'] else 'eager'}"
        if x["error"]:
            parts.append(f"{what} failed: {x['error']}")
            ok = False
            continue
        s = f"{what} {x['us']:.1f} us/step ({x['x_floor']:.2f}x floor {x['floor_us']:.1f} us)"
        if x["graphs"]:
            s += f", {x['graph_steps']}/{x['steps']} steps replayed"
            if x["speedup"] is not None:
                s += f", {x['speedup']:.2f}x eager"
            ok = ok and x["graph_steps"] > 0
        parts.append(s)
    b1 = [x for x in rows if x["B"] == 1 and x["graphs"] == 1 and not x["error"]]
    if b1:
        parts.append(f"goal B=1 <= 1.5x floor: {'met' if b1[0]['x_floor'] <= 1.5 else 'missed'}")
    return ("pass" if ok else "fail"), "; ".join(parts) or "no result rows"


def judge_torch(stage, rc, text, ctx):
    """Compiled PyTorch's tok/s against ours."""
    p = PARSERS[ctx.kind](text)
    bench = {"rows": []}
    log = os.path.join(ctx.report_dir or "", "logs", "benchmark.log")
    if ctx.report_dir and os.path.exists(log):
        bench = parse_benchmark(read_log(log))
    ratios = {x["B"]: x for x in torch_ratios(bench, p)}
    parts = []
    for x in p["rows"]:
        if x.get("tok_s") is None:
            parts.append(f"B={x['B']} failed: {x['error']}")
            continue
        s = f"B={x['B']} {x['tok_s']} tok/s {x['ms']:.1f} ms {x['mem_gib']:.1f} GiB"
        rt = ratios.get(x["B"])
        s += f", ours/torch {rt['ratio']:.3f} ({rt['ours']} tok/s)" if rt else ", no benchmark row to compare"
        parts.append(s)
    key = "; ".join(parts) or (p["error"] or "no result rows")
    if p["setup"]:
        key += f" ({p['setup']})"
    ok = rc == 0 and p["rows"] and all(x.get("tok_s") is not None for x in p["rows"])
    return ("pass" if ok else "fail"), key


def judge_profile(stage, rc, text, ctx):
    """Throughput, records, findings; counters for profile_counters."""
    p = parse_profile(text, ctx.report_dir)
    key = (f"{fmt(p['tok_s'], '.0f')} tok/s, {fmt(p['ms_per_step'], '.2f')} ms/step (GPU "
           f"{fmt(p['gpu_ms_per_step'], '.2f')}), MFU {fmt(p['mfu'], '.1f')}%, {fmt(p['kernels'], 'd')} kernels, "
           f"{fmt(p['dropped'], 'd')} dropped, top {p['top_kernel'] or '?'}; findings: "
           f"{', '.join(p['findings']) or 'none'}")
    problems = []
    if not p["written_to"]:
        problems.append("no profile written")
    elif not p["profile_json"]:
        problems.append(f"no profile.json of {os.path.basename(p['written_to'])} in the report directory")
    if p["dropped"]:
        problems.append(f"{p['dropped']} CUPTI records dropped")
    if p["errors"]:
        problems.append(p["errors"][0])
    if stage == "profile_counters":
        if p["counters"] is None:
            problems.append("counters not collected: " + (p["counters_note"] or "no counters line"))
        else:
            key += f"; counters: {p['counters']} kernels"
            if p["gemm_hw_over_analytic"] is not None:
                key += f", tensor/analytic GEMM FLOPs {p['gemm_hw_over_analytic']:.4f}"
            if p["worst_gemm_row"]:
                key += f" (furthest: {p['worst_gemm_row']['row']} {p['worst_gemm_row']['ratio']:.4f})"
            if p["counters_note"]:
                key += f"; {p['counters_note']}"
    if stage == "energy":
        key, problem = energy_key(p["energy"], key)
        if problem:
            problems.append(problem)
    if rc != 0 or problems:
        return "fail", "; ".join(problems or [f"exited {rc}"]) + "; " + key
    return "pass", key


def energy_key(e, key):
    """The energy stage's figures from profile.json's "energy": the step's joules, idle power, the closure and the
    widest interval; a problem when it was not measured."""
    if not e or not e.get("rows"):
        return key, "energy not measured: " + ((e or {}).get("status") or "no energy in profile.json")
    rows = {(r["sub_block"], r["phase"]): r for r in e["rows"]}
    step = rows.get(("step", "all"), {})
    parts = [r for r in e["rows"] if r["sub_block"] not in ("step", "idle") and r.get("j_per_step")]
    widest = max(parts, key=lambda r: (r["ci95_high"] - r["ci95_low"]) / r["j_per_step"], default=None)
    c = e.get("closure") or {}
    key += (f"; energy: step {fmt(step.get('j_per_step'), '.4g')} J at {fmt(step.get('watts'), '.0f')} W, idle "
            f"{fmt(e.get('idle_w'), '.0f')} W, sub-blocks sum {fmt(c.get('diff_pct'), '+.1f')}% of the step, "
            f"{e.get('repeats')} repetitions, counter every {fmt(e.get('counter_period_ms'), '.0f')} ms")
    if widest:
        half = (widest["ci95_high"] - widest["ci95_low"]) / 2 / widest["j_per_step"] * 100
        key += f", widest interval {widest['sub_block']} {widest['phase']} +-{half:.0f}%"
    return key, None


def judge_nsys(stage, rc, text, ctx):
    """The report file and the NVTX domain."""
    p = PARSERS[ctx.kind](text)
    key = (f"report {p['report'] or 'missing'}"
           + (f" ({p['report_bytes'] / 1e6:.1f} MB)" if p["report_bytes"] else "")
           + f", {p['steps']} steps at {fmt(p['tok_s'], '.0f')} tok/s under nsys, NVTX domain llmc "
           f"{'seen' if p['nvtx_llmc'] else 'not seen'}")
    return ("pass" if rc == 0 and p["report"] else "fail"), key

# The verdict of each kind of stage: (stage, rc, log text, JudgeContext) -> (pass or fail, key numbers).
JUDGES = {"inventory": judge_inventory, "build": judge_build, "gtest": judge_gtest, "sanitizer": judge_sanitizer,
          "ladder": judge_ladder, "data": judge_data, "train": judge_train, "benchmark": judge_benchmark,
          "decode": judge_decode,
          "torch": judge_torch, "profile": judge_profile, "ncu": judge_ncu, "nsys": judge_nsys}


def judge(stage, rc, text, report_dir=None, limit=None, write_files=False, killed=False):
    """(status, key numbers) of one stage: status is pass or fail. write_files: the ncu stage writes
    report_dir/ncu_vs_profiler.csv, its per-kernel table."""
    if rc in (124, 137):
        return "fail", f"timed out after {limit or '?'} s; " + judge(stage, 0, text, report_dir, limit, write_files,
                                                                       killed=True)[1]
    kind = KIND[stage]
    return JUDGES[kind](stage, rc, text, JudgeContext(kind, report_dir, write_files, killed))


# ---------------------------------------------------------------- the report

class BadStages(Exception):
    """A stages.tsv the report cannot stand on; its text is the one line that says why, naming the file."""


def read_stages(report_dir):
    """{stage: its row} of DIR/stages.tsv, in the order they ran; BadStages where a known stage's exit status is
    neither a number nor "skip", or where the file cannot be read as text."""
    rows = {}
    path = os.path.join(report_dir, "stages.tsv")
    if not os.path.exists(path):
        return rows
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                t = line.rstrip("\n").split("\t")
                if len(t) < 4 or t[0] not in KIND:
                    continue
                if t[1] != "skip" and not re.fullmatch(r"-?\d+", t[1]):
                    raise BadStages(f"{path}: line {n}: exit status '{t[1]}' of stage {t[0]} is neither a number "
                                    f"nor skip")
                rows[t[0]] = {"rc": t[1], "seconds": t[2], "limit": t[3], "note": t[4] if len(t) > 4 else ""}
    except UnicodeDecodeError:
        raise BadStages(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise BadStages(f"{path}: {e.strerror}") from None
    return rows


def read_log(path):
    """A stage log without the lines gpu_check.sh heads it with ("# stage ...", and "# $ " before each line of
    the command)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(l for l in f if not l.startswith(("# stage ", "# $ ")))


def stage_verdict(report_dir, stage, row, write_files=False):
    if row["rc"] == "skip":
        return "skipped", row["note"]
    log = os.path.join(report_dir, "logs", stage + ".log")
    text = read_log(log) if os.path.exists(log) else ""
    status, key = judge(stage, int(row["rc"]), text, report_dir, row["limit"], write_files)
    if row["note"]:
        key += f"; {row['note']}"
    return status, key


def md_cell(s):
    return s.replace("|", "\\|").replace("\n", " ")


def make_report(report_dir, write_files=True):
    rows = read_stages(report_dir)
    if not rows:  # a report of nothing is no success
        path = os.path.join(report_dir, "stages.tsv")
        raise BadStages(f"{path}: " + ("no stage rows (no stage has run, or the file is not gpu_check.sh's)"
                                       if os.path.exists(path) else "no such file (not a gpu_check.sh report directory)"))
    what = {stage: w for stage, _, w in STAGES}
    verdicts = []
    for stage, row in rows.items():  # in the order they ran
        status, key = stage_verdict(report_dir, stage, row, write_files)
        verdicts.append((stage, what[stage], status, row["seconds"], key))
    md = ["# GPU check", "", "Produced by scripts/gpu_check.sh; every stage's output is in logs/STAGE.log (in "
          "logs.tar.gz after --lease; doc/gpu_check.md says how to read it).", "",
          "| stage | result | seconds | key numbers |", "|---|---|---|---|"]
    for stage, what, status, secs, key in verdicts:
        md.append(f"| {stage} ({md_cell(what)}) | {status} | {secs} | {md_cell(key)} |")
    counts = {s: sum(1 for v in verdicts if v[2] == s) for s in ("pass", "fail", "skipped")}
    summary = [f"GPU check: {counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped "
               f"({report_dir})"]
    for stage, _, status, secs, key in verdicts:
        summary.append(f"  {stage:<17} {status:<7} {secs:>5}s  {key[:150]}")
    return "\n".join(md) + "\n", "\n".join(summary) + "\n", counts


# ---------------------------------------------------------------- library versions (ctypes)

def library_paths(binary):
    """soname -> path as the dynamic loader resolves them for `binary` (ldd), or {}."""
    if not binary or not os.path.exists(binary):
        return {}
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {m[1]: m[2] for m in re.finditer(r"^\s*(\S+) => (\S+) \(", out, re.M)}


def load(prefix, paths):
    candidates = [p for so, p in paths.items() if so.startswith(prefix + ".so")]
    candidates += [prefix + ".so", prefix + ".so.13", prefix + ".so.12", prefix + ".so.1"]
    for c in candidates:
        try:
            return ctypes.CDLL(c), c
        except OSError:
            continue
    return None, None


def cuda_version(v):  # 12040 -> "12.4"
    return f"{v // 1000}.{v % 1000 // 10}"


# (line, library, entry point, its out-parameter type or None when it returns the number, format, where)
VERSION_QUERIES = [
    ("cuda_runtime", "libcudart", "cudaRuntimeGetVersion", ctypes.c_int, cuda_version,
     "shared {}; nvcc links it statically into the programs"),
    ("driver_api", "libcuda", "cuDriverGetVersion", ctypes.c_int, cuda_version, "{}"),
    ("cublaslt", "libcublasLt", "cublasLtGetVersion", None, lambda n: f"{n // 10000}.{n % 10000 // 100}.{n % 100}",
     "{}"),
    ("cupti", "libcupti", "cuptiGetVersion", ctypes.c_uint32, lambda n: f"api-{n}", "{}"),
]


def versions(binary):
    paths = library_paths(binary)
    lines = []
    for key, name, entry, out_type, show, where in VERSION_QUERIES:
        lib, path = load(name, paths)
        value = None
        if lib is not None and hasattr(lib, entry):
            f = getattr(lib, entry)
            if out_type is None:
                f.restype = ctypes.c_size_t
                value = f()
            else:
                v = out_type(0)
                if f(ctypes.byref(v)) == 0:
                    value = v.value
        lines.append(f"{key}: {show(value)} ({where.format(path)})" if value is not None
                     else f"{key}: ? ({name} not found, or it did not answer)")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- command line

class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"gpu_report.py: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def main(argv):
    ap = Parser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="\n".join(__doc__.split("\n")[2:]))
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    p = sub.add_parser("parse", help="one log's key numbers as JSON")
    p.add_argument("kind", choices=sorted(set(KIND.values())))
    p.add_argument("log")
    p.add_argument("--kernels", help="ncu: the profiler's kernels.csv to join with")
    p.add_argument("--emulated", help="ncu: the emulated counters (make emu_counters: build/emu/emu_counters.csv) to "
                                      "compare the log's counters run with")
    j = sub.add_parser("judge", help="one stage's verdict line")
    j.add_argument("stage", choices=[s for s, _, _ in STAGES])
    j.add_argument("dir")
    r = sub.add_parser("report", help="write report.md and summary.txt, print the summary")
    r.add_argument("dir")
    r.add_argument("-o", "--output", help="report.md path [DIR/report.md]")
    v = sub.add_parser("versions", help="library versions through ctypes")
    v.add_argument("--binary", help="resolve the libraries as this program loads them")
    a = ap.parse_args(argv)

    if a.cmd == "parse":
        try:
            text = read_log(a.log)
            kcsv = emu = None
            if a.kernels:
                with open(a.kernels, encoding="utf-8") as f:
                    kcsv = f.read()
            if a.emulated:
                with open(a.emulated, encoding="utf-8") as f:
                    emu = f.read()
        except OSError as e:
            print(f"gpu_report.py: {e}", file=sys.stderr)
            return 2
        if a.kind == "ncu":
            timing, counters = split_ncu_log(text)
            out = parse_ncu(timing, kcsv)
            out["counters"] = parse_ncu_counters(counters, emu, ncu_metric_names())
        elif a.kind == "profile":  # the report directory: the one that holds logs/LOG
            out = parse_profile(text, os.path.dirname(os.path.dirname(os.path.abspath(a.log))))
        else:
            out = PARSERS[a.kind](text)
        print(json.dumps(out, sort_keys=True))
        return 0
    if a.cmd == "versions":
        sys.stdout.write(versions(a.binary))
        return 0
    if not os.path.isdir(a.dir):
        print(f"gpu_report.py: no report directory '{a.dir}'", file=sys.stderr)
        return 2
    try:
        return judge_command(a) if a.cmd == "judge" else report_command(a)
    except BadStages as e:
        print(f"gpu_report.py: {e}", file=sys.stderr)
        return 1


def judge_command(a):
    row = read_stages(a.dir).get(a.stage)
    if row is None:
        print(f"gpu_report.py: stage {a.stage} not in {a.dir}/stages.tsv", file=sys.stderr)
        return 1
    status, key = stage_verdict(a.dir, a.stage, row)
    print(f"{a.stage} {status}: {key}")
    return 0


def report_command(a):
    md, summary, counts = make_report(a.dir, write_files=not a.output)
    out = a.output or os.path.join(a.dir, "report.md")
    with open(out, "w", encoding="utf-8") as f:
        f.write(md)
    if not a.output:
        with open(os.path.join(a.dir, "summary.txt"), "w", encoding="utf-8") as f:
            f.write(summary)
    sys.stdout.write(summary)
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
