#!/usr/bin/env python3
"""Loads a profile directory's trace.json in Holistic Trace Analysis and checks that HTA's standard analyses
run and agree with the profile's own tables (doc/profiling.md, "Holistic Trace Analysis").

    python3 test/hta_check.py DIR        (a profile directory, or a data-parallel one holding rank0/, rank1/, ...)

Analyses and what each must match:
  profiler steps        the steps of steps.csv
  kernel breakdown      per kernel name, HTA's total time = the sum of kernels.csv rows of that name
  temporal breakdown    busy (compute + non-compute) time = kernels.csv total; compute = its non-memory rows
                        (one stream, where nothing overlaps); idle = HTA's span minus busy
  idle time breakdown   per stream, host wait + kernel wait + other = the temporal breakdown's idle time
  kernel launch stats   one row per launching CUDA call of api.csv (cudaLaunchKernel, cudaMemcpyAsync,
                        cudaMemsetAsync), their CPU time = api.csv's, the GPU time no more than kernels.csv's

A data-parallel profile directory (rank0/, rank1/, ... beside distributed.txt) is checked rank by rank as above,
then as one set: HTA must read each trace's rank from its distributedInfo as the directory names it, and its
communication/computation overlap runs on the set (HTA counts NCCL kernels as communication: the overlap is
printed per rank with the NCCL kernel time of that rank's kernels.csv; a CPU rank has none).

Times agree within rounding: kernels.csv and api.csv hold microseconds with 3 decimals, so each row may be off
by 0.0005 us, and HTA rounds its idle time breakdown to 2; the trace holds whole nanoseconds, which HTA keeps
(HTA_DISABLE_NS_ROUNDING=1, set here).
Exit status 0: every analysis ran and agreed; 1: a disagreement or an analysis failed (each printed);
2: bad arguments, or HTA is not installed.
"""
import argparse
import csv
import logging
import math
import os
import re
import sys
import warnings

os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")

ROW_ROUNDING_US = 0.0005  # half the last decimal of a CSV time
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
NCCL_KERNEL = re.compile(r"^nccl.*Kernel")  # what HTA counts as a communication kernel


def fail(msg, code):
    print(f"hta_check.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def read_csv(d, name):
    path = os.path.join(d, name)
    if not os.path.isfile(path):
        fail(f"{d}: missing {name} (not a complete profile directory)", 1)
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def trace_name(row):
    """A kernels.csv row's name as the trace (and so HTA) has it: copies and sets are Memcpy/Memset there."""
    if row["category"] == "memcpy":
        return "Memcpy " + row["kernel"].strip("[]").split(" ", 1)[1]
    if row["category"] == "memset":
        return "Memset"
    return row["kernel"]


def close(a, b, tol):
    return abs(a - b) <= tol


class Profile:
    """The tables of one profile directory that HTA's results are compared with."""

    def __init__(self, d):
        self.kernels = read_csv(d, "kernels.csv")
        self.steps = [int(r["step"]) for r in read_csv(d, "steps.csv")]
        self.api = [r for r in read_csv(d, "api.csv") if r["kind"] == "api"]
        self.by_name = {}  # trace name -> (total_us, rows)
        for r in self.kernels:
            t, n = self.by_name.get(trace_name(r), (0.0, 0))
            self.by_name[trace_name(r)] = (t + float(r["total_us"]), n + 1)
        self.total_us = sum(float(r["total_us"]) for r in self.kernels)
        self.compute_us = sum(float(r["total_us"]) for r in self.kernels if r["category"] not in ("memcpy", "memset"))


def check_steps(hta, prof):
    steps = [int(s) for s in hta.get_profiler_steps()]
    if steps != prof.steps:
        return [f"profiler steps {steps}, steps.csv {prof.steps}"], ""
    return [], f"{len(steps)} ProfilerStep annotations, as steps.csv"


def check_kernel_breakdown(hta, prof):
    _, per_kernel = hta.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=1 << 30,
                                                 include_memory_kernels=True)
    hta_sums = per_kernel.groupby("name")["sum (us)"].sum().to_dict()
    errors = []
    for name in sorted(set(hta_sums) | set(prof.by_name)):
        ours, rows = prof.by_name.get(name, (0.0, 0))
        theirs = float(hta_sums.get(name, 0.0))
        if not close(theirs, ours, ROW_ROUNDING_US * max(rows, 1) + 1e-9 * ours):
            errors.append(f"kernel breakdown: '{name}' {theirs:.3f} us in HTA, {ours:.3f} us in kernels.csv")
    return errors, f"{len(hta_sums)} kernel names, each with kernels.csv's total time"


