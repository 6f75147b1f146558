#!/usr/bin/env python3
"""Sweeps model size x batch x sequence length (or prompt and generation length) through the trainers or the
inference programs and writes one CSV row per configuration, then the plots (scripts/plot_sweep.py).

Each configuration runs as its own process, with a time limit, from OUT/runs/<name>/: its log (log.txt), the
trainer's main.log, and with --profile its profile directory. A configuration that does not fit the device is
a row with status `oom`, one that fails otherwise a row with `error: <its error line>`; the sweep goes on. On the
GPU each configuration's memory plan is asked first (`--memory-plan`, with --device-memory when given): one the
plan says will not fit is the row `oom (planned)` and is not launched.
Rows already in OUT/sweep.csv are skipped, so an interrupted sweep is resumed by running it again.

    python3 scripts/sweep.py --cpu --mode train --models d2,d4 --batch 1,2 --seq 32,64 --steps 3 -o OUT
    python3 scripts/sweep.py --gpu --mode infer --models d12 --batch 1,8,32 --prompt-len 128 --gen-len 64 -o OUT

doc/sweeps.md has the columns and where each number comes from.
"""
import argparse
import csv
import ctypes
import glob
import json
import math
import os
import re
import signal
import struct
import sys
import time
import zlib

import plot_sweep

COLUMNS = [
    "mode", "device", "model", "params", "B", "T", "prompt_len", "gen_len", "status",
    "ms_per_step", "tok_s", "peak_mem_mib", "mem_limit_mib", "mfu_pct", "avg_power_w", "j_per_token",
    "flops_per_w", "train_loss", "val_loss", "fwd_ms", "bwd_ms", "opt_ms",
    "ttft_ms", "prefill_tok_s", "decode_tok_s", "latency_p50_ms", "latency_p90_ms", "log", "profile",
]
# The columns that name a configuration: a row with the same values is already done.
KEY = ("mode", "device", "model", "B", "T", "prompt_len", "gen_len")
PROGRAMS = {("train", "cpu"): "./train_gpt2", ("train", "gpu"): "./train_gpt2cu",
            ("infer", "cpu"): "./infer_gpt2", ("infer", "gpu"): "./infer_gpt2cu"}
# Each mode's own flags and their defaults.
MODE_FLAGS = {"train": {"seq": [64], "steps": 5, "warmup": 1, "input": "data/tinyshakespeare", "val_batches": 4},
              "infer": {"prompt_len": [64], "gen_len": [64]}}
# What the GPU programs say when a request does not fit: the trainer's refusal before it allocates
# ("-b 64: needs 90000 MiB of GPU memory, ..."), and CUDA's own allocation failure.
OOM = re.compile(r"MiB of GPU memory|out of memory|cudaErrorMemoryAllocation")


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as for every program of the project
        fail(message, 2)


def fail(msg, code=1):
    print(f"sweep.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def once_each(flag, values, same=lambda v: v):
    """values, refused (one line, exit 2) where two of them are the same: they would be one configuration."""
    seen = {}
    for v in values:
        if same(v) in seen:
            fail(f"{flag}: '{v}' is given twice" + ("" if seen[same(v)] == v else f" (as '{seen[same(v)]}')"), 2)
        seen[same(v)] = v
    return values


def int_list(flag):
    def parse(text):
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"{flag}: '{text}' is not a comma-separated list of positive integers")
        return once_each(flag, values)
    return parse


def model_list(text):
    models = text.split(",")
    if "" in models:
        raise argparse.ArgumentTypeError(f"--models: '{text}' is not a comma-separated list of dN or model files")
    return models


