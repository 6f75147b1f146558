#!/usr/bin/env python3
"""Writes report.html: one self-contained page of a profile directory, to look at rather than read.

The page answers "where does the step go?" at a glance: the run's header and warnings, the findings ranked (each
linking to the section that shows it), sub-blocks per phase with a sortable table, the roofline (sub-blocks and
kernels against the measured ceilings), one step's timeline, top kernels, CUDA calls and GPU idle, memory, power
and energy, and for inference and data-parallel profiles their own sections; each section only where the profile
has its data. It reads profile.json, roofline.csv and trace.json (and memory_snapshot.pickle and energy.csv where
the directory has them) and nothing else. The data and Plotly's JavaScript are embedded: the page opens offline
from the file, with no server and no request to anywhere. Long lists (kernels, a step's timeline) are aggregated,
and the page says what it aggregated.

    python3 scripts/report_html.py DIR [-o FILE]      (FILE: DIR/report.html by default)
"""
import argparse
import html
import json
import math
import os
import pickle
import sys

from plot_profile import (BadInput, check_outputs, energy_closure, energy_parts, idle_watts, num, output_problem,
                          read_energy, read_json_object, read_table, section)

PROFILE_VERSION = 1  # profile.json's "profile_version" this script reads (llmc/profiler/writers.cpp)
DATA_VERSION = 1     # the page's own data blob (<script id="report-data">), read by its JavaScript and the tests
TOP_KERNELS = 25     # kernels listed one by one; the rest are one aggregated row
TIMELINE_MAX = 4000  # timeline bars drawn one by one; past that, consecutive kernels of one sub-block are merged
MEMORY_TIMELINE_MAX = 2000  # points of the live-bytes timeline; past that, every n-th event
TRAINING_PHASES = ("fwd", "bwd", "opt")
INFERENCE_PHASES = ("prefill", "decode")
ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_assets")
# Which section shows what a finding's rule found.
RULE_SECTION = {"roofline": "roofline", "launch_bound": "api", "sync_stall": "api", "memcpy": "api",
                "occupancy": "kernels", "throttle": "power", "records": "header", "decode_weight_bound": "inference",
                "decode_launch_bound": "inference"}


