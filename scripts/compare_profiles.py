#!/usr/bin/env python3
"""Compares two profile directories sub-block by sub-block (CPU vs GPU, or GPU vs GPU).

Prints each (sub-block, phase)'s time per step in A and B and the ratio A/B, then the per-phase and
whole-run totals, and writes a grouped bar chart (log time axis: CPU and GPU differ by orders of magnitude).
Profiles of different models or batch shapes do different work per step: the script warns, and
--per-token compares time per token instead. Training profiles: every phase per training step, a step's
tokens B * T * grad_accum. Inference profiles (infer_gpt2, infer_gpt2cu): a phase's rows per step of that
phase (the prefill is one step, each decode step one), and per token of that phase (prompt tokens for
prefill, generated tokens for decode), so a batch's decode cost per token reads directly. A training and an
inference profile share no phase: the script warns, prints each one's rows and phase totals, and gives no
ratio and no whole-run total. Beside the plot it writes a comparison page (compare.html: the same chart,
interactive, and the table, sortable; self-contained like report.html, scripts/report_html.py).

    python3 scripts/compare_profiles.py A B [-o compare.png] [--html compare.html] [--per-token]
"""
import argparse
import math
import os
import sys

from plot_profile import (BadInput, num, output_problem, phase_counts, read_json_object, read_table, section,
                          window_steps)
from report_html import page, write_page

PHASES = ("fwd", "bwd", "opt", "prefill", "decode")  # training, then inference (infer_gpt2)


def fail(msg, code=1):
    print(f"compare_profiles.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


class Profile:
    """A profile directory's context, its (subblock, phase) -> microseconds in the window, and the steps and
    tokens each phase's time is divided by."""

    def __init__(self, context, us, steps, phase_steps, phase_tokens):
        self.context, self.us, self.steps = context, us, steps
        self.phase_steps, self.phase_tokens = phase_steps, phase_tokens
        self.kind = "inference" if phase_steps else "training"

    def divisor(self, phase, per_token):
        """What a phase's microseconds are divided by: steps (in ms) or tokens (in us), None if unknown;
        phase None: the whole run."""
        if self.phase_steps:  # inference: each phase has its own steps and tokens (another phase: the run's)
            pick = self.phase_tokens if per_token else self.phase_steps
            n = pick[phase] if phase in pick else sum(pick.values())
            return n * (1 if per_token else 1e3) if n else None
        if not per_token:
            return self.steps * 1e3
        t = tokens_per_step(self.context)
        return self.steps * t if t else None

    def values(self, per_token):
        """{(subblock, phase): ms per step or us per token}."""
        return {k: v / self.divisor(k[1], per_token) for k, v in self.us.items() if self.divisor(k[1], per_token)}

    def total(self, phase, per_token):
        """A phase's (or, phase None, the whole run's) time per step or per token."""
        v = sum(t for (s, q), t in self.us.items() if phase is None or q == phase)
        n = self.divisor(phase, per_token)
        return v / n if v and n else None


def load(d):
    """The Profile of a directory."""
    if not os.path.isdir(d):
        fail(f"no profile directory '{d}'", 2)
    for name in ("profile.json", "subblocks.csv"):
        if not os.path.isfile(os.path.join(d, name)):
            fail(f"{d}: missing {name} (not a complete profile directory)")
    prof = read_json_object(os.path.join(d, "profile.json"))
    us = {}
    for r in read_table(os.path.join(d, "subblocks.csv"), ("subblock", "phase", "time_us"), "sub-block table")[1]:
        try:
            t = float(r["time_us"])
        except ValueError:
            continue
        if 0 < t < math.inf:
            us[(r["subblock"], r["phase"])] = t
    return Profile(section(prof, "context"), us, window_steps(prof), phase_counts(prof, "steps"),
                   phase_counts(prof, "tokens"))


def shape(c):
    """The model and batch of a profile's context, as (name, value) pairs that must match for a fair compare."""
    m, b = section(c, "model"), section(c, "batch")
    model = f"L={m.get('num_layers')} NH={m.get('num_heads')} C={m.get('channels')} V={m.get('vocab_size')}"
    return (("model", model), ("B", b.get("B")), ("T", b.get("T")), ("grad_accum", b.get("grad_accum", 1)))


def tokens_per_step(c):
    b = section(c, "batch")
    grad_accum = num(b.get("grad_accum"))
    n = num(b.get("B")) * num(b.get("T")) * (grad_accum if grad_accum > 0 else 1)
    return n if 0 < n < math.inf else None


def distinct_names(pa, pb):
    """The shortest trailing parts of two directory paths that tell them apart ("run1/prof", "run2/prof")."""
    a = os.path.normpath(os.path.abspath(pa)).split(os.sep)
    b = os.path.normpath(os.path.abspath(pb)).split(os.sep)
    for k in range(1, max(len(a), len(b)) + 1):
        na, nb = os.path.join(*a[-k:]), os.path.join(*b[-k:])
        if na != nb:
            return na, nb
    return pa, pb  # the same directory twice


def fmt(v, spec=".3f"):
    return f"{v:{spec}}" if v is not None and not math.isnan(v) else "-"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="profile directory A")
    ap.add_argument("b", help="profile directory B")
    ap.add_argument("-o", "--out", default="compare.png", help="comparison plot, a .png file [compare.png]")
    ap.add_argument("--html", help="comparison page, a .html file [-o's name with .html]")
    ap.add_argument("--per-token", action="store_true", help="compare microseconds per token instead of ms per step")
    args = ap.parse_args()
    # The plot goes exactly where -o says: a name without .png would be written as NAME.png.
    if not args.out.lower().endswith(".png"):
        fail(f"-o: '{args.out}' is not a .png file name", 2)
    args.html = args.html or args.out[:-4] + ".html"
    if not args.html.lower().endswith(".html"):
        fail(f"--html: '{args.html}' is not a .html file name", 2)
    for flag, path in (("-o", args.out), ("--html", args.html)):
        problem = output_problem(path)
        if problem:
            fail(f"{flag}: {problem}", 2)
        if not os.path.isdir(os.path.dirname(path) or "."):
            fail(f"{flag}: '{path}': no directory '{os.path.dirname(path)}'", 2)
    return args


