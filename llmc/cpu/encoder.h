/*
 * Token + position embedding on the CPU: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:].
 */
#pragma once
#include <algorithm>
#include <cstddef>

namespace llmc::cpu {

// out (B, T, C); inp (B, T) token ids in [0, V); wte (Vp, C); wpe (maxT, C) with T <= maxT.
template <typename Real>
void encoder_forward(Real* out, const int* inp, const Real* wte, const Real* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            Real* o = out + ((size_t)b * T + t) * C;
            const Real* e = wte + (size_t)inp[b * T + t] * C;
            const Real* p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

// Accumulates dwte (Vp, C) and dwpe (maxT, C) from dout (B, T, C).
template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int* inp, int B, int T, int C) {
    // A token can repeat within the batch, so rows of dwte are not owned by one position. Threads split the
    // channels instead and each walks every position in order: no two threads touch the same element, and
    // every element sums its contributions in position order whatever the thread count.
    constexpr int CB = 16;
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int c1 = std::min(C, c0 + CB);
        for (int bt = 0; bt < B * T; bt++) {
            Real* d = dwte + (size_t)inp[bt] * C;
            const Real* g = dout + (size_t)bt * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
#pragma omp parallel for
    for (int t = 0; t < T; t++) {
        Real* d = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const Real* g = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

} // namespace llmc::cpu
