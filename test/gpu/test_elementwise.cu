/*
 * Elementwise kernels at the precision bf16 allows: GELU forward and backward (llmc/gelu.cuh), the residual add
 * (llmc/layernorm.cuh's fused residual output), the encoder (llmc/encoder.cuh) and AdamW (llmc/adamw.cuh).
 *
 * Each bf16 output is compared with the bf16 rounding (to nearest even) of the exact function, computed in
 * double, of the bf16 inputs the kernel read, and must be within 1 bf16 ulp of it: adjacent or equal as bf16
 * values (the kernels compute in fp32, whose error is far below half a bf16 ulp, and then round once; the
 * rounding of a value a hair from a tie may then land on the other side). A change of a constant that moves an
 * output by a few tenths of a percent moves it by one or more bf16 ulps at some input, and fails.
 *
 * Inputs are fresh random values each run, placed among the edge values that matter: for GELU every bf16
 * value with |x| <= 6 (zeros and subnormals included), in a fresh random order, and a few beyond; for the sums,
 * operands of unrelated magnitudes, exact cancellations and tiny values. AdamW's fp32 outputs (master weights,
 * moments) are held to a bound derived from fp32 rounding, stated at its test.
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llmc/adamw.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gelu.cuh"
#include "llmc/layernorm.cuh"
#include "test/gpu/gpu_test_util.cuh"

using llmc::floatX;
using namespace gputest;

namespace {

uint16_t bits_of(floatX x) {
    uint16_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}
floatX bf16_from_bits(uint16_t b) {
    floatX x;
    std::memcpy(static_cast<void*>(&x), &b, sizeof b); // floatX has no public bits member
    return x;
}

// bf16 bits of x rounded to nearest even from the double itself (no intermediate fp32 rounding), subnormals
// included.
uint16_t bf16_bits_nearest(double x) {
    if (x == 0) return std::signbit(x) ? 0x8000 : 0;
    int e;
    std::frexp(x, &e);                       // |x| = f 2^e, f in [0.5, 1)
    const int q = std::max(e - 8, -133);     // spacing of bf16 values there: 8 significant bits, subnormals 2^-133
    const double r = std::nearbyint(std::ldexp(x, -q)); // ties to even (the default rounding mode)
    const float f = (float)std::ldexp(r, q); // a bf16 value (or an overflow to inf): exact in fp32
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

// Distance in bf16 steps between two finite-or-infinite bf16 values (+0 and -0 are the same point).
long ulps_apart(uint16_t a, uint16_t b) {
    auto ord = [](uint16_t x) { return x & 0x8000 ? -(long)(x & 0x7fff) : (long)x; };
    return std::labs(ord(a) - ord(b));
}

// Every out[i] within 1 bf16 ulp of bf16(exact[i]); the first misses are reported with their input.
testing::AssertionResult within_one_ulp(const std::vector<floatX>& out, const std::vector<double>& exact,
                                        const std::vector<std::string>& inputs_of, const std::string& what) {
    if (out.size() != exact.size()) return testing::AssertionFailure() << what << ": size mismatch";
    size_t bad = 0;
    std::string first;
    for (size_t i = 0; i < out.size(); i++) {
        const uint16_t want = bf16_bits_nearest(exact[i]), got = bits_of(out[i]);
        const bool nan = std::isnan(__bfloat162float(out[i])) || std::isnan(exact[i]);
        if (!nan && ulps_apart(got, want) <= 1) continue;
        if (bad++ < 5)
            first += llmc::strprintf("\n  [%zu] %s: got %.9g, exact %.12g (bf16 %.9g), %ld ulps", i,
                                     inputs_of.empty() ? "" : inputs_of[i].c_str(), __bfloat162float(out[i]),
                                     exact[i], __bfloat162float(bf16_from_bits(want)), nan ? -1L : ulps_apart(got, want));
    }
    if (bad) return testing::AssertionFailure() << what << ": " << bad << " of " << out.size() << " outputs more than 1 "
                                                << "bf16 ulp from the exact value" << first;
    return testing::AssertionSuccess();
}

// GELU (tanh form) and its derivative in double, in the cancellation-free form (llmc/gelu.cuh explains it).
const double kGeluScale = std::sqrt(2.0 / M_PI), kGeluCube = 0.044715;
double gelu_exact(double x) {
    const double u = kGeluScale * (x + kGeluCube * x * x * x);
    return x / (1.0 + std::exp(-2.0 * u));
}
double dgelu_exact(double x) {
    const double u = kGeluScale * (x + kGeluCube * x * x * x);
    const double s = 1.0 / (1.0 + std::exp(-2.0 * u)), s_minus = 1.0 / (1.0 + std::exp(2.0 * u));
    return s + 2.0 * x * s * s_minus * kGeluScale * (1.0 + 3.0 * kGeluCube * x * x);
}

/*
 * GELU's inputs: every bf16 value with |x| <= 6 (both zeros, the subnormals, 6 itself), some beyond (around
 * x = -10.3, where e^-2u leaves fp32's range and gelu(x) bf16's; up to the largest finite bf16, where x^3
 * overflows fp32), and one or two more so that N is not a multiple of 8 (the kernels' tail); in a fresh random
 * order.
 */
