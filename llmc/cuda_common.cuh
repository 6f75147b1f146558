/*
 * Shared CUDA definitions: the storage type of parameters, activations and gradients (bf16), checked calls
 * that throw llmc::Error, 16-byte packed vectors for coalesced loads, and device queries.
 */
#pragma once
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "llmc/nvtx.h"
#include "llmc/util/utils.h"

namespace llmc {

// bf16 storage everywhere; arithmetic in fp32 (master weights, moments, LN statistics, losses stay fp32).
using floatX = __nv_bfloat16;

inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e != cudaSuccess)
        throw Error(strprintf("CUDA error in %s (%s:%d): %s", what, file, line, cudaGetErrorString(e)));
}
#define CUDA_CHECK(call) ::llmc::cuda_check((call), #call, __FILE__, __LINE__)

/*
 * LLMC_SYNC=1 in the environment: the device is synchronised after every launch, so that a fault inside a
 * kernel is reported at its launch site and sub-block instead of at the step's next synchronisation (slow:
 * for finding a fault, not for timing). Read once; tests set it here.
 */
inline bool& sync_after_launch() {
    static bool on = [] {
        const char* v = getenv("LLMC_SYNC");
        return v && strcmp(v, "1") == 0;
    }();
    return on;
}
/*
 * After a launch (what: "kernel", or the library call that launched): a bad launch configuration at once,
 * and with LLMC_SYNC=1 a fault of the launched work too, named with the launch site and the innermost open
 * Range (llmc/nvtx.h). Without LLMC_SYNC execution errors surface at the next synchronisation.
 */
inline void launch_check(const char* what, const char* file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync_after_launch()) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        throw Error(strprintf("CUDA error in the %s launched at %s:%d%s: %s", what, file, line, Range::where().c_str(),
                              cudaGetErrorString(e)));
}
#define CUDA_LAUNCH_CHECK() ::llmc::launch_check("kernel", __FILE__, __LINE__)

// Number of usable GPUs; 0 when there is no device or no driver (never throws).
inline int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

// The device memory --memory-plan checks a plan against: `given` (--device-memory) when not 0, else the present
// GPU's free memory, else 0 (unknown: no GPU here). *source says which.
inline size_t device_memory_to_plan(size_t given, std::string* source) {
    if (given) return *source = "--device-memory", given;
    if (cuda_device_count() == 0) return 0;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    *source = "free on this GPU";
    return free_b;
}

/*
 * The GPU programs' first check, before anything prints or touches the device: a usable GPU (one at all, sm_80 or
 * newer for bf16 tensor cores), else one line naming the program and, where there is one, what runs on the CPU.
 */
inline void require_gpu(const char* program, const char* cpu_alternative = nullptr) {
    if (cuda_device_count() == 0)
        throw Error(strprintf("no CUDA device found: %s needs an NVIDIA GPU (sm_80 or newer)%s%s", program,
                              cpu_alternative ? "; " : "", cpu_alternative ? cpu_alternative : ""));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    if (p.major < 8)
        throw Error(strprintf("%s is sm_%d%d: %s needs sm_80 or newer (bf16 tensor cores)", p.name, p.major, p.minor,
                              program));
}

inline __host__ __device__ int ceil_div(int a, int b) { return (a + b - 1) / b; }
inline __host__ __device__ size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
// Device buffers are carved at 256-byte boundaries (what cuBLASLt's algorithms assume by default).
inline size_t round_up_256(size_t bytes) { return ceil_div(bytes, (size_t)256) * 256; }

/*
 * Packed128<T>: 16 bytes of T (8 bf16 or 4 float) moved with one 128-bit load or store. Every tensor in the
 * activation buffer is 16-byte aligned and every C is a multiple of 8, so per-thread 16-byte accesses
 * coalesce across a warp.
 */
template <typename T> struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __device__ T& operator[](int i) { return v[i]; }
    __device__ const T& operator[](int i) const { return v[i]; }
    __device__ static Packed128 zeros() {
        Packed128 p;
        for (int i = 0; i < size; i++) p.v[i] = T(0.0f);
        return p;
    }
};
using x128 = Packed128<floatX>;
using f128 = Packed128<float>;

// Under the emulator (LLMC_EMU) each of these is one 16-byte access, as LDG.E.128 / STG.E.128 are on the device,
// whatever instructions the host compiler picks for the copy (test/emu/emu.h, emu::load_bytes).
template <typename T> __device__ Packed128<T> load128(const T* p) {
#ifdef LLMC_EMU
    return ::emu::load_as_one(reinterpret_cast<const Packed128<T>*>(p));
#else
    return *reinterpret_cast<const Packed128<T>*>(p);
#endif
}
// Streaming load: data read once, keep it out of L1/L2 as far as possible.
template <typename T> __device__ Packed128<T> load128cs(const T* p) {
    Packed128<T> r;
    *reinterpret_cast<int4*>(&r) = __ldcs(reinterpret_cast<const int4*>(p));
    return r;
}
// Load that bypasses L1 (cached in L2 only): for data another block of the same kernel wrote.
template <typename T> __device__ Packed128<T> load128cg(const T* p) {
    Packed128<T> r;
    *reinterpret_cast<int4*>(&r) = __ldcg(reinterpret_cast<const int4*>(p));
    return r;
}
template <typename T> __device__ void store128(T* p, const Packed128<T>& v) {
#ifdef LLMC_EMU
    ::emu::store_bytes(p, &v, sizeof(v));
#else
    *reinterpret_cast<Packed128<T>*>(p) = v;
#endif
}
// Streaming store: data not read again soon, so it should not push other lines out of L2.
template <typename T> __device__ void store128cs(T* p, const Packed128<T>& v) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
}

} // namespace llmc
