// The fp32 CPU model's run-time-dispatched kernels (llmc/cpu/vec.h) and GEMM ways (llmc/cpu/matmul.h,
// llmc/util/cpu_blas.h), each against the exact value computed in long double on fresh random inputs, every
// variant this CPU runs (the others are named in the skip message), and the environment switches' errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "llmc/cpu/matmul.h"
#include "llmc/cpu/vec.h"
#include "llmc/io/formats.h"
#include "llmc/util/cpu_blas.h"
#include "llmc/util/rand.h"
#include "llmc/util/utils.h"
#include "test/test_util.h"

using namespace llmc;
using cpu::vec::Isa;
using LD = long double;

namespace {

constexpr double ULP = 1.0 / (1 << 23); // float's unit in the last place at 1

// Values for the elementwise kernels: uniform over [-lo, lo], the first ones replaced by the edges (as many as
// fit), by default in a length that leaves a tail for every vector width.
std::vector<float> test_values(uint64_t seed, float lo, size_t n = 20011) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = (2 * rng.next_f32() - 1) * lo;
    const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 3.0f, -3.0f, 9.5f, -9.5f, 40.0f, -40.0f};
    for (size_t i = 0; i < std::min(n, sizeof(edges) / sizeof(float)); i++) v[i] = edges[i];
    return v;
}

// GELU's tanh form in long double, as x sigmoid(2u) (= 0.5 x (1 + tanh u)): 1 + tanh u would round to 0 for
// very negative x even in long double. The derivative: sigmoid(2u) + 2 x u' sigmoid(2u) (1 - sigmoid(2u)).
LD gelu_u(LD x) { return std::sqrt(2 / (LD)M_PI) * (x + 0.044715L * x * x * x); }
LD gelu_exact(LD x) { return x / (1 + std::exp(-2 * gelu_u(x))); }
LD gelu_grad_exact(LD x) {
    const LD e = std::exp(-2 * gelu_u(x)), sig = 1 / (1 + e), du = std::sqrt(2 / (LD)M_PI) * (1 + 3 * 0.044715L * x * x);
    return sig + 2 * x * du * sig * (e / (1 + e));
}

// The variants this CPU runs; the test names the others it could not check.
std::vector<Isa> runnable(std::string& skipped) {
    std::vector<Isa> v;
    for (Isa isa : cpu::vec::ALL_ISAS) {
        if (cpu::vec::cpu_supports(isa))
            v.push_back(isa);
        else
            skipped += std::string(skipped.empty() ? "" : ", ") + cpu::vec::isa_name(isa);
    }
    return v;
}
void report_skipped(const std::string& skipped) {
    if (!skipped.empty()) std::printf("  (not run on this CPU: the %s variant)\n", skipped.c_str());
}

} // namespace

// gelu(x): the vector variants compute x / (1 + exp(-2u)), within 4 ulps of the exact value plus the rounding of
// the argument 2u in float, which exp amplifies by |2u| (2 |2u| ulps: tiny results of very negative x), and 0 where
// the exact value is below 1e-36 (exp(-2u) is +inf there: vec.h); the scalar
// one 0.5 x (1 + tanh u), whose 1 + tanh u cancels for negative x: plus 2 ulps of |x|.
TEST(CpuVecKernels, GeluForwardWithinUlpsOfExact) {
    const std::vector<float> x = test_values(1, 12.0f);
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        std::vector<float> out(x.size(), NAN);
        cpu::vec::kernels(isa).gelu_forward(out.data(), x.data(), x.size());
        double worst = 0;
        for (size_t i = 0; i < x.size(); i++) {
            const LD want = gelu_exact(x[i]);
            const double err = std::fabs((double)(out[i] - want));
            const double tol = (4 + 4 * std::fabs((double)gelu_u(x[i]))) * ULP * std::fabs((double)want) +
                               (isa == Isa::scalar ? 2 * ULP * std::fabs(x[i]) : 0.0) +
                               1e-36; // exp(-2u) overflows (u < -44.2, x < -9.6): 0 for the 1e-36 .. 1e-45 it is
            ASSERT_LE(err, tol) << "x = " << x[i] << ": got " << out[i] << ", exact " << (double)want;
            if (x[i] > -3 && want != 0 && isa != Isa::scalar) worst = std::max(worst, err / std::fabs((double)want) / ULP);
        }
        if (isa != Isa::scalar)
            std::printf("  gelu forward %s: worst %.2f ulps for x > -3\n", cpu::vec::isa_name(isa), worst);
        // Tails: every length up to three vectors gives the same values as the long call.
        for (size_t n = 0; n <= 49; n++) {
            std::vector<float> part(n + 1, -7.0f);
            cpu::vec::kernels(isa).gelu_forward(part.data(), x.data() + 100, n);
            for (size_t i = 0; i < n; i++) ASSERT_EQ(part[i], out[100 + i]) << "n = " << n;
            ASSERT_EQ(part[n], -7.0f) << "wrote past n = " << n;
        }
    }
    report_skipped(skipped);
}