def parse_args(argv):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    dev = p.add_mutually_exclusive_group(required=True)
    dev.add_argument("--cpu", action="store_const", const="cpu", dest="device", help="train_gpt2 / infer_gpt2")
    dev.add_argument("--gpu", action="store_const", const="gpu", dest="device", help="train_gpt2cu / infer_gpt2cu")
    p.add_argument("--mode", choices=("train", "infer"), default="train")
    p.add_argument("--models", required=True, type=model_list, help="comma-separated dN or model files")
    p.add_argument("--batch", type=int_list("--batch"), default=[4], help="micro-batch sizes (default 4)")
    p.add_argument("--seq", type=int_list("--seq"), help="train: sequence lengths (default 64)")
    p.add_argument("--steps", type=int, help="train: timed steps per configuration (default 5)")
    p.add_argument("--warmup", type=int, help="train: untimed steps before them (default 1)")
    p.add_argument("--prompt-len", type=int_list("--prompt-len"), help="infer: prompt lengths (default 64)")
    p.add_argument("--gen-len", type=int_list("--gen-len"), help="infer: new tokens per sequence (default 64)")
    p.add_argument("-i", "--input", help="train: data, as the trainers' -i (default data/tinyshakespeare)")
    p.add_argument("--val-batches", type=int, help="train: batches per val loss (default 4)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--timeout", type=float, default=600, help="seconds per configuration (default 600)")
    p.add_argument("--profile", action="store_true", help="profile each configuration (phases, power)")
    p.add_argument("--program", help="the program to run (default ./train_gpt2, ./infer_gpt2cu, ...)")
    p.add_argument("--device-memory", help="--gpu: device memory the plans are checked against, as the programs' "
                   "--device-memory (e.g. 80GiB; default: the GPU's free memory)")
    p.add_argument("-o", "--output", required=True, help="directory for sweep.csv, the runs and the plots")
    p.add_argument("--no-plots", action="store_true", help="write the CSV only")
    a = p.parse_args(argv)
    # The other mode's flags are accepted, so that one command line serves both modes, and said to be unused.
    for mode, defaults in MODE_FLAGS.items():
        for name, default in defaults.items():
            if getattr(a, name) is None:
                setattr(a, name, default)
            elif mode != a.mode:
                print(f"sweep.py: note: --{name.replace('_', '-')} is a --mode {mode} flag, unused here",
                      file=sys.stderr)
    if a.steps < 1 or a.warmup < 0:
        fail("--steps must be >= 1 and --warmup >= 0", 2)
    if not 0 < a.timeout < math.inf:  # NaN too
        fail(f"--timeout: '{a.timeout:g}' is not a positive number of seconds", 2)
    if os.path.exists(a.output) and not os.path.isdir(a.output):
        fail(f"-o: '{a.output}' exists and is not a directory", 2)
    a.program = a.program or PROGRAMS[(a.mode, a.device)]
    if not os.access(a.program, os.X_OK):
        fail(f"--program: '{a.program}' is not an executable (build it, e.g. `make {os.path.basename(a.program)}`)")
    if a.mode == "train" and not (os.path.exists(a.input) or glob.glob(a.input)):
        fail(f"-i: '{a.input}' not found; prepare it with `make tinyshakespeare` or pass -i")
    for m in a.models:
        if not (re.fullmatch(r"d\d+", m) or os.path.isfile(m)):
            fail(f"--models: '{m}' is neither dN (e.g. d12) nor an existing model file", 2)
    once_each("--models", a.models, lambda m: m if re.fullmatch(r"d\d+", m) else os.path.realpath(m))
    return a


def model_params(model):
    """Parameter count from dN (the trainers' GPT-2 shapes) or a model file's header; None when unreadable."""
    m = re.fullmatch(r"d(\d+)", model)
    if m:  # llmc/gpt2_config.h, gpt2_config_for_depth: GPT-2's own widths at 12/24/36/48 layers, else 64 per layer
        L = int(m.group(1))
        maxT, C, Vp = 1024, {12: 768, 24: 1024, 36: 1280, 48: 1600}.get(L, 64 * L), 50304
    else:
        try:
            with open(model, "rb") as f:
                h = struct.unpack("<8i", f.read(32))
        except (OSError, struct.error):
            return None
        if h[0] != 20240326:
            return None
        maxT, L, C, Vp = h[2], h[4], h[6], h[7]
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


def configurations(a):
    """Every configuration of the grid, as the KEY columns, in the order they run."""
    out = []
    for model in a.models:
        for B in a.batch:
            if a.mode == "train":
                out += [dict(mode="train", device=a.device, model=model, B=str(B), T=str(T), prompt_len="",
                             gen_len="") for T in a.seq]
            else:
                out += [dict(mode="infer", device=a.device, model=model, B=str(B), T="", prompt_len=str(P),
                             gen_len=str(G)) for P in a.prompt_len for G in a.gen_len]
    return out


def run_name(cfg):
    model = cfg["model"]
    if not re.fullmatch(r"d\d+", model):  # a file: its name, and which file, since two may share a name
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.splitext(os.path.basename(model))[0])
        model = f"{base}-{zlib.crc32(os.path.abspath(model).encode()):08x}"
    shape = f"T{cfg['T']}" if cfg["mode"] == "train" else f"P{cfg['prompt_len']}_G{cfg['gen_len']}"
    return f"{cfg['mode']}_{cfg['device']}_{model}_B{cfg['B']}_{shape}"


