#!/usr/bin/env bash
# Verifies the whole GPU half in one offline run and writes a report (doc/gpu_check.md). Stages run in order,
# each under its own time limit; a failing stage is recorded and the next one starts. The whole run stays
# within --budget seconds (25 minutes): a stage gets at most what is left, and is skipped when too little is.
#
#   scripts/gpu_check.sh [--out DIR] [--only STAGE[,STAGE...]] [--budget SECONDS] [--dry-run] [--help]
#
#   --out DIR      report directory [gpu_report]: report.md, summary.txt, stages.tsv, logs/, the profiles
#   --only LIST    run these stages only and update their rows of an existing report ("sanitizer" = the four
#                  compute-sanitizer stages); the build stage still makes what they need
#   --budget S     the whole run's time limit in seconds [1500]
#   --dry-run      print the stages and their exact commands; runs nothing (needs no GPU)
#
# Stages: inventory build gpu_tests memcheck racecheck synccheck initcheck kernel_ladder data train benchmark
#         profile profile_counters ncu nsys
# Environment: LLMC_DATA (a directory with tinyshakespeare/input.txt and gpt2/{encoder.json,vocab.bpe}; without
# it, data/tinyshakespeare/input.txt if downloaded, else the excerpt in test/data, and the vocabulary in
# dev/data/gpt2); TINYSHAKESPEARE and GPT2_VOCAB_DIR override those files; NVIDIA_SMI (the
# nvidia-smi to ask for a GPU) [nvidia-smi]; JOBS (make -j) [the number of CPUs].
set -u

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
bad_usage() {
    echo "gpu_check: $1 (see --help)" >&2
    exit 2
}

ALL_STAGES=(inventory build gpu_tests memcheck racecheck synccheck initcheck kernel_ladder data train benchmark
            profile profile_counters ncu nsys)
SANITIZER_STAGES=(memcheck racecheck synccheck initcheck)
# Each stage's time limit in seconds (doc/gpu_check.md: budgets, not measurements).
declare -A LIMIT=([inventory]=30 [build]=420 [gpu_tests]=180 [memcheck]=120 [racecheck]=150 [synccheck]=90
                  [initcheck]=120 [kernel_ladder]=150 [data]=60 [train]=180 [benchmark]=300 [profile]=120
                  [profile_counters]=180 [ncu]=180 [nsys]=150)

out=gpu_report only="" dry=0 budget=1500
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --out | --only | --budget)
            if [ $# -lt 2 ] || [ -z "$2" ]; then bad_usage "$1 needs a value"; fi
            case $1 in --out) out=$2 ;; --only) only=$2 ;; --budget) budget=$2 ;; esac
            shift ;;
        --out=?*) out=${1#--out=} ;;
        --only=?*) only=${1#--only=} ;;
        --budget=?*) budget=${1#--budget=} ;;
        -h | --help) usage; exit 0 ;;
        *) bad_usage "unknown option '$1'" ;;
    esac
    shift
done
[[ $budget =~ ^[1-9][0-9]*$ ]] || bad_usage "--budget: expected a positive number of seconds, got '$budget'"

selected=()
if [ -z "$only" ]; then
    selected=("${ALL_STAGES[@]}")
else
    IFS=, read -r -a wanted <<<"$only"
    for w in "${wanted[@]}"; do
        if [ "$w" = sanitizer ]; then
            selected+=("${SANITIZER_STAGES[@]}")
        elif [ -n "$w" ] && [ -n "${LIMIT[$w]+x}" ]; then
            selected+=("$w")
        else
            bad_usage "--only: unknown stage '$w' (stages: ${ALL_STAGES[*]}, sanitizer)"
        fi
    done
fi
is_selected() {
    local s
    for s in "${selected[@]}"; do [ "$s" = "$1" ] && return 0; done
    return 1
}

