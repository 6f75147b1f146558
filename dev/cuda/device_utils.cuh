/*
 * Host-side helpers shared by the kernel benchmarks (dev/cuda/) and the GPU tests (test/gpu/, through
 * gpu_test_util.cuh): a device array that frees itself, bf16 conversion of host vectors, and seeded random
 * inputs.
 */
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "llmc/cuda_common.cuh"

namespace devutil {

// n elements of d copied to the host, once the work queued on the device has finished.
template <typename T> std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// A device array that frees itself.
template <typename T> struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(T) + 16)); }
    DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    void upload(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(ptr, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
    std::vector<T> download() const { return devutil::download(ptr, n); }
    // Fills with a NaN pattern so that an element the kernel never writes fails the comparison.
    void poison() { CUDA_CHECK(cudaMemset(ptr, 0xFF, n * sizeof(T))); }
    operator T*() const { return ptr; }
};

inline std::vector<llmc::floatX> to_bf16(const std::vector<float>& x) {
    std::vector<llmc::floatX> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = __float2bfloat16(x[i]);
    return r;
}
inline std::vector<float> to_float(const std::vector<llmc::floatX>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = __bfloat162float(x[i]);
    return r;
}
// Values rounded to bf16 and back: the CPU reference sees exactly what the GPU kernel reads.
inline std::vector<float> bf16_round(const std::vector<float>& x) { return to_float(to_bf16(x)); }

// normal(0, scale) values; the same seed gives the same values.
inline std::vector<float> random_normal(size_t n, float scale, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}
// Token ids uniform in [0, vocab); the same seed gives the same ids.
inline std::vector<int> random_tokens(size_t n, int vocab, uint64_t seed) {
    std::mt19937 g(seed);
    std::vector<int> v(n);
    for (auto& x : v) x = (int)(g() % vocab);
    return v;
}

} // namespace devutil
