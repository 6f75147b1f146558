#!/usr/bin/env python3
"""Plots a sweep's CSV (scripts/sweep.py): for each mode it holds, the curves people compare.

Training rows: train_throughput.png (tok/s vs batch, one line per model and sequence length), train_memory.png
(peak memory vs batch, the memory limit: host RAM on the CPU, the free GPU memory on the GPU; configurations
that did not fit marked on it), train_efficiency.png
(FLOP/s per W vs batch, where power was measured), train_phases.png (ms per step split into forward, backward
and optimizer, for profiled configurations). Inference rows: infer_throughput.png (decode tok/s vs batch),
infer_ttft.png (time to first token vs prompt length), infer_memory.png, infer_efficiency.png. A plot with
nothing to show says so instead of being left out, so a sweep always gives the same files. Each line has its own
marker and line style, so lines that coincide (the same memory at two sequence lengths) both show.

    python3 scripts/plot_sweep.py DIR [-o OUTDIR]      (DIR/sweep.csv)
"""
import argparse
import math
import os
import sys

from plot_profile import BadInput, check_outputs, num, output_dir, read_table  # num: a CSV cell as a float, NaN when empty


# The columns the plots read (scripts/sweep.py writes them), and those of them that hold numbers.
NEEDED = ("mode", "device", "model", "B", "T", "prompt_len", "gen_len", "status", "tok_s", "peak_mem_mib",
          "mem_limit_mib", "flops_per_w", "fwd_ms", "bwd_ms", "opt_ms", "ttft_ms", "decode_tok_s")
NUMBERS = NEEDED[3:7] + NEEDED[8:]
# The plots of each mode, in the order they are written.
PNGS = {"train": ("train_throughput.png", "train_memory.png", "train_efficiency.png", "train_phases.png"),
        "infer": ("infer_throughput.png", "infer_ttft.png", "infer_memory.png", "infer_efficiency.png")}
# Magnitudes from here up are no measurement (tok/s, MiB, FLOP/s per W are all far below), and matplotlib
# overflows on them: a cell the sweep writes is empty (unknown) rather than this large or not finite.
TOO_LARGE = 1e30


def fail(msg, code=1):
    print(f"plot_sweep.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


def plottable(x):
    """Whether a number can stand in a sweep CSV's cell: finite and below TOO_LARGE."""
    return abs(x) < TOO_LARGE  # False for NaN and the infinities


def check_numbers(csv_path, rows):
    """BadInput for the first number cell of rows (read_table's) that is neither empty nor a number the plots can
    draw."""
    limit = f"{TOO_LARGE:.0e}".replace("e+", "e")
    for r in rows:
        for c in NUMBERS:
            if r.get(c) and not plottable(num(r[c])):
                raise BadInput(f"{csv_path}: line {r.line}: {c} '{r[c]}' is not a finite number of magnitude below "
                               f"{limit}")


def read_sweep(csv_path):
    """A sweep CSV's rows, read strictly (plot_profile.read_table: UTF-8, whole rows, named by line when not; the
    columns the plots need; check_numbers). BadInput otherwise."""
    rows = read_table(csv_path, NEEDED, "sweep CSV")[1]
    check_numbers(csv_path, rows)
    return rows


def model_label(model):
    return os.path.splitext(os.path.basename(model))[0]


def series(rows, label, x, y):
    """{label: [(x, y)] sorted by x} over the rows where y is known, labels in the order of the rows (the grid's)."""
    out = {}
    for r in rows:
        if not math.isnan(num(r[y])):
            out.setdefault(label(r), []).append((num(r[x]), num(r[y])))
    return {k: sorted(v) for k, v in out.items()}


def train_label(r):
    return f"{model_label(r['model'])} T={r['T']}"


def infer_label(r):
    return f"{model_label(r['model'])} prompt={r['prompt_len']} gen={r['gen_len']}"


MARKERS = "osD^vP<>"
LINESTYLES = ("-", "--", ":", "-.")
# What a row's mem_limit_mib is, by device (scripts/sweep.py): the machine's physical memory on the CPU, the
# free device memory the GPU program planned against.
LIMIT_NAMES = {"cpu": "host RAM", "gpu": "free GPU memory"}
LIMIT_COLORS = {"cpu": "tab:brown", "gpu": "tab:red"}


def draw_lines(ax, lines):
    """One line per series, the i-th with its own hollow marker and line style (over colours: lines that
    coincide stay apart)."""
    for i, (name, pts) in enumerate(lines.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                linestyle=LINESTYLES[i % len(LINESTYLES)], markerfacecolor="none", label=name)


def by_device(label, rows):
    """label, with the row's device in front where the rows are of more than one device."""
    if len({r["device"] for r in rows}) < 2:
        return label
    return lambda r: f"{r['device'].upper()} {label(r)}"


def placeholder(ax, text):
    ax.axis("off")
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=12)


def finish(plt, fig, ax, out, title, legend=True):
    ax.set_title(title, fontsize=10)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)


def batch_axis(ax, rows, x="B"):
    """Log2 axis with a tick at each value the sweep ran."""
    values = sorted({num(r[x]) for r in rows if not math.isnan(num(r[x]))})
    if len(values) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values)
    ax.set_xticklabels([f"{v:g}" for v in values])
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def plot_lines(plt, rows, label, x, y, xlabel, ylabel, title, out, empty):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    lines = series([r for r in rows if r["status"] == "ok"], label, x, y)
    if not lines:
        placeholder(ax, empty)
    draw_lines(ax, lines)
    if lines:
        batch_axis(ax, rows, x)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    finish(plt, fig, ax, out, title)