std::vector<floatX> gelu_inputs() {
    std::vector<floatX> x;
    for (uint32_t b = 0; b < 0x7f80; b++) {
        const float v = __bfloat162float(bf16_from_bits((uint16_t)b));
        if (v <= 6.0f) x.push_back(bf16_from_bits((uint16_t)b)), x.push_back(bf16_from_bits((uint16_t)(b | 0x8000)));
    }
    for (float v : {6.5f, 8.0f, 9.75f, 10.0f, 10.25f, 10.375f, 10.5f, 11.0f, 30.0f, 100.0f, 1e4f, 3.0e38f})
        x.push_back(__float2bfloat16(v)), x.push_back(__float2bfloat16(-v));
    x.push_back(__float2bfloat16(-4.5f));
    if (x.size() % 8 == 0) x.push_back(__float2bfloat16(-5.25f));
    std::mt19937_64 rng(fresh_seed());
    std::shuffle(x.begin(), x.end(), rng);
    return x;
}

std::vector<std::string> describe(const std::vector<floatX>& a, const char* name) {
    std::vector<std::string> d(a.size());
    for (size_t i = 0; i < a.size(); i++) d[i] = llmc::strprintf("%s=%.9g", name, __bfloat162float(a[i]));
    return d;
}

/*
 * Fresh random bf16 values of unrelated magnitudes (10^-6 .. 10^4, either sign), with some exact zeros and
 * tiny (near fp32's smallest normal) values; `partner`, when given, makes about one in eight the exact negative
 * of partner[i] (a sum that cancels to zero) and one in eight partner[i] times a random power of two (a sum
 * whose exponents are far apart or equal).
 */
std::vector<float> spread_values(size_t n, const std::vector<float>* partner = nullptr) {
    std::mt19937_64 rng(fresh_seed());
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> decade(-6.0f, 4.0f);
    std::uniform_int_distribution<int> kind(0, 15), shift(-30, 30);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        const int k = kind(rng);
        if (k == 0) v[i] = 0.0f;
        else if (k == 1) v[i] = normal(rng) * 1e-37f;
        else if (partner && k == 2) v[i] = -(*partner)[i];
        else if (partner && k == 3) v[i] = std::ldexp((*partner)[i], shift(rng));
        else v[i] = normal(rng) * std::pow(10.0f, decade(rng));
    }
    return bf16_round(v);
}

} // namespace

// The exact-function reference itself: the cancellation-free form equals the textbook tanh form where the
// latter is accurate in double (|x| <= 3).
TEST(KernelsElementwiseReference, GeluFormsAgree) {
    for (double x = -3.0; x <= 3.0; x += 1.0 / 64) {
        const double t = std::tanh(kGeluScale * (x + kGeluCube * x * x * x));
        EXPECT_NEAR(gelu_exact(x), 0.5 * x * (1.0 + t), 1e-14) << x;
        const double d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluScale * (1.0 + 3.0 * kGeluCube * x * x);
        EXPECT_NEAR(dgelu_exact(x), d, 1e-14) << x;
    }
    EXPECT_EQ(bf16_bits_nearest(1.0 + 1.0 / 256), 0x3f80) << "a tie rounds to even";
    EXPECT_EQ(bf16_bits_nearest(1.0 + 3.0 / 256), 0x3f82) << "a tie rounds to even";
    EXPECT_EQ(bf16_bits_nearest(-1.0 - 1.0 / 256 - 1e-12), 0xbf81);
    EXPECT_EQ(bf16_bits_nearest(std::ldexp(3.0, -134)), 0x0002) << "subnormal tie to even";
    EXPECT_EQ(ulps_apart(0x0000, 0x8000), 0);
    EXPECT_EQ(ulps_apart(0x0001, 0x8001), 2);
}

