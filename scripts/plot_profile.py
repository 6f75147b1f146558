#!/usr/bin/env python3
"""Plots a profile directory (train_gpt2 / train_gpt2cu / infer_gpt2 / infer_gpt2cu --profile DIR, profile_gpt2cu).

Writes roofline.png (sub-blocks, and kernels with per-kernel points, against the device's bandwidth and
compute ceilings; sub-blocks at profile.json's unrounded rates), subblocks.png (time per step by sub-block:
training's fwd/bwd/opt stacked, inference's prefill and decode side by side, each per step of its phase),
kernels.png (device time by kernel category), power.png (power over time from trace.json; a placeholder
without samples) and, where the directory has energy.csv (--energy), energy.png (joules per training step of each
sub-block and phase with its 95% interval, the part above idle power inside each bar, the idle power and the
closure against the whole step). Reads only the files of the profile directory.

    python3 scripts/plot_profile.py DIR [-o OUTDIR]
"""
import argparse
import csv
import json
import math
import os
import stat
import sys

PHASES = ("fwd", "bwd", "opt")  # training: parts of one step, stacked
INFER_PHASES = ("prefill", "decode")  # inference: steps of their own, side by side
PHASE_COLORS = {"fwd": "tab:blue", "bwd": "tab:orange", "opt": "tab:green", "prefill": "tab:purple",
                "decode": "tab:red"}


def fail(msg, code=1):
    print(f"plot_profile.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


class BadInput(Exception):
    """A file a script reads or writes that it cannot use; its text is the one line that says why, naming it."""


def read_json_object(path):
    """A JSON file that must hold an object (profile.json, trace.json)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text (a binary file?)") from None
    except ValueError as e:  # empty, truncated, not JSON
        raise BadInput(f"{path}: not valid JSON ({e})") from None
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
        raise BadInput(f"{path}: not a JSON object (it holds {kind})")
    return data


def section(obj, key):
    """obj[key] where it is a JSON object, else {} (a missing or damaged part of profile.json)."""
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, dict) else {}


class Row(dict):
    """A CSV row by column name, with the line it starts on (for messages)."""
    line = 0


def read_table(path, needed=(), what="table"):
    """A CSV file's header and rows, read strictly: UTF-8, every row with as many fields as the header (a row cut
    short, or two run together, is named by its line), the columns `needed` present. BadInput otherwise."""
    header, rows = None, []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None) or []
            start = reader.line_num + 1
            for fields in reader:
                if fields and len(fields) != len(header):
                    raise BadInput(f"{path}: line {start}: {len(fields)} fields where the header has "
                                   f"{len(header)} (a row cut short, or two rows run together)")
                if fields:
                    rows.append(Row(zip(header, fields)))
                    rows[-1].line = start
                start = reader.line_num + 1
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text (a binary file?)") from None
    except csv.Error as e:
        raise BadInput(f"{path}: line {reader.line_num}: {e}") from None
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}") from None
    missing = [c for c in needed if c not in header]
    if missing:
        raise BadInput(f"{path}: not a {what} (no column {missing[0]})")
    return header, rows


def read_csv(path):
    return read_table(path)[1]


# What an existing path is, where it is not a regular file, by its stat mode.
KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
         (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def output_problem(path):
    """None where a script may write path (a regular file, replaced, or a new name); else the line saying why not.
    A link is not followed: what it points to is not the script's to write."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path}: {e.strerror}"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
    return f"{path}: {kind}; an output must be a regular file or a new name"


def check_outputs(paths):
    """BadInput for the first of paths a script may not write (output_problem), before it writes any."""
    for path in paths:
        problem = output_problem(path)
        if problem:
            raise BadInput(problem)


def output_dir(out, fail):
    """-o DIR of a script that writes files into DIR: made where it is new; fail(message, 2) where it exists as
    something else."""
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"-o: '{out}' exists and is not a directory", 2)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail(f"-o: cannot create '{out}' ({e.strerror})")
    return out