// dinp += gelu'(x) dout: the vector variants within 6 ulps of |dout| (|gelu'| <= 1.13) plus the add's rounding; the
// scalar one's 1 - tanh^2 u cancels for large |x|, where the second term's factor x u' is large: plus 2 ulps of
// |dout x u'|.
TEST(CpuVecKernels, GeluBackwardWithinUlpsOfExact) {
    const std::vector<float> x = test_values(2, 12.0f), dout = test_values(3, 2.0f), dinp0 = test_values(4, 1.0f);
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        std::vector<float> dinp = dinp0;
        cpu::vec::kernels(isa).gelu_backward(dinp.data(), x.data(), dout.data(), x.size());
        for (size_t i = 0; i < x.size(); i++) {
            const LD want = dinp0[i] + gelu_grad_exact(x[i]) * dout[i];
            const double du = 0.7978845608 * (1 + 3 * 0.044715 * x[i] * x[i]);
            const double tol = ULP * (6 * std::fabs(dout[i]) * 1.13 + std::fabs((double)want) +
                                      (isa == Isa::scalar ? 2 * std::fabs(dout[i] * x[i] * du) : 0.0));
            ASSERT_NEAR(dinp[i], (double)want, tol) << "x = " << x[i] << " dout = " << dout[i];
        }
        for (size_t n = 0; n <= 49; n++) {
            std::vector<float> part(dinp0.begin() + 100, dinp0.begin() + 101 + n);
            cpu::vec::kernels(isa).gelu_backward(part.data(), x.data() + 100, dout.data() + 100, n);
            for (size_t i = 0; i < n; i++) ASSERT_EQ(part[i], dinp[100 + i]) << "n = " << n;
            ASSERT_EQ(part[n], dinp0[100 + n]) << "wrote past n = " << n;
        }
    }
    report_skipped(skipped);
}

// One AdamW step against the exact update of the stored inputs: each moment within 2 ulps of its two terms'
// sizes (they may cancel), the parameter within 2 ulps of |p| plus 6 ulps of the step's terms (a division, a
// square root, two adds and the scalings, each rounded once).
TEST(CpuVecKernels, AdamWWithinUlpsOfExact) {
    const size_t n = 10007;
    const std::vector<float> p0 = test_values(5, 1.0f, n), g = test_values(6, 0.1f, n), m0 = test_values(7, 0.01f, n);
    std::vector<float> v0 = test_values(8, 1e-3f, n);
    for (float& x : v0) x = std::fabs(x);
    const cpu::vec::AdamWArgs a{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1 - std::pow(0.9f, 3.0f), 1 - std::pow(0.95f, 3.0f)};
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        std::vector<float> p = p0, m = m0, v = v0;
        cpu::vec::kernels(isa).adamw(p.data(), g.data(), m.data(), v.data(), n, a);
        for (size_t i = 0; i < n; i++) {
            const LD gs = (LD)g[i] * (LD)a.grad_scale;
            const LD mi = (LD)a.beta1 * m0[i] + (1 - (LD)a.beta1) * gs, vi = (LD)a.beta2 * v0[i] + (1 - (LD)a.beta2) * gs * gs;
            const LD step = (mi / a.bias_correction1) / (std::sqrt(vi / a.bias_correction2) + (LD)a.eps) +
                            (LD)a.weight_decay * p0[i];
            const LD pi = p0[i] - (LD)a.lr * step;
            const double mterms = std::fabs(a.beta1 * m0[i]) + std::fabs((1 - a.beta1) * (double)gs);
            const double vterms = a.beta2 * v0[i] + (1 - a.beta2) * (double)(gs * gs);
            const double sterms = std::fabs((double)(mi / a.bias_correction1 / (std::sqrt(vi / a.bias_correction2) + (LD)a.eps))) +
                                  std::fabs(a.weight_decay * p0[i]);
            ASSERT_NEAR(m[i], (double)mi, 2 * ULP * mterms) << i;
            ASSERT_NEAR(v[i], (double)vi, 2 * ULP * vterms) << i;
            ASSERT_NEAR(p[i], (double)pi, 2 * ULP * std::fabs(p0[i]) + 6 * ULP * a.lr * sterms) << i;
        }
    }
    report_skipped(skipped);
}

