/*
 * LayerNorm over the channel dimension on the GPU (GPT-2: eps 1e-5, biased variance), N rows of C channels.
 * bf16 storage, fp32 math; the forward saves fp32 mean and rstd (N) for the backward.
 *
 * Forward: one warp per row. The row is read from global memory once and kept in shared memory (one slot of
 * C bf16 per warp), because the statistics take two passes (mean, then the centred variance, which is exact
 * where E[x^2] - mean^2 would cancel) and the output a third. The fused variant adds the residual branch
 * while loading: residual = bf16(inp1 + inp2) is stored, and the row it normalises is that stored bf16 row,
 * exactly what an unfused residual kernel followed by layernorm_forward would see.
 *
 * Backward: dinp, dweight and dbias all accumulate (+=). dinp is the residual stream's gradient, which the
 * other branch also adds into. dweight/dbias are sums over all N rows; to keep them deterministic without
 * atomics, each block sums a fixed slice of rows into fp32 partials (scratch), and a final kernel adds the
 * slices in block order and adds the result to the bf16 gradients once. The slicing depends only on (N, C),
 * so the result is bitwise reproducible.
 *
 * All C must be multiples of 8 (16-byte x128 rows); launchers throw otherwise.
 */
#pragma once
#include <algorithm>
#include <cub/cub.cuh>

#include "llmc/cuda_common.cuh"

