#!/usr/bin/env python3
"""Sweeps model size x batch x sequence length (or prompt and generation length) through the trainers or the
inference programs and writes one CSV row per configuration, then the plots (scripts/plot_sweep.py).

Each configuration runs as its own process, with a time limit, from OUT/runs/<name>/: its log (log.txt), the
trainer's main.log, and with --profile its profile directory. A configuration that does not fit the device is
a row with status `oom`, one that fails otherwise a row with `error: <its error line>`; the sweep goes on. On the
GPU each configuration's memory plan is asked first (`--memory-plan`, with --device-memory when given): one the
plan says will not fit is the row `oom (planned)` and is not launched (with --device-memory, neither is one
whose plan fails: an error row). Rows already in OUT/sweep.csv are skipped, so an interrupted sweep is resumed
by running it again. The flags passed to every run, the grid and every output are checked before the first run;
OUT is locked (OUT/.lock) for one sweep at a time.

    python3 scripts/sweep.py --cpu --mode train --models d2,d4 --batch 1,2 --seq 32,64 --steps 3 -o OUT
    python3 scripts/sweep.py --gpu --mode infer --models d12 --batch 1,8,32 --prompt-len 128 --gen-len 64 -o OUT

doc/sweeps.md has the columns and where each number comes from.
"""
import argparse
import csv
import ctypes
import fcntl
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
from plot_profile import (BadInput, check_outputs, energy_parts, output_problem, read_energy, read_json_object,
                          read_table, section)

COLUMNS = [
    "mode", "device", "model", "params", "B", "T", "prompt_len", "gen_len", "status",
    "ms_per_step", "tok_s", "peak_mem_mib", "mem_limit_mib", "mfu_pct", "avg_power_w", "j_per_token",
    "flops_per_w", "energy_j_per_token", "train_loss", "val_loss", "fwd_ms", "bwd_ms", "opt_ms",
    "ttft_ms", "prefill_tok_s", "decode_tok_s", "latency_p50_ms", "latency_p90_ms", "log", "profile",
]
# The columns that name a configuration: a row with the same values is already done.
KEY = ("mode", "device", "model", "B", "T", "prompt_len", "gen_len")
PROGRAMS = {("train", "cpu"): "./train_gpt2", ("train", "gpu"): "./train_gpt2cu",
            ("infer", "cpu"): "./infer_gpt2", ("infer", "gpu"): "./infer_gpt2cu"}
# Each mode's own flags and their defaults.
MODE_FLAGS = {"train": {"seq": [64], "steps": 5, "warmup": 1, "input": "data/tinyshakespeare", "val_batches": 4},
              "infer": {"prompt_len": [64], "gen_len": [64]}}
# The programs' flag limits (llmc/train/options.cpp, llmc/infer/options.cpp): integers up to INT_MAX, the inference
# programs' -b up to kMaxInferBatch (llmc/infer/options.h); dN from d1 to d999 (llmc/model/gpt2_config.cpp,
# parse_depth_descriptor), at GPT-2's maximum sequence length.
IMAX = 2**31 - 1
MAX_INFER_BATCH = 65535
DEPTH_MAX_SEQ_LEN = 1024
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


def depth_of(model):
    """N for a dN the programs read as a depth (d1 to d999), else None (a model file's name)."""
    m = re.fullmatch(r"d(\d{1,3})", model)
    return int(m.group(1)) if m and int(m.group(1)) >= 1 else None


def in_range(flag, value, lo, hi):
    """value, refused (one line, exit 2) outside [lo, hi], in the programs' words for the same flag."""
    if not lo <= value <= hi:
        fail(f"{flag}: expected an integer in [{lo}, {hi}], got '{value}'", 2)
    return value


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
    p.add_argument("--energy", action="store_true", help="train, with --profile: also measure joules per sub-block "
                   "(the trainers' --energy), for energy_j_per_token")
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
    check_flags(a)
    if a.energy and a.mode != "train":
        print("sweep.py: note: --energy is a --mode train flag, unused here", file=sys.stderr)
    elif a.energy and not a.profile:
        fail("--energy: the energy per sub-block is measured into each run's profile; add --profile", 2)
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
        if not (depth_of(m) or os.path.isfile(m)):
            fail(f"--models: '{m}' is neither dN (d1 to d999, e.g. d12) nor an existing model file", 2)
    once_each("--models", a.models, lambda m: m if depth_of(m) else os.path.realpath(m))
    check_grid(a)
    return a


