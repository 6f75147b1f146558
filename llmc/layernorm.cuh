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
 * Backward, one kernel: dinp, dweight and dbias all accumulate (+=). dinp is the residual stream's gradient,
 * which the other branch also adds into. One warp per row; dweight/dbias are sums over all N rows, kept
 * deterministic without float atomics: each block writes fp32 partial column sums (scratch), the last block of
 * each group of blocks to finish adds its group's partials in block order, and the last group to finish adds
 * the group sums in group order into the bf16 gradients once (integer atomic tickets decide who adds, never
 * the order). The slicing depends only on (N, C), so the result is bitwise reproducible.
 *
 * All C must be multiples of 8 (16-byte x128 rows), at most LN_FWD_MAX_C (forward) and LN_BWD_MAX_C
 * (backward); launchers throw otherwise. Rows need not fill a block: the last block's slice is shorter.
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
 *   warps per block: as many (up to LN_BWD_MAX_WARPS) as fit their dweight/dbias accumulators (2C fp32 each)
 *                    in LN_BWD_ACC_BUDGET bytes of shared memory;
 *   each block owns rows_per_block consecutive rows, warp w taking rows w, w + warps, ...;
 *   blocks = ceil(N / rows_per_block), at most LN_BWD_MAX_BLOCKS; groups of LN_BWD_GROUP consecutive blocks.
 */
constexpr int LN_BWD_MAX_WARPS = 8;
constexpr int LN_BWD_ACC_BUDGET = 64 * 1024;
constexpr int LN_BWD_MAX_BLOCKS = 256;
constexpr int LN_BWD_GROUP = 16;
constexpr int LN_BWD_MAX_GROUPS = (LN_BWD_MAX_BLOCKS + LN_BWD_GROUP - 1) / LN_BWD_GROUP;
constexpr int LN_BWD_MAX_C = LN_BWD_ACC_BUDGET / (2 * (int)sizeof(float)); // one warp's accumulators fit: 8192

struct LayernormBackwardPlan {
    int warps, rows_per_block, blocks, groups;
};
inline LayernormBackwardPlan layernorm_backward_plan(int N, int C) {
    LayernormBackwardPlan p;
    p.warps = std::max(1, std::min(LN_BWD_MAX_WARPS, LN_BWD_ACC_BUDGET / (2 * C * (int)sizeof(float))));
    const int most = std::min(LN_BWD_MAX_BLOCKS, ceil_div(N, p.warps)); // at least a row per warp
    p.rows_per_block = ceil_div(N, most);
    p.blocks = ceil_div(N, p.rows_per_block); // no block left empty
    p.groups = ceil_div(p.blocks, LN_BWD_GROUP);
    return p;
}

/*
 * Floats of scratch layernorm_backward needs for any row count up to N: a (blocks, 2C) partial per block, then
 * a (groups, 2C) partial per group. The block count is not monotone in the row count, so the bound is one that
 * is: a block has at least `warps` rows, and there are never more than LN_BWD_MAX_BLOCKS.
 */
inline size_t layernorm_backward_scratch_floats(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    const int blocks = std::min(LN_BWD_MAX_BLOCKS, ceil_div(N, layernorm_backward_plan(N, C).warps));
    return (size_t)(blocks + ceil_div(blocks, LN_BWD_GROUP)) * 2 * C;
}

/*
 * Dynamic shared memory of a block: a flag word (padded to 16 bytes), then per warp its fp32 accumulators as
 * 4 arrays of C/8 f128 (dweight of channels 8i..8i+3, dweight of 8i+4..8i+7, dbias the same): lane l touches
 * only chunks l, l + 32, ..., so a warp needs no barrier to update them, and a quarter-warp's 16-byte
 * accesses fall on consecutive addresses (no bank conflicts). The block's partials and the scratch use the
 * same (4, C/8) f128 order.
 */
