#!/usr/bin/env python3
"""Rewrites a CUDA source so that the host compiler can build it against the emulator (test/emu/emu.h).

    rewrite.py IN OUT

Three constructs are rewritten, in code only (comments and string literals are left alone), keeping every line
where it was so that compiler messages and __LINE__ point at the original:

  NAME<<<grid, block[, smem[, stream]]>>>(args)   ->  ::emu::launch("NAME", NAME, grid, block, ...)(args)
  __shared__ T name[dims];                         ->  T (&name)[dims] = ::emu::shared_var<T[dims]>(ID);
  extern __shared__ [__align__(n)] T name[];       ->  T* name = static_cast<T*>(::emu::dynamic_shared_storage());

Code in a branch the emulated build never compiles (the #else of #ifdef LLMC_EMU, the body of #ifndef LLMC_EMU:
the inline PTX of llmc/ptx.cuh) is left as it is and not examined. A kernel declared with __launch_bounds__(N, ...) gets ::emu::launch_bounds_check(N, "name") as the first
statement of its body. Anything else the emulator cannot honour stops the build with an error naming the file
and line: a __shared__ declaration it does not understand (several declarators, an initialiser), a launch whose
kernel or configuration it cannot parse, inline PTX, __managed__ memory, cooperative groups, texture objects.
"""
import re
import sys

UNSUPPORTED = {
    r"\basm\s*(volatile\s*)?\(": "inline PTX (asm) cannot be emulated",
    r"\b__managed__\b": "managed memory is not emulated",
    r"\bcooperative_groups\b": "cooperative groups are not emulated",
    r"\bcudaTextureObject_t\b|\btex[123]D\b": "textures are not emulated",
    r"\b__nanosleep\b|\bclock64\s*\(": "device clocks are not emulated",
}


class RewriteError(Exception):
    pass


