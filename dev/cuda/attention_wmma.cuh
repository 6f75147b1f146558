/*
 * The previous rung of the attention ladder, kept for the benchmark (dev/cuda/attention.cu): the fused causal
 * attention as it was before llmc/attention.cuh moved to mma.sync, ldmatrix and cp.async. HS = 64 only.
 *
 * WMMA bf16 16x16x16 fragments with fp32 accumulators. Forward: one block of 4 warps per (batch*head, 64-query
 * tile); S = Q K^T is staged through shared memory (the WMMA accumulator layout is opaque), an online softmax in
 * the log2 domain turns it into bf16 P, O += P V stays in fragments and goes through shared memory when a row max
 * grows. Backward: D = rowsum(dO * O); one kernel per 64-key tile for dK, dV; one per 64-query tile for dQ; S, P,
 * dP and dS staged through shared memory. K/V tiles are loaded synchronously (no cp.async), fragments with
 * wmma::load_matrix_sync. Same shapes, outputs and determinism as llmc/attention.cuh; scratch: (B, NH, T) floats.
 */
#pragma once
#include <climits>
#include <cstdint>
#include <mma.h>

#include "llmc/attention.cuh"
#include "llmc/cuda_common.cuh"

namespace wmma_attention {
using namespace llmc;
namespace detail {
// The same shape checks and D = rowsum(dO * O) kernel as llmc/attention.cuh's.
using llmc::attention_detail::attention_backward_d_kernel;
using llmc::attention_detail::check_shape;

namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kStrip = 16;               // rows owned by one warp (one WMMA tile high)
constexpr int kRows = kWarps * kStrip;   // the block's own tile: 64 query rows (forward, dQ) or key rows (dK/dV)
// Inner tile (the dimension each block loops over). Multiples of 32 (one softmax column per lane per 32).
constexpr int kFwdBK = 64;   // keys per tile in the forward
constexpr int kDkvBQ = 64;   // queries per tile in the dK/dV kernel
constexpr int kDqBK = 64;    // keys per tile in the dQ kernel

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__host__ __device__ constexpr size_t align128(size_t x) { return (x + 127) / 128 * 128; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

/*
 * Shared-memory rows are padded: bf16 rows by 8 elements (row stride = 16 B mod 128 B) and fp32 rows by 4
 * (16 B mod 128 B), so the 8 rows touched by one ldmatrix-style phase hit 8 distinct 16-byte bank groups.
 * Padding keeps WMMA's requirements: ldm a multiple of 8 (bf16) / 4 (fp32) elements and every fragment
 * pointer 32-byte aligned (16 rows * ldm * 2 B = 32 * ldm B; region bases are 128-byte aligned).
 * LDF (fp32 strips) is wide enough for both a score strip (16 x inner tile) and an output strip
 * (16 x HS), so the epilogue stages its result in the warp's own strip.
 */
template <int HS, int BK> struct FwdLayout {
    static constexpr int LDH = HS + 8, LDP = BK + 8, LDF = imax(BK, HS) + 4;
    static constexpr size_t q = 0;                                           // Q  kRows x LDH bf16
    static constexpr size_t k = q + align128(size_t(kRows) * LDH * 2);       // K  BK x LDH bf16
    static constexpr size_t v = k + align128(size_t(BK) * LDH * 2);          // V  BK x LDH bf16
    static constexpr size_t f = v + align128(size_t(BK) * LDH * 2);          // S / O staging  kRows x LDF fp32
    static constexpr size_t p = f + align128(size_t(kRows) * LDF * 4);       // P  kRows x LDP bf16
    static constexpr size_t alpha = p + align128(size_t(kRows) * LDP * 2);   // per-row O rescale factors, fp32
    static constexpr size_t bytes = alpha + align128(size_t(kRows) * 4);
};
template <int HS, int BQ> struct DkvLayout {
    static constexpr int LDH = HS + 8, LDP = BQ + 8, LDF = imax(BQ, HS) + 4;
    static constexpr size_t q = 0;                                           // Q   BQ x LDH bf16
    static constexpr size_t dout = q + align128(size_t(BQ) * LDH * 2);       // dO  BQ x LDH bf16
    static constexpr size_t f1 = dout + align128(size_t(BQ) * LDH * 2);      // S^T / K staging / dK  kRows x LDF fp32
    static constexpr size_t f2 = f1 + align128(size_t(kRows) * LDF * 4);     // dP^T / V staging / dV kRows x LDF fp32
    static constexpr size_t p = f2 + align128(size_t(kRows) * LDF * 4);      // P^T  kRows x LDP bf16
    static constexpr size_t ds = p + align128(size_t(kRows) * LDP * 2);      // dS^T kRows x LDP bf16
    static constexpr size_t lse2 = ds + align128(size_t(kRows) * LDP * 2);   // BQ fp32 (log2 domain)
    static constexpr size_t d = lse2 + align128(size_t(BQ) * 4);             // BQ fp32
    static constexpr size_t bytes = d + align128(size_t(BQ) * 4);
    static_assert(size_t(kRows) * LDH * 2 <= size_t(kRows) * LDF * 4, "K/V staging must fit in F1/F2");
};
template <int HS, int BK> struct DqLayout {
    static constexpr int LDH = HS + 8, LDP = BK + 8, LDF = imax(BK, HS) + 4;
    static constexpr size_t k = 0;                                           // K   BK x LDH bf16
    static constexpr size_t v = k + align128(size_t(BK) * LDH * 2);          // V   BK x LDH bf16
    static constexpr size_t f1 = v + align128(size_t(BK) * LDH * 2);         // S / Q staging / dQ  kRows x LDF fp32
    static constexpr size_t f2 = f1 + align128(size_t(kRows) * LDF * 4);     // dP / dO staging     kRows x LDF fp32
    static constexpr size_t ds = f2 + align128(size_t(kRows) * LDF * 4);     // dS  kRows x LDP bf16
    static constexpr size_t lse2 = ds + align128(size_t(kRows) * LDP * 2);   // kRows fp32 (log2 domain)
    static constexpr size_t d = lse2 + align128(size_t(kRows) * 4);          // kRows fp32
    static constexpr size_t bytes = d + align128(size_t(kRows) * 4);
    static_assert(size_t(kRows) * LDH * 2 <= size_t(kRows) * LDF * 4, "Q/dO staging must fit in F1/F2");
};

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/*
 * Block-cooperative load of ROWS rows of HS bf16 into shared memory (row stride LD), 16 bytes per thread
 * per step. Source row i is src + (row0 + i) * stride; rows at or past T are zero-filled and never read,
 * so a partial last tile reads nothing out of bounds and contributes exact zeros to the products.
 */
template <int ROWS, int HS, int LD>
__device__ __forceinline__ void load_tile(floatX* dst, const floatX* __restrict__ src, size_t stride, int row0, int T) {
    static_assert(HS % 8 == 0, "16-byte chunks");
    constexpr int CH = HS / 8, N = ROWS * CH, ITERS = (N + kThreads - 1) / kThreads;
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const int i = it * kThreads + (int)threadIdx.x;
        if (i < N) {
            const int r = i / CH, c = i % CH;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (row0 + r < T) val = __ldg(reinterpret_cast<const uint4*>(src + (size_t)(row0 + r) * stride + c * 8));
            *reinterpret_cast<uint4*>(dst + r * LD + c * 8) = val;
        }
    }
}

// Warp-cooperative store of a 16 x HS fp32 strip (row stride LDF) to global bf16 rows row0.. (< T only).
template <int HS, int LDF>
__device__ __forceinline__ void store_strip(floatX* __restrict__ dst, size_t stride, int row0, int T, const float* src,
                                            int lane) {
    constexpr int CH = HS / 8;
    static_assert(LDF % 4 == 0, "float4 reads of the strip");
    for (int i = lane; i < kStrip * CH; i += 32) {
        const int r = i / CH, c = i % CH;
        if (row0 + r < T) {
            const float4 a = *reinterpret_cast<const float4*>(src + r * LDF + c * 8);
            const float4 b = *reinterpret_cast<const float4*>(src + r * LDF + c * 8 + 4);
            x128 o;
            o[0] = __float2bfloat16(a.x), o[1] = __float2bfloat16(a.y), o[2] = __float2bfloat16(a.z);
            o[3] = __float2bfloat16(a.w), o[4] = __float2bfloat16(b.x), o[5] = __float2bfloat16(b.y);
            o[6] = __float2bfloat16(b.z), o[7] = __float2bfloat16(b.w);
            store128(dst + (size_t)(row0 + r) * stride + c * 8, o);
        }
    }
}

// The warp's 16-row strips of two bf16 tiles staged in shared memory (row stride LD) as A fragments, kept in
// registers: a1[k], a2[k] hold columns 16k .. 16k+15.
template <int NK, int LD>
__device__ __forceinline__ void load_strip_frags(FragA (&a1)[NK], FragA (&a2)[NK], const floatX* s1, const floatX* s2) {
#pragma unroll
    for (int k = 0; k < NK; k++) {
        wmma::load_matrix_sync(a1[k], s1 + k * 16, LD);
        wmma::load_matrix_sync(a2[k], s2 + k * 16, LD);
    }
}

// Query-row statistics of rows q0 .. q0+ROWS-1 into shared memory: lse in the log2 domain, and D. Rows at or
// past T get 0 (their scores are masked).
template <int ROWS>
__device__ __forceinline__ void load_row_stats(float* lse2s, float* Ds, const float* __restrict__ lse,
                                               const float* __restrict__ D, size_t row_stats, int q0, int T) {
    for (int i = threadIdx.x; i < ROWS; i += kThreads) {
        const bool ok = q0 + i < T;
        lse2s[i] = ok ? lse[row_stats + q0 + i] * kLog2e : 0.0f;
        Ds[i] = ok ? D[row_stats + q0 + i] : 0.0f;
    }
}

/*
 * Both products of a backward step for the warp's 16 rows x NB*16 columns, into fp32 strips (row stride
 * LDF): F1w = A1 B1^T and F2w = A2 B2^T, the B tiles stored row-major (column, dim) with row stride LDH and
 * read as col_major matrix_b. S and dP (dQ kernel), or S^T and dP^T (dK/dV kernel).
 */
template <int NB, int NK, int LDH, int LDF>
__device__ __forceinline__ void strip_products(float* F1w, float* F2w, const FragA (&a1)[NK], const floatX* b1,
                                               const FragA (&a2)[NK], const floatX* b2) {
#pragma unroll
    for (int n = 0; n < NB; n++) {
        FragAcc p1, p2;
        wmma::fill_fragment(p1, 0.0f);
        wmma::fill_fragment(p2, 0.0f);
#pragma unroll
        for (int k = 0; k < NK; k++) {
            FragBCol f1, f2;
            wmma::load_matrix_sync(f1, b1 + n * 16 * LDH + k * 16, LDH);
            wmma::mma_sync(p1, a1[k], f1, p1);
            wmma::load_matrix_sync(f2, b2 + n * 16 * LDH + k * 16, LDH);
            wmma::mma_sync(p2, a2[k], f2, p2);
        }
        wmma::store_matrix_sync(F1w + n * 16, p1, LDF, wmma::mem_row_major);
        wmma::store_matrix_sync(F2w + n * 16, p2, LDF, wmma::mem_row_major);
    }
}

// acc *= s, elementwise (the layout is opaque, but a uniform scale does not need it).
template <int N> __device__ __forceinline__ void scale_frags(FragAcc (&acc)[N], float s) {
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int i = 0; i < acc[n].num_elements; i++) acc[n].x[i] *= s;
}

// ------------------------------------------------------------------------------------------------------
// Forward. Grid (B*NH, ceil(T/64)); the y index is reversed so the longest (last) query tiles start first.
// ------------------------------------------------------------------------------------------------------
template <int HS, int BK>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(floatX* __restrict__ out, float* __restrict__ lse, const floatX* __restrict__ qkv, int T,
                             int NH) {
    using L = FwdLayout<HS, BK>;
    constexpr int LDH = L::LDH, LDP = L::LDP, LDF = L::LDF;
    constexpr int NK = HS / 16, NB = BK / 16, CPL = BK / 32;
    static_assert(HS % 16 == 0 && BK % 32 == 0, "tile shapes");
    extern __shared__ __align__(128) unsigned char attn_smem[];
    floatX* Qs = reinterpret_cast<floatX*>(attn_smem + L::q);
    floatX* Ks = reinterpret_cast<floatX*>(attn_smem + L::k);
    floatX* Vs = reinterpret_cast<floatX*>(attn_smem + L::v);
    float* Fs = reinterpret_cast<float*>(attn_smem + L::f);
    floatX* Ps = reinterpret_cast<floatX*>(attn_smem + L::p);
    float* alpha_s = reinterpret_cast<float*>(attn_smem + L::alpha);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kRows;
    const int qw = q0 + warp * kStrip; // first query row of this warp
    const int C = NH * HS;
    const size_t C3 = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * C3 + (size_t)h * HS; // row t of part p: base + t*C3 + p*C
    float* Fw = Fs + warp * kStrip * LDF;                            // this warp's private strips
    floatX* Pw = Ps + warp * kStrip * LDP;
    float* alpha_w = alpha_s + warp * kStrip;

    load_tile<kRows, HS, LDH>(Qs, base, C3, q0, T);
    __syncthreads();
    FragA qa[NK]; // the warp's 16 query rows stay in registers for the whole key loop
#pragma unroll
    for (int k = 0; k < NK; k++) wmma::load_matrix_sync(qa[k], Qs + warp * kStrip * LDH + k * 16, LDH);
    FragAcc o[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(o[n], 0.0f);

    // Running statistics per row, replicated in every lane (all lanes compute them from warp-reduced values,
    // so every lane holds bitwise the same m); l is a per-lane partial sum, reduced once at the end.
    float m_run[kStrip], l_run[kStrip];
#pragma unroll
    for (int r = 0; r < kStrip; r++) m_run[r] = -INFINITY, l_run[r] = 0.0f;
    const float sl2 = (1.0f / sqrtf((float)HS)) * kLog2e; // softmax in base 2: exp(x*scale) = 2^(x*scale*log2 e)

    const int n_kt = ceil_div(min(T, q0 + kRows), BK); // key tiles at or below the diagonal
    for (int kt = 0; kt < n_kt; kt++) {
        const int k0 = kt * BK;
        __syncthreads(); // every warp is done with the previous K/V tile
        load_tile<BK, HS, LDH>(Ks, base + C, C3, k0, T);
        load_tile<BK, HS, LDH>(Vs, base + 2 * C, C3, k0, T);
        __syncthreads();
        // Warp-uniform skip: rows past T are never stored; a strip entirely above the diagonal (only possible
        // when BK > 16) adds nothing. No block barrier below this point in the iteration.
        if (qw >= T || k0 > qw + kStrip - 1) continue;

        // S = Q K^T for 16 rows x BK keys. K is stored row-major (key, dim) = column-major K^T, so it is read
        // as a col_major matrix_b: element (dim d, key n) at Ks[n*LDH + d].
#pragma unroll
        for (int n = 0; n < NB; n++) {
            FragAcc s;
            wmma::fill_fragment(s, 0.0f);
#pragma unroll
            for (int k = 0; k < NK; k++) {
                FragBCol kb;
                wmma::load_matrix_sync(kb, Ks + n * 16 * LDH + k * 16, LDH);
                wmma::mma_sync(s, qa[k], kb, s);
            }
            wmma::store_matrix_sync(Fw + n * 16, s, LDF, wmma::mem_row_major);
        }
        __syncwarp(); // S stores of all lanes visible before the row pass

        // Online softmax, one row at a time across the warp (lane owns columns lane + 32c: conflict-free).
        bool rescale = false;
#pragma unroll
        for (int r = 0; r < kStrip; r++) {
            const int q = qw + r;
            float s[CPL];
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int key = k0 + lane + 32 * c;
                const float x = Fw[r * LDF + lane + 32 * c] * sl2;
                s[c] = (key <= q && key < T) ? x : -INFINITY; // causal mask, and keys past T (zero-filled) out
                mx = fmaxf(mx, s[c]);
            }
            mx = warp_max(mx);
            const float m_old = m_run[r];
            const float m_new = fmaxf(m_old, mx);
            // A row with no unmasked key so far keeps m = -inf; subtracting 0 instead avoids (-inf) - (-inf)
            // = NaN, and gives p = 2^-inf = 0 and alpha = 0 (its O and l are still 0, so nothing is lost).
            const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;
            const float a = exp2f(m_old - m_use);
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const float p = exp2f(s[c] - m_use);
                Pw[r * LDP + lane + 32 * c] = __float2bfloat16(p);
                sum += p;
            }
            l_run[r] = l_run[r] * a + sum;
            m_run[r] = m_new;
            if (lane == 0) alpha_w[r] = a;
            // O needs rescaling only where a != 1 and O may be non-zero (m_old finite). Warp-uniform.
            rescale |= (a != 1.0f) && (m_old != -INFINITY);
        }
        __syncwarp(); // P and alpha visible to all lanes; all reads of the S strip done before it is reused

        if (rescale) {
            // The accumulator layout is opaque: round-trip O through the (now free) S strip to scale rows.
#pragma unroll
            for (int n = 0; n < HS / 16; n++) wmma::store_matrix_sync(Fw + n * 16, o[n], LDF, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int r = 0; r < kStrip; r++) {
                const float a = alpha_w[r];
                for (int d = lane; d < HS; d += 32) Fw[r * LDF + d] *= a;
            }
            __syncwarp();
#pragma unroll
            for (int n = 0; n < HS / 16; n++) wmma::load_matrix_sync(o[n], Fw + n * 16, LDF, wmma::mem_row_major);
        }

        // O += P V (P: 16 x BK row-major; V: BK x HS row-major).
        FragA pa[NB];
#pragma unroll
        for (int k = 0; k < NB; k++) wmma::load_matrix_sync(pa[k], Pw + k * 16, LDP);
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
#pragma unroll
            for (int k = 0; k < NB; k++) {
                FragBRow vb;
                wmma::load_matrix_sync(vb, Vs + k * 16 * LDH + n * 16, LDH);
                wmma::mma_sync(o[n], pa[k], vb, o[n]);
            }
    }

