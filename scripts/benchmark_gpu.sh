#!/usr/bin/env bash
# Training throughput of train_gpt2cu: GPT-2 124M (-e d12), T=1024, micro-batch B in {16, 32, 64}.
# Prints ms/step, tok/s, MFU and device memory, averaged over steps after a warmup. With -p every B runs a
# second time with --profile tracing all the steps after the warmup, and prints that run's tok/s and the
# profiler's overhead, 100 * (1 - traced tok/s / untraced tok/s) (the target is at most 2%). The traced
# tok/s counts the CUPTI buffer flushes between steps, which the step lines leave out.
#
# -C DIR runs DIR's train_gpt2cu on DIR's data/tinyshakespeare (gpu_bundle/, doc/gpu_check.md) and builds nothing;
# without it, the repository's, made first when missing.
#
#   scripts/benchmark_gpu.sh [-e d12] [-t 1024] [-x 40] [-w 10] [-B "16 32 64"] [-p] [-C DIR]
set -euo pipefail

model=d12 T=1024 steps=40 warmup=10 batches="16 32 64" profile=0 dir=""
while getopts "e:t:x:w:B:pC:h" o; do
    case $o in
        e) model=$OPTARG ;; t) T=$OPTARG ;; x) steps=$OPTARG ;; w) warmup=$OPTARG ;; B) batches=$OPTARG ;;
        p) profile=1 ;; C) dir=$OPTARG ;;
        *) sed -n '2,10p' "$0"; exit 2 ;;
    esac
done
[ "$steps" -gt "$warmup" ] || { echo "error: -x ($steps) must exceed -w ($warmup)" >&2; exit 2; }
if [ -n "$dir" ]; then
    cd "$dir" 2>/dev/null || { echo "error: -C $dir: no such directory" >&2; exit 1; }
    for f in ./train_gpt2cu data/tinyshakespeare/tiny_shakespeare_train.bin; do
        [ -e "$f" ] || { echo "error: -C $dir: no $f there (make gpu_bundle)" >&2; exit 1; }
    done
else
    cd "$(dirname "$0")/.."
    [ -x ./train_gpt2cu ] || make train_gpt2cu
    [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make tinyshakespeare
fi

# One train_gpt2cu run at micro-batch $1 (more flags after it). Prints "ms tok/s MFU mem flush", each the mean
# over the steps after the warmup (mem: the last one; flush: the profiler's between-step ms per traced step, 0
# without --profile), or "failed: <reason>".
measure() {
    local B=$1 log
    shift
    log=$(mktemp)
    if ! ./train_gpt2cu -i data/tinyshakespeare -e "$model" -b "$B" -t "$T" -x "$steps" -v 0 -s 0 "$@" >"$log" 2>&1; then
        echo "failed: $(grep -m1 error "$log" || tail -n1 "$log")"
        rm -f "$log"
        return
    fi
    # "step N/M | loss ... | X ms | Y tok/s | MFU Z% | mem W GiB | T elapsed, ETA E"
    awk -v w="$warmup" -F'|' '
        /^step +[0-9]+\/[0-9]+ \| loss/ {
            split($1, a, "[ /]+")
            if (a[2] > w) { n++; ms += $5 + 0; tok += $6 + 0
                for (i = 7; i <= NF; i++) { if ($i ~ /MFU/) { gsub(/[^0-9.]/, "", $i); mfu += $i }
                                            if ($i ~ /mem/) { gsub(/[^0-9.]/, "", $i); mem = $i } } } }
        /^profile: [0-9.]+ ms per traced step flushing/ { flush = $1; sub(/^profile: /, "", flush); flush += 0 }
        END { if (n) printf "%.2f %.0f %.1f %.2f %.3f\n", ms/n, tok/n, mfu/n, mem, flush + 0
              else print "failed: no step lines" }' "$log"
    rm -f "$log"
}

if [ "$profile" = 1 ]; then
    printf "%-6s %-6s %-5s %10s %12s %7s %9s %14s %9s\n" model T B "ms/step" "tok/s" "MFU" "memory" "tok/s profiled" "overhead"
else
    printf "%-6s %-6s %-5s %10s %12s %7s %9s\n" model T B "ms/step" "tok/s" "MFU" "memory"
fi
for B in $batches; do
    base=$(measure "$B")
    if [[ $base == failed* ]]; then
        printf "%-6s %-6s %-5s %s\n" "$model" "$T" "$B" "$base"
        continue
    fi
    read -r ms tok mfu mem _ <<<"$base"
    if [ "$profile" = 0 ]; then
        printf "%-6s %-6s %-5s %10.2f %12.0f %6.1f%% %6.2f GiB\n" "$model" "$T" "$B" "$ms" "$tok" "$mfu" "$mem"
        continue
    fi
    dir=$(mktemp -d)
    traced=$(measure "$B" --profile "$dir" --profile-start $((warmup + 1)) --profile-steps $((steps - warmup)))
    rm -rf "$dir"
    if [[ $traced == failed* ]]; then
        printf "%-6s %-6s %-5s %10.2f %12.0f %6.1f%% %6.2f GiB  profiled run %s\n" "$model" "$T" "$B" "$ms" "$tok" \
            "$mfu" "$mem" "$traced"
        continue
    fi
    read -r traced_ms traced_tok _ _ flush <<<"$traced"
    # The step lines' tok/s, scaled to include the flush after each step.
    traced_tok=$(awk -v t="$traced_tok" -v m="$traced_ms" -v f="$flush" 'BEGIN { printf "%.0f", t * m / (m + f) }')
    overhead=$(awk -v a="$tok" -v b="$traced_tok" 'BEGIN { printf "%.2f", 100 * (1 - b / a) }')
    printf "%-6s %-6s %-5s %10.2f %12.0f %6.1f%% %6.2f GiB %14.0f %8s%%\n" "$model" "$T" "$B" "$ms" "$tok" "$mfu" \
        "$mem" "$traced_tok" "$overhead"
done
