# GPT-2 trainer that profiles itself.
#   make train_gpt2      CPU fp32 reference trainer (OpenMP)
#   make prepare_data    GPT-2 tokenizer + shard writer
#   make infer_gpt2      CPU fp32 text generation with a KV cache (prefill + decode, --profile)
#   make train_gpt2cu    GPU trainer (needs nvcc; runs on sm_80 and newer)
#   make infer_gpt2cu    GPU inference with a KV cache (needs nvcc)
#   make profile_gpt2cu  runs a few GPU training steps traced with CUPTI and writes a profile directory
#   make sample_profile  regenerates test/data/sample_profile (synthetic GPU profile for the plot tests)
#   make report_screenshot  regenerates doc/images/report.png (the sample profile's report.html, in Chromium)
#   make dev_cuda        kernel benchmarks in dev/cuda/ (build/dev/cuda/<name>)
#   make test            GoogleTest suite (GPU tests skip without a device) and the emulated GPU tier
#   make emu             the emulated GPU tier alone (build/emu/emu_tests), make emu_mutation its mutation check
#   make SAN=1 test      the CPU programs and CPU tests built with AddressSanitizer + UBSan (in build/san)
#   make fuzz            each libFuzzer target in test/fuzz/ for FUZZ_SECONDS (needs clang; doc/testing.md)
#   make tinyshakespeare prepares data/tinyshakespeare (TINYSHAKESPEARE=/path/input.txt to skip the download)
#   make gpu_bundle      everything scripts/gpu_check.sh --lease runs on a GPU machine, built without one into
#                        gpu_bundle/ (doc/gpu_check.md); its objects go to build/bundle
#   make deps            installs the missing build and test dependencies (scripts/deps.sh; Debian or Ubuntu)
#
# Objects go to build/ with their header dependencies (-MMD -MP): touching a header rebuilds only what
# includes it. The training loop, the inference driver and the profiler's analysis and writers are compiled once,
# into build/libllmc_host.a (llmc/util, model, io), build/libllmc_train.a, build/libllmc_infer.a and
# build/libllmc_profiler.a, and linked into every program that uses them.

