/*
 * The emulator's own checks (suite EmuRuntime): each test writes a small kernel or call with a known defect and
 * asserts that the emulator reports it, and the correct version next to it that it does not. Built only
 * against the emulator (test/emu/rewrite.py turns the launches and __shared__ declarations into its calls).
 */
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <cub/cub.cuh>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>
#include <mma.h>
#include <string>
#include <vector>

#include "llmc/matmul.cuh"
#include "llmc/ptx.cuh"
#include "test/emu/counters.h"
#include "test/emu/racecheck.h"

namespace {

// Runs `launch`, synchronises, and returns the faults the emulator recorded (one line each).
template <typename F> std::vector<std::string> faults_of(F launch) {
    launch();
    cudaDeviceSynchronize();
    return emu::take_faults();
}
bool mentions(const std::vector<std::string>& faults, const std::string& what) {
    for (const auto& f : faults)
        if (f.find(what) != std::string::npos) return true;
    return false;
}
std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += x + "\n";
    return s;
}

struct Buffer {
    float* p = nullptr;
    size_t n;
    explicit Buffer(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess); }
    ~Buffer() { cudaFree(p); }
    std::vector<float> get() const {
        std::vector<float> h(n);
        EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    }
};

__global__ void noop_kernel(float* out) {
    if (out) out[threadIdx.x] = 1.0f;
}
__global__ void __launch_bounds__(64) bounded_kernel(float* out) { out[threadIdx.x] = 1.0f; }
__global__ void dynamic_smem_kernel(float* out, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = buf[n - 1];
}

// ldmatrix from `where` (0: shared, 16-byte aligned; 1: shared, 8 bytes off; 2: device memory).
__global__ void ldmatrix_operand_kernel(float* out, int where) {
    __shared__ __align__(16) __nv_bfloat16 s[32 * 8];
    for (int i = 0; i < 8; i++) s[threadIdx.x * 8 + i] = __float2bfloat16((float)i);
    __syncwarp();
    const void* row = where == 2 ? static_cast<const void*>(out + threadIdx.x * 8)
                                 : static_cast<const void*>(s + threadIdx.x * 8 + (where == 1 ? 4 : 0));
    uint32_t r[4];
    llmc::ptx::ldmatrix_x4(r, row);
    out[threadIdx.x] = (float)r[0];
}
// cp.async with the destination in device memory (defect) or shared memory (correct), then a 16-byte copy out.
__global__ void cp_async_operand_kernel(float* out, const float* in, int dst_global) {
    __shared__ __align__(16) float s[4 * 32];
    float* dst = dst_global ? out + 4 * threadIdx.x : s + 4 * threadIdx.x;
    llmc::ptx::cp_async_16(dst, in + 4 * threadIdx.x, true);
    llmc::ptx::cp_async_commit();
    llmc::ptx::cp_async_wait<0>();
    if (!dst_global) out[threadIdx.x] = s[4 * threadIdx.x];
}
// Each thread copies its own chunk with cp.async, waits for it, then reads its neighbour's chunk: correct with a
// barrier after the wait, a race without one (the neighbour's wait may not have run yet).
__global__ void cp_async_neighbour_kernel(float* out, const float* in, bool barrier) {
    __shared__ __align__(16) float s[4 * 64];
    llmc::ptx::cp_async_16(s + 4 * threadIdx.x, in + 4 * threadIdx.x, true);
    llmc::ptx::cp_async_commit();
    llmc::ptx::cp_async_wait<0>();
    if (barrier) __syncthreads();
    out[threadIdx.x] = s[4 * ((threadIdx.x + 1) % 64)];
}

// Each thread reads its neighbour's shared slot: correct with the barrier, a race without it.
__global__ void neighbour_kernel(float* out, bool barrier) {
    __shared__ float slot[64];
    slot[threadIdx.x] = (float)threadIdx.x;
    if (barrier) __syncthreads();
    out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];
}

// Racecheck's cases (one warp, or two): lane 0 writes a slot that lane 1 reads, with `sync` (0 none, 1 __syncwarp,
// 2 __syncthreads) between; with `war`, every thread reads slot 0 before the last thread rewrites it.
__global__ void handoff_kernel(float* out, int sync, bool war) {
    __shared__ float slot[64];
    const int t = threadIdx.x;
    if (war) {
        if (t == 0) slot[0] = 1.0f;
        __syncthreads();
        out[t] = slot[0];
        if (sync == 2) __syncthreads();
        if (t == blockDim.x - 1) slot[0] = 2.0f;
        return;
    }
    if (t == 0) slot[0] = 7.0f;
    if (sync == 1) __syncwarp();
    if (sync == 2) __syncthreads();
    if (t == blockDim.x - 1) out[0] = slot[0];
}
// Warp 1 writes the rows warp 0 reads with ldmatrix.
__global__ void ldmatrix_handoff_kernel(float* out, bool barrier) {
    __shared__ __align__(16) __nv_bfloat16 tile[32 * 8];
    const int t = threadIdx.x;
    if (t >= 32) {
        for (int i = 0; i < 8; i++) tile[(t - 32) * 8 + i] = __float2bfloat16((float)i);
    }
    if (barrier) __syncthreads();
    if (t < 32) {
        uint32_t r[4];
        llmc::ptx::ldmatrix_x4(r, tile + t * 8);
        out[t] = (float)(r[0] & 0xffffu);
    }
}
// Each thread copies one 16-byte row of a tile with cp.async and waits for it; then each warp reads the other
// warp's rows with ldmatrix (out: the low 16 bits of each lane's first register). Correct only with the barrier.
__global__ void cp_async_ldmatrix_kernel(float* out, const __nv_bfloat16* in, bool barrier) {
    __shared__ __align__(16) __nv_bfloat16 tile[64 * 8];
    const int t = threadIdx.x;
    llmc::ptx::cp_async_16(tile + 8 * t, in + 8 * t, true);
    llmc::ptx::cp_async_commit();
    llmc::ptx::cp_async_wait<0>();
    if (barrier) __syncthreads();
    uint32_t r[4];
    llmc::ptx::ldmatrix_x4(r, tile + 8 * ((t + 32) % 64));
    out[t] = (float)(r[0] & 0xffffu);
}
// Three cp.async groups of 16 bytes each into s; wait_group<1> lands the first two only; out gets s after it.
// With `change`, the source of the last group is rewritten between its issue and its wait.
__global__ void cp_async_groups_kernel(float* out, float* in, bool change) {
    __shared__ __align__(16) float s[12];
    for (int g = 0; g < 3; g++) {
        llmc::ptx::cp_async_16(s + 4 * g, in + 4 * g, true);
        llmc::ptx::cp_async_commit();
    }
    llmc::ptx::cp_async_wait<1>();
    for (int i = 0; i < 12; i++) out[i] = s[i];
    if (change) in[8] = -1.0f;
    llmc::ptx::cp_async_wait<0>();
    for (int i = 0; i < 12; i++) out[12 + i] = s[i];
}
__global__ void cp_async_unwaited_kernel(const float* in) {
    __shared__ __align__(16) float s[4];
    llmc::ptx::cp_async_16(s, in, true);
    llmc::ptx::cp_async_commit();
}