// Sums of squares in double: within 1e-13 relative of the exact sum, for lengths that leave every tail.
TEST(CpuVecKernels, SumOfSquaresMatchesExact) {
    const std::vector<float> g = test_values(9, 3.0f);
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(17), size_t(31), size_t(33), g.size()}) {
            LD want = 0;
            for (size_t i = 0; i < n; i++) want += (LD)g[i] * g[i];
            const double got = cpu::vec::kernels(isa).sum_of_squares(g.data(), n);
            ASSERT_NEAR(got, (double)want, 1e-13 * (double)want) << "n = " << n;
        }
    }
    report_skipped(skipped);
}

// p = exp(p - max): each value within 3 ulps of the exact exp of the float difference p - max (the function's
// argument, rounded as the scalar loop rounds it); the returned sum is the stored values' sum (1e-13).
TEST(CpuVecKernels, ExpSumWithinUlpsOfExact) {
    std::vector<float> base = test_values(10, 40.0f);
    const float max = 40.0f; // every argument in [-80, 0]: no value underflows to a denormal
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        for (size_t n : {size_t(0), size_t(1), size_t(9), size_t(23), size_t(33), base.size()}) {
            std::vector<float> p(base.begin(), base.begin() + n);
            const double sum = cpu::vec::kernels(isa).exp_sum(p.data(), n, max);
            LD stored = 0;
            for (size_t i = 0; i < n; i++) {
                const LD want = std::exp((LD)(base[i] - max));
                ASSERT_NEAR(p[i], (double)want, 3 * ULP * (double)want) << "x = " << base[i];
                stored += p[i];
            }
            ASSERT_NEAR(sum, (double)stored, 1e-13 * (double)stored) << "n = " << n;
        }
    }
    report_skipped(skipped);
}

// Layernorm of one position against long double, for widths that leave every tail (C = 768: GPT-2's; 1, 7, 37,
// 101: tails of 8 and 16 lanes), rows off centre (the mean well away from 0, as in a residual stream). The mean
// and 1/std are computed in double and rounded once: within 1 ulp. Each output rounds (x - mu), two products and
// an add: within 4 ulps of |x - m| s |w| + |b|, plus mu's rounding carried through s |w|.
TEST(CpuVecKernels, LayernormForwardWithinUlpsOfExact) {
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        for (int C : {1, 7, 37, 101, 768}) {
            std::vector<float> x = test_values(20 + C, 2.0f, C), w = test_values(21 + C, 1.5f, C),
                               b = test_values(22 + C, 0.5f, C), out(C);
            for (float& v : x) v = v + 3.0f;
            float mu = 0, s = 0;
            cpu::vec::kernels(isa).layernorm_forward(out.data(), &mu, &s, x.data(), w.data(), b.data(), C);
            LD m = 0, var = 0;
            for (float v : x) m += v;
            m /= C;
            for (float v : x) var += (v - m) * (v - m);
            const LD rs = 1 / std::sqrt(var / C + 1e-5L);
            ASSERT_NEAR(mu, (double)m, ULP * std::fabs((double)m)) << "C = " << C;
            ASSERT_NEAR(s, (double)rs, ULP * (double)rs) << "C = " << C;
            for (int c = 0; c < C; c++) {
                const LD want = (x[c] - m) * rs * w[c] + b[c];
                const double bound = 4 * ULP * (double)(std::fabs(x[c] - m) * rs * std::fabs(w[c]) + std::fabs(b[c])) +
                                     ULP * std::fabs((double)m) * (double)rs * std::fabs(w[c]);
                ASSERT_NEAR(out[c], (double)want, bound) << "C = " << C << ", c = " << c;
            }
        }
    }
    report_skipped(skipped);
}

