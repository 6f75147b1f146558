/*
 * Fused causal multi-head self-attention, FlashAttention-2 style, on mma.sync tensor cores (llmc/ptx.cuh):
 * bf16 in and out, fp32 accumulation and statistics.
 *
 * Shapes (C = NH * HS, HS = 64):
 *   qkv  (B, T, 3C)  per position [q | k | v], each (NH, HS)
 *   out  (B, T, C)   per position (NH, HS)
 *   lse  (B, NH, T)  fp32 natural log-sum-exp of the scaled scores of each query row
 *   dqkv (B, T, 3C)  written, not accumulated; must not alias qkv, out or dout
 *
 * Forward: one block of 8 warps per (batch*head, 128-query tile), each warp owning 16 query rows. Key/value tiles
 * of 64 rows are double-buffered in shared memory by cp.async (the next tile loads while this one is used). A
 * warp keeps its Q fragments, the scores S = Q K^T, the probabilities P and the output O in registers: S is an
 * mma accumulator, and its fragment pairs re-packed as bf16 are the A operand of O += P V (llmc/ptx.cuh). The
 * online softmax runs in the log2 domain; each row's max and sum are reduced over the 4 lanes that hold it (two
 * shuffles); O is rescaled in registers and divided by the row sum once, at the end. The causal mask is applied
 * only on the tiles that cross the diagonal (or pass T); key tiles above the diagonal are never visited.
 *
 * Backward (deterministic, no atomics): D = rowsum(dO * O) into scratch; one kernel per 64-key tile accumulates
 * dK, dV over the query tiles at or below the diagonal; one kernel per 64-query tile accumulates dQ over the
 * key tiles at or above it. Both recompute P from lse and keep P and dS in registers (as A operands of the
 * dV/dK and dQ products); their streamed tiles are double-buffered by cp.async. Each output element is written
 * once by one thread, summed in a fixed order, so two runs give bitwise equal results.
 *
 * Partial tiles (T not a multiple of a tile): rows past T are zero-filled by cp.async (nothing read out of
 * bounds), scores of keys >= T or above the diagonal are masked, rows >= T are never stored.
 *
 * Shared-memory rows are padded to HS + 8 bf16 (row stride = 16 B mod 128 B): the 8 row addresses of one
 * ldmatrix phase hit 8 distinct 16-byte bank groups, and every row stays 16-byte aligned for cp.async.
 */
#pragma once
#include <climits>
#include <cstdint>

#include "llmc/cuda_common.cuh"
#include "llmc/ptx.cuh"

