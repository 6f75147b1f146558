// The 16-lane bodies (and layernorm.h's formulas they call) take and return 64-byte vectors only inside the
// avx512 variants they are inlined into.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "llmc/cpu/vec.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "llmc/cpu/layernorm.h"
#include "llmc/util/utils.h"

namespace llmc::cpu::vec {
namespace {

#define LLMC_INLINE inline __attribute__((always_inline))

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f, GELU_A = 0.044715f;

// ---- scalar: the plain loops of the fp64 model's headers, for fp32 ----

void gelu_forward_scalar(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + std::tanh(SQRT_2_OVER_PI * (x + GELU_A * x * x * x)));
    }
}

void gelu_backward_scalar(float* dinp, const float* inp, const float* dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], th = std::tanh(SQRT_2_OVER_PI * (x + GELU_A * x * x * x));
        const float grad =
            0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] += grad * dout[i];
    }
}

LLMC_INLINE void adamw_one(float& p, float g, float& m, float& v, const AdamWArgs& a) {
    g *= a.grad_scale;
    m = a.beta1 * m + (1.0f - a.beta1) * g;
    v = a.beta2 * v + (1.0f - a.beta2) * g * g;
    const float mhat = m / a.bias_correction1, vhat = v / a.bias_correction2;
    p = p - a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weight_decay * p);
}

void adamw_scalar(float* params, const float* grads, float* m, float* v, size_t n, const AdamWArgs& a) {
    for (size_t i = 0; i < n; i++) adamw_one(params[i], grads[i], m[i], v[i], a);
}

double sum_of_squares_scalar(const float* g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

double exp_sum_scalar(float* p, size_t n, float max) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] = std::exp(p[i] - max);
        s += p[i];
    }
    return s;
}

void layernorm_forward_scalar(float* out, float* mean, float* rstd, const float* x, const float* weight,
                              const float* bias, int C) {
    layernorm_row(out, mean, rstd, x, weight, bias, C);
}

void layernorm_backward_scalar(float* dx, const float* g, const float* x, const float* weight, float mu, float s,
                               int C) {
    layernorm_backward_row(dx, g, x, weight, mu, s, C);
}

// ---- vector bodies, W lanes; always inlined into each variant's target-attributed functions below ----

// (Typedefs in a class template: GCC drops vector_size from a dependent alias template.)
template <int W> struct VecTypes {
    typedef float F __attribute__((vector_size(4 * W)));
    typedef int32_t I __attribute__((vector_size(4 * W)));
    typedef double D __attribute__((vector_size(8 * W)));
};
template <int W> using VF = typename VecTypes<W>::F;
template <int W> using VI = typename VecTypes<W>::I;
template <int W> using VD = typename VecTypes<W>::D;