// The counters' cases (test/emu/counters.h).
__global__ void load_stride_kernel(float* out, const float* in, int stride) { out[threadIdx.x] = in[stride * threadIdx.x]; }
__global__ void load128_kernel(float4* out, const float4* in) { out[threadIdx.x] = in[threadIdx.x]; }
__global__ void shared_stride_kernel(float* out, int stride) {
    __shared__ float s[32 * 32];
    s[(threadIdx.x * stride) % 1024] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[0]; // every lane the same word: a broadcast
}
__global__ void ldmatrix_stride_kernel(float* out, int ld) {
    __shared__ __align__(16) __nv_bfloat16 tile[32 * 72];
    uint32_t r[4];
    llmc::ptx::ldmatrix_x4(r, tile + threadIdx.x * ld);
    float d[4] = {0, 0, 0, 0};
    const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    llmc::ptx::mma_bf16_16816(d, a, b);
    out[threadIdx.x] = d[0] + (float)(r[0] & 1u);
}
// Lanes 0..15 read a word of bank 1 in the first trip, all lanes one of bank 0 in the second: on a device two
// instructions of 16 and 32 wavefronts; here the upper lanes' second trip is their first occurrence of the site.
__global__ void divergent_trips_kernel(float* out, int trips) {
    __shared__ float s[32 * 32];
    const int t = threadIdx.x;
    s[t] = 0.0f;
    __syncthreads();
    float acc = 0.0f;
#pragma GCC unroll 1
    for (int i = 0; i < trips; i++)
        if (i == 1 || t < 16) acc += s[(32 * t + (i == 0 ? 1 : 0)) % 1024];
    out[t] = acc;
}

__global__ void partial_syncwarp_kernel(float* out) {
    if (threadIdx.x < 16) __syncwarp(); // names all 32 lanes, but lanes 16..31 have left
    out[threadIdx.x] = 1.0f;
}
__global__ void divergent_barrier_kernel(float* out) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}
__global__ void shuffle_sum_kernel(float* out) {
    float v = (float)threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[blockIdx.x * 32 + threadIdx.x] = v;
}
__global__ void shuffle_outside_mask_kernel(float* out) {
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1.0f, 20); // lanes 0..15 read lane 20, not in the mask
}

__global__ void block_reduce_kernel(float* out) {
    using Reduce = cub::BlockReduce<float, 128>;
    __shared__ typename Reduce::TempStorage tmp;
    out[threadIdx.x] = Reduce(tmp).Sum(1.0f);
}

namespace wmma = nvcuda::wmma;
// Copies a 16x16 fp32 tile through an accumulator fragment; `skew` misaligns the pointer, `ldm` is passed on.
__global__ void wmma_copy_kernel(float* out, const float* in, int skew, int ldm) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, in + skew, ldm, wmma::mem_row_major);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}
// Reads fragment elements as if lane l held row l/2 (an undocumented layout): depends on the layout.
__global__ void wmma_layout_kernel(float* out, const float* in) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, in, 16, wmma::mem_row_major);
    for (int i = 0; i < acc.num_elements; i++) out[threadIdx.x * acc.num_elements + i] = acc.x[i];
}
// D = A B with A, B bf16 16x16 row-major, through mma_sync.
__global__ void wmma_mma_kernel(float* out, const __nv_bfloat16* a, const __nv_bfloat16* b) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

__global__ void copy_kernel(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

} // namespace

TEST(EmuRuntime, LaunchesAreValidatedAgainstDeviceLimits) {
    noop_kernel<<<1, 1025>>>(nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "1025 threads per block";
    noop_kernel<<<dim3(1, 65536), 32>>>(nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "grid y beyond 65535";
    Buffer out(1);
    const int n = 16384; // 64 KiB of dynamic shared memory: above the 48 KiB default
    dynamic_smem_kernel<<<1, 128, n * sizeof(float)>>>(out.p, n);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue) << "64 KiB dynamic shared memory without the opt-in";
    ASSERT_EQ(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4),
              cudaSuccess);
    dynamic_smem_kernel<<<1, 128, n * sizeof(float)>>>(out.p, n);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(out.get()[0], (float)(n - 1));
    EXPECT_NE(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
              cudaSuccess)
        << "beyond sm_90's 227 KiB";
    EXPECT_TRUE(emu::take_faults().empty());
}

