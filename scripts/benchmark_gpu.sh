#!/usr/bin/env bash
# Training throughput of train_gpt2cu: GPT-2 124M (-e d12), T=1024, micro-batch B in {16, 32, 64}.
# Prints ms/step, tok/s, MFU and device memory, averaged over steps after a warmup.
#
#   scripts/benchmark_gpu.sh [-e d12] [-t 1024] [-x 40] [-w 10] [-B "16 32 64"]
set -euo pipefail
cd "$(dirname "$0")/.."

model=d12 T=1024 steps=40 warmup=10 batches="16 32 64"
while getopts "e:t:x:w:B:h" o; do
    case $o in
        e) model=$OPTARG ;; t) T=$OPTARG ;; x) steps=$OPTARG ;; w) warmup=$OPTARG ;; B) batches=$OPTARG ;;
        *) sed -n '2,6p' "$0"; exit 2 ;;
    esac
done
[ "$steps" -gt "$warmup" ] || { echo "error: -x ($steps) must exceed -w ($warmup)" >&2; exit 2; }
[ -x ./train_gpt2cu ] || make train_gpt2cu
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make tinyshakespeare

printf "%-6s %-6s %-5s %10s %12s %7s %9s\n" model T B "ms/step" "tok/s" "MFU" "memory"
for B in $batches; do
    log=$(mktemp)
    if ! ./train_gpt2cu -i data/tinyshakespeare -e "$model" -b "$B" -t "$T" -x "$steps" -v 0 -s 0 >"$log" 2>&1; then
        printf "%-6s %-6s %-5s %s\n" "$model" "$T" "$B" "failed: $(grep -m1 error "$log" || tail -n1 "$log")"
        rm -f "$log"; continue
    fi
    # Mean over the steps after the warmup: "step N/M | ... | X ms | Y tok/s | MFU Z% | mem W GiB"
    awk -v w="$warmup" -v m="$model" -v t="$T" -v b="$B" -F'|' '
        /^step / { split($1, a, "[ /]+"); if (a[2] > w) { n++; ms += $5 + 0; tok += $6 + 0;
                   for (i = 7; i <= NF; i++) { if ($i ~ /MFU/) { gsub(/[^0-9.]/, "", $i); mfu += $i }
                                               if ($i ~ /mem/) { gsub(/[^0-9.]/, "", $i); mem = $i } } } }
        END { if (n) printf "%-6s %-6s %-5s %10.2f %12.0f %6.1f%% %6.2f GiB\n", m, t, b, ms/n, tok/n, mfu/n, mem }' "$log"
    rm -f "$log"
done