    // Epilogue: O / l, lse = ln(sum 2^(x - m)) + m ln 2. Rows past T are skipped by store_strip.
    __syncwarp(); // other lanes' last reads of the strip (S pass / O reload) precede these stores
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::store_matrix_sync(Fw + n * 16, o[n], LDF, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < kStrip; r++) {
        const float l = warp_sum(l_run[r]);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int d = lane; d < HS; d += 32) Fw[r * LDF + d] *= inv;
        if (lane == 0 && qw + r < T)
            lse[(size_t)bh * T + qw + r] = l > 0.0f ? (m_run[r] + log2f(l)) * kLn2 : -INFINITY;
    }
    __syncwarp();
    store_strip<HS, LDF>(out + (size_t)b * T * C + (size_t)h * HS, C, qw, T, Fw, lane);
}

// ------------------------------------------------------------------------------------------------------
// Backward, step 2: dK, dV for one 64-key tile, looping over the query tiles at or below the diagonal.
// Grid (B*NH, ceil(T/64)); tile 0 (the most query tiles) first. Per warp: 16 keys, computed transposed:
//   S^T = K Q^T, P^T = 2^(S^T*scale*log2e - lse2), dP^T = V dO^T, dS^T = P^T (dP^T - D),
//   dV += P^T dO, dK += scale * dS^T Q.
// ------------------------------------------------------------------------------------------------------
template <int HS, int BQ>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                   const float* __restrict__ lse, const float* __restrict__ D,
                                   const floatX* __restrict__ qkv, int T, int NH) {
    using L = DkvLayout<HS, BQ>;
    constexpr int LDH = L::LDH, LDP = L::LDP, LDF = L::LDF;
    constexpr int NK = HS / 16, NB = BQ / 16, CPL = BQ / 32;
    static_assert(HS % 16 == 0 && BQ % 32 == 0 && kRows % BQ == 0, "tile shapes");
    extern __shared__ __align__(128) unsigned char attn_smem[];
    floatX* Qs = reinterpret_cast<floatX*>(attn_smem + L::q);
    floatX* dOs = reinterpret_cast<floatX*>(attn_smem + L::dout);
    float* F1 = reinterpret_cast<float*>(attn_smem + L::f1);
    float* F2 = reinterpret_cast<float*>(attn_smem + L::f2);
    floatX* Pb = reinterpret_cast<floatX*>(attn_smem + L::p);
    floatX* dSb = reinterpret_cast<floatX*>(attn_smem + L::ds);
    float* lse2s = reinterpret_cast<float*>(attn_smem + L::lse2);
    float* Ds = reinterpret_cast<float*>(attn_smem + L::d);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * kRows;
    const int kw = k0 + warp * kStrip; // first key row of this warp
    const int C = NH * HS;
    const size_t C3 = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const floatX* dobase = dout + (size_t)b * T * C + (size_t)h * HS;
    float* F1w = F1 + warp * kStrip * LDF;
    float* F2w = F2 + warp * kStrip * LDF;
    floatX* Pw = Pb + warp * kStrip * LDP;
    floatX* dSw = dSb + warp * kStrip * LDP;

    // K and V of this tile are only ever A operands of the warp's own rows: stage them through F1/F2 once,
    // keep the fragments in registers.
    {
        floatX* Kst = reinterpret_cast<floatX*>(F1);
        floatX* Vst = reinterpret_cast<floatX*>(F2);
        load_tile<kRows, HS, LDH>(Kst, base + C, C3, k0, T);
        load_tile<kRows, HS, LDH>(Vst, base + 2 * C, C3, k0, T);
    }
    __syncthreads();
    FragA ka[NK], va[NK];
    load_strip_frags<NK, LDH>(ka, va, reinterpret_cast<const floatX*>(F1) + warp * kStrip * LDH,
                              reinterpret_cast<const floatX*>(F2) + warp * kStrip * LDH);
    __syncthreads(); // every warp holds its fragments before any warp writes scores into F1/F2

    FragAcc dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
    const float scale = 1.0f / sqrtf((float)HS);
    const float sl2 = scale * kLog2e;
    const size_t row_stats = (size_t)bh * T; // lse and D rows of this (b, h)

    // Queries below k0 attend no key of this tile, so start at the query tile holding k0.
    const int qt_end = ceil_div(T, BQ);
    for (int qt = k0 / BQ; qt < qt_end; qt++) {
        const int q0 = qt * BQ;
        __syncthreads(); // every warp is done with the previous Q / dO / lse / D tile
        load_tile<BQ, HS, LDH>(Qs, base, C3, q0, T);
        load_tile<BQ, HS, LDH>(dOs, dobase, C, q0, T);
        load_row_stats<BQ>(lse2s, Ds, lse, D, row_stats, q0, T);
        __syncthreads();
        // Warp-uniform skip: keys past T are never stored; if the last query of the tile is below the
        // warp's first key, every (key, query) pair is masked. No block barrier below this point.
        if (kw >= T || q0 + BQ - 1 < kw) continue;

        // S^T = K Q^T (16 keys x BQ queries) into F1w, dP^T = V dO^T into F2w.
        strip_products<NB, NK, LDH, LDF>(F1w, F2w, ka, Qs, va, dOs);
        __syncwarp();

        // P^T and dS^T, elementwise; column = query. Masked pairs give p = 0, hence ds = 0.
#pragma unroll
        for (int r = 0; r < kStrip; r++) {
            const int key = kw + r;
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int col = lane + 32 * c, q = q0 + col;
                const float s = F1w[r * LDF + col], dpv = F2w[r * LDF + col];
                const float p = (key <= q && q < T && key < T) ? exp2f(fmaf(s, sl2, -lse2s[col])) : 0.0f;
                Pw[r * LDP + col] = __float2bfloat16(p);
                dSw[r * LDP + col] = __float2bfloat16(p * (dpv - Ds[col]));
            }
        }
        __syncwarp();

        // dV += P^T dO, dK += dS^T Q (B operands row-major: (query, dim)).
#pragma unroll
        for (int k = 0; k < NB; k++) {
            FragA pa, sa;
            wmma::load_matrix_sync(pa, Pw + k * 16, LDP);
            wmma::load_matrix_sync(sa, dSw + k * 16, LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                FragBRow gb, qb;
                wmma::load_matrix_sync(gb, dOs + k * 16 * LDH + n * 16, LDH);
                wmma::mma_sync(dv[n], pa, gb, dv[n]);
                wmma::load_matrix_sync(qb, Qs + k * 16 * LDH + n * 16, LDH);
                wmma::mma_sync(dk[n], sa, qb, dk[n]);
            }
        }
    }

    // Epilogue: stage dK, dV in the warp's own F1/F2 strips (16 x LDF, LDF >= HS + 4), then store bf16.
    scale_frags(dk, scale);
    __syncwarp(); // other lanes' last reads of F1w/F2w (elementwise pass) precede these stores
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
        wmma::store_matrix_sync(F1w + n * 16, dk[n], LDF, wmma::mem_row_major);
        wmma::store_matrix_sync(F2w + n * 16, dv[n], LDF, wmma::mem_row_major);
    }
    __syncwarp();
    floatX* dbase = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
    store_strip<HS, LDF>(dbase + C, C3, kw, T, F1w, lane);
    store_strip<HS, LDF>(dbase + 2 * C, C3, kw, T, F2w, lane);
}