namespace llmc {
namespace attention_detail {

constexpr int kStrip = 16;                    // rows owned by one warp: one mma tile high
constexpr int kFwdWarps = 8;                  // forward: 8 warps, a 128-query tile
constexpr int kFwdThreads = 32 * kFwdWarps;
constexpr int kFwdRows = kFwdWarps * kStrip;
constexpr int kBwdWarps = 4;                  // backward: 4 warps, a 64-key (dK/dV) or 64-query (dQ) tile
constexpr int kBwdThreads = 32 * kBwdWarps;
constexpr int kBwdRows = kBwdWarps * kStrip;
constexpr int kTile = 64;                     // rows of each streamed tile (keys forward and in dQ, queries in dK/dV)
constexpr int kChunk = 32;                    // backward: streamed columns processed per step (register budget)

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A tile of ROWS rows of HS bf16 in shared memory with padded rows.
template <int HS> struct Rows {
    static constexpr int LD = HS + 8; // elements
    static_assert(HS % 16 == 0, "HS must be a multiple of 16 (mma k-steps)");
    static_assert((LD * 2) % 16 == 0 && (LD * 2) % 128 == 16, "row stride 16 B mod 128 B: conflict-free ldmatrix");
    static constexpr size_t bytes(int rows) { return (size_t)rows * LD * 2; }
};

// Forward: Q (kFwdRows rows; a warp's rows become its output staging at the end), then 2 stages of K and V.
template <int HS> struct FwdLayout {
    using R = Rows<HS>;
    static constexpr size_t q = 0;
    static constexpr size_t k = q + R::bytes(kFwdRows);       // stage s at k + s * stage_bytes
    static constexpr size_t v = k + 2 * R::bytes(kTile);
    static constexpr size_t stage_bytes = R::bytes(kTile);
    static constexpr size_t bytes = v + 2 * R::bytes(kTile);
    static_assert(bytes <= 227 * 1024, "forward tiles exceed sm_90's shared memory per block");
};
// dK/dV: the block's K and V (read once into fragments; then the dK/dV output staging), then 2 stages of
// Q, dO and the query rows' statistics (lse in the log2 domain, D).
template <int HS> struct DkvLayout {
    using R = Rows<HS>;
    static constexpr size_t k = 0;
    static constexpr size_t v = k + R::bytes(kBwdRows);
    static constexpr size_t q = v + R::bytes(kBwdRows);       // stage s at q + s * stage_bytes
    static constexpr size_t dout = q + 2 * R::bytes(kTile);
    static constexpr size_t stage_bytes = R::bytes(kTile);
    static constexpr size_t lse2 = dout + 2 * R::bytes(kTile); // 2 stages x kTile floats
    static constexpr size_t d = lse2 + 2 * kTile * 4;
    static constexpr size_t bytes = d + 2 * kTile * 4;
    static_assert(bytes <= 227 * 1024, "dK/dV tiles exceed sm_90's shared memory per block");
};
// dQ: the block's Q and dO (read once into fragments; Q's rows then stage dQ), then 2 stages of K and V.
template <int HS> struct DqLayout {
    using R = Rows<HS>;
    static constexpr size_t q = 0;
    static constexpr size_t dout = q + R::bytes(kBwdRows);
    static constexpr size_t k = dout + R::bytes(kBwdRows);    // stage s at k + s * stage_bytes
    static constexpr size_t v = k + 2 * R::bytes(kTile);
    static constexpr size_t stage_bytes = R::bytes(kTile);
    static constexpr size_t bytes = v + 2 * R::bytes(kTile);
    static_assert(bytes <= 227 * 1024, "dQ tiles exceed sm_90's shared memory per block");
};

template <typename T> __device__ __forceinline__ T* at(unsigned char* smem, size_t offset) {
    return reinterpret_cast<T*>(smem + offset);
}

/*
 * Block-cooperative asynchronous load of ROWS rows of HS bf16 (source row i at src + (row0 + i) * stride) into
 * padded shared rows, 16 bytes per cp.async. Rows at or past T are zero-filled without being read.
 */
template <int ROWS, int HS, int THREADS>
__device__ __forceinline__ void load_rows_async(floatX* dst, const floatX* __restrict__ src, size_t stride, int row0,
                                                int T) {
    constexpr int CH = HS / 8, N = ROWS * CH, LD = Rows<HS>::LD;
    static_assert(N % THREADS == 0, "every thread issues the same number of copies");
#pragma unroll
    for (int it = 0; it < N / THREADS; it++) {
        const int i = it * THREADS + (int)threadIdx.x, r = i / CH, c = i % CH;
        const bool in = row0 + r < T;
        ptx::cp_async_16(dst + r * LD + c * 8, in ? src + (size_t)(row0 + r) * stride + c * 8 : src, in);
    }
}

/*
 * A warp's 16 x HS strip of a padded tile as NK = HS/16 A fragments (row-major, k-step s = columns 16s..16s+15):
 * lane l gives row l % 16, column 16s + 8 (l / 16), so matrices 0..3 are (rows 0-7, 8-15) x (columns +0, +8).
 */
template <int HS> __device__ __forceinline__ void load_a_frags(uint32_t (&a)[HS / 16][4], const floatX* strip, int lane) {
    constexpr int LD = Rows<HS>::LD;
#pragma unroll
    for (int s = 0; s < HS / 16; s++) ptx::ldmatrix_x4(a[s], strip + (lane % 16) * LD + s * 16 + 8 * (lane / 16));
}

/*
 * acc[n] += A B for the 16 columns n0 .. n0+15 of B^T stored row-major in a padded tile (rows = B's columns, as
 * K for S = Q K^T): acc[2j], acc[2j+1] are the n-tiles of rows tile[n0 + 16j ..]. NT n-tiles, HS/16 k-steps.
 * Lane l gives row n0 + 16j + l % 8 + 8 (l / 16), column 16s + 8 ((l / 8) % 2): matrices (rows +0, cols +0),
 * (rows +0, cols +8), (rows +8, cols +0), (rows +8, cols +8) = b[0], b[1] of n-tile 2j, then of 2j + 1.
 */
template <int HS, int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const uint32_t (&a)[HS / 16][4], const floatX* tile,
                                        int lane) {
    constexpr int LD = Rows<HS>::LD;
    static_assert(NT % 2 == 0, "n-tiles come in pairs");
#pragma unroll
    for (int s = 0; s < HS / 16; s++)
#pragma unroll
        for (int j = 0; j < NT / 2; j++) {
            uint32_t r[4];
            ptx::ldmatrix_x4(r, tile + (16 * j + lane % 8 + 8 * (lane / 16)) * LD + 16 * s + 8 * ((lane / 8) % 2));
            const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            ptx::mma_bf16_16816(acc[2 * j], a[s], b0);
            ptx::mma_bf16_16816(acc[2 * j + 1], a[s], b1);
        }
}

/*
 * acc[d] += P B over KS k-steps, P given as accumulator fragments p[2KS][4] (16 rows x 16KS columns, re-packed
 * to bf16 A fragments) and B = KS*16 rows x HS of a padded tile stored row-major (k, n), as V in O += P V:
 * .trans ldmatrix, lane l gives row 16s + l % 8 + 8 ((l / 8) % 2), column 16j + 8 (l / 16).
 */
template <int HS, int KS>
__device__ __forceinline__ void mma_pb(float (&acc)[HS / 8][4], const float (&p)[2 * KS][4], const floatX* tile,
                                       int lane) {
    constexpr int LD = Rows<HS>::LD;
#pragma unroll
    for (int s = 0; s < KS; s++) {
        const uint32_t a[4] = {ptx::pack_bf16x2(p[2 * s][0], p[2 * s][1]), ptx::pack_bf16x2(p[2 * s][2], p[2 * s][3]),
                               ptx::pack_bf16x2(p[2 * s + 1][0], p[2 * s + 1][1]),
                               ptx::pack_bf16x2(p[2 * s + 1][2], p[2 * s + 1][3])};
#pragma unroll
        for (int j = 0; j < HS / 16; j++) {
            uint32_t r[4];
            ptx::ldmatrix_x4_trans(r, tile + (16 * s + lane % 8 + 8 * ((lane / 8) % 2)) * LD + 16 * j + 8 * (lane / 16));
            const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            ptx::mma_bf16_16816(acc[2 * j], a, b0);
            ptx::mma_bf16_16816(acc[2 * j + 1], a, b1);
        }
    }
}

template <int N> __device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/*
 * A warp's 16 x HS accumulator strip (fragments acc[HS/8], times `scale` per row half: rows g and g + 8) written
 * as bf16 into its padded shared rows `stage`, then to global rows row0 .. row0+15 (< T only), 16 B per store.
 */
template <int HS>
__device__ __forceinline__ void store_strip(floatX* __restrict__ dst, size_t stride, int row0, int T,
                                            const float (&acc)[HS / 8][4], float scale_lo, float scale_hi,
                                            floatX* stage, int lane) {
    constexpr int LD = Rows<HS>::LD, CH = HS / 8;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        *reinterpret_cast<uint32_t*>(stage + g * LD + 8 * n + 2 * t) =
            ptx::pack_bf16x2(acc[n][0] * scale_lo, acc[n][1] * scale_lo);
        *reinterpret_cast<uint32_t*>(stage + (g + 8) * LD + 8 * n + 2 * t) =
            ptx::pack_bf16x2(acc[n][2] * scale_hi, acc[n][3] * scale_hi);
    }
    __syncwarp();
    for (int i = lane; i < kStrip * CH; i += 32) {
        const int r = i / CH, c = i % CH;
        if (row0 + r < T)
            *reinterpret_cast<uint4*>(dst + (size_t)(row0 + r) * stride + c * 8) =
                *reinterpret_cast<const uint4*>(stage + r * LD + c * 8);
    }
}