namespace llmc {

constexpr float LAYERNORM_EPS = 1e-5f;

inline void layernorm_check_channels(int C, int max_C, const char* what) {
    if (C <= 0 || C % x128::size != 0 || C > max_C)
        throw Error(strprintf("%s: C=%d must be a positive multiple of 8 and at most %d", what, C, max_C));
}

// ---------------------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------------------

constexpr int LN_FWD_WARPS = 8; // rows per block
constexpr int LN_FWD_MAX_C = 8192; // row cache 8 * C bf16 = 128 KiB of shared memory

/*
 * RESIDUAL = false: x = inp1 (N, C).  RESIDUAL = true: x = residual = bf16(inp1 + inp2), stored.
 * out (N, C) = (x - mean) * rstd * weight + bias; mean, rstd (N).
 * Dynamic shared memory: LN_FWD_WARPS * C bf16 (each warp's copy of its row).
 */
template <bool RESIDUAL>
static __global__ void __launch_bounds__(LN_FWD_WARPS * 32)
    layernorm_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                             const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C) {
    using WarpReduce = cub::WarpReduce<float>;
    __shared__ typename WarpReduce::TempStorage temp[LN_FWD_WARPS];
    extern __shared__ x128 ln_row_cache[];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * LN_FWD_WARPS + warp;
    if (row >= N) return; // whole warps leave; no block-wide barrier follows
    const int chunks = C / x128::size;
    x128* xs = ln_row_cache + (size_t)warp * chunks;
    const size_t off = (size_t)row * C;

    // Pass over global memory: load (and form the residual), cache the row, sum it.
    // Each lane only ever reads back the chunks it wrote itself, so the cache needs no warp barrier.
    float sum = 0.0f;
    for (int i = lane; i < chunks; i += 32) {
        x128 x;
        if constexpr (RESIDUAL) {
            x128 a = load128cs(inp1 + off + i * x128::size);
            x128 b = load128cs(inp2 + off + i * x128::size);
#pragma unroll
            for (int k = 0; k < x128::size; k++) x[k] = __float2bfloat16(__bfloat162float(a[k]) + __bfloat162float(b[k]));
            store128(residual + off + i * x128::size, x);
        } else {
            x = load128cs(inp1 + off + i * x128::size);
        }
        xs[i] = x;
#pragma unroll
        for (int k = 0; k < x128::size; k++) sum += __bfloat162float(x[k]);
    }
    sum = WarpReduce(temp[warp]).Sum(sum); // valid in lane 0 only
    const float m = __shfl_sync(0xffffffffu, sum, 0) / C;
    __syncwarp(); // before temp[warp] is reused

    float var = 0.0f;
    for (int i = lane; i < chunks; i += 32) {
        x128 x = xs[i];
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            float d = __bfloat162float(x[k]) - m;
            var += d * d;
        }
    }
    var = WarpReduce(temp[warp]).Sum(var);
    const float s = rsqrtf(__shfl_sync(0xffffffffu, var, 0) / C + LAYERNORM_EPS);

    for (int i = lane; i < chunks; i += 32) {
        x128 x = xs[i];
        x128 w = load128(weight + i * x128::size); // shared by every row: leave it cached
        x128 b = load128(bias + i * x128::size);
        x128 o;
#pragma unroll
        for (int k = 0; k < x128::size; k++)
            o[k] = __float2bfloat16((__bfloat162float(x[k]) - m) * s * __bfloat162float(w[k]) + __bfloat162float(b[k]));
        store128(out + off + i * x128::size, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

template <bool RESIDUAL>
inline void layernorm_forward_launch(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                     const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C,
                                     cudaStream_t stream, const char* what) {
    layernorm_check_channels(C, LN_FWD_MAX_C, what);
    if (N <= 0) return;
    const size_t smem = (size_t)LN_FWD_WARPS * C * sizeof(floatX);
    if (smem > 48 * 1024) // past the default limit the kernel has to opt in (C > 3072)
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_forward_kernel<RESIDUAL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    layernorm_forward_kernel<RESIDUAL><<<ceil_div(N, LN_FWD_WARPS), LN_FWD_WARPS * 32, smem, stream>>>(
        residual, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    CUDA_LAUNCH_CHECK();
}

// out (N, C), mean and rstd (N) written; inp (N, C), weight and bias (C).
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_forward_launch<false>(nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C, stream,
                                    "layernorm_forward");
}

// residual (N, C) = inp1 + inp2 (rounded to bf16); normed (N, C) = LN(residual); mean, rstd (N). One pass.
inline void fused_residual_layernorm_forward(floatX* residual, floatX* normed, float* mean, float* rstd,
                                             const floatX* inp1, const floatX* inp2, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_forward_launch<true>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, stream,
                                   "fused_residual_layernorm_forward");
}

// ---------------------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------------------

/*
 * Launch shape of the backward, a function of (N, C) only (the partial sums must not depend on the device):
 *   block (tx, ty): tx = C/8 rounded up to a warp, one 8-channel chunk per thread (threads past C/8 idle);
 *                   ty row groups side by side, ty = 512 / tx (at least 1);
 *   each block owns rows_per_block = steps * ty consecutive rows, group y taking rows y, y + ty, ...;
 *   blocks = ceil(N / rows_per_block), at most about LN_BWD_MAX_BLOCKS.
 */
constexpr int LN_BWD_THREADS = 512;
constexpr int LN_BWD_MAX_BLOCKS = 1024;
constexpr int LN_BWD_MAX_C = 4096; // tx <= 512: a block never exceeds LN_BWD_THREADS

struct LayernormBackwardPlan {
    int tx, ty, steps, rows_per_block, blocks;
};
inline LayernormBackwardPlan layernorm_backward_plan(int N, int C) {
    LayernormBackwardPlan p;
    p.tx = ceil_div(C / x128::size, 32) * 32;
    p.ty = std::max(1, LN_BWD_THREADS / p.tx);
    p.steps = std::max(1, ceil_div(N, p.ty * LN_BWD_MAX_BLOCKS));
    p.rows_per_block = p.steps * p.ty;
    p.blocks = ceil_div(N, p.rows_per_block);
    return p;
}

/*
 * Floats of scratch layernorm_backward needs for any row count up to N: per block, C dweight partials then
 * C dbias partials. The block count is not monotone in the row count (at C=768, 5120 rows take 1024
 * blocks and 8192 rows 820), so the bound is one that holds for every n <= N: a block has at least ty
 * rows, and there are never more than LN_BWD_MAX_BLOCKS.
 */
inline size_t layernorm_backward_scratch_floats(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return (size_t)std::min(ceil_div(N, layernorm_backward_plan(N, C).ty), LN_BWD_MAX_BLOCKS) * 2 * C;
}

/*
 * Pass 1. dinp (N, C) += the LayerNorm input gradient, row by row:
 *   dinp = rstd * (w*g - mean_c(w*g) - norm * mean_c(w*g*norm)),  norm = (x - mean) * rstd,  g = dout.
 * and partial (blocks, 2, C) = this block's sums over its rows of norm*g (dweight) and g (dbias).
 * A thread keeps its chunk's weight and its dweight/dbias sums in registers across rows. The two row sums
 * are reduced per warp (cub::WarpReduce) and then over the warps of the row group in warp order, through
 * shared memory double-buffered by step parity, so one barrier per step suffices: a buffer is rewritten two
 * steps later, after every thread has passed the barrier of the step in between, hence finished reading it.
 * Dynamic shared memory: 2*C floats when ty > 1, to add the row groups' partials in group order.
 */
static __global__ void __launch_bounds__(LN_BWD_THREADS, 2)
    layernorm_backward_kernel(floatX* dinp, float* partial, const floatX* dout, const floatX* inp,
                              const floatX* weight, const float* mean, const float* rstd, int N, int C,
                              int rows_per_block) {
    using WarpReduce = cub::WarpReduce<float>;
    __shared__ typename WarpReduce::TempStorage temp[LN_BWD_THREADS / 32];
    __shared__ float red[2][LN_BWD_THREADS / 32][2]; // [step parity][warp in block][dnorm sum, dnorm*norm sum]
    extern __shared__ float group_acc[]; // (2, C) when ty > 1

    const int tx = blockDim.x, ty = blockDim.y;
    const int warps_x = tx / 32; // tx is a multiple of 32
    const int wx = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wid = threadIdx.y * warps_x + wx;
    const int c = threadIdx.x * x128::size;
    const bool active = c < C;

    // The weight stays packed (bf16) to save registers; dweight/dbias sums are fp32.
    const x128 w = active ? load128(weight + c) : x128::zeros();
    float dw[x128::size], db[x128::size];
#pragma unroll
    for (int k = 0; k < x128::size; k++) dw[k] = 0.0f, db[k] = 0.0f;

    const int row0 = blockIdx.x * rows_per_block;
    const int row_end = min(N, row0 + rows_per_block);
    const int steps = rows_per_block / ty; // identical for every thread: the barrier below is uniform
    for (int step = 0; step < steps; step++) {
        const int row = row0 + step * ty + threadIdx.y;
        const bool valid = row < row_end;
        const int par = step & 1;
        // x, g and the old dinp stay packed across the reduction; norm and w*g are recomputed after it
        // (cheaper than holding 16 more floats in registers).
        x128 x = x128::zeros(), g = x128::zeros(), d_old = x128::zeros();
        float mu = 0.0f, r = 0.0f, a = 0.0f, b = 0.0f;
        if (valid && active) {
            const size_t off = (size_t)row * C + c;
            x = load128cs(inp + off);
            g = load128cs(dout + off);
            d_old = load128(dinp + off); // issued early: its latency overlaps the reduction
            mu = mean[row];
            r = rstd[row];
#pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float gk = __bfloat162float(g[k]);
                const float norm = (__bfloat162float(x[k]) - mu) * r;
                const float dn = __bfloat162float(w[k]) * gk;
                a += dn;
                b += dn * norm;
                dw[k] += norm * gk;
                db[k] += gk;
            }
        }
        a = WarpReduce(temp[wid]).Sum(a);
        __syncwarp(); // temp[wid] reused at once
        b = WarpReduce(temp[wid]).Sum(b);
        if (lane == 0) red[par][wid][0] = a, red[par][wid][1] = b;
        __syncthreads();
        if (valid && active) {
            float sa = 0.0f, sb = 0.0f;
            for (int i = 0; i < warps_x; i++) { // warp order: fixed
                sa += red[par][threadIdx.y * warps_x + i][0];
                sb += red[par][threadIdx.y * warps_x + i][1];
            }
            const float dn_mean = sa / C, dn_norm_mean = sb / C;
            x128 d;
#pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float norm = (__bfloat162float(x[k]) - mu) * r;
                const float dn = __bfloat162float(w[k]) * __bfloat162float(g[k]);
                d[k] = __float2bfloat16(__bfloat162float(d_old[k]) + r * (dn - dn_mean - norm * dn_norm_mean));
            }
            store128(dinp + (size_t)row * C + c, d);
        }
    }

    // Row groups' parameter-gradient sums, added in group order; the last group writes the block's partial.
    float* out = partial + (size_t)blockIdx.x * 2 * C;
    for (int y = 0; y < ty; y++) {
        if (threadIdx.y == y && active) {
            float* dst = (y == ty - 1) ? out : group_acc;
#pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float pw = (y == 0) ? 0.0f : group_acc[c + k];
                const float pb = (y == 0) ? 0.0f : group_acc[C + c + k];
                dst[c + k] = pw + dw[k];
                dst[C + c + k] = pb + db[k];
            }
        }
        if (ty > 1) __syncthreads(); // ty is uniform across the block
    }
}