TEST(EmuRuntime, LaunchBoundsAreEnforced) {
    Buffer out(128);
    auto f = faults_of([&] { bounded_kernel<<<1, 128>>>(out.p); });
    EXPECT_TRUE(mentions(f, "__launch_bounds__(64)")) << joined(f);
    f = faults_of([&] { bounded_kernel<<<1, 64>>>(out.p); });
    EXPECT_TRUE(f.empty()) << joined(f);
}

TEST(EmuRuntime, AFaultMakesTheContextUnusableUntilTaken) {
    Buffer out(128);
    bounded_kernel<<<1, 128>>>(out.p);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    EXPECT_NE(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("__launch_bounds__"), std::string::npos);
    float* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorLaunchFailure) << "sticky, as on a device";
    EXPECT_EQ(emu::take_faults().size(), 1u);
    EXPECT_EQ(cudaMalloc(&p, 16), cudaSuccess);
    cudaFree(p);
}

// Racecheck off for a test's scope: the schedules alone must show a race that changes results.
struct RacecheckOff {
    RacecheckOff() { emu::race::set_enabled(false); }
    ~RacecheckOff() { emu::race::set_enabled(true); }
};

TEST(EmuRuntime, AMissingBarrierShowsAsADifferenceBetweenSchedules) {
    RacecheckOff off;
    Buffer out(64);
    std::vector<float> with[2], without[2];
    for (int s = 0; s < 2; s++) {
        emu::set_schedule(s);
        neighbour_kernel<<<1, 64>>>(out.p, true);
        with[s] = out.get();
        neighbour_kernel<<<1, 64>>>(out.p, false);
        without[s] = out.get();
    }
    emu::set_schedule(0);
    EXPECT_TRUE(emu::take_faults().empty());
    EXPECT_EQ(with[0], with[1]);
    EXPECT_EQ(with[0][63], 0.0f);
    EXPECT_NE(std::memcmp(without[0].data(), without[1].data(), 64 * sizeof(float)), 0)
        << "the racy kernel gave the same bits under both schedules";
}