GPU_TEST(KernelsElementwise, GeluForwardWithinOneUlp) {
    REQUIRE_GPU();
    const std::vector<floatX> x = gelu_inputs();
    DeviceBuffer<floatX> d_x(x), d_out(x.size());
    d_out.poison();
    llmc::gelu_forward(d_out, d_x, x.size(), 0);
    std::vector<double> exact(x.size());
    for (size_t i = 0; i < x.size(); i++) exact[i] = gelu_exact(__bfloat162float(x[i]));
    EXPECT_TRUE(within_one_ulp(d_out.download(), exact, describe(x, "x"), "gelu(x)"));
}

GPU_TEST(KernelsElementwise, GeluBackwardWithinOneUlp) {
    REQUIRE_GPU();
    const std::vector<floatX> x = gelu_inputs();
    const std::vector<float> dout = bf16_round(random_normal(x.size()));
    DeviceBuffer<floatX> d_x(x), d_d(to_bf16(dout));
    llmc::gelu_backward_inplace(d_d, d_x, x.size(), 0);
    std::vector<double> exact(x.size());
    std::vector<std::string> in = describe(x, "x");
    for (size_t i = 0; i < x.size(); i++) {
        exact[i] = (double)dout[i] * dgelu_exact(__bfloat162float(x[i]));
        in[i] += llmc::strprintf(" dout=%.9g", dout[i]);
    }
    EXPECT_TRUE(within_one_ulp(d_d.download(), exact, in, "dout * gelu'(x)"));
}

// The residual stream's add, as the fused residual + layernorm forward stores it: bf16(inp1 + inp2).
GPU_TEST(KernelsElementwise, ResidualAddWithinOneUlp) {
    REQUIRE_GPU();
    const int N = 37, C = 768;
    const size_t n = (size_t)N * C;
    const std::vector<float> a = spread_values(n), b = spread_values(n, &a);
    DeviceBuffer<floatX> d_a(to_bf16(a)), d_b(to_bf16(b)), d_res(n), d_norm(n);
    DeviceBuffer<floatX> d_w(to_bf16(bf16_round(random_normal(C)))), d_bias(to_bf16(bf16_round(random_normal(C))));
    DeviceBuffer<float> d_mean(N), d_rstd(N);
    d_res.poison();
    llmc::fused_residual_layernorm_forward(d_res, d_norm, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0);
    std::vector<double> exact(n);
    std::vector<std::string> in(n);
    for (size_t i = 0; i < n; i++) {
        exact[i] = (double)a[i] + (double)b[i];
        in[i] = llmc::strprintf("a=%.9g b=%.9g", a[i], b[i]);
    }
    EXPECT_TRUE(within_one_ulp(d_res.download(), exact, in, "inp1 + inp2"));
}

// out[b, t] = wte[token] + wpe[t], every row of a few tokens and positions, values of unrelated magnitudes.
GPU_TEST(KernelsElementwise, EncoderForwardWithinOneUlp) {
    REQUIRE_GPU();
    const int B = 3, T = 37, C = 64, V = 50, maxT = 40;
    const std::vector<float> wte = spread_values((size_t)V * C), wpe = spread_values((size_t)maxT * C);
    const std::vector<int> tok = random_tokens((size_t)B * T, V);
    DeviceBuffer<floatX> d_wte(to_bf16(wte)), d_wpe(to_bf16(wpe)), d_out((size_t)B * T * C);
    DeviceBuffer<int> d_tok(tok);
    d_out.poison();
    llmc::encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, 0);
    std::vector<double> exact((size_t)B * T * C);
    std::vector<std::string> in(exact.size());
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) {
            const float e = wte[(size_t)tok[bt] * C + c], p = wpe[(size_t)(bt % T) * C + c];
            exact[(size_t)bt * C + c] = (double)e + (double)p;
            in[(size_t)bt * C + c] = llmc::strprintf("wte=%.9g wpe=%.9g", e, p);
        }
    EXPECT_TRUE(within_one_ulp(d_out.download(), exact, in, "wte[token] + wpe[t]"));
}