// ------------------------------------------------------------------------------------------------------
// Backward, step 3: dQ for one 64-query tile, looping over the key tiles at or above the diagonal.
// Grid (B*NH, ceil(T/64)), y reversed (longest first). Per warp: 16 queries,
//   S = Q K^T, P = 2^(S*scale*log2e - lse2), dP = dO V^T, dS = P (dP - D), dQ += scale * dS K.
// ------------------------------------------------------------------------------------------------------
template <int HS, int BK>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                 const float* __restrict__ lse, const float* __restrict__ D,
                                 const floatX* __restrict__ qkv, int T, int NH) {
    using L = DqLayout<HS, BK>;
    constexpr int LDH = L::LDH, LDP = L::LDP, LDF = L::LDF;
    constexpr int NK = HS / 16, NB = BK / 16, CPL = BK / 32;
    static_assert(HS % 16 == 0 && BK % 32 == 0, "tile shapes");
    extern __shared__ __align__(128) unsigned char attn_smem[];
    floatX* Ks = reinterpret_cast<floatX*>(attn_smem + L::k);
    floatX* Vs = reinterpret_cast<floatX*>(attn_smem + L::v);
    float* F1 = reinterpret_cast<float*>(attn_smem + L::f1);
    float* F2 = reinterpret_cast<float*>(attn_smem + L::f2);
    floatX* dSb = reinterpret_cast<floatX*>(attn_smem + L::ds);
    float* lse2s = reinterpret_cast<float*>(attn_smem + L::lse2);
    float* Ds = reinterpret_cast<float*>(attn_smem + L::d);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kRows;
    const int qw = q0 + warp * kStrip;
    const int C = NH * HS;
    const size_t C3 = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    float* F1w = F1 + warp * kStrip * LDF;
    float* F2w = F2 + warp * kStrip * LDF;
    floatX* dSw = dSb + warp * kStrip * LDP;

    // Q and dO of this tile are only A operands of the warp's own rows: stage through F1/F2, keep fragments.
    load_tile<kRows, HS, LDH>(reinterpret_cast<floatX*>(F1), base, C3, q0, T);
    load_tile<kRows, HS, LDH>(reinterpret_cast<floatX*>(F2), dout + (size_t)b * T * C + (size_t)h * HS, C, q0, T);
    const size_t row_stats = (size_t)bh * T;
    load_row_stats<kRows>(lse2s, Ds, lse, D, row_stats, q0, T);
    __syncthreads();
    FragA qa[NK], ga[NK];
    load_strip_frags<NK, LDH>(qa, ga, reinterpret_cast<const floatX*>(F1) + warp * kStrip * LDH,
                              reinterpret_cast<const floatX*>(F2) + warp * kStrip * LDH);
    __syncthreads(); // every warp holds its fragments before any warp writes scores into F1/F2

    FragAcc dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    const float scale = 1.0f / sqrtf((float)HS);
    const float sl2 = scale * kLog2e;

    const int n_kt = ceil_div(min(T, q0 + kRows), BK);
    for (int kt = 0; kt < n_kt; kt++) {
        const int k0 = kt * BK;
        __syncthreads(); // every warp is done with the previous K/V tile
        load_tile<BK, HS, LDH>(Ks, base + C, C3, k0, T);
        load_tile<BK, HS, LDH>(Vs, base + 2 * C, C3, k0, T);
        __syncthreads();
        if (qw >= T || k0 > qw + kStrip - 1) continue; // warp-uniform; no block barrier below

        // S = Q K^T (16 queries x BK keys) into F1w, dP = dO V^T into F2w.
        strip_products<NB, NK, LDH, LDF>(F1w, F2w, qa, Ks, ga, Vs);
        __syncwarp();

#pragma unroll
        for (int r = 0; r < kStrip; r++) {
            const int q = qw + r;
            const float l2 = lse2s[warp * kStrip + r], dr = Ds[warp * kStrip + r];
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int col = lane + 32 * c, key = k0 + col;
                const float s = F1w[r * LDF + col], dpv = F2w[r * LDF + col];
                const float p = (key <= q && key < T && q < T) ? exp2f(fmaf(s, sl2, -l2)) : 0.0f;
                dSw[r * LDP + col] = __float2bfloat16(p * (dpv - dr));
            }
        }
        __syncwarp();

        // dQ += dS K (K row-major (key, dim) as row_major B).
#pragma unroll
        for (int k = 0; k < NB; k++) {
            FragA sa;
            wmma::load_matrix_sync(sa, dSw + k * 16, LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                FragBRow kb;
                wmma::load_matrix_sync(kb, Ks + k * 16 * LDH + n * 16, LDH);
                wmma::mma_sync(dq[n], sa, kb, dq[n]);
            }
        }
    }

    scale_frags(dq, scale);
    __syncwarp(); // other lanes' last reads of F1w (elementwise pass) precede these stores
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::store_matrix_sync(F1w + n * 16, dq[n], LDF, wmma::mem_row_major);
    __syncwarp();
    store_strip<HS, LDF>(dqkv + (size_t)b * T * C3 + (size_t)h * HS, C3, qw, T, F1w, lane);
}