TEST(EmuRuntime, PtxOperandsAreChecked) {
    Buffer out(4 * 64), in(4 * 64);
    std::vector<float> h(in.n);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    cudaMemcpy(in.p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    auto f = faults_of([&] { ldmatrix_operand_kernel<<<1, 32>>>(out.p, 0); });
    EXPECT_TRUE(f.empty()) << joined(f);
    f = faults_of([&] { ldmatrix_operand_kernel<<<1, 32>>>(out.p, 1); });
    EXPECT_TRUE(mentions(f, "not 16-byte aligned")) << joined(f);
    f = faults_of([&] { ldmatrix_operand_kernel<<<1, 32>>>(out.p, 2); });
    EXPECT_TRUE(mentions(f, "not inside the block's shared memory")) << joined(f);
    f = faults_of([&] { ldmatrix_operand_kernel<<<1, 16>>>(out.p, 0); });
    EXPECT_FALSE(f.empty()) << "half a warp in ldmatrix";
    f = faults_of([&] { cp_async_operand_kernel<<<1, 32>>>(out.p, in.p, 0); });
    EXPECT_TRUE(f.empty()) << joined(f);
    EXPECT_EQ(out.get()[5], 20.0f);
    f = faults_of([&] { cp_async_operand_kernel<<<1, 32>>>(out.p, in.p, 1); });
    EXPECT_TRUE(mentions(f, "destination not in the block's shared memory")) << joined(f);
}

TEST(EmuRuntime, ACpAsyncStageReadBeforeItsBarrierShowsAsADifferenceBetweenSchedules) {
    RacecheckOff off;
    Buffer out(64), in(4 * 64);
    std::vector<float> h(in.n);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    cudaMemcpy(in.p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    std::vector<float> with[2], without[2];
    for (int s = 0; s < 2; s++) {
        emu::set_schedule(s);
        cp_async_neighbour_kernel<<<1, 64>>>(out.p, in.p, true);
        with[s] = out.get();
        cp_async_neighbour_kernel<<<1, 64>>>(out.p, in.p, false);
        without[s] = out.get();
    }
    emu::set_schedule(0);
    EXPECT_TRUE(emu::take_faults().empty());
    EXPECT_EQ(with[0], with[1]);
    EXPECT_EQ(with[0][0], 4.0f);
    EXPECT_NE(std::memcmp(without[0].data(), without[1].data(), 64 * sizeof(float)), 0)
        << "the racy kernel gave the same bits under both schedules";
}

// A barrier missing between a cp.async wait and another warp's ldmatrix of the stage: the round-based schedules
// run every thread to the ldmatrix (a collective), landing every copy, before releasing any, and hide it; the
// warp-eager one runs warp 0's ldmatrix before warp 1 has issued its copies, and shows it.
TEST(EmuRuntime, TheWarpEagerScheduleExposesAStageReadBeforeItsBarrier) {
    RacecheckOff off;
    Buffer out(64);
    __nv_bfloat16* in = nullptr;
    ASSERT_EQ(cudaMalloc(&in, 64 * 8 * sizeof(__nv_bfloat16)), cudaSuccess);
    std::vector<__nv_bfloat16> h(64 * 8);
    for (size_t i = 0; i < h.size(); i++) h[i] = __float2bfloat16((float)(i % 97));
    cudaMemcpy(in, h.data(), h.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
    std::vector<float> got[4], with_barrier[4];
    for (int s = 0; s < 4; s++) {
        emu::set_schedule(s);
        cp_async_ldmatrix_kernel<<<1, 64>>>(out.p, in, false);
        got[s] = out.get();
        cp_async_ldmatrix_kernel<<<1, 64>>>(out.p, in, true);
        with_barrier[s] = out.get();
    }
    emu::set_schedule(0);
    cudaFree(in);
    EXPECT_TRUE(emu::take_faults().empty());
    EXPECT_STREQ(emu::schedule_name(3), "warp-eager");
    for (int s = 0; s < 4; s++) EXPECT_EQ(with_barrier[s], with_barrier[0]) << emu::schedule_name(s);
    for (int s = 0; s < 3; s++) EXPECT_EQ(got[s], with_barrier[0]) << emu::schedule_name(s) << " hides the race";
    EXPECT_EQ(got[3][0], 65535.0f) << "warp 0 read warp 1's rows still poisoned (0xFFFF)";
}

// "test/emu/test_emulator.cu:N", N the line of this file that holds `text` (once, besides the lines that ask).
std::string line_of(const std::string& text) {
    const std::string file = "test/emu/test_emulator.cu";
    std::ifstream in(file);
    std::string line;
    int n = 0, found = 0;
    for (int i = 1; std::getline(in, line); i++)
        if (line.find(text) != std::string::npos && line.find("line_of(") == std::string::npos) n++, found = i;
    EXPECT_EQ(n, 1) << "'" << text << "' in " << file;
    return file + ":" + std::to_string(found);
}

// Racecheck (test/emu/racecheck.h) finds each hazard on the first schedule, from the barriers alone, and names
// both threads, both source lines and the address; the same kernels with their barrier pass.
TEST(EmuRuntime, RacecheckFindsSharedMemoryHazardsOnTheFirstSchedule) {
    REQUIRE_INSTRUMENTATION();
    ASSERT_TRUE(emu::race::enabled());
    emu::set_schedule(0);
    Buffer out(64), in(4 * 64);
    auto f = faults_of([&] { neighbour_kernel<<<1, 64>>>(out.p, false); });
    ASSERT_EQ(f.size(), 1u) << joined(f);
    // Forward order: thread 0 reads slot 1 before thread 1 writes it.
    EXPECT_TRUE(mentions(f, "write-after-read hazard on __shared__ variable")) << joined(f);
    EXPECT_TRUE(mentions(f, "thread 0 (warp 0) read it at " + line_of("out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];")))
        << joined(f);
    EXPECT_TRUE(mentions(f, "block (0,0,0) thread (1,0,0) wrote it at " + line_of("slot[threadIdx.x] = (float)threadIdx.x;")))
        << joined(f);
    EXPECT_TRUE(mentions(f, "(address 0x")) << joined(f);
    EXPECT_TRUE(faults_of([&] { neighbour_kernel<<<1, 64>>>(out.p, true); }).empty());

    // Within a warp __syncwarp orders; across warps only __syncthreads does.
    f = faults_of([&] { handoff_kernel<<<1, 32>>>(out.p, 0, false); });
    EXPECT_TRUE(mentions(f, "read-after-write hazard")) << joined(f);
    EXPECT_TRUE(mentions(f, "with no barrier or warp synchronisation between")) << joined(f);
    EXPECT_TRUE(faults_of([&] { handoff_kernel<<<1, 32>>>(out.p, 1, false); }).empty());
    f = faults_of([&] { handoff_kernel<<<1, 64>>>(out.p, 1, false); });
    EXPECT_TRUE(mentions(f, "read-after-write hazard")) << joined(f);
    EXPECT_TRUE(faults_of([&] { handoff_kernel<<<1, 64>>>(out.p, 2, false); }).empty());
    f = faults_of([&] { handoff_kernel<<<1, 64>>>(out.p, 0, true); });
    EXPECT_TRUE(mentions(f, "write-after-read hazard")) << joined(f);
    EXPECT_TRUE(faults_of([&] { handoff_kernel<<<1, 64>>>(out.p, 2, true); }).empty());

    // A cp.async copy is written by its thread when its wait_group lands it; ldmatrix reads each lane's row.
    f = faults_of([&] { cp_async_neighbour_kernel<<<1, 64>>>(out.p, in.p, false); });
    EXPECT_TRUE(mentions(f, "thread (1,0,0) wrote it (cp.async issued) at llmc/ptx.cuh:")) << joined(f);
    EXPECT_TRUE(mentions(f, "(inlined into " + line_of("cp_async_16(s + 4 * threadIdx.x, in + 4 * threadIdx.x, true);") + ")"))
        << joined(f);
    EXPECT_TRUE(faults_of([&] { cp_async_neighbour_kernel<<<1, 64>>>(out.p, in.p, true); }).empty());
    f = faults_of([&] { ldmatrix_handoff_kernel<<<1, 64>>>(out.p, false); });
    EXPECT_TRUE(mentions(f, "thread (0,0,0) read it (ldmatrix.x4) at llmc/ptx.cuh:")) << joined(f);
    EXPECT_TRUE(mentions(f, "(inlined into " + line_of("llmc::ptx::ldmatrix_x4(r, tile + t * 8);") + ")")) << joined(f);
    EXPECT_TRUE(faults_of([&] { ldmatrix_handoff_kernel<<<1, 64>>>(out.p, true); }).empty());
}

// cp.async lands only what a wait_group covers, reads its source when it lands, and a copy no wait covered is a
// fault when its thread exits.
TEST(EmuRuntime, CpAsyncLandsOnlyTheGroupsAWaitCovers) {
    Buffer out(24), in(12);
    std::vector<float> h(12);
    for (int i = 0; i < 12; i++) h[i] = (float)i;
    cudaMemcpy(in.p, h.data(), 48, cudaMemcpyHostToDevice);
    cp_async_groups_kernel<<<1, 1>>>(out.p, in.p, true);
    const std::vector<float> r = out.get();
    EXPECT_TRUE(emu::take_faults().empty());
    for (int i = 0; i < 8; i++) EXPECT_EQ(r[i], (float)i) << "the two oldest groups landed at wait_group 1";
    for (int i = 8; i < 12; i++) EXPECT_TRUE(std::isnan(r[i])) << "the newest group is still in flight: " << r[i];
    EXPECT_EQ(r[12 + 8], -1.0f) << "the source is read when the copy lands";
    for (int i = 9; i < 12; i++) EXPECT_EQ(r[12 + i], (float)i);
    const auto f = faults_of([&] { cp_async_unwaited_kernel<<<1, 1>>>(in.p); });
    EXPECT_TRUE(mentions(f, "1 cp.async copy still pending when the thread exited")) << joined(f);
}

// The counters (test/emu/counters.h) against ncu's definitions on kernels whose counts are known by hand.
TEST(EmuRuntime, CountersFollowNcuDefinitions) {
    REQUIRE_INSTRUMENTATION();
    Buffer out(32 * 32), in(32 * 32);
    cudaMemset(in.p, 0, in.n * sizeof(float));
    emu::count::start();
    load_stride_kernel<<<1, 32>>>(out.p, in.p, 1);  // 32 consecutive floats: 4 sectors
    load_stride_kernel<<<1, 32>>>(out.p, in.p, 32); // a sector per lane
    load128_kernel<<<1, 32>>>(reinterpret_cast<float4*>(out.p), reinterpret_cast<const float4*>(in.p));
    load_stride_kernel<<<2, 32>>>(out.p, in.p, 1); // two blocks read the same 128 bytes
    shared_stride_kernel<<<1, 32>>>(out.p, 1);
    shared_stride_kernel<<<1, 32>>>(out.p, 2);
    shared_stride_kernel<<<1, 32>>>(out.p, 32);
    ldmatrix_stride_kernel<<<1, 32>>>(out.p, 64); // 128-byte rows: eight rows of a matrix share four banks
    ldmatrix_stride_kernel<<<1, 32>>>(out.p, 72); // 144-byte rows: 16 mod 128, conflict-free
    cudaDeviceSynchronize();
    const std::vector<emu::count::Launch> c = emu::count::stop();
    ASSERT_TRUE(emu::take_faults().empty());
    ASSERT_EQ(c.size(), 9u);
    EXPECT_EQ(c[0].kernel, "load_stride_kernel");
    EXPECT_EQ(c[0].ld_requests, 1u);
    EXPECT_EQ(c[0].ld_sectors, 4u);
    EXPECT_EQ(c[0].st_requests, 1u);
    EXPECT_EQ(c[0].st_sectors, 4u);
    EXPECT_EQ(c[0].ld_bytes, 128u);
    EXPECT_EQ(c[0].ld_ideal_sectors, 4u);
    EXPECT_EQ(c[1].ld_sectors, 32u);
    EXPECT_EQ(c[1].ld_ideal_sectors, 4u) << "the same 128 bytes, coalesced, would take 4";
    EXPECT_EQ(c[2].ld_requests, 1u);
    EXPECT_EQ(c[2].ld_sectors, 16u) << "16 bytes a lane: 512 bytes, 16 sectors in one request";
    EXPECT_EQ(c[3].ld_requests, 2u);
    EXPECT_EQ(c[3].ld_sectors, 8u) << "the upper DRAM bound: every request's sectors";
    EXPECT_EQ(c[3].unique_read_sectors, 4u) << "the lower bound: each sector once";
    EXPECT_EQ(c[4].shared_st_wavefronts, 1u);
    EXPECT_EQ(c[4].shared_st_conflicts, 0u);
    EXPECT_EQ(c[4].shared_ld_requests, 1u);
    EXPECT_EQ(c[4].shared_ld_wavefronts, 1u) << "a broadcast";
    EXPECT_EQ(c[5].shared_st_wavefronts, 2u) << "stride 2: two words in each even bank";
    EXPECT_EQ(c[5].shared_st_conflicts, 1u);
    EXPECT_EQ(c[6].shared_st_wavefronts, 32u) << "stride 32: every lane in bank 0";
    EXPECT_EQ(c[6].shared_st_conflicts, 31u);
    EXPECT_EQ(c[7].ldsm, 1u);
    EXPECT_EQ(c[7].ldsm_wavefronts, 32u);
    EXPECT_EQ(c[7].ldsm_conflicts, 28u);
    EXPECT_EQ(c[8].ldsm_wavefronts, 4u);
    EXPECT_EQ(c[8].ldsm_conflicts, 0u);
    EXPECT_EQ(c[8].mma, 1u);
    EXPECT_EQ(c[8].tensor_ops, 4096u);
    EXPECT_EQ(c[8].blocks, 1u);
    EXPECT_EQ(c[8].threads, 32u);
}

// A warp-level instruction is (site, occurrence since the last synchronisation point) per lane: a lane that skips
// a trip of a loop joins the others' earlier trip (counters.h). On a device divergent_trips_kernel's loads are two
// instructions of 16 and 32 wavefronts (48); here the upper lanes' one load joins the lower lanes' first trip.
TEST(EmuRuntime, CountersGroupDivergentLanesByOccurrence) {
    REQUIRE_INSTRUMENTATION();
    Buffer out(32);
    emu::count::start();
    divergent_trips_kernel<<<1, 32>>>(out.p, 2);
    cudaDeviceSynchronize();
    const std::vector<emu::count::Launch> c = emu::count::stop();
    ASSERT_TRUE(emu::take_faults().empty());
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].shared_ld_requests, 2u);
    EXPECT_EQ(c[0].shared_ld_wavefronts, 32u) << "16 + 16 as grouped here, where a device has 16 + 32";
}

TEST(EmuRuntime, CollectivesThatCannotCompleteAreFaultsNotHangs) {
    Buffer out(64);
    auto f = faults_of([&] { partial_syncwarp_kernel<<<1, 32>>>(out.p); });
    EXPECT_TRUE(mentions(f, "exited before joining __syncwarp")) << joined(f);
    f = faults_of([&] { divergent_barrier_kernel<<<1, 64>>>(out.p); });
    EXPECT_TRUE(mentions(f, "divergent __syncthreads")) << joined(f);
    f = faults_of([&] { shuffle_outside_mask_kernel<<<1, 32>>>(out.p); });
    EXPECT_TRUE(mentions(f, "not in the mask")) << joined(f);
}

TEST(EmuRuntime, ShufflesAndBlockReductionsFollowTheirContracts) {
    Buffer out(128);
    shuffle_sum_kernel<<<2, 32>>>(out.p);
    auto r = out.get();
    for (int i = 0; i < 64; i++) EXPECT_EQ(r[i], 496.0f) << i; // 0 + 1 + ... + 31 in every lane
    block_reduce_kernel<<<1, 128>>>(out.p);
    r = out.get();
    EXPECT_EQ(r[0], 128.0f);
    EXPECT_TRUE(std::isnan(r[1])) << "threads other than 0 get no defined result";
    auto f = faults_of([&] { block_reduce_kernel<<<1, 64>>>(out.p); });
    EXPECT_TRUE(mentions(f, "cub::BlockReduce for 128 threads")) << joined(f);
}

TEST(EmuRuntime, WmmaChecksItsDocumentedRequirements) {
    Buffer in(16 * 24 + 8), out(16 * 16);
    std::vector<float> h(in.n);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    cudaMemcpy(in.p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    auto f = faults_of([&] { wmma_copy_kernel<<<1, 32>>>(out.p, in.p, 0, 16); });
    EXPECT_TRUE(f.empty()) << joined(f);
    EXPECT_EQ(out.get()[17], 17.0f);
    f = faults_of([&] { wmma_copy_kernel<<<1, 32>>>(out.p, in.p, 4, 16); });
    EXPECT_TRUE(mentions(f, "256-bit aligned")) << joined(f);
    f = faults_of([&] { wmma_copy_kernel<<<1, 32>>>(out.p, in.p, 0, 18); });
    EXPECT_TRUE(mentions(f, "ldm 18")) << joined(f);
    f = faults_of([&] { wmma_copy_kernel<<<1, 16>>>(out.p, in.p, 0, 16); });
    EXPECT_FALSE(f.empty()) << "half a warp in a warp-wide operation";
}

TEST(EmuRuntime, WmmaFragmentLayoutDependsOnTheSchedule) {
    Buffer in(256), out(256);
    std::vector<float> h(256);
    for (int i = 0; i < 256; i++) h[i] = (float)i;
    cudaMemcpy(in.p, h.data(), 256 * 4, cudaMemcpyHostToDevice);
    std::vector<float> got[2];
    for (int s = 0; s < 2; s++) {
        emu::set_schedule(s);
        wmma_layout_kernel<<<1, 32>>>(out.p, in.p);
        got[s] = out.get();
    }
    emu::set_schedule(0);
    EXPECT_NE(got[0], got[1]) << "code relying on the fragment layout would pass unnoticed";
}

TEST(EmuRuntime, WmmaMmaMultipliesInFp32) {
    std::vector<__nv_bfloat16> a(256), b(256);
    std::vector<double> ref(256, 0.0);
    for (int i = 0; i < 256; i++)
        a[i] = __float2bfloat16((float)(i % 7) - 3.0f), b[i] = __float2bfloat16((float)(i % 5) * 0.5f);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            for (int k = 0; k < 16; k++) ref[r * 16 + c] += (double)a[r * 16 + k] * (double)b[k * 16 + c];
    __nv_bfloat16 *da, *db;
    cudaMalloc(&da, 512);
    cudaMalloc(&db, 512);
    cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), 512, cudaMemcpyHostToDevice);
    Buffer out(256);
    for (int s = 0; s < 3; s++) {
        emu::set_schedule(s);
        wmma_mma_kernel<<<1, 32>>>(out.p, da, db);
        auto got = out.get();
        for (int i = 0; i < 256; i++) ASSERT_EQ(got[i], (float)ref[i]) << "schedule " << s << " element " << i;
    }
    emu::set_schedule(0);
    cudaFree(da);
    cudaFree(db);
    EXPECT_TRUE(emu::take_faults().empty());
}

