# GPT-2 trainer that profiles itself.
#   make train_gpt2      CPU fp32 reference trainer (OpenMP)
#   make prepare_data    GPT-2 tokenizer + shard writer
#   make train_gpt2cu    GPU trainer (needs nvcc; runs on sm_80 and newer)
#   make profile_gpt2cu  runs a few GPU training steps traced with CUPTI and writes a profile directory
#   make sample_profile  regenerates test/data/sample_profile (synthetic GPU profile for the plot tests)
#   make dev_cuda        kernel benchmarks in dev/cuda/ (build/dev/cuda/<name>)
#   make test            GoogleTest suite (GPU tests skip without a device)
#   make SAN=1 test      the CPU programs and CPU tests built with AddressSanitizer + UBSan (in build/san)
#   make fuzz            each libFuzzer target in test/fuzz/ for FUZZ_SECONDS (needs clang; doc/testing.md)
#   make tinyshakespeare prepares data/tinyshakespeare (TINYSHAKESPEARE=/path/input.txt to skip the download)

CXX ?= g++
# -march=native: the CPU reference spends its time in matmul loops that want the widest vectors available.
# Override with `make CPU_ARCH=x86-64-v2` for a binary that runs on other machines.
CPU_ARCH ?= native
# CXXFLAGS on the command line or in the environment replaces -O3 (-O1 for SAN=1); the flags after it are
# always added.
CXXFLAGS ?= $(if $(SAN),-O1,-O3)
override CXXFLAGS += -std=c++17 -march=$(CPU_ARCH) -fopenmp -Wall -Wextra -I.
LDLIBS_PCRE := -lpcre2-8
BUILD := build

# ---- CUDA: architecture from the GPU present (nvidia-smi), GPU_ARCH=90 to override, sm_90 without a GPU ----
NVCC ?= nvcc
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
GPU_ARCH ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.')
ifeq ($(GPU_ARCH),)
GPU_ARCH := 90
endif
NVCCFLAGS ?= -O3
override NVCCFLAGS += -std=c++17 -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -lineinfo -I. \
             -Xcompiler -fopenmp,-Wall --expt-relaxed-constexpr
CUDA_LIBS := -lcublasLt -lcublas
# The in-process profiler (llmc/cupti_collector.cuh): train_gpt2cu --profile, profile_gpt2cu, the GPU tests.
CUPTI_LIBS := -lcupti

# ---- SAN=1: ASan + UBSan, CPU only, everything under build/san (programs included, so that a sanitized build
# never replaces the plain one); any report fails the run ----
ifdef SAN
BUILD := build/san
BIN := $(BUILD)/
HAVE_NVCC :=
# GCC's -Wmaybe-uninitialized misfires inside std::regex and std::function under the sanitizers.
override CXXFLAGS += -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
                     -Wno-maybe-uninitialized
endif

