/*
 * Fully connected layer on the CPU: out = inp @ weight^T + bias, weight (OC, C) stored (out, in) as in
 * PyTorch and llm.c. Three ways to compute it, chosen per call:
 *
 * - Few rows (BT <= ROWS_MAX: decode's matrix-vector products): rows_matmul streams each weight row once for
 *   all rows, dot products along C with vector loads of both operands (weight rows and inp rows are contiguous
 *   along C), so a decode step reads the weights once at memory speed.
 * - Otherwise, when a BLAS library is installed (llmc/util/cpu_blas.h: OpenBLAS or BLIS, opened at run time),
 *   its sgemm/dgemm, whose packed, cache-blocked kernels run near the cores' FMA peak.
 * - Otherwise the project's own register-tiled GEMM:
 *
 *   C(m, n) (+)= sum_k A(m, k) * B(k, n)
 *
 * where rows of B are contiguous along n (vector loads) and A is read one scalar at a time (broadcast),
 * so A may be any strided view, including a transposed one. The three products map onto it as
 *   forward   out^T (OC, BT)   = weight (OC, C)   x inp^T (C, BT)   (inp transposed once into a scratch copy)
 *   backward  dweight (OC, C) += dout^T (OC, BT) x inp (BT, C)
 *             dinp (BT, C)    += dout (BT, OC)   x weight (OC, C)
 *
 * Determinism: each output of ours and of rows_matmul is owned by one thread and summed in a fixed order, so
 * their results do not depend on the number of threads at all; a library's are the same run to run with a fixed
 * thread count (llmc/util/cpu_blas.h). The summation orders differ between the three, so a row's result
 * depends, in its last bits, on how many rows its call had (a decode step vs a prefill of the same token).
 */
#pragma once
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/util/cpu_blas.h"