# Parallel by default (one job per CPU); an explicit -jN (or -j1) wins.
ifeq ($(filter -j%,$(MAKEFLAGS))$(findstring j,$(firstword -$(MAKEFLAGS))),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

CXX ?= g++
# -march=native: the CPU reference spends its time in matmul loops that want the widest vectors available.
# Override with `make CPU_ARCH=x86-64-v2` for a binary that runs on other machines.
CPU_ARCH ?= native
# CXXFLAGS and NVCCFLAGS are yours (optimisation, debug), from the environment or the command line: they
# replace -O3 (-O1 for SAN=1); the flags the build needs are added to them either way (override).
CXXFLAGS ?= $(if $(SAN),-O1,-O3)
# -fno-math-errno: sqrt is then the vector instruction, so loops over it (AdamW) vectorise; no result changes,
# and nothing reads errno after maths.
override CXXFLAGS += -std=c++17 -march=$(CPU_ARCH) -fno-math-errno -fopenmp -Wall -Wextra -I. -MMD -MP
LDLIBS_PCRE := -lpcre2-8
BUILD := build

# ---- BUNDLE=1 (set by `make gpu_bundle`, below): the programs gpu_bundle/ carries to a GPU machine, in build/bundle
# so that they never mix with the normal build's objects. Single-process (no MPI, no NCCL), pcre2 linked
# statically, CPU code for any x86-64 with AVX2 (x86-64-v3), GPU code for sm_90 with its PTX (compute_90), which
# the driver compiles for newer GPUs. The GPU objects are the normal build's (CU_BUILD) when that build is for
# sm_90 too (SHARE_GPU_OBJECTS, set by gpu_bundle): nvcc's flags are then the same, the host code in them is
# compiled without -march, and only the one object whose flags differ (gpt2.cu, NCCL) is compiled again ----
ifdef BUNDLE
BUILD := build/bundle
BIN := $(BUILD)/
CPU_ARCH := x86-64-v3
GPU_ARCH := 90
LDLIBS_PCRE := -l:libpcre2-8.a
endif

# ---- CUDA: architecture from the GPU present (nvidia-smi), GPU_ARCH=90 to override, sm_90 without a GPU ----
NVCC ?= nvcc
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
GPU_ARCH ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.')
ifeq ($(GPU_ARCH),)
GPU_ARCH := 90
endif
NVCCFLAGS ?= -O3
# Machine code for the GPU's architecture and its PTX, which the driver compiles for newer GPUs.
GPU_CODE ?= -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -gencode arch=compute_$(GPU_ARCH),code=compute_$(GPU_ARCH)
# Each function in its own section and the unused ones dropped at the link: a program takes from the host library
# only the functions it calls, not whole objects (the tokenizer's JSON reader in a trainer that only decodes). The
# bundle's host objects (below) are compiled so too.
override NVCCFLAGS += -std=c++17 $(GPU_CODE) -lineinfo -I. \
             -Xcompiler -fopenmp,-Wall,-ffunction-sections,-fdata-sections -Xlinker --gc-sections \
             --expt-relaxed-constexpr -MMD -MP
ifdef BUNDLE
override CXXFLAGS += -ffunction-sections -fdata-sections -Wl,--gc-sections
endif
# Where the GPU objects (%.cu.o) go: the build directory, or the normal build's for a bundle that shares them.
CU_BUILD := $(if $(and $(BUNDLE),$(SHARE_GPU_OBJECTS)),build,$(BUILD))
CUDA_LIBS := -lcublasLt -lcublas
# The in-process profiler (llmc/profiler/cupti_collector.cuh): train_gpt2cu --profile, profile_gpt2cu, the GPU tests.
CUPTI_LIBS := -lcupti

# ---- SAN=1: ASan + UBSan, CPU only, everything under build/san (programs included, so that a sanitized build
# never replaces the plain one); any report fails the run ----
ifdef SAN
BUILD := build/san
BIN := $(BUILD)/
HAVE_NVCC :=
# GCC's -Wmaybe-uninitialized misfires inside std::regex and std::function under the sanitizers.
override CXXFLAGS += -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
                     -Wno-maybe-uninitialized
endif

# ---- MPI: data-parallel training (llmc/train/dist.h, doc/distributed.md) when an MPI C++ wrapper is found
# (Debian: libopenmpi-dev); without it the trainers are single-process and refuse an mpirun of several ranks.
# Not under SAN=1: Open MPI's own allocations outlive MPI_Finalize and LeakSanitizer would fail every run (the
# sanitized trainer still runs the data-parallel code as one process; the MPI tests skip there) ----
MPICXX ?= mpicxx
HAVE_MPI := $(if $(SAN)$(BUNDLE),,$(shell command -v $(MPICXX) 2>/dev/null))
ifneq ($(HAVE_MPI),)
# MPI's C API only: the deprecated C++ bindings would warn and need one more library.
MPI_CFLAGS := $(shell $(MPICXX) --showme:compile) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
# -L and -l only, which both g++ and nvcc take at the link.
MPI_LIBS := $(addprefix -L,$(shell $(MPICXX) --showme:libdirs)) \
            $(addprefix -l,$(filter-out mpi_cxx,$(shell $(MPICXX) --showme:libs)))
$(BUILD)/llmc/train/dist.o: override CXXFLAGS += -DLLMC_HAVE_MPI
$(BUILD)/llmc/train/dist_mpi.o: override CXXFLAGS += $(MPI_CFLAGS)
endif
# NCCL (the GPU trainer's collectives, llmc/train/dist_nccl.cuh): its header and library in the CUDA toolkit or
# NCCL_HOME; used only with MPI, which bootstraps it.
NCCL_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(HAVE_NVCC)))
HAVE_NCCL := $(if $(HAVE_MPI),$(if $(HAVE_NVCC),$(wildcard $(NCCL_HOME)/include/nccl.h)))
ifneq ($(HAVE_NCCL),)
NCCL_LIBS := -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib -lnccl
$(BUILD)/llmc/gpu/gpt2.cu.o $(BUILD)/llmc/train/dist_nccl.cu.o: override NVCCFLAGS += -DLLMC_HAVE_NCCL -I$(NCCL_HOME)/include
endif

.PHONY: all test clean tinyshakespeare deps dev_cuda sample_profile fuzz
all: $(BIN)train_gpt2 $(BIN)prepare_data $(BIN)infer_gpt2
ifneq ($(HAVE_NVCC),)
all: train_gpt2cu profile_gpt2cu infer_gpt2cu dev_cuda
endif