def command(a, cfg, run_dir):
    prof = ["--profile", os.path.join(run_dir, "profile")] if a.profile else []
    if cfg["mode"] == "train":
        steps = a.warmup + a.steps
        # Val loss at the first and the last step only; no samples: they are not part of a step's time.
        return [a.program, "-i", a.input, "-e", cfg["model"], "-b", cfg["B"], "-t", cfg["T"], "-x", str(steps),
                "-v", str(steps), "-m", str(a.val_batches), "-s", "0", "--seed", str(a.seed), "-o", run_dir] + (
                    prof and prof + ["--profile-start", str(a.warmup + 1), "--profile-steps", str(a.steps)])
    return [a.program, "-e", cfg["model"], "-b", cfg["B"], "--prompt-len", cfg["prompt_len"], "-n", cfg["gen_len"],
            "--seed", str(a.seed), "--json"] + prof


def plan_command(a, cfg):
    """The GPU program's --memory-plan for the configuration (it answers without a GPU)."""
    mem = ["--device-memory", a.device_memory] if a.device_memory else []
    if cfg["mode"] == "train":
        return [a.program, "-e", cfg["model"], "-b", cfg["B"], "-t", cfg["T"], "--memory-plan"] + mem
    return [a.program, "-e", cfg["model"], "-b", cfg["B"], "--prompt-len", cfg["prompt_len"], "-n", cfg["gen_len"],
            "--memory-plan"] + mem


def planned_oom(a, cfg, log_path):
    """True when the GPU program's memory plan says the configuration does not fit; its answer goes to the log.
    A program that cannot answer (an older build, another program) is launched as before."""
    if a.device != "gpu":
        return False
    code, _ = run_limited(plan_command(a, cfg), log_path, min(a.timeout, 120))
    with open(log_path, errors="replace") as f:
        output = f.read()
    return code == 0 and re.search(r"^fits: no$", output, re.M) is not None


def adopt_orphans():
    """Makes this process the reaper of its orphaned descendants (Linux's PR_SET_CHILD_SUBREAPER), so that a
    process a run started stays below the sweep, to be waited for and stopped, even where it made a session of
    its own (setsid) and its parent ended. Elsewhere a run is its process group."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def descendants():
    """The pids of every process below this one, from /proc (none where there is no /proc)."""
    children = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:  # "pid (comm) state ppid ...": comm may hold spaces and ")"
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # it ended meanwhile
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [os.getpid()]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def stop_run(pid):
    """Kills a run: its process group, then whatever is still below this process (a process that left the
    group, and those that came to this one as orphans), again until nothing is left, reaping them all.
    Returns the largest max RSS (KiB) of the processes reaped."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    maxrss = 0
    while True:
        left = descendants()
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            while True:
                done, _, usage = os.wait4(-1, os.WNOHANG)
                if not done:
                    break
                maxrss = max(maxrss, usage.ru_maxrss)
        except ChildProcessError:
            pass
        if not left:
            return maxrss
        time.sleep(0.01)


def run_limited(argv, log_path, timeout):
    """Runs argv in a session (and process group) of its own with stdout and stderr into log_path, until it
    and every process it started have ended, or until timeout. Returns (argv's exit status, negative for a
    signal, or None when the run went past timeout and was killed; the largest max RSS of its processes in
    MiB)."""
    with open(log_path, "w") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        # OpenMP threads that sleep while waiting (doc/cpu_reference.md) unless the caller chose otherwise: a
        # spinning thread slows a run twice over when anything else shares the cores.
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "passive")
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_DUP2, log.fileno(), 1), (os.POSIX_SPAWN_DUP2, log.fileno(), 2)], setsid=True)
    deadline = time.monotonic() + timeout
    code, maxrss = None, 0
    try:
        while True:
            try:  # the run's processes are this one's only children (with adopt_orphans, its orphans too)
                done, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return code, maxrss / 1024.0
            if done:
                maxrss = max(maxrss, usage.ru_maxrss)
                if done == pid:
                    code = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                break
            else:
                time.sleep(0.05)
    except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: the run is in its own session and would go on without us
        stop_run(pid)
        raise
    return None, max(maxrss, stop_run(pid)) / 1024.0


def status_of(code, output):
    """ok, timeout, oom, or "error: " and the program's own error line."""
    if code == 0:
        return "ok"
    if code is None:
        return "timeout"
    if OOM.search(output):
        return "oom"
    if code < 0:
        return f"error: killed by {signal.Signals(-code).name}"
    errors = [l for l in output.splitlines() if l.startswith("error:")]
    return errors[-1] if errors else f"error: exit status {code}"


