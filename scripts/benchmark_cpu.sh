#!/usr/bin/env bash
# The CPU programs against eager PyTorch (dev/torch_gpt2_cpu.py) on the same model, side by side: rounds of
# ours, peer, ours, peer, ... so that drift on the machine hits both; prints the medians over the rounds and
# the ratios as a markdown table.
#
#   training:  ./train_gpt2 -e MODEL -b 4 -t 64, ms per step (median of the steps after 2 warmup steps);
#              ratio = PyTorch / ours, so > 1 means we are faster
#   inference: ./infer_gpt2 -e MODEL, a 128-token random prompt + 128 new greedy tokens, at B=1 and B=8:
#              prefill tok/s and decode tok/s (B*(new-1) tokens over the decode steps, as infer_gpt2's --json
#              summary counts them); ratio = ours / PyTorch, so > 1 means we are faster
#
# Both get OMP_WAIT_POLICY=passive and the same thread count (ours: OMP_NUM_THREADS; the peer: --threads, which
# also sets its BLAS's threads). Run from the repository root, with train_gpt2 and infer_gpt2 built
# (make train_gpt2 infer_gpt2).
#
#   scripts/benchmark_cpu.sh [--model d12] [--threads 2] [--rounds 3] [--steps 5] [--quick]
#                            [--python /usr/bin/python3] [--data SPEC]
#
#   --model dN      d4, d6, d12, d24, d36 or d48 [d12]
#   --threads N     threads for both [2]
#   --rounds R      interleaved rounds; the table shows the medians over them [3]
#   --steps N       timed training steps per run, after 2 warmup steps [5]
#   --quick         smoke test: d4, 3 timed steps, a 32-token prompt + 16 new tokens
#   --python PATH   the interpreter with PyTorch for the peer [/usr/bin/python3]
#   --data SPEC     train_gpt2's -i (a directory of *train*.bin shards, a glob or a file)
#                   [data/tinyshakespeare (make tinyshakespeare); else $TINYSHAKESPEARE or
#                   $LLMC_DATA/tinyshakespeare/input.txt tokenized by ./prepare_data into a temporary directory;
#                   else a random-token shard there: the step time does not depend on the tokens]
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 1; }
bad() { echo "error: $* (see --help)" >&2; exit 2; }

model=d12 threads=2 rounds=3 steps="" quick=0 python=/usr/bin/python3 data=""
warmup=2 prompt=128 new=128 batches="1 8" train_B=4 train_T=64
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --quick) quick=1; shift; continue ;;
        --model | --threads | --rounds | --steps | --python | --data) [ $# -ge 2 ] || bad "$1 needs a value" ;;
        *) bad "unknown option '$1'" ;;
    esac
    case $1 in
        --model) model=$2 ;; --threads) threads=$2 ;; --rounds) rounds=$2 ;; --steps) steps=$2 ;;
        --python) python=$2 ;; --data) data=$2 ;;
    esac
    shift 2
done
if [ "$quick" = 1 ]; then
    model=d4 prompt=32 new=16 steps=${steps:-3}
fi
steps=${steps:-5}
[[ $model =~ ^d(4|6|12|24|36|48)$ ]] || bad "--model: one of d4 d6 d12 d24 d36 d48, got '$model'"
for v in threads rounds steps; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || bad "--$v: a positive integer, got '${!v}'"
done
if [ ! -x ./train_gpt2 ] || [ ! -x ./infer_gpt2 ]; then
    die "no ./train_gpt2 or ./infer_gpt2 here: run from the repository root after make train_gpt2 infer_gpt2"
fi
peer=$(dirname "$0")/../dev/torch_gpt2_cpu.py
[ -f "$peer" ] || die "no PyTorch peer at $peer"
peer=$(realpath --relative-to=. "$peer")
command -v "$python" >/dev/null || die "--python: no interpreter '$python'"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- training data for train_gpt2 ----
if [ -z "$data" ]; then
    text=${TINYSHAKESPEARE:-${LLMC_DATA:+$LLMC_DATA/tinyshakespeare/input.txt}}
    if [ -d data/tinyshakespeare ]; then
        data=data/tinyshakespeare data_note="data/tinyshakespeare"
    elif [ -n "$text" ] && [ -f "$text" ] && [ -x ./prepare_data ]; then
        ./prepare_data --tinyshakespeare "$text" "$work/data" >"$work/prep.log" 2>&1 ||
            die "./prepare_data failed on $text: $(tail -n 1 "$work/prep.log")"
        data=$work/data data_note="$text, tokenized by ./prepare_data into a temporary directory"
    else
        "$python" -c 'import random, struct, sys
random.seed(1337); n = 1 << 16
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))' "$work/random_train.bin"
        data=$work/random_train.bin data_note="random tokens (a temporary shard; no data/tinyshakespeare)"
    fi
else
    data_note=$data
fi

# ---- the runs ----
ours_env=(env "OMP_NUM_THREADS=$threads" OMP_WAIT_POLICY=passive)
peer_env=(env OMP_WAIT_POLICY=passive)
cmd_train_ours=("${ours_env[@]}" ./train_gpt2 -e "$model" -b "$train_B" -t "$train_T" -x "$((warmup + steps))"
    -v 0 -s 0 -i "$data")
cmd_train_peer=("${peer_env[@]}" "$python" "$peer" train --model "$model" -b "$train_B" -t "$train_T"
    --steps "$steps" --warmup "$warmup" --threads "$threads")
results=$work/results commands=()
declare -A seen