# The units of the sizes --device-memory takes (llmc/util/flags.cpp, parse_bytes_flag).
SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def is_size(text):
    """Whether the programs' --device-memory takes text: a decimal number and one of SIZE_UNITS, 1 byte to 2^64."""
    m = re.fullmatch(r"(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)([A-Za-z]+)", text)
    return bool(m) and m.group(2) in SIZE_UNITS and 1 <= float(m.group(1)) * SIZE_UNITS[m.group(2)] < 1.8e19


def check_flags(a):
    """The flags passed to every run, within what the programs take: refused here, once, rather than as an error
    row for every configuration."""
    in_range("--steps", a.steps, 1, IMAX)
    in_range("--warmup", a.warmup, 0, IMAX)
    if a.warmup + a.steps > IMAX:  # the trainers' -x and -v
        fail(f"--warmup, --steps: {a.warmup} + {a.steps} steps are more than the trainers' {IMAX}", 2)
    in_range("--val-batches", a.val_batches, 1, IMAX)
    in_range("--seed", a.seed, 0, IMAX)
    for flag, values in (("--seq", a.seq), ("--prompt-len", a.prompt_len), ("--gen-len", a.gen_len)):
        in_range(flag, max(values), 1, IMAX)
    in_range("--batch", max(a.batch), 1, MAX_INFER_BATCH if a.mode == "infer" else IMAX)
    if a.device_memory is not None and not is_size(a.device_memory):
        fail(f"--device-memory: expected a size such as 80GiB, 40GB, 512MiB or 4096B, got '{a.device_memory}'", 2)


def check_grid(a):
    """Every configuration within its model's maximum sequence length (a model file that cannot be read is left to
    its rows, which say why)."""
    for m in a.models:
        shape = model_shape(m)
        if shape is None:
            continue
        if a.mode == "train" and max(a.seq) > shape[0]:
            fail(f"--seq: {max(a.seq)} is longer than {m}'s maximum sequence length {shape[0]}", 2)
        if a.mode == "infer" and max(a.prompt_len) + max(a.gen_len) > shape[0]:
            fail(f"--prompt-len, --gen-len: {max(a.prompt_len)} + {max(a.gen_len)} tokens are longer than {m}'s "
                 f"maximum sequence length {shape[0]}", 2)


def model_shape(model):
    """(maxT, L, C, Vp) of dN (the trainers' GPT-2 shapes) or of a model file's header; None when unreadable."""
    L = depth_of(model)
    if L:  # llmc/model/gpt2_config.h, gpt2_config_for_depth: GPT-2's own widths at 12/24/36/48 layers, else 64 per layer
        return DEPTH_MAX_SEQ_LEN, L, {12: 768, 24: 1024, 36: 1280, 48: 1600}.get(L, 64 * L), 50304
    try:
        with open(model, "rb") as f:
            h = struct.unpack("<8i", f.read(32))
    except (OSError, struct.error):
        return None
    return (h[2], h[4], h[6], h[7]) if h[0] == 20240326 else None


def model_params(model):
    """Parameter count from dN or a model file's header (model_shape); None when unreadable."""
    shape = model_shape(model)
    if shape is None:
        return None
    maxT, L, C, Vp = shape
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
    if not depth_of(model):  # a file: its name, and which file, since two may share a name
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
                    prof and prof + ["--profile-start", str(a.warmup + 1), "--profile-steps", str(a.steps)] +
                    (["--energy"] if a.energy else []))
    return [a.program, "-e", cfg["model"], "-b", cfg["B"], "--prompt-len", cfg["prompt_len"], "-n", cfg["gen_len"],
            "--seed", str(a.seed), "--json"] + prof


def plan_command(a, cfg):
    """The GPU program's --memory-plan for the configuration (it answers without a GPU)."""
    mem = ["--device-memory", a.device_memory] if a.device_memory else []
    if cfg["mode"] == "train":
        return [a.program, "-e", cfg["model"], "-b", cfg["B"], "-t", cfg["T"], "--memory-plan"] + mem
    return [a.program, "-e", cfg["model"], "-b", cfg["B"], "--prompt-len", cfg["prompt_len"], "-n", cfg["gen_len"],
            "--memory-plan"] + mem


