/*
 * Residual connection on the CPU: out = inp1 + inp2, elementwise over N = B*T*C values.
 */
#pragma once
#include <cstddef>

#include "llmc/cpu/vec.h"

namespace llmc::cpu {

template <typename Real> void residual_forward(Real* out, const Real* inp1, const Real* inp2, size_t N) {
#pragma omp parallel for if (N >= vec::PARALLEL_MIN)
    for (size_t i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

// Accumulates: both branches receive dout unchanged (dinp1 is usually the residual stream's gradient, which
// the other branch also adds into).
template <typename Real> void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, size_t N) {
#pragma omp parallel for if (N >= vec::PARALLEL_MIN)
    for (size_t i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

} // namespace llmc::cpu