TEST(EmuRuntime, NonBlockingStreamsDoNotWaitForTheLegacyStream) {
    // A pageable cudaMemcpy returns once the data is staged; the device write is ordered on the legacy stream,
    // which a non-blocking stream does not wait for: the kernel may read the old contents.
    const int n = 64;
    Buffer src(n), dst(n);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    std::vector<float> h(n, 3.0f);
    cudaMemcpy(src.p, h.data(), n * 4, cudaMemcpyHostToDevice);
    copy_kernel<<<1, n, 0, s>>>(dst.p, src.p, n);
    cudaStreamSynchronize(s);
    std::vector<float> got(n);
    cudaMemcpyAsync(got.data(), dst.p, n * 4, cudaMemcpyDeviceToHost, s);
    EXPECT_TRUE(std::isnan(got[0])) << "the copy on the legacy stream ran before the non-blocking stream's kernel";
    // Ordered properly (the copy on the stream itself), the kernel sees the data.
    cudaMemcpyAsync(src.p, h.data(), n * 4, cudaMemcpyHostToDevice, s);
    copy_kernel<<<1, n, 0, s>>>(dst.p, src.p, n);
    cudaMemcpyAsync(got.data(), dst.p, n * 4, cudaMemcpyDeviceToHost, s);
    EXPECT_EQ(got[0], 3.0f);
    cudaStreamDestroy(s);
    EXPECT_TRUE(emu::take_faults().empty());
}