def step_fields(line):
    """The step line's fields by name, whatever else it carries: 'step 3/8 | loss 4.1 | ... | 12.5 ms | 810 tok/s
    | MFU 40.1% | mem 3.20 GiB' gives {'loss': 4.1, ..., 'ms': 12.5, 'tok/s': 810, 'MFU': 40.1, 'mem': 3.2}. A field
    starts with a name and a number, or a number and a unit (the unit names it); what follows in the field is
    passed over, and fields of any other shape are left out."""
    fields = {}
    for part in line.split("|"):
        m = re.match(r"\s*(?:([A-Za-z]+) )?([-+]?[0-9.]+(?:e[-+]?[0-9]+)?|nan|inf) ?(ms|tok/s|%|GiB)?(?![\w/])", part)
        if m and (m.group(1) or m.group(3)):
            try:
                fields[m.group(1) or m.group(3)] = float(m.group(2))
            except ValueError:
                pass
    return fields


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def train_results(a, cfg, output, run_dir):
    """ms per step and tok/s over the timed steps (after --warmup), MFU and device memory where the trainer prints
    them, losses from main.log, device memory limit from the GPU trainer's memory line."""
    # Training step lines only: a val-loss line starts with "step N/M" too.
    steps = [step_fields(l) for l in output.splitlines() if re.match(r"step +\d+/\d+ \| loss ", l)]
    timed = [s for s in steps[a.warmup:] if "ms" in s]
    ms = mean([s["ms"] for s in timed])
    r = {"ms_per_step": ms, "tok_s": int(cfg["B"]) * int(cfg["T"]) * 1e3 / ms if ms else None,
         "mfu_pct": mean([s["MFU"] for s in timed if "MFU" in s])}
    mem = [s["mem"] for s in timed if "mem" in s]
    if mem:
        r["peak_mem_mib"] = max(mem) * 1024
    losses = {}
    try:
        with open(os.path.join(run_dir, "main.log")) as f:
            for line in f:  # "s:4 trl:10.82 lr:..." and "s:4 tel:10.85": the last of each
                m = re.match(r"s:\d+ (trl|tel):(\S+)", line)
                if m:
                    losses[m.group(1)] = float(m.group(2))
    except OSError:
        pass
    r["train_loss"], r["val_loss"] = losses.get("trl"), losses.get("tel")
    return r


def profile_results(prof_dir):
    """Phases, MFU, power and peak memory from a training profile directory's profile.json."""
    try:
        with open(os.path.join(prof_dir, "profile.json")) as f:
            p = json.load(f)
    except (OSError, ValueError):
        return {}
    steps = p.get("steps", [])
    r = {f"{ph}_ms": mean([s[f"{ph}_ms"] for s in steps if f"{ph}_ms" in s]) for ph in ("fwd", "bwd", "opt")}
    r["mfu_pct"] = p.get("throughput", {}).get("mfu_pct")
    power = p.get("power", {})
    if power.get("integrated_steps") or power.get("samples"):
        r["avg_power_w"], r["j_per_token"] = power.get("avg_w"), power.get("joules_per_token")
        r["flops_per_w"] = power.get("flops_per_w")
    if p.get("context", {}).get("peak_memory_bytes"):
        r["peak_mem_mib"] = p["context"]["peak_memory_bytes"] / 1048576
    return r


def infer_results(output, params):
    """The inference program's final --json line, {"summary": {...}}. decode_tok_s counts the tokens of all B
    sequences, so a decode step (one token for each) takes B / decode_tok_s."""
    summary = None
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                summary = json.loads(line).get("summary", summary)
            except ValueError:
                pass
    if summary is None:
        return None
    s = summary
    r = {k: s.get(k) for k in ("ttft_ms", "prefill_tok_s", "decode_tok_s", "latency_p50_ms", "latency_p90_ms",
                               "avg_power_w", "j_per_token")}
    r["tok_s"] = s.get("decode_tok_s")
    r["ms_per_step"] = s["B"] * 1e3 / s["decode_tok_s"] if s.get("decode_tok_s") and s.get("B") else None
    r["peak_mem_mib"] = s.get("peak_mem_mib")
    params = params or s.get("params")
    # A generated token costs a forward pass, 2 FLOPs per parameter: FLOP/s per W is FLOPs per joule.
    if params and s.get("j_per_token"):
        r["flops_per_w"] = 2 * params / s["j_per_token"]
    r["params"] = params
    return r