HEADERS := $(wildcard llmc/*.h llmc/cpu/*.h)
CUDA_HEADERS := $(wildcard llmc/*.cuh)

.PHONY: all test clean tinyshakespeare dev_cuda sample_profile fuzz
all: $(BIN)train_gpt2 $(BIN)prepare_data
ifneq ($(HAVE_NVCC),)
all: train_gpt2cu profile_gpt2cu dev_cuda
endif

$(BIN)train_gpt2: train_gpt2.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS_PCRE)

$(BIN)prepare_data: dev/data/prepare_data.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS_PCRE)

train_gpt2cu: train_gpt2.cu $(HEADERS) $(CUDA_HEADERS)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(CUDA_LIBS) $(CUPTI_LIBS) $(LDLIBS_PCRE) -lgomp

profile_gpt2cu: profile_gpt2.cu $(HEADERS) $(CUDA_HEADERS)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(CUDA_LIBS) $(CUPTI_LIBS) $(LDLIBS_PCRE) -lgomp

# The committed sample profile: synthetic records through the project's own writers (dev/sample_profile.cpp).
$(BUILD)/sample_profile: dev/sample_profile.cpp $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@
sample_profile: $(BUILD)/sample_profile
	rm -rf test/data/sample_profile
	./$(BUILD)/sample_profile test/data/sample_profile

# ---- kernel benchmarks: one program per dev/cuda/*.cu ----
DEV_CUDA_SRCS := $(wildcard dev/cuda/*.cu)
DEV_CUDA_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/dev/cuda/%,$(DEV_CUDA_SRCS))
dev_cuda: $(DEV_CUDA_BINS)
$(BUILD)/dev/cuda/%: dev/cuda/%.cu $(HEADERS) $(CUDA_HEADERS) $(wildcard dev/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(CUDA_LIBS) -lgomp

# ---- tests: one binary; CPU tests from test/test_*.cpp, GPU tests from test/gpu/test_*.cu when nvcc exists ----
TEST_SRCS := $(wildcard test/test_*.cpp) test/main.cpp
TEST_OBJS := $(patsubst test/%.cpp,$(BUILD)/test/%.o,$(TEST_SRCS))
$(BUILD)/test/%.o: test/%.cpp $(HEADERS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
ifneq ($(HAVE_NVCC),)
# test_counters.cpp runs CUPTI's host API (no GPU needed): CUDA headers here, -lcupti at the link below.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(HAVE_NVCC)))
$(BUILD)/test/test_counters.o: override CXXFLAGS += -I$(CUDA_HOME)/include -DLLMC_HAVE_CUPTI
$(BUILD)/test/test_counters.o: $(CUDA_HEADERS)
GPU_TEST_OBJS := $(patsubst test/gpu/%.cu,$(BUILD)/test/gpu/%.o,$(wildcard test/gpu/test_*.cu))
$(BUILD)/test/gpu/%.o: test/gpu/%.cu $(HEADERS) $(CUDA_HEADERS) $(wildcard test/gpu/*.cuh test/*.h dev/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/run_tests: $(TEST_OBJS) $(GPU_TEST_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ -lgtest $(LDLIBS_PCRE) $(CUDA_LIBS) $(CUPTI_LIBS) -lgomp -lpthread
else
$(BUILD)/run_tests: $(TEST_OBJS)
	@echo "note: nvcc not found; building the CPU tests only"
	$(CXX) $(CXXFLAGS) $^ -o $@ -lgtest $(LDLIBS_PCRE) -lpthread
endif

# Tests find the tinyshakespeare text and GPT-2 vocabulary files through LLMC_DATA (default ../shared/data).
LLMC_DATA ?= ../shared/data
TEST_PROGRAMS := $(addprefix $(BIN),train_gpt2 prepare_data) $(if $(HAVE_NVCC),train_gpt2cu profile_gpt2cu)
ifdef SAN
# The tests run ./train_gpt2 and read test/data and scripts/ from their working directory: build/san, with links.
# Every process writes its sanitizer reports to build/san/reports; any report fails the run. The plot tests run
# python, which has nothing to sanitize.
$(BUILD)/test/data $(BUILD)/scripts:
	@mkdir -p $(dir $@)
	ln -sfn $(abspath $(patsubst $(BUILD)/%,%,$@)) $@
test: $(BUILD)/run_tests $(TEST_PROGRAMS) $(BUILD)/test/data $(BUILD)/scripts
	@rm -rf $(BUILD)/reports && mkdir -p $(BUILD)/reports
	cd $(BUILD) && LLMC_SKIP_PLOT_TESTS=1 LLMC_DATA=$(abspath $(LLMC_DATA)) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} \
	    ASAN_OPTIONS=log_path=$(abspath $(BUILD))/reports/asan UBSAN_OPTIONS=log_path=$(abspath $(BUILD))/reports/ubsan:print_stacktrace=1 \
	    ./run_tests; status=$$?; if cat reports/* 2>/dev/null; then echo "sanitizer reports: $(BUILD)/reports"; exit 1; fi; exit $$status
else
test: $(BUILD)/run_tests $(TEST_PROGRAMS)
	LLMC_DATA=$(LLMC_DATA) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$(BUILD)/run_tests
endif

# ---- fuzzing: one libFuzzer target per parser, test/fuzz/fuzz_<name>.cpp, built with clang, ASan and UBSan.
# `make fuzz` runs each for FUZZ_SECONDS from its committed seeds (test/fuzz/corpus/<name>); inputs it finds go
# to build/fuzz/corpus/<name>, a failing input to build/fuzz/crash-<name>-*, the log to build/fuzz/<name>.log.
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -std=c++17 -I. -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_TARGETS := $(patsubst test/fuzz/%.cpp,%,$(wildcard test/fuzz/fuzz_*.cpp))
build/fuzz/%: test/fuzz/%.cpp test/fuzz/fuzz_util.h $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $< -o $@ $(LDLIBS_PCRE)
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

clean:
	rm -rf $(BUILD) train_gpt2 prepare_data train_gpt2cu profile_gpt2cu