// The sum (or max) of v over the 4 lanes that hold one accumulator row (lanes 4g .. 4g+3).
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// ------------------------------------------------------------------------------------------------------
// Forward. Grid (B*NH, ceil(T/128)); the y index is reversed so the longest (last) query tiles start first.
// ------------------------------------------------------------------------------------------------------
template <int HS>
__global__ void __launch_bounds__(kFwdThreads, 2)
    attention_forward_kernel(floatX* __restrict__ out, float* __restrict__ lse, const floatX* __restrict__ qkv, int T,
                             int NH) {
    using L = FwdLayout<HS>;
    constexpr int LD = Rows<HS>::LD, NT = kTile / 8, ND = HS / 8;
    extern __shared__ __align__(128) unsigned char attn_smem[];
    floatX* Qs = at<floatX>(attn_smem, L::q);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kFwdRows;
    const int qw = q0 + warp * kStrip; // first query row of this warp
    const int C = NH * HS;
    const size_t C3 = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * C3 + (size_t)h * HS; // row t of part p: base + t*C3 + p*C

    const int n_kt = ceil_div(min(T, q0 + kFwdRows), kTile); // key tiles at or below the diagonal
    load_rows_async<kFwdRows, HS, kFwdThreads>(Qs, base, C3, q0, T);
    load_rows_async<kTile, HS, kFwdThreads>(at<floatX>(attn_smem, L::k), base + C, C3, 0, T);
    load_rows_async<kTile, HS, kFwdThreads>(at<floatX>(attn_smem, L::v), base + 2 * C, C3, 0, T);
    ptx::cp_async_commit();

    uint32_t qa[HS / 16][4];
    float o[ND][4];
    zero(o);
    // Row statistics of rows g and g + 8, in the log2 domain of the scaled scores; every lane of a quad holds the
    // same m (computed from quad-reduced values); l is the lane's partial sum over its columns.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl2 = (1.0f / sqrtf((float)HS)) * kLog2e;

    for (int kt = 0; kt < n_kt; kt++) {
        const int k0 = kt * kTile, stage = kt & 1;
        if (kt + 1 < n_kt) {
            const size_t next = (size_t)(stage ^ 1) * L::stage_bytes;
            load_rows_async<kTile, HS, kFwdThreads>(at<floatX>(attn_smem, L::k + next), base + C, C3, k0 + kTile, T);
            load_rows_async<kTile, HS, kFwdThreads>(at<floatX>(attn_smem, L::v + next), base + 2 * C, C3, k0 + kTile, T);
        }
        ptx::cp_async_commit(); // possibly empty: the group count stays one per iteration
        ptx::cp_async_wait<1>(); // this tile (and Q) landed for this thread
        __syncthreads();         // ... and for every thread
        if (kt == 0) load_a_frags<HS>(qa, Qs + warp * kStrip * LD, lane);

        // Warp-uniform: rows past T are never stored; a strip entirely above the diagonal adds nothing.
        if (qw < T && k0 <= qw + kStrip - 1) {
            const floatX* Ks = at<floatX>(attn_smem, L::k + stage * L::stage_bytes);
            const floatX* Vs = at<floatX>(attn_smem, L::v + stage * L::stage_bytes);
            float s[NT][4];
            zero(s);
            mma_abt<HS, NT>(s, qa, Ks, lane);
            if (k0 + kTile - 1 > qw || k0 + kTile > T) { // the tile crosses the diagonal or T: mask
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = qw + g + 8 * (e / 2), key = k0 + 8 * n + 2 * t + (e & 1);
                        if (key > row || key >= T) s[n][e] = -INFINITY;
                    }
            }
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < NT; n++) {
                mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
            }
            float m_use[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float m_new = fmaxf(m[i], quad_max(mx[i]) * sl2);
                // A row with no unmasked key so far keeps m = -inf; subtracting 0 instead avoids (-inf) - (-inf)
                // = NaN, and gives p = 0 and alpha = 0 (its O and l are still 0, nothing is lost).
                m_use[i] = m_new == -INFINITY ? 0.0f : m_new;
                alpha[i] = exp2f(m[i] - m_use[i]);
                m[i] = m_new;
            }
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] = exp2f(fmaf(s[n][e], sl2, -m_use[e / 2]));
                    sum[e / 2] += s[n][e];
                }