def unlike(pa, pb, per_token):
    """The warning for profiles of different kinds (no shared phase) or shapes (different work per step); None
    for profiles alike."""
    differ = [f"{name} ({x} vs {y})" for (name, x), (_, y) in zip(shape(pa.context), shape(pb.context)) if x != y]
    if pa.kind != pb.kind:  # fwd/bwd/opt against prefill/decode: no row, and no step, is the other's
        a_kind = {"training": "a training", "inference": "an inference"}
        return (f"A is {a_kind[pa.kind]} profile and B {a_kind[pb.kind]} one: they share no phase, so no row has a "
                f"ratio and there is no whole-run total")
    if differ:
        return (f"A and B differ in {', '.join(differ)}: they do different work per step"
                f"{'' if per_token else '; --per-token compares time per token'}")
    return None


def print_table(pa, pb, la, lb, keys, per_token):
    unit = "us/tok" if per_token else "ms"
    a, b = pa.values(per_token), pb.values(per_token)
    print(f"A: {la}")  # as the plot's legend names them
    print(f"B: {lb}")
    print(f"{'subblock':<12} {'phase':<7} {'A ' + unit:>12} {'B ' + unit:>12} {'A/B':>10}")

    def row(name, phase, x, y):
        ratio = x / y if x is not None and y else math.nan
        # Times to 4 significant digits: per token, a GPU sub-block takes thousandths of a microsecond.
        print(f"{name:<12} {phase:<7} {fmt(x, '.4g'):>12} {fmt(y, '.4g'):>12} {fmt(ratio):>10}")

    for s, p in keys:
        row(s, p, a.get((s, p)), b.get((s, p)))
    print()
    for p in PHASES + ((None,) if pa.kind == pb.kind else ()):
        ta, tb = pa.total(p, per_token), pb.total(p, per_token)
        if ta or tb:
            row(p or "total", "", ta, tb)