# Paths from the environment are the caller's; the defaults are the repository's.
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
out=$(absolute "$out")
[ -n "${LLMC_DATA:-}" ] && data_root=$(absolute "$LLMC_DATA")
ts_text=${TINYSHAKESPEARE:+$(absolute "$TINYSHAKESPEARE")}
vocab_dir=${GPT2_VOCAB_DIR:+$(absolute "$GPT2_VOCAB_DIR")}
NVSMI=${NVIDIA_SMI:-nvidia-smi}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# Offline defaults: the downloaded text where there is one, else the excerpt the tests use (its train split is
# 12983 tokens: enough to exercise training, not to judge its loss curve).
if [ -n "${data_root:-}" ]; then
    ts_text=${ts_text:-$data_root/tinyshakespeare/input.txt}
    vocab_dir=${vocab_dir:-$data_root/gpt2}
elif [ -f data/tinyshakespeare/input.txt ]; then
    ts_text=${ts_text:-$PWD/data/tinyshakespeare/input.txt}
else
    ts_text=${ts_text:-$PWD/test/data/tinyshakespeare_excerpt.txt}
fi
vocab_dir=${vocab_dir:-$PWD/dev/data/gpt2}

# ---- without a GPU: one line and a non-zero exit (the dry run needs none) ----
if [ "$dry" = 0 ]; then
    if ! command -v "$NVSMI" >/dev/null 2>&1; then
        echo "gpu_check: no NVIDIA GPU here ($NVSMI not found); nothing run (--dry-run lists the stages)" >&2
        exit 1
    fi
    if ! "$NVSMI" -L 2>/dev/null | grep -q '^GPU '; then
        echo "gpu_check: no NVIDIA GPU here ($NVSMI lists no device); nothing run (--dry-run lists the stages)" >&2
        exit 1
    fi
fi

# ---- tools: on PATH, beside nvcc, or in the usual install places ----
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then PATH=$PATH:/usr/local/cuda/bin; fi
cuda_bin=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
find_tool() {
    local p
    p=$(command -v "$1" 2>/dev/null) && { printf '%s\n' "$p"; return; }
    for p in "$cuda_bin/$1" /usr/local/cuda/bin/"$1" /opt/nvidia/nsight-compute/*/"$1" \
        /opt/nvidia/nsight-systems/*/bin/"$1" /usr/local/cuda/nsight-compute-*/"$1" \
        /usr/local/cuda/nsight-systems-*/bin/"$1"; do
        [ -x "$p" ] && { printf '%s\n' "$p"; return; }
    done
}
NCU=$(find_tool ncu)
NSYS=$(find_tool nsys)
SANITIZER=$(find_tool compute-sanitizer)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}

q() { printf '%q' "$1"; }
O=$(q "$out")