#pragma unroll
            for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + sum[i];
#pragma unroll
            for (int n = 0; n < ND; n++) o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
            mma_pb<HS, kTile / 16>(o, s, Vs, lane);
        }
        __syncthreads(); // every warp is done with this stage before the next iteration refills it
    }

    // Epilogue: O / l, lse = ln(sum 2^(x - m)) + m ln 2. The warp's Q rows (read into registers) stage O.
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] = quad_sum(l[i]);
        inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        const int row = qw + g + 8 * i;
        if (t == 0 && row < T) lse[(size_t)bh * T + row] = l[i] > 0.0f ? (m[i] + log2f(l[i])) * kLn2 : -INFINITY;
    }
    store_strip<HS>(out + (size_t)b * T * C + (size_t)h * HS, C, qw, T, o, inv[0], inv[1], Qs + warp * kStrip * LD,
                    lane);
}

// ------------------------------------------------------------------------------------------------------
// Backward, step 1: D (B, NH, T) = rowsum(dO * O) per (query row, head). HS/8 lanes per row, 16 B each.
// ------------------------------------------------------------------------------------------------------
template <int HS>
__global__ void attention_backward_d_kernel(float* __restrict__ D, const floatX* __restrict__ dout,
                                            const floatX* __restrict__ out, int B, int T, int NH) {
    constexpr int G = HS / 8;
    static_assert(G >= 1 && G <= 32 && 32 % G == 0, "a row's lanes must sit inside one warp");
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t row = idx / G, rows = (size_t)B * T * NH; // row = (b*T + t)*NH + h: contiguous in (B, T, C)
    const int part = (int)(idx % G);
    float acc = 0.0f;
    if (row < rows) {
        const x128 g = load128(dout + row * HS + part * 8), o = load128(out + row * HS + part * 8);
#pragma unroll
        for (int i = 0; i < 8; i++) acc += __bfloat162float(g[i]) * __bfloat162float(o[i]);
    }
    // Every lane of the warp reaches the shuffles (no early return), so the full mask is valid.
    for (int off = G / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (row < rows && part == 0) {
        const int h = (int)(row % NH);
        const size_t bt = row / NH;
        const size_t b = bt / T, t = bt % T;
        D[(b * NH + h) * T + t] = acc;
    }
}

// ------------------------------------------------------------------------------------------------------
// Backward, step 2: dK, dV for one 64-key tile, looping over the 64-query tiles at or below the diagonal.
// Grid (B*NH, ceil(T/64)); tile 0 (the most query tiles) first. Per warp: 16 keys, computed transposed, 32
// queries at a time: S^T = K Q^T, P^T = 2^(S^T*scale*log2e - lse2), dP^T = V dO^T, dS^T = P^T (dP^T - D),
//   dV += P^T dO, dK += scale * dS^T Q.
// ------------------------------------------------------------------------------------------------------
template <int HS>
__global__ void __launch_bounds__(kBwdThreads, 3)
    attention_backward_dkdv_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                   const float* __restrict__ lse, const float* __restrict__ D,
                                   const floatX* __restrict__ qkv, int T, int NH) {
    using L = DkvLayout<HS>;
    constexpr int LD = Rows<HS>::LD, NT = kChunk / 8, ND = HS / 8;
    extern __shared__ __align__(128) unsigned char attn_smem[];
    floatX* Ks = at<floatX>(attn_smem, L::k);
    floatX* Vs = at<floatX>(attn_smem, L::v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * kBwdRows;
    const int kw = k0 + warp * kStrip; // first key row of this warp
    const int C = NH * HS;
    const size_t C3 = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const floatX* dobase = dout + (size_t)b * T * C + (size_t)h * HS;
    const size_t row_stats = (size_t)bh * T; // lse and D rows of this (b, h)
    static_assert(kBwdRows % kTile == 0, "the first query tile starts at k0");

    // Query-row statistics of tile q0 into a stage: lse in the log2 domain and D; rows past T get 0 (masked).
    const auto load_stats = [&](int stage, int q0) {
        float* l2 = at<float>(attn_smem, L::lse2) + stage * kTile;
        float* d = at<float>(attn_smem, L::d) + stage * kTile;
        for (int i = threadIdx.x; i < kTile; i += kBwdThreads) {
            const bool ok = q0 + i < T;
            l2[i] = ok ? lse[row_stats + q0 + i] * kLog2e : 0.0f;
            d[i] = ok ? D[row_stats + q0 + i] : 0.0f;
        }
    };
    const auto load_queries = [&](int stage, int q0) {
        const size_t off = (size_t)stage * L::stage_bytes;
        load_rows_async<kTile, HS, kBwdThreads>(at<floatX>(attn_smem, L::q + off), base, C3, q0, T);
        load_rows_async<kTile, HS, kBwdThreads>(at<floatX>(attn_smem, L::dout + off), dobase, C, q0, T);
        load_stats(stage, q0);
    };

    // Queries below k0 attend no key of this tile: start at the query tile holding k0.
    const int qt_begin = k0 / kTile, qt_end = ceil_div(T, kTile);
    load_rows_async<kBwdRows, HS, kBwdThreads>(Ks, base + C, C3, k0, T);
    load_rows_async<kBwdRows, HS, kBwdThreads>(Vs, base + 2 * C, C3, k0, T);
    load_queries(0, qt_begin * kTile);
    ptx::cp_async_commit();

    uint32_t ka[HS / 16][4], va[HS / 16][4];
    float dk[ND][4], dv[ND][4];
    zero(dk);
    zero(dv);
    const float scale = 1.0f / sqrtf((float)HS);
    const float sl2 = scale * kLog2e;

    for (int qt = qt_begin; qt < qt_end; qt++) {
        const int q0 = qt * kTile, stage = (qt - qt_begin) & 1;
        if (qt + 1 < qt_end) load_queries(stage ^ 1, q0 + kTile);
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();
        __syncthreads();
        if (qt == qt_begin) {
            load_a_frags<HS>(ka, Ks + warp * kStrip * LD, lane);
            load_a_frags<HS>(va, Vs + warp * kStrip * LD, lane);
        }
        const floatX* Qs = at<floatX>(attn_smem, L::q + stage * L::stage_bytes);
        const floatX* dOs = at<floatX>(attn_smem, L::dout + stage * L::stage_bytes);
        const float* l2s = at<float>(attn_smem, L::lse2) + stage * kTile;
        const float* Ds = at<float>(attn_smem, L::d) + stage * kTile;
#pragma unroll 1
        for (int c = 0; c < kTile; c += kChunk) {
            const int qc = q0 + c; // first query of the chunk
            // Warp-uniform skip: keys past T are never stored; a chunk entirely below the warp's first key (every
            // query attends only earlier keys) or past T adds nothing.
            if (kw >= T || qc + kChunk - 1 < kw || qc >= T) continue;
            float sT[NT][4], dpT[NT][4];
            zero(sT);
            zero(dpT);
            mma_abt<HS, NT>(sT, ka, Qs + c * LD, lane);
            mma_abt<HS, NT>(dpT, va, dOs + c * LD, lane);
            const bool mask = qc < kw + kStrip - 1 || qc + kChunk > T;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int col = c + 8 * n + 2 * t + (e & 1), key = kw + g + 8 * (e / 2), q = q0 + col;
                    const float p =
                        (mask && (key > q || q >= T)) ? 0.0f : exp2f(fmaf(sT[n][e], sl2, -l2s[col]));
                    sT[n][e] = p;
                    dpT[n][e] = p * (dpT[n][e] - Ds[col]);
                }
            mma_pb<HS, kChunk / 16>(dv, sT, dOs + c * LD, lane);
            mma_pb<HS, kChunk / 16>(dk, dpT, Qs + c * LD, lane);
        }
        __syncthreads(); // every warp is done with this stage before the next iteration refills it
    }

    // Epilogue: the warp's K and V rows (read into registers) stage dK and dV.
    floatX* dbase = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
    store_strip<HS>(dbase + C, C3, kw, T, dk, scale, scale, Ks + warp * kStrip * LD, lane);
    store_strip<HS>(dbase + 2 * C, C3, kw, T, dv, 1.0f, 1.0f, Vs + warp * kStrip * LD, lane);
}

