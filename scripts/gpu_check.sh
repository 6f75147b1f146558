#!/usr/bin/env bash
# Verifies the whole GPU half in one offline run and writes a report (doc/gpu_check.md). Stages run in order,
# each under its own time limit; a failing stage is recorded and the next one starts. The whole run stays
# within --budget seconds: a stage gets at most what is left, and is skipped when too little is.
#
#   scripts/gpu_check.sh [--out DIR] [--only STAGE[,STAGE...]] [--budget SECONDS] [--dry-run] [--help]
#   scripts/gpu_check.sh --lease [--rest STAGES_TSV] [--out DIR] [--only ...] [--budget SECONDS] [--dry-run]
#
#   --out DIR      report directory [gpu_report]: report.md, summary.txt, stages.tsv, logs/, the profiles
#   --only LIST    run these stages only and update their rows of an existing report ("sanitizer" = the
#                  compute-sanitizer stages); the build stage still makes what they need
#   --budget S     the whole run's time limit in seconds [1500; --lease 540; --rest 240]
#   --dry-run      print the stages, their limits and exact commands; runs nothing (needs no GPU)
#   --lease        one short run from gpu_bundle/ (make gpu_bundle, built elsewhere): no build stage, the
#                  stages in order of value; DIR holds at most 8 files, each rewritten as soon as a stage ends:
#                  report.md, summary.txt, stages.tsv, logs.tar.gz (every stage's log), profiles.tar.gz (the
#                  profile directories), ncu_vs_profiler.csv, ncu_vs_emulated.csv
#   --rest TSV     with --lease: run only the stages that TSV (an earlier lease run's stages.tsv) shows as not
#                  run, timed out or out of time; a stage that timed out gets twice its limit
#
# Stages: inventory build gpu_tests memcheck racecheck synccheck initcheck kernel_ladder data train benchmark
#         decode profile profile_counters energy ncu nsys
# Lease stages: inventory gpu_tests train benchmark decode torch_baseline profile energy ncu memcheck racecheck
#               kernel_ladder
# Environment: LLMC_DATA (a directory with tinyshakespeare/input.txt and gpt2/{encoder.json,vocab.bpe}; without
# it, data/tinyshakespeare/input.txt if downloaded, else the excerpt in test/data, and the vocabulary in
# dev/data/gpt2); TINYSHAKESPEARE and GPT2_VOCAB_DIR override those files; NVIDIA_SMI (the
# nvidia-smi to ask for a GPU) [nvidia-smi]; JOBS (make -j) [the number of CPUs]; GPU_BUNDLE (--lease: the
# bundle's directory) [gpu_bundle].
set -u

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
bad_usage() {
    echo "gpu_check: $1 (see --help)" >&2
    exit 2
}

ALL_STAGES=(inventory build gpu_tests memcheck racecheck synccheck initcheck kernel_ladder data train benchmark
            decode profile profile_counters energy ncu nsys)
SANITIZER_STAGES=(memcheck racecheck synccheck initcheck)
# Each stage's time limit in seconds (doc/gpu_check.md: budgets, not measurements).
declare -A LIMIT=([inventory]=30 [build]=420 [gpu_tests]=180 [memcheck]=120 [racecheck]=150 [synccheck]=90
                  [initcheck]=120 [kernel_ladder]=150 [data]=60 [train]=180 [benchmark]=300 [decode]=60 [profile]=120
                  [profile_counters]=180 [energy]=150 [ncu]=180 [nsys]=150)
# --lease: in order of value, limits adding up to 520 s of the 540 s run (the rest: the report and archives).
LEASE_STAGES=(inventory gpu_tests train benchmark decode torch_baseline profile energy ncu memcheck racecheck
              kernel_ladder)
declare -A LEASE_LIMIT=([inventory]=10 [gpu_tests]=70 [train]=35 [benchmark]=40 [decode]=30 [torch_baseline]=60
                        [profile]=40 [energy]=75 [ncu]=65 [memcheck]=35 [racecheck]=40 [kernel_ladder]=20)

out=gpu_report only="" dry=0 budget="" lease=0 rest=""
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --lease) lease=1 ;;
        --out | --only | --budget | --rest)
            if [ $# -lt 2 ] || [ -z "$2" ]; then bad_usage "$1 needs a value"; fi
            case $1 in --out) out=$2 ;; --only) only=$2 ;; --budget) budget=$2 ;; --rest) rest=$2 ;; esac
            shift ;;
        --out=?*) out=${1#--out=} ;;
        --only=?*) only=${1#--only=} ;;
        --budget=?*) budget=${1#--budget=} ;;
        --rest=?*) rest=${1#--rest=} ;;
        -h | --help) usage; exit 0 ;;
        *) bad_usage "unknown option '$1'" ;;
    esac
    shift
