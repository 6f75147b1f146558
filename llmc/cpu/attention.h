/*
 * Causal multi-head self-attention on the CPU. inp (B, T, 3C) holds [q | k | v] for each position, each of
 * the three split into NH heads of hs = C / NH channels. Scores are q.k / sqrt(hs), masked to t2 <= t,
 * softmaxed per row; the output is the attention-weighted sum of v, heads concatenated back into C.
 * The forward keeps the softmax weights att (B, NH, T, T) for the backward (the reference favours clarity
 * over the memory a fused kernel would save).
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <vector>

#include "llmc/cpu/vec.h"

namespace llmc::cpu {

// a . b over n values. fp32: vectorised (the lanes' partial sums, then lanes in a fixed order, so the same
// bits on every call); fp64, the gradient checks' reference: in index order.
template <typename Real> inline Real dot(const Real* a, const Real* b, int n) {
    Real s = 0;
    if constexpr (std::is_same_v<Real, float>) {
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < n; i++) s += a[i] * b[i];
    } else {
        for (int i = 0; i < n; i++) s += a[i] * b[i];
    }
    return s;
}

/*
 * One query row of one head against n keys and values: a[0..n) gets the softmax weights, o[0..hs) the weighted
 * sum of values. k and v point at the first key/value of this head and step by kv_stride elements per
 * position. Shared by the training forward (keys inside the (B, T, 3C) qkv buffer) and the KV-cache decoder
 * (each head's keys contiguous in its (maxT, hs) cache block), so a cached position computes exactly the bits
 * full recomputation does.
 * fp32 takes keys and values four at a time (scores as four independent dot products, values summed in pairs
 * before they meet o); fp64, the reference, one at a time in order.
 */
template <typename Real>
void attention_row(Real* o, Real* a, const Real* q, const Real* k, const Real* v, size_t kv_stride, int n, int hs) {
    constexpr bool fp32 = std::is_same_v<Real, float>;
    const Real scale = (Real)(1.0 / std::sqrt((double)hs));
    int t2 = 0;
    if constexpr (fp32) {
        // Four keys at a time: four independent vector accumulations (one alone waits on each FMA's latency).
        for (; t2 + 4 <= n; t2 += 4) {
            const Real *k0 = k + t2 * kv_stride, *k1 = k0 + kv_stride, *k2 = k1 + kv_stride, *k3 = k2 + kv_stride;
            Real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int i = 0; i < hs; i++) s0 += q[i] * k0[i], s1 += q[i] * k1[i], s2 += q[i] * k2[i], s3 += q[i] * k3[i];
            a[t2] = s0 * scale, a[t2 + 1] = s1 * scale, a[t2 + 2] = s2 * scale, a[t2 + 3] = s3 * scale;
        }
    }
    for (; t2 < n; t2++) a[t2] = dot(q, k + t2 * kv_stride, hs) * scale;
    Real maxval = -std::numeric_limits<Real>::infinity();
#pragma omp simd reduction(max : maxval)
    for (int i = 0; i < n; i++) maxval = std::max(maxval, a[i]);
    double sum = 0;
    if constexpr (fp32) {
        sum = vec::kernels().exp_sum(a, n, maxval);
    } else {
        for (int i = 0; i < n; i++) {
            a[i] = std::exp(a[i] - maxval);
            sum += a[i];
        }
    }
    const Real inv = (Real)(1.0 / sum);
    for (int i = 0; i < n; i++) a[i] *= inv;
    for (int i = 0; i < hs; i++) o[i] = 0;
    t2 = 0;
    if constexpr (fp32) {
        // Four values per pass over o: a quarter of the loads and stores of o.
        for (; t2 + 4 <= n; t2 += 4) {
            const Real *v0 = v + t2 * kv_stride, *v1 = v0 + kv_stride, *v2 = v1 + kv_stride, *v3 = v2 + kv_stride;
            const Real a0 = a[t2], a1 = a[t2 + 1], a2 = a[t2 + 2], a3 = a[t2 + 3];
#pragma omp simd
            for (int i = 0; i < hs; i++) o[i] += (a0 * v0[i] + a1 * v1[i]) + (a2 * v2[i] + a3 * v3[i]);
        }
    }
    for (; t2 < n; t2++) {
        const Real* vt = v + t2 * kv_stride;
        for (int i = 0; i < hs; i++) o[i] += a[t2] * vt[i];
    }
}

// out (B, T, C), att (B, NH, T, T) with zeros above the diagonal; inp (B, T, 3C).
template <typename Real> void attention_forward(Real* out, Real* att, const Real* inp, int B, int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    vec::kernels(); // resolved outside the parallel region (an invalid LLMC_CPU_ISA throws)
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const Real* row = inp + (size_t)b * T * C3 + h * hs; // position 0 of sequence b, head h
                Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                attention_row(out + ((size_t)b * T + t) * C + h * hs, a, row + (size_t)t * C3, row + C, row + 2 * C,
                              C3, t + 1, hs);
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
            }
}

// Accumulates dinp (B, T, 3C) from dout (B, T, C), given the forward's inp and att.
template <typename Real>
void attention_backward(Real* dinp, const Real* dout, const Real* inp, const Real* att, int B, int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const Real scale = (Real)(1.0 / std::sqrt((double)hs));
    // One (batch, head) per task: position t writes dk and dv of every t2 <= t, so splitting over t would
    // race, while different heads touch disjoint channels.
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<Real> datt(T);
            for (int t = 0; t < T; t++) {
                const Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                const Real* g = dout + ((size_t)b * T + t) * C + h * hs;
                const Real* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                Real* dq = dinp + ((size_t)b * T + t) * C3 + h * hs;
                // Through the weighted sum of v: datt = dout . v, dv += att * dout.
                double dot_att_datt = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real* v = inp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    Real* dv = dinp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    const Real d = dot(g, v, hs);
                    for (int i = 0; i < hs; i++) dv[i] += a[t2] * g[i];
                    datt[t2] = d;
                    dot_att_datt += a[t2] * d;
                }
                // Softmax backward, dpreatt = att * (datt - sum(att * datt)), then through the scaled dot.
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real dpre = a[t2] * (datt[t2] - (Real)dot_att_datt) * scale;
                    const Real* k = inp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    Real* dk = dinp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
        }
}

} // namespace llmc::cpu