def read_log(path, offset=0):
    """A run's log from offset (bytes) on."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def plan_status(a, cfg, log_path):
    """On the GPU, the program's memory plan for the configuration, its answer at the head of the log: the row's
    status where the configuration is not to be launched ("oom (planned)"; with --device-memory, a plan that failed,
    since the limit asked for could not be checked), else None. Without --device-memory a program that cannot
    answer (an older build, another program) is launched as before."""
    if a.device != "gpu":
        return None
    code, _ = run_limited(plan_command(a, cfg), log_path, min(a.timeout, 120))
    output = read_log(log_path)
    fits = re.search(r"^fits: (yes|no)$", output, re.M) if code == 0 else None
    if fits and fits.group(1) == "no":
        return "oom (planned)"
    if not fits and a.device_memory:
        return "error: --memory-plan: " + (status_of(code, output).removeprefix("error: ") if code != 0 else
                                           "no 'fits: yes' or 'fits: no' in its answer")
    return None


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


def run_limited(argv, log_path, timeout, append=False):
    """Runs argv in a session (and process group) of its own with stdout and stderr into log_path (after what it
    holds, with append), until it and every process it started have ended, or until timeout. Returns (argv's exit
    status, negative for a signal, or None when the run went past timeout and was killed; the largest max RSS of
    its processes in MiB)."""
    with open(log_path, "a" if append else "w") as log:
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


def numbers(obj):
    """A JSON object's members that are numbers (null, text and the like left out: unknown)."""
    return {k: v for k, v in obj.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def energy_per_token(prof_dir, prof):
    """Joules per token from the profile's energy per sub-block (energy.csv, --energy): the whole step's row over
    the profile's tokens per step (B x T x grad_accum of its context); None without energy.csv, or where it cannot
    be read or either number is unknown."""
    try:
        rows = read_energy(os.path.join(prof_dir, "energy.csv"))
    except BadInput:
        return None
    step = energy_parts(rows)[1] if rows else None
    batch = numbers(section(section(prof, "context"), "batch"))
    tokens = batch.get("B", 0) * batch.get("T", 0) * batch.get("grad_accum", 1)
    return step["j_per_step"] / tokens if step and step["j_per_step"] is not None and tokens > 0 else None


def profile_results(prof_dir):
    """Phases, MFU, power, peak memory and the energy per token of the whole step replayed (energy_per_token) from a
    training profile directory (none from one whose profile.json cannot be read)."""
    try:
        p = read_json_object(os.path.join(prof_dir, "profile.json"))
    except BadInput:
        return {}
    steps = [numbers(s) for s in p["steps"] if isinstance(s, dict)] if isinstance(p.get("steps"), list) else []
    r = {f"{ph}_ms": mean([s[f"{ph}_ms"] for s in steps if f"{ph}_ms" in s]) for ph in ("fwd", "bwd", "opt")}
    r["mfu_pct"] = numbers(section(p, "throughput")).get("mfu_pct")
    power = numbers(section(p, "power"))
    if power.get("integrated_steps") or power.get("samples"):
        r["avg_power_w"], r["j_per_token"] = power.get("avg_w"), power.get("joules_per_token")
        r["flops_per_w"] = power.get("flops_per_w")
    r["energy_j_per_token"] = energy_per_token(prof_dir, p)
    peak = numbers(section(p, "context")).get("peak_memory_bytes")
    if peak:
        r["peak_mem_mib"] = peak / 1048576
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
    if not isinstance(summary, dict):
        return None
    s = numbers(summary)
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
    """A CSV cell: empty for an unknown number (None, NaN, infinite, or too large to plot: plot_sweep.plottable)."""
    if isinstance(v, float):
        return f"{v:.6g}" if plot_sweep.plottable(v) else ""
    return "" if v is None else str(v)


def known(numbers):
    return {k: v for k, v in numbers.items() if v is not None}


def add_results(a, cfg, row, output, run_dir):
    """The numbers of a run that exited 0 into its row; an error status where those every run prints (its time per
    step) are not there."""
    if cfg["mode"] == "train":
        row.update(known(train_results(a, cfg, output, run_dir)))
        if a.profile:
            row.update(known(profile_results(os.path.join(run_dir, "profile"))))
        missing = "no timed step line with its time ('step N/M | loss ... | X ms') in the output"
    else:
        r = infer_results(output, row["params"])
        if r is None:
            row["status"] = "error: no {\"summary\": ...} line in the --json output"
            return
        row.update({k: v for k, v in known(r).items() if not (k == "peak_mem_mib" and a.device == "cpu")})
        missing = "no decode_tok_s and B in the --json output's summary"
    if not plot_sweep.plottable(row.get("ms_per_step", math.nan)):
        row["status"] = "error: " + missing


def run_config(a, cfg, out_dir):
    """Runs one configuration and returns its CSV row."""
    run_dir = os.path.join(out_dir, "runs", run_name(cfg))
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "log.txt")
    row = dict(cfg, params=model_params(cfg["model"]), log=os.path.relpath(log_path, out_dir))
    row["status"] = plan_status(a, cfg, log_path)
    if row["status"]:
        return {c: cell(row.get(c)) for c in COLUMNS}
    start = os.path.getsize(log_path) if a.device == "gpu" else 0  # after the plan's answer
    code, maxrss_mib = run_limited(command(a, cfg, run_dir), log_path, a.timeout, append=start > 0)
    output = read_log(log_path, start)
    row["status"] = status_of(code, output)
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
        add_results(a, cfg, row, output, run_dir)
    return {c: cell(row.get(c)) for c in COLUMNS}


