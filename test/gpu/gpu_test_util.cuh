// Helpers for GPU tests: skip without a device, device buffers, bf16 conversion, fresh random inputs, and
// comparison against the CPU reference with a stated tolerance.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "dev/cuda/device_utils.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/model/gpt2_config.h"

/*
 * GPU_TEST(suite, name): a test of GPU code. Built by nvcc it is a plain TEST that skips without a device;
 * built against the emulator (test/emu/, LLMC_EMU defined) it is suite Emu<suite>, run under several
 * schedules (test/emu/emu_test.h).
 */
#ifdef LLMC_EMU
#include "test/emu/emu_test.h"
#define GPU_TEST(suite, name) EMU_TEST(suite, name)
#else
#define GPU_TEST(suite, name) TEST(suite, name)
#endif
namespace gputest {
// Under the emulator a thread costs microseconds, not nanoseconds: tests keep their small shapes and leave
// the largest ones to the device.
#ifdef LLMC_EMU
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif
} // namespace gputest

#define REQUIRE_GPU()                                                                                                 \
    do {                                                                                                              \
        if (::llmc::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";                                      \
    } while (0)

// Tests that run ./train_gpt2cu or ./profile_gpt2cu: this process holds a context, so the child can only get
// the GPU in the default compute mode (not in exclusive-process mode).
#define REQUIRE_GPU_FOR_CHILD_PROCESS()                                                                               \
    do {                                                                                                              \
        REQUIRE_GPU();                                                                                                \
        int mode = 0;                                                                                                 \
        if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0) == cudaSuccess && mode != cudaComputeModeDefault) \
            GTEST_SKIP() << "the GPU is not in the default compute mode: a second process cannot use it";             \
    } while (0)

namespace gputest {

// Device buffers and bf16 conversion: one definition, shared with the kernel benchmarks.
using devutil::bf16_round;
using devutil::DeviceBuffer;
using devutil::download;
using devutil::to_bf16;
using devutil::to_float;

// Every call draws a new seed, so every run checks different inputs; reseed() replays a sequence (the
// emulator runs each test under several schedules with the same inputs).
inline std::mt19937_64& seeder() {
    static std::mt19937_64 s(std::random_device{}());
    return s;
}
inline uint64_t fresh_seed() { return seeder()(); }
inline void reseed(uint64_t seed) { seeder().seed(seed); }
inline std::vector<float> random_normal(size_t n, float scale = 1.0f) {
    return devutil::random_normal(n, scale, fresh_seed());
}
inline std::vector<int> random_tokens(size_t n, int vocab) { return devutil::random_tokens(n, vocab, fresh_seed()); }

// The CPU references run in double: inputs widened, results narrowed for the comparison.
// Bitwise equality of two downloads (determinism checks).
template <typename T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
inline std::vector<double> wide(const std::vector<float>& x) { return {x.begin(), x.end()}; }
inline std::vector<float> narrow(const std::vector<double>& x) { return {x.begin(), x.end()}; }

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

// An environment variable for one scope (null: unset), restored after it.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        const char* old = getenv(name);
        had_ = old != nullptr;
        if (had_) old_ = old;
        if (value) setenv(name, value, 1);
        else unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_) setenv(name_.c_str(), old_.c_str(), 1);
        else unsetenv(name_.c_str());
    }

private:
    std::string name_, old_;
    bool had_ = false;
};

// The smallest model the GPU kernels take: head size 64 (the attention kernel's), a 500-token vocabulary padded
// to 512 so the padding path runs, two layers so the residual stream crosses a layer boundary.
inline llmc::GPT2Config tiny_gpt2_config() {
    llmc::GPT2Config c;
    c.max_seq_len = 64;
    c.vocab_size = 500;
    c.padded_vocab_size = 512;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 128;
    return c;
}

} // namespace gputest