def num(s):
    """A CSV cell as a float; NaN for empty (unknown) cells."""
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.nan


# energy.csv's columns (--energy), and those that hold numbers (an empty cell: unknown).
ENERGY_COLUMNS = ("sub_block", "phase", "layers", "j_per_step", "ci95_low", "ci95_high", "watts", "j_above_idle",
                  "flop_per_j", "repeats", "seconds", "sm_clock_mhz", "temp_c")
ENERGY_NUMBERS = ENERGY_COLUMNS[3:]


def read_energy(path):
    """energy.csv's rows in its order (the sub-blocks, then `step` and `idle`), each a dict by column with the
    numbers as floats and None where a cell is empty (unknown, never 0); None where the file does not exist.
    BadInput for a file without its columns or with a number cell that is not a finite number (named by line)."""
    if not os.path.lexists(path):
        return None
    rows = read_table(path, ENERGY_COLUMNS, "sub-block energy table")[1]
    out = []
    for r in rows:
        row = {k: r[k] for k in ENERGY_COLUMNS[:3]}
        for k in ENERGY_NUMBERS:
            v = num(r[k]) if r[k].strip() else None
            if v is not None and not math.isfinite(v):
                raise BadInput(f"{path}: line {r.line}: {k} '{r[k]}' is not a number")
            row[k] = v
        out.append(row)
    return out


def energy_parts(rows):
    """energy.csv's rows split into (the sub-block rows, the `step` row or None, the `idle` row or None)."""
    special = {r["sub_block"]: r for r in rows if r["sub_block"] in ("step", "idle")}
    return [r for r in rows if r["sub_block"] not in ("step", "idle")], special.get("step"), special.get("idle")


def energy_closure(prof, rows):
    """{sum_j, step_j, diff_pct}: the sub-blocks' joules per step against the whole step's, as profile.json's
    energy.closure has them, else from energy.csv; None where either side is unknown."""
    c = section(section(prof, "energy"), "closure")
    keys = ("sum_j", "step_j", "diff_pct")
    if all(isinstance(c.get(k), (int, float)) and not isinstance(c.get(k), bool) and math.isfinite(c[k]) for k in keys):
        return {k: c[k] for k in keys}
    subs, step, _ = energy_parts(rows)
    if not subs or step is None or not step["j_per_step"] or any(r["j_per_step"] is None for r in subs):
        return None
    total, whole = sum(r["j_per_step"] for r in subs), step["j_per_step"]
    return {"sum_j": total, "step_j": whole, "diff_pct": (total - whole) / whole * 100}


def idle_watts(prof, rows):
    """The idle power: energy.csv's idle row, else profile.json's energy.idle_w; None where neither has it."""
    idle = energy_parts(rows)[2]
    if idle is not None and idle["watts"] is not None:
        return idle["watts"]
    v = section(prof, "energy").get("idle_w")
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def load(d):
    """The profile directory's tables, with a clear error for a missing or unreadable file (BadInput)."""
    need = ("profile.json", "kernels.csv", "roofline.csv", "trace.json")
    for name in need:
        if not os.path.isfile(os.path.join(d, name)):
            raise BadInput(f"{d}: missing {name} (not a complete profile directory)")
    prof = read_json_object(os.path.join(d, "profile.json"))
    subblocks = prof.get("subblocks")  # subblocks.csv's rows, with times and rates unrounded
    return {
        "profile": prof,
        "subblocks": [r for r in subblocks if isinstance(r, dict)] if isinstance(subblocks, list) else [],
        "kernels": read_table(os.path.join(d, "kernels.csv"), ("category", "total_us"), "kernel table")[1],
        "roofline": read_csv(os.path.join(d, "roofline.csv")),
        "power": power_samples(os.path.join(d, "trace.json")),
        "energy": read_energy(os.path.join(d, "energy.csv")),
        "dir": d,
    }


def device_kind(prof):
    return section(prof, "context").get("device_kind", "GPU")


