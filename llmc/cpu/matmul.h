/*
 * Fully connected layer on the CPU: out = inp @ weight^T + bias, weight (OC, C) stored (out, in) as in
 * PyTorch and llm.c. Forward and both backward products go through one register-tiled GEMM driver:
 *
 *   C(m, n) (+)= sum_k A(m, k) * B(k, n)
 *
 * where rows of B are contiguous along n (vector loads) and A is read one scalar at a time (broadcast),
 * so A may be any strided view, including a transposed one. The three products map onto it as
 *   forward   out^T (OC, BT)   = weight (OC, C)   x inp^T (C, BT)   (inp transposed once into a scratch copy)
 *   backward  dweight (OC, C) += dout^T (OC, BT) x inp (BT, C)
 *             dinp (BT, C)    += dout (BT, OC)   x weight (OC, C)
 * Each output tile is owned by one thread and summed in a fixed k order, so the results do not depend on the
 * number of threads at all, and no atomics or reductions across threads are needed.
 */
#pragma once
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

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

} // namespace gemm_detail
} // inline namespace LLMC_GEMM_ISA
#undef LLMC_GEMM_ISA

// out (B, T, OC) = inp (B, T, C) @ weight (OC, C)^T + bias (OC); bias may be null.
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int B, int T, int C, int OC) {
    const int BT = B * T;
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
    gemm_detail::gemm<Real>(BT, C, OC, dout, OC, 1, weight, C, dinp, C, 1, false, nullptr);
    gemm_detail::gemm<Real>(OC, C, BT, dout, 1, OC, inp, C, dweight, C, 1, false, nullptr);
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