template <int W> LLMC_INLINE VF<W> load(const float* p) {
    VF<W> v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
template <int W> LLMC_INLINE void store(float* p, VF<W> v) { std::memcpy(p, &v, sizeof(v)); }
template <int W> LLMC_INLINE VF<W> splat(float x) { return VF<W>{} + x; }

// exp(x), see vec.h.
template <int W> LLMC_INLINE VF<W> vexp(VF<W> x) {
    x = x < splat<W>(-87.3f) ? splat<W>(-87.3f) : x;
    x = x > splat<W>(89.0f) ? splat<W>(89.0f) : x; // n = 128 there: 2^n and the result are +inf
    // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer in the low mantissa bits (|n| < 2^22).
    const VF<W> big = splat<W>(12582912.0f);
    const VF<W> n = (x * splat<W>(1.44269504088896341f) + big) - big;
    // ln2 = 0.693359375 (exact in 9 bits, so n * it is exact) - 2.12194440e-4.
    const VF<W> r = (x - n * splat<W>(0.693359375f)) + n * splat<W>(2.12194440e-4f);
    VF<W> e = splat<W>(1.0f / 5040);
    e = e * r + 1.0f / 720;
    e = e * r + 1.0f / 120;
    e = e * r + 1.0f / 24;
    e = e * r + 1.0f / 6;
    e = e * r + 0.5f;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    const VI<W> bits = (__builtin_convertvector(n, VI<W>) + 127) << 23;
    VF<W> scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return e * scale;
}

// Sums in double use vectors of W / 2 doubles, the register width of W floats: GCC compiles wider generic
// vectors through memory. widen: W / 2 floats at p as doubles.
template <int W> LLMC_INLINE VD<W / 2> widen(const float* p) { return __builtin_convertvector(load<W / 2>(p), VD<W / 2>); }

// Two double accumulators' lanes added in a fixed order.
template <int W> LLMC_INLINE double lanes_sum(VD<W / 2> a, VD<W / 2> b) {
    const VD<W / 2> v = a + b;
    double s = 0;
    for (int l = 0; l < W / 2; l++) s += v[l];
    return s;
}

template <int W> LLMC_INLINE VF<W> gelu_u(VF<W> x) { return SQRT_2_OVER_PI * (x + GELU_A * x * x * x); }

template <int W> LLMC_INLINE void gelu_forward_body(float* out, const float* inp, size_t n) {
    size_t i = 0;
    for (; i + W <= n; i += W) {
        const VF<W> x = load<W>(inp + i);
        store<W>(out + i, x / (1.0f + vexp<W>(-2.0f * gelu_u<W>(x))));
    }
    if (i < n) { // the tail through a zero-padded vector: the same maths as the body
        float in[W] = {}, o[W];
        std::memcpy(in, inp + i, (n - i) * sizeof(float));
        const VF<W> x = load<W>(in);
        store<W>(o, x / (1.0f + vexp<W>(-2.0f * gelu_u<W>(x))));
        std::memcpy(out + i, o, (n - i) * sizeof(float));
    }
}

// 1 - sigmoid(2u) as 1 / (1 + 1/e), e = exp(-2u): 1 - sig would cancel for large x, and e sig is inf * 0 where
// e overflows.
template <int W> LLMC_INLINE VF<W> gelu_grad(VF<W> x) {
    const VF<W> e = vexp<W>(-2.0f * gelu_u<W>(x)), sig = 1.0f / (1.0f + e), rest = 1.0f / (1.0f + 1.0f / e);
    const VF<W> du = SQRT_2_OVER_PI * (1.0f + (3.0f * GELU_A) * x * x);
    return sig + 2.0f * x * du * sig * rest;
}

template <int W> LLMC_INLINE void gelu_backward_body(float* dinp, const float* inp, const float* dout, size_t n) {
    size_t i = 0;
    for (; i + W <= n; i += W)
        store<W>(dinp + i, load<W>(dinp + i) + gelu_grad<W>(load<W>(inp + i)) * load<W>(dout + i));
    if (i < n) {
        float x[W] = {}, g[W] = {}, d[W] = {};
        const size_t t = (n - i) * sizeof(float);
        std::memcpy(x, inp + i, t), std::memcpy(g, dout + i, t), std::memcpy(d, dinp + i, t);
        store<W>(d, load<W>(d) + gelu_grad<W>(load<W>(x)) * load<W>(g));
        std::memcpy(dinp + i, d, t);
    }
}

template <int W>
LLMC_INLINE void adamw_body(float* params, const float* grads, float* m, float* v, size_t n, const AdamWArgs& a) {
    size_t i = 0;
    for (; i + W <= n; i += W) {
        const VF<W> g = load<W>(grads + i) * a.grad_scale;
        const VF<W> mi = a.beta1 * load<W>(m + i) + (1.0f - a.beta1) * g;
        const VF<W> vi = a.beta2 * load<W>(v + i) + (1.0f - a.beta2) * g * g;
        store<W>(m + i, mi), store<W>(v + i, vi);
        const VF<W> mhat = mi / a.bias_correction1, vhat = vi / a.bias_correction2;
        VF<W> root;
        for (int l = 0; l < W; l++) root[l] = __builtin_sqrtf(vhat[l]); // one vsqrtps
        const VF<W> p = load<W>(params + i);
        store<W>(params + i, p - a.lr * (mhat / (root + a.eps) + a.weight_decay * p));
    }
    for (; i < n; i++) adamw_one(params[i], grads[i], m[i], v[i], a);
}

template <int W> LLMC_INLINE double sum_of_squares_body(const float* g, size_t n) {
    // Four accumulators: the adds' latency, not the loads, would bound one chain.
    VD<W / 2> a0 = {}, a1 = {}, a2 = {}, a3 = {};
    size_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        const VD<W / 2> d0 = widen<W>(g + i), d1 = widen<W>(g + i + W / 2), d2 = widen<W>(g + i + W),
                        d3 = widen<W>(g + i + 3 * W / 2);
        a0 += d0 * d0, a1 += d1 * d1, a2 += d2 * d2, a3 += d3 * d3;
    }
    double s = lanes_sum<W>(a0 + a2, a1 + a3);
    for (; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

template <int W> LLMC_INLINE double exp_sum_body(float* p, size_t n, float max) {
    VD<W / 2> a0 = {}, a1 = {};
    size_t i = 0;
    for (; i + W <= n; i += W) {
        store<W>(p + i, vexp<W>(load<W>(p + i) - max));
        a0 += widen<W>(p + i), a1 += widen<W>(p + i + W / 2);
    }
    double s = lanes_sum<W>(a0, a1);
    if (i < n) { // the tail through the same vector maths; padding lanes are not summed
        float t[W] = {};
        std::memcpy(t, p + i, (n - i) * sizeof(float));
        const VF<W> e = vexp<W>(load<W>(t) - max);
        for (size_t l = 0; l < n - i; l++) p[i + l] = e[l], s += e[l];
    }
    return s;
}

// W floats of a register as two halves of W / 2 doubles (through memory the compiler keeps in registers).
template <int W> LLMC_INLINE void widen_halves(VF<W> v, VD<W / 2>& lo, VD<W / 2>& hi) {
    float t[W];
    store<W>(t, v);
    lo = widen<W>(t), hi = widen<W>(t + W / 2);
}

template <int W>
LLMC_INLINE void layernorm_forward_body(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                        const float* bias, int C) {
    VD<W / 2> a0 = {}, a1 = {};
    int i = 0;
    for (; i + W <= C; i += W) a0 += widen<W>(x + i), a1 += widen<W>(x + i + W / 2);
    double sum = lanes_sum<W>(a0, a1);
    for (; i < C; i++) sum += x[i];
    const double m = sum / C;
    a0 = VD<W / 2>{}, a1 = VD<W / 2>{};
    for (i = 0; i + W <= C; i += W) {
        const VD<W / 2> d0 = widen<W>(x + i) - m, d1 = widen<W>(x + i + W / 2) - m;
        a0 += d0 * d0, a1 += d1 * d1;
    }
    double var = lanes_sum<W>(a0, a1);
    for (; i < C; i++) var += (x[i] - m) * (x[i] - m);
    const float mu = (float)m, s = (float)(1.0 / std::sqrt(var / C + 1e-5));
    for (i = 0; i + W <= C; i += W)
        store<W>(out + i, layernorm_out(load<W>(x + i), mu, s, load<W>(weight + i), load<W>(bias + i)));
    for (; i < C; i++) out[i] = layernorm_out(x[i], mu, s, weight[i], bias[i]);
    *mean = mu;
    *rstd = s;
}

template <int W>
LLMC_INLINE void layernorm_backward_body(float* dx, const float* g, const float* x, const float* weight, float mu,
                                         float s, int C) {
    VD<W / 2> a0 = {}, a1 = {}, b0 = {}, b1 = {};
    int i = 0;
    for (; i + W <= C; i += W) {
        const VF<W> dnorm = load<W>(weight + i) * load<W>(g + i), norm = layernorm_norm(load<W>(x + i), mu, s);
        VD<W / 2> lo, hi;
        widen_halves<W>(dnorm, lo, hi);
        a0 += lo, a1 += hi;
        widen_halves<W>(dnorm * norm, lo, hi);
        b0 += lo, b1 += hi;
    }
    double dnorm_sum = lanes_sum<W>(a0, a1), dnorm_norm_sum = lanes_sum<W>(b0, b1);
    for (int c = i; c < C; c++) {
        const float dnorm = weight[c] * g[c];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * layernorm_norm(x[c], mu, s);
    }
    const float dnorm_mean = (float)(dnorm_sum / C), dnorm_norm_mean = (float)(dnorm_norm_sum / C);
    for (i = 0; i + W <= C; i += W)
        store<W>(dx + i, load<W>(dx + i) + layernorm_dx(load<W>(x + i), load<W>(weight + i), load<W>(g + i), mu, s,
                                                         dnorm_mean, dnorm_norm_mean));
    for (; i < C; i++) dx[i] += layernorm_dx(x[i], weight[i], g[i], mu, s, dnorm_mean, dnorm_norm_mean);
}

// ---- the variants ----

#define LLMC_VARIANT(NAME, TARGET, W)                                                                              \
    __attribute__((target(TARGET))) void gelu_forward_##NAME(float* out, const float* inp, size_t n) {            \
        gelu_forward_body<W>(out, inp, n);                                                                         \
    }                                                                                                              \
    __attribute__((target(TARGET))) void gelu_backward_##NAME(float* dinp, const float* inp, const float* dout,  \
                                                              size_t n) {                                          \
        gelu_backward_body<W>(dinp, inp, dout, n);                                                                 \
    }                                                                                                              \
    __attribute__((target(TARGET))) void adamw_##NAME(float* params, const float* grads, float* m, float* v,     \
                                                      size_t n, const AdamWArgs& a) {                              \
        adamw_body<W>(params, grads, m, v, n, a);                                                                  \
    }                                                                                                              \
    __attribute__((target(TARGET))) double sum_of_squares_##NAME(const float* g, size_t n) {                      \
        return sum_of_squares_body<W>(g, n);                                                                       \
    }                                                                                                              \
    __attribute__((target(TARGET))) double exp_sum_##NAME(float* p, size_t n, float max) {                        \
        return exp_sum_body<W>(p, n, max);                                                                         \
    }                                                                                                              \
    __attribute__((target(TARGET))) void layernorm_forward_##NAME(float* out, float* mean, float* rstd,          \
                                                                  const float* x, const float* weight,            \
                                                                  const float* bias, int C) {                      \
        layernorm_forward_body<W>(out, mean, rstd, x, weight, bias, C);                                            \
    }                                                                                                              \
    __attribute__((target(TARGET))) void layernorm_backward_##NAME(float* dx, const float* g, const float* x,     \
                                                                   const float* weight, float mu, float s, int C) { \
        layernorm_backward_body<W>(dx, g, x, weight, mu, s, C);                                                    \
    }                                                                                                              \
    const Kernels NAME##_kernels = {gelu_forward_##NAME,      gelu_backward_##NAME,     adamw_##NAME,             \
                                    sum_of_squares_##NAME,    exp_sum_##NAME,           layernorm_forward_##NAME, \
                                    layernorm_backward_##NAME};