def plot_memory(plt, rows, label, out, title):
    """Peak memory of the configurations that ran; each device's memory limit; an x on it for each configuration
    that did not fit."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    lines = series([r for r in rows if r["status"] == "ok"], label, "B", "peak_mem_mib")
    draw_lines(ax, lines)
    limited = False
    for device in sorted({r["device"] for r in rows}):
        drows = [r for r in rows if r["device"] == device]
        limits = [num(r["mem_limit_mib"]) for r in drows if not math.isnan(num(r["mem_limit_mib"]))]
        if not limits:
            continue
        limited = True
        color = LIMIT_COLORS.get(device, "tab:gray")
        ax.axhline(max(limits), ls="--", color=color,
                   label=f"{LIMIT_NAMES.get(device, device + ' memory')} {max(limits):.0f} MiB")
        oom = [num(r["B"]) for r in drows if r["status"] == "oom"]
        if oom:
            ax.plot(oom, [max(limits)] * len(oom), "x", color=color, ms=10, mew=2,
                    label=f"does not fit (oom, {device.upper()})")
    if not lines and not limited:
        placeholder(ax, "no configuration ran")
    else:
        batch_axis(ax, rows)
        ax.set_xlabel("micro-batch B (sequences)")
        ax.set_ylabel("peak memory (MiB)")
        ax.set_yscale("log")  # the limit is often orders of magnitude above a small model's peak
    finish(plt, fig, ax, out, title)


def plot_phases(plt, rows, out, title):
    """Stacked forward / backward / optimizer ms per step, one bar per profiled configuration."""
    prof = [r for r in rows if r["status"] == "ok" and not math.isnan(num(r["fwd_ms"]))]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(prof) + 2), 4.5))
    if not prof:
        placeholder(ax, "no profiled configuration (run the sweep with --profile)")
    else:
        names = [f"{model_label(r['model'])} B={r['B']} T={r['T']}" for r in prof]
        bottom = [0.0] * len(prof)
        for phase, color in (("fwd", "tab:blue"), ("bwd", "tab:orange"), ("opt", "tab:green")):
            h = [0.0 if math.isnan(num(r[f"{phase}_ms"])) else num(r[f"{phase}_ms"]) for r in prof]
            ax.bar(range(len(prof)), h, bottom=bottom, color=color,
                   label={"fwd": "forward", "bwd": "backward", "opt": "optimizer"}[phase])
            bottom = [b + x for b, x in zip(bottom, h)]
        ax.set_xticks(range(len(prof)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        ax.set_xlabel("configuration (model, micro-batch B, sequence length T)")
        ax.set_ylabel("time per step (ms)")
        ax.grid(True, axis="y", alpha=0.3)
    finish(plt, fig, ax, out, title)


def plot(csv_path, out_dir):
    """Writes every plot for the modes in csv_path into out_dir; returns their paths."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (python3 -m pip install matplotlib)")
    rows = read_sweep(csv_path)
    modes = [m for m in PNGS if any(r["mode"] == m for r in rows)]
    written = [os.path.join(out_dir, name) for m in modes for name in PNGS[m]]
    check_outputs(written)  # each one before any is drawn

    def path(name):  # one of the PNGS of its mode, checked above
        return os.path.join(out_dir, name)

    for mode in modes:
        mrows = [r for r in rows if r["mode"] == mode]
        device = "/".join(sorted({r["device"].upper() for r in mrows}))
        B = "micro-batch B (sequences)"
        no_power = "no power measured (GPU, with --profile)"
        train, infer = by_device(train_label, mrows), by_device(infer_label, mrows)
        ttft = by_device(lambda r: f"{model_label(r['model'])} B={r['B']} gen={r['gen_len']}", mrows)
        if mode == "train":
            plot_lines(plt, mrows, train, "B", "tok_s", B, "throughput (tokens/s)",
                       f"Training throughput ({device})", path("train_throughput.png"), "no configuration ran")
            plot_memory(plt, mrows, train, path("train_memory.png"), f"Training peak memory ({device})")
            plot_lines(plt, mrows, train, "B", "flops_per_w", B, "FLOP/s per W",
                       f"Training efficiency ({device})", path("train_efficiency.png"), no_power)
            plot_phases(plt, mrows, path("train_phases.png"), f"Training step by phase ({device})")
        else:
            plot_lines(plt, mrows, infer, "B", "decode_tok_s", B, "decode throughput (tokens/s, all sequences)",
                       f"Decode throughput ({device})", path("infer_throughput.png"), "no configuration ran")
            plot_lines(plt, mrows, ttft, "prompt_len", "ttft_ms", "prompt length (tokens)", "time to first token (ms)",
                       f"Time to first token ({device})", path("infer_ttft.png"), "no configuration ran")
            plot_memory(plt, mrows, infer, path("infer_memory.png"), f"Inference peak memory ({device})")
            plot_lines(plt, mrows, infer, "B", "flops_per_w", B, "FLOP/s per W",
                       f"Inference efficiency ({device})", path("infer_efficiency.png"), no_power)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="sweep directory (with sweep.csv)")
    ap.add_argument("-o", "--out", help="where to write the PNGs [DIR]")
    args = ap.parse_args()
    csv_path = os.path.join(args.dir, "sweep.csv")
    if not os.path.isfile(csv_path):
        fail(f"no sweep.csv in '{args.dir}'", 2)
    try:
        for p in plot(csv_path, output_dir(args.out or args.dir, fail)):
            print(f"wrote {p}")
    except BadInput as e:
        fail(str(e))


if __name__ == "__main__":
    main()