# ---- objects: build/<path>.o from <path>.cpp (g++) or <path>.cu (nvcc), each with its .d ----
$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
ifneq ($(CU_BUILD),$(BUILD))
$(CU_BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
endif

# ---- libraries: host code every program shares (utilities, the tokenizer, model and state files, the data
# loader, the memory plan); the flag tables; the training loop; the inference driver; the profiler's session,
# CPU source, analysis and writers ----
HOST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard llmc/util/*.cpp llmc/model/*.cpp llmc/io/*.cpp) llmc/cpu/vec.cpp)
TRAIN_OBJS := $(filter-out $(if $(HAVE_MPI),,%/dist_mpi.o),$(patsubst %.cpp,$(BUILD)/%.o,$(wildcard llmc/train/*.cpp)))
INFER_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard llmc/infer/*.cpp))
PROFILER_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard llmc/profiler/*.cpp))
HOST_LIB := $(BUILD)/libllmc_host.a
TRAIN_LIB := $(BUILD)/libllmc_train.a
INFER_LIB := $(BUILD)/libllmc_infer.a
PROFILER_LIB := $(BUILD)/libllmc_profiler.a
$(HOST_LIB): $(HOST_OBJS)
	$(AR) rcs $@ $^
$(TRAIN_LIB): $(TRAIN_OBJS)
	$(AR) rcs $@ $^
$(INFER_LIB): $(INFER_OBJS)
	$(AR) rcs $@ $^
$(PROFILER_LIB): $(PROFILER_OBJS)
	$(AR) rcs $@ $^
# In link order: the training loop samples through the inference driver.
LIBS := $(TRAIN_LIB) $(INFER_LIB) $(PROFILER_LIB) $(HOST_LIB)
# The models' host code and backends, each compiled once (llmc/cpu/, llmc/gpu/): the GPU ones by nvcc, with the
# GPU profile session (CUPTI) and, where the build has NCCL, the NCCL communicator beside them.
CPU_BACKENDS := $(BUILD)/llmc/cpu/train_backend.o $(BUILD)/llmc/cpu/infer_backend.o
# gpt2.cu is compiled per build: with NCCL in the normal build where it has NCCL, never in the bundle.
GPU_SESSION := $(patsubst %.cu,$(CU_BUILD)/%.cu.o,$(wildcard llmc/profiler/*.cu))
GPU_BACKENDS := $(BUILD)/llmc/gpu/gpt2.cu.o $(CU_BUILD)/llmc/gpu/gpt2_decoder.cu.o $(GPU_SESSION) \
                $(if $(HAVE_NCCL),$(BUILD)/llmc/train/dist_nccl.cu.o)

# ---- programs ----
$(BIN)train_gpt2: $(BUILD)/train_gpt2.o $(CPU_BACKENDS) $(LIBS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS_PCRE) $(MPI_LIBS)

$(BIN)infer_gpt2: $(BUILD)/infer_gpt2.o $(BUILD)/llmc/cpu/infer_backend.o $(INFER_LIB) $(PROFILER_LIB) $(HOST_LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS_PCRE)

$(BIN)prepare_data: $(BUILD)/dev/data/prepare_data.o $(HOST_LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS_PCRE)

$(BIN)train_gpt2cu: $(CU_BUILD)/train_gpt2.cu.o $(GPU_BACKENDS) $(LIBS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) $(CUPTI_LIBS) $(LDLIBS_PCRE) $(MPI_LIBS) $(NCCL_LIBS) -lgomp

$(BIN)profile_gpt2cu: $(CU_BUILD)/profile_gpt2.cu.o $(GPU_BACKENDS) $(LIBS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) $(CUPTI_LIBS) $(LDLIBS_PCRE) $(MPI_LIBS) $(NCCL_LIBS) -lgomp

$(BIN)infer_gpt2cu: $(CU_BUILD)/infer_gpt2.cu.o $(GPU_BACKENDS) $(LIBS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) $(CUPTI_LIBS) $(LDLIBS_PCRE) $(MPI_LIBS) $(NCCL_LIBS) -lgomp

# The committed sample profile: synthetic records through the project's own writers (dev/sample_profile.cpp).
$(BUILD)/sample_profile: $(BUILD)/dev/sample_profile.o $(PROFILER_LIB) $(HOST_LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@
sample_profile: $(BUILD)/sample_profile
	rm -rf test/data/sample_profile
	./$(BUILD)/sample_profile test/data/sample_profile
# The screenshot of the sample profile's report.html that README.md and doc/profiling.md show (headless Chromium,
# 1400x900; scripts/deps.sh installs it).
.PHONY: report_screenshot
report_screenshot:
	@mkdir -p $(BUILD) doc/images
	python3 scripts/report_html.py test/data/sample_profile -o $(BUILD)/sample_report.html
	python3 test/report_check.py $(BUILD)/sample_report.html --screenshot doc/images/report.png

# ---- kernel benchmarks: one program per dev/cuda/*.cu ----
DEV_CUDA_SRCS := $(wildcard dev/cuda/*.cu)
DEV_CUDA_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/dev/cuda/%,$(DEV_CUDA_SRCS))
dev_cuda: $(DEV_CUDA_BINS)
$(BUILD)/dev/cuda/%: $(CU_BUILD)/dev/cuda/%.cu.o $(HOST_LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lgomp

# ---- tests: one binary; CPU tests from test/test_*.cpp, GPU tests from test/gpu/test_*.cu when nvcc exists ----
TEST_SRCS := $(wildcard test/test_*.cpp) test/main.cpp
TEST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(TEST_SRCS))
ifneq ($(HAVE_NVCC),)
# test_counters.cpp runs CUPTI's host API (no GPU needed): CUDA headers here, -lcupti at the link below.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(HAVE_NVCC)))
$(BUILD)/test/test_counters.o: override CXXFLAGS += -I$(CUDA_HOME)/include -DLLMC_HAVE_CUPTI
GPU_TEST_OBJS := $(patsubst %.cu,$(CU_BUILD)/%.cu.o,$(wildcard test/gpu/test_*.cu))
$(BUILD)/run_tests: $(TEST_OBJS) $(GPU_TEST_OBJS) $(CPU_BACKENDS) $(GPU_BACKENDS) $(LIBS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ -lgtest $(LDLIBS_PCRE) $(CUDA_LIBS) $(CUPTI_LIBS) $(MPI_LIBS) $(NCCL_LIBS) -lgomp -lpthread
else
$(BUILD)/run_tests: $(TEST_OBJS) $(CPU_BACKENDS) $(LIBS)
	@echo "note: nvcc not found; building the CPU tests only"
	$(CXX) $(CXXFLAGS) $^ -o $@ -lgtest $(LDLIBS_PCRE) $(MPI_LIBS) -lpthread
endif

# ---- make gpu_bundle (doc/gpu_check.md): gpu_bundle/, everything scripts/gpu_check.sh --lease runs on a GPU machine,
# at most 48 MiB: the GPU programs; train_gpt2 and infer_gpt2, which the GPU tests compare with; gpu_tests, the GPU
# suites of the tests alone (test/gpu/*.cu); the kernel benchmarks (dev/cuda/); the whole tinyshakespeare as shards
# (data/tinyshakespeare) and the CPU reference's first REF_STEPS steps of the lease's training run on them (ref/), which
# the GPU's losses are checked against. Built by a second make with BUNDLE=1 (above): objects in build/bundle.
# The text: TINYSHAKESPEARE, else $LLMC_DATA/tinyshakespeare/input.txt, else data/tinyshakespeare/input.txt (make
# tinyshakespeare); the vocabulary: GPT2_VOCAB_DIR, else $LLMC_DATA/gpt2, else dev/data/gpt2. Nothing is downloaded.
.PHONY: gpu_bundle
gpu_bundle:
	@[ -n "$(HAVE_NVCC)" ] || { echo "error: gpu_bundle: $(NVCC) not found (the CUDA toolkit builds the bundle)" >&2; exit 1; }
	@$(MAKE) --no-print-directory BUNDLE=1 SHARE_GPU_OBJECTS=$(filter 90,$(GPU_ARCH)) bundle
	@echo "gpu_bundle: $$(du -sb gpu_bundle | cut -f1) bytes ($$(du -sh gpu_bundle | cut -f1)); the limit is 48 MiB"
ifdef BUNDLE
BUNDLE_DIR := gpu_bundle
# The CPU reference's steps (d12, B=4, T=1024): each a few minutes of CPU time and 10 GiB of memory.
REF_STEPS ?= 2
BUNDLE_TEXT = $(or $(TINYSHAKESPEARE),$(if $(LLMC_DATA),$(LLMC_DATA)/tinyshakespeare/input.txt,data/tinyshakespeare/input.txt))
BUNDLE_VOCAB = $(or $(GPT2_VOCAB_DIR),$(if $(LLMC_DATA),$(LLMC_DATA)/gpt2,dev/data/gpt2))
BUNDLE_DATA := $(BUNDLE_DIR)/data/tinyshakespeare
BUNDLE_PROGRAMS := $(addprefix $(BUNDLE_DIR)/,train_gpt2cu infer_gpt2cu profile_gpt2cu train_gpt2 infer_gpt2 gpu_tests) \
                   $(patsubst $(BUILD)/%,$(BUNDLE_DIR)/%,$(DEV_CUDA_BINS))
# The lease's training run (scripts/gpu_check.sh, stage train) with the same model, batch, seed and data.
BUNDLE_REF := $(BUNDLE_DIR)/ref/train_gpt2.log
# The emulated counters of the GPT-2 slice (build/emu/emu_counters.csv, which make test and make emu_counters
# write), which the lease check's ncu stage compares with ncu's, when they exist.
BUNDLE_EMU_COUNTERS := $(if $(wildcard build/emu/emu_counters.csv),$(BUNDLE_DIR)/emu_counters.csv)
.PHONY: bundle
bundle: $(BUNDLE_PROGRAMS) $(BUNDLE_REF) $(BUNDLE_EMU_COUNTERS)
$(BUNDLE_DIR)/emu_counters.csv: build/emu/emu_counters.csv
	cp $< $@
# The GPU suites without test_gpu_backends.cu: it would carry the model's device code three more times (9 MiB over
# the limit), and the lease runs the backends under their drivers as the programs themselves.
$(BUILD)/gpu_tests: $(BUILD)/test/main.o $(filter-out %/test_gpu_backends.cu.o,$(GPU_TEST_OBJS)) $(GPU_BACKENDS) $(LIBS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ -lgtest $(LDLIBS_PCRE) $(CUDA_LIBS) $(CUPTI_LIBS) -lgomp -lpthread
# Host symbol tables stripped (a tenth of the size; device code, its line info and kernel names stay).
$(BUNDLE_DIR)/%: $(BUILD)/%
	@mkdir -p $(dir $@)
	cp $< $@ && strip $@
$(BUNDLE_DATA)/tiny_shakespeare_train.bin: $(BUILD)/prepare_data
	@[ -f "$(BUNDLE_TEXT)" ] || { echo "error: gpu_bundle: no tinyshakespeare text at '$(BUNDLE_TEXT)': set" \
	    "TINYSHAKESPEARE=/path/to/input.txt (or LLMC_DATA=DIR, or run make tinyshakespeare)" >&2; exit 1; }
	$(BUILD)/prepare_data --gpt2-dir "$(BUNDLE_VOCAB)" --tinyshakespeare "$(BUNDLE_TEXT)" $(BUNDLE_DATA)
$(BUNDLE_REF): $(BUNDLE_DIR)/train_gpt2 $(BUNDLE_DATA)/tiny_shakespeare_train.bin
	@mkdir -p $(dir $@)
	cd $(BUNDLE_DIR) && ./train_gpt2 -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x $(REF_STEPS) -v 0 -s 0 \
	    >ref/train_gpt2.log.part && mv ref/train_gpt2.log.part ref/train_gpt2.log
endif

# ---- machine code of the attention kernels (scripts/check_sass.py, doc/attention.md): no spills, no local memory,
# ldmatrix + cp.async + mma.sync m16n8k16 and no generic loads in the SASS. Needs nvcc and cuobjdump, no GPU.
SASS_OBJ := $(BUILD)/sass/attention_kernels.o
$(SASS_OBJ): test/sass/attention_kernels.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2>$(@:.o=.ptxas) || { cat $(@:.o=.ptxas); rm -f $@; exit 1; }
-include $(SASS_OBJ:.o=.d)
.PHONY: sass_check
sass_check: $(SASS_OBJ)
	python3 scripts/check_sass.py $(SASS_OBJ) $(SASS_OBJ:.o=.ptxas)

# ---- emulated GPU tier (test/emu/, doc/testing.md): the real llmc/*.cuh and the GPU tests of test/gpu/, built by
# the host compiler against an emulated CUDA runtime, WMMA, cuBLASLt and CUB. Sources pass through
# test/emu/rewrite.py first (launch syntax, __shared__); no CUDA toolkit is needed (test/emu/include has the headers).
# build/emu/emu_tests is the quick build; build/emu-asan/emu_tests the same under AddressSanitizer and UBSan.
EMU_SRC := $(BUILD)/emu/src
EMU_CUDA_SRCS := $(wildcard llmc/*.cuh llmc/*/*.cuh) dev/cuda/device_utils.cuh test/gpu/gpu_test_util.cuh
EMU_TEST_SRCS := test/gpu/test_kernels.cu test/gpu/test_ptx.cu test/gpu/test_attention.cu test/gpu/test_attention_decode.cu test/gpu/test_gpt2.cu \
                 test/gpu/test_gpt2_decoder.cu test/gpu/test_matmul_autotune.cu test/gpu/test_elementwise.cu \
                 test/gpu/test_memory_plan.cu test/gpu/test_gpu_backends.cu \
                 test/emu/test_emulator.cu test/emu/test_kernel_counters.cu test/emu/test_slice_counters.cu
