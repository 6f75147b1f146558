// Hardware counters on a real GPU (llmc/profiler/cupti_counters.cuh): an 8192³ bf16 cuBLASLt GEMM under the range
// profiler. Skipped without a GPU, and when the driver does not let this user read counters.
#include <gtest/gtest.h>
#include <string>

#include "llmc/profiler/cupti_collector.cuh"
#include "llmc/profiler/cupti_counters.cuh"
#include "llmc/matmul.cuh"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using namespace llmc::prof;

namespace {

// x[i] = a uniform value in [-1, 1) from a hash of (seed, i): fresh inputs without a host round trip.
__global__ void fill_random_kernel(floatX* x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
        x[i] = __float2bfloat16((float)(h >> 40) / (float)(1ull << 23) - 1.0f);
    }
}

TEST(ProfilerCountersGpu, Bf16GemmCountsTwoMNKTensorFlops) {
    REQUIRE_GPU();
    // 128 MiB per matrix, several times the L2: the DRAM lower bound below holds however the replay's memory
    // save/restore leaves the cache.
    const int M = 8192, N = 8192, K = 8192;
    const size_t elems = (size_t)M * K;
    floatX *a, *b, *d;
    CUDA_CHECK(cudaMalloc(&a, elems * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&b, elems * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d, elems * sizeof(floatX)));
    fill_random_kernel<<<1024, 256>>>(a, elems, gputest::fresh_seed());
    fill_random_kernel<<<1024, 256>>>(b, elems, gputest::fresh_seed());
    CUDA_LAUNCH_CHECK();
    auto gemm = [&] {
        matmul_cublaslt(d, a, b, nullptr, M, N, K, true, false, false, CUBLASLT_EPILOGUE_DEFAULT, nullptr, 0);
    };
    gemm(); // the heuristic and module loading happen outside the counted call
    CUDA_CHECK(cudaDeviceSynchronize());

    CounterReport r = collect_counters(gemm, 16, [](const char* n) { return demangle(n); });
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(d));
    if (!r.collected && r.note.find("no permission") != std::string::npos) GTEST_SKIP() << r.note;
    ASSERT_TRUE(r.collected) << r.note;
    ASSERT_FALSE(r.kernels.empty());
    aggregate_counters(r);

    // cuBLASLt may split the GEMM over several kernels: the sum is what must be exact.
    EXPECT_EQ(r.total.tensor_flops, 2.0 * M * N * K);
    // A and B read and D written once is 384 MiB; at most an L2's worth of it can avoid DRAM.
    int l2 = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const double min_bytes = 3.0 * elems * sizeof(floatX) - l2;
    EXPECT_GE(r.total.dram_bytes, min_bytes);
    EXPECT_GE(r.total.l2_bytes, 3.0 * elems * sizeof(floatX));
    EXPECT_GT(r.total.time_ns, 0);
    // The achieved rate stays under the ceiling the counters report for the clocks the GEMM ran at.
    EXPECT_GT(r.total.tensor_ceiling_tflops(), 0);
    EXPECT_LE(r.total.tflops(), r.total.tensor_ceiling_tflops() * 1.02);
    EXPECT_GT(r.total.dram_ceiling_gbps(), 0);
}

} // namespace
