#!/usr/bin/env python3
"""Reads a profile's memory_snapshot.pickle and prints its totals, one `key value` line each.

    memviz_check.py SNAPSHOT [--torch]

Without --torch: Python's own pickle reads it; the blocks must tile each segment, and the device trace must
free only what it allocated. With --torch: PyTorch's memory viewer functions read it as well
(torch.cuda._memory_viz.segsum, which checks every segment's accounting, segments, memory and trace) and the
totals are its own (calc_active over the segments); exit 3 when torch is not importable.
"""
import argparse
import pickle
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshot")
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    with open(a.snapshot, "rb") as f:
        data = pickle.load(f)
    segs = data["segments"]
    for s in segs:
        off = s["address"]
        for b in s["blocks"]:
            if b["address"] != off:
                sys.exit(f"segment {s['address']:#x}: block at {b['address']:#x}, expected {off:#x}")
            off += b["size"]
        if off != s["address"] + s["total_size"]:
            sys.exit(f"segment {s['address']:#x}: blocks cover {off - s['address']} of {s['total_size']} bytes")
    live, peak, allocs, frees = 0, 0, 0, 0
    open_allocs = {}
    cats = set()
    for e in data["device_traces"][0]:
        cats.add(e.get("category"))
        if e["action"] == "alloc":
            open_allocs[e["addr"]] = e["size"]
            live += e["size"]
            peak = max(peak, live)
            allocs += 1
        elif e["action"] == "free_completed":
            if open_allocs.pop(e["addr"], None) != e["size"]:
                sys.exit(f"free of {e['addr']:#x} that the trace did not allocate")
            live -= e["size"]
            frees += 1
    if "unknown" not in cats:
        sys.exit("no event of category 'unknown'")
    reserved = sum(s["total_size"] for s in segs)
    active = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
    if a.torch:
        try:
            from torch.cuda import _memory_viz as mv
        except Exception as e:  # noqa: BLE001 - any import failure means "not installed here"
            print(f"torch not importable: {e}")
            sys.exit(3)
        mv.segsum(data)  # raises on a segment whose blocks do not add up
        mv.segments(data, format_flamegraph=lambda lines: lines)
        mv.memory(data, format_flamegraph=lambda lines: lines)
        mv.trace(data)
        active = sum(mv.calc_active(s) for s in segs)
    print(f"segments {len(segs)}")
    print(f"reserved {reserved}")
    print(f"active {active}")
    print(f"trace_peak {peak}")
    print(f"allocs {allocs}")
    print(f"frees {frees}")
    print(f"still_live {live}")


if __name__ == "__main__":
    main()