TEST(EmuRuntime, PinnedCopiesReadTheHostBufferWhenTheyRun) {
    const int n = 16;
    Buffer d(n);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(&pinned, n * 4), cudaSuccess);
    for (int i = 0; i < n; i++) pinned[i] = 1.0f;
    cudaMemcpyAsync(d.p, pinned, n * 4, cudaMemcpyHostToDevice, s);
    for (int i = 0; i < n; i++) pinned[i] = 2.0f; // rewritten before the copy was waited for
    cudaStreamSynchronize(s);
    EXPECT_EQ(d.get()[0], 2.0f) << "an asynchronous copy from pinned memory reads it when it executes";
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
}

__global__ void add_scalar_kernel(float* out, const float* in, float k, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + k;
}

// A captured graph runs nothing while it is captured; each launch runs its nodes in order, the kernels with the
// arguments they had at the capture, a copy from pinned memory reading the buffer as it is when the launch runs.
TEST(EmuRuntime, CapturedWorkRunsAtEachLaunchWithItsCaptureArguments) {
    const int n = 8;
    Buffer in(n), out(n);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    float* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(&pinned, n * 4), cudaSuccess);
    float k = 10.0f;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cudaStreamCaptureStatus status;
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    EXPECT_EQ(cudaMemcpyAsync(in.p, pinned, n * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
    add_scalar_kernel<<<1, n, 0, s>>>(out.p, in.p, k, n);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_TRUE(std::isnan(out.get()[0])) << "a captured kernel ran during the capture";
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    k = 100.0f; // a kernel argument is the value it had at the capture
    for (float v : {1.0f, 2.0f}) {
        for (int i = 0; i < n; i++) pinned[i] = v;
        ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        EXPECT_EQ(out.get()[n - 1], v + 10.0f);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
    EXPECT_TRUE(emu::take_faults().empty());
}

// What the runtime refuses while a stream captures (global mode) is refused with its error and invalidates the
// capture, which then ends without a graph; capture states are checked as the runtime checks them.
TEST(EmuRuntime, WhatACaptureCannotHoldInvalidatesIt) {
    const int n = 8;
    Buffer d(n);
    cudaStream_t s, other;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t outside;
    cudaEventCreate(&outside);
    cudaEventRecord(outside, other);
    std::vector<float> pageable(n, 1.0f);
    void* scratch = nullptr;
    struct Case {
        const char* what;
        std::function<cudaError_t()> call;
        cudaError_t error;
    };
    const std::vector<Case> cases = {
        {"cudaMalloc", [&] { return cudaMalloc(&scratch, 64); }, cudaErrorStreamCaptureUnsupported},
        {"cudaFree", [&] { return cudaFree(d.p); }, cudaErrorStreamCaptureUnsupported},
        {"a synchronous copy", [&] { return cudaMemcpy(d.p, pageable.data(), n * 4, cudaMemcpyHostToDevice); },
         cudaErrorStreamCaptureUnsupported},
        {"a copy from pageable memory",
         [&] { return cudaMemcpyAsync(d.p, pageable.data(), n * 4, cudaMemcpyHostToDevice, s); },
         cudaErrorStreamCaptureUnsupported},
        {"synchronising the capturing stream", [&] { return cudaStreamSynchronize(s); },
         cudaErrorStreamCaptureUnsupported},
        {"synchronising the device", [&] { return cudaDeviceSynchronize(); }, cudaErrorStreamCaptureUnsupported},
        {"work on the legacy stream", [&] { return cudaMemsetAsync(d.p, 0, 4, nullptr); },
         cudaErrorStreamCaptureImplicit},
        {"waiting for an event recorded outside the capture", [&] { return cudaStreamWaitEvent(s, outside, 0); },
         cudaErrorStreamCaptureIsolation},
    };
    for (const Case& c : cases) {
        ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess) << c.what;
        EXPECT_EQ(c.call(), c.error) << c.what;
        cudaStreamCaptureStatus status;
        cudaStreamIsCapturing(s, &status);
        EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated) << c.what;
        cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x1);
        EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated) << c.what;
        EXPECT_EQ(graph, nullptr) << c.what;
    }
    // Capture states: not twice at once, not ended when not begun, never on the legacy stream.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphDestroy(graph);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
    EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    // An event recorded in a capture cannot be waited for on the host.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cudaEvent_t inside;
    cudaEventCreate(&inside);
    EXPECT_EQ(cudaEventRecord(inside, s), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(s, inside, 0), cudaSuccess); // within the capture: in order anyway
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(inside), cudaErrorCapturedEvent);
    cudaGraphDestroy(graph);
    cudaEventDestroy(inside);
    cudaEventDestroy(outside);
    cudaStreamDestroy(other);
    cudaStreamDestroy(s);
    cudaGetLastError();
    EXPECT_TRUE(emu::take_faults().empty());
}

