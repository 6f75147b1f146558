#!/usr/bin/env python3
"""Checks that each wrapper in llmc/ptx.cuh asks the device for what its emulated twin does.

    check_ptx_wrappers.py [llmc/ptx.cuh]      (make test; --self-test checks the checker)

The emulated tier runs the #ifdef LLMC_EMU branch of each wrapper and never sees its inline PTX, so a wrapper
whose asm says .trans where the emulated call passes false, or .ca where the emulator implements .cg, or another
size or src-size, would pass every emulated test and be wrong on the device. For every function with inline PTX
this compares the asm string and operands with the emulated call:
  - mma: the shape and types in the emulated function's name (ptx_mma_bf16_16816: m16n8k16, bf16 x bf16 -> f32,
    row.col) are the instruction's;
  - ldmatrix: .x4 and .shared.b16; .trans exactly when the emulated call passes true;
  - cp.async: .cg (the emulator implements the 16-byte L2-only form), a cp-size of 16 as the emulated function's
    name says, and the src-size operand the same expression as the emulated call's third argument;
  - commit_group and wait_group N: the emulated call and the same N.
A function with inline PTX that no rule covers fails the check: a new wrapper needs a rule here and an emulation.
"""
import re
import sys

RULES = {
    "mma_bf16_16816": {
        "asm": [r"^mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32 "],
        "emu": r"::emu::ptx_mma_bf16_16816\(d, a, b\)",
    },
    "ldmatrix_x4": {
        "asm": [r"^ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 "],
        "emu": r"::emu::ptx_ldmatrix_x4\(r, smem_row, (?P<trans>true|false)\)",
    },
    "ldmatrix_x4_trans": {
        "asm": [r"^ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16 "],
        "emu": r"::emu::ptx_ldmatrix_x4\(r, smem_row, (?P<trans>true|false)\)",
    },
    "cp_async_16": {
        "asm": [r"^cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;"],
        "emu": r"::emu::ptx_cp_async_(?P<size>\d+)\(smem, gmem, (?P<src>[^;]+)\);",
    },
    "cp_async_commit": {"asm": [r"^cp\.async\.commit_group;"], "emu": r"::emu::ptx_cp_async_commit\(\)"},
    "cp_async_wait": {"asm": [r"^cp\.async\.wait_group %0;"], "emu": r"::emu::ptx_cp_async_wait\((?P<n>\w+)\)"},
}

FUNC = re.compile(r"__device__ __forceinline__ \w+ (\w+)\(")


def functions(src):
    """(name, body) of each __device__ function, the body up to the next function or the end."""
    starts = [(m.start(), m.group(1)) for m in FUNC.finditer(src)]
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(src)
        yield name, src[pos:end]


def asm_text(body):
    """The asm statement's instruction string (its literals joined) and its operand section."""
    m = re.search(r"asm volatile\((.*?)\);\n", body, re.S)
    if not m:
        return None, None
    inner = m.group(1)
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"', inner.split(":")[0])
    return "".join(literals).replace("\\n", "").strip(), inner


def check(src):
    errors = []
    seen = set()
    for name, body in functions(src):
        instr, operands = asm_text(body)
        if instr is None:
            continue
        seen.add(name)
        rule = RULES.get(name)
        if rule is None:
            errors.append(f"{name}: inline PTX with no rule in scripts/check_ptx_wrappers.py")
            continue
        emu = body.split("#ifdef LLMC_EMU", 1)[-1].split("#else", 1)[0]
        for pattern in rule["asm"]:
            if not re.search(pattern, instr):
                errors.append(f"{name}: asm '{instr}' is not /{pattern}/")
        m = re.search(rule["emu"], emu)
        if not m:
            errors.append(f"{name}: the emulated branch does not call /{rule['emu']}/")
            continue
        if "trans" in m.groupdict():
            if (m.group("trans") == "true") != (".trans" in instr):
                errors.append(f"{name}: asm {'has' if '.trans' in instr else 'lacks'} .trans, the emulated call "
                              f"passes {m.group('trans')}")
        if "size" in m.groupdict():
            size = re.search(r"\], (\d+), ", instr)
            if not size or size.group(1) != m.group("size"):
                errors.append(f"{name}: cp-size {size.group(1) if size else '?'} in the asm, "
                              f"{m.group('size')} in the emulated call")
            ops = re.findall(r'"\w"\(((?:[^()]|\([^()]*\))*)\)', operands)
            if len(ops) < 3 or ops[2].strip() != m.group("src").strip():
                errors.append(f"{name}: src-size operand {ops[2] if len(ops) > 2 else '?'} in the asm, "
                              f"{m.group('src')} in the emulated call")
        if "n" in m.groupdict():
            ops = re.findall(r'"n"\((\w+)\)', operands)
            if ops != [m.group("n")]:
                errors.append(f"{name}: wait_group operand {ops} in the asm, {m.group('n')} in the emulated call")
    for name in RULES:
        if name not in seen:
            errors.append(f"{name}: expected in llmc/ptx.cuh with inline PTX, not found")
    return errors


# Edits of the real header that the check must refuse (--self-test).
SELF_TEST = [
    ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {", "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {"),
    ("::emu::ptx_ldmatrix_x4(r, smem_row, false);", "::emu::ptx_ldmatrix_x4(r, smem_row, true);"),
    ("cp.async.cg.shared.global [%0]", "cp.async.ca.shared.global [%0]"),
    ('"r"(fill ? 16 : 0)', '"r"(fill ? 8 : 0)'),
    ("[%1], 16, %2", "[%1], 8, %2"),
    ("m16n8k16.row.col.f32.bf16.bf16.f32 {", "m16n8k8.row.col.f32.bf16.bf16.f32 {"),
    ('"n"(N)', '"n"(0)'),
    ("asm volatile(\"cp.async.commit_group;\\n\" ::);", "asm volatile(\"cp.async.commit_group;\\n\" ::);\n"
     "}\n__device__ __forceinline__ void cp_async_fence() {\n    asm volatile(\"fence.proxy.async;\\n\" ::);"),
]


def main():
    args = sys.argv[1:]
    self_test = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    path = args[0] if args else "llmc/ptx.cuh"
    src = open(path).read()
    errors = check(src)
    for e in errors:
        print(f"{path}: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    if self_test:
        for old, new in SELF_TEST:
            if src.count(old) != 1:
                sys.exit(f"self-test: '{old}' is not in {path} once")
            if not check(src.replace(old, new)):
                sys.exit(f"self-test: the check passes {path} with '{old}' -> '{new}'")
        print(f"check_ptx_wrappers: {len(SELF_TEST)} broken variants refused")
    print(f"check_ptx_wrappers: {len(RULES)} wrappers of {path} ask the device for what the emulator does")


if __name__ == "__main__":
    main()