namespace llmc::cpu {

/*
 * The tile shape depends on the vector ISA the translation unit is compiled for, and one program can link
 * translation units built for different ones (g++ -march=native objects beside nvcc host code): each ISA's
 * kernels live in their own inline namespace, so their symbols never merge across such objects.
 */
#if defined(__AVX512F__)
#define LLMC_GEMM_ISA avx512
#elif defined(__AVX__)
#define LLMC_GEMM_ISA avx
#else
#define LLMC_GEMM_ISA sse
#endif
inline namespace LLMC_GEMM_ISA {
namespace gemm_detail {

#if defined(__AVX512F__)
constexpr int VEC_BYTES = 64;
constexpr int MR = 12; // 12 rows x 2 vectors = 24 accumulators of the 32 vector registers
#elif defined(__AVX__)
constexpr int VEC_BYTES = 32;
constexpr int MR = 6; // 6 x 2 = 12 accumulators of 16 registers, leaving room for the B row and a broadcast
#else
constexpr int VEC_BYTES = 16;
constexpr int MR = 6;
#endif
constexpr int NV = 2; // vectors per tile row

template <typename Real> struct Vec {
    typedef Real type __attribute__((vector_size(VEC_BYTES)));
    static constexpr int width = VEC_BYTES / sizeof(Real);
};
template <typename Real> constexpr int NR = Vec<Real>::width * NV;

// One vector from p, any alignment, as one unaligned load instruction (a memcpy into an array of vectors makes
// GCC move the vectors through the stack).
template <typename Real> inline typename Vec<Real>::type loadu(const Real* p) {
    typedef Real U __attribute__((vector_size(VEC_BYTES), aligned(alignof(Real)), may_alias));
    return *reinterpret_cast<const U*>(p);
}
// Cache blocking: a KC x NC block of B (512 KiB of floats) stays in L2 while every tile of a thread's rows
// sweeps it, and a MR x KC strip of A stays in L1 across the NC / NR tiles of one row block.
template <typename Real> constexpr int KC = 512 * 4 / sizeof(Real);
constexpr int NC = 256;

// tile (mr x NR, row-major) = A(0:mr, 0:kc) * B(0:kc, 0:NR). Rows of A beyond mr are not touched.
template <typename Real, int mr>
void micro_kernel(int kc, const Real* a, long sam, long sak, const Real* b, long ldb, Real* tile) {
    using V = typename Vec<Real>::type;
    constexpr int W = Vec<Real>::width;
    V acc[mr][NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < NV; v++) acc[i][v] = V{};
    for (int k = 0; k < kc; k++) {
        V bv[NV];
        for (int v = 0; v < NV; v++) std::memcpy(&bv[v], b + k * ldb + v * W, sizeof(V)); // unaligned load
        const Real* ak = a + k * sak;
        for (int i = 0; i < mr; i++) {
            Real s = ak[i * sam];
            for (int v = 0; v < NV; v++) acc[i][v] += s * bv[v];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < NV; v++) std::memcpy(tile + i * NR<Real> + v * W, &acc[i][v], sizeof(V));
}

template <typename Real> using KernelFn = void (*)(int, const Real*, long, long, const Real*, long, Real*);

// kernels[mr - 1] handles a block of mr rows, so partial row blocks at the edge cost no wasted work.
template <typename Real, size_t... I> constexpr auto make_kernels(std::index_sequence<I...>) {
    return std::array<KernelFn<Real>, sizeof...(I)>{micro_kernel<Real, (int)I + 1>...};
}
template <typename Real> constexpr auto kernels = make_kernels<Real>(std::make_index_sequence<MR>{});

/*
 * C(m, n) = (overwrite ? bias_m[m] or 0 : C(m, n)) + sum_k A(m, k) B(k, n), m < M, n < N, k < K, with
 * A(m, k) = a[m*sam + k*sak], B(k, n) = b[k*ldb + n], C(m, n) = c[m*scm + n*scn].
 * Threads split the row tiles statically; every thread sees the same sequence of work-shared loops, so a
 * row tile stays with one thread across all k blocks and `nowait` is safe.
 */
template <typename Real> void gemm(int M, int N, int K, const Real* a, long sam, long sak, const Real* b, long ldb,
                                   Real* c, long scm, long scn, bool overwrite, const Real* bias_m) {
    constexpr int nr_full = NR<Real>, kc_max = KC<Real>;
    const int m_tiles = (M + MR - 1) / MR;
#pragma omp parallel
    {
        alignas(64) Real tile[MR * nr_full];
        // Partial column blocks (N not a multiple of NR) are copied into a zero-padded panel so the
        // kernel never reads past the end of a row of B.
        std::vector<Real> edge(N % nr_full ? (size_t)std::min(K, kc_max) * nr_full : 0);
        for (int k0 = 0; k0 < K; k0 += kc_max) {
            const int kc = std::min(kc_max, K - k0);
            const bool first = k0 == 0;
            for (int ng = 0; ng < N; ng += NC) {
                const int ng_end = std::min(N, ng + NC);
#pragma omp for schedule(static) nowait
                for (int mt = 0; mt < m_tiles; mt++) {
                    const int m0 = mt * MR, mr = std::min(MR, M - m0);
                    for (int n0 = ng; n0 < ng_end; n0 += nr_full) {
                        const int nr = std::min(nr_full, N - n0);
                        const Real* bp = b + (long)k0 * ldb + n0;
                        long bld = ldb;
                        if (nr < nr_full) {
                            for (int k = 0; k < kc; k++)
                                for (int j = 0; j < nr_full; j++)
                                    edge[k * nr_full + j] = j < nr ? bp[k * ldb + j] : Real(0);
                            bp = edge.data();
                            bld = nr_full;
                        }
                        kernels<Real>[mr - 1](kc, a + m0 * sam + (long)k0 * sak, sam, sak, bp, bld, tile);
                        for (int i = 0; i < mr; i++) {
                            Real* crow = c + (m0 + i) * scm + n0 * scn;
                            const Real* t = tile + i * nr_full;
                            if (overwrite && first) {
                                const Real init = bias_m ? bias_m[m0 + i] : Real(0);
                                for (int j = 0; j < nr; j++) crow[j * scn] = init + t[j];
                            } else {
                                for (int j = 0; j < nr; j++) crow[j * scn] += t[j];
                            }
                        }
                    }
                }
            }
        }
    }
}

/*
 * rows_matmul's inner block: out (R, OC) columns o0..o0+OB-1 = bias + inp (R, C) . weight rows o0..o0+OB-1.
 * OB weight rows and R inp rows at a time keep OB * R independent accumulator chains in registers, so the FMA
 * latency is hidden even for one row; each weight vector is loaded once and used R times. Per output: lanes
 * summed in order, then the C % W tail.
 */
template <typename Real, int R, int OB>
void rows_block(Real* out, const Real* inp, const Real* weight, const Real* bias, int C, int OC, int o0) {
    using V = typename Vec<Real>::type;
    constexpr int W = Vec<Real>::width;
    V acc[OB][R];
    for (int j = 0; j < OB; j++)
        for (int r = 0; r < R; r++) acc[j][r] = V{};
    int k = 0;
    for (; k + W <= C; k += W) {
        V w[OB];
        for (int j = 0; j < OB; j++) {
            __builtin_prefetch(weight + (size_t)(o0 + j + OB) * C + k, 0, 0);
            w[j] = loadu(weight + (size_t)(o0 + j) * C + k);
        }
        for (int r = 0; r < R; r++) {
            const V x = loadu(inp + (size_t)r * C + k);
            for (int j = 0; j < OB; j++) acc[j][r] += w[j] * x;
        }
    }
    for (int j = 0; j < OB; j++)
        for (int r = 0; r < R; r++) {
            Real lanes[W];
            const V a = acc[j][r];
            std::memcpy(lanes, &a, sizeof(a));
            Real s = 0;
            for (int l = 0; l < W; l++) s += lanes[l];
            for (int kk = k; kk < C; kk++) s += inp[(size_t)r * C + kk] * weight[(size_t)(o0 + j) * C + kk];
            out[(size_t)r * OC + o0 + j] = (bias ? bias[o0 + j] : Real(0)) + s;
        }
}

// Weight rows per block for a group of G inp rows: at most 8 accumulators, at least 4 chains (FMA latency).
template <int G> constexpr int rows_ob = G <= 2 ? 4 : 2;

// R inp rows as one or two groups of at most 4 (one group's accumulators fit the registers): each block of weight
// rows is read from memory once, for the second group from L1. Each output is one thread's.
template <typename Real, int R> void rows_matmul_r(Real* out, const Real* inp, const Real* weight, const Real* bias,
                                                   int C, int OC) {
    constexpr int G1 = R > 4 ? 4 : R, G2 = R - G1, OB = rows_ob<G1>;
    static_assert(G2 <= 4, "at most two groups of four rows");
    auto block = [&](auto ob_tag, int o0) {
        constexpr int ob = decltype(ob_tag)::value;
        rows_block<Real, G1, ob>(out, inp, weight, bias, C, OC, o0);
        if constexpr (G2 > 0) rows_block<Real, G2, ob>(out + (size_t)G1 * OC, inp + (size_t)G1 * C, weight, bias, C, OC, o0);
    };
    const int blocks = OC / OB;
    // Waking the other threads costs tens of microseconds with passive waiting: only for weights worth it.
#pragma omp parallel for schedule(static) if ((size_t)OC * C >= (1u << 16))
    for (int b = 0; b < blocks; b++) block(std::integral_constant<int, OB>{}, b * OB);
    for (int o = blocks * OB; o < OC; o++) block(std::integral_constant<int, 1>{}, o);
}

} // namespace gemm_detail
} // inline namespace LLMC_GEMM_ISA
#undef LLMC_GEMM_ISA

// Calls with at most this many rows take rows_matmul: below it a library's packing of the weights costs more
// than the products (measured: doc/cpu_reference.md, dev/cpu/gemm_bench.cpp).
constexpr int ROWS_MAX = 8;

// out (R, OC) = inp (R, C) @ weight (OC, C)^T + bias (OC), R <= ROWS_MAX; bias may be null.
template <typename Real>
void rows_matmul(Real* out, const Real* inp, const Real* weight, const Real* bias, int R, int C, int OC) {
    using namespace gemm_detail;
    switch (R) {
    case 1: return rows_matmul_r<Real, 1>(out, inp, weight, bias, C, OC);
    case 2: return rows_matmul_r<Real, 2>(out, inp, weight, bias, C, OC);
    case 3: return rows_matmul_r<Real, 3>(out, inp, weight, bias, C, OC);
    case 4: return rows_matmul_r<Real, 4>(out, inp, weight, bias, C, OC);
    case 5: return rows_matmul_r<Real, 5>(out, inp, weight, bias, C, OC);
    case 6: return rows_matmul_r<Real, 6>(out, inp, weight, bias, C, OC);
    case 7: return rows_matmul_r<Real, 7>(out, inp, weight, bias, C, OC);
    case 8: return rows_matmul_r<Real, 8>(out, inp, weight, bias, C, OC);
    }
    static_assert(ROWS_MAX == 8, "one case per row count");
}

// out (B, T, OC) = inp (B, T, C) @ weight (OC, C)^T + bias (OC); bias may be null.
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int B, int T, int C, int OC) {
    const int BT = B * T;
    if (BT <= ROWS_MAX) return rows_matmul(out, inp, weight, bias, BT, C, OC);
    if (const cpu_blas::Library* lib = cpu_blas::active()) {
        if (bias) {
#pragma omp parallel for
            for (int bt = 0; bt < BT; bt++) std::copy_n(bias, OC, out + (size_t)bt * OC);
        }
        cpu_blas::gemm(*lib, false, true, BT, OC, C, inp, C, weight, C, bias ? Real(1) : Real(0), out, OC);
        return;
    }
    // The GEMM wants its B operand contiguous along n = bt: a transposed copy of inp (small next to weight,
    // which is streamed exactly as stored).
    std::vector<Real> inp_t((size_t)C * BT);
#pragma omp parallel for
    for (int c = 0; c < C; c++)
        for (int bt = 0; bt < BT; bt++) inp_t[(size_t)c * BT + bt] = inp[(size_t)bt * C + c];
    gemm_detail::gemm<Real>(OC, BT, C, weight, C, 1, inp_t.data(), BT, out, 1, OC, true, bias);
}

// Accumulates: dinp (B, T, C) += dout @ weight; dweight (OC, C) += dout^T @ inp; dbias (OC) += sum over B, T
// of dout (skipped when null). dout (B, T, OC), inp (B, T, C), weight (OC, C).
template <typename Real> void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                                              const Real* weight, int B, int T, int C, int OC) {
    const int BT = B * T;
    if (const cpu_blas::Library* lib = cpu_blas::active()) {
        cpu_blas::gemm(*lib, false, false, BT, C, OC, dout, OC, weight, C, Real(1), dinp, C);
        cpu_blas::gemm(*lib, true, false, OC, C, BT, dout, OC, inp, C, Real(1), dweight, C);
    } else {
        gemm_detail::gemm<Real>(BT, C, OC, dout, OC, 1, weight, C, dinp, C, 1, false, nullptr);
        gemm_detail::gemm<Real>(OC, C, BT, dout, 1, OC, inp, C, dweight, C, 1, false, nullptr);
    }
    if (dbias) {
        constexpr int OB = 64; // a block of channels per thread, summed down the rows with unit-stride loads
#pragma omp parallel for
        for (int o0 = 0; o0 < OC; o0 += OB) {
            const int o1 = std::min(OC, o0 + OB);
            Real sum[OB] = {};
            for (int bt = 0; bt < BT; bt++) {
                const Real* row = dout + (size_t)bt * OC;
                for (int o = o0; o < o1; o++) sum[o - o0] += row[o];
            }
            for (int o = o0; o < o1; o++) dbias[o] += sum[o - o0];
        }
    }
}

} // namespace llmc::cpu
