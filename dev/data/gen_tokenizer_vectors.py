"""
Regenerates test/data/tokenizer_vectors.txt, the reference the C++ tokenizer tests compare against.

The expected ids come from tiktoken (OpenAI's BPE library, whose "gpt2" encoding reproduces GPT-2's encoder.py),
built offline from the same encoder.json and vocab.bpe the C++ tokenizer loads. The tinyshakespeare shards are
produced exactly as llm.c's dev/data/tinyshakespeare.py does: "<|endoftext|>" before every "\n\n"-separated
section, encoded with the special token allowed, first 32768 tokens to val, the rest to train.

Facts are written for two texts: the whole of tinyshakespeare ("shakespeare_*", checked where the tests are given
the full text through LLMC_DATA) and the excerpt the repository ships for the tests
(test/data/tinyshakespeare_excerpt.txt, "excerpt_*"): its first sections, just enough for a train split after the
32768 validation tokens. This script writes the excerpt too.

Dev-only: neither the build nor the tests need Python.

    pip install tiktoken
    python dev/data/gen_tokenizer_vectors.py dev/data/gpt2 data/tinyshakespeare/input.txt test/data
"""
import argparse
import os
import unicodedata

import tiktoken
import tiktoken.load

# GPT-2's pre-tokenizer regex ('s|'t|'re|'ve|'m|'ll|'d folded into one group, as tiktoken spells it).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"
VAL_TOKENS = 32768
EXCERPT_BYTES = 150000  # whole sections up to this many bytes: about 45k tokens, so the train split is not empty

CASES = [
    # plain English
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    # leading and trailing spaces
    " hello",
    "hello ",
    "  hello  world  ",
    # runs of spaces, tabs, newlines: \s+(?!\S) leaves the last space to join the next word
    "a    b",
    "a\tb\t\tc",
    "line1\nline2\n\nline3\n\n\n",
    "\n\n\n",
    "   ",
    "x \t \n y",
    "indented\n    code\n\tblock",
    "\r\n windows\r\n",
    # contractions, and uppercase ones GPT-2 does not special-case
    "it's don't they're we've I'm you'll he'd",
    "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D",
    "'s 't 're 've 'm 'll 'd",
    "rock'n'roll o'clock",
    "'''quoted'''",
    # digits and numbers
    "0123456789",
    "3.14159265358979323846264338327950288419716939937510",
    "In 2024, 1,000,000 people paid $12.50 each.",
    "x1y22z333 4444",
    # punctuation
    "Hello, world! How are you? (Fine.) [ok] {yes} <no>",
    "...!!!???---___***",
    "a+b=c; d->e; f::g && h || i",
    "@user #tag https://example.com/path?q=1&r=2",
    # unicode: accents, CJK, emoji, combining marks, other scripts and spaces
    "café naïve résumé Ångström",
    "cafe\u0301 (combining acute)",
    "中文分词测试",
    "日本語のテキスト、句読点。",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧",
    "Ελληνικά Русский עברית العربية हिन्दी",
    "non\u00a0breaking\u3000ideographic space",
    "٣٤٥ ½ Ⅻ",
    "\ufeffbyte order mark",
    # the special token's text is ordinary text here
    "<|endoftext|>",
    "a<|endoftext|>b",
    # empty and single characters
    "",
    " ",
    "\n",
    "a",
]


def fnv1a64_u16(tokens):
    h = 0xCBF29CE484222325
    for t in tokens:
        assert 0 <= t < 65536
        for byte in (t & 0xFF, t >> 8):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def quote(text):
    """Double-quoted. What an editor or a terminal would hide or mangle is escaped: controls, quotes,
    backslashes, invisible characters (ZWJ, BOM, non-ASCII spaces) and combining marks become
    \\n \\t \\r \\" \\\\ or \\xHH per UTF-8 byte; other characters stay as they are."""
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ch.isprintable() and not unicodedata.category(ch).startswith("M"):
            out.append(ch)
        else:
            out.append("".join("\\x%02x" % b for b in ch.encode("utf-8")))
    return '"' + "".join(out) + '"'


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("gpt2_dir", help="directory with encoder.json and vocab.bpe")
    ap.add_argument("tinyshakespeare", help="tinyshakespeare input.txt")
    ap.add_argument("out", help="output directory (test/data): tokenizer_vectors.txt, tinyshakespeare_excerpt.txt")
    args = ap.parse_args()

    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        os.path.join(args.gpt2_dir, "vocab.bpe"), os.path.join(args.gpt2_dir, "encoder.json"))
    enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={EOT: 50256})

    with open(args.tinyshakespeare, "r", encoding="utf-8", newline="") as f:
        text = f.read()
    # The excerpt ends where a section does, with its newline, like the whole text.
    excerpt = text[:text.rindex("\n\n", 0, EXCERPT_BYTES) + 1]
    with open(os.path.join(args.out, "tinyshakespeare_excerpt.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(excerpt)

    lines = [
        "# GPT-2 tokenizer reference, generated by dev/data/gen_tokenizer_vectors.py with tiktoken. Do not edit.",
        "# Lines: a quoted text and its token ids; or a fact about a text (shakespeare: the whole of tinyshakespeare,",
        "# excerpt: tinyshakespeare_excerpt.txt): name, count, and for token streams the 64-bit FNV-1a hash of the",
        "# little-endian uint16 tokens. Escapes: \\n \\t \\r \\\" \\\\ \\xHH (one byte).",
    ]
    lines += [" ".join([quote(s)] + [str(t) for t in enc.encode_ordinary(s)]) for s in CASES]
    for corpus, body in [("shakespeare", text), ("excerpt", excerpt)]:
        plain = enc.encode_ordinary(body)
        llmc_tokens = enc.encode(EOT + body.replace("\n\n", "\n\n" + EOT), allowed_special={EOT})
        assert len(llmc_tokens) > VAL_TOKENS, corpus
        lines.append("%s_bytes %d" % (corpus, len(body.encode("utf-8"))))
        lines.append("%s_sections %d" % (corpus, len(body.split("\n\n"))))
        for name, toks in [("plain", plain), ("val", llmc_tokens[:VAL_TOKENS]), ("train", llmc_tokens[VAL_TOKENS:])]:
            lines.append("%s_%s %d %016x" % (corpus, name, len(toks), fnv1a64_u16(toks)))
    with open(os.path.join(args.out, "tokenizer_vectors.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d cases, the tinyshakespeare and excerpt references and the excerpt to %s" % (len(CASES), args.out))


if __name__ == "__main__":
    main()
