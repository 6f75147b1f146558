#!/usr/bin/env bash
# Training throughput of train_gpt2cu: GPT-2 124M (-e d12), T=1024, micro-batch B in {16, 32, 64}.
# Prints ms/step, tok/s, MFU and device memory, averaged over steps after a warmup. With -p every B runs a
# second time with --profile tracing all the steps after the warmup, and prints that run's tok/s and the
# profiler's overhead, 100 * (1 - traced tok/s / untraced tok/s) (the target is at most 2%). The traced
# tok/s counts the CUPTI buffer flushes between steps, which the step lines leave out.
#
# -I: decode throughput of infer_gpt2cu instead, B sequences (-B, default "1 8 64") of a -P token prompt
# generating -n tokens each, with --cuda-graph 0 and 1: decode tok/s, the median step in µs, and the step's HBM
# floor, the bytes it must move (every bf16 weight once, the KV cache of the mean context, the logits written and
# read) over the bandwidth (-H GB/s; default the datasheet's for the GPU nvidia-smi names), with the graph's
# speed-up over the eager step.
#
# -C DIR runs DIR's programs (DIR's data/tinyshakespeare for training; gpu_bundle/, doc/gpu_check.md) and builds
# nothing; without it, the repository's, made first when missing.
#
#   scripts/benchmark_gpu.sh [-e d12] [-t 1024] [-x 40] [-w 10] [-B "16 32 64"] [-p] [-C DIR]
#   scripts/benchmark_gpu.sh -I [-e d12] [-B "1 8 64"] [-P 64] [-n 256] [-H GBPS] [-C DIR]
set -euo pipefail

model=d12 T=1024 steps=40 warmup=10 batches="" profile=0 dir="" infer=0 prompt=64 new=256 hbm=""
while getopts "e:t:x:w:B:pC:IP:n:H:h" o; do
    case $o in
        e) model=$OPTARG ;; t) T=$OPTARG ;; x) steps=$OPTARG ;; w) warmup=$OPTARG ;; B) batches=$OPTARG ;;
        p) profile=1 ;; C) dir=$OPTARG ;; I) infer=1 ;; P) prompt=$OPTARG ;; n) new=$OPTARG ;; H) hbm=$OPTARG ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done
[ "$steps" -gt "$warmup" ] || { echo "error: -x ($steps) must exceed -w ($warmup)" >&2; exit 2; }
for v in "$prompt" "$new"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "error: -P and -n take a positive number of tokens, got '$v'" >&2; exit 2; }
done
[ -z "$hbm" ] || [[ $hbm =~ ^[1-9][0-9]*$ ]] || { echo "error: -H: GB/s as a positive number, got '$hbm'" >&2; exit 2; }
if [ "$infer" = 1 ]; then
    [[ $model =~ ^d([1-9][0-9]*)$ ]] || { echo "error: -I: -e takes a dN model (its shape sizes the floor)" >&2; exit 2; }
    depth=${BASH_REMATCH[1]}
fi
program=./train_gpt2cu
[ "$infer" = 0 ] || program=./infer_gpt2cu
if [ -n "$dir" ]; then
    cd "$dir" 2>/dev/null || { echo "error: -C $dir: no such directory" >&2; exit 1; }
    needs=("$program")
    [ "$infer" = 1 ] || needs+=(data/tinyshakespeare/tiny_shakespeare_train.bin)
    for f in "${needs[@]}"; do
        [ -e "$f" ] || { echo "error: -C $dir: no $f there (make gpu_bundle)" >&2; exit 1; }
    done
else
    cd "$(dirname "$0")/.."
    [ -x "$program" ] || make "${program#./}"
    [ "$infer" = 1 ] || [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make tinyshakespeare
fi

# ---- -I: decode, eager and as CUDA graphs ----
if [ "$infer" = 1 ]; then
    if [ -z "$hbm" ]; then
        gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
        case $gpu in
            *H200*) hbm=4800 ;; *"H100 PCIe"*) hbm=2000 ;; *H100*) hbm=3350 ;; *A100*80GB*) hbm=2039 ;; *A100*) hbm=1555 ;;
            *) echo "error: -I: no datasheet bandwidth for '${gpu:-no GPU}': give it with -H GBPS" >&2; exit 2 ;;
        esac
    fi
    # One run: "tok/s p50_ms params graph_steps steps" from the --json summary, or "failed: <reason>".
    decode_run() {
        local log
        log=$(mktemp)
        if ! ./infer_gpt2cu -e "$model" -b "$1" --prompt-len "$prompt" -n "$new" --temperature 0 --json \
            --cuda-graph "$2" >"$log" 2>&1; then
            echo "failed: $(grep -m1 error "$log" || tail -n1 "$log")"
        else
            python3 -c 'import json, sys
s = [json.loads(l)["summary"] for l in open(sys.argv[1]) if l.startswith("{\"summary\"")][0]
print(s["decode_tok_s"], s["latency_p50_ms"], s["params"], s.get("graph_steps", -1), int(sys.argv[2]) - 1)' "$log" "$new"
        fi
        rm -f "$log"
    }
    printf "%-6s %-5s %-6s %12s %10s %10s %8s %14s %9s\n" model B graphs "decode tok/s" "us/step" "floor us" "x floor" \
        "graph steps" "speed-up"
    for B in ${batches:-1 8 64}; do
        eager_us=""
        for graphs in 0 1; do
            r=$(decode_run "$B" "$graphs")
            if [[ $r == failed* ]]; then printf "%-6s %-5s %-6s %s\n" "$model" "$B" "$graphs" "$r"; continue; fi
            read -r tok p50 params gsteps nsteps <<<"$r"
            # Bytes per decode step: the weights once, each sequence's K and V over the mean context, the logits.
            awk -v tok="$tok" -v p50="$p50" -v P="$params" -v B="$B" -v L="$depth" -v C=$((64 * depth)) \
                -v ctx=$((prompt + new / 2)) -v bw="$hbm" -v g="$graphs" -v e="$eager_us" -v m="$model" \
                -v gs="$gsteps" -v ns="$nsteps" 'BEGIN {
                    bytes = 2 * P + B * ctx * L * 2 * C * 2 + 2 * B * 50304 * 2
                    floor = bytes / (bw * 1e3); us = p50 * 1e3
                    speed = (g == 1 && e != "") ? sprintf("%.2fx", e / us) : "-"
                    printf "%-6s %-5s %-6s %12.0f %10.1f %10.1f %8.2f %14s %9s\n", m, B, g, tok, us, floor, us / floor,
                           gs "/" ns, speed }'
            [ "$graphs" = 1 ] || eager_us=$(awk -v p="$p50" 'BEGIN { print p * 1e3 }')
        done
    done
    exit 0
fi
batches=${batches:-16 32 64}

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