// ------------------------------------------------------------------------------------------------------
// Host side.
// ------------------------------------------------------------------------------------------------------
template <int HS> void forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream) {
    const void* ptrs[] = {out, qkv};
    if (!check_shape("attention_forward", ptrs, 2, B, T, NH)) return;
    constexpr size_t smem = FwdLayout<HS, kFwdBK>::bytes;
    auto kernel = attention_forward_kernel<HS, kFwdBK>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<dim3(B * NH, ceil_div(T, kRows)), kThreads, smem, stream>>>(out, lse, qkv, T, NH);
    CUDA_LAUNCH_CHECK();
}

template <int HS>
void backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* out, const float* lse, const floatX* qkv,
              int B, int T, int NH, cudaStream_t stream) {
    const void* ptrs[] = {dqkv, dout, out, qkv};
    if (!check_shape("attention_backward", ptrs, 4, B, T, NH)) return;
    float* D = scratch; // (B, NH, T)
    {
        const size_t threads = (size_t)B * T * NH * (HS / 8);
        const int block = 256;
        attention_backward_d_kernel<HS><<<(unsigned)ceil_div(threads, (size_t)block), block, 0, stream>>>(D, dout, out, B, T, NH);
        CUDA_LAUNCH_CHECK();
    }
    const dim3 grid(B * NH, ceil_div(T, kRows));
    {
        constexpr size_t smem = DkvLayout<HS, kDkvBQ>::bytes;
        auto kernel = attention_backward_dkdv_kernel<HS, kDkvBQ>;
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<grid, kThreads, smem, stream>>>(dqkv, dout, lse, D, qkv, T, NH);
        CUDA_LAUNCH_CHECK();
    }
    {
        constexpr size_t smem = DqLayout<HS, kDqBK>::bytes;
        auto kernel = attention_backward_dq_kernel<HS, kDqBK>;
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<grid, kThreads, smem, stream>>>(dqkv, dout, lse, D, qkv, T, NH);
        CUDA_LAUNCH_CHECK();
    }
}

[[noreturn]] inline void unsupported_head_size(const char* what, int HS) {
    throw Error(strprintf("%s: unsupported head size %d (supported: 64)", what, HS));
}

} // namespace detail

inline void forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream) {
    detail::forward<64>(out, lse, qkv, B, T, NH, stream);
}
inline void backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* out, const float* lse,
                     const floatX* qkv, int B, int T, int NH, cudaStream_t stream) {
    detail::backward<64>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, stream);
}

} // namespace wmma_attention
