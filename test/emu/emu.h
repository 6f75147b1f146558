/*
 * Host emulation of the CUDA execution model, for running the project's real kernels (the llmc .cuh headers) on a
 * machine without a GPU. Included through the shim headers in test/emu/include/ (cuda_runtime.h and friends), which
 * shadow the toolkit's; the sources are first passed through test/emu/rewrite.py (launch syntax, __shared__).
 *
 * Model:
 *  - one fiber (Boost.Context) per CUDA thread; a block's fibers run on the calling OS thread until each one
 *    waits at a barrier or a warp collective, then the scheduler releases whatever group is complete. A group
 *    that can never complete (a lane that exited, divergent barriers) is a fault, never a hang;
 *  - blocks of a grid run one after the other, in an order chosen by the schedule; threads within a round too.
 *    Running the same work under several schedules and comparing the results bit for bit finds races that change
 *    results; racecheck (racecheck.h) finds shared-memory hazards from the barriers alone, on any schedule;
 *  - streams are in-order queues executed lazily, at the points where the CUDA runtime would make the host
 *    wait (stream/event/device synchronisation, synchronous copies). Copies from pinned host memory read the
 *    host buffer when they execute, as a DMA would; copies from pageable memory read it at the call;
 *  - device memory is host memory (cudaMalloc is an aligned allocation, freshly poisoned with 0xFF bytes, so
 *    every uninitialised bf16 or float reads as NaN), shared memory a fresh poisoned allocation per block;
 *  - launches are validated against sm_90's limits (threads per block, grid size, shared memory with and
 *    without the cudaFuncSetAttribute opt-in, __launch_bounds__);
 *  - CUDA graphs by stream capture: while a stream captures, what is queued on it becomes the graph's nodes, in
 *    order, instead of running; a graph launch queues them all on a stream, to run as they were captured (kernels
 *    with the arguments they had then, pinned copies reading their host buffer when they run). What the runtime
 *    refuses during a (global mode) capture is refused here with the same errors, and invalidates the capture:
 *    synchronisation, allocation and freeing, synchronous copies, copies from or to pageable host memory, work on
 *    the legacy stream, waiting for an event recorded outside the capture.
 * A fault (illegal launch, deadlock, divergent collective, illegal WMMA or shuffle argument) is recorded with
 * the kernel's name, block and thread; the context becomes unusable (every later call returns the error), as
 * on a device, and emu::take_faults() lets a test see them.
 */
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

// ------------------------------------------------------------------------------------------- basic types
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
    cudaErrorIllegalState = 401,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
};
using cudaError = cudaError_t;

namespace emu {
struct Stream;
struct Event;
struct Graph;
struct GraphExec;
} // namespace emu
using cudaStream_t = emu::Stream*;
using cudaEvent_t = emu::Event*;
using cudaGraph_t = emu::Graph*;
using cudaGraphExec_t = emu::GraphExec*;

