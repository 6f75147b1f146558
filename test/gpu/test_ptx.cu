// llmc/ptx.cuh against the PTX ISA's fragment layouts. Each test builds the fragments lane by lane from the
// layout tables written out here (independently of llmc/ptx.cuh's comments) and checks the results on the host:
// under the emulator this checks the emulation, on a device that the documented (and emulated) layout is the
// hardware's.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "llmc/ptx.cuh"
#include "test/gpu/gpu_test_util.cuh"

using gputest::DeviceBuffer;
using llmc::floatX;

namespace {

// mma.m16n8k16 .bf16: A (16x16 row-major), B (16x8, stored here as B[k*8+n]), C (16x8). One warp.
__global__ void mma_kernel(float* D, const floatX* A, const floatX* B, const float* C) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const auto a_at = [&](int r, int c) { return __bfloat162float(A[r * 16 + c]); };
    const auto b_at = [&](int k, int n) { return __bfloat162float(B[k * 8 + n]); };
    uint32_t a[4] = {llmc::ptx::pack_bf16x2(a_at(g, 2 * t), a_at(g, 2 * t + 1)),
                     llmc::ptx::pack_bf16x2(a_at(g + 8, 2 * t), a_at(g + 8, 2 * t + 1)),
                     llmc::ptx::pack_bf16x2(a_at(g, 2 * t + 8), a_at(g, 2 * t + 9)),
                     llmc::ptx::pack_bf16x2(a_at(g + 8, 2 * t + 8), a_at(g + 8, 2 * t + 9))};
    uint32_t b[2] = {llmc::ptx::pack_bf16x2(b_at(2 * t, g), b_at(2 * t + 1, g)),
                     llmc::ptx::pack_bf16x2(b_at(2 * t + 8, g), b_at(2 * t + 9, g))};
    float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    llmc::ptx::mma_bf16_16816(d, a, b);
    D[g * 8 + 2 * t] = d[0], D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2], D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// ldmatrix.x4 (plain or .trans) from a 32 x 8 bf16 tile staged in shared memory; lane l gives the address of
// tile row perm[l], so matrix j's row i is tile row perm[8j + i]. out[lane * 4 + j] = the lane's r[j].
__global__ void ldmatrix_kernel(uint32_t* out, const floatX* tile, const int* perm, int trans) {
    __shared__ __align__(16) floatX s[32 * 8];
    const int lane = threadIdx.x;
    for (int i = 0; i < 8; i++) s[lane * 8 + i] = tile[lane * 8 + i];
    __syncwarp();
    uint32_t r[4];
    if (trans) llmc::ptx::ldmatrix_x4_trans(r, s + perm[lane] * 8);
    else llmc::ptx::ldmatrix_x4(r, s + perm[lane] * 8);
    for (int j = 0; j < 4; j++) out[lane * 4 + j] = r[j];
}

// cp.async: each thread copies two 16-byte chunks in two groups (the second a zero fill when fill2 == 0) and
// stores what it reads after wait_group 1 (the first group landed) and after wait_group 0 (both). Under the
// emulator only (peek = 1) it also stores what the destination holds before any wait: on a device that read
// is a race and its value undefined.
__global__ void cp_async_kernel(uint4* out, const uint4* src, int fill2, int peek) {
    __shared__ __align__(16) uint4 s[2 * 64];
    const int i = threadIdx.x;
    llmc::ptx::cp_async_16(s + i, src + i, true);
    llmc::ptx::cp_async_commit();
    llmc::ptx::cp_async_16(s + 64 + i, src + 64 + i, fill2 != 0);
    llmc::ptx::cp_async_commit();
    if (peek) out[4 * 64 + i] = s[i];
    llmc::ptx::cp_async_wait<1>();
    out[i] = s[i];
    llmc::ptx::cp_async_wait<0>();
    out[64 + i] = s[i];
    out[2 * 64 + i] = s[64 + i];
}

// pack_bf16x2 as the attention kernels use it: out[i] = pack(in[2i], in[2i + 1]).
__global__ void pack_kernel(uint32_t* out, const float* in, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = llmc::ptx::pack_bf16x2(in[2 * i], in[2 * i + 1]);
}

uint16_t bits(float bf16_value) {
    const floatX b = __float2bfloat16(bf16_value);
    uint16_t u;
    std::memcpy(&u, &b, 2);
    return u;
}

} // namespace

GPU_TEST(GpuPtx, MmaFollowsTheIsaFragmentLayout) {
    REQUIRE_GPU();
    const std::vector<float> A = gputest::bf16_round(gputest::random_normal(16 * 16));
    const std::vector<float> B = gputest::bf16_round(gputest::random_normal(16 * 8));
    const std::vector<float> C = gputest::random_normal(16 * 8);
    DeviceBuffer<floatX> dA(gputest::to_bf16(A)), dB(gputest::to_bf16(B));
    DeviceBuffer<float> dC(C), dD(16 * 8);
    dD.poison();
    mma_kernel<<<1, 32>>>(dD, dA, dB, dC);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> D = dD.download();
    // bf16 products are exact in fp32; 16 fp32 additions: within 16 fp32 ulps of the sum of magnitudes.
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double exact = C[r * 8 + n], mag = std::fabs(C[r * 8 + n]);
            for (int k = 0; k < 16; k++) {
                exact += (double)A[r * 16 + k] * B[k * 8 + n];
                mag += std::fabs((double)A[r * 16 + k] * B[k * 8 + n]);
            }
            EXPECT_NEAR(D[r * 8 + n], exact, 16 * mag * 0x1p-24) << "D[" << r << "][" << n << "]";
        }
}