struct LayernormBackwardSmem {
    static constexpr size_t flag = 0;  // unsigned int: this block adds the next level's partials
    static constexpr size_t acc = 16;  // f128 [warps][4][C/8]
    static size_t bytes(int warps, int C) { return acc + (size_t)warps * 2 * C * sizeof(float); }
};
static_assert(LayernormBackwardSmem::acc % sizeof(f128) == 0 && LayernormBackwardSmem::acc >= sizeof(unsigned int),
              "accumulators 16-byte aligned after the flag");

// Group counters, then the count of finished groups. Zero at load and left zero by every launch: two
// launches of the kernel must not run at the same time (the training step runs them on one stream).
static __device__ unsigned int layernorm_backward_counters[LN_BWD_MAX_GROUPS + 1];

// Sum over the warp, the same value in every lane (each butterfly step adds the same two values in both lanes).
__device__ inline float ln_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/*
 * dinp (N, C) += the LayerNorm input gradient, row by row, one warp per row:
 *   dinp = rstd * (w*g - mean_c(w*g) - norm * mean_c(w*g*norm)),  norm = (x - mean) * rstd,  g = dout;
 * dweight (C) += sum over rows of norm*g, dbias (C) += of g, deterministically in three levels:
 *   1. each warp adds its rows into its shared accumulators (its rows in order), the block adds its warps in
 *      warp order and writes its partial (2C floats) to scratch[block];
 *   2. the last block of each group of LN_BWD_GROUP blocks to finish (an integer atomic ticket after a
 *      __threadfence) adds the group's partials in block order into scratch[blocks + group];
 *   3. the last group to finish adds the group partials in group order into the bf16 gradients, once.
 * Which block finishes last changes who adds, never the order of the additions: bitwise reproducible.
 * A row's values are read twice (the row sums first, then the gradient); the second read mostly hits L1 or L2.
 */