def check_temporal(hta, prof, one_stream):
    t = hta.get_temporal_breakdown(visualize=False).iloc[0]
    idle, compute, other, span = (float(t[c]) for c in
                                  ("idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"))
    tol = ROW_ROUNDING_US * len(prof.kernels) + 1e-9 * prof.total_us
    errors = []
    if one_stream and not close(compute + other, prof.total_us, tol):
        errors.append(f"temporal breakdown: busy {compute + other:.3f} us in HTA, kernels.csv total "
                      f"{prof.total_us:.3f} us")
    if one_stream and not close(compute, prof.compute_us, tol):
        errors.append(f"temporal breakdown: compute {compute:.3f} us in HTA, {prof.compute_us:.3f} us of "
                      "non-memory rows in kernels.csv")
    if not (idle >= 0 and close(idle, span - compute - other, 1e-6 * span)):
        errors.append(f"temporal breakdown: idle {idle:.3f} us is not the span {span:.3f} us less busy time")
    return errors, f"busy {compute + other:.3f} us (compute {compute:.3f}), idle {idle:.3f} us of {span:.3f} us", idle


def check_idle(hta, temporal_idle, one_stream):
    df, _ = hta.get_idle_time_breakdown(visualize=False)
    errors = []
    for stream, rows in df.groupby("stream"):
        if (rows["idle_time"] < 0).any():
            errors.append(f"idle time breakdown: negative idle time on stream {stream}")
    total = float(df["idle_time"].sum())
    # HTA rounds each (stream, category) row of this table to 2 decimals.
    if one_stream and not close(total, temporal_idle, 0.005 * len(df) + 1e-9 * total):
        errors.append(f"idle time breakdown: {total:.3f} us, temporal breakdown {temporal_idle:.3f} us")
    cats = ", ".join(f"{r.idle_category} {r.idle_time:.3f}" for r in df.itertuples())
    return errors, f"{total:.3f} us ({cats or 'no gaps'})"


def check_launches(hta, prof):
    df = hta.get_cuda_kernel_launch_stats(visualize=False)[0]
    calls = [r for r in prof.api if r["api"] in LAUNCH_CALLS]
    n_calls = sum(int(r["calls"]) for r in calls)
    cpu_us = sum(float(r["total_us"]) for r in calls)
    errors = []
    if len(df) != n_calls:
        errors.append(f"kernel launch stats: {len(df)} launches in HTA, {n_calls} launching calls in api.csv")
    if not close(float(df["cpu_duration"].sum()), cpu_us, ROW_ROUNDING_US * max(len(calls), 1) + 1e-9 * cpu_us):
        errors.append(f"kernel launch stats: CPU time {df['cpu_duration'].sum():.3f} us in HTA, {cpu_us:.3f} us "
                      "in api.csv")
    gpu_us = float(df["gpu_duration"].sum())
    if gpu_us > prof.total_us + ROW_ROUNDING_US * len(prof.kernels) + 1e-9 * prof.total_us:
        errors.append(f"kernel launch stats: GPU time {gpu_us:.3f} us in HTA, more than kernels.csv's "
                      f"{prof.total_us:.3f} us")
    if (df["launch_delay"] < 0).any():
        errors.append("kernel launch stats: negative launch delay")
    return errors, f"{len(df)} launches, CPU {cpu_us:.3f} us, GPU {gpu_us:.3f} us"


def check_ranks(d, rank_dirs, TraceAnalysis, create_rank_to_trace_dict):
    """A data-parallel profile: the ranks' traces as one set, each rank as HTA reads it from the trace's
    distributedInfo, and HTA's communication/computation overlap per rank. HTA counts NCCL kernels as
    communication; their time per rank is printed from kernels.csv, which check_dir's kernel breakdown has
    compared with HTA's, name by name."""
    files = [os.path.join(rd, "trace.json") for rd in rank_dirs]
    _, ranks = create_rank_to_trace_dict(files)
    want = {int(os.path.basename(rd)[len("rank"):]): f for rd, f in zip(rank_dirs, files)}
    errors = []
    if ranks != want:
        got = {r: os.path.relpath(f, d) for r, f in ranks.items()}
        return [f"ranks: HTA reads {got} from distributedInfo, the directories say "
                f"{ {r: os.path.relpath(f, d) for r, f in want.items()} }"]
    print(f"ranks: {len(ranks)} traces, each with its directory's rank in distributedInfo")
    try:
        hta = TraceAnalysis(trace_files=ranks, trace_dir=os.path.abspath(d), include_last_profiler_step=True)
        df = hta.get_comm_comp_overlap(visualize=False)
    except Exception as e:  # as in main: HTA reports a trace it cannot read by whatever its parser raises
        return [f"communication overlap: HTA raised {type(e).__name__}: {e}"]
    pct = {int(r.rank): float(r.comp_comm_overlap_pctg) for r in df.itertuples()}
    for r in sorted(ranks):
        nccl_us = sum(float(k["total_us"]) for k in Profile(os.path.join(d, f"rank{r}")).kernels
                      if NCCL_KERNEL.match(trace_name(k)))
        v = pct.get(r)
        if nccl_us == 0:
            # The CPU trainer's ranks: their MPI time is the comm sub-block, not an NCCL kernel.
            print(f"communication overlap: rank {r}: no NCCL kernels (HTA counts only those as communication)")
            if v is not None and not math.isnan(v) and v != 0:
                errors.append(f"communication overlap: rank {r}: {v}% without communication kernels")
        elif v is None or not (0 <= v <= 100):
            errors.append(f"communication overlap: rank {r}: HTA gives {v}")
        else:
            print(f"communication overlap: rank {r}: {pct[r]:.2f}% of {nccl_us:.3f} us of NCCL kernels "
                  "overlapped with computation")
    return errors