def read_done(csv_path):
    """The rows already in the CSV (resume), read strictly (a malformed row is named by its line: BadInput), after
    checking its columns are this version's and its numbers ones the plots draw. An empty file is a sweep stopped
    before it wrote anything; a link, or anything else but a regular file, is refused (nothing is written through
    it)."""
    problem = output_problem(csv_path)
    if problem:
        fail(problem + "; move it away to start a new sweep")
    if not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0:
        return []
    header, rows = read_table(csv_path)
    if header != COLUMNS:
        fail(f"{csv_path}: its columns are not this sweep's; move it away to start a new sweep")
    plot_sweep.check_numbers(csv_path, rows)
    return rows


def lock_output(out_dir):
    """Takes OUT/.lock (flock) for as long as this process lives, and writes its pid into it; the kernel lets go of
    the lock when the process ends, however it ends, so a killed sweep leaves no directory locked. A second sweep
    into the same directory is refused, with the first one's pid. Returns the lock file's descriptor."""
    path = os.path.join(out_dir, ".lock")
    problem = output_problem(path)
    if problem:
        fail(problem)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # not inherited by the runs
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fail(f"-o: '{out_dir}' is in use by another sweep (pid {lock_holder(fd)}); wait for it or choose another -o")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def lock_holder(fd):
    """The pid in a lock file its holder has locked (written just after the lock was taken)."""
    for _ in range(20):
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if pid:
            return pid
        time.sleep(0.05)
    return "unknown"


def check_run_outputs(a, todo, modes):
    """Before the first run, what the sweep will write besides sweep.csv: the run directories (directories, or
    new), each configuration's log and the plots (regular files or new names). BadInput otherwise."""
    runs = os.path.join(a.output, "runs")
    for d in [runs] + [os.path.join(runs, run_name(cfg)) for cfg in todo]:
        if os.path.lexists(d) and not os.path.isdir(d):
            raise BadInput(f"{d}: exists and is not a directory")
    paths = [os.path.join(runs, run_name(cfg), "log.txt") for cfg in todo]
    if not a.no_plots:
        paths += [os.path.join(a.output, name) for m in plot_sweep.PNGS if m in modes for name in plot_sweep.PNGS[m]]
    check_outputs(paths)


def prepare(a):
    """All that comes before the first run: the output directory, locked (lock_output); the rows already done;
    every output checked. Returns (sweep.csv's path, the configurations left to run, the lock's descriptor)."""
    try:
        os.makedirs(a.output, exist_ok=True)
    except OSError as e:
        fail(f"-o: cannot create '{a.output}' ({e.strerror})")
    lock = lock_output(a.output)
    csv_path = os.path.join(a.output, "sweep.csv")
    rows = read_done(csv_path)
    done = {tuple(r[k] for k in KEY) for r in rows}
    grid = configurations(a)
    todo = [c for c in grid if tuple(c[k] for k in KEY) not in done]
    check_run_outputs(a, todo, {a.mode} | {r["mode"] for r in rows})
    if len(grid) > len(todo):
        print(f"resuming: {len(grid) - len(todo)} configuration(s) already in {csv_path}")
    return csv_path, todo, lock


def last_line_open(path):
    """Whether a file's last line lacks its newline (saved by an editor that drops it)."""
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


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
    csv_path, todo, _lock = prepare(a)  # the lock is held until this process ends
    new_file = not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0
    start = time.monotonic()
    open_line = not new_file and last_line_open(csv_path)
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        if open_line:  # its last row ends there: the next one goes on a line of its own
            f.write("\n")
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
    except BadInput as e:  # a file the sweep reads or writes that it cannot use, named
        fail(str(e))
    except OSError as e:  # a file the sweep writes or reads (a full disk, a permission): one line, not a traceback
        fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))