// ------------------------------------------------------------------------------------------------------
// Backward, step 3: dQ for one 64-query tile, looping over the 64-key tiles at or below the diagonal.
// Grid (B*NH, ceil(T/64)), y reversed (longest first). Per warp: 16 queries, 32 keys at a time:
//   S = Q K^T, P = 2^(S*scale*log2e - lse2), dP = dO V^T, dS = P (dP - D), dQ += scale * dS K.
// ------------------------------------------------------------------------------------------------------
template <int HS>
__global__ void __launch_bounds__(kBwdThreads, 3)
    attention_backward_dq_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout,
                                 const float* __restrict__ lse, const float* __restrict__ D,
                                 const floatX* __restrict__ qkv, int T, int NH) {
    using L = DqLayout<HS>;
    constexpr int LD = Rows<HS>::LD, NT = kChunk / 8, ND = HS / 8;
    extern __shared__ __align__(128) unsigned char attn_smem[];
    floatX* Qs = at<floatX>(attn_smem, L::q);
    floatX* dOs = at<floatX>(attn_smem, L::dout);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kBwdRows;
    const int qw = q0 + warp * kStrip;
    const int C = NH * HS;
    const size_t C3 = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;

    const int n_kt = ceil_div(min(T, q0 + kBwdRows), kTile);
    load_rows_async<kBwdRows, HS, kBwdThreads>(Qs, base, C3, q0, T);
    load_rows_async<kBwdRows, HS, kBwdThreads>(dOs, dout + (size_t)b * T * C + (size_t)h * HS, C, q0, T);
    load_rows_async<kTile, HS, kBwdThreads>(at<floatX>(attn_smem, L::k), base + C, C3, 0, T);
    load_rows_async<kTile, HS, kBwdThreads>(at<floatX>(attn_smem, L::v), base + 2 * C, C3, 0, T);
    ptx::cp_async_commit();

    // Statistics of the lane's rows g and g + 8 (rows past T: 0, and every score of theirs is masked).
    float l2r[2], dr[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = qw + g + 8 * i;
        l2r[i] = row < T ? lse[(size_t)bh * T + row] * kLog2e : 0.0f;
        dr[i] = row < T ? D[(size_t)bh * T + row] : 0.0f;
    }
    uint32_t qa[HS / 16][4], ga[HS / 16][4];
    float dq[ND][4];
    zero(dq);
    const float scale = 1.0f / sqrtf((float)HS);
    const float sl2 = scale * kLog2e;

    for (int kt = 0; kt < n_kt; kt++) {
        const int k0 = kt * kTile, stage = kt & 1;
        if (kt + 1 < n_kt) {
            const size_t next = (size_t)(stage ^ 1) * L::stage_bytes;
            load_rows_async<kTile, HS, kBwdThreads>(at<floatX>(attn_smem, L::k + next), base + C, C3, k0 + kTile, T);
            load_rows_async<kTile, HS, kBwdThreads>(at<floatX>(attn_smem, L::v + next), base + 2 * C, C3, k0 + kTile, T);
        }
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();
        __syncthreads();
        if (kt == 0) {
            load_a_frags<HS>(qa, Qs + warp * kStrip * LD, lane);
            load_a_frags<HS>(ga, dOs + warp * kStrip * LD, lane);
        }
        const floatX* Ks = at<floatX>(attn_smem, L::k + stage * L::stage_bytes);
        const floatX* Vs = at<floatX>(attn_smem, L::v + stage * L::stage_bytes);
#pragma unroll 1
        for (int c = 0; c < kTile; c += kChunk) {
            const int kc = k0 + c; // first key of the chunk
            if (qw >= T || kc > qw + kStrip - 1 || kc >= T) continue; // warp-uniform: nothing to add
            float s[NT][4], dp[NT][4];
            zero(s);
            zero(dp);
            mma_abt<HS, NT>(s, qa, Ks + c * LD, lane);
            mma_abt<HS, NT>(dp, ga, Vs + c * LD, lane);
            const bool mask = kc + kChunk - 1 > qw || kc + kChunk > T;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = qw + g + 8 * (e / 2), key = kc + 8 * n + 2 * t + (e & 1);
                    const float p =
                        (mask && (key > row || key >= T)) ? 0.0f : exp2f(fmaf(s[n][e], sl2, -l2r[e / 2]));
                    s[n][e] = p * (dp[n][e] - dr[e / 2]); // dS
                }
            mma_pb<HS, kChunk / 16>(dq, s, Ks + c * LD, lane);
        }
        __syncthreads(); // every warp is done with this stage before the next iteration refills it
    }
    store_strip<HS>(dqkv + (size_t)b * T * C3 + (size_t)h * HS, C3, qw, T, dq, scale, scale, Qs + warp * kStrip * LD,
                    lane);
}

