/*
 * Shared by the kernel benchmarks in dev/cuda/: the -b/-t flags, CUDA-event timing (median of repeats after
 * warmup) and its report line, the device's ceilings for "% of peak", a validation helper against a CPU
 * reference, and on-device random fills for the timing inputs. Device buffers, bf16 conversion and seeded
 * host inputs come from device_utils.cuh (shared with the GPU tests).
 *
 * Ceilings are the profiler's (llmc::prof::Ceilings) from the datasheet table; see device_ceilings().
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dev/cuda/device_utils.cuh"
#include "llmc/profiler/calibrate.cuh"
#include "llmc/cuda_common.cuh"

namespace bench {

using llmc::prof::Ceilings;

// The datasheet ceilings (llmc/profiler/calibrate.cuh's spec table); a device without an entry gets DRAM bandwidth from
// its memory clock and bus width, and no compute ceiling.
inline Ceilings device_ceilings(const cudaDeviceProp& p) {
    Ceilings c = llmc::prof::spec_ceilings(p.name);
    if (c.dram_gbps > 0) return c;
    int mem_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
    c.dram_gbps = 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e9;
    c.source = "memory clock x bus width (no spec entry; no compute ceiling)";
    return c;
}

// Overwrites twice the L2 so a timed run starts with a cold cache, as the op meets its inputs in a training
// step (a layer's activations are tens of MB, the L2 50-60 MB on H100/H200: a warm rerun would read from L2).
inline void flush_l2() {
    static void* buf = nullptr;
    static size_t bytes = 0;
    if (!buf) {
        int l2 = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
        bytes = 2 * (size_t)std::max(l2, 1 << 20);
        CUDA_CHECK(cudaMalloc(&buf, bytes));
    }
    CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes));
}

// Median milliseconds of `repeats` runs of fn after `warmup` runs, timed with CUDA events, each from a cold L2.
inline double time_ms(const std::function<void()>& fn, int warmup = 5, int repeats = 20) {
    for (int i = 0; i < warmup; i++) fn();
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> ms(repeats);
    for (int i = 0; i < repeats; i++) {
        flush_l2(); // outside the events
        CUDA_CHECK(cudaEventRecord(a));
        fn();
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[repeats / 2];
}

// One result line: time, achieved rate(s) and % of the device ceiling. flops or bytes may be 0.
inline void report(const std::string& name, double ms, double flops, double bytes, const Ceilings& c) {
    printf("%-36s %9.4f ms", name.c_str(), ms);
    if (bytes > 0) {
        double gbps = bytes / (ms * 1e-3) / 1e9;
        printf(" | %8.1f GB/s (%5.1f%% of %.0f)", gbps, 100 * gbps / c.dram_gbps, c.dram_gbps);
    }
    if (flops > 0) {
        double tf = flops / (ms * 1e-3) / 1e12;
        if (c.bf16_tflops > 0) printf(" | %7.1f TFLOP/s (%5.1f%% of %.0f)", tf, 100 * tf / c.bf16_tflops, c.bf16_tflops);
        else printf(" | %7.1f TFLOP/s", tf);
    }
    printf("\n");
}

// time_ms(fn), reported; returns the milliseconds.
inline double measure(const std::string& name, double flops, double bytes, const Ceilings& c,
                      const std::function<void()>& fn) {
    const double ms = time_ms(fn);
    report(name, ms, flops, bytes, c);
    return ms;
}

// Relative L2 error of a GPU result against a CPU reference; prints it and returns whether it is within tol.
inline bool validate(const std::string& name, const std::vector<float>& out, const std::vector<float>& ref,
                     double tol) {
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < out.size(); i++) {
        if (!std::isfinite(out[i])) finite = false;
        num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    double rel = std::sqrt(num / (den > 0 ? den : 1e-30));
    bool ok = finite && rel <= tol;
    printf("  check %-28s rel err %.2e (tol %.0e) %s\n", name.c_str(), rel, tol, ok ? "OK" : "FAILED");
    return ok;
}

// The exit status of a benchmark whose kernels disagree with the CPU reference.
inline int validation_failed() {
    fprintf(stderr, "validation FAILED\n");
    return 1;
}

// Deterministic pseudo-random values uniform in [offset - scale, offset + scale] over a whole buffer, made on
// the device: timing inputs of hundreds of MB need no host round trip.
__device__ inline void store_value(float* p, float v) { *p = v; }
__device__ inline void store_value(llmc::floatX* p, float v) { *p = __float2bfloat16(v); }
template <typename T> __global__ void fill_kernel(T* x, size_t n, float offset, float scale, unsigned seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    store_value(x + i, offset + scale * (2.0f * (h >> 8) / 16777216.0f - 1.0f));
}
template <typename T> void fill(devutil::DeviceBuffer<T>& x, float offset, float scale, unsigned seed) {
    fill_kernel<<<(unsigned)llmc::ceil_div(x.n, (size_t)256), 256>>>(x.ptr, x.n, offset, scale, seed);
    CUDA_LAUNCH_CHECK();
}

// The shape flags every benchmark takes.
struct Shape {
    int B = 16, T = 1024;
};
// -b batch and -t seq_len, both positive; anything else prints the usage (with `note` appended) and exits 2.
inline Shape parse_shape(int argc, char** argv, const char* note = "") {
    Shape s;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc) s.B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) s.T = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-b batch (16)] [-t seq_len (1024)]%s\n", argv[0], note);
            exit(2);
        }
    }
    if (s.B <= 0 || s.T <= 0) {
        fprintf(stderr, "%s: -b and -t must be positive\n", argv[0]);
        exit(2);
    }
    return s;
}

// Exits 1 when no GPU is present, with the message every benchmark prints.
inline Ceilings require_device(const char* program) {
    if (llmc::cuda_device_count() == 0) {
        fprintf(stderr, "%s: no CUDA device found (these benchmarks need a GPU)\n", program);
        exit(1);
    }
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    Ceilings c = device_ceilings(p);
    printf("device: %s | ceilings: %.0f bf16 TFLOP/s, %.0f GB/s (%s)\n", p.name, c.bf16_tflops, c.dram_gbps,
           c.source.c_str());
    return c;
}

// main() of every benchmark: run(argc, argv), with an llmc::Error reported and turned into exit status 1.
inline int run_main(int (*run)(int, char**), int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const llmc::Error& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

} // namespace bench