// The backward of one position into an existing gradient, given the forward's mu and s (taken as exact): the
// products dnorm = w g and dnorm * norm round to float before their double sums, so the two means are within
// 2 ulps of the mean of their terms' sizes; each output within 2 ulps of |dx0| and 6 ulps of its terms' sizes.
TEST(CpuVecKernels, LayernormBackwardWithinUlpsOfExact) {
    std::string skipped;
    for (Isa isa : runnable(skipped)) {
        SCOPED_TRACE(cpu::vec::isa_name(isa));
        for (int C : {1, 7, 37, 101, 768}) {
            std::vector<float> x = test_values(30 + C, 2.0f, C), w = test_values(31 + C, 1.5f, C),
                               g = test_values(32 + C, 0.2f, C), dx0 = test_values(33 + C, 0.1f, C);
            for (float& v : x) v = v + 3.0f;
            const float mu = 3.01f, s = 0.85f;
            std::vector<float> dx = dx0;
            cpu::vec::kernels(isa).layernorm_backward(dx.data(), g.data(), x.data(), w.data(), mu, s, C);
            LD dm = 0, dnm = 0, dm_abs = 0, dnm_abs = 0;
            for (int c = 0; c < C; c++) {
                const LD dnorm = (LD)w[c] * g[c], norm = ((LD)x[c] - mu) * s;
                dm += dnorm, dnm += dnorm * norm, dm_abs += std::fabs(dnorm), dnm_abs += std::fabs(dnorm * norm);
            }
            dm /= C, dnm /= C, dm_abs /= C, dnm_abs /= C;
            for (int c = 0; c < C; c++) {
                const LD dnorm = (LD)w[c] * g[c], norm = ((LD)x[c] - mu) * s;
                const LD want = dx0[c] + s * (dnorm - dm - norm * dnm);
                const double terms = (double)(s * (std::fabs(dnorm) + std::fabs(dm) + std::fabs(norm * dnm)));
                const double means = (double)(s * (dm_abs + std::fabs(norm) * dnm_abs));
                const double bound = 2 * ULP * std::fabs(dx0[c]) + 6 * ULP * terms + 2 * ULP * means;
                ASSERT_NEAR(dx[c], (double)want, bound) << "C = " << C << ", c = " << c;
            }
        }
    }
    report_skipped(skipped);
}

// The variant the process runs is one the CPU supports; kernels() refuses one it does not.
TEST(CpuVecKernels, ActiveVariantIsSupported) {
    EXPECT_TRUE(cpu::vec::cpu_supports(cpu::vec::active_isa()));
    EXPECT_EQ(&cpu::vec::kernels(), &cpu::vec::kernels(cpu::vec::active_isa()));
    for (Isa isa : cpu::vec::ALL_ISAS) {
        if (!cpu::vec::cpu_supports(isa)) {
            EXPECT_THROW(cpu::vec::kernels(isa), Error);
        }
    }
}

namespace {

// matmul_forward and matmul_backward through one GEMM way against long double, each output within (K + 2) ulps
// of the sum of |terms|: twice the worst case of K + 1 roundings in any order.
void check_matmul(const std::string& way, int BT, int C, int OC) {
    SCOPED_TRACE(way + " BT=" + std::to_string(BT) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC));
    Rng rng(BT * 1000 + C + OC);
    auto fill = [&](size_t n, float scale) {
        std::vector<float> v(n);
        for (float& x : v) x = (2 * rng.next_f32() - 1) * scale;
        return v;
    };
    const std::vector<float> inp = fill((size_t)BT * C, 1), w = fill((size_t)OC * C, 0.1f), bias = fill(OC, 0.1f),
                             dout = fill((size_t)BT * OC, 1), dinp0 = fill((size_t)BT * C, 1),
                             dw0 = fill((size_t)OC * C, 1), db0 = fill(OC, 1);
    std::vector<float> out((size_t)BT * OC, NAN), dinp = dinp0, dw = dw0, db = db0;
    cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), 1, BT, C, OC);
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), 1, BT, C, OC);
    for (int r = 0; r < BT; r++)
        for (int o = 0; o < OC; o++) {
            LD s = bias[o], mag = std::fabs(bias[o]);
            for (int k = 0; k < C; k++) s += (LD)inp[(size_t)r * C + k] * w[(size_t)o * C + k],
                                        mag += std::fabs((LD)inp[(size_t)r * C + k] * w[(size_t)o * C + k]);
            ASSERT_NEAR(out[(size_t)r * OC + o], (double)s, (C + 2) * ULP * (double)mag) << r << "," << o;
        }
    for (int r = 0; r < BT; r++)
        for (int k = 0; k < C; k++) {
            LD s = dinp0[(size_t)r * C + k], mag = std::fabs(s);
            for (int o = 0; o < OC; o++) s += (LD)dout[(size_t)r * OC + o] * w[(size_t)o * C + k],
                                         mag += std::fabs((LD)dout[(size_t)r * OC + o] * w[(size_t)o * C + k]);
            ASSERT_NEAR(dinp[(size_t)r * C + k], (double)s, (OC + 2) * ULP * (double)mag) << r << "," << k;
        }
    for (int o = 0; o < OC; o++) {
        LD sb = db0[o], magb = std::fabs(sb);
        for (int r = 0; r < BT; r++) sb += dout[(size_t)r * OC + o], magb += std::fabs(dout[(size_t)r * OC + o]);
        ASSERT_NEAR(db[o], (double)sb, (BT + 2) * ULP * (double)magb) << o;
        for (int k = 0; k < C; k++) {
            LD s = dw0[(size_t)o * C + k], mag = std::fabs(s);
            for (int r = 0; r < BT; r++) s += (LD)dout[(size_t)r * OC + o] * inp[(size_t)r * C + k],
                                         mag += std::fabs((LD)dout[(size_t)r * OC + o] * inp[(size_t)r * C + k]);
            ASSERT_NEAR(dw[(size_t)o * C + k], (double)s, (BT + 2) * ULP * (double)mag) << o << "," << k;
        }
    }
}

