/*
 * GELU on the CPU, tanh approximation as in GPT-2:
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over N values.
 * fp32 goes through the vectorised kernels of llmc/cpu/vec.h, split over threads by vec::for_chunks;
 * fp64 (the gradient checks' reference) through the plain loops below.
 */
#pragma once
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "llmc/cpu/vec.h"

namespace llmc::cpu {

template <typename Real> void gelu_forward(Real* out, const Real* inp, size_t N) {
    if constexpr (std::is_same_v<Real, float>) {
        const auto& k = vec::kernels();
        vec::for_chunks(N, [&](size_t i, size_t n) { k.gelu_forward(out + i, inp + i, n); });
    } else {
        const Real s = (Real)std::sqrt(2.0 / M_PI);
#pragma omp parallel for
        for (size_t i = 0; i < N; i++) {
            Real x = inp[i];
            out[i] = Real(0.5) * x * (Real(1) + std::tanh(s * (x + Real(0.044715) * x * x * x)));
        }
    }
}

// Accumulates dinp += gelu'(inp) * dout.
template <typename Real> void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t N) {
    if constexpr (std::is_same_v<Real, float>) {
        const auto& k = vec::kernels();
        vec::for_chunks(N, [&](size_t i, size_t n) { k.gelu_backward(dinp + i, inp + i, dout + i, n); });
    } else {
        const Real s = (Real)std::sqrt(2.0 / M_PI);
#pragma omp parallel for
        for (size_t i = 0; i < N; i++) {
            Real x = inp[i];
            Real th = std::tanh(s * (x + Real(0.044715) * x * x * x));
            // sech^2 = 1 - tanh^2: unlike 1/cosh^2 it cannot overflow for large |x|.
            Real grad = Real(0.5) * (Real(1) + th) +
                        Real(0.5) * x * (Real(1) - th * th) * s * (Real(1) + Real(3 * 0.044715) * x * x);
            dinp[i] += grad * dout[i];
        }
    }
}

} // namespace llmc::cpu