# run NAME CMD...: runs CMD into $work/NAME.log, or stops with its last lines.
run() {
    local name=$1 rc=0
    shift
    local shown
    printf -v shown '%q ' "$@"
    shown=${shown% }
    [ -n "${seen[$shown]+x}" ] || { seen[$shown]=1; commands+=("$shown"); }
    "$@" >"$work/$name.log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        echo "error: '$shown' failed (exit $rc); its last lines:" >&2
        tail -n 5 "$work/$name.log" >&2
        exit 1
    fi
}
# record KEY VALUE: one measurement.
record() {
    [[ $2 =~ ^[0-9.]+$ ]] || die "could not read $1 from the output (got '$2')"
    echo "$1 $2" >>"$results"
    printf '  %-28s %s\n' "$1" "$2" >&2
}

for r in $(seq 1 "$rounds"); do
    echo "round $r/$rounds" >&2
    run train_ours "${cmd_train_ours[@]}"
    record train_ours "$(awk -v w="$warmup" '$1 == "step" { split($2, s, "/"); if (s[1] > w)
        for (i = 1; i < NF; i++) if ($(i + 1) == "ms") print $i }' "$work/train_ours.log" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')"
    [ -n "${ours_line:-}" ] || ours_line=$(sed -n 's/^| trainer *| \(.*[^ ]\) *|$/\1/p' "$work/train_ours.log" | head -n1)
    run train_peer "${cmd_train_peer[@]}"
    [ -n "${blas_line:-}" ] || blas_line=$(grep -m1 '^blas:' "$work/train_peer.log" || echo "blas: (not printed)")
    [ -n "${torch_line:-}" ] || torch_line=$(grep -m1 '^torch ' "$work/train_peer.log" || true)
    [ -n "${blas_warning:-}" ] || blas_warning=$(grep -m1 '^warning:' "$work/train_peer.log" || true)
    [ -z "${blas_warning:-}" ] || [ "$r" != 1 ] || echo "$blas_warning" >&2
    record train_peer "$(sed -n 's/^result: train .*ms_per_step_median=\([0-9.]*\).*/\1/p' "$work/train_peer.log")"
    for B in $batches; do
        run "infer_ours_$B" "${ours_env[@]}" ./infer_gpt2 -e "$model" --prompt-len "$prompt" -n "$new" -b "$B" \
            --temperature 0 --json
        read -r pre dec < <("$python" -c 'import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["summary"]
print(s["prefill_tok_s"], s["decode_tok_s"])' "$work/infer_ours_$B.log" || true)
        record "prefill_ours_$B" "${pre:-}"
        record "decode_ours_$B" "${dec:-}"
        run "infer_peer_$B" "${peer_env[@]}" "$python" "$peer" infer --model "$model" -b "$B" \
            --prompt-len "$prompt" -n "$new" --threads "$threads"
        line=$(grep '^result: infer' "$work/infer_peer_$B.log" || true)
        record "prefill_peer_$B" "$(sed -n 's/.*prefill_tok_per_s=\([0-9.]*\).*/\1/p' <<<"$line")"
        record "decode_peer_$B" "$(sed -n 's/.*decode_tok_per_s=\([0-9.]*\).*/\1/p' <<<"$line")"
    done
done

# ---- the report ----
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
isa=""
for f in avx2 avx512f; do
    if grep -qw "$f" /proc/cpuinfo; then isa+="$f yes, "; else isa+="$f no, "; fi
done
echo "# CPU benchmark: ours vs PyTorch ($model)"
echo
echo "- machine: ${cpu:-unknown CPU}, $(nproc) cores, ${isa%, }"
echo "- threads: $threads (OMP_WAIT_POLICY=passive for both)"
echo "- rounds: $rounds, interleaved; medians over the rounds, min-max in brackets"
echo "- ours: ${ours_line:-(not printed)} (the trainer's banner: its elementwise kernels and GEMM library)"
echo "- peer: $blas_line; $torch_line"
echo "- training data for train_gpt2: $data_note"
[ -z "${blas_warning:-}" ] || echo "- **$blas_warning**"
echo
"$python" - "$results" "$model" "$train_B" "$train_T" "$prompt" "$new" "$batches" <<'EOF'
import statistics, sys
path, model, B, T, prompt, new, batches = sys.argv[1:]
vals = {}
for line in open(path):
    k, v = line.split()
    vals.setdefault(k, []).append(float(v))
def cell(k):
    xs = vals[k]
    return f"{statistics.median(xs):.1f}" + (f" ({min(xs):.1f}-{max(xs):.1f})" if len(xs) > 1 else "")
def ratio(num, den):
    return f"{statistics.median(vals[num]) / statistics.median(vals[den]):.2f}x"
print("| measurement | ours | PyTorch | ratio (>1: ours faster) |")
print("|---|---:|---:|---:|")
print(f"| train {model} B={B} T={T}, ms/step | {cell('train_ours')} | {cell('train_peer')} "
      f"| {ratio('train_peer', 'train_ours')} |")
for b in batches.split():
    for what in ("prefill", "decode"):
        print(f"| infer {model} B={b} prompt {prompt} + {new} new, {what} tok/s | {cell(f'{what}_ours_{b}')} "
              f"| {cell(f'{what}_peer_{b}')} | {ratio(f'{what}_ours_{b}', f'{what}_peer_{b}')} |")
EOF
echo
echo "commands (each run once per round, ours then the peer; the -i shard's path is temporary when not given):"
for c in "${commands[@]}"; do
    echo "    $c"
done