def mask_code(src):
    """A copy of src with comments and string/char literals blanked (newlines kept), same length."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                raise RewriteError(f"line {src.count(chr(10), 0, i) + 1}: unterminated comment")
            for k in range(i, j + 2):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 2
        elif c in "\"'":
            # A raw string R"(...)" is not used in the kernels; treat quotes plainly with escapes.
            j = i + 1
            while j < n and src[j] != c:
                if src[j] == "\\":
                    j += 1
                if j < n and src[j] == "\n":
                    raise RewriteError(f"line {src.count(chr(10), 0, i) + 1}: unterminated literal")
                j += 1
            for k in range(i + 1, j):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


EMU_CONDITIONAL = re.compile(r"#\s*if(?P<neg>n)?def\s+LLMC_EMU\b|#\s*if\s+(?P<not>!\s*)?defined\s*\(?\s*LLMC_EMU\s*\)?\s*$")


def mask_device_only(code):
    """code with the lines the emulated build (LLMC_EMU defined) never compiles blanked, newlines kept."""
    lines = code.split("\n")
    stack = []  # per open conditional: None (unrelated) or [compiled_when_emu (bool)]
    for i, line in enumerate(lines):
        d = line.strip()
        directive = re.match(r"#\s*(\w+)", d)
        word = directive.group(1) if directive else ""
        skipped_before = any(f is not None and not f[0] for f in stack)
        if word in ("if", "ifdef", "ifndef"):
            m = EMU_CONDITIONAL.match(d)
            stack.append([not (m.group("neg") or m.group("not"))] if m else None)
        elif word == "elif":
            if stack and stack[-1] is not None:
                raise RewriteError(f"line {i + 1}: #elif in an LLMC_EMU conditional")
        elif word == "else":
            if not stack:
                raise RewriteError(f"line {i + 1}: #else without #if")
            if stack[-1] is not None:
                stack[-1][0] = not stack[-1][0]
        elif word == "endif":
            if not stack:
                raise RewriteError(f"line {i + 1}: #endif without #if")
            stack.pop()
        skipped = any(f is not None and not f[0] for f in stack)
        if (skipped or skipped_before) and not word:
            lines[i] = " " * len(line)
    return "\n".join(lines)


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


def match_close(code, pos, open_ch, close_ch):
    """Index of the bracket closing the one at pos."""
    depth = 0
    for i in range(pos, len(code)):
        if code[i] == open_ch:
            depth += 1
        elif code[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise RewriteError(f"line {line_of(code, pos)}: unbalanced '{open_ch}'")


def split_top_level(text):
    """Splits on commas outside (), [], {}."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def kernel_name_before(code, end):
    """Start index of the kernel expression ending at end (identifiers, ::, template arguments)."""
    i = end
    while i > 0 and code[i - 1] in " \t":
        i -= 1
    start_expr = i
    while i > 0:
        ch = code[i - 1]
        if ch == ">":
            depth = 0
            j = i - 1
            while j >= 0:
                if code[j] == ">":
                    depth += 1
                elif code[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            if j < 0:
                raise RewriteError(f"line {line_of(code, end)}: cannot parse the launched kernel's name")
            i = j
        elif ch.isalnum() or ch == "_" or ch == ":":
            i -= 1
        else:
            break
    name = code[i:start_expr]
    if not re.fullmatch(r"[A-Za-z_:][\w:]*(<.*>)?", name, re.S):
        raise RewriteError(f"line {line_of(code, end)}: cannot parse the launched kernel's name {name!r}")
    return i


def rewrite_launches(src, code):
    edits = []
    for m in re.finditer(r"<<<", code):
        start = kernel_name_before(code, m.start())
        name = src[start:m.start()].strip()
        close = code.find(">>>", m.end())
        if close < 0:
            raise RewriteError(f"line {line_of(src, m.start())}: launch without '>>>'")
        config = split_top_level(src[m.end():close])
        if not 2 <= len(config) <= 4 or any(not c for c in config):
            raise RewriteError(f"line {line_of(src, m.start())}: launch configuration of {len(config)} parts")
        after = close + 3
        while after < len(code) and code[after] in " \t\n":
            after += 1
        if after >= len(code) or code[after] != "(":
            raise RewriteError(f"line {line_of(src, m.start())}: launch not followed by an argument list")
        cfg = ", ".join(f"({c})" for c in config)
        # Newlines inside the configuration are kept so that the lines after it do not move.
        newlines = "\n" * src.count("\n", start, after)
        edits.append((start, after, f'::emu::launch("{name}", {name}, {cfg}){newlines}'))
    return edits


SHARED_DECL = re.compile(r"(?P<extern>\bextern\s+)?\b__shared__\b(?P<body>[^;{}]*);")
DECLARATOR = re.compile(r"^(?P<type>.*?[\w>:\s*&])\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(\[[^\[\]]*\]\s*)*)$", re.S)


def rewrite_shared(src, code, counter):
    edits = []
    for m in SHARED_DECL.finditer(code):
        line = line_of(src, m.start())
        body = src[m.start("body"):m.end("body")]
        body = re.sub(r"__align__\s*\(\s*\d+\s*\)", " ", body).strip()
        if "=" in body or "," in re.sub(r"<[^<>]*>", "", body):
            raise RewriteError(f"line {line}: __shared__ declaration with an initialiser or several declarators")
        d = DECLARATOR.match(body)
        if not d or not d.group("type").strip():
            raise RewriteError(f"line {line}: cannot parse the __shared__ declaration {body!r}")
        typ, name, dims = d.group("type").strip(), d.group("name"), re.sub(r"\s+", "", d.group("dims"))
        newlines = "\n" * src.count("\n", m.start(), m.end())
        if m.group("extern"):
            if dims != "[]":
                raise RewriteError(f"line {line}: extern __shared__ {name} must be an unsized array")
            text = f"{typ}* {name} = static_cast<{typ}*>(::emu::dynamic_shared_storage());"
        else:
            if "[]" in dims:
                raise RewriteError(f"line {line}: unsized __shared__ array {name} without extern")
            counter[0] += 1
            if dims:
                text = f"{typ} (&{name}){dims} = ::emu::shared_var<{typ}{dims}>({counter[0]});"
            else:
                text = f"{typ}& {name} = ::emu::shared_var<{typ}>({counter[0]});"
        edits.append((m.start(), m.end(), text + newlines))
    return edits


def rewrite_launch_bounds(src, code):
    edits = []
    for m in re.finditer(r"\b__launch_bounds__\s*\(", code):
        if not re.search(r"__global__[\w\s]*$", code[max(0, m.start() - 200):m.start()]):
            raise RewriteError(f"line {line_of(src, m.start())}: __launch_bounds__ not after __global__ ... ")
        close = match_close(code, m.end() - 1, "(", ")")
        bound = split_top_level(src[m.end():close])[0]
        params = code.find("(", close + 1)
        name = code[close + 1:params].split()[-1] if params > 0 else ""
        if params < 0 or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise RewriteError(f"line {line_of(src, m.start())}: cannot find the kernel after __launch_bounds__")
        params_end = match_close(code, params, "(", ")")
        brace = params_end + 1
        while brace < len(code) and code[brace] in " \t\n":
            brace += 1
        if brace >= len(code) or code[brace] != "{":
            raise RewriteError(f"line {line_of(src, m.start())}: kernel {name} declared with __launch_bounds__ "
                               f"but without a body here")
        edits.append((brace + 1, brace + 1, f' ::emu::launch_bounds_check({bound}, "{name}");'))
    return edits


def rewrite(src, counter):
    code = mask_device_only(mask_code(src))
    for pattern, why in UNSUPPORTED.items():
        m = re.search(pattern, code)
        if m:
            raise RewriteError(f"line {line_of(src, m.start())}: {why}")
    edits = rewrite_launches(src, code) + rewrite_shared(src, code, counter) + rewrite_launch_bounds(src, code)
    edits.sort()
    for a, b in zip(edits, edits[1:]):
        if a[1] > b[0]:
            raise RewriteError(f"line {line_of(src, b[0])}: overlapping constructs")
    out, pos = [], 0
    for start, end, text in edits:
        out.append(src[pos:start])
        out.append(text)
        pos = end
    out.append(src[pos:])
    result = "".join(out)
    leftover = re.search(r"<<<|\b__shared__\b", mask_device_only(mask_code(result)))
    if leftover:
        raise RewriteError(f"line {line_of(result, leftover.start())}: a construct the rewriter does not recognise")
    assert result.count("\n") == src.count("\n"), "line numbers moved"
    return result


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: rewrite.py IN OUT")
    path, out = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        src = f.read()
    # Ids of __shared__ declarations: unique across files, from a hash of the path (one file, one range).
    counter = [(sum(path.encode()) * 7919 % 100000) * 1000]
    try:
        text = rewrite(src, counter)
    except RewriteError as e:
        sys.exit(f"{path}:{e}")
    with open(out, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{path}"\n' + text)


if __name__ == "__main__":
    main()
