/*
 * Roofline ceilings measured on this GPU, the lines the profiler's roofline is drawn against:
 *   - bf16 tensor-core throughput: an 8192^3 GEMM through the trainer's own cuBLASLt path (bf16 in and out,
 *     fp32 accumulate), random operands (zeros draw less power and clock higher), median of 10 timed runs;
 *   - DRAM bandwidth: a device-to-device copy of up to 1 GiB, counting bytes read + written, median of 10.
 * A measurement takes a second or so and ~2.4 GiB of device memory, so it is cached per device
 * (name + UUID) in $XDG_CACHE_HOME/llmc or ~/.cache/llmc (llmc/profiler/ceiling_cache.h). Any failure falls
 * back to the datasheet numbers of llmc/profiler/device_specs.h ("spec table"), and to "none" for an unknown
 * GPU.
 */
#pragma once
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/profiler/ceiling_cache.h"
#include "llmc/profiler/device_specs.h"
#include "llmc/matmul.cuh"
#include "llmc/profiler/records.h"
#include "llmc/util/utils.h"

namespace llmc::prof {

namespace detail {

// Uniform values in [-1, 1) from a hash of the index: random enough for the tensor cores, no RNG state.
static __global__ void fill_uniform_bf16_kernel(floatX* x, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B1u ^ seed;
        h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
        x[i] = __float2bfloat16((h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

// A device allocation that frees itself (calibration must not leak when a step fails).
struct DeviceBytes {
    void* p = nullptr;
    explicit DeviceBytes(size_t n) { CUDA_CHECK(cudaMalloc(&p, n)); }
    ~DeviceBytes() { cudaFree(p); }
    DeviceBytes(const DeviceBytes&) = delete;
    DeviceBytes& operator=(const DeviceBytes&) = delete;
};

// Median milliseconds of `reps` runs of fn (each timed alone with events) after `warmup` untimed ones.
template <typename Fn> double median_ms(Fn&& fn, int warmup, int reps, cudaStream_t stream) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> ms(reps);
    try {
        for (int i = 0; i < warmup; i++) fn();
        for (int i = 0; i < reps; i++) {
            CUDA_CHECK(cudaEventRecord(a, stream));
            fn();
            CUDA_CHECK(cudaEventRecord(b, stream));
            CUDA_CHECK(cudaEventSynchronize(b));
            CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
        }
    } catch (...) {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        throw;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

inline std::string uuid_string(const cudaUUID_t& u) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(u.bytes);
    std::string s = "GPU-";
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
        s += strprintf("%02x", b[i]);
    }
    return s;
}

// The cache file (llmc/profiler/ceiling_cache.h): the entry counts only for the same device name and UUID.
inline bool read_cache(const std::string& path, const std::string& name, const std::string& uuid, Ceilings* out) {
    std::map<std::string, std::string> e = ceiling_cache::read(path);
    if (!ceiling_cache::matches(e, {{"device", name}, {"uuid", uuid}})) return false;
    const double tflops = ceiling_cache::measured(e, "bf16_tflops"), gbps = ceiling_cache::measured(e, "dram_gbps");
    if (!tflops || !gbps) return false;
    out->bf16_tflops = tflops;
    out->dram_gbps = gbps;
    out->source = "calibrated (cached " + path + ")";
    return true;
}

inline void write_cache(const std::string& path, const std::string& name, const std::string& uuid, const Ceilings& c) {
    ceiling_cache::write(path, "llmc roofline ceilings (llmc/profiler/calibrate.cuh)",
                         {{"device", name},
                          {"uuid", uuid},
                          {"bf16_tflops", strprintf("%.1f", c.bf16_tflops)},
                          {"dram_gbps", strprintf("%.1f", c.dram_gbps)}});
}

// The two measurements; throws llmc::Error on any CUDA or cuBLASLt failure (out of memory included).
inline Ceilings run_calibration() {
    const int N = 8192;
    const size_t gemm_bytes = 3 * (size_t)N * N * sizeof(floatX);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // The copy: 1 GiB each way when there is room, never less than 64 MiB (smaller copies are latency-bound).
    size_t spare = free_b > gemm_bytes ? (free_b - gemm_bytes) / 4 : 0;
    size_t copy_bytes = std::min<size_t>(1u << 30, spare) & ~size_t(0xFFFFF);
    if (copy_bytes < (64u << 20))
        throw Error(strprintf("%.0f MiB of free GPU memory is too little", free_b / 1048576.0));

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Ceilings c;
    try {
        {
            const size_t matrix = (size_t)N * N * sizeof(floatX);
            DeviceBytes a(matrix), b(matrix), d(matrix);
            fill_uniform_bf16_kernel<<<1024, 256, 0, stream>>>((floatX*)a.p, (size_t)N * N, 1u);
            CUDA_LAUNCH_CHECK();
            fill_uniform_bf16_kernel<<<1024, 256, 0, stream>>>((floatX*)b.p, (size_t)N * N, 2u);
            CUDA_LAUNCH_CHECK();
            double ms = median_ms(
                [&] {
                    matmul_cublaslt((floatX*)d.p, (floatX*)a.p, (floatX*)b.p, nullptr, N, N, N, true, false, false,
                                    CUBLASLT_EPILOGUE_DEFAULT, nullptr, stream);
                },
                3, 10, stream);
            c.bf16_tflops = 2.0 * N * N * (double)N / (ms * 1e-3) / 1e12;
        }
        {
            DeviceBytes src(copy_bytes), dst(copy_bytes);
            CUDA_CHECK(cudaMemsetAsync(src.p, 1, copy_bytes, stream));
            double ms = median_ms(
                [&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, copy_bytes, cudaMemcpyDeviceToDevice, stream)); }, 3,
                10, stream);
            c.dram_gbps = 2.0 * copy_bytes / (ms * 1e-3) / 1e9;
        }
    } catch (...) {
        cudaStreamDestroy(stream);
        throw;
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    c.source = "calibrated";
    return c;
}

} // namespace detail

// Datasheet ceilings for a GPU name ("spec table"), or zeros with source "none".
inline Ceilings spec_ceilings(const char* device_name) {
    Ceilings c;
    if (const DeviceSpec* s = lookup_device_spec(device_name)) {
        c.bf16_tflops = s->bf16_tflops;
        c.dram_gbps = s->dram_gbps;
        c.source = "spec table";
    } else {
        c.source = "none";
    }
    return c;
}

/*
 * Ceilings of the current device. use_cache: take the cached measurement when there is one for this
 * device; otherwise (and always without use_cache) measure and rewrite the cache. Never throws: a failed
 * measurement prints one line and falls back to spec_ceilings().
 */
inline Ceilings measure_ceilings(bool use_cache) {
    int dev = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        return spec_ceilings("");
    }
    std::string uuid = detail::uuid_string(p.uuid), dir = ceiling_cache::dir();
    std::string path = dir.empty() ? "" : dir + "/ceilings-" + uuid + ".txt";
    Ceilings c;
    if (use_cache && !path.empty() && detail::read_cache(path, p.name, uuid, &c)) return c;
    try {
        c = detail::run_calibration();
    } catch (const Error& e) {
        cudaGetLastError(); // a failed allocation must not surface at the trainer's next check
        printf("profiler: calibration failed (%s); using the spec table\n", e.what());
        return spec_ceilings(p.name);
    }
    if (!path.empty()) {
        try {
            detail::write_cache(path, p.name, uuid, c);
        } catch (const Error& e) {
            printf("profiler: could not cache the ceilings (%s)\n", e.what());
        }
    }
    return c;
}

} // namespace llmc::prof