def fail(msg, code=1):
    print(f"report_html.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def finite(v):
    """v where it is a finite number (JSON null stays None): the page's numbers, as profile.json has them."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def rows_of(obj, key):
    """obj[key] as a list of JSON objects ([] where missing or damaged)."""
    v = obj.get(key) if isinstance(obj, dict) else None
    return [r for r in v if isinstance(r, dict)] if isinstance(v, list) else []


# ---- reading the directory ----

def read_profile(d):
    """profile.json, checked to be this version's: an older or newer layout is refused with one line."""
    path = os.path.join(d, "profile.json")
    prof = read_json_object(path)
    version = prof.get("profile_version")
    if version is None:
        raise BadInput(f"{path}: written by an older version of the profiler (no profile_version); profile the run "
                       f"again with this version's program")
    if version != PROFILE_VERSION:
        raise BadInput(f"{path}: profile_version {json.dumps(version)}, but this script reads version "
                       f"{PROFILE_VERSION}; use the report_html.py of the program that wrote it")
    for key, kind in (("context", dict), ("throughput", dict), ("subblocks", list), ("steps", list)):
        if not isinstance(prof.get(key), kind):
            raise BadInput(f"{path}: not a profile (no {key})")
    return prof


class RestrictedUnpickler(pickle.Unpickler):
    """memory_snapshot.pickle holds dicts, lists, strings and numbers only: any class it names is refused, so a
    hostile pickle cannot run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"names a class ({module}.{name})")


def read_snapshot(path):
    """The memory snapshot (torch.cuda.memory._dump_snapshot's format), or None where the directory has none."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            snap = RestrictedUnpickler(f).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as e:
        raise BadInput(f"{path}: not a memory snapshot ({e})") from None
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    if not isinstance(snap, dict):
        raise BadInput(f"{path}: not a memory snapshot (not a dictionary)")
    return snap


def load(d):
    """Everything the page is made of, from the directory's files; BadInput naming the first that is missing or
    unusable."""
    if not os.path.isdir(d):
        raise BadInput(f"no profile directory '{d}'")
    for name in ("profile.json", "roofline.csv", "trace.json"):
        if not os.path.isfile(os.path.join(d, name)):
            raise BadInput(f"{d}: missing {name} (not a complete profile directory)")
    prof = read_profile(d)
    trace = read_json_object(os.path.join(d, "trace.json"))
    if not isinstance(trace.get("traceEvents"), list):
        raise BadInput(f"{os.path.join(d, 'trace.json')}: not a trace (no traceEvents)")
    roofline = read_table(os.path.join(d, "roofline.csv"), ("scope", "subblock", "phase", "kernel"), "roofline table")[1]
    energy = read_energy(os.path.join(d, "energy.csv"))  # None without --energy
    return {"dir": d, "profile": prof, "trace": trace["traceEvents"], "roofline": roofline, "energy": energy,
            "snapshot": read_snapshot(os.path.join(d, "memory_snapshot.pickle"))}


# ---- the data the page embeds, section by section ----

def phase_steps(prof):
    """{phase: the steps its time is divided by}: inference phases their own steps; training every phase the
    window's steps."""
    phases = rows_of(section(prof, "inference"), "phases")
    if phases:
        return {p.get("phase"): p.get("steps") or 1 for p in phases}
    steps = section(prof, "throughput").get("steps") or 1
    return {ph: steps for ph in TRAINING_PHASES + ("(none)", "comm")}


def window(prof):
    """The profiled steps as the run numbers them, and the window's wall time."""
    steps = [s.get("step") for s in rows_of(prof, "steps") if isinstance(s.get("step"), int)]
    t = section(prof, "throughput")
    return {"first_step": min(steps) if steps else None, "last_step": max(steps) if steps else None,
            "steps": t.get("steps"), "wall_s": finite(t.get("wall_s"))}


def warnings(prof):
    """What the reader must know before trusting a number: dropped records, a replay-sized run, data that is
    synthetic or emulated, ceilings raised to what beat them."""
    c, out = section(prof, "context"), []
    dropped = section(prof, "records").get("dropped") or 0
    if dropped:
        out.append(f"{dropped} CUPTI records were dropped: every total is low")
    model = section(c, "model")
    if model.get("num_layers") == 1 and section(prof, "throughput").get("steps") == 1:
        out.append("a replay-sized run (1 layer, 1 step): its times are not a whole model's")
    text = " ".join(str(c.get(k, "")) for k in ("device", "build")) + " " + str(section(c, "ceilings").get("source"))
    for word, what in (("synthetic", "synthetic data: made up for the example, not measured"),
                       ("emulat", "emulated device: times are the emulator's, not a GPU's")):
        if word in text.lower():
            out.append(what)
    if section(c, "ceilings").get("raised"):
        out.append("ceilings raised: something ran faster than the calibration measured (a busy machine?)")
    if section(prof, "counters").get("collected"):
        out.append("hardware counters are kernel-replay figures (each kernel run alone), not the traced steps' own")
    return out


def header(prof):
    """The run at a glance: program, model, device, batch, step time, throughput, MFU, energy, window."""
    c, t = section(prof, "context"), section(prof, "throughput")
    steps = t.get("steps") or 0
    wall = finite(t.get("wall_s"))
    inf = section(prof, "inference")
    batch = section(c, "batch")
    return {"program": c.get("program"), "device": c.get("device"), "device_kind": c.get("device_kind"),
            "build": c.get("build"), "model": section(c, "model"),
            "batch": {"B": batch.get("B"), "T": batch.get("T"), "grad_accum": batch.get("grad_accum")},
            "inference": {k: inf.get(k) for k in ("sequences", "prompt_tokens", "decode_steps", "decode_tokens")}
            if inf else None,
            "step_ms": wall * 1e3 / steps if wall is not None and steps else None,
            "tokens_per_s": finite(t.get("tokens_per_s")), "mfu_pct": finite(t.get("mfu_pct")),
            "j_per_token": finite(section(prof, "power").get("joules_per_token")),
            "ceilings": {k: finite(section(c, "ceilings").get(k)) for k in ("bf16_tflops", "fp32_tflops", "dram_gbps")},
            "ceilings_source": section(c, "ceilings").get("source"),
            "world_size": c.get("world_size"), "rank": c.get("rank"),
            "window": window(prof), "warnings": warnings(prof)}


def findings(prof):
    """The findings in profile.json's order (ranked by time at stake), each with the section that shows it."""
    return [{"rule": f.get("rule"), "what": f.get("what"), "evidence": f.get("evidence"),
             "next_step": f.get("next_step"), "ms_per_step": finite(f.get("ms_per_step")),
             "section": RULE_SECTION.get(f.get("rule"), "subblocks")} for f in rows_of(prof, "findings")]


def subblocks(prof):
    """One row per (sub-block, phase): time over the window and per step of its phase, share, the analytic work,
    achieved rates and % of roofline, as profile.json has them."""
    steps = phase_steps(prof)
    out = []
    for r in rows_of(prof, "subblocks"):
        roof = section(r, "roofline")
        t = finite(r.get("time_us"))
        out.append({"subblock": r.get("subblock"), "phase": r.get("phase"), "calls": r.get("calls"),
                    "time_us": t, "ms_per_step": t / 1e3 / steps.get(r.get("phase"), 1) if t is not None else None,
                    "pct": finite(r.get("pct")),
                    **{k: finite(roof.get(k)) for k in ("flops", "bytes", "tflops", "gbps", "intensity",
                                                         "pct_of_roofline")},
                    "bound": roof.get("bound")})
    return out


def point(name, kind, flops, nbytes, seconds, extra=None):
    """A roofline point at (FLOPs / bytes, FLOPs / s), or None where any of them is unknown or zero."""
    if not (flops and nbytes and seconds and flops > 0 and nbytes > 0 and seconds > 0):
        return None
    return {"name": name, "kind": kind, "intensity": flops / nbytes, "flops_per_s": flops / seconds,
            "flops": flops, "bytes": nbytes, "seconds": seconds, **(extra or {})}


def roofline(prof, rows):
    """The ceilings and the points: sub-blocks (analytic FLOPs and bytes over their time per step), the same
    sub-blocks counted by hardware counters where there are, and kernels (kernel_replay rows of roofline.csv)."""
    pts = []
    for r in rows_of(prof, "subblocks"):
        roof = section(r, "roofline")
        p = point(f"{r.get('subblock')} {r.get('phase')}", "subblock", finite(roof.get("flops")),
                  finite(roof.get("bytes")), finite(roof.get("time_per_step_s")),
                  {"pct_of_roofline": finite(roof.get("pct_of_roofline")), "bound": roof.get("bound")})
        if p:
            pts.append(p)
    for r in rows_of(section(prof, "counters"), "subblocks"):
        flops = (finite(r.get("tensor_flops_counted")) or 0) + (finite(r.get("fp32_flops_counted")) or 0)
        t = finite(r.get("time_us"))
        p = point(f"{r.get('subblock')} {r.get('phase')}", "counted", flops, finite(r.get("dram_bytes_counted")),
                  t * 1e-6 if t else None, {"pct_of_roofline": finite(r.get("pct_of_roofline")), "bound": r.get("bound")})
        if p:
            pts.append(p)
    for r in rows:
        if r.get("scope") != "kernel_replay" or not r.get("kernel"):
            continue
        p = point(r["kernel"], "kernel", num(r.get("replay_flops")), num(r.get("replay_bytes")),
                  num(r.get("time_us")) * 1e-6, {"subblock": f"{r.get('subblock')} {r.get('phase')}",
                                                 "pct_of_roofline": finite(num(r.get("pct_of_roofline"))),
                                                 "bound": r.get("bound")})
        if p and all(math.isfinite(p[k]) for k in ("intensity", "flops_per_s")):
            pts.append(p)
    ce = section(section(prof, "context"), "ceilings")
    return {"ceilings": {k: finite(ce.get(k)) for k in ("bf16_tflops", "fp32_tflops", "dram_gbps")},
            "matmul": "bf16" if section(prof, "context").get("device_kind", "GPU") == "GPU" else "matmul",
            "points": pts}


def kernels(prof):
    """The kernels with the most time, one row each up to TOP_KERNELS, the rest one aggregated row; and the time
    by category."""
    rows = sorted(rows_of(prof, "kernels"), key=lambda r: -(finite(r.get("total_us")) or 0))
    keys = ("kernel", "subblock", "phase", "category", "calls", "total_us", "avg_us", "pct")
    top = [{k: r.get(k) for k in keys} for r in rows[:TOP_KERNELS]]
    rest = rows[TOP_KERNELS:]
    other = None
    if rest:
        other = {"rows": len(rest), "calls": sum(r.get("calls") or 0 for r in rest),
                 "total_us": sum(finite(r.get("total_us")) or 0 for r in rest),
                 "pct": sum(finite(r.get("pct")) or 0 for r in rest)}
    by_cat = {}
    for r in rows:
        by_cat[r.get("category")] = by_cat.get(r.get("category"), 0) + (finite(r.get("total_us")) or 0)
    return {"rows": len(rows), "top": top, "other": other, "steps": section(prof, "throughput").get("steps") or 1,
            "by_category": sorted(([k, v] for k, v in by_cat.items()), key=lambda kv: -kv[1])}


def track_names(events):
    """{(pid, tid): its track's label}: the thread's name ("stream 7"), after its process's ("GPU 0") where the
    trace has more than one process with such tracks."""
    procs, threads = {}, {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            name = section(e, "args").get("name")
            if e.get("name") == "process_name":
                procs[e.get("pid")] = name
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = name
    many = len({pid for pid, _ in threads if pid != 0}) > 1
    return {k: f"{str(procs.get(k[0], k[0])).split(':')[0]} {v}" if many else v for k, v in threads.items()}


def median_step(prof):
    """The profiled step whose wall time is the median: the one a timeline of one step shows."""
    steps = sorted((s for s in rows_of(prof, "steps") if isinstance(s.get("step"), int)),
                   key=lambda s: finite(s.get("wall_ms")) or 0)
    return steps[(len(steps) - 1) // 2].get("step") if steps else None


def merge_runs(evs):
    """Consecutive events of one track and one sub-block merged into one bar each: [track, start, end, names,
    group, count]."""
    out = []
    for tr, ts, dur, name, group in sorted(evs, key=lambda e: (e[0], e[1])):
        last = out[-1] if out else None
        if last and last[0] == tr and last[4] == group:
            last[2], last[5] = max(last[2], ts + dur), last[5] + 1
        else:
            out.append([tr, ts, ts + dur, name, group, 1])
    return out


def timeline(prof, events):
    """One step's GPU work (a CPU profile's ops) per stream: start and duration from the step's start, kernel
    name and sub-block; consecutive kernels of one sub-block are merged where the step has more than
    TIMELINE_MAX, and the note says so."""
    step = median_step(prof)
    names = track_names(events)
    start = next((num(e.get("ts")) for e in events if isinstance(e, dict) and e.get("ph") == "X"
                  and e.get("name") == f"ProfilerStep#{step}"), math.nan)
    evs = []
    for e in events:
        if not (isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")):
            continue
        a = section(e, "args")
        ts, dur = num(e.get("ts")), num(e.get("dur"))
        if a.get("step") == step and math.isfinite(ts) and math.isfinite(dur):
            track = names.get((e.get("pid"), e.get("tid")), f"{e.get('pid')}: {e.get('tid')}")
            evs.append((track, ts, dur, e.get("name"), f"{a.get('subblock')} {a.get('phase')}"))
    if not evs:
        return None
    t0 = start if math.isfinite(start) else min(e[1] for e in evs)
    note = ""
    if len(evs) > TIMELINE_MAX:
        bars = merge_runs(evs)
        note = (f"{len(evs)} kernels and copies in this step: consecutive ones of one sub-block on a stream are drawn "
                f"as one bar ({len(bars)} bars); trace.json has each of them")
        evs = [(tr, s, e - s, f"{n} kernels of {g}" if n > 1 else name, g) for tr, s, e, name, g, n in bars]
    tracks = sorted({e[0] for e in evs})
    strings = sorted({e[3] for e in evs} | {e[4] for e in evs})
    index = {s: i for i, s in enumerate(strings)}
    return {"step": step, "tracks": tracks, "strings": strings, "kernels": len(evs), "note": note,
            "events": [[tracks.index(tr), round(ts - t0, 3), round(dur, 3), index[name], index[group]]
                       for tr, ts, dur, name, group in evs]}


def api(prof):
    """CUDA calls, synchronisation and GPU idle (gaps by size, by what the CPU was doing, the largest) of a GPU
    profile, as summary.txt has them; None for a CPU profile."""
    if section(prof, "context").get("device_kind", "GPU") != "GPU":  # a CPU's gaps are the loop's own work
        return None
    idle = section(prof, "gpu_idle")
    calls, syncs = rows_of(prof, "api"), rows_of(prof, "syncs")
    if not calls and not syncs and not idle.get("gaps"):
        return None
    return {"api": calls, "syncs": syncs, "api_pct_of_cpu_time": finite(prof.get("api_pct_of_cpu_time")),
            "sync_pct_of_cpu_time": finite(prof.get("sync_pct_of_cpu_time")),
            "idle": {"idle_us": finite(idle.get("idle_us")), "gaps": idle.get("gaps"),
                     "by_size": rows_of(idle, "by_size"), "by_cpu_activity": rows_of(idle, "by_cpu_activity"),
                     "largest": rows_of(idle, "largest")} if idle else None}


def live_bytes(snapshot):
    """The snapshot's live bytes by category after each allocation and free of its trace (every n-th event past
    MEMORY_TIMELINE_MAX, the peak kept), with the op of each event."""
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    trace = traces[0] if isinstance(traces, list) and traces and isinstance(traces[0], list) else []
    live, cats, points = {}, [], []
    for e in trace:
        if not isinstance(e, dict) or e.get("action") not in ("alloc", "free_completed"):
            continue
        cat, size = str(e.get("category") or "unknown"), e.get("size")
        if not isinstance(size, int):
            continue
        if cat not in live:
            live[cat] = 0
            cats.append(cat)
        live[cat] += size if e["action"] == "alloc" else -size
        frames = e.get("frames") if isinstance(e.get("frames"), list) else []
        op = frames[0].get("filename") if frames and isinstance(frames[0], dict) else ""
        points.append((sum(live.values()), [live.get(c, 0) for c in cats], f"{e['action']} {op}"))
    if not points:
        return None
    step = max(1, math.ceil(len(points) / MEMORY_TIMELINE_MAX))
    peak = max(range(len(points)), key=lambda i: points[i][0])
    keep = sorted(set(range(0, len(points), step)) | {peak, len(points) - 1})
    return {"categories": cats, "events": len(points), "every": step,
            "index": keep, "bytes": [points[i][1] + [0] * (len(cats) - len(points[i][1])) for i in keep],
            "ops": [points[i][2] for i in keep]}


def memory(prof, snapshot):
    """The memory plan by category and allocation, its peaks, the largest tensors, and the live-bytes timeline
    from the snapshot; None without a plan."""
    m = prof.get("memory")
    if not isinstance(m, dict):
        return None
    ca = section(m, "caching_allocator")
    return {"planned_bytes": m.get("planned_bytes"), "kinds": rows_of(m, "kinds"),
            "allocations": rows_of(m, "allocations"), "live_peak": section(m, "live_peak"),
            "caching_reserved_bytes": ca.get("reserved_bytes"), "caching_allocated_peak_bytes": ca.get("allocated_peak_bytes"),
            "top_tensors": m.get("top_tensors") if isinstance(m.get("top_tensors"), list) else [],
            "notes": m.get("notes") if isinstance(m.get("notes"), list) else [],
            "live": live_bytes(snapshot) if snapshot else None}


def energy(prof, rows):
    """Energy per sub-block (energy.csv, --energy): the sub-block rows in step order as energy.csv has them (J per
    step, its 95% interval, W, J above idle, FLOP/J, ...; null where unknown), the whole step's row and the idle
    row, the idle power, the closure (the sub-blocks' sum against the step) and how it was measured (profile.json's
    energy); None without energy.csv."""
    if rows is None:
        return None
    subs, step, idle = energy_parts(rows)
    e = section(prof, "energy")
    return {"rows": subs, "step": step, "idle": idle, "idle_w": idle_watts(prof, rows),
            "closure": energy_closure(prof, rows), "synthetic": e.get("synthetic") is True,
            "source": e.get("source") if isinstance(e.get("source"), str) else None,
            **{k: finite(e.get(k)) for k in ("counter_period_ms", "window_s", "budget_s", "repeats")}}


def power(prof, events, energy_rows):
    """Power over time (the trace's samples), energy per step, the window's figures, and energy per sub-block
    (energy) where the directory has energy.csv; None where there is no reading at all."""
    samples = sorted((num(e.get("ts")) / 1e6, num(section(e, "args").get("W"))) for e in events
                     if isinstance(e, dict) and e.get("ph") == "C" and e.get("name") == "power")
    samples = [(t, w) for t, w in samples if math.isfinite(t) and math.isfinite(w)]
    steps = [{k: s.get(k) for k in ("step", "wall_ms", "energy_j", "avg_power_w", "j_per_token", "energy_source")}
             for s in rows_of(prof, "steps")]
    by_subblock = energy(prof, energy_rows)
    if not samples and not any(finite(s.get("energy_j")) for s in steps) and not by_subblock:
        return None
    p = section(prof, "power")
    t0 = samples[0][0] if samples else 0
    return {"summary": {k: p.get(k) for k in ("samples", "energy_j", "avg_w", "peak_w", "joules_per_token",
                                              "tokens_per_j", "flops_per_w", "window_energy_source", "status")},
            "samples": [[round(t - t0, 4), round(w, 2)] for t, w in samples], "steps": steps,
            "subblock_energy": by_subblock}


def inference(prof):
    """Prefill against decode (steps, tokens, wall time, tok/s, roofline), the decode buckets by context, and the
    time to first token (the prefill step's wall time); None for training."""
    inf = section(prof, "inference")
    if not inf:
        return None
    phases = []
    for p in rows_of(inf, "phases"):
        row = {k: v for k, v in p.items() if k != "roofline"}
        roof = section(p, "roofline")
        row.update({k: roof.get(k) for k in ("intensity", "pct_of_roofline", "bound", "flops", "bytes")})
        wall, tokens = finite(p.get("wall_ms")), finite(p.get("tokens"))
        row["tok_s"] = tokens / wall * 1e3 if wall and tokens is not None else None
        phases.append(row)
    prefill = next((p for p in phases if p.get("phase") == "prefill"), {})
    return {"phases": phases, "decode_buckets": rows_of(inf, "decode_buckets"),
            "ttft_ms": finite(prefill.get("wall_ms")), "kv_cache_bytes": inf.get("kv_cache_bytes"),
            "sequences": inf.get("sequences")}


def union(intervals):
    """Sorted, merged [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(a, b):
    """The length of the union a that the union b covers."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def distributed(prof, events):
    """A data-parallel rank's communication: the comm sub-block's time and share, and the share of its
    communication that ran while compute ran (GPU: NCCL kernels under other kernels; CPU: the reducer's ranges
    under the ops); None for a single process."""
    c = section(prof, "context")
    if not isinstance(c.get("world_size"), int) or c["world_size"] <= 1:
        return None
    comm, compute = [], []
    for e in events:
        if not (isinstance(e, dict) and e.get("ph") == "X"):
            continue
        ts, dur = num(e.get("ts")), num(e.get("dur"))
        if not (math.isfinite(ts) and math.isfinite(dur)):
            continue
        is_comm = section(e, "args").get("subblock") == "comm" or str(e.get("name", "")).startswith("cpu:mpi comm")
        if is_comm:
            comm.append((ts, ts + dur))
        elif e.get("cat") == "kernel":
            compute.append((ts, ts + dur))
    comm_u, compute_u = union(comm), union(compute)
    comm_us = sum(e - s for s, e in comm_u)
    rows = [r for r in subblocks(prof) if r["subblock"] == "comm"]
    total = finite(section(prof, "total").get("time_us"))
    return {"world_size": c["world_size"], "rank": c.get("rank"), "comm": rows,
            "comm_us": comm_us, "overlapped_us": covered(comm_u, compute_u) if comm_u else 0.0,
            "comm_pct_of_total": sum(r["time_us"] or 0 for r in rows) / total * 100 if total else None}


def report_data(p):
    """The page's data: every section's, None for a section the profile has no data for."""
    prof = p["profile"]
    return {"data_version": DATA_VERSION, "header": header(prof), "findings": findings(prof),
            "subblocks": subblocks(prof), "phases": list(INFERENCE_PHASES if section(prof, "inference") else TRAINING_PHASES),
            "roofline": roofline(prof, p["roofline"]), "timeline": timeline(prof, p["trace"]),
            "kernels": kernels(prof), "api": api(prof), "memory": memory(prof, p["snapshot"]),
            "power": power(prof, p["trace"], p["energy"]), "inference": inference(prof),
            "distributed": distributed(prof, p["trace"])}


# ---- the page ----

# (id, heading, whether the data has it): the sections in page order, each only where its data is.
SECTIONS = (
    ("header", "Run", lambda d: True),
    ("findings", "Findings", lambda d: bool(d["findings"])),
    ("subblocks", "Sub-blocks", lambda d: bool(d["subblocks"])),
    ("roofline", "Roofline", lambda d: bool(d["roofline"]["points"])),
    ("timeline", "One step's timeline", lambda d: bool(d["timeline"])),
    ("kernels", "Top kernels", lambda d: bool(d["kernels"]["top"])),
    ("api", "CUDA calls, synchronisation and GPU idle", lambda d: bool(d["api"])),
    ("memory", "Memory", lambda d: bool(d["memory"])),
    ("power", "Power and energy", lambda d: bool(d["power"])),
    ("inference", "Inference: prefill and decode", lambda d: bool(d["inference"])),
    ("distributed", "Data parallel", lambda d: bool(d["distributed"])),
)


def asset(name):
    """A file of scripts/report_assets (the page's stylesheet and script)."""
    try:
        with open(os.path.join(ASSETS, name), encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise BadInput(f"{os.path.join(ASSETS, name)}: {e.strerror} (an incomplete checkout?)") from None


def plotly_js():
    """Plotly's JavaScript, from the plotly package (embedded once: the page fetches nothing)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise BadInput("plotly is not installed (python3 -m pip install plotly)") from None
    return get_plotlyjs()


def json_safe(v):
    """v with every number that JSON cannot hold (NaN, infinities: a damaged ceiling cache) as None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def script_json(data):
    """data as JSON that is safe inside a <script> element (no "</" to end it early; NaN and infinities null)."""
    text = json.dumps(json_safe(data), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def page(title, data, sections, script):
    """The whole page: stylesheet, navigation, one <section> per (id, heading), the data blob, Plotly (as text that
    the page runs once its first screen is painted: its code costs a second of CPU) and the page's script, all
    inline."""
    nav = " ".join(f'<a href="#{sid}">{html.escape(h)}</a>' for sid, h in sections)
    body = "\n".join(f'<section id="{sid}"><h2>{html.escape(h)}</h2><div class="content" id="{sid}-content"></div>'
                     f'</section>' for sid, h in sections)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<title>{html.escape(title)}</title>\n<style>\n{asset("report.css")}</style>\n</head>\n<body>\n'
            f'<nav>{nav}</nav>\n<main>\n<h1>{html.escape(title)}</h1>\n{body}\n</main>\n'
            f'<script type="application/json" id="report-data">{script_json(data)}</script>\n'
            f'<script type="text/plain" id="plotly-js">{plotly_js()}</script>\n'
            f'<script>\n{asset("common.js")}\n{asset(script)}</script>\n</body>\n</html>\n')


def write_page(path, text):
    """Writes the page to path through a temporary file beside it, so a reader never sees half a page."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise BadInput(f"{path}: {e.strerror}") from None


def report_page(p):
    """The report page of a loaded profile directory."""
    data = report_data(p)
    h = data["header"]
    title = f"llmc profile: {h['program'] or '(unnamed)'} on {h['device'] or 'an unknown device'}"
    sections = [(sid, head) for sid, head, has in SECTIONS if has(data)]
    for f in data["findings"]:  # a finding links to a section the page has
        if f["section"] not in dict(sections):
            f["section"] = "subblocks" if "subblocks" in dict(sections) else "header"
    return page(title, data, sections, "report.js")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="profile directory")
    ap.add_argument("-o", "--out", help="the page to write [DIR/report.html]")
    args = ap.parse_args()
    if args.out:  # a bad -o is a bad flag (status 2), refused before anything is read
        problem = output_problem(args.out)
        if problem:
            fail(f"-o: {problem}", 2)
        if not os.path.isdir(os.path.dirname(args.out) or "."):
            fail(f"-o: '{args.out}': no directory '{os.path.dirname(args.out)}'", 2)
    out = args.out or os.path.join(args.dir, "report.html")
    try:
        p = load(args.dir)
        check_outputs([out])
        write_page(out, report_page(p))
    except BadInput as e:
        fail(str(e))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
