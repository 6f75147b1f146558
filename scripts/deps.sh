#!/usr/bin/env bash
# Installs what building and testing need and is missing, on Debian or Ubuntu; does nothing when all is there.
# The README's commands start with it, `make deps` runs it, and so does CI.
#
#   Debian packages: the compiler and make, GoogleTest, PCRE2, nlohmann/json, Boost.Context, curl (for
#     `make tinyshakespeare`), clang and its runtime (the fuzz targets), python3, Open MPI (data-parallel
#     training and its tests, doc/distributed.md), Chromium and its driver (report.html tested in a browser),
#     the OpenMP builds of OpenBLAS and BLIS (the CPU programs' GEMMs, opened at run time: without them the
#     programs use their own, slower GEMM; doc/cpu_reference.md).
#   Python packages from PyPI: matplotlib (the plot scripts), plotly (report.html's charts), selenium (drives the
#     browser in the report tests) and HolisticTraceAnalysis (the trace tests); where they go is said below. The
#     Makefile puts .venv/bin first on PATH when there is one.
#   Not installed: the CUDA toolkit. Without nvcc the GPU programs are not built; the emulated GPU tests still are.
#
# Packages are installed as root, through sudo when not run as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEBS=(g++ make libgtest-dev libpcre2-dev nlohmann-json3-dev libboost-context-dev curl clang libclang-rt-dev python3
      libopenmpi-dev openmpi-bin chromium chromium-driver libopenblas0-openmp libblis4-openmp)

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "deps: not root and no sudo; run as root: $*" >&2
        exit 1
    fi
}

apt_install() {
    echo "deps: installing $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v dpkg >/dev/null 2>&1; then
    echo "deps: not a Debian or Ubuntu system; install by hand: ${DEBS[*]}, and matplotlib, plotly, selenium" \
        "and HolisticTraceAnalysis with pip" >&2
    exit 1
fi
need=()
for pkg in "${DEBS[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

# Python packages: into the python3 on PATH when it takes pip installs (pyenv, conda, a virtual environment);
# Debian's own python3 does not, so they go into .venv (a virtual environment of their own: Debian's
# python3-matplotlib is built for the system numpy, which the PyPI packages would replace).
# HolisticTraceAnalysis 0.5.0 uses psutil without declaring it and fails under pandas 3 (it stores row indices in a
# column pandas narrowed to int8); `import hta` alone succeeds without psutil, so the check imports what HTA uses.
PY_PKGS=(matplotlib plotly selenium HolisticTraceAnalysis==0.5.0 psutil 'pandas<3')
PY_CHECK='import matplotlib, plotly, selenium, psutil, pandas, hta.trace_analysis; assert int(pandas.__version__.split(".")[0]) < 3'
missing_modules() {
    "$1" -c "$PY_CHECK" 2>/dev/null || echo "${PY_PKGS[*]}"
}
if [ -x .venv/bin/python3 ]; then py=.venv/bin/python3; else py=python3; fi
py_need=$(missing_modules "$py")
if [ -n "$py_need" ]; then
    if [ "$py" = python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ] && python3 -m pip --version >/dev/null 2>&1; then
        echo "deps: pip installing $py_need"
        # shellcheck disable=SC2086 # a list of names
        python3 -m pip install --quiet --root-user-action=ignore $py_need
    else
        if [ ! -x .venv/bin/python3 ]; then
            echo "deps: the system python3 takes no pip installs; making the virtual environment .venv"
            python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
            python3 -m venv .venv
            py_need=$(missing_modules .venv/bin/python3)
        fi
        echo "deps: pip installing $py_need into .venv"
        # shellcheck disable=SC2086
        .venv/bin/python3 -m pip install --quiet --root-user-action=ignore $py_need
    fi
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    # cuobjdump reads the attention kernels' SASS (make sass_check, part of make test) and runs nvdisasm, found
    # beside it; some toolkit installs lack them, and NVIDIA publishes each alone on PyPI (into one bin directory).
    if [ -x .venv/bin/python3 ]; then py=.venv/bin/python3; else py=python3; fi
    cuda_bin="${CUDA_HOME:-/usr/local/cuda}/bin"
    for tool in cuobjdump nvdisasm; do
        if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "$cuda_bin/$tool" ] &&
            ! "$py" -c 'import glob, nvidia, sys; sys.exit(not any(glob.glob(p + "/*/bin/" + sys.argv[1]) for p in nvidia.__path__))' "$tool" 2>/dev/null; then
            echo "deps: pip installing nvidia-cuda-$tool ($tool, for make sass_check)"
            "$py" -m pip install --quiet --root-user-action=ignore "nvidia-cuda-$tool"
        fi
    done
else
    echo "deps: no nvcc (CUDA toolkit): the GPU programs will not be built (the emulated GPU tests still are)"
fi
exit 0