done
if [ -n "$rest" ]; then
    [ "$lease" = 1 ] || bad_usage "--rest needs --lease"
    [ -z "$only" ] || bad_usage "--rest and --only both choose the stages: give one"
    [ -f "$rest" ] || { echo "gpu_check: --rest $rest: no such file (an earlier lease run's stages.tsv)" >&2; exit 1; }
fi
if [ -z "$budget" ]; then
    if [ -n "$rest" ]; then budget=240; elif [ "$lease" = 1 ]; then budget=540; else budget=1500; fi
fi
[[ $budget =~ ^[1-9][0-9]*$ ]] || bad_usage "--budget: expected a positive number of seconds, got '$budget'"
if [ "$lease" = 1 ]; then
    ALL_STAGES=("${LEASE_STAGES[@]}")
    SANITIZER_STAGES=(memcheck racecheck)
    LIMIT=()
    for s in "${LEASE_STAGES[@]}"; do LIMIT[$s]=${LEASE_LIMIT[$s]}; done
fi

selected=()
if [ -n "$rest" ]; then
    # Not run (no row), timed out (124, 137: timeout's TERM and KILL) or skipped as out of time.
    for s in "${ALL_STAGES[@]}"; do
        row=$(awk -F'\t' -v s="$s" '$1 == s { print $2 "\t" $5 }' "$rest" | tail -n 1)
        case $row in
            "" | 124$'\t'* | 137$'\t'*) selected+=("$s") ;;
            skip$'\t'"out of time"*) selected+=("$s") ;;
        esac
        case $row in 124$'\t'* | 137$'\t'*) LIMIT[$s]=$((2 * ${LIMIT[$s]})) ;; esac
    done
elif [ -z "$only" ]; then
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
bundle=${GPU_BUNDLE:+$(absolute "$GPU_BUNDLE")}
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
# Where the stages run: the repository, or (--lease) gpu_bundle/, whose programs, data and reference the commands
# name relative to it; src is the repository from there.
if [ "$lease" = 1 ] && [ -n "$bundle" ]; then
    run_dir=$bundle src=$PWD/ tests=./gpu_tests benches=dev/cuda
elif [ "$lease" = 1 ]; then
    run_dir=$PWD/gpu_bundle src=../ tests=./gpu_tests benches=dev/cuda
else
    run_dir=$PWD src="" tests=./build/run_tests benches=build/dev/cuda
fi

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
    if [ "$lease" = 1 ] && [ ! -x "$run_dir/gpu_tests" ]; then
        echo "gpu_check: --lease: no $run_dir/gpu_tests (make gpu_bundle builds the bundle, on any machine with nvcc)" >&2
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
# --lease: the bundle's programs load the toolkit's cuBLASLt and CUPTI. Where the loader does not find them, the
# toolkit's library directories go on the library path of every stage but PyTorch's, which loads its own (the
# inventory shows the path and ldd).
user_ld_path=${LD_LIBRARY_PATH-}
if [ "$lease" = 1 ] && [ -x "$run_dir/train_gpt2cu" ] && ldd "$run_dir/train_gpt2cu" 2>/dev/null | grep -q 'not found'; then
    cuda_root=$(dirname "$cuda_bin")
    for d in "$cuda_root/extras/CUPTI/lib64" "$cuda_root/targets/x86_64-linux/lib" "$cuda_root/lib" "$cuda_root/lib64"; do
        [ -d "$d" ] && LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    done
    export LD_LIBRARY_PATH
fi
NCU=$(find_tool ncu)
NSYS=$(find_tool nsys)
SANITIZER=$(find_tool compute-sanitizer)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}

q() { printf '%q' "$1"; }
# Where the stages write their logs and profiles: DIR itself, or (--lease) a work directory whose results are
# copied into DIR, as report.md and archives, after every stage.
if [ "$lease" = 1 ]; then
    work=${TMPDIR:-/tmp}/gpu_check.$$
else
    work=$out
fi
O=$(q "$work")

