/*
 * Token choice on the GPU for infer_gpt2cu: one block per logits row reads the row and writes the chosen id of
 * the row's sequence, so only the ids cross to the host per step. Same rule as the CPU's pick_token
 * (llmc/infer/pick_token.h):
 *
 *   a logit that is not finite (NaN, inf) among the row's V: kNotFinite (-1), which the programs stop on;
 *   temperature 0: the argmax, the lowest id among equal maxima;
 *   else:          a draw from softmax(logits / temperature) restricted to the top k (k = 0: all), every
 *                  logit equal to the k-th largest kept (ties are not broken arbitrarily), by the inverse CDF
 *                  in id order at coin * total.
 *
 *   logits  (R, Vp) bf16, one row per sequence still generating; ids >= V (the padding) are never read
 *   seq     (R) int: the sequence of each row, distinct (rows of a decode step after some sequences stopped
 *           are the running ones only)
 *   ids     (S) int indexed by sequence, S > every seq[r]: ids[seq[r]] written, the others left as they are
 *   coins   (S) fp32 in [0, 1) on the device, one per sequence (the host draws them: the same stream as the CPU)
 *
 * The k-th largest logit is found by bisection on the bf16 bit pattern mapped to an ordered 16-bit key
 * (16 counting passes over the row): no sort, no scratch, exact on ties. The CDF walk: each thread owns a
 * contiguous chunk of ids; thread 0 scans the chunk sums in order, and the thread whose chunk holds the
 * target walks it. Every reduction is a fixed tree in shared memory, so the result depends only on the
 * inputs, never on the schedule.
 */
#pragma once
#include <cfloat>
#include <cmath>
#include <cstring>

#include "llmc/cuda_common.cuh"
#include "llmc/infer/sampler.h"
#include "llmc/util/utils.h"

