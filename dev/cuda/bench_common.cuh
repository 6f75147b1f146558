/*
 * Shared by the kernel benchmarks in dev/cuda/: CUDA-event timing (median of repeats after warmup), the
 * device's ceilings for "% of peak", and a validation helper against a CPU reference.
 *
 * Ceilings come from the spec table in llmc/device_specs.h; unknown devices fall back to DRAM bandwidth from the memory clock and bus width, and no compute ceiling.
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/device_specs.h"

namespace bench {

struct Ceilings {
    std::string device;
    double bf16_tflops = 0; // dense tensor-core bf16, fp32 accumulate
    double dram_gbps = 0;
    const char* source = "spec table";
};

inline Ceilings device_ceilings() {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    Ceilings c;
    c.device = p.name;
    if (const llmc::DeviceSpec* spec = llmc::lookup_device_spec(p.name)) {
        c.bf16_tflops = spec->bf16_tflops;
        c.dram_gbps = spec->dram_gbps;
        return c;
    }
    int mem_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
    c.dram_gbps = 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e9;
    c.source = "memory clock x bus width (no spec entry; no compute ceiling)";
    return c;
}

// Median milliseconds of `repeats` runs of fn after `warmup` runs, timed with CUDA events.
inline double time_ms(const std::function<void()>& fn, int warmup = 5, int repeats = 20) {
    for (int i = 0; i < warmup; i++) fn();
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> ms(repeats);
    for (int i = 0; i < repeats; i++) {
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
inline void report(const char* name, double ms, double flops, double bytes, const Ceilings& c) {
    printf("%-36s %9.4f ms", name, ms);
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

// Relative L2 error of a GPU result against a CPU reference; prints it and returns whether it is within tol.
inline bool validate(const char* name, const std::vector<float>& out, const std::vector<float>& ref, double tol) {
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < out.size(); i++) {
        if (!std::isfinite(out[i])) finite = false;
        num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    double rel = std::sqrt(num / (den > 0 ? den : 1e-30));
    bool ok = finite && rel <= tol;
    printf("  check %-28s rel err %.2e (tol %.0e) %s\n", name, rel, tol, ok ? "OK" : "FAILED");
    return ok;
}

inline std::vector<float> random_normal(size_t n, float scale, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

// Exits 1 when no GPU is present, with the message every benchmark prints.
inline Ceilings require_device(const char* program) {
    if (llmc::cuda_device_count() == 0) {
        fprintf(stderr, "%s: no CUDA device found (these benchmarks need a GPU)\n", program);
        exit(1);
    }
    Ceilings c = device_ceilings();
    printf("device: %s | ceilings: %.0f bf16 TFLOP/s, %.0f GB/s (%s)\n", c.device.c_str(), c.bf16_tflops, c.dram_gbps,
           c.source);
    return c;
}

} // namespace bench
