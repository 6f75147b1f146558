#!/usr/bin/env bash
# Prepares data/tinyshakespeare for training: tiny_shakespeare_{val,train}.bin and gpt2_tokenizer.bin, the same
# files llm.c's dev/data/tinyshakespeare.py writes.
#
#   TINYSHAKESPEARE=/path/input.txt   use this text instead of downloading it
#   GPT2_VOCAB_DIR=/path/dir          GPT-2's encoder.json and vocab.bpe (default data/gpt2, downloaded if missing)
#
# Safe to re-run: downloads happen only for missing files and every output is rewritten atomically.
set -euo pipefail

TS_URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
GPT2_URL=https://openaipublic.blob.core.windows.net/gpt-2/models/124M

# Relative paths in the environment mean the caller's directory, so resolve them before moving to the repo root.
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
text=${TINYSHAKESPEARE:+$(absolute "$TINYSHAKESPEARE")}
vocab_dir=${GPT2_VOCAB_DIR:+$(absolute "$GPT2_VOCAB_DIR")}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=data/tinyshakespeare
vocab_dir=${vocab_dir:-data/gpt2}

# Downloads to a .part file first so that an interrupted download never passes for a complete one.
download() {
    local url=$1 dest=$2 rc=0
    mkdir -p "$(dirname "$dest")"
    echo "downloading $url"
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$dest.part" "$url" || rc=$?
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$dest.part" "$url" || rc=$?
    else
        echo "error: neither curl nor wget is installed, cannot download $url (set TINYSHAKESPEARE and" \
            "GPT2_VOCAB_DIR to local copies instead)" >&2
        exit 1
    fi
    if [ "$rc" != 0 ]; then
        rm -f "$dest.part"
        echo "error: download of $url failed (exit status $rc)" >&2
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
    [ -f "$text" ] || download "$TS_URL" "$text"
fi

for f in encoder.json vocab.bpe; do
    [ -f "$vocab_dir/$f" ] || download "$GPT2_URL/$f" "$vocab_dir/$f"
done

[ -x ./prepare_data ] || make prepare_data
./prepare_data --gpt2-dir "$vocab_dir" --tinyshakespeare "$text" "$out"