namespace llmc {

constexpr int kSampleThreads = 256;
static_assert(kSampleThreads % 32 == 0, "whole warps: the not-finite flag is reduced per warp");

namespace detail {

// bf16 bits -> a key whose unsigned order is the numeric order (negative values bit-flipped); -0 keys as +0,
// so the two zeros tie as they compare equal on the CPU.
__device__ __forceinline__ unsigned bf16_order_key(floatX x) {
    unsigned short u;
    memcpy(&u, &x, sizeof(u)); // the bit pattern (memcpy: no aliasing assumptions, and the emulator's bf16 too)
    if (u == 0x8000u) u = 0;
    return (u & 0x8000u) ? (unsigned)(0xFFFFu & ~u) : (unsigned)(u | 0x8000u);
}

static __global__ void __launch_bounds__(kSampleThreads)
    sample_tokens_kernel(int* __restrict__ ids, const floatX* __restrict__ logits, const int* __restrict__ seq,
                         const float* __restrict__ coins, int V, int Vp, float temperature, int top_k) {
    __shared__ float s_val[kSampleThreads];
    __shared__ int s_idx[kSampleThreads];
    __shared__ unsigned s_lo;
    __shared__ unsigned s_hi;
    __shared__ int s_owner;
    __shared__ float s_target;
    __shared__ int s_not_finite[kSampleThreads / 32]; // per warp: one writer each
    const int tid = threadIdx.x, r = blockIdx.x, b = seq[r];
    const floatX* row = logits + (size_t)r * Vp;

    // ---- argmax, lowest id on ties: strided pass, then a tree; any logit not finite flags the row ----
    float best = -INFINITY;
    int best_i = tid < V ? tid : V;
    bool not_finite = false;
    for (int i = tid; i < V; i += kSampleThreads) {
        const float x = __bfloat162float(row[i]);
        not_finite |= !(fabsf(x) <= FLT_MAX); // NaN compares false
        if (x > best) best = x, best_i = i; // ids rise along the pass: the first maximum stays
    }
    not_finite = __any_sync(0xffffffffu, not_finite);
    if (tid % 32 == 0) s_not_finite[tid / 32] = not_finite;
    s_val[tid] = best, s_idx[tid] = best_i;
    __syncthreads();
    for (int w = 0; w < kSampleThreads / 32; w++) not_finite |= s_not_finite[w] != 0;
    if (not_finite) { // uniform across the block: read after the barrier
        if (tid == 0) ids[b] = kNotFinite;
        return;
    }
    for (int w = kSampleThreads / 2; w > 0; w >>= 1) {
        if (tid < w) {
            const float o = s_val[tid + w];
            const int oi = s_idx[tid + w];
            if (o > s_val[tid] || (o == s_val[tid] && oi < s_idx[tid])) s_val[tid] = o, s_idx[tid] = oi;
        }
        __syncthreads();
    }
    const float maxval = s_val[0];
    const int argmax = s_idx[0];
    if (temperature == 0.0f) { // uniform across the block: a kernel argument
        if (tid == 0) ids[b] = argmax;
        return;
    }
    __syncthreads(); // everyone has read s_val[0] before the arrays are reused

    // ---- the k-th largest key: the largest threshold with at least k logits at or above it ----
    unsigned thr = 0;
    if (top_k > 0 && top_k < V) {
        if (tid == 0) s_lo = 0, s_hi = 0xFFFFu;
        __syncthreads();
        for (int it = 0; it < 17; it++) { // [lo, hi] halves each pass: 16 passes settle 65536 keys
            const unsigned lo = s_lo, hi = s_hi;
            const unsigned mid = (lo + hi + 1) / 2;
            int count = 0;
            for (int i = tid; i < V; i += kSampleThreads) count += bf16_order_key(row[i]) >= mid;
            s_idx[tid] = count;
            __syncthreads();
            for (int w = kSampleThreads / 2; w > 0; w >>= 1) {
                if (tid < w) s_idx[tid] += s_idx[tid + w];
                __syncthreads();
            }
            if (tid == 0) {
                if (lo < hi) {
                    if (s_idx[0] >= top_k) s_lo = mid;
                    else s_hi = mid - 1;
                }
            }
            __syncthreads();
        }
        thr = s_lo;
    }

    // ---- weights exp((x - max) / T) of the kept ids, summed per contiguous chunk ----
    const int chunk = ceil_div(V, kSampleThreads), i0 = min(V, tid * chunk), i1 = min(V, i0 + chunk);
    const float inv_t = 1.0f / temperature;
    auto weight = [&](int i) {
        const floatX x = row[i];
        return bf16_order_key(x) >= thr ? expf((__bfloat162float(x) - maxval) * inv_t) : 0.0f;
    };
    float sum = 0.0f;
    for (int i = i0; i < i1; i++) sum += weight(i);
    s_val[tid] = sum;
    __syncthreads();
    if (tid == 0) {
        float total = 0.0f;
        int last = 0;
        for (int t = 0; t < kSampleThreads; t++) {
            total += s_val[t];
            if (s_val[t] > 0.0f) last = t;
        }
        const float target = coins[b] * total;
        // The owner: the chunk whose cumulative range holds the target; coin * total rounded up to total
        // falls to the last chunk with weight.
        float cdf = 0.0f;
        int owner = last;
        for (int t = 0; t < kSampleThreads; t++) {
            if (s_val[t] > 0.0f && target < cdf + s_val[t]) {
                owner = t;
                break;
            }
            cdf += s_val[t];
        }
        float before = 0.0f;
        for (int t = 0; t < owner; t++) before += s_val[t];
        s_owner = owner, s_target = target - before;
    }
    __syncthreads();
    if (tid == s_owner) {
        float cdf = 0.0f;
        int pick = -1, last_nonzero = i0;
        for (int i = i0; i < i1 && pick < 0; i++) {
            const float w = weight(i);
            if (w <= 0.0f) continue;
            cdf += w;
            last_nonzero = i;
            if (s_target < cdf) pick = i;
        }
        ids[b] = pick >= 0 ? pick : last_nonzero;
    }
}

} // namespace detail

// R rows of Vp logits, the first V of each real; temperature >= 0, top_k >= 0 (0 or >= V: all).
inline void sample_tokens(int* ids, const floatX* logits, const int* seq, const float* coins, int R, int V, int Vp,
                          float temperature, int top_k, cudaStream_t stream) {
    if (R < 1 || V < 1 || V > Vp || !(temperature >= 0.0f) || top_k < 0)
        throw Error(strprintf("sample_tokens: bad arguments R=%d V=%d Vp=%d temperature=%g top_k=%d", R, V, Vp,
                              temperature, top_k));
    detail::sample_tokens_kernel<<<R, kSampleThreads, 0, stream>>>(ids, logits, seq, coins, V, Vp, temperature,
                                                                   top_k);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
