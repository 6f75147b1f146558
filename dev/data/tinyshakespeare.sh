#!/usr/bin/env bash
# Prepares data/tinyshakespeare for training: tiny_shakespeare_{val,train}.bin and gpt2_tokenizer.bin, the same
# files llm.c's dev/data/tinyshakespeare.py writes.
#
#   TINYSHAKESPEARE=/path/input.txt   use this text instead of downloading it
#   TINYSHAKESPEARE_URL=URL           download from this address instead
#   GPT2_VOCAB_DIR=/path/dir          GPT-2's encoder.json and vocab.bpe (default: the copy in dev/data/gpt2)
#
# Only the text is downloaded, and kept only when its SHA-256 is the known one. Safe to re-run: the download
# happens only when the text is missing and every output is rewritten atomically.
set -euo pipefail

TS_URL=${TINYSHAKESPEARE_URL:-https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt}
TS_SHA256=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed

# Relative paths in the environment mean the caller's directory, so resolve them before moving to the repo root.
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
text=${TINYSHAKESPEARE:+$(absolute "$TINYSHAKESPEARE")}
vocab_dir=${GPT2_VOCAB_DIR:+$(absolute "$GPT2_VOCAB_DIR")}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=data/tinyshakespeare
vocab_dir=${vocab_dir:-dev/data/gpt2}

# Downloads to a .part file first so that an interrupted or altered download never passes for the text.
download() {
    local url=$1 dest=$2 sha256=$3 rc=0
    mkdir -p "$(dirname "$dest")"
    echo "downloading $url"
    # The client's own messages (curl's retries) are kept for the error line, not printed as they come.
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$dest.part" "$url" 2>"$dest.err" || rc=$?
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$dest.part" "$url" 2>"$dest.err" || rc=$?
    else
        echo "error: neither curl nor wget is installed, cannot download $url; to use a local copy of the text:" \
            "TINYSHAKESPEARE=/path/to/input.txt make tinyshakespeare" >&2
        exit 1
    fi
    local why
    why=$(tail -n 1 "$dest.err" 2>/dev/null)
    rm -f "$dest.err"
    if [ "$rc" != 0 ]; then
        rm -f "$dest.part"
        echo "error: could not download $url (${why:-exit status $rc}); to use a local copy of the text:" \
            "TINYSHAKESPEARE=/path/to/input.txt make tinyshakespeare" >&2
        exit 1
    fi
    local got
    got=$(sha256sum "$dest.part" | cut -d' ' -f1)
    if [ "$got" != "$sha256" ]; then
        rm -f "$dest.part"
        echo "error: $url: SHA-256 $got, expected $sha256; not kept" >&2
        exit 1
    fi
    mv "$dest.part" "$dest"
}

if [ -n "$text" ]; then
    if [ ! -f "$text" ]; then
        echo "error: TINYSHAKESPEARE=$TINYSHAKESPEARE does not exist" >&2
        exit 1
    fi
else
    text=$out/input.txt
    [ -f "$text" ] || download "$TS_URL" "$text" "$TS_SHA256"
fi

[ -x ./prepare_data ] || make prepare_data
./prepare_data --gpt2-dir "$vocab_dir" --tinyshakespeare "$text" "$out"