// ------------------------------------------------------------------------------------------- the fault log
namespace emu {

// Faults recorded since the last take_faults() (one line each), and clears them and the sticky error.
std::vector<std::string> take_faults();
// Test hook: the nth (0-based) launch from now of a kernel whose name contains `name` faults when it runs, as a
// kernel that traps or reads outside its memory would on a device (the error surfaces at the next
// synchronisation, and the context becomes unusable until take_faults()).
void inject_fault(const char* name, int nth);
// A schedule: the order blocks of a grid run in and threads within a block are resumed, and the WMMA
// fragment layout. 0 = forward, 1 = reverse, 2 = shuffled; 3 = warp-eager: one warp at a time runs to its next
// barrier, each of its collectives released as soon as its lanes have all arrived (the others have every thread
// reach its next barrier or collective before releasing any, which hides a barrier missing between one warp's
// writes and another's reads). Blocks run shuffled under 2 and 3.
void set_schedule(int schedule);
int schedule();
const char* schedule_name(int schedule);
// Called from device code: records a fault for the current thread and stops its block.
[[noreturn]] void device_fault(const std::string& what);
// Called from a collective's function (which runs in the scheduler once a group is complete): the same.
[[noreturn]] void collective_fault(const std::string& what);
// Emulated time: event timestamps are the host's steady clock plus everything added here. Work queued on a
// stream calls it when it runs (the emulated cuBLASLt for an algorithm made slower on purpose), so the time
// lands between the events recorded around it.
void advance_clock(double ms);
// A digest of every byte copied from the device to the host since the last reset: what a test observed.
uint64_t output_digest();
void reset_output_digest();
// Statistics since the process started (the test summary prints them). graph_launches: cudaGraphLaunch calls (their
// kernels counted among the launches once, when they were captured).
struct Stats {
    uint64_t launches = 0, blocks = 0, threads = 0, collectives = 0, graph_launches = 0;
};
const Stats& stats();

// ------------------------------------------------------------------------------------------- device side
struct Builtins {
    uint3 thread, block;
    dim3 block_dim, grid_dim;
};
// The running thread's built-ins; dereferencing outside a kernel is a fault of the test, not of a kernel.
Builtins& builtins();

void syncthreads(const char* file, int line);
void syncwarp(unsigned mask, const char* file, int line);

/*
 * A warp collective: every lane named in `mask` (the caller included) must call it with the same `fn` and mask.
 * Once they all have, fn(args, mask) runs once, args[lane] being what each lane passed (null for lanes not in
 * the mask); then all continue. Faults if a named lane has exited or waits elsewhere.
 */
using CollectiveFn = void (*)(void* const* args, unsigned mask);
void warp_collective(unsigned mask, CollectiveFn fn, void* arg, const char* what);

// Per-block storage of one __shared__ declaration (id: the rewriter's number for it), poisoned on creation.
void* shared_storage(int id, size_t bytes, size_t align, const char* type);
void* dynamic_shared_storage();
// The body of a kernel declared with __launch_bounds__(max): faults when the launch has more threads.
void launch_bounds_check(int max_threads, const char* kernel);

template <typename T> T& shared_var(int id) {
    return *static_cast<T*>(shared_storage(id, sizeof(T), alignof(T), typeid(T).name()));
}

// ------------------------------------------------------------------------------------------- launches
struct LaunchConfig {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
// Validates the configuration now (sets the error cudaGetLastError returns) and queues the grid on the stream.
void enqueue_launch(const char* name, const void* kernel, const LaunchConfig& cfg,
                    std::function<void()> body_per_thread);

template <typename... Params> struct Launcher {
    const char* name;
    void (*kernel)(Params...);
    LaunchConfig cfg;
    template <typename... Args> void operator()(Args&&... args) const {
        static_assert(sizeof...(Args) == sizeof...(Params), "kernel launched with the wrong number of arguments");
        // Arguments are converted to the parameter types and copied now, as a launch does.
        auto packed = std::make_shared<std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
        auto k = kernel;
        enqueue_launch(name, reinterpret_cast<const void*>(kernel), cfg, [k, packed] { std::apply(k, *packed); });
    }
};
template <typename... Params> Launcher<Params...> launch(const char* name, void (*kernel)(Params...), dim3 grid,
                                                         dim3 block, size_t smem = 0, cudaStream_t stream = nullptr) {
    return {name, kernel, {grid, block, smem, stream}};
}

// A host operation queued on a stream (cuBLASLt, CUB device algorithms): runs in stream order.
void enqueue_host_op(cudaStream_t stream, const char* what, std::function<void()> op);
// Host memory registered by cudaMallocHost (copies from it are read when they execute).
bool is_pinned(const void* p);
// Device allocations: whether [p, p + bytes) lies inside one.
bool is_device_range(const void* p, size_t bytes);
// The start of the device allocation that holds [p, p + bytes), or nullptr.
const void* device_allocation_of(const void* p, size_t bytes);
// The live device allocations (cudaMalloc'd, not yet freed): address and bytes of each, by address.
std::vector<std::pair<const void*, size_t>> device_allocations();
// Bytes of device memory allocated now, and the most allocated at once since reset_device_peak (which sets it to
// what is allocated now).
size_t device_bytes();
size_t device_peak();
void reset_device_peak();

} // namespace emu

#define threadIdx (::emu::builtins().thread)
#define blockIdx (::emu::builtins().block)
#define blockDim (::emu::builtins().block_dim)
#define gridDim (::emu::builtins().grid_dim)
constexpr int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::emu::syncwarp(mask, file, line);
}

// ------------------------------------------------------------------------------------------- shuffles, votes
namespace emu {
struct ShuffleArg {
    uint64_t value;
    int src; // source lane (already resolved for xor/up/down within the width)
    uint64_t result;
};
void shuffle_collective(void* const* args, unsigned mask);
template <typename T> T shuffle(unsigned mask, T v, int src, const char* what) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
    ShuffleArg a{};
    std::memcpy(&a.value, &v, sizeof(T));
    a.src = src;
    warp_collective(mask, shuffle_collective, &a, what);
    T r;
    std::memcpy(&r, &a.result, sizeof(T));
    return r;
}
inline int lane_id() {
    return (int)((builtins().thread.x + builtins().thread.y * builtins().block_dim.x +
                  builtins().thread.z * builtins().block_dim.x * builtins().block_dim.y) %
                 32);
}
struct VoteArg {
    int pred;
    unsigned result;
};
void ballot_collective(void* const* args, unsigned mask);
} // namespace emu