# ---- what the GPU tests are: every suite in test/gpu/*.cu; the sanitizers take the kernel and model suites
# at small shapes (GpuAttention.Gpt2Shape and FullContextT1024 are T=1024, EveryLengthFrom1To130 130 runs) ----
# (GPU_TEST is a TEST on the device; the emulated tier's copies are suites Emu*, not GPU stages.)
mapfile -t gpu_suites < <(sed -n 's/^\(GPU_\)\{0,1\}TEST\(_F\|_P\)\{0,1\}(\([A-Za-z_][A-Za-z0-9_]*\),.*/\3/p' test/gpu/*.cu 2>/dev/null | sort -u)
gpu_filter=$(printf '%s.*:' "${gpu_suites[@]}")
gpu_filter=${gpu_filter%:}
san_filter='Kernels*:GpuPtx.*:GpuAttention.*:GPT2GPU.*-GpuAttention.Gpt2Shape:GpuAttention.FullContextT1024:GpuAttention.EveryLengthFrom1To130'
# --lease: the kernel suites alone, so that both tools finish within 90 s.
[ "$lease" = 1 ] && san_filter='Kernels*:GpuPtx.*:GpuAttention.*-GpuAttention.Gpt2Shape:GpuAttention.FullContextT1024:GpuAttention.EveryLengthFrom1To130'

# ---- the binaries each stage needs (the build stage makes the union for the selected stages) ----
declare -A NEEDS=([gpu_tests]="build/run_tests train_gpt2 prepare_data train_gpt2cu profile_gpt2cu"
                  [memcheck]=build/run_tests [racecheck]=build/run_tests [synccheck]=build/run_tests
                  [initcheck]=build/run_tests [kernel_ladder]=dev_cuda [data]=prepare_data [train]=train_gpt2cu
                  [benchmark]=train_gpt2cu [profile]=profile_gpt2cu [profile_counters]=profile_gpt2cu
                  [energy]=profile_gpt2cu [ncu]=profile_gpt2cu [nsys]=profile_gpt2cu)
targets=""
[ "$lease" = 1 ] || for s in "${selected[@]}"; do
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
./profile_gpt2cu --version
$(tool_line ncu "$NCU")
$(tool_line nsys "$NSYS")
$(tool_line compute-sanitizer "$SANITIZER")"
# --lease: the libraries a data-parallel run would load (the bundle's programs need neither).
# shellcheck disable=SC2016 # the command's $(...) runs when the stage does
lib_line() { # "lib NAME: PATH" from the loader's cache, or "lib NAME: not found"
    printf 'p=$(ldconfig -p 2>/dev/null | awk '"'"'$1 ~ /^%s\\.so/ { print $NF; exit }'"'"'); echo "lib %s: ${p:-not found}"' "$1" "$1"
}
if [ "$lease" = 1 ]; then
    CMD[inventory]="echo \"clocks: \$($(q "$NVSMI") --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -n 1)\"
${CMD[inventory]}
$(lib_line libnccl)
$(lib_line libmpi)
echo \"LD_LIBRARY_PATH=\$LD_LIBRARY_PATH\"
ldd ./train_gpt2cu || echo \"ldd ./train_gpt2cu: exit \$?\""
fi
CMD[inventory]=${CMD[inventory]//python3 scripts\//python3 ${src}scripts/}
CMD[build]="make -j$JOBS $targets"
CMD[gpu_tests]="${data_root:+LLMC_DATA=$(q "$data_root") }$tests --gtest_filter='$gpu_filter'"
for tool in memcheck racecheck synccheck initcheck; do
    CMD[$tool]="$(q "${SANITIZER:-compute-sanitizer}") --tool $tool --error-exitcode 1 $tests --gtest_filter='$san_filter'"
done
# shellcheck disable=SC2016
CMD[kernel_ladder]='rc=0
for src in '"${src}"'dev/cuda/*.cu; do
    b='"$benches"'/$(basename "$src" .cu)
    if [ ! -x "$b" ]; then echo "=== $b missing"; rc=1; continue; fi
    echo "=== $b"; timeout -k 5 90 "$b"; r=$?; echo "=== $b exit $r"; [ "$r" = 0 ] || rc=1
done
exit $rc'
CMD[data]="if [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && [ -f data/tinyshakespeare/tiny_shakespeare_val.bin ]; then
    echo 'data/tinyshakespeare: already prepared'
else
    TINYSHAKESPEARE=$(q "$ts_text") GPT2_VOCAB_DIR=$(q "$vocab_dir") bash dev/data/tinyshakespeare.sh
fi"
if [ "$lease" = 1 ]; then
    # The bundle's CPU reference ran the same model, batch, seed and data (make gpu_bundle): its step lines
    # follow, as "ref: ...", for the report to hold the GPU's first losses against.
    CMD[train]="./train_gpt2cu -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x 30 -v 15 -s 30 -g 32 -o $O/train; r=\$?
sed 's/^/ref: /' ref/train_gpt2.log
exit \$r"
    CMD[benchmark]="${src}scripts/benchmark_gpu.sh -C . -e d12 -t 1024 -B '16 64'"
    CMD[decode]="${src}scripts/benchmark_gpu.sh -C . -I -e d12 -B '1 8 64' -P 64 -n 256"
    CMD[torch_baseline]="LD_LIBRARY_PATH=$(q "$user_ld_path") python3 ${src}dev/torch_gpt2_baseline.py -e d12 -t 1024 -B '16 64' -x 40 -w 10 -i data/tinyshakespeare/tiny_shakespeare_train.bin"
else
    CMD[train]="./train_gpt2cu -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x 60 -v 20 -s 60 -g 64 -o $O/train"
    CMD[benchmark]="scripts/benchmark_gpu.sh -e d12 -t 1024 -B '16 32 64' -p"
    CMD[decode]="scripts/benchmark_gpu.sh -I -e d12 -B '1 8 64' -P 64 -n 256"
fi
CMD[profile]="./profile_gpt2cu -o $O/profile_default"
CMD[profile_counters]="./profile_gpt2cu --counters -o $O/profile_counters"
# Joules per sub-block: d12's 24 targets, 5 repetitions of 0.3 s windows each, about 50 s (doc/profiling.md).
CMD[energy]="./profile_gpt2cu --energy --energy-seconds 45 --steps 2 -o $O/profile_energy"
one_layer="--layers 1 --warmup 1 --steps 1"
# Then ncu's memory counters (scripts/ncu_metrics.txt) of our own kernels in one training step of the emulated
# counters' GPT-2 slice (one layer, B=1, T=256), next to the emulated counts the bundle carries (make emu_counters
# before make gpu_bundle); gpu_report.py compares them (ncu_vs_emulated.csv). Last: a timeout loses only them.
NCU_COUNTER_METRICS=$(grep -v '^#' scripts/ncu_metrics.txt | paste -sd, -)
OWN_KERNELS='encoder_|layernorm_|attention_|fused_classifier|accumulate_loss|bias_backward|global_norm|adamw_kernel'
if [ "$lease" = 1 ]; then emu_csv=emu_counters.csv; else emu_csv=build/emu/emu_counters.csv; fi
CMD[ncu]="./profile_gpt2cu $one_layer -o $O/profile_1layer; r1=\$?
echo '# ncu'
$(q "${NCU:-ncu}") --csv --print-units base --metrics gpu__time_duration.sum --clock-control none --cache-control none ./profile_gpt2cu $one_layer -o $O/ncu/profile; r2=\$?
mkdir -p $O/ncu && { cp $emu_csv $O/ncu/emu_counters.csv || echo 'no $emu_csv: make test (or make emu_counters) before make gpu_bundle'; }
echo '# ncu counters'
$(q "${NCU:-ncu}") --csv --print-units base --cache-control all --clock-control none --metrics $NCU_COUNTER_METRICS -k regex:'$OWN_KERNELS' ./profile_gpt2cu -e d12 --layers 1 -b 1 -t 256 --warmup 0 --steps 1 --no-calibrate -o $O/ncu/counters; r3=\$?
exit \$(( r1 != 0 || r2 != 0 || r3 != 0 ))"
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
    [ -f "$run_dir/data/tinyshakespeare/tiny_shakespeare_train.bin" ] && have_data=1
    case $1 in
        memcheck | racecheck | synccheck | initcheck) [ -n "$SANITIZER" ] || echo "compute-sanitizer not found" ;;
        ncu) [ -n "$NCU" ] || echo "ncu not found" ;;
        torch_baseline)
            if [ "$have_data" = 0 ]; then echo "no data/tinyshakespeare in gpu_bundle (make gpu_bundle)"
            elif ! LD_LIBRARY_PATH=$user_ld_path python3 -c 'import torch' >/dev/null 2>&1; then
                echo "no PyTorch (python3 -c 'import torch' fails)"
            fi ;;
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
                if [ "$lease" = 1 ]; then echo "no data/tinyshakespeare in gpu_bundle (make gpu_bundle)"
                else echo "no data/tinyshakespeare (see the data stage)"; fi ;;
    esac
}

# ---- dry run ----
n=${#selected[@]}
if [ "$dry" = 1 ]; then
    echo "gpu_check: dry run, nothing is run; the report would go to $out (budget ${budget} s)"
    [ "$lease" = 1 ] && echo "stages run in $run_dir; logs and profiles go to $work, then into $out"
    i=0 total=0
    for s in "${selected[@]}"; do
        i=$((i + 1)) total=$((total + LIMIT[$s]))
        why=$(skip_reason "$s")
        echo
        echo "stage $i/$n: $s (limit ${LIMIT[$s]} s)${why:+ [skipped on this machine: $why]}"
        printf '%s\n' "${CMD[$s]}" | sed 's/^/    /'
    done
    echo
    echo "limits: $total s in all, for a budget of $budget s"
    echo "then: python3 scripts/gpu_report.py report $O"
    exit 0
fi

# ---- the run ----
mkdir -p "$out" "$work/logs" || exit 1
tsv=$work/stages.tsv
if [ -z "$only" ] || [ "$lease" = 1 ]; then
    rm -f "$tsv" "$out/report.md" "$out/summary.txt" "$out/ncu_vs_profiler.csv" "$out"/logs/*.log \
        "$out/stages.tsv" "$out/logs.tar.gz" "$out/profiles.tar.gz"
fi
touch "$tsv"
have_python=1
command -v python3 >/dev/null 2>&1 || { have_python=0; echo "gpu_check: python3 not found: logs only, no report" >&2; }
# --lease: DIR's files, rewritten from the work directory (each through a .part file, so that a run stopped
# at any moment leaves whole files): stages.tsv, report.md, summary.txt, ncu_vs_profiler.csv, ncu_vs_emulated.csv,
# logs.tar.gz and profiles.tar.gz (every directory the stages wrote; without the traces when it would pass 16 MiB).
put() { cp "$1" "$out/$2.part" && chmod 644 "$out/$2.part" && mv "$out/$2.part" "$out/$2"; }
publish() {
    [ "$lease" = 1 ] || return 0
    put "$tsv" stages.tsv
    if [ "$have_python" = 1 ]; then
        python3 scripts/gpu_report.py report "$work" >/dev/null
        for f in report.md summary.txt ncu_vs_profiler.csv ncu_vs_emulated.csv; do [ -f "$work/$f" ] && put "$work/$f" "$f"; done
    fi
    tar -czf "$out/logs.tar.gz.part" -C "$work" logs && mv "$out/logs.tar.gz.part" "$out/logs.tar.gz"
    local dirs
    mapfile -t dirs < <(find "$work" -mindepth 1 -maxdepth 1 -type d ! -name logs -printf '%P\n' | sort)
    [ "${#dirs[@]}" -gt 0 ] || return 0
    tar -czf "$out/profiles.tar.gz.part" -C "$work" "${dirs[@]}"
    if [ "$(stat -c %s "$out/profiles.tar.gz.part")" -gt $((16 << 20)) ]; then
        echo "gpu_check: the profiles pass 16 MiB compressed: profiles.tar.gz leaves out their trace.json" >&2
        tar -czf "$out/profiles.tar.gz.part" -C "$work" --exclude=trace.json "${dirs[@]}"
    fi
    mv "$out/profiles.tar.gz.part" "$out/profiles.tar.gz"
}
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
    log=$work/logs/$s.log
    why=$(skip_reason "$s")
    left=$((deadline - SECONDS))
    limit=${LIMIT[$s]}
    if [ -z "$why" ] && [ "$left" -lt 60 ] && [ "$left" -lt "$limit" ]; then
        why="out of time ($(( left > 0 ? left : 0 )) s of the ${budget} s budget left)"
    fi
    if [ -n "$why" ]; then
        record "$s" skip 0 0 "$why"
        printf '[%2d/%d] %-17s skipped: %s\n' "$i" "$n" "$s" "$why"
        publish
        continue
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    printf '[%2d/%d] %-17s (limit %d s) ... ' "$i" "$n" "$s" "$limit"
    { printf '# stage %s, limit %d s, started %s\n' "$s" "$limit" "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
      printf '%s\n' "${CMD[$s]}" | sed 's/^/# $ /'; } >"$log"
    t0=$SECONDS
    (cd "$run_dir" && exec timeout -k 5 "$limit" bash -c "${CMD[$s]}") >>"$log" 2>&1 </dev/null
    rc=$?
    record "$s" "$rc" "$((SECONDS - t0))" "$limit" ""
    if [ "$have_python" = 1 ]; then
        python3 scripts/gpu_report.py judge "$s" "$work" | cut -c1-160
    else
        echo "exit $rc"
    fi
    publish
done

[ "$have_python" = 1 ] || exit 1
echo
python3 scripts/gpu_report.py report "$work"; status=$?
publish
if [ "$lease" = 1 ]; then
    rm -rf "$work"
    echo "results: $out ($(cd "$out" && echo *))"
fi
exit $status
