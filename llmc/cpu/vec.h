/*
 * The fp32 CPU model's elementwise and reduction loops, vectorised, with the instruction set chosen at run time.
 *
 * Each kernel works on one contiguous range on the calling thread; the callers (gelu.h, adamw.h, classifier.h,
 * attention.h, layernorm.h) split their work over OpenMP threads as before and call these per chunk. The fp64 model keeps
 * the plain loops of those headers: it is the gradient checks' reference, and the scalar variant here is the
 * same plain code for fp32.
 *
 * Variants: scalar (plain C++ with libm, no vector extensions), avx2 (8 lanes, FMA) and avx512 (16 lanes),
 * each compiled with its target attribute into every build, whatever -march says, and picked once per process:
 * the widest the CPU supports (__builtin_cpu_supports), capped by LLMC_CPU_ISA=scalar|avx2|avx512 when set.
 *
 * Maths (vector variants):
 *   exp(x): x = n ln2 + r with n = round(x / ln2) (|r| <= ln2 / 2, ln2 split in two for exactness), e^r by a
 *     degree-7 Taylor polynomial (truncation below 6e-9 relative on that range), 2^n put in the exponent bits;
 *     x clamped to [-87.3, 89], so every result is a normal float, or +inf once n reaches 128 (x > 88.38).
 *   GELU, tanh form: 0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + exp(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3):
 *     the same function as the scalar form, without its cancellation in 1 + tanh(u) for negative x; 0 where
 *     exp(-2u) overflows (x < -9.6, where the exact value is below 1e-36).
 *     Backward: sigmoid(2u) + 2 x u' sigmoid(2u)(1 - sigmoid(2u)), u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2), with
 *     1 - sigmoid(2u) = 1 / (1 + exp(2u)) (no cancellation for large x).
 *   Sums of squares, exp sums and layernorm's statistics: one double accumulator per lane, lanes added in order
 *     at the end, so a result depends only on the variant, not on the thread count or the run.
 *   Layernorm: the scalar variant is layernorm.h's plain row (the fp64 model's); the vector ones the same
 *     formulas with those per-lane sums (mean, then the centred variance, both in double; dnorm = weight * dout
 *     and dnorm * norm rounded to float, then summed in double).
 * Accuracy against the exact values (test/test_cpu_kernels.cpp): within a few float ulps, per kernel.
 */
#pragma once
#include <algorithm>
#include <cstddef>

namespace llmc::cpu::vec {

enum class Isa { scalar, avx2, avx512 };
constexpr Isa ALL_ISAS[] = {Isa::scalar, Isa::avx2, Isa::avx512};

const char* isa_name(Isa isa);
bool cpu_supports(Isa isa);
// The variant this process runs (decided on first use: the widest supported, capped by LLMC_CPU_ISA; an
// unknown LLMC_CPU_ISA value throws llmc::Error naming it).
Isa active_isa();

// The settings of one AdamW update, the bias corrections and clip factor folded in by the caller.
struct AdamWArgs {
    float lr, beta1, beta2, eps, weight_decay, grad_scale, bias_correction1, bias_correction2;
};

struct Kernels {
    // out[i] = gelu(inp[i]) for i < n.
    void (*gelu_forward)(float* out, const float* inp, size_t n);
    // dinp[i] += gelu'(inp[i]) * dout[i].
    void (*gelu_backward)(float* dinp, const float* inp, const float* dout, size_t n);
    // One AdamW step on n parameters: m, v updated, params moved (decoupled weight decay).
    void (*adamw)(float* params, const float* grads, float* m, float* v, size_t n, const AdamWArgs& a);
    // sum of grads[i]^2 in double.
    double (*sum_of_squares)(const float* grads, size_t n);
    // p[i] = exp(p[i] - max) for i < n; returns their sum in double.
    double (*exp_sum)(float* p, size_t n, float max);
    // One position's layernorm (llmc/cpu/layernorm.h): out (C) from x (C), its mean and 1/std stored.
    void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* x, const float* weight,
                              const float* bias, int C);
    // One position's layernorm backward: dx (C) += the gradient through x, given dout g and the forward's mu, s.
    void (*layernorm_backward)(float* dx, const float* g, const float* x, const float* weight, float mu, float s,
                               int C);
};

// The kernels of one variant (the CPU must support it) or of the active one.
const Kernels& kernels(Isa isa);
const Kernels& kernels();

// Loops over fewer values than this run on the calling thread: waking the other threads (tens of microseconds
// with passive waiting) costs more than they save. Decode's per-row work falls below it.
constexpr size_t PARALLEL_MIN = 1 << 15;

// Values per OpenMP task of the vectorised elementwise kernels: large enough that a task is worth a thread
// (tens of microseconds), small enough that two threads share even a decode step's 3072 x B values.
constexpr size_t VEC_CHUNK = 1 << 12;

// f(begin, count) over [0, N) in VEC_CHUNK pieces, threads only when there is more than one piece.
template <typename F> void for_chunks(size_t N, F&& f) {
    const long chunks = (long)((N + VEC_CHUNK - 1) / VEC_CHUNK);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (long c = 0; c < chunks; c++) f((size_t)c * VEC_CHUNK, std::min(VEC_CHUNK, N - (size_t)c * VEC_CHUNK));
}


} // namespace llmc::cpu::vec