/*
 * AdamW, one step from a random state, with and without clipping, at steps 1 and 10, against the update in
 * double of the same fp32/bf16 inputs (beta1, beta2, eps, lr, weight decay taken as the floats the kernel gets;
 * the bias corrections 1 - beta^t exact).
 *
 * fp32 outputs: each fp32 operation rounds with relative error at most u = 2^-24, so with
 *   M = beta1 |m| + (1 - beta1) |g|,  V = beta2 v + (1 - beta2) g^2   (g the clipped gradient)
 * the moments are within 5u M and 9u V (g's clip scale, clip / sqrtf(norm^2), contributes 3u to g; the
 * product and sum 2u more; g^2 twice g's share), plus half fp32's smallest subnormal per operation where a
 * product underflows (g^2 of a gradient near 1e-37), the bias corrections 1 - powf(beta, t) within
 * e_bc = u (1 + 2 beta^t / (1 - beta^t)) relative (powf within 1 ulp, then a cancelling subtraction), and
 * following the errors through mhat / (sqrt(vhat) + eps) + wd p and p - lr (...) gives the master weight's
 * bound below (master_bound). Each bound is doubled for second-order terms. The bf16 parameters must be the
 * fp32 master weights rounded to nearest, bitwise, and within 1 bf16 ulp of the exact value wherever the
 * master's bound is below half a bf16 ulp of it (all but a vanishing share; the test requires 99%).
 */