TEST(EmuRuntime, CubDeviceAlgorithmsCheckTheirTemporaryStorage) {
    const int n = 100;
    int *keys, *vals;
    cudaMalloc(&keys, 4 * n * sizeof(int));
    vals = keys + 2 * n;
    size_t bytes = 0;
    ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, keys + n, vals, vals + n, n), cudaSuccess);
    ASSERT_GT(bytes, 0u);
    void* temp;
    cudaMalloc(&temp, bytes);
    size_t too_small = bytes - 1;
    EXPECT_EQ(cub::DeviceRadixSort::SortPairs(temp, too_small, keys, keys + n, vals, vals + n, n),
              cudaErrorInvalidValue);
    std::vector<int> k(n), v(n);
    for (int i = 0; i < n; i++) k[i] = (i * 37) % 11, v[i] = i;
    cudaMemcpy(keys, k.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(vals, v.data(), n * 4, cudaMemcpyHostToDevice);
    ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp, bytes, keys, keys + n, vals, vals + n, n, 0, 4), cudaSuccess);
    std::vector<int> sk(n), sv(n);
    cudaMemcpy(sk.data(), keys + n, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(sv.data(), vals + n, n * 4, cudaMemcpyDeviceToHost);
    for (int i = 1; i < n; i++) {
        ASSERT_LE(sk[i - 1], sk[i]);
        if (sk[i - 1] == sk[i]) {
            ASSERT_LT(sv[i - 1], sv[i]) << "not stable";
        }
    }
    cudaFree(temp);
    cudaFree(keys);
}

