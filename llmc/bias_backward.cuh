/*
 * Bias gradient of a matmul on the GPU: dbias (OC) += column sums of dout (BT, OC), bf16 storage, fp32 sums.
 *
 * Shapes: BT >= 0 rows, OC > 0 columns, OC a multiple of 8 (16-byte x128 loads) and at most BIAS_BWD_MAX_OC;
 * dout 16-byte aligned. The launcher throws otherwise.
 *
 * Algorithm, one kernel. The grid is (tiles, slabs): a tile is 64 columns (the last one partial when OC is not
 * a multiple of 64: its threads past OC load nothing), a slab a range of consecutive rows (the last one shorter
 * when BT is not a multiple of the slab). The grid is chosen from (BT, OC) alone, about BIAS_BWD_TARGET_BLOCKS
 * blocks, enough to fill the GPU several times over (132 SMs on an H100):
 *   - thread (tx, ty) of the block's 8 x 32 loads 16 bytes (8 columns) of every 32nd row of the slab, starting
 *     at row ty, and sums them in fp32 registers; a warp reads four rows of 128 contiguous bytes each;
 *   - the 32 row threads' sums are added in ty order through shared memory and the block writes its 64 fp32
 *     partial column sums to scratch[slab][tile];
 *   - the block then takes a ticket on its tile's counter (an integer atomic, after a __threadfence); the
 *     last of the tile's blocks to finish adds the tile's slab partials in slab order and adds the result
 *     into the bf16 gradient once, then resets the counter to 0 for the next launch.
 * Determinism: every sum runs in an order fixed by (BT, OC) (rows within a thread, row threads, slabs), never
 * by which block finishes last, and there are no float atomics: bitwise reproducible.
 *
 * The tile counters are a __device__ array of this translation unit, zero at load and left zero by every
 * launch: two launches of the kernel must not run at the same time (the training step runs them on one
 * stream).
 */
#pragma once
#include <algorithm>
#include <cstdint>

#include "llmc/cuda_common.cuh"