def title(prof, what):
    c = section(prof, "context")
    return f"{what}: {c.get('program', '')} on {c.get('device', '')}"


def ceilings(prof):
    """context.ceilings as {name: TFLOP/s or GB/s, 0 where unknown}, and those that are missing or not a number
    (null, not finite, negative: a damaged ceiling cache), each with what stands there."""
    ce = section(section(prof, "context"), "ceilings")
    values, bad = {}, []
    for key in ("bf16_tflops", "fp32_tflops", "dram_gbps"):
        v = ce.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf:
            values[key] = v
        else:
            values[key] = 0
            bad.append(f"{key} ({json.dumps(v) if key in ce else 'missing'})")
    return values, bad


def draw_roofs(ax, ce, matmul, lo, hi):
    """The compute roofs (bf16, or the CPU's matmul rate, and fp32 where it differs) and the memory slope, those
    that are known; returns the x range, widened to show each ridge."""
    bw = ce["dram_gbps"] * 1e9
    peaks = [(ce["bf16_tflops"], matmul)]
    if ce["fp32_tflops"] and ce["fp32_tflops"] != ce["bf16_tflops"]:
        peaks.append((ce["fp32_tflops"], "fp32"))
    for tflops, name in peaks:
        if bw > 0 and tflops > 0:
            peak = tflops * 1e12
            ridge = peak / bw
            lo, hi = min(lo, ridge / 10), max(hi, ridge * 10)
            xs = [lo, ridge, hi]
            ax.plot(xs, [min(bw * x, peak) for x in xs], "-", lw=2, label=f"{name} {tflops:.3g} TFLOP/s")
    if bw > 0:
        ax.plot([lo, hi], [bw * lo, bw * hi], ":", color="gray", lw=1, label=f"memory {bw / 1e9:.0f} GB/s")
    return lo, hi