GPU_TEST(GpuPtx, LdmatrixFollowsTheIsaLayoutPlainAndTransposed) {
    REQUIRE_GPU();
    // Distinct values: element (row, col) of the 32 x 8 tile is row * 8 + col + 1 (exact in bf16 up to 256).
    std::vector<float> tile(32 * 8);
    for (int i = 0; i < 32 * 8; i++) tile[i] = (float)(i + 1);
    std::vector<int> perm(32);
    for (int i = 0; i < 32; i++) perm[i] = (i * 13 + 5) % 32; // a row order that is not the lane order
    DeviceBuffer<floatX> dtile(gputest::to_bf16(tile));
    DeviceBuffer<int> dperm(perm);
    for (int trans = 0; trans < 2; trans++) {
        SCOPED_TRACE(trans ? "ldmatrix.x4.trans" : "ldmatrix.x4");
        DeviceBuffer<uint32_t> dout(32 * 4);
        dout.poison();
        ldmatrix_kernel<<<1, 32>>>(dout, dtile, dperm, trans);
        CUDA_CHECK(cudaGetLastError());
        const std::vector<uint32_t> out = dout.download();
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane / 4, t = lane % 4;
            for (int j = 0; j < 4; j++) {
                // matrix j's row i is tile row perm[8j + i]; element (i, c) = tile[perm[8j + i]][c]
                const auto m = [&](int i, int c) { return tile[perm[8 * j + i] * 8 + c]; };
                const float lo = trans ? m(2 * t, g) : m(g, 2 * t), hi = trans ? m(2 * t + 1, g) : m(g, 2 * t + 1);
                const uint32_t want = bits(lo) | ((uint32_t)bits(hi) << 16);
                EXPECT_EQ(out[lane * 4 + j], want) << "lane " << lane << " register " << j;
            }
        }
    }
}

GPU_TEST(GpuPtx, CpAsyncLandsAtTheWaitThatCoversItsGroup) {
    REQUIRE_GPU();
    std::vector<uint32_t> words(2 * 64 * 4);
    for (size_t i = 0; i < words.size(); i++) words[i] = 0x01000193u * (uint32_t)(i + 1);
    DeviceBuffer<uint32_t> src(words);
    for (int fill2 = 0; fill2 < 2; fill2++) {
        DeviceBuffer<uint32_t> out(5 * 64 * 4);
        out.poison();
        cp_async_kernel<<<1, 64>>>(reinterpret_cast<uint4*>(out.ptr), reinterpret_cast<const uint4*>(src.ptr),
                                   fill2, gputest::kEmulated ? 1 : 0);
        CUDA_CHECK(cudaGetLastError());
        const std::vector<uint32_t> o = out.download();
        for (int i = 0; i < 64 * 4; i++) {
            EXPECT_EQ(o[i], words[i]) << "first group after wait_group 1, word " << i;
            EXPECT_EQ(o[64 * 4 + i], words[i]) << "first group after wait_group 0, word " << i;
            EXPECT_EQ(o[2 * 64 * 4 + i], fill2 ? words[64 * 4 + i] : 0u) << "second group (fill " << fill2 << ")";
            if (gputest::kEmulated) {
                EXPECT_EQ(o[4 * 64 * 4 + i], 0xffffffffu) << "before the wait: poison";
            }
        }
    }
}

// fp32 -> bf16 in pack_bf16x2 rounds to nearest, ties to even, as the CPU reference assumes: every element equals
// the rounding computed here from the bits, and the signed error, in bf16 ulps of each value's magnitude, averages
// to zero both over random values (a truncating conversion averages -1/2) and over exact ties (rounding ties away
// from zero averages +1/2), which a per-element tolerance alone would not show.
GPU_TEST(GpuPtx, PackBf16x2RoundsToNearestEven) {
    REQUIRE_GPU();
    const int pairs = 1 << 15;
    std::vector<float> x(2 * pairs); // elements [0, pairs): random values; [pairs, 2 pairs): exact ties
    std::mt19937 rng((uint32_t)gputest::fresh_seed());
    for (int i = 0; i < 2 * pairs; i++) {
        float v = std::ldexp(1.0f + (float)(rng() % (1u << 23)) / (float)(1u << 23), (int)(rng() % 17) - 8);
        uint32_t u;
        std::memcpy(&u, &v, 4);
        if (rng() % 2) u |= 0x80000000u;
        if (i >= pairs) u = (u & 0xffff0000u) | 0x8000u; // halfway between two bf16 values
        std::memcpy(&x[i], &u, 4);
    }
    DeviceBuffer<float> in(x);
    DeviceBuffer<uint32_t> out(pairs);
    pack_kernel<<<pairs / 256, 256>>>(out.ptr, in.ptr, pairs);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<uint32_t> o = out.download();
    double mean_err[2] = {0, 0};
    for (int i = 0; i < 2 * pairs; i++) {
        uint32_t u;
        std::memcpy(&u, &x[i], 4);
        const uint16_t want = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        const uint16_t got = (uint16_t)(i % 2 ? o[i / 2] >> 16 : o[i / 2] & 0xffffu);
        ASSERT_EQ(got, want) << "element " << i << " = " << x[i];
        const uint32_t back = (uint32_t)got << 16;
        float b;
        std::memcpy(&b, &back, 4);
        const double ulp = std::ldexp(1.0, std::ilogb(x[i]) - 7);
        mean_err[i >= pairs] += (std::fabs((double)b) - std::fabs((double)x[i])) / ulp / pairs;
    }
    EXPECT_LT(std::fabs(mean_err[0]), 0.01) << "random values: a biased conversion";
    EXPECT_LT(std::fabs(mean_err[1]), 0.02) << "exact ties: not to even";
}
