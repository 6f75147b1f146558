/*
 * Optimizer kernels on the GPU: deterministic global gradient norm, and the AdamW update on fp32 master
 * weights with the bf16 parameters re-derived from them. Same math as llmc/cpu/adamw.h.
 *
 * global_norm_squared: a FIXED grid (GLOBAL_NORM_BLOCKS blocks, whatever n) grid-strides over the gradient,
 * each block reduces its threads' fp32 sums with cub::BlockReduce into scratch[block], and one final block
 * reduces the partials in a fixed tree and writes the device scalar. The order of every addition depends only
 * on n, so the norm is bitwise reproducible, and it never leaves the device.
 *
 * adamw_update: the clip factor is computed by each thread from the device scalar (a broadcast load), so
 * clipping needs no host round trip. Called once per parameter tensor with that tensor's weight decay. What changes
 * from step to step, the learning rate and the bias corrections (AdamWStep), is read from device memory too, so a
 * captured update (llmc/gpu/step_graphs.cuh) replays with each step's values; the host computes them as the CPU
 * reference does (adamw_step), so the update is the same bit for bit either way.
 *
 * Vectorised 8 values per thread, two groups of 4 a warp-width apart (8-byte bf16 and 16-byte fp32 accesses,
 * every warp request contiguous; adamw_kernel); pointers must be 16-byte aligned, which holds for every parameter
 * tensor when C is a multiple of 8 (all tensor sizes are multiples of C). A last partial warp's 256 values are
 * handled value by value, so any n works.
 */
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cub/cub.cuh>

#include "llmc/cuda_common.cuh"

namespace llmc {

constexpr int GLOBAL_NORM_BLOCKS = 1024; // fixed: the reduction order must not depend on n or the device
constexpr int GLOBAL_NORM_THREADS = 512;
constexpr int ADAMW_THREADS = 256;

inline void adamw_check_aligned(const void* p, const char* what) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw Error(strprintf("optimizer kernels: %s is not 16-byte aligned (x128 access)", what));
}

inline size_t global_norm_scratch_floats() { return GLOBAL_NORM_BLOCKS; }

// partial[block] = sum of squares of this block's grid-stride share of grads (n).
static __global__ void __launch_bounds__(GLOBAL_NORM_THREADS)
    global_norm_partial_kernel(float* partial, const floatX* grads, size_t n) {
    using BlockReduce = cub::BlockReduce<float, GLOBAL_NORM_THREADS>;
    __shared__ typename BlockReduce::TempStorage temp;
    const size_t tid = (size_t)blockIdx.x * GLOBAL_NORM_THREADS + threadIdx.x;
    const size_t stride = (size_t)GLOBAL_NORM_BLOCKS * GLOBAL_NORM_THREADS;
    const size_t chunks = n / x128::size;
    float acc = 0.0f;
    for (size_t i = tid; i < chunks; i += stride) {
        x128 g = load128cs(grads + i * x128::size); // read once here (the update reads it again, long after)
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            const float f = __bfloat162float(g[k]);
            acc += f * f;
        }
    }
    // The n % 8 tail: one value each for the first threads of the grid.
    if (tid < n - chunks * x128::size) {
        const float f = __bfloat162float(grads[chunks * x128::size + tid]);
        acc += f * f;
    }
    const float block_sum = BlockReduce(temp).Sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = block_sum;
}

// *out = sum of partial (GLOBAL_NORM_BLOCKS), one block, fixed tree.
static __global__ void __launch_bounds__(GLOBAL_NORM_THREADS) global_norm_final_kernel(float* out, const float* partial) {
    using BlockReduce = cub::BlockReduce<float, GLOBAL_NORM_THREADS>;
    __shared__ typename BlockReduce::TempStorage temp;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < GLOBAL_NORM_BLOCKS; i += GLOBAL_NORM_THREADS) acc += partial[i]; // fixed order
    const float total = BlockReduce(temp).Sum(acc);
    if (threadIdx.x == 0) *out = total;
}

/*
 * *out (device scalar) = sum of grads[i]^2 (fp32) over grads (n). scratch: global_norm_scratch_floats() floats.
 * The norm is sqrt(*out); adamw_update takes the square directly.
 */
inline void global_norm_squared(float* out, float* scratch, const floatX* grads, size_t n, cudaStream_t stream) {
    adamw_check_aligned(grads, "grads");
    global_norm_partial_kernel<<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, stream>>>(scratch, grads, n);
    CUDA_LAUNCH_CHECK();
    global_norm_final_kernel<<<1, GLOBAL_NORM_THREADS, 0, stream>>>(out, scratch);
    CUDA_LAUNCH_CHECK();
}

// What one update's step changes: its learning rate and the bias corrections 1 - beta1^t, 1 - beta2^t.
struct AdamWStep {
    float lr, bc1, bc2;
};
// The host's values for step t (1-based), computed exactly as llmc/cpu/adamw.h computes them.
inline AdamWStep adamw_step(float lr, float beta1, float beta2, int t) {
    return {lr, 1.0f - std::pow(beta1, (float)t), 1.0f - std::pow(beta2, (float)t)};
}