constexpr int LN_BWD_FINAL_ROWS = 8;

/*
 * Pass 2. dweight (C) += sum over blocks of partial[:, 0, :], dbias (C) += of partial[:, 1, :], in block order.
 * Block (32, 8) covers 32 of the 2C columns: thread (x, y) sums blocks y, y+8, ... of column x, then row y=0
 * adds the 8 sums in order. Reads of 32 consecutive floats per warp are coalesced.
 */
static __global__ void layernorm_backward_final_kernel(floatX* dweight, floatX* dbias, const float* partial,
                                                       int blocks, int C) {
    __shared__ float part[LN_BWD_FINAL_ROWS][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const bool in = col < 2 * C;
    float s = 0.0f;
    if (in)
        for (int b = threadIdx.y; b < blocks; b += LN_BWD_FINAL_ROWS) s += partial[(size_t)b * 2 * C + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && in) {
        float total = 0.0f;
        for (int y = 0; y < LN_BWD_FINAL_ROWS; y++) total += part[y][threadIdx.x];
        floatX* g = col < C ? dweight + col : dbias + (col - C);
        *g = __float2bfloat16(__bfloat162float(*g) + total);
    }
}

/*
 * dinp (N, C), dweight (C), dbias (C) accumulate (+=). dout, inp (N, C); weight (C); mean, rstd (N) from the
 * forward. scratch: layernorm_backward_scratch_floats(N, C) floats.
 */
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean, const float* rstd, int N,
                               int C, cudaStream_t stream) {
    layernorm_check_channels(C, LN_BWD_MAX_C, "layernorm_backward");
    if (N <= 0) return;
    const LayernormBackwardPlan p = layernorm_backward_plan(N, C);
    const size_t smem = p.ty > 1 ? 2 * (size_t)C * sizeof(float) : 0; // ty > 1 only when C <= 2048: <= 16 KiB
    layernorm_backward_kernel<<<p.blocks, dim3(p.tx, p.ty), smem, stream>>>(dinp, scratch, dout, inp, weight, mean,
                                                                           rstd, N, C, p.rows_per_block);
    CUDA_LAUNCH_CHECK();
    layernorm_backward_final_kernel<<<ceil_div(2 * C, 32), dim3(32, LN_BWD_FINAL_ROWS), 0, stream>>>(
        dweight, dbias, scratch, p.blocks, C);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