def overlap(a, b):
    """Area shared by two display-space boxes (matplotlib Bbox)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def place_labels(ax, points, fontsize=6):
    """Labels the points [(x, y, text)] so that no two labels overlap each other or a marker, where room allows.

    Points that land on the same spot share one label ("ln1 bwd, ln2 bwd"). Each label then takes, in order of
    the points from top to bottom, the first free spot of a ring of offsets around its point (8 directions,
    growing distance), inside the axes; a label placed away from its point gets a thin leader line. Where no
    spot is free it takes the one with the least overlap. Returns [(label, display-space box)].
    """
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    to_px = ax.transData.transform
    groups = []  # [pixel position, [texts]]
    for x, y, text in points:
        px = to_px((x, y))
        for g in groups:
            if abs(g[0][0] - px[0]) < 3 and abs(g[0][1] - px[1]) < 3:
                g[1].append(text)
                break
        else:
            groups.append([px, [text]])
    frame = ax.get_window_extent(renderer)
    marker_r = 4  # pixels: a marker of size 30 is about 6 px across at 100 dpi
    taken = [Bbox.from_extents(px[0] - marker_r, px[1] - marker_r, px[0] + marker_r, px[1] + marker_r)
             for px, _ in groups]
    if ax.get_legend():
        taken.append(ax.get_legend().get_window_extent(renderer))
    directions = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
    boxes = []
    for px, texts in sorted(groups, key=lambda g: -g[0][1]):
        best = None
        for dist in (3, 8, 14, 22, 32, 44, 58, 75):
            for dx, dy in directions:
                ann = ax.annotate(", ".join(texts), ax.transData.inverted().transform(px), fontsize=fontsize,
                                  xytext=(dx * dist, dy * dist), textcoords="offset points",
                                  ha="left" if dx > 0 else "right" if dx < 0 else "center",
                                  va="bottom" if dy > 0 else "top" if dy < 0 else "center")
                box = ann.get_window_extent(renderer)
                inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                cost = sum(overlap(box, t) for t in taken) + (0 if inside else 1e9)
                if best is None or cost < best[0]:
                    if best:
                        best[1].remove()
                    best = (cost, ann, box, dist)
                else:
                    ann.remove()
                if best[0] == 0:
                    break
            if best[0] == 0:
                break
        cost, ann, box, dist = best
        if dist > 8:  # the same label again, with a leader line back to its point
            ann.remove()
            ax.annotate(ann.get_text(), ann.xy, fontsize=fontsize, xytext=ann.xyann, textcoords="offset points",
                        ha=ann.get_ha(), va=ann.get_va(),
                        arrowprops=dict(arrowstyle="-", lw=0.4, color="gray", shrinkA=0, shrinkB=2))
        taken.append(box)
        boxes.append((ann.get_text(), box))
    return boxes


def plot_roofline(p, plt, out):
    prof = p["profile"]
    ce, bad = ceilings(prof)
    if bad:  # drawn without them: the points are still worth seeing
        many = len(bad) > 1
        print(f"plot_profile.py: warning: {os.path.join(p['dir'], 'profile.json')}: ceiling{'s' if many else ''} "
              f"{', '.join(bad)} {'are not numbers' if many else 'is not a number'}; {os.path.basename(out)} is "
              f"drawn without {'them' if many else 'it'}", file=sys.stderr)
    fig, ax = plt.subplots(figsize=(9, 6))
    points = []  # (intensity, flop/s, label, kind)
    for r in p["subblocks"]:
        roof = section(r, "roofline")
        x, y = num(roof.get("intensity")), num(roof.get("tflops")) * 1e12
        if x > 0 and y > 0:
            points.append((x, y, f"{r.get('subblock')} {r.get('phase')}", "subblock"))
    # Per-kernel points: hardware counters under kernel replay where present, else analytic per-kernel rows.
    for r in p["roofline"]:
        if not r.get("kernel"):
            continue
        flops, nbytes, t = num(r.get("replay_flops")), num(r.get("replay_bytes")), num(r.get("time_us"))
        if not (flops > 0 and nbytes > 0):
            flops, nbytes = num(r.get("flops")), num(r.get("bytes"))
        if flops > 0 and nbytes > 0 and t > 0:
            points.append((flops / nbytes, flops / (t * 1e-6), r["kernel"], "kernel"))
    if points:
        xs = [q[0] for q in points]
        lo, hi = min(xs) / 4, max(xs) * 4
    else:
        lo, hi = 0.1, 1000.0
    lo, hi = draw_roofs(ax, ce, "bf16" if device_kind(prof) == "GPU" else "matmul", lo, hi)
    for kind, marker in (("subblock", "o"), ("kernel", "x")):
        sel = [q for q in points if q[3] == kind]
        if sel:
            ax.scatter([q[0] for q in sel], [q[1] for q in sel], marker=marker, s=30, zorder=3,
                       label="sub-blocks" if kind == "subblock" else "kernels (kernel replay)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, analytic)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title(prof, "Roofline"), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if not points:
        ax.text(0.5, 0.5, "no modelled sub-blocks", transform=ax.transAxes, ha="center")
    ax.legend(fontsize=7, loc="best")  # where it hides the fewest points
    fig.tight_layout()
    # Labels last, once the axes' scales, limits and size are final: their placement is in pixels.
    boxes = place_labels(ax, [(x, y, lab) for x, y, lab, kind in points if kind == "subblock"])
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return boxes


def window_steps(prof):
    """The steps of the profile's window (at least 1)."""
    n = num(section(prof, "throughput").get("steps"))
    return n if n >= 1 else 1


def phase_counts(prof, key):
    """{phase: its count of `key` ("steps", "tokens")} from an inference profile's phases; {} for training."""
    phases = section(prof, "inference").get("phases")
    return {p["phase"]: p[key] for p in phases if isinstance(p, dict) and num(p.get(key)) > 0} \
        if isinstance(phases, list) else {}


def phase_steps(prof):
    """{phase: the steps its time is divided by}: an inference profile's prefill and decode steps; a training
    profile's steps for every phase (each step runs fwd, bwd and opt)."""
    return phase_counts(prof, "steps") or {ph: window_steps(prof) for ph in PHASES}