// ------------------------------------------------------------------------------------------------------
// Host side.
// ------------------------------------------------------------------------------------------------------
inline bool check_shape(const char* what, const void* const* ptrs, int nptrs, int B, int T, int NH) {
    if (B < 0 || T < 0 || NH < 0) throw Error(strprintf("%s: negative shape B=%d T=%d NH=%d", what, B, T, NH));
    if ((long long)B * NH > INT_MAX || ceil_div(T, kBwdRows) > 65535)
        throw Error(strprintf("%s: shape too large for the launch grid (B*NH=%lld, T=%d)", what, (long long)B * NH, T));
    for (int i = 0; i < nptrs; i++)
        if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0) throw Error(strprintf("%s: tensor not 16-byte aligned", what));
    return B > 0 && T > 0 && NH > 0;
}

template <int HS> void forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream) {
    const void* ptrs[] = {out, qkv};
    if (!check_shape("attention_forward", ptrs, 2, B, T, NH)) return;
    constexpr size_t smem = FwdLayout<HS>::bytes;
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_forward_kernel<HS><<<dim3(B * NH, ceil_div(T, kFwdRows)), kFwdThreads, smem, stream>>>(out, lse, qkv, T, NH);
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
    const dim3 grid(B * NH, ceil_div(T, kBwdRows));
    {
        constexpr size_t smem = DkvLayout<HS>::bytes;
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attention_backward_dkdv_kernel<HS><<<grid, kBwdThreads, smem, stream>>>(dqkv, dout, lse, D, qkv, T, NH);
        CUDA_LAUNCH_CHECK();
    }
    {
        constexpr size_t smem = DqLayout<HS>::bytes;
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attention_backward_dq_kernel<HS><<<grid, kBwdThreads, smem, stream>>>(dqkv, dout, lse, D, qkv, T, NH);
        CUDA_LAUNCH_CHECK();
    }
}

