/*
 * Fused softmax + cross-entropy (+ its gradient) over the logits of the output head, on the GPU.
 *
 * logits (BT, Vp) bf16: the first V columns are real tokens, the Vp - V padded columns (Vp a multiple of 8,
 * here 128) take part in the matmul only. For each row:
 *   losses[row] = -log softmax(logits[row, :V])[target] = log(sum) - (logit[target] - max)   (fp32)
 * and, when write_dlogits, logits[row] is overwritten in place with
 *   dlogits[i] = (p_i - [i == target]) * dloss   for i < V,     0 for V <= i < Vp,
 * dloss being d(objective)/d(loss at one position) (1 / (B*T) for the mean loss). Probabilities are never
 * stored: this replaces a softmax kernel writing (BT, Vp) probabilities, a loss kernel and a dlogits kernel.
 *
 * One block per row, walked in reverse: block b takes row BT - 1 - b, so the first blocks read the rows the
 * lm_head matmul wrote last, which are still in L2. Pass 1 reads the row once and keeps an online (running max,
 * sum of exp(x - max)) pair per thread; the pairs are combined with cub::BlockReduce (a fixed tree:
 * deterministic). Pass 2, only with write_dlogits, reads the row again (mostly from L2: pass 1 just touched it)
 * with streaming loads and writes the gradient with streaming stores: dlogits (BT x Vp bf16, 1.6 GB for
 * GPT-2 at B=16) could never stay in L2, and ordinary stores would push out the logits rows still to be read.
 */
#pragma once
#include <cub/cub.cuh>
#include <math_constants.h>

#include "llmc/cuda_common.cuh"

namespace llmc {

constexpr int CLASSIFIER_THREADS = 512;

// Running softmax statistics: m = max seen so far, s = sum of exp(x - m). s == 0 means "no values yet".
struct SoftmaxStats {
    float m, s;
};
struct SoftmaxStatsCombine {
    __device__ SoftmaxStats operator()(const SoftmaxStats& a, const SoftmaxStats& b) const {
        if (a.s == 0.0f) return b; // an empty side has m = -inf: exp(-inf - -inf) would be NaN
        if (b.s == 0.0f) return a;
        const float m = fmaxf(a.m, b.m);
        return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
    }
};

/*
 * logits (BT, Vp) in, and dlogits out in place when write_dlogits; losses (BT) out (skipped when null);
 * targets (BT) in [0, V).
 */
static __global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss, int V, int Vp,
                            bool write_dlogits) {
    using BlockReduce = cub::BlockReduce<SoftmaxStats, CLASSIFIER_THREADS>;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ SoftmaxStats row_stats;

    const size_t row = gridDim.x - 1 - blockIdx.x; // reverse: the last rows written are still in L2
    floatX* x = logits + row * Vp;
    const int target = targets[row];
    // Read the target's logit before pass 2 can overwrite it (pass 2 starts after the barrier below).
    const float target_logit = threadIdx.x == 0 ? __bfloat162float(x[target]) : 0.0f;

    // Pass 1: online max and sum over the V real columns. Chunks are 8 columns; a chunk straddling V is masked,
    // and chunks starting at or past V are all padding and skipped.
    const int chunks = Vp / x128::size;
    SoftmaxStats st = {-CUDART_INF_F, 0.0f};
    for (int i = threadIdx.x; i < chunks && i * x128::size < V; i += CLASSIFIER_THREADS) {
        // Default caching: pass 2 reads the row again.
        x128 v = load128(x + i * x128::size);
        float f[x128::size];
        float cm = -CUDART_INF_F;
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            f[k] = __bfloat162float(v[k]);
            if (i * x128::size + k < V) cm = fmaxf(cm, f[k]);
        }
        const float m = fmaxf(st.m, cm); // finite: the chunk has at least one real column
        float s = st.s * expf(st.m - m);   // st.m = -inf gives exp(-inf) = 0, and st.s is 0 then anyway
#pragma unroll
        for (int k = 0; k < x128::size; k++)
            if (i * x128::size + k < V) s += expf(f[k] - m);
        st = {m, s};
    }
    SoftmaxStats total = BlockReduce(temp).Reduce(st, SoftmaxStatsCombine()); // valid in thread 0
    if (threadIdx.x == 0) {
        row_stats = total;
        if (losses) losses[row] = logf(total.s) - (target_logit - total.m);
    }
    __syncthreads();
    if (!write_dlogits) return;

    // Pass 2: dlogits in place.
    const float m = row_stats.m, inv_s = 1.0f / row_stats.s;
    for (int i = threadIdx.x; i < chunks; i += CLASSIFIER_THREADS) {
        const int c0 = i * x128::size;
        x128 d;
        if (c0 < V) {
            x128 v = load128cs(x + c0); // last read of the logits
#pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const int c = c0 + k;
                const float p = expf(__bfloat162float(v[k]) - m) * inv_s;
                d[k] = __float2bfloat16(c < V ? (p - (c == target ? 1.0f : 0.0f)) * dloss : 0.0f);
            }
        } else {
            d = x128::zeros(); // padded columns: exactly zero gradient
        }
        store128cs(x + c0, d);
    }
}

inline void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int BT, int V, int Vp,
                             bool write_dlogits, cudaStream_t stream) {
    if (V <= 0 || Vp < V || Vp % x128::size != 0)
        throw Error(strprintf("fused_classifier: need 0 < V <= Vp and Vp a multiple of 8 (V=%d, Vp=%d)", V, Vp));
    if (BT <= 0) return;
    fused_classifier_kernel<<<BT, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, targets, dloss, V, Vp,
                                                                   write_dlogits);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