static __global__ void __launch_bounds__(LN_BWD_MAX_WARPS * 32)
    layernorm_backward_kernel(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                              const floatX* inp, const floatX* weight, const float* mean, const float* rstd, int N,
                              int C, int rows_per_block) {
    extern __shared__ f128 ln_bwd_smem[];
    unsigned int* is_last = reinterpret_cast<unsigned int*>(ln_bwd_smem) + LayernormBackwardSmem::flag / 4;
    f128* accs = ln_bwd_smem + LayernormBackwardSmem::acc / sizeof(f128);

    const int t = threadIdx.x, warps = blockDim.x / 32, warp = t / 32, lane = t % 32;
    const int chunks = C / x128::size, width = 4 * chunks; // f128 per warp accumulator set (2C floats)
    f128* dw_lo = accs + (size_t)warp * width;
    f128 *dw_hi = dw_lo + chunks, *db_lo = dw_lo + 2 * chunks, *db_hi = dw_lo + 3 * chunks;
    for (int i = lane; i < chunks; i += 32) {
        dw_lo[i] = f128::zeros(), dw_hi[i] = f128::zeros();
        db_lo[i] = f128::zeros(), db_hi[i] = f128::zeros();
    }

    const int row0 = (int)blockIdx.x * rows_per_block, row_end = min(N, row0 + rows_per_block);
    for (int row = row0 + warp; row < row_end; row += warps) {
        const size_t off = (size_t)row * C;
        const float mu = mean[row], r = rstd[row];
        float a = 0.0f, b = 0.0f; // sums of w*g and w*g*norm over the row
        for (int i = lane; i < chunks; i += 32) {
            const x128 x = load128(inp + off + i * x128::size), g = load128(dout + off + i * x128::size);
            const x128 w = load128(weight + i * x128::size);
#pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float dn = __bfloat162float(w[k]) * __bfloat162float(g[k]);
                a += dn;
                b += dn * ((__bfloat162float(x[k]) - mu) * r);
            }
        }
        const float dn_mean = ln_warp_sum(a) / C, dn_norm_mean = ln_warp_sum(b) / C;
        for (int i = lane; i < chunks; i += 32) {
            const size_t at = off + i * x128::size;
            const x128 x = load128cs(inp + at), g = load128cs(dout + at), d_old = load128(dinp + at);
            const x128 w = load128(weight + i * x128::size);
            f128 acc[4] = {dw_lo[i], dw_hi[i], db_lo[i], db_hi[i]};
            x128 d;
#pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float gk = __bfloat162float(g[k]);
                const float norm = (__bfloat162float(x[k]) - mu) * r;
                const float dn = __bfloat162float(w[k]) * gk;
                acc[k / f128::size][k % f128::size] += norm * gk;
                acc[2 + k / f128::size][k % f128::size] += gk;
                d[k] = __float2bfloat16(__bfloat162float(d_old[k]) + r * (dn - dn_mean - norm * dn_norm_mean));
            }
            store128(dinp + at, d);
            dw_lo[i] = acc[0], dw_hi[i] = acc[1], db_lo[i] = acc[2], db_hi[i] = acc[3];
        }
    }
    __syncthreads();

    // Level 1: the block's warps in warp order.
    float* partial = scratch + (size_t)blockIdx.x * 2 * C;
    for (int j = t; j < width; j += blockDim.x) {
        f128 s = accs[j];
        for (int w = 1; w < warps; w++) {
            const f128 v = accs[(size_t)w * width + j];
#pragma unroll
            for (int k = 0; k < f128::size; k++) s[k] += v[k];
        }
        store128(partial + j * f128::size, s);
    }

    // Level 2: the group's last block to finish adds the group's blocks in order. The fence makes this
    // block's partial visible to every block before its ticket is counted.
    const int group = blockIdx.x / LN_BWD_GROUP, groups = ceil_div((int)gridDim.x, LN_BWD_GROUP);
    const int first = group * LN_BWD_GROUP, in_group = min(LN_BWD_GROUP, (int)gridDim.x - first);
    __threadfence();
    __syncthreads();
    if (t == 0) *is_last = atomicAdd(&layernorm_backward_counters[group], 1u) == (unsigned)in_group - 1;
    __syncthreads();
    if (!*is_last) return;
    if (t == 0) layernorm_backward_counters[group] = 0; // every block of the group has counted: reset
    float* group_partial = scratch + ((size_t)gridDim.x + group) * 2 * C;
    for (int j = t; j < width; j += blockDim.x) {
        f128 s = f128::zeros();
        for (int blk = first; blk < first + in_group; blk++) {
            const f128 v = load128cg(scratch + (size_t)blk * 2 * C + j * f128::size);
#pragma unroll
            for (int k = 0; k < f128::size; k++) s[k] += v[k];
        }
        store128(group_partial + j * f128::size, s);
    }

    // Level 3: the last group to finish adds the groups in order into the gradients.
    __threadfence();
    __syncthreads();
    if (t == 0)
        *is_last = atomicAdd(&layernorm_backward_counters[LN_BWD_MAX_GROUPS], 1u) == (unsigned)groups - 1;
    __syncthreads();
    if (!*is_last) return;
    if (t == 0) layernorm_backward_counters[LN_BWD_MAX_GROUPS] = 0;
    const float* group_partials = scratch + (size_t)gridDim.x * 2 * C;
    for (int j = t; j < width; j += blockDim.x) {
        f128 s = f128::zeros();
        for (int grp = 0; grp < groups; grp++) {
            const f128 v = load128cg(group_partials + (size_t)grp * 2 * C + j * f128::size);
#pragma unroll
            for (int k = 0; k < f128::size; k++) s[k] += v[k];
        }
        // f128 j is array j / chunks (dweight low, dweight high, dbias low, dbias high) of chunk j % chunks.
        const int arr = j / chunks, c0 = (j % chunks) * x128::size + (arr % 2) * f128::size;
        floatX* grad = (arr < 2 ? dweight : dbias) + c0;
#pragma unroll
        for (int k = 0; k < f128::size; k++) grad[k] = __float2bfloat16(__bfloat162float(grad[k]) + s[k]);
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
    const size_t smem = LayernormBackwardSmem::bytes(p.warps, C);
    if (smem > 48 * 1024) // past the default limit the kernel has to opt in
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    layernorm_backward_kernel<<<p.blocks, p.warps * 32, smem, stream>>>(dinp, dweight, dbias, scratch, dout, inp,
                                                                        weight, mean, rstd, N, C, p.rows_per_block);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