def check_dir(d, TraceAnalysis):
    """HTA's single-trace analyses on one profile directory against its tables; returns the disagreements."""
    trace = os.path.join(os.path.abspath(d), "trace.json")
    prof = Profile(d)

    # profile.json and the CSVs sit beside trace.json: name the trace, or HTA would read every *.json.
    # Every step in our traces is complete, so the last one is analysed too.
    try:
        hta = TraceAnalysis(trace_files={0: trace}, trace_dir=os.path.abspath(d), include_last_profiler_step=True)
    except Exception as e:  # HTA reports a trace it cannot read by whatever its parser raises
        fail(f"{trace}: HTA cannot load it: {type(e).__name__}: {e}", 1)
    streams = set(int(s) for s in hta.t.get_trace(0)["stream"].unique() if s >= 0)
    one_stream = len(streams) == 1

    errors = []

    def run(title, fn, *a):
        try:
            res = fn(*a)
        except Exception as e:  # an analysis that crashes is a failure of the trace, reported like the others
            errors.append(f"{title}: HTA raised {type(e).__name__}: {e}")
            return None
        errors.extend(res[0])
        print(f"{title}: {res[1]}")
        return res

    run("profiler steps", check_steps, hta, prof)
    run("kernel breakdown", check_kernel_breakdown, hta, prof)
    temporal = run("temporal breakdown", check_temporal, hta, prof, one_stream)
    if temporal:
        run("idle time breakdown", check_idle, hta, temporal[2], one_stream)
    run("kernel launch stats", check_launches, hta, prof)
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="profile directory (with trace.json, kernels.csv, steps.csv, api.csv)")
    args = ap.parse_args()
    d = args.dir
    if not os.path.isdir(d):
        fail(f"no profile directory '{d}'", 2)
    # A data-parallel profile holds one directory per rank (rank0/, rank1/, ...).
    rank_dirs = sorted((os.path.join(d, n) for n in os.listdir(d) if re.fullmatch(r"rank[0-9]+", n)),
                       key=lambda p: int(os.path.basename(p)[4:]))
    for rd in rank_dirs:
        if not os.path.isfile(os.path.join(rd, "trace.json")):
            fail(f"{rd}: missing trace.json (a rank of the data-parallel profile)", 1)
    if not rank_dirs and not os.path.isfile(os.path.join(d, "trace.json")):
        fail(f"{d}: missing trace.json", 1)
    try:
        import pandas
        from hta.common.trace_file import create_rank_to_trace_dict
        from hta.trace_analysis import TraceAnalysis
    except ImportError as e:
        fail(f"Holistic Trace Analysis not importable ({e}): "
             "python3 -m pip install HolisticTraceAnalysis==0.5.0 psutil 'pandas<3'", 2)
    if int(pandas.__version__.split(".")[0]) >= 3:
        fail(f"HTA 0.5.0 fails under pandas {pandas.__version__}: python3 -m pip install 'pandas<3'", 2)
    logging.disable(logging.WARNING)  # HTA warns about every ns-resolution trace and single-rank run
    warnings.filterwarnings("ignore", category=FutureWarning)  # pandas on HTA's own dtype handling
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # HTA's overlap ratio is 0/0 without NCCL kernels
    errors = []
    for rd in rank_dirs or [d]:
        if rank_dirs:
            print(f"{os.path.basename(rd)}:")
        errors += check_dir(rd, TraceAnalysis)
    if rank_dirs:
        errors += check_ranks(d, rank_dirs, TraceAnalysis, create_rank_to_trace_dict)
    for e in errors:
        print(f"hta_check.py: {d}: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"{d}: HTA's analyses agree with the profile's tables")


if __name__ == "__main__":
    main()