namespace llmc {

constexpr int BIAS_BWD_THREADS = 256;
constexpr int BIAS_BWD_TX = 8;                                   // threads across a tile, 8 columns each
constexpr int BIAS_BWD_TY = BIAS_BWD_THREADS / BIAS_BWD_TX;      // row threads: 32
constexpr int BIAS_BWD_TILE = BIAS_BWD_TX * x128::size;          // 64 columns
constexpr int BIAS_BWD_TARGET_BLOCKS = 1024;
constexpr int BIAS_BWD_MAX_TILES = 1024;
constexpr int BIAS_BWD_MAX_OC = BIAS_BWD_MAX_TILES * BIAS_BWD_TILE; // 65536
static_assert(BIAS_BWD_TY * BIAS_BWD_TX == BIAS_BWD_THREADS, "block shape");

// The grid, a function of (BT, OC) only: the partial sums must not depend on the device.
struct BiasBackwardPlan {
    int tiles, slabs, rows_per_slab;
};
inline BiasBackwardPlan bias_backward_plan(int BT, int OC) {
    BiasBackwardPlan p;
    p.tiles = ceil_div(OC, BIAS_BWD_TILE);
    // At most one slab per 32 rows (every row thread has a row), at least one.
    const int slabs = std::max(1, std::min(ceil_div(BIAS_BWD_TARGET_BLOCKS, p.tiles), ceil_div(BT, BIAS_BWD_TY)));
    p.rows_per_slab = std::max(1, ceil_div(BT, slabs));
    p.slabs = std::max(1, ceil_div(BT, p.rows_per_slab)); // no slab left empty
    return p;
}

// Scratch floats for any BT: slabs * tiles * 64 < (TARGET + tiles) * 64, and that bound grows with OC.
inline size_t bias_backward_scratch_floats(int OC) {
    return (size_t)(BIAS_BWD_TARGET_BLOCKS + ceil_div(OC, BIAS_BWD_TILE)) * BIAS_BWD_TILE;
}

// Shared memory of a block: the row threads' sums, then the final pass's slab-group sums.
struct BiasBackwardSmem {
    // sums[ty][half][tx]: thread (tx, ty)'s columns tx*8 + half*4 + 0..3, one 16-byte store each: 8 consecutive
    // lanes write 8 consecutive f128 (a conflict-free phase). Each half is padded to 48 words so that the quarter
    // pass's warp (32 consecutive columns: both halves of tx 0..3) reads word 48 ch + 4 ctx + ck, banks 0-15 for
    // one half and 16-31 for the other; unpadded, both halves sat in banks 0-15 (2-way conflicts).
    static constexpr int HALF_PAD = 4; // f128
    f128 sums[BIAS_BWD_TY][2][BIAS_BWD_TX + HALF_PAD];
    float quarter[4][BIAS_BWD_TILE];                                   // row threads 8q..8q+7 added, per column
    static constexpr int FINAL_COLS = BIAS_BWD_TILE / f128::size;       // 16 f128 across the tile
    static constexpr int FINAL_GROUPS = BIAS_BWD_THREADS / FINAL_COLS;  // 16 slab groups
    f128 final_sums[FINAL_GROUPS][FINAL_COLS];
    unsigned int is_last;
};
static_assert(BIAS_BWD_TY % 4 == 0 && BIAS_BWD_THREADS == 4 * BIAS_BWD_TILE, "four quarters of row threads");
static_assert((BIAS_BWD_TX + BiasBackwardSmem::HALF_PAD) * f128::size % 32 == 16 && 2 * BIAS_BWD_TX * f128::size == 64,
              "the two halves of a quarter-pass warp's 32 columns in different banks");
static_assert(sizeof(BiasBackwardSmem) <= 48 * 1024, "static shared memory");

static __device__ unsigned int bias_backward_tile_counters[BIAS_BWD_MAX_TILES];

/*
 * grid (tiles, slabs), block BIAS_BWD_THREADS. dbias (OC) += column sums of dout (BT, OC); partial:
 * (slabs, tiles, 64) fp32 scratch.
 */
static __global__ void __launch_bounds__(BIAS_BWD_THREADS, 4)
    bias_backward_kernel(floatX* dbias, float* partial, const floatX* dout, int BT, int OC, int rows_per_slab) {
    __shared__ BiasBackwardSmem sm;
    const int t = threadIdx.x, tx = t % BIAS_BWD_TX, ty = t / BIAS_BWD_TX;
    const int tile = blockIdx.x, slab = blockIdx.y, tiles = gridDim.x, slabs = gridDim.y;
    const int col = tile * BIAS_BWD_TILE + tx * x128::size;

    float acc[x128::size];
#pragma unroll
    for (int k = 0; k < x128::size; k++) acc[k] = 0.0f;
    if (col < OC) {
        const int r0 = slab * rows_per_slab, r1 = min(BT, r0 + rows_per_slab);
        const floatX* p = dout + col;
        // Four rows in flight per thread (those past the slab read as zeros, which add nothing).
        for (int r = r0 + ty; r < r1; r += 4 * BIAS_BWD_TY) {
            x128 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                v[u] = r + u * BIAS_BWD_TY < r1 ? load128(p + (size_t)(r + u * BIAS_BWD_TY) * OC) : x128::zeros();
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int k = 0; k < x128::size; k++) acc[k] += __bfloat162float(v[u][k]);
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        f128 v;
#pragma unroll
        for (int k = 0; k < f128::size; k++) v[k] = acc[h * f128::size + k];
        store128(&sm.sums[ty][h][tx][0], v);
    }
    __syncthreads();

    // Row threads added in ty order: quarter q sums ty = 8q..8q+7, then the four quarters in order.
    {
        const int c = t % BIAS_BWD_TILE, q = t / BIAS_BWD_TILE;
        const int ctx = c / x128::size, ch = (c % x128::size) / f128::size, ck = c % f128::size;
        float s = 0.0f;
        for (int y = q * (BIAS_BWD_TY / 4); y < (q + 1) * (BIAS_BWD_TY / 4); y++) s += sm.sums[y][ch][ctx][ck];
        sm.quarter[q][c] = s;
    }
    __syncthreads();
    if (t < BIAS_BWD_TILE) {
        const float s = ((sm.quarter[0][t] + sm.quarter[1][t]) + sm.quarter[2][t]) + sm.quarter[3][t];
        partial[((size_t)slab * tiles + tile) * BIAS_BWD_TILE + t] = s;
    }

    // The last of the tile's blocks adds the slabs. The fence makes this block's partial visible to every
    // block before its ticket is counted.
    __threadfence();
    __syncthreads();
    if (t == 0) sm.is_last = atomicAdd(&bias_backward_tile_counters[tile], 1u) == (unsigned)slabs - 1;
    __syncthreads();
    if (!sm.is_last) return;
    if (t == 0) bias_backward_tile_counters[tile] = 0; // every other block of the tile has counted: reset

    // Thread (g, j): f128 column j of the tile, slabs g, g + 16, ...; then the 16 groups in order.
    const int j = t % BiasBackwardSmem::FINAL_COLS, g = t / BiasBackwardSmem::FINAL_COLS;
    f128 s;
#pragma unroll
    for (int k = 0; k < f128::size; k++) s[k] = 0.0f;
    for (int sl = g; sl < slabs; sl += BiasBackwardSmem::FINAL_GROUPS) {
        const f128 v = load128cg(partial + ((size_t)sl * tiles + tile) * BIAS_BWD_TILE + j * f128::size);
#pragma unroll
        for (int k = 0; k < f128::size; k++) s[k] += v[k];
    }
    store128(&sm.final_sums[g][j][0], s); // 16 bytes a lane: conflict-free phases
    __syncthreads();
    if (t < BiasBackwardSmem::FINAL_COLS) {
        const int c0 = tile * BIAS_BWD_TILE + t * f128::size;
        f128 total = load128(&sm.final_sums[0][t][0]);
        for (int gg = 1; gg < BiasBackwardSmem::FINAL_GROUPS; gg++) {
            const f128 v = load128(&sm.final_sums[gg][t][0]);
#pragma unroll
            for (int k = 0; k < f128::size; k++) total[k] += v[k];
        }
        // OC is a multiple of 8, so a group of 4 columns is either wholly inside or wholly past it.
        if (c0 < OC)
#pragma unroll
            for (int k = 0; k < f128::size; k++)
                dbias[c0 + k] = __float2bfloat16(__bfloat162float(dbias[c0 + k]) + total[k]);
    }
}

/*
 * dbias (OC) += column sums of dout (BT, OC). scratch: bias_backward_scratch_floats(OC) floats (or more).
 */
inline void bias_backward(floatX* dbias, float* scratch, const floatX* dout, int BT, int OC, cudaStream_t stream) {
    if (OC <= 0 || OC % x128::size != 0 || OC > BIAS_BWD_MAX_OC || BT < 0)
        throw Error(strprintf("bias_backward: need BT >= 0 and OC a positive multiple of 8 up to %d (BT=%d, OC=%d)",
                              BIAS_BWD_MAX_OC, BT, OC));
    if (reinterpret_cast<uintptr_t>(dout) % 16 != 0)
        throw Error("bias_backward: dout must be 16-byte aligned (x128 loads)");
    if (BT == 0) return;
    const BiasBackwardPlan p = bias_backward_plan(BT, OC);
    bias_backward_kernel<<<dim3(p.tiles, p.slabs), BIAS_BWD_THREADS, 0, stream>>>(dbias, scratch, dout, BT, OC,
                                                                                  p.rows_per_slab);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
