/*
 * LayerNorm over the channel dimension on the CPU (GPT-2: eps 1e-5, biased variance).
 * The forward saves each position's mean and reciprocal standard deviation for the backward.
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "llmc/cpu/vec.h"

namespace llmc::cpu {

// The per-channel formulas, written once for a scalar (the rows below, the vector variants' tails) and for a
// vector of floats (the vector variants, llmc/cpu/vec.cpp): the normalised value, the output, and the backward's
// dx term given the two means over the row.
template <typename T, typename S> [[gnu::always_inline]] inline T layernorm_norm(T x, S mu, S s) { return (x - mu) * s; }
template <typename T, typename S> [[gnu::always_inline]] inline T layernorm_out(T x, S mu, S s, T w, T b) {
    return layernorm_norm(x, mu, s) * w + b;
}
template <typename T, typename S>
[[gnu::always_inline]] inline T layernorm_dx(T x, T w, T g, S mu, S s, S dnorm_mean, S dnorm_norm_mean) {
    return s * (w * g - dnorm_mean - layernorm_norm(x, mu, s) * dnorm_norm_mean);
}

// One position of the forward in plain C++: the fp64 model's path, and the scalar variant of the fp32 kernel
// (llmc/cpu/vec.cpp), which the vector variants follow with per-lane partial sums.
template <typename Real> void layernorm_row(Real* o, Real* mean, Real* rstd, const Real* x, const Real* weight,
                                            const Real* bias, int C) {
    // Statistics in double: in the float model this keeps the reference's error at the level of the stored
    // values instead of growing with C.
    double sum = 0;
    for (int c = 0; c < C; c++) sum += x[c];
    const double m = sum / C;
    double var = 0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    const Real mu = (Real)m, s = (Real)(1.0 / std::sqrt(var / C + 1e-5));
    for (int c = 0; c < C; c++) o[c] = layernorm_out(x[c], mu, s, weight[c], bias[c]);
    *mean = mu;
    *rstd = s;
}

// One position of the backward into dx, given the forward's mean mu and reciprocal standard deviation s:
// dL/dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) with dnorm = weight * dout.
template <typename Real> void layernorm_backward_row(Real* dx, const Real* g, const Real* x, const Real* weight, Real mu,
                                                     Real s, int C) {
    double dnorm_sum = 0, dnorm_norm_sum = 0;
    for (int c = 0; c < C; c++) {
        const Real dnorm = weight[c] * g[c];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * layernorm_norm(x[c], mu, s);
    }
    const Real dnorm_mean = (Real)(dnorm_sum / C), dnorm_norm_mean = (Real)(dnorm_norm_sum / C);
    for (int c = 0; c < C; c++) dx[c] += layernorm_dx(x[c], weight[c], g[c], mu, s, dnorm_mean, dnorm_norm_mean);
}

// out (B, T, C), mean and rstd (B, T); inp (B, T, C), weight and bias (C). fp32 through the run-time chosen
// variant (llmc/cpu/vec.h), fp64 through layernorm_row.
template <typename Real> void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                                                const Real* bias, int B, int T, int C) {
    const int BT = B * T;
    if constexpr (std::is_same_v<Real, float>) vec::kernels(); // resolved outside the parallel region
#pragma omp parallel for if ((size_t)BT * C >= vec::PARALLEL_MIN)
    for (int bt = 0; bt < BT; bt++) {
        const size_t at = (size_t)bt * C;
        if constexpr (std::is_same_v<Real, float>)
            vec::kernels().layernorm_forward(out + at, mean + bt, rstd + bt, inp + at, weight, bias, C);
        else
            layernorm_row(out + at, mean + bt, rstd + bt, inp + at, weight, bias, C);
    }
}

// Accumulates dinp (B, T, C), dweight (C) and dbias (C) from dout (B, T, C).
template <typename Real> void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout,
                                                 const Real* inp, const Real* weight, const Real* mean,
                                                 const Real* rstd, int B, int T, int C) {
    const int BT = B * T;
    if constexpr (std::is_same_v<Real, float>) vec::kernels();
#pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const size_t at = (size_t)bt * C;
        if constexpr (std::is_same_v<Real, float>)
            vec::kernels().layernorm_backward(dinp + at, dout + at, inp + at, weight, mean[bt], rstd[bt], C);
        else
            layernorm_backward_row(dinp + at, dout + at, inp + at, weight, mean[bt], rstd[bt], C);
    }
    // Parameter gradients: each thread owns a block of channels and sums over positions in order.
    constexpr int CB = 64;
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int c1 = std::min(C, c0 + CB);
        Real dw[CB] = {}, db[CB] = {};
        for (int bt = 0; bt < BT; bt++) {
            const Real* x = inp + (size_t)bt * C;
            const Real* g = dout + (size_t)bt * C;
            const Real mu = mean[bt], s = rstd[bt];
            for (int c = c0; c < c1; c++) {
                dw[c - c0] += (x[c] - mu) * s * g[c];
                db[c - c0] += g[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dweight[c] += dw[c - c0];
            dbias[c] += db[c - c0];
        }
    }
}

} // namespace llmc::cpu