template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    const int lane = emu::lane_id();
    return emu::shuffle(mask, v, (lane & ~(width - 1)) + (src & (width - 1)), "__shfl_sync");
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32) {
    const int lane = emu::lane_id();
    int src = lane ^ lanemask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane; // outside the segment: own value
    return emu::shuffle(mask, v, src, "__shfl_xor_sync");
}
template <typename T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = emu::lane_id();
    int src = lane - (int)delta;
    if (src < (lane & ~(width - 1))) src = lane;
    return emu::shuffle(mask, v, src, "__shfl_up_sync");
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = emu::lane_id();
    int src = lane + (int)delta;
    if (src >= (lane & ~(width - 1)) + width) src = lane;
    return emu::shuffle(mask, v, src, "__shfl_down_sync");
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    emu::VoteArg a{pred != 0, 0};
    emu::warp_collective(mask, emu::ballot_collective, &a, "__ballot_sync");
    return a.result;
}
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }

// ------------------------------------------------------------------------------------------- PTX (llmc/ptx.cuh)
// The instructions llmc/ptx.cuh wraps, with the layouts it documents (test/emu/ptx.cpp, runtime.cpp):
//  - mma m16n8k16 bf16 -> fp32 and ldmatrix x4 are warp collectives (all 32 lanes); ldmatrix row addresses
//    must be 16-byte aligned rows inside the block's shared memory;
//  - cp.async 16 B: destination in shared memory, source in device memory (unless src_bytes = 0, a zero fill),
//    both 16-byte aligned; the destination reads as poison until the issuing thread's wait_group covers it.
namespace emu {
void ptx_mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b);
void ptx_ldmatrix_x4(uint32_t* r, const void* row, bool trans);
void ptx_cp_async_16(void* dst, const void* src, int src_bytes);
void ptx_cp_async_commit();
void ptx_cp_async_wait(int n);
// Whether [p, p + bytes) lies inside the running block's shared memory (static or dynamic).
bool is_shared_range(const void* p, size_t bytes);
} // namespace emu

// ------------------------------------------------------------------------------------------- loads, atomics
// One access of n bytes, as the device's vector load or store of that width (LDG.E.128 for 16): copied outside the
// instrumented code and reported to racecheck and the counters as one access at the caller's line, whatever
// instructions the host compiler would have used for the copy (test/emu/racecheck.cpp).
namespace emu {
void load_bytes(void* dst, const void* src, size_t n);
void store_bytes(void* dst, const void* src, size_t n);
template <typename T> T load_as_one(const T* p) {
    T r;
    load_bytes(&r, p, sizeof(T));
    return r;
}
} // namespace emu
template <typename T> T __ldg(const T* p) { return emu::load_as_one(p); }
template <typename T> T __ldcs(const T* p) { return emu::load_as_one(p); }
template <typename T> T __ldcg(const T* p) { return emu::load_as_one(p); }
template <typename T> T __ldlu(const T* p) { return emu::load_as_one(p); }
template <typename T> void __stcs(T* p, T v) { emu::store_bytes(p, &v, sizeof(T)); }
template <typename T> void __stcg(T* p, T v) { emu::store_bytes(p, &v, sizeof(T)); }

// Only one fiber runs at a time (blocks too run one after the other), so a read-modify-write is atomic as
// written; each returns the old value, as the device's do.
// Not instrumented for racecheck (racecheck.h): atomics are not hazards.
namespace emu {
template <typename T, typename F> __attribute__((no_sanitize("thread"))) T atomic_update(T* p, F f) {
    const T old = *p;
    *p = f(old);
    return old;
}
} // namespace emu
template <typename T> T atomicAdd(T* p, T v) {
    return emu::atomic_update(p, [v](T o) { return o + v; });
}
template <typename T> T atomicSub(T* p, T v) {
    return emu::atomic_update(p, [v](T o) { return o - v; });
}
template <typename T> T atomicMax(T* p, T v) {
    return emu::atomic_update(p, [v](T o) { return o > v ? o : v; });
}
template <typename T> T atomicMin(T* p, T v) {
    return emu::atomic_update(p, [v](T o) { return o < v ? o : v; });
}
template <typename T> T atomicExch(T* p, T v) {
    return emu::atomic_update(p, [v](T) { return v; });
}
template <typename T> T atomicCAS(T* p, T cmp, T v) {
    return emu::atomic_update(p, [=](T o) { return o == cmp ? v : o; });
}
inline void __threadfence() {}
inline void __threadfence_block() {}

// ------------------------------------------------------------------------------------------- device math
// The device's single-precision functions, computed by the host's (a difference of an ulp or so from the
// GPU's, which the tests' tolerances absorb).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