def subblock_ms(prof, rows):
    """{(subblock, phase): ms per step of its phase} from profile.json's sub-block rows (time over the window)."""
    steps = phase_steps(prof)
    return {(r.get("subblock"), r["phase"]): num(r.get("time_us")) / 1e3 / steps[r["phase"]] for r in rows
            if num(r.get("time_us")) > 0 and r.get("phase") in steps}


def plot_subblocks(p, plt, out):
    prof = p["profile"]
    ms = subblock_ms(prof, p["subblocks"])
    names = list(dict.fromkeys(s for s, _ in ms))
    fig, ax = plt.subplots(figsize=(10, 5))
    xs = range(len(names))
    if prof.get("inference"):  # a prefill step (the prompts) and a decode step (a token per sequence) apart
        steps = phase_steps(prof)
        width = 0.8 / len(INFER_PHASES)
        for i, ph in enumerate(INFER_PHASES):
            vals = [ms.get((n, ph), 0.0) for n in names]
            if any(vals):
                ax.bar([x + (i + 0.5) * width - 0.4 for x in xs], vals, width=width, color=PHASE_COLORS[ph],
                       label=f"{ph} ({steps[ph]} step{'s' if steps[ph] != 1 else ''})")
        ax.set_ylabel("ms per step of its phase")
    else:
        bottom = [0.0] * len(names)
        for ph in PHASES:
            vals = [ms.get((n, ph), 0.0) for n in names]
            if any(vals):
                ax.bar(xs, vals, bottom=bottom, label=ph, color=PHASE_COLORS[ph])
                bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_ylabel("ms per step")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("sub-block")
    ax.set_title(title(prof, "Sub-blocks"), fontsize=9)
    if names:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no sub-block times", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot_kernels(p, plt, out):
    prof = p["profile"]
    steps = window_steps(prof)
    by_cat = {}
    for r in p["kernels"]:
        by_cat[r["category"]] = by_cat.get(r["category"], 0.0) + num(r["total_us"]) / 1e3 / steps
    cats = sorted(by_cat, key=by_cat.get, reverse=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.barh(cats[::-1], [by_cat[c] for c in cats[::-1]], color="tab:purple")
    total = sum(by_cat.values())
    for i, c in enumerate(cats[::-1]):
        ax.text(by_cat[c], i, f" {100 * by_cat[c] / total if total else 0:.1f}%", va="center", fontsize=8)
    ax.set_xlabel("ms per step")
    ax.set_ylabel("category")
    ax.set_title(title(prof, f"{device_kind(prof)} time by category"), fontsize=9)
    if not cats:
        ax.text(0.5, 0.5, "no kernels", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def power_samples(trace_path):
    """(t_s, watts) from the trace's "power" counter events; timestamps are microseconds."""
    events = read_json_object(trace_path).get("traceEvents")
    pts = [(num(e.get("ts")) / 1e6, num(section(e, "args").get("W"))) for e in events
           if isinstance(e, dict) and e.get("ph") == "C" and e.get("name") == "power"] if isinstance(events, list) else []
    return sorted((t, w) for t, w in pts if math.isfinite(t) and math.isfinite(w))


def plot_power(p, plt, out):
    prof = p["profile"]
    pts = p["power"]
    fig, ax = plt.subplots(figsize=(9, 4))
    if pts:
        t0 = pts[0][0]
        ax.plot([t - t0 for t, _ in pts], [w for _, w in pts], "-", color="tab:red")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("power (W)")
        avg_w = num(section(prof, "power").get("avg_w"))
        if math.isfinite(avg_w):
            ax.axhline(avg_w, ls="--", color="gray", label=f"average in window {avg_w:.0f} W")
            ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    else:
        ax.axis("off")
        ax.text(0.5, 0.5, "no power samples", transform=ax.transAxes, ha="center", va="center", fontsize=14)
    ax.set_title(title(prof, "Power"), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def energy_scale(rows):
    """(factor, unit) that the joules of rows are drawn in: mJ below 1 J, else J."""
    top = max((abs(v) for r in rows for v in (r["j_per_step"], r["ci95_high"]) if v is not None), default=0)
    return (1.0, "J") if top >= 1 else (1e3, "mJ")


def error_bar(value, bound):
    """The length of an error bar from value to one bound of its interval (0 where either is unknown)."""
    return abs(bound - value) if math.isfinite(value) and math.isfinite(bound) else 0.0


def energy_note(prof, rows):
    """The line under energy.png's title: the idle power and the closure (the sub-blocks' sum against the step)."""
    parts = []
    idle = idle_watts(prof, rows)
    if idle is not None:
        parts.append(f"idle {idle:.4g} W")
    c = energy_closure(prof, rows)
    if c:
        parts.append(f"closure: sub-blocks {c['sum_j']:.4g} J vs whole step {c['step_j']:.4g} J "
                     f"({c['diff_pct']:+.1f}%)")
    else:
        parts.append("closure: unknown")
    return "; ".join(parts)


def plot_energy(p, plt, out):
    prof = p["profile"]
    rows = p["energy"]
    subs = energy_parts(rows)[0]
    factor, unit = energy_scale(subs)
    scaled = lambda v: v * factor if v is not None else math.nan
    fig, ax = plt.subplots(figsize=(11, 5))
    xs = list(range(len(subs)))
    heights = [scaled(r["j_per_step"]) for r in subs]
    # Asymmetric error bars from the 95% interval; none where it or the bar is unknown.
    lo = [error_bar(h, scaled(r["ci95_low"])) for h, r in zip(heights, subs)]
    hi = [error_bar(h, scaled(r["ci95_high"])) for h, r in zip(heights, subs)]
    colors = [PHASE_COLORS.get(r["phase"], "tab:gray") for r in subs]
    if subs:
        from matplotlib.patches import Patch

        ax.bar(xs, heights, width=0.8, color=colors, alpha=0.45, yerr=[lo, hi], capsize=3,
               error_kw=dict(lw=1, ecolor="black"), label="J per step")
        above = [scaled(r["j_above_idle"]) for r in subs]
        ax.bar(xs, above, width=0.4, color=colors, edgecolor="black", linewidth=0.5, label="J above idle")
        # The legend in gray: the colours are the phases, which the ticks name.
        ax.legend(handles=[Patch(facecolor="gray", alpha=0.45, label="J per step, 95% interval"),
                           Patch(facecolor="gray", edgecolor="black", label="J above idle power (inner bar)")],
                  fontsize=8)
        ax.axhline(0, color="black", lw=0.5)
    else:
        ax.text(0.5, 0.5, "no sub-block energies", transform=ax.transAxes, ha="center")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['sub_block']} {r['phase']}" for r in subs], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("sub-block and phase (all its layers)")
    ax.set_ylabel(f"{unit} per training step")
    synthetic = " (synthetic)" if section(prof, "energy").get("synthetic") is True else ""
    ax.set_title(f"{title(prof, 'Energy per sub-block' + synthetic)}\n{energy_note(prof, rows)}", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="profile directory")
    ap.add_argument("-o", "--out", help="where to write the PNGs [DIR]")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        fail(f"no profile directory '{args.dir}'", 2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (python3 -m pip install matplotlib)")
    try:
        p = load(args.dir)
        out = output_dir(args.out or args.dir, fail)
        plots = [(os.path.join(out, f"{name}.png"), fn) for name, fn in (
            ("roofline", plot_roofline), ("subblocks", plot_subblocks), ("kernels", plot_kernels), ("power", plot_power))]
        if p["energy"] is not None:  # measured with --energy
            plots.append((os.path.join(out, "energy.png"), plot_energy))
        check_outputs(path for path, _ in plots)
    except BadInput as e:
        fail(str(e))
    for path, fn in plots:
        fn(p, plt, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