TEST(EmuRuntime, CublasLtRefusesWhatItDoesNotImplement) {
    cublasLtMatmulDesc_t desc;
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
              CUBLAS_STATUS_NOT_SUPPORTED);
    int32_t fast = 1;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
              CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulDesc_t half;
    EXPECT_EQ(cublasLtMatmulDescCreate(&half, CUBLAS_COMPUTE_16F, CUDA_R_32F), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST(EmuRuntime, CublasLtAlgorithmsHoldTheAlignmentTheyWereChosenFor) {
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayout_t l;
    cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 16, 16, 16);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref); // default: 256-byte aligned operands
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 1, &res, &found), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(found, 1);
    __nv_bfloat16* m;
    cudaMalloc(&m, 4 * 512 + 256);
    float alpha = 1, beta = 0;
    EXPECT_EQ(
        cublasLtMatmul(h, desc, &alpha, m, l, m + 256, l, &beta, m + 512, l, m + 512, l, &res.algo, nullptr, 0, 0),
        CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(
        cublasLtMatmul(h, desc, &alpha, m + 64, l, m + 256, l, &beta, m + 512, l, m + 512, l, &res.algo, nullptr, 0, 0),
        CUBLAS_STATUS_NOT_SUPPORTED)
        << "A at a 128-byte offset with an algorithm chosen for 256";
    cudaDeviceSynchronize();
    cudaFree(m);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    EXPECT_TRUE(emu::take_faults().empty());
}

// llmc/matmul.cuh: a failing cuBLASLt call names the problem, and the plan's descriptors are released.
TEST(EmuRuntime, MatmulFailuresNameTheProblemAndLeakNothing) {
    const int BT = 4, C = 16, OC = 8;
    llmc::floatX* buf;
    ASSERT_EQ(cudaMalloc(&buf, 4096), cudaSuccess);
    llmc::CublasLt::get();
    const int live = emu_cublaslt_live_objects();
    // An input one byte off: no algorithm takes a bf16 operand that is not even 2-byte aligned.
    const llmc::floatX* odd = reinterpret_cast<const llmc::floatX*>(reinterpret_cast<const char*>(buf + 512) + 1);
    try {
        llmc::matmul_forward(buf + 1024, odd, buf, buf + 256, BT, C, OC, nullptr, 0);
        ADD_FAILURE() << "a 1-byte-aligned operand was accepted";
    } catch (const llmc::Error& e) {
        EXPECT_NE(std::string(e.what()).find("m=8 n=4 k=16 transA=1 transB=0 epilogue BIAS"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(emu_cublaslt_live_objects(), live) << "descriptors of the failed plan were not released";
    // The same shape with proper operands builds one plan (4 objects: descriptor and 3 layouts) and reuses it.
    llmc::matmul_forward(buf + 1024, buf + 512, buf, buf + 256, BT, C, OC, nullptr, 0);
    const int after_first = emu_cublaslt_live_objects();
    EXPECT_EQ(after_first, live + 4);
    llmc::matmul_forward(buf + 1024, buf + 512, buf, buf + 256, BT, C, OC, nullptr, 0);
    EXPECT_EQ(emu_cublaslt_live_objects(), after_first) << "a second call rebuilt the plan";
    cudaDeviceSynchronize();
    cudaFree(buf);
    EXPECT_TRUE(emu::take_faults().empty());
}

TEST(EmuRuntime, FreshDeviceMemoryReadsAsNaN) {
    Buffer b(8);
    for (float v : b.get()) EXPECT_TRUE(std::isnan(v));
}

namespace {
// How much the emulated tier executed, printed once at the end of the run.
class EmuStatsLine : public testing::Environment {
    void TearDown() override {
        const emu::Stats& s = emu::stats();
        printf("emulated: %llu kernel launches, %llu blocks, %llu CUDA threads, %llu warp collectives\n",
               (unsigned long long)s.launches, (unsigned long long)s.blocks, (unsigned long long)s.threads,
               (unsigned long long)s.collectives);
    }
};
[[maybe_unused]] testing::Environment* const emu_stats_line = testing::AddGlobalTestEnvironment(new EmuStatsLine);
} // namespace