def draw(a, b, la, lb, keys, per_token, out):
    """The grouped bar chart, written to exactly `out`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (python3 -m pip install matplotlib)")
    labels = [f"{s} {p}" for s, p in keys]
    ys = range(len(keys))
    fig, ax = plt.subplots(figsize=(9, max(4, 0.28 * len(keys) + 1.5)))
    h = 0.4
    ax.barh([y - h / 2 for y in ys], [a.get(k, 0) for k in keys], height=h, label=f"A: {la}")
    ax.barh([y + h / 2 for y in ys], [b.get(k, 0) for k in keys], height=h, label=f"B: {lb}")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    if any(a.values()) or any(b.values()):
        ax.set_xscale("log")
    ax.set_xlabel("microseconds per token" if per_token else "ms per step")
    ax.set_title("Sub-block time per token" if per_token else "Sub-block time per step", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100, format="png")
    plt.close(fig)


def write_html(path, pa, pb, la, lb, keys, per_token, warning):
    """The comparison page: the rows and totals of the table, drawn and sortable. Without plotly (or where it
    cannot be written) one warning line says so: the plot and the table are the comparison's main output."""
    a, b = pa.values(per_token), pb.values(per_token)
    rows = [{"subblock": s, "phase": p, "a": a.get((s, p)), "b": b.get((s, p))} for s, p in keys]
    totals = [{"subblock": p or "total", "phase": "", "a": pa.total(p, per_token), "b": pb.total(p, per_token)}
              for p in PHASES + ((None,) if pa.kind == pb.kind else ()) if pa.total(p, per_token) or pb.total(p, per_token)]
    for r in rows + totals:
        r["ratio"] = r["a"] / r["b"] if r["a"] is not None and r["b"] else None
    data = {"a": {"name": la.split(": ")[0], "label": la, "context": pa.context},
            "b": {"name": lb.split(": ")[0], "label": lb, "context": pb.context},
            "unit": "us per token" if per_token else "ms per step", "rows": rows, "totals": totals, "warning": warning}
    try:
        write_page(path, page("Profile comparison", data, [("comparison", "Comparison"), ("rows", "Sub-blocks")],
                              "compare.js"))
    except BadInput as e:
        print(f"compare_profiles.py: warning: {path} not written: {e}", file=sys.stderr)
        return
    print(f"wrote {path}")


def main():
    args = parse_args()
    try:
        pa, pb = load(args.a), load(args.b)
    except BadInput as e:
        fail(str(e))
    ca, cb = pa.context, pb.context
    # Legends say which directory each bar comes from: two runs on one device differ in nothing else.
    na, nb = distinct_names(args.a, args.b)
    la = f"{na}: {ca.get('program', '?')} ({ca.get('device', '?')})"
    lb = f"{nb}: {cb.get('program', '?')} ({cb.get('device', '?')})"
    warning = unlike(pa, pb, args.per_token)
    if warning:
        print(f"compare_profiles.py: warning: {warning}", file=sys.stderr)
    if args.per_token:
        for d, p in ((args.a, pa), (args.b, pb)):
            if p.divisor(None, True) is None:
                fail(f"{d}: profile.json has no batch shape (B, T), so no tokens per step for --per-token")
    a, b = pa.values(args.per_token), pb.values(args.per_token)
    # Rows in A's order, then B's extra ones: both follow the report's phase / sub-block order.
    keys = list(dict.fromkeys(list(a) + list(b)))
    keys.sort(key=lambda k: PHASES.index(k[1]) if k[1] in PHASES else len(PHASES))
    print_table(pa, pb, la, lb, keys, args.per_token)
    draw(a, b, la, lb, keys, args.per_token, args.out)
    print(f"wrote {args.out}")
    write_html(args.html, pa, pb, la, lb, keys, args.per_token, warning)


if __name__ == "__main__":
    main()