namespace {
struct AdamCase {
    int t;
    bool clip;
};

void check_adamw_step(AdamCase c) {
    SCOPED_TRACE(testing::Message() << "t=" << c.t << (c.clip ? " clipped" : " not clipped"));
    const size_t n = 4099; // the kernel's vector path and its tail
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 1.0f, norm_sq = 6.25f;
    std::mt19937_64 rng(fresh_seed());
    std::uniform_real_distribution<float> decade(-3.0f, 1.0f);
    std::normal_distribution<float> normal;
    std::vector<float> p(n), m(n), v(n), g = spread_values(n);
    for (size_t i = 0; i < n; i++) {
        p[i] = normal(rng) * std::pow(10.0f, decade(rng));
        m[i] = normal(rng) * 1e-2f;
        v[i] = i % 17 == 0 ? 0.0f : normal(rng) * normal(rng) * 1e-4f;
        v[i] = std::fabs(v[i]);
        if (i % 19 == 0) g[i] = 0.0f;
        if (i % 23 == 0) p[i] = (i % 2) ? 1.0f : 0.0f;
    }
    DeviceBuffer<float> d_p(p), d_m(m), d_v(v), d_norm(std::vector<float>{norm_sq});
    DeviceBuffer<floatX> d_g(to_bf16(g)), d_params(n);
    d_params.poison();
    DeviceBuffer<llmc::AdamWStep> d_step(std::vector<llmc::AdamWStep>{llmc::adamw_step(lr, b1, b2, c.t)});
    llmc::adamw_update(d_params, d_p, d_g, d_m, d_v, n, d_step, b1, b2, eps, wd, c.clip ? (float*)d_norm : nullptr,
                       clip, 0);
    const std::vector<float> got_p = d_p.download(), got_m = d_m.download(), got_v = d_v.download();
    const std::vector<floatX> got_params = d_params.download();

    const double u = std::ldexp(1.0, -24), tiny = std::ldexp(1.0, -150); // relative; absolute where results underflow
    const double scale = c.clip ? (double)clip / std::sqrt((double)norm_sq) : 1.0; // the norm 2.5 > clip 1
    const double e_g = c.clip ? 3 * u : 0.0;
    const double bt1 = std::pow((double)b1, c.t), bt2 = std::pow((double)b2, c.t);
    const double bc1 = 1 - bt1, bc2 = 1 - bt2;
    const double e_bc1 = u * (1 + 2 * bt1 / bc1), e_bc2 = u * (1 + 2 * bt2 / bc2);
    size_t bad_m = 0, bad_v = 0, bad_p = 0, not_rounded = 0, ulp_checked = 0;
    std::vector<floatX> ulp_out;
    std::vector<double> ulp_exact;
    std::vector<std::string> ulp_in;
    std::string first;
    for (size_t i = 0; i < n; i++) {
        const double gi = (double)g[i] * scale;
        const double m1 = b1 * (double)m[i] + (1 - (double)b1) * gi;
        const double v1 = b2 * (double)v[i] + (1 - (double)b2) * gi * gi;
        const double M = b1 * std::fabs((double)m[i]) + (1 - (double)b1) * std::fabs(gi);
        const double Vs = b2 * (double)v[i] + (1 - (double)b2) * gi * gi;
        const double dm = (4 * u + e_g) * M + u * std::fabs(m1) + 4 * tiny,
                     dv = (7 * u + 2 * e_g) * Vs + u * v1 + 4 * tiny;
        const double mhat = m1 / bc1, vhat = v1 / bc2;
        const double den = std::sqrt(vhat) + eps;
        const double r = mhat / den, term = r + (double)wd * p[i];
        const double p1 = (double)p[i] - (double)lr * term;
        // Errors carried through: mhat (dm and the correction's), sqrt(vhat) (half vhat's relative error), the
        // sum with eps, the division, the decay term, the step.
        const double d_mhat = (dm + std::fabs(m1) * (e_bc1 + u)) / bc1;
        const double e_vhat = (v1 > 0 ? dv / v1 : 0) + e_bc2 + u;
        const double e_den = (e_vhat / 2 + u) * std::sqrt(vhat) / den + u;
        const double d_r = d_mhat / den + std::fabs(r) * (e_den + u);
        const double d_term = d_r + 2 * u * std::fabs((double)wd * p[i]) + u * std::fabs(term);
        const double master_bound = 2 * (u * std::fabs(p1) + (double)lr * (d_term + u * std::fabs(term)));
        if (std::fabs(got_m[i] - m1) > 2 * dm || !std::isfinite(got_m[i])) bad_m++;
        if (std::fabs(got_v[i] - v1) > 2 * dv || !std::isfinite(got_v[i])) bad_v++;
        if (std::fabs(got_p[i] - p1) > master_bound || !std::isfinite(got_p[i])) {
            if (bad_p++ < 3)
                first += llmc::strprintf("\n  [%zu] p=%.9g g=%.9g m=%.9g v=%.9g: master %.9g, exact %.12g, bound %.3g", i,
                                         p[i], g[i], m[i], v[i], got_p[i], p1, master_bound);
        }
        if (bits_of(got_params[i]) != bits_of(__float2bfloat16(got_p[i]))) not_rounded++;
        // bf16's ulp at p1 is at least 2^-8 of |p1|'s binade: half of it exceeds the bound there.
        if (std::ldexp(std::fabs(p1), -9) > master_bound) {
            ulp_checked++;
            ulp_out.push_back(got_params[i]);
            ulp_exact.push_back(p1);
            ulp_in.push_back(llmc::strprintf("p=%.9g g=%.9g", p[i], g[i]));
        }
    }
    EXPECT_EQ(bad_m, 0u) << "first moments outside 2 x (5u M)";
    EXPECT_EQ(bad_v, 0u) << "second moments outside 2 x (9u V)";
    EXPECT_EQ(bad_p, 0u) << "master weights outside their fp32 bound" << first;
    EXPECT_EQ(not_rounded, 0u) << "bf16 parameters that are not the master weights rounded to nearest";
    EXPECT_GE(ulp_checked, n * 99 / 100);
    EXPECT_TRUE(within_one_ulp(ulp_out, ulp_exact, ulp_in, "bf16 parameters"));
}
} // namespace

GPU_TEST(KernelsElementwise, AdamWWithinFp32BoundsAndOneUlp) {
    REQUIRE_GPU();
    for (AdamCase c : {AdamCase{1, true}, AdamCase{1, false}, AdamCase{10, true}, AdamCase{10, false}})
        check_adamw_step(c);
}