[[noreturn]] inline void unsupported_head_size(const char* what, int HS) {
    throw Error(strprintf("%s: unsupported head size %d (supported: 64)", what, HS));
}

} // namespace attention_detail

// qkv (B, T, 3C) per position [q | k | v], each (NH, HS); out (B, T, C) as (NH, HS) per position;
// lse (B, NH, T) fp32 log-sum-exp of the scaled scores per query row (kept for backward).
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                              cudaStream_t stream) {
    switch (HS) {
    case 64: attention_detail::forward<64>(out, lse, qkv, B, T, NH, stream); return;
    // Another head size is one line here and one in attention_backward, e.g.
    // case 128: attention_detail::forward<128>(out, lse, qkv, B, T, NH, stream); return;
    default: attention_detail::unsupported_head_size("attention_forward", HS);
    }
}

// Scratch floats attention_backward needs: D = rowsum(dout * out), (B, NH, T).
inline size_t attention_backward_scratch_floats(int B, int T, int NH) { return (size_t)B * T * NH; }

// dqkv (B, T, 3C) is WRITTEN (not accumulated); scratch holds attention_backward_scratch_floats(B, T, NH)
// floats; out and lse are the forward's. Deterministic (no atomics).
inline void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* out, const float* lse,
                               const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    switch (HS) {
    case 64: attention_detail::backward<64>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, stream); return;
    default: attention_detail::unsupported_head_size("attention_backward", HS);
    }
}

} // namespace llmc