def cell(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def run_config(a, cfg, out_dir):
    """Runs one configuration and returns its CSV row."""
    name = run_name(cfg)
    run_dir = os.path.join(out_dir, "runs", name)
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "log.txt")
    if planned_oom(a, cfg, log_path):
        return dict(cfg, params=model_params(cfg["model"]), status="oom (planned)",
                    log=os.path.relpath(log_path, out_dir))
    code, maxrss_mib = run_limited(command(a, cfg, run_dir), log_path, a.timeout)
    with open(log_path, errors="replace") as f:
        output = f.read()
    row = dict(cfg, params=model_params(cfg["model"]), status=status_of(code, output),
               log=os.path.relpath(log_path, out_dir))
    if a.profile:
        row["profile"] = os.path.relpath(os.path.join(run_dir, "profile"), out_dir)
    if a.device == "cpu":
        row["peak_mem_mib"] = maxrss_mib
        row["mem_limit_mib"] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1048576
    else:  # the free device memory the GPU trainer planned against, in its memory line or its refusal
        m = re.search(r"of ([0-9.]+) MiB free\)|MiB of GPU memory, ([0-9.]+) MiB are free", output)
        if m:
            row["mem_limit_mib"] = float(m.group(1) or m.group(2))
    if row["status"] == "ok":
        if cfg["mode"] == "train":
            row.update({k: v for k, v in train_results(a, cfg, output, run_dir).items() if v is not None})
            if a.profile:
                row.update({k: v for k, v in profile_results(os.path.join(run_dir, "profile")).items()
                            if v is not None})
        else:
            r = infer_results(output, row["params"])
            if r is None:
                row["status"] = "error: no {\"summary\": ...} line in the --json output"
            else:
                row.update({k: v for k, v in r.items() if v is not None and not (k == "peak_mem_mib" and
                                                                                 a.device == "cpu")})
    return {c: cell(row.get(c)) for c in COLUMNS}


def read_done(csv_path):
    """The rows already in the CSV (resume), after checking its columns are this version's. An empty file is
    a sweep stopped before it wrote anything."""
    if not os.path.exists(csv_path) or os.path.isfile(csv_path) and os.path.getsize(csv_path) == 0:
        return []
    if not os.path.isfile(csv_path):
        fail(f"{csv_path}: not a regular file; move it away to start a new sweep")
    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            fail(f"{csv_path}: its columns are not this sweep's; move it away to start a new sweep")
        return list(reader)


def duration(s):
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def progress(row):
    """The one-line result of a configuration."""
    shape = f"T={row['T']}" if row["mode"] == "train" else f"prompt={row['prompt_len']} gen={row['gen_len']}"
    what = f"{row['mode']} {row['device']} {row['model']} B={row['B']} {shape}: {row['status']}"
    if row["status"] == "ok":
        what += f", {float(row['ms_per_step']):.1f} ms/step, {float(row['tok_s']):.0f} tok/s" if row["tok_s"] else ""
        what += f", {float(row['peak_mem_mib']):.0f} MiB" if row["peak_mem_mib"] else ""
    return what


def main(argv):
    # A sweep stopped with SIGTERM or SIGHUP (its terminal closed) stops its running configuration too
    # (run_limited) and keeps its rows, as with Ctrl-C.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _: sys.exit(128 + number))
    a = parse_args(argv)
    adopt_orphans()
    try:
        os.makedirs(a.output, exist_ok=True)
    except OSError as e:
        fail(f"-o: cannot create '{a.output}' ({e.strerror})")
    csv_path = os.path.join(a.output, "sweep.csv")
    done = {tuple(r[k] for k in KEY) for r in read_done(csv_path)}
    todo = [c for c in configurations(a) if tuple(c[k] for k in KEY) not in done]
    skipped = len(configurations(a)) - len(todo)
    if skipped:
        print(f"resuming: {skipped} configuration(s) already in {csv_path}")
    new_file = not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0
    start = time.monotonic()
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        if new_file:  # at once: a sweep killed in its first configuration leaves a sweep.csv it can resume
            w.writeheader()
            f.flush()
        for i, cfg in enumerate(todo, 1):
            row = run_config(a, cfg, a.output)
            w.writerow(row)
            f.flush()  # a row is kept the moment it is done: an interrupted sweep resumes after it
            left = (time.monotonic() - start) / i * (len(todo) - i)
            print(f"[{i}/{len(todo)}] {progress(row)}; {duration(left)} left", flush=True)
    print(f"wrote {csv_path}")
    if not a.no_plots:
        for path in plot_sweep.plot(csv_path, a.output):
            print(f"wrote {path}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        fail("interrupted; the rows written so far are kept, and the same command resumes after them", 130)
    except OSError as e:  # a file the sweep writes or reads (a full disk, a permission): one line, not a traceback
        fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))
