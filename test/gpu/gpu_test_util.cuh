// Helpers for GPU tests: skip without a device, device buffers, bf16 conversion, fresh random inputs, and
// comparison against the CPU reference with a stated tolerance.
#pragma once
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "llmc/cuda_common.cuh"

#define REQUIRE_GPU()                                                                                                 \
    do {                                                                                                              \
        if (::llmc::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";                                      \
    } while (0)

namespace gputest {

// A device array that frees itself.
template <typename T> struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(T) + 16)); }
    DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    void upload(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(ptr, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
    std::vector<T> download() const {
        std::vector<T> h(n);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
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

// Fresh normal(0, scale) values, a new seed per call so every run checks different inputs.
inline std::vector<float> random_normal(size_t n, float scale = 1.0f) {
    static std::mt19937_64 seeder(std::random_device{}());
    std::mt19937_64 g(seeder());
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}
inline std::vector<int> random_tokens(size_t n, int vocab) {
    static std::mt19937 g(std::random_device{}());
    std::vector<int> v(n);
    for (auto& x : v) x = (int)(g() % vocab);
    return v;
}

/*
 * ||out - ref|| / ||ref|| <= rel_tol, and no NaN/inf. bf16 storage carries 8 significant bits (relative
 * rounding 2^-9), so bf16 outputs of fp32 math land around 3e-3; tests state their tolerance.
 */
inline testing::AssertionResult close_rel(const std::vector<float>& out, const std::vector<float>& ref, double rel_tol,
                                          const std::string& what) {
    if (out.size() != ref.size()) return testing::AssertionFailure() << what << ": size " << out.size() << " vs " << ref.size();
    double num = 0, den = 0, max_abs = 0;
    size_t worst = 0;
    for (size_t i = 0; i < out.size(); i++) {
        if (!std::isfinite(out[i])) return testing::AssertionFailure() << what << ": non-finite value at " << i;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (std::fabs(d) > max_abs) max_abs = std::fabs(d), worst = i;
    }
    double rel = std::sqrt(num / (den > 0 ? den : 1e-30));
    if (rel > rel_tol)
        return testing::AssertionFailure() << what << ": relative error " << rel << " > " << rel_tol << " (worst at "
                                           << worst << ": " << out[worst] << " vs " << ref[worst] << ")";
    return testing::AssertionSuccess() << what << ": relative error " << rel;
}

} // namespace gputest
