#!/usr/bin/env python3
"""Compares two profile directories sub-block by sub-block (CPU vs GPU, or GPU vs GPU).

Prints each (sub-block, phase)'s time per step in A and B and the ratio A/B, then the fwd/bwd/opt
totals, and writes a grouped bar chart (log time axis: CPU and GPU differ by orders of magnitude).

    python3 scripts/compare_profiles.py A B [-o compare.png]
"""
import argparse
import csv
import json
import math
import os
import sys

PHASES = ("fwd", "bwd", "opt", "prefill", "decode")  # training, then inference (infer_gpt2)


def fail(msg, code=1):
    print(f"compare_profiles.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def load(d):
    """(label, {(subblock, phase): ms per step}) of a profile directory."""
    if not os.path.isdir(d):
        fail(f"no profile directory '{d}'", 2)
    for name in ("profile.json", "subblocks.csv"):
        if not os.path.isfile(os.path.join(d, name)):
            fail(f"{d}: missing {name} (not a complete profile directory)")
    with open(os.path.join(d, "profile.json")) as f:
        prof = json.load(f)
    steps = max(1, prof.get("throughput", {}).get("steps", 1) or 1)
    ms = {}
    with open(os.path.join(d, "subblocks.csv"), newline="") as f:
        for r in csv.DictReader(f):
            try:
                t = float(r["time_us"])
            except ValueError:
                continue
            if t > 0:
                ms[(r["subblock"], r["phase"])] = t / 1e3 / steps
    c = prof.get("context", {})
    return f"{c.get('program', '?')} ({c.get('device', '?')})", ms


def fmt(v):
    return f"{v:.3f}" if v is not None and not math.isnan(v) else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="profile directory A")
    ap.add_argument("b", help="profile directory B")
    ap.add_argument("-o", "--out", default="compare.png", help="comparison plot [compare.png]")
    args = ap.parse_args()
    (la, a), (lb, b) = load(args.a), load(args.b)

    # Rows in A's order, then B's extra ones: both follow the report's phase / sub-block order.
    keys = list(dict.fromkeys(list(a) + list(b)))
    keys.sort(key=lambda k: PHASES.index(k[1]) if k[1] in PHASES else len(PHASES))
    print(f"A: {args.a}: {la}")
    print(f"B: {args.b}: {lb}")
    print(f"{'subblock':<12} {'phase':<7} {'A ms':>12} {'B ms':>12} {'A/B':>10}")

    def row(name, phase, x, y):
        ratio = x / y if x is not None and y else math.nan
        print(f"{name:<12} {phase:<7} {fmt(x):>12} {fmt(y):>12} {fmt(ratio):>10}")

    for s, p in keys:
        row(s, p, a.get((s, p)), b.get((s, p)))
    print()
    for p in PHASES + ("total",):
        ta = sum(v for (s, q), v in a.items() if p in (q, "total"))
        tb = sum(v for (s, q), v in b.items() if p in (q, "total"))
        if ta or tb:
            row(p, "", ta, tb)

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
    ax.set_xlabel("ms per step")
    ax.set_title("Sub-block time per step", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    plt.close(fig)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