# ---- what the GPU tests are: every suite in test/gpu/*.cu; the sanitizers take the kernel and model suites
# at small shapes (GpuAttention.Gpt2Shape is GPT-2's full T=1024 shape) ----
# (GPU_TEST is a TEST on the device; the emulated tier's copies are suites Emu*, not GPU stages.)
mapfile -t gpu_suites < <(sed -n 's/^\(GPU_\)\{0,1\}TEST\(_F\|_P\)\{0,1\}(\([A-Za-z_][A-Za-z0-9_]*\),.*/\3/p' test/gpu/*.cu 2>/dev/null | sort -u)
gpu_filter=$(printf '%s.*:' "${gpu_suites[@]}")
gpu_filter=${gpu_filter%:}
san_filter='Kernels*:GpuAttention.*:GPT2GPU.*-GpuAttention.Gpt2Shape'

# ---- the binaries each stage needs (the build stage makes the union for the selected stages) ----
declare -A NEEDS=([gpu_tests]="build/run_tests train_gpt2 prepare_data train_gpt2cu profile_gpt2cu"
                  [memcheck]=build/run_tests [racecheck]=build/run_tests [synccheck]=build/run_tests
                  [initcheck]=build/run_tests [kernel_ladder]=dev_cuda [data]=prepare_data [train]=train_gpt2cu
                  [benchmark]=train_gpt2cu [profile]=profile_gpt2cu [profile_counters]=profile_gpt2cu
                  [ncu]=profile_gpt2cu [nsys]=profile_gpt2cu)
targets=""
for s in "${selected[@]}"; do
    for t in ${NEEDS[$s]:-}; do [[ " $targets " == *" $t "* ]] || targets="$targets $t"; done
done
targets=${targets# }
[ -n "$targets" ] && ! is_selected build && selected=(build "${selected[@]}")
# Back into run order.
ordered=()
for s in "${ALL_STAGES[@]}"; do is_selected "$s" && ordered+=("$s"); done
selected=("${ordered[@]}")

# ---- the commands ----
declare -A CMD
# shellcheck disable=SC2016 # the command's $(...) runs when the stage does
tool_line() { # "tool NAME: PATH (version)" or "tool NAME: not found"
    if [ -n "$2" ]; then
        printf 'echo "tool %s: %s ($(%s --version 2>&1 | tail -n 1))"' "$1" "$(q "$2")" "$(q "$2")"
    else
        printf 'echo "tool %s: not found"' "$1"
    fi
}
CMD[inventory]="echo \"gpu: \$($(q "$NVSMI") --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm,power.limit --format=csv,noheader | head -n 1)\"
$(q "$NVSMI")
nvcc --version
python3 scripts/gpu_report.py versions --binary ./train_gpt2cu
$(tool_line ncu "$NCU")
$(tool_line nsys "$NSYS")
$(tool_line compute-sanitizer "$SANITIZER")"
CMD[build]="make -j$JOBS $targets"
CMD[gpu_tests]="${data_root:+LLMC_DATA=$(q "$data_root") }./build/run_tests --gtest_filter='$gpu_filter'"
for tool in memcheck racecheck synccheck initcheck; do
    CMD[$tool]="$(q "${SANITIZER:-compute-sanitizer}") --tool $tool --error-exitcode 1 ./build/run_tests --gtest_filter='$san_filter'"
done
# shellcheck disable=SC2016
CMD[kernel_ladder]='rc=0
for src in dev/cuda/*.cu; do
    b=build/dev/cuda/$(basename "$src" .cu)
    if [ ! -x "$b" ]; then echo "=== $b missing"; rc=1; continue; fi
    echo "=== $b"; timeout -k 5 90 "$b"; r=$?; echo "=== $b exit $r"; [ "$r" = 0 ] || rc=1
done
exit $rc'
CMD[data]="if [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && [ -f data/tinyshakespeare/tiny_shakespeare_val.bin ]; then
    echo 'data/tinyshakespeare: already prepared'
else
    TINYSHAKESPEARE=$(q "$ts_text") GPT2_VOCAB_DIR=$(q "$vocab_dir") bash dev/data/tinyshakespeare.sh
fi"
CMD[train]="./train_gpt2cu -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x 60 -v 20 -s 60 -g 64 -o $O/train"
CMD[benchmark]="scripts/benchmark_gpu.sh -e d12 -t 1024 -B '16 32 64' -p"
CMD[profile]="./profile_gpt2cu -o $O/profile_default"
CMD[profile_counters]="./profile_gpt2cu --counters -o $O/profile_counters"
one_layer="--layers 1 --warmup 1 --steps 1"
CMD[ncu]="./profile_gpt2cu $one_layer -o $O/profile_1layer; r1=\$?
echo '# ncu'
$(q "${NCU:-ncu}") --csv --print-units base --metrics gpu__time_duration.sum --clock-control none --cache-control none ./profile_gpt2cu $one_layer -o $O/ncu/profile; r2=\$?
exit \$(( r1 != 0 || r2 != 0 ))"
NS=$(q "${NSYS:-nsys}")
CMD[nsys]="mkdir -p $O/nsys && $NS profile --trace=cuda,nvtx --force-overwrite=true -o $O/nsys/gpt2 ./profile_gpt2cu -o $O/nsys/profile; r=\$?
f=$O/nsys/gpt2.nsys-rep
if [ -f \"\$f\" ]; then
    echo \"nsys report: \$f (\$(stat -c %s \"\$f\") bytes)\"
    $NS stats --report nvtx_sum \"\$f\" || $NS stats --report nvtxsum \"\$f\"
fi
exit \$r"

# Why a stage cannot run here ("" when it can).
skip_reason() {
    local have_data=0
    [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && have_data=1
    case $1 in
        memcheck | racecheck | synccheck | initcheck) [ -n "$SANITIZER" ] || echo "compute-sanitizer not found" ;;
        ncu) [ -n "$NCU" ] || echo "ncu not found" ;;
        nsys) [ -n "$NSYS" ] || echo "nsys not found" ;;
        data)
            if [ "$have_data" = 0 ] && { [ ! -f "$ts_text" ] || [ ! -f "$vocab_dir/encoder.json" ] ||
                [ ! -f "$vocab_dir/vocab.bpe" ]; }; then
                echo "no local data: needs $ts_text and $vocab_dir/{encoder.json,vocab.bpe} (set LLMC_DATA, or" \
                    "TINYSHAKESPEARE and GPT2_VOCAB_DIR)"
            fi ;;
        train | benchmark)
            # A dry run cannot know yet what the data stage will prepare.
            [ "$have_data" = 1 ] || { [ "$dry" = 1 ] && is_selected data && [ -z "$(skip_reason data)" ]; } ||
                echo "no data/tinyshakespeare (see the data stage)" ;;
    esac
}

# ---- dry run ----
n=${#selected[@]}
if [ "$dry" = 1 ]; then
    echo "gpu_check: dry run, nothing is run; the report would go to $out (budget ${budget} s)"
    i=0
    for s in "${selected[@]}"; do
        i=$((i + 1))
        why=$(skip_reason "$s")
        echo
        echo "stage $i/$n: $s (limit ${LIMIT[$s]} s)${why:+ [skipped on this machine: $why]}"
        printf '%s\n' "${CMD[$s]}" | sed 's/^/    /'
    done
    echo
    echo "then: python3 scripts/gpu_report.py report $O"
    exit 0
fi

# ---- the run ----
mkdir -p "$out/logs" || exit 1
tsv=$out/stages.tsv
if [ -z "$only" ]; then
    rm -f "$tsv" "$out/report.md" "$out/summary.txt" "$out/ncu_vs_profiler.csv" "$out"/logs/*.log
fi
touch "$tsv"
have_python=1
command -v python3 >/dev/null 2>&1 || { have_python=0; echo "gpu_check: python3 not found: logs only, no report" >&2; }
record() { # stage rc seconds limit note
    local tmp
    tmp=$(mktemp) && grep -v "^$1"$'\t' "$tsv" >"$tmp"
    printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$tmp" && mv "$tmp" "$tsv"
}
deadline=$((SECONDS + budget))
echo "gpu_check: ${n} stages into $out (at most $((budget / 60)) min)"
i=0
for s in "${selected[@]}"; do
    i=$((i + 1))
    log=$out/logs/$s.log
    why=$(skip_reason "$s")
    left=$((deadline - SECONDS))
    limit=${LIMIT[$s]}
    if [ -z "$why" ] && [ "$left" -lt 60 ] && [ "$left" -lt "$limit" ]; then
        why="out of time ($(( left > 0 ? left : 0 )) s of the ${budget} s budget left)"
    fi
    if [ -n "$why" ]; then
        record "$s" skip 0 0 "$why"
        printf '[%2d/%d] %-17s skipped: %s\n' "$i" "$n" "$s" "$why"
        continue
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    printf '[%2d/%d] %-17s (limit %d s) ... ' "$i" "$n" "$s" "$limit"
    { printf '# stage %s, limit %d s, started %s\n' "$s" "$limit" "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
      printf '%s\n' "${CMD[$s]}" | sed 's/^/# $ /'; } >"$log"
    t0=$SECONDS
    timeout -k 15 "$limit" bash -c "${CMD[$s]}" >>"$log" 2>&1 </dev/null
    rc=$?
    record "$s" "$rc" "$((SECONDS - t0))" "$limit" ""
    if [ "$have_python" = 1 ]; then
        python3 scripts/gpu_report.py judge "$s" "$out" | cut -c1-160
    else
        echo "exit $rc"
    fi
done

[ "$have_python" = 1 ] || exit 1
echo
python3 scripts/gpu_report.py report "$out"
