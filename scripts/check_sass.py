#!/usr/bin/env python3
"""What the CPU can check of the attention kernels' machine code (make sass_check; doc/attention.md).

    check_sass.py OBJECT PTXAS_REPORT
    check_sass.py --sass SASS_TEXT PTXAS_REPORT     (cuobjdump -sass output already written to a file)

OBJECT is an nvcc object holding the attention kernels (llmc/attention.cuh) for sm_80 or later; PTXAS_REPORT is
the `-Xptxas -v` output of its compilation. Fails (exit 1, one line per problem) unless, for each of the forward,
dK/dV and dQ kernels:
  - ptxas reports no spill stores or loads and no stack frame (no local memory);
  - its SASS (cuobjdump -sass) has ldmatrix (LDSM), cp.async (LDGSTS) and m16n8k16 tensor-core MMAs (HMMA.16816);
  - where its source (llmc/attention.cuh, with the functions it calls) uses ldmatrix_x4_trans, its SASS has the
    transposed form LDSM.16.MT88 (the emulator runs the wrapper's emulated branch, never the PTX);
  - its SASS has no generic loads (LD.E: a pointer the compiler could not prove shared or global) and no
    local-memory traffic (LDL/STL).
cuobjdump is looked for on PATH, in $CUDA_HOME/bin, then in the pip package nvidia-cuda-cuobjdump; it runs nvdisasm,
which it finds beside itself (pip package nvidia-cuda-nvdisasm). scripts/deps.sh installs both where the toolkit
lacks them.
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

KERNELS = {
    "forward": "attention_forward_kernel",
    "dK/dV": "attention_backward_dkdv_kernel",
    "dQ": "attention_backward_dq_kernel",
}
REQUIRED = {"LDSM": r"\bLDSM\.", "LDGSTS": r"\bLDGSTS\.", "HMMA.16816": r"\bHMMA\.16816\."}
TRANS = ("LDSM.16.MT88", r"\bLDSM\.16\.MT88\b")
SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "llmc", "attention.cuh")
FORBIDDEN = {"generic load LD.E": r"\bLD\.E\b", "local load LDL": r"\bLDL\b", "local store STL": r"\bSTL\b"}


def find_cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if os.access(os.path.join(cuda, "bin", "cuobjdump"), os.X_OK):
        return os.path.join(cuda, "bin", "cuobjdump")
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))):
            if os.access(path, os.X_OK):
                return path
    return None


def functions(sass):
    """{mangled name: its SASS text} from cuobjdump -sass output."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", sass, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def ptxas_entries(report):
    """{mangled name: the report's lines about it} from -Xptxas -v output."""
    entries, current = {}, None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = m.group(1)
            entries[current] = []
        elif current:
            entries[current].append(line)
    return entries


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def definitions(src):
    """{function name: its body} of the function definitions in src (comments removed)."""
    src = strip_comments(src)
    defs = {}
    for m in re.finditer(r"\b(\w+)\s*\(", src):
        # the parameter list, then qualifiers, then the body's brace
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        tail = re.match(r"\s*(const\s*)?(noexcept\s*)?\{", src[i:])
        if not tail or m.group(1) in ("if", "for", "while", "switch", "return", "sizeof", "static_assert"):
            continue
        start = i + tail.end()
        depth, j = 1, start
        while j < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            j += 1
        defs.setdefault(m.group(1), src[start:j])
    return defs


def uses_transposed_ldmatrix(src):
    """The functions of src that call ldmatrix_x4_trans, directly or through functions defined in src."""
    defs = definitions(src)
    reach = {name for name, body in defs.items() if re.search(r"\bldmatrix_x4_trans\s*[(<]", body)}
    changed = True
    while changed:
        changed = False
        for name, body in defs.items():
            if name not in reach and any(re.search(r"\b" + r + r"\s*[(<]", body) for r in reach):
                reach.add(name)
                changed = True
    return reach


def check(sass_funcs, report_entries, trans_kernels=()):
    problems, rows = [], []
    for what, name in KERNELS.items():
        sass = [(n, s) for n, s in sass_funcs.items() if name in n]
        report = [(n, r) for n, r in report_entries.items() if name in n]
        if not sass or not report:
            problems.append(f"{what}: no kernel named {name} in the {'SASS' if not sass else 'ptxas report'}")
            continue
        for mangled, text in sass:
            counts = {k: len(re.findall(p, text)) for k, p in {**REQUIRED, **FORBIDDEN}.items()}
            for k in REQUIRED:
                if counts[k] == 0:
                    problems.append(f"{what} ({mangled}): no {k} in its SASS")
            if name in trans_kernels and not re.search(TRANS[1], text):
                problems.append(f"{what} ({mangled}): its source uses ldmatrix_x4_trans, its SASS has no {TRANS[0]}")
            for k in FORBIDDEN:
                if counts[k]:
                    problems.append(f"{what} ({mangled}): {counts[k]} x {k} in its SASS")
            lines = dict(report).get(mangled, [])
            joined = "\n".join(lines)
            regs = re.search(r"Used (\d+) registers", joined)
            spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", joined)
            if not spill:
                problems.append(f"{what} ({mangled}): the ptxas report has no spill line")
            elif any(int(x) for x in spill.groups()):
                problems.append(f"{what} ({mangled}): ptxas: {spill.group(0)}")
            rows.append((what, regs.group(1) if regs else "?", spill.group(0) if spill else "?",
                         " ".join(f"{k} {counts[k]}" for k in REQUIRED)))
    return problems, rows


def main():
    args = sys.argv[1:]
    given_sass = len(args) == 3 and args[0] == "--sass"
    if given_sass:
        args = args[1:]
    if len(args) != 2 or args[0].startswith("-"):
        sys.exit("usage: check_sass.py OBJECT PTXAS_REPORT | check_sass.py --sass SASS_TEXT PTXAS_REPORT")
    obj, report_path = args
    for path in (obj, report_path):
        if not os.path.isfile(path):
            sys.exit(f"check_sass.py: {path}: no such file")
    if given_sass:
        with open(obj, encoding="utf-8", errors="replace") as f:
            sass = f.read()
    else:
        tool = find_cuobjdump()
        if not tool:
            sys.exit("check_sass.py: cuobjdump not found (PATH, $CUDA_HOME/bin, or `pip install "
                     "nvidia-cuda-cuobjdump`; scripts/deps.sh installs it)")
        run = subprocess.run([tool, "-sass", obj], capture_output=True, text=True)
        if run.returncode != 0:
            hint = " (`pip install nvidia-cuda-nvdisasm`; scripts/deps.sh installs it)" if "nvdisasm" in run.stderr else ""
            sys.exit(f"check_sass.py: {tool} -sass {obj} failed: {run.stderr.strip()}{hint}")
        sass = run.stdout
    with open(report_path, encoding="utf-8") as f:
        report = f.read()
    with open(SOURCE, encoding="utf-8") as f:
        trans_kernels = uses_transposed_ldmatrix(f.read())
    problems, rows = check(functions(sass), ptxas_entries(report), trans_kernels)
    for what, regs, spill, counts in rows:
        print(f"sass_check: {what:8s} {regs} registers, {spill}; {counts}")
    for p in problems:
        print(f"sass_check: FAIL: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print("sass_check: the attention kernels use ldmatrix, cp.async and mma.sync m16n8k16, without generic loads "
          "or local memory")


if __name__ == "__main__":
    main()