// The AdamW step of one value; returns the new master weight.
__device__ inline float adamw_value(float p, float g, float& m, float& v, float lr, float beta1, float beta2,
                                    float bc1, float bc2, float eps, float wd) {
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float mhat = m / bc1, vhat = v / bc2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

/*
 * master, m, v (n) fp32 updated in place; params (n) = bf16(master) (round to nearest); grads (n) bf16.
 * The gradient is scaled by clip / norm when norm = sqrt(*grad_norm_squared) > clip > 0. step: device memory.
 *
 * A warp updates 256 consecutive values, each lane the 4 at 4 * lane and the 4 at 128 + 4 * lane: every fp32
 * access of the warp is 512 contiguous bytes (16 sectors, the ideal) and every bf16 one 256 (8 sectors). With 8
 * consecutive values a lane, the fp32 halves of neighbouring lanes are 32 bytes apart and each request touches 32
 * sectors, half of each (doc/gpu_trainer.md, "Emulated memory counters").
 */
static __global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                 const AdamWStep* __restrict__ step, float beta1, float beta2, float eps, float wd,
                 const float* grad_norm_squared, float grad_clip) {
    constexpr int kWarpValues = 32 * x128::size, kHalf = kWarpValues / 2;
    const size_t warp0 = ((size_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31u)) * x128::size;
    const size_t i = warp0 + 4 * (threadIdx.x & 31u); // the lane's first 4 values; the other 4 at i + kHalf
    if (i >= n) return;
    const float lr = step->lr, bc1 = step->bc1, bc2 = step->bc2; // the same address in every thread: broadcasts
    float scale = 1.0f;
    if (grad_norm_squared != nullptr && grad_clip > 0.0f) {
        const float norm = sqrtf(*grad_norm_squared); // same address in every thread: one broadcast load
        if (norm > grad_clip) scale = grad_clip / norm;
    }
    if (warp0 + kWarpValues <= n) {
        // Everything here is read once and written once: streaming loads.
        for (int h = 0; h < 2; h++) {
            const size_t j = i + h * kHalf;
            const uint2 graw = __ldcs(reinterpret_cast<const uint2*>(grads + j)); // 4 bf16, 8 bytes
            floatX g[4];
            memcpy(g, &graw, sizeof graw);
            f128 p = load128cs(master + j), mm = load128cs(m + j), vv = load128cs(v + j);
            floatX out[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                p[k] = adamw_value(p[k], __bfloat162float(g[k]) * scale, mm[k], vv[k], lr, beta1, beta2, bc1, bc2, eps, wd);
                out[k] = __float2bfloat16(p[k]);
            }
            store128(master + j, p);
            store128(m + j, mm);
            store128(v + j, vv);
            uint2 oraw;
            memcpy(&oraw, out, sizeof oraw);
            __stcs(reinterpret_cast<uint2*>(params + j), oraw);
        }
    } else {
        for (int h = 0; h < 2; h++)
            for (size_t j = i + h * kHalf; j < i + h * kHalf + 4 && j < n; j++) {
                float mj = m[j], vj = v[j];
                const float p = adamw_value(master[j], __bfloat162float(grads[j]) * scale, mj, vj, lr, beta1, beta2,
                                            bc1, bc2, eps, wd);
                m[j] = mj;
                v[j] = vj;
                master[j] = p;
                params[j] = __float2bfloat16(p);
            }
    }
}

/*
 * One AdamW step over one parameter tensor of n values. step: device memory holding adamw_step(lr, beta1, beta2, t)
 * of this step (t 1-based), read when the kernel runs. grad_norm_squared: device scalar from global_norm_squared, or
 * null for no clipping; grad_clip <= 0 disables clipping as well.
 */
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                         const AdamWStep* step, float beta1, float beta2, float eps, float weight_decay,
                         const float* grad_norm_squared, float grad_clip, cudaStream_t stream) {
    if (n == 0) return;
    adamw_check_aligned(params, "params");
    adamw_check_aligned(master, "master");
    adamw_check_aligned(grads, "grads");
    adamw_check_aligned(m, "m");
    adamw_check_aligned(v, "v");
    const size_t grid = ceil_div(ceil_div(n, (size_t)x128::size), (size_t)ADAMW_THREADS);
    adamw_kernel<<<(unsigned)grid, ADAMW_THREADS, 0, stream>>>(params, master, grads, m, v, n, step, beta1, beta2, eps,
                                                                weight_decay, grad_norm_squared, grad_clip);
    CUDA_LAUNCH_CHECK();
}

// dst (n) bf16 = src (n) fp32, round to nearest.
static __global__ void copy_float_to_bf16_kernel(floatX* dst, const float* src, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    if (i + x128::size <= n) {
        const f128 a = load128cs(src + i), b = load128cs(src + i + 4);
        x128 out;
#pragma unroll
        for (int k = 0; k < 4; k++) out[k] = __float2bfloat16(a[k]), out[k + 4] = __float2bfloat16(b[k]);
        store128(dst + i, out);
    } else {
        for (size_t j = i; j < n; j++) dst[j] = __float2bfloat16(src[j]);
    }
}

inline void copy_float_to_bf16(floatX* dst, const float* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    adamw_check_aligned(dst, "dst");
    adamw_check_aligned(src, "src");
    const size_t grid = ceil_div(ceil_div(n, (size_t)x128::size), (size_t)ADAMW_THREADS);
    copy_float_to_bf16_kernel<<<(unsigned)grid, ADAMW_THREADS, 0, stream>>>(dst, src, n);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
