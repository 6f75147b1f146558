/*
 * The emulator's own checks (suite EmuRuntime): each test writes a small kernel or call with a known defect and
 * asserts that the emulator reports it, and the correct version next to it that it does not. Built only
 * against the emulator (test/emu/rewrite.py turns the launches and __shared__ declarations into its calls).
 */
#include <cmath>
#include <cstring>
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

TEST(EmuRuntime, AMissingBarrierShowsAsADifferenceBetweenSchedules) {
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