# The GPU model's host code and its backends (every GPU test of the model links them; test_gpu_backends.cu runs the
# backends in-process under their drivers), over the host libraries
# as the normal build compiles them (the profile session is test/emu/gpu_session.cpp: the emulator has no CUPTI).
EMU_PROGRAM_SRCS := llmc/gpu/gpt2.cu llmc/gpu/gpt2_decoder.cu
EMU_PROGRAM_LIBS := $(CPU_BACKENDS) $(LIBS)
EMU_REWRITTEN := $(addprefix $(EMU_SRC)/,$(EMU_CUDA_SRCS) $(EMU_TEST_SRCS) $(EMU_PROGRAM_SRCS))
EMU_LIB_SRCS := $(wildcard test/emu/*.cpp)
# The project's host code the kernels' headers call (utilities, model shapes, the memory plan), built per variant
# with its flags.
EMU_HOST_OBJS := llmc/util/utils.o llmc/util/cpu_blas.o llmc/cpu/vec.o llmc/model/gpt2_config.o llmc/model/memory_plan.o
# --energy's method against its scripted counter (test/test_energy.cpp) runs here too: the replays it measures are
# the GPU's, and test/emu/mutate.py's mutations of the method are caught by this binary.
EMU_HOST_OBJS += test/test_energy.o
$(EMU_SRC)/%: % test/emu/rewrite.py
	@mkdir -p $(dir $@)
	python3 test/emu/rewrite.py $< $@
# Kept between builds (make would delete them as intermediates, and every emulated object would rebuild).
.SECONDARY: $(EMU_REWRITTEN)
# Emulator include paths come first: the rewritten headers shadow the originals, the shims the toolkit's.
EMU_CPPFLAGS = -I$(EMU_SRC) -Itest/emu/include -DLLMC_EMU
# Device code's rules, not ISO C++'s: type punning through pointer casts, and unsigned built-ins compared with ints.
EMU_CXXFLAGS = $(CXXFLAGS) -fno-strict-aliasing -Wno-unknown-pragmas -Wno-sign-compare
EMU_SAN := -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
# Racecheck (test/emu/racecheck.h) in the plain build: the kernels and tests are compiled with ThreadSanitizer's
# instrumentation, whose callbacks test/emu/racecheck.cpp defines (no ThreadSanitizer runtime is linked), and with
# line tables, which name the source lines of a hazard.
EMU_RACECHECK := -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -g1
define emu_variant # $(1): build directory, $(2): extra flags, $(3): extra flags of the kernels' and tests' objects
$(1)/lib/%.o: test/emu/%.cpp $(wildcard test/emu/*.h test/emu/include/*.h test/emu/include/cub/*.cuh)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_CPPFLAGS) $$(EMU_CXXFLAGS) $(2) -c $$< -o $$@
# Every rewritten header exists before a test compiles (order-only); -MMD tracks which ones it really reads.
$(1)/obj/%.o: $(EMU_SRC)/%.cu | $(EMU_REWRITTEN)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_CPPFLAGS) $$(EMU_CXXFLAGS) $(2) $(3) -x c++ -c $$< -o $$@
$(1)/main.o: test/main.cpp
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(CXXFLAGS) $(2) -c $$< -o $$@
$(1)/host/%.o: %.cpp
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(CXXFLAGS) $(2) -c $$< -o $$@
$(1)/emu_tests: $(patsubst test/emu/%.cpp,$(1)/lib/%.o,$(EMU_LIB_SRCS)) \
                $(patsubst %.cu,$(1)/obj/%.o,$(EMU_TEST_SRCS) $(EMU_PROGRAM_SRCS)) $(1)/main.o \
                $(addprefix $(1)/host/,$(EMU_HOST_OBJS)) $(EMU_PROGRAM_LIBS)
	$$(CXX) $$(CXXFLAGS) $(2) $$^ -o $$@ -lgtest -lboost_context $(LDLIBS_PCRE) $(MPI_LIBS) -fopenmp -lpthread
endef
$(eval $(call emu_variant,$(BUILD)/emu,,$(EMU_RACECHECK)))
$(eval $(call emu_variant,$(BUILD)/emu-asan,$(EMU_SAN),))
.PHONY: emu emu_asan emu_mutation emu_counters emu_counters_expectations
emu: $(BUILD)/emu/emu_tests
emu_asan: $(BUILD)/emu-asan/emu_tests
# The emulated memory counters of a GPT-2 slice's training and decode step (test/emu/test_slice_counters.cu): the
# table, and $(BUILD)/emu/emu_counters.csv; emu_counters_expectations rewrites the gate's expectations from them.
emu_counters: $(BUILD)/emu/emu_tests
	EMU_COUNTERS_DIR=$(BUILD)/emu ./$(BUILD)/emu/emu_tests --gtest_filter='EmuSliceCounters.*'
emu_counters_expectations: $(BUILD)/emu/emu_tests
	EMU_COUNTERS_EXPECTATIONS=write EMU_COUNTERS_DIR=$(BUILD)/emu ./$(BUILD)/emu/emu_tests --gtest_filter='EmuSliceCounters.*'
# Applies single-line mutations to the kernels one at a time and reports which ones the emulated tests catch.
emu_mutation:
	python3 test/emu/mutate.py

# The tests read GPT-2's vocabulary from dev/data/gpt2 and a tinyshakespeare excerpt from test/data; LLMC_DATA=DIR
# (with tinyshakespeare/input.txt and gpt2/) makes them read the whole text and that vocabulary instead.
LLMC_DATA ?=
# Python packages that scripts/deps.sh had to put in a virtual environment (a Debian python3 takes no pip
# installs) are found first by the tests and scripts.
ifneq ($(wildcard .venv/bin/python3),)
export PATH := $(CURDIR)/.venv/bin:$(PATH)
endif
TEST_PROGRAMS := $(addprefix $(BIN),train_gpt2 prepare_data infer_gpt2) $(if $(HAVE_NVCC),train_gpt2cu profile_gpt2cu infer_gpt2cu)
ifdef SAN
# The tests run ./train_gpt2 and read test/ and scripts/ files from their working directory: build/san, with links.
# Every process writes its sanitizer reports to build/san/reports; any report fails the run. The plot tests run
# python, which has nothing to sanitize.
SAN_LINKS := $(addprefix $(BUILD)/,test/data test/emu test/gpu test/hta_check.py test/fake_infer.py test/memviz_check.py scripts dev/data/gpt2 dev/data/tinyshakespeare.sh \
                                    dev/torch_gpt2_baseline.py dev/torch_gpt2_cpu.py)
$(SAN_LINKS):
	@mkdir -p $(dir $@)
	ln -sfn $(abspath $(patsubst $(BUILD)/%,%,$@)) $@
test: $(BUILD)/run_tests $(TEST_PROGRAMS) $(SAN_LINKS)
	@rm -rf $(BUILD)/reports && mkdir -p $(BUILD)/reports
	cd $(BUILD) && LLMC_SKIP_PLOT_TESTS=1 LLMC_DATA=$(abspath $(LLMC_DATA)) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} \
	    ASAN_OPTIONS=log_path=$(abspath $(BUILD))/reports/asan UBSAN_OPTIONS=log_path=$(abspath $(BUILD))/reports/ubsan:print_stacktrace=1 \
	    ./run_tests; status=$$?; if cat reports/* 2>/dev/null; then echo "sanitizer reports: $(BUILD)/reports"; exit 1; fi; exit $$status
else
# The emulated GPU tier runs twice: the plain build under all four schedules with racecheck (races; and the
# counters' gate, test/emu/test_slice_counters.cu), and the AddressSanitizer + UBSan build under one (any
# out-of-bounds access in a kernel fails it). The device branch of llmc/ptx.cuh, which the emulator never compiles,
# is compared with its emulated twin (scripts/check_ptx_wrappers.py) first. It needs no CUDA toolkit (the emulator
# brings its own CUDA, NVTX and library headers); with nvcc, tier 2 also checks the attention kernels' machine code
# (make sass_check). The three test runs go side by side: each emulated run is one thread and tier 1 is often one
# (its Python and browser tests), so together they keep two cores busy where one after the other they did not.
test: test_banner $(BUILD)/run_tests $(TEST_PROGRAMS) $(BUILD)/emu/emu_tests $(BUILD)/emu-asan/emu_tests $(if $(HAVE_NVCC),$(SASS_OBJ))
	@echo "== make test: tier 2 of 3 (its quick part): the device branch of llmc/ptx.cuh against its emulation$(if $(HAVE_NVCC),; the attention kernels' machine code) =="
	python3 scripts/check_ptx_wrappers.py --self-test llmc/ptx.cuh
ifneq ($(HAVE_NVCC),)
	python3 scripts/check_sass.py $(SASS_OBJ) $(SASS_OBJ:.o=.ptxas)
endif
	@echo "== make test: tiers 1, 2 and 3 of 3, side by side: the CPU reference, the programs and the GPU tests (skipped" \
	      "without a GPU), printed as they run; the GPU kernels on the emulated runtime under four schedules with racecheck" \
	      "($(BUILD)/emu/tests.log), and under AddressSanitizer and UBSan ($(BUILD)/emu-asan/tests.log), each log printed" \
	      "when tier 1 and its own run have ended =="
	@export OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive}; \
	EMU_COUNTERS_DIR=$(BUILD)/emu ./$(BUILD)/emu/emu_tests >$(BUILD)/emu/tests.log 2>&1 & plain=$$!; \
	EMU_SCHEDULES=1 ./$(BUILD)/emu-asan/emu_tests >$(BUILD)/emu-asan/tests.log 2>&1 & asan=$$!; \
	LLMC_DATA=$(LLMC_DATA) ./$(BUILD)/run_tests; cpu_rc=$$?; echo "== tier 1: exit $$cpu_rc =="; \
	wait $$plain; plain_rc=$$?; cat $(BUILD)/emu/tests.log; echo "== tier 2: exit $$plain_rc =="; \
	wait $$asan; asan_rc=$$?; cat $(BUILD)/emu-asan/tests.log; echo "== tier 3: exit $$asan_rc =="; \
	[ $$cpu_rc -eq 0 ] && [ $$plain_rc -eq 0 ] && [ $$asan_rc -eq 0 ]
endif
# Printed before anything is built: what `make test` does and how long it takes (measured: doc/testing.md).
.PHONY: test_banner
test_banner:
	@echo "== make test: building the programs and the test binaries ($(if $(HAVE_NVCC),nvcc and )two emulator builds), then running them$(if $(HAVE_NVCC),; from scratch about 10 minutes on 2 cores, 5 once built,) =="


# ---- fuzzing: one libFuzzer target per parser, test/fuzz/fuzz_<name>.cpp, built with clang, ASan and UBSan.
# `make fuzz` runs each for FUZZ_SECONDS from its committed seeds (test/fuzz/corpus/<name>); inputs it finds go
# to build/fuzz/corpus/<name>, a failing input to build/fuzz/crash-<name>-*, the log to build/fuzz/<name>.log.
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -std=c++17 -I. -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -MMD -MP
FUZZ_TARGETS := $(patsubst test/fuzz/%.cpp,%,$(wildcard test/fuzz/fuzz_*.cpp))
# The host library (the parsers' own code), compiled once with the same instrumentation and linked into each target.
FUZZ_HOST_OBJS := $(patsubst $(BUILD)/%,build/fuzz/host/%,$(HOST_OBJS))
.SECONDARY: $(FUZZ_HOST_OBJS)
build/fuzz/host/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -c $< -o $@
build/fuzz/%: test/fuzz/%.cpp $(FUZZ_HOST_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $< $(FUZZ_HOST_OBJS) -o $@ $(LDLIBS_PCRE)
fuzz: $(addprefix build/fuzz/,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p build/fuzz/corpus/$$t; \
	    if LLMC_DATA=$(abspath $(LLMC_DATA)) build/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	        -artifact_prefix=build/fuzz/crash-$$t- build/fuzz/corpus/$$t test/fuzz/corpus/$$t \
	        >build/fuzz/$$t.log 2>&1; then \
	        echo "$$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second' build/fuzz/$$t.log)"; \
	    else \
	        tail -n 40 build/fuzz/$$t.log; echo "$$t: FAILED (build/fuzz/$$t.log)"; exit 1; \
	    fi; \
	done

tinyshakespeare: prepare_data
	bash dev/data/tinyshakespeare.sh

deps:
	bash scripts/deps.sh

clean:
	rm -rf $(BUILD) gpu_bundle train_gpt2 prepare_data infer_gpt2 train_gpt2cu profile_gpt2cu infer_gpt2cu

# Objects made through a chain of pattern rules (the kernel benchmarks') are kept, not deleted as intermediates.
# (A bare .SECONDARY would also stop make from building a new test's object for an up-to-date binary.)
.PRECIOUS: $(BUILD)/%.o $(BUILD)/%.cu.o $(CU_BUILD)/%.cu.o
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
ifneq ($(CU_BUILD),$(BUILD))
-include $(shell find $(CU_BUILD) -path $(BUILD) -prune -o -name '*.cu.d' -print 2>/dev/null)
endif

# ---- the CPU GEMM at the model's shapes: ours, the rows kernel, OpenBLAS and BLIS in one run (dev/cpu/) ----
.PHONY: gemm_bench
gemm_bench: $(BUILD)/gemm_bench
$(BUILD)/gemm_bench: $(BUILD)/dev/cpu/gemm_bench.o $(HOST_LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@