// A library by name for the tests; null (and why in `why_not`) when it is not installed, or for BLIS in the
// AddressSanitizer build: with BLIS 0.9's OpenMP build loaded, LeakSanitizer's check at exit crashes (its tracer
// takes signal 11), so only the normal build checks BLIS.
const cpu_blas::Library* library_for_tests(const std::string& name, std::string& why_not) {
#ifdef __SANITIZE_ADDRESS__
    if (name == "blis") {
        why_not = "blis (not loaded under AddressSanitizer: LeakSanitizer's exit check crashes with it)";
        return nullptr;
    }
#endif
    const cpu_blas::Library* lib = cpu_blas::find(name);
    if (!lib) why_not = name + " (not installed)";
    return lib;
}

struct RestoreBlas {
    const cpu_blas::Library* saved = cpu_blas::active();
    ~RestoreBlas() { cpu_blas::use(saved); }
};

} // namespace

// Every way the matmuls compute, on shapes with partial vectors and tiles: the rows kernel (1..8 rows), the
// project's GEMM and each installed library (from 9 rows), forward and both backward products.
TEST(CpuMatmul, EveryGemmWayMatchesExact) {
    RestoreBlas restore;
    std::string missing;
    std::vector<std::pair<std::string, const cpu_blas::Library*>> ways = {{"ours", nullptr}};
    for (const char* name : {"openblas", "blis"}) {
        std::string why_not;
        if (const cpu_blas::Library* lib = library_for_tests(name, why_not))
            ways.push_back({lib->name, lib});
        else
            missing += std::string(missing.empty() ? "" : ", ") + why_not;
    }
    for (const auto& [name, lib] : ways) {
        cpu_blas::use(lib);
        for (int BT : {1, 3, 8, 9, 37})
            for (auto [C, OC] : {std::pair{19, 45}, {64, 33}, {130, 7}}) check_matmul(name, BT, C, OC);
    }
    if (!missing.empty()) std::printf("  (not checked: %s)\n", missing.c_str());
}

// With a fixed thread count each way gives the same bits on every call.
TEST(CpuMatmul, EveryGemmWayIsDeterministic) {
    RestoreBlas restore;
    for (const char* name : {"ours", "openblas", "blis"}) {
        std::string why_not;
        const cpu_blas::Library* lib = std::string(name) == "ours" ? nullptr : library_for_tests(name, why_not);
        if (!why_not.empty()) continue;
        cpu_blas::use(lib);
        const int BT = 200, C = 96, OC = 300;
        Rng rng(5);
        std::vector<float> inp((size_t)BT * C), w((size_t)OC * C);
        for (float& x : inp) x = rng.next_f32() - 0.5f;
        for (float& x : w) x = rng.next_f32() - 0.5f;
        std::vector<float> a((size_t)BT * OC), b((size_t)BT * OC);
        cpu::matmul_forward(a.data(), inp.data(), w.data(), (const float*)nullptr, 1, BT, C, OC);
        cpu::matmul_forward(b.data(), inp.data(), w.data(), (const float*)nullptr, 1, BT, C, OC);
        EXPECT_EQ(a, b) << name;
    }
}