LLMC_VARIANT(avx2, "avx2,fma", 8)
LLMC_VARIANT(avx512, "avx512f,fma", 16)
#undef LLMC_VARIANT

const Kernels scalar_kernels = {gelu_forward_scalar,     gelu_backward_scalar,     adamw_scalar,
                                sum_of_squares_scalar,   exp_sum_scalar,           layernorm_forward_scalar,
                                layernorm_backward_scalar};

Isa choose() {
    Isa isa = cpu_supports(Isa::avx512) ? Isa::avx512 : cpu_supports(Isa::avx2) ? Isa::avx2 : Isa::scalar;
    const char* env = getenv("LLMC_CPU_ISA");
    if (env && *env) {
        Isa want = Isa::scalar;
        bool known = false;
        for (Isa i : ALL_ISAS)
            if (std::string(env) == isa_name(i)) want = i, known = true;
        if (!known) throw Error(std::string("LLMC_CPU_ISA: unknown value '") + env + "' (scalar, avx2, avx512)");
        if ((int)want < (int)isa) isa = want;
    }
    return isa;
}

} // namespace

const char* isa_name(Isa isa) { return isa == Isa::avx512 ? "avx512" : isa == Isa::avx2 ? "avx2" : "scalar"; }

bool cpu_supports(Isa isa) {
    __builtin_cpu_init();
    switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    }
    return false;
}

Isa active_isa() {
    static const Isa isa = choose();
    return isa;
}

const Kernels& kernels(Isa isa) {
    if (!cpu_supports(isa)) throw Error(std::string("cpu vec: this CPU does not run the ") + isa_name(isa) + " kernels");
    return isa == Isa::avx512 ? avx512_kernels : isa == Isa::avx2 ? avx2_kernels : scalar_kernels;
}

const Kernels& kernels() {
    static const Kernels& k = kernels(active_isa());
    return k;
}

} // namespace llmc::cpu::vec
