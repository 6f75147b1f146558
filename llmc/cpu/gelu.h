/*
 * GELU on the CPU, tanh approximation as in GPT-2:
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over N values.
 */
#pragma once
#include <cmath>
#include <cstddef>

namespace llmc::cpu {

template <typename Real> void gelu_forward(Real* out, const Real* inp, size_t N) {
    const Real s = (Real)std::sqrt(2.0 / M_PI);
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        Real x = inp[i];
        out[i] = Real(0.5) * x * (Real(1) + std::tanh(s * (x + Real(0.044715) * x * x * x)));
    }
}

// Accumulates dinp += gelu'(inp) * dout.
template <typename Real> void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t N) {
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

} // namespace llmc::cpu