// The environment switches: a bad value is one line naming the variable, exit 1, before the model loads.
TEST(CpuKernelSwitches, BadValuesAreOneLineErrors) {
    testutil::TempDir dir;
    std::vector<uint16_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i * 7 % 50257);
    write_shard(dir.path + "/toy_train.bin", tokens);
    const std::string train = "./train_gpt2 -e d1 -b 1 -t 16 -x 1 -v 0 -s 0 -i " + dir.path;
    struct Case {
        std::string env, message;
    } cases[] = {
        {"LLMC_CPU_ISA=avx9", "error: LLMC_CPU_ISA: unknown value 'avx9' (scalar, avx2, avx512)\n"},
        {"LLMC_CPU_BLAS=mkl", "error: LLMC_CPU_BLAS: unknown value 'mkl' (auto, ours, openblas, blis)\n"},
    };
    for (const Case& c : cases)
        for (const std::string& program : {std::string("./infer_gpt2 -e d1 --prompt-ids 1,2 -n 2"), train}) {
            auto r = testutil::run(c.env + " " + program);
            EXPECT_EQ(r.exit_code, 1) << c.env << " " << program << ": " << r.output;
            EXPECT_EQ(r.output, c.message) << c.env << " " << program;
        }
    // A scalar or AVX2 cap runs, and a library asked for by name that is missing is refused by name.
    auto ok = testutil::run("LLMC_CPU_ISA=scalar LLMC_CPU_BLAS=ours ./infer_gpt2 -e d1 --prompt-ids 1,2 -n 2");
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    for (const std::string name : {"openblas", "blis"}) {
        std::string why_not;
        if (!library_for_tests(name, why_not) && why_not == name + " (not installed)") {
            auto r = testutil::run("LLMC_CPU_BLAS=" + name + " ./infer_gpt2 -e d1 --prompt-ids 1,2 -n 2");
            EXPECT_EQ(r.exit_code, 1) << r.output;
            EXPECT_EQ(r.output.rfind("error: LLMC_CPU_BLAS=" + name + ": ", 0), 0u) << r.output;
        }
    }
}

// scripts/benchmark_cpu.sh and its PyTorch peer refuse bad flags in one line (exit 2) before running anything; where
// a python3 has PyTorch, the peer runs a tiny model, names its BLAS and prints its result line.
TEST(CpuBenchmark, ScriptsRefuseBadFlagsAndThePeerRuns) {
    const struct {
        std::string cmd, starts;
    } cases[] = {
        {"bash scripts/benchmark_cpu.sh --model d5", "error: --model: one of d4 d6 d12 d24 d36 d48, got 'd5'"},
        {"bash scripts/benchmark_cpu.sh --rounds 0", "error: --rounds: a positive integer, got '0'"},
        {"bash scripts/benchmark_cpu.sh --threads", "error: --threads needs a value"},
        {"bash scripts/benchmark_cpu.sh --fast", "error: unknown option '--fast'"},
        {"python3 dev/torch_gpt2_cpu.py train --model d5", "torch_gpt2_cpu.py train: error: argument --model"},
        {"python3 dev/torch_gpt2_cpu.py infer -b 0", "torch_gpt2_cpu.py: error: --batch must be at least 1"},
    };
    for (const auto& c : cases) {
        auto r = testutil::run(c.cmd);
        EXPECT_EQ(r.exit_code, 2) << c.cmd << ": " << r.output;
        EXPECT_EQ(r.output.rfind(c.starts, 0), 0u) << c.cmd << ": " << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << c.cmd << ": " << r.output;
    }
    auto help = testutil::run("bash scripts/benchmark_cpu.sh --help");
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_NE(help.output.find("--rounds R"), std::string::npos) << help.output;

    std::string python;
    for (const char* p : {"python3", "/usr/bin/python3"})
        if (python.empty() && testutil::run(std::string(p) + " -c 'import torch'").exit_code == 0) python = p;
    if (python.empty()) {
        std::printf("  (no python3 with PyTorch here: the peer's run is not checked)\n");
        return;
    }
    auto r = testutil::run(python + " dev/torch_gpt2_cpu.py infer --model d4 -b 2 --prompt-len 8 -n 3 --threads 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("blas: ", 0), 0u) << r.output; // the first line: the BLAS it found
    EXPECT_NE(r.output.find("result: infer model=d4 B=2 prompt=8 new=3 threads=1 prefill_tok_per_s="), std::string::npos)
        << r.output;
}
