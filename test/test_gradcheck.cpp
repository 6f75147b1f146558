// Finite-difference checks of the CPU backward passes, in double: the whole model on a tiny config (every one of
// the 16 parameter tensors, every entry), and layernorm, attention, classifier and matmul in isolation.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <omp.h>
#include <vector>

#include "llmc/cpu/gpt2.h"

using namespace llmc;

namespace {

// Central differences have truncation error ~eps^2 * f''' and rounding error ~1e-16 / eps; at eps = 1e-5 both
// are near 1e-10 for the O(1) objectives used here. A wrong backward is off by O(1) relative.
constexpr double FD_EPS = 1e-5;
constexpr double FD_TOL = 1e-6;

// Largest |analytic - numeric| over a tensor, relative to the tensor's largest gradient. Normalising by the
// tensor's scale (not per entry) keeps entries whose true gradient is ~0 from failing on rounding noise.
struct Comparison {
    double max_abs_err = 0, max_abs_grad = 0;
    double rel() const { return max_abs_err / std::max(max_abs_grad, 1e-8); }
};

Comparison compare(const std::vector<double>& analytic, const std::vector<double>& numeric) {
    Comparison c;
    for (size_t i = 0; i < analytic.size(); i++) {
        c.max_abs_err = std::max(c.max_abs_err, std::abs(analytic[i] - numeric[i]));
        c.max_abs_grad = std::max({c.max_abs_grad, std::abs(analytic[i]), std::abs(numeric[i])});
    }
    return c;
}

// d f / d x[i] for every i by central differences (x is restored). The thousands of tiny evaluations run on one
// thread: forking threads for them only adds overhead, which grows sharply on a loaded machine, and the ops give
// the same results for any thread count.
std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& f) {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const double x0 = x[i];
        x[i] = x0 + FD_EPS;
        const double fp = f();
        x[i] = x0 - FD_EPS;
        const double fm = f();
        x[i] = x0;
        g[i] = (fp - fm) / (2 * FD_EPS);
    }
    omp_set_num_threads(threads);
    return g;
}

std::vector<double> random_vector(Rng& rng, size_t n, double scale = 1) {
    std::vector<double> v(n);
    for (double& x : v) x = scale * rng.next_normal();
    return v;
}

// sum(out * w): a scalar objective whose gradient w.r.t. out is the random tensor w.
double weighted_sum(const std::vector<double>& out, const std::vector<double>& w) {
    double s = 0;
    for (size_t i = 0; i < out.size(); i++) s += out[i] * w[i];
    return s;
}

GPT2Config tiny_config() {
    GPT2Config c;
    c.max_seq_len = 8;
    c.vocab_size = 29;
    c.padded_vocab_size = 32; // 3 padded rows
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 8;
    return c;
}

struct TinyBatch {
    int B = 2, T = 5; // T < maxT, so the last wpe rows get no gradient
    std::vector<int> inputs, targets;
    explicit TinyBatch(int V) {
        Rng rng(7);
        for (int i = 0; i < B * T; i++) inputs.push_back(rng.next_u32() % V);
        for (int i = 0; i < B * T; i++) targets.push_back(rng.next_u32() % V);
    }
};

// Every parameter (LayerNorm weights and biases included) ~ N(0, 0.3): unlike the GPT-2 init this makes the
// attention non-uniform, GELU non-linear and LayerNorm's weight and bias distinguishable, so every path of
// every backward carries gradient.
void randomize(GPT2CPU<double>& m) {
    Rng rng(99);
    for (double& p : m.params_memory) p = 0.3 * rng.next_normal();
}

} // namespace

TEST(GradCheck, FullModelEveryParameter) {
    const GPT2Config c = tiny_config();
    GPT2CPU<double> m(c);
    randomize(m);
    TinyBatch batch(c.vocab_size);
    m.zero_grad();
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    m.backward();
    const std::vector<double> analytic = m.grads_memory;

    auto loss = [&] {
        m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
        return (double)m.mean_loss;
    };
    const std::vector<double> numeric = numeric_grad(m.params_memory, loss);

    const auto sizes = parameter_sizes(c);
    size_t off = 0;
    double worst = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        std::vector<double> a(analytic.begin() + off, analytic.begin() + off + sizes[i]);
        std::vector<double> n(numeric.begin() + off, numeric.begin() + off + sizes[i]);
        const Comparison cmp = compare(a, n);
        worst = std::max(worst, cmp.rel());
        EXPECT_LT(cmp.rel(), FD_TOL) << parameter_name(i) << ": max |a-n| " << cmp.max_abs_err << ", max |grad| "
                                     << cmp.max_abs_grad;
        // A backward that silently produced zeros would pass the comparison only if the numeric gradient were
        // zero too; it is not, for any tensor.
        EXPECT_GT(cmp.max_abs_grad, 1e-3) << parameter_name(i) << " has (almost) no gradient";
        off += sizes[i];
    }
    RecordProperty("worst_relative_error", testing::PrintToString(worst));

    // Padded vocabulary rows never reach the softmax and positions >= T are unused: exactly zero gradient.
    const int C = c.channels;
    for (size_t j = (size_t)c.vocab_size * C; j < (size_t)c.padded_vocab_size * C; j++)
        EXPECT_EQ(m.grads.wte[j], 0.0) << "padded wte entry " << j;
    for (size_t j = (size_t)batch.T * C; j < (size_t)c.max_seq_len * C; j++)
        EXPECT_EQ(m.grads.wpe[j], 0.0) << "unused wpe entry " << j;
}

TEST(GradCheck, LossScaleScalesGradients) {
    const GPT2Config c = tiny_config();
    GPT2CPU<double> m(c);
    randomize(m);
    TinyBatch batch(c.vocab_size);
    auto grads_for = [&](double scale) {
        m.zero_grad();
        m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
        m.backward(scale);
        return m.grads_memory;
    };
    const std::vector<double> g1 = grads_for(1.0), g_quarter = grads_for(0.25), g_odd = grads_for(0.3);
    // Every op is linear in the incoming gradient and scaling by a power of two commutes with rounding.
    for (size_t i = 0; i < g1.size(); i++) ASSERT_EQ(g_quarter[i], 0.25 * g1[i]) << "parameter " << i;
    for (size_t i = 0; i < g1.size(); i++) ASSERT_NEAR(g_odd[i], 0.3 * g1[i], 1e-12 * (1 + std::abs(g1[i])));
}

TEST(GradCheck, GradientAccumulationAddsMicroSteps) {
    const GPT2Config c = tiny_config();
    GPT2CPU<double> m(c);
    randomize(m);
    TinyBatch batch(c.vocab_size);
    m.zero_grad();
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    m.backward();
    const std::vector<double> full = m.grads_memory;
    m.zero_grad();
    for (int step = 0; step < 2; step++) {
        m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
        m.backward(0.5);
    }
    for (size_t i = 0; i < full.size(); i++) ASSERT_NEAR(m.grads_memory[i], full[i], 1e-12 * (1 + std::abs(full[i])));
}

TEST(GradCheck, LayerNorm) {
    const int B = 2, T = 3, C = 7;
    Rng rng(1);
    std::vector<double> inp = random_vector(rng, B * T * C, 2.0), w = random_vector(rng, C), b = random_vector(rng, C);
    const std::vector<double> dout = random_vector(rng, B * T * C);
    std::vector<double> out(B * T * C), mean(B * T), rstd(B * T);
    auto f = [&] {
        cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), B, T, C);
        return weighted_sum(out, dout);
    };
    f();
    // Non-zero starting gradients: the backward must add, not overwrite.
    std::vector<double> dinp(B * T * C, 1.0), dw(C, 2.0), db(C, 3.0);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), B, T, C);
    for (double& x : dinp) x -= 1.0;
    for (double& x : dw) x -= 2.0;
    for (double& x : db) x -= 3.0;
    EXPECT_LT(compare(dinp, numeric_grad(inp, f)).rel(), FD_TOL);
    EXPECT_LT(compare(dw, numeric_grad(w, f)).rel(), FD_TOL);
    EXPECT_LT(compare(db, numeric_grad(b, f)).rel(), FD_TOL);
}

TEST(GradCheck, Attention) {
    const int B = 2, T = 6, C = 12, NH = 3;
    Rng rng(2);
    std::vector<double> inp = random_vector(rng, B * T * 3 * C);
    const std::vector<double> dout = random_vector(rng, B * T * C);
    std::vector<double> out(B * T * C), att(B * NH * T * T);
    auto f = [&] {
        cpu::attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH);
        return weighted_sum(out, dout);
    };
    f();
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++) {
            double sum = 0;
            for (int t2 = 0; t2 < T; t2++) {
                const double a = att[(bh * T + t) * T + t2];
                if (t2 > t) {
                    EXPECT_EQ(a, 0.0) << "causal mask";
                }
                sum += a;
            }
            EXPECT_NEAR(sum, 1.0, 1e-12);
        }
    std::vector<double> dinp(B * T * 3 * C, 0.0);
    cpu::attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), B, T, C, NH);
    EXPECT_LT(compare(dinp, numeric_grad(inp, f)).rel(), FD_TOL);
}

TEST(GradCheck, Classifier) {
    const int B = 2, T = 3, C = 5, V = 11, Vp = 16;
    Rng rng(3);
    std::vector<double> inp = random_vector(rng, B * T * C), wte = random_vector(rng, Vp * C);
    std::vector<int> targets;
    for (int i = 0; i < B * T; i++) targets.push_back(rng.next_u32() % V);
    std::vector<double> probs(B * T * Vp), losses(B * T);
    const double dloss = 0.7;
    auto f = [&] {
        cpu::classifier_forward(probs.data(), losses.data(), inp.data(), wte.data(), targets.data(), B, T, C, V, Vp);
        double s = 0;
        for (double l : losses) s += dloss * l;
        return s;
    };
    f();
    for (int bt = 0; bt < B * T; bt++) {
        double sum = 0;
        for (int i = 0; i < Vp; i++) sum += probs[bt * Vp + i];
        EXPECT_NEAR(sum, 1.0, 1e-12);
        for (int i = V; i < Vp; i++) EXPECT_EQ(probs[bt * Vp + i], 0.0);
        EXPECT_NEAR(losses[bt], -std::log(probs[bt * Vp + targets[bt]]), 1e-12);
    }
    std::vector<double> dinp(B * T * C, 0.0), dwte(Vp * C, 0.0);
    cpu::classifier_backward(dinp.data(), dwte.data(), probs.data(), inp.data(), wte.data(), targets.data(), dloss, B,
                             T, C, V, Vp);
    EXPECT_LT(compare(dinp, numeric_grad(inp, f)).rel(), FD_TOL);
    EXPECT_LT(compare(dwte, numeric_grad(wte, f)).rel(), FD_TOL);
    for (int j = V * C; j < Vp * C; j++) EXPECT_EQ(dwte[j], 0.0);
}

TEST(GradCheck, GeluAndResidual) {
    const size_t N = 40;
    Rng rng(4);
    std::vector<double> x = random_vector(rng, N, 3.0), y = random_vector(rng, N);
    const std::vector<double> dout = random_vector(rng, N);
    std::vector<double> out(N);
    auto f = [&] {
        cpu::gelu_forward(out.data(), x.data(), N);
        cpu::residual_forward(out.data(), out.data(), y.data(), N);
        return weighted_sum(out, dout);
    };
    f();
    std::vector<double> dgelu(N, 0.0), dx(N, 0.0), dy(N, 0.0);
    cpu::residual_backward(dgelu.data(), dy.data(), dout.data(), N);
    cpu::gelu_backward(dx.data(), x.data(), dgelu.data(), N);
    EXPECT_LT(compare(dx, numeric_grad(x, f)).rel(), FD_TOL);
    EXPECT_LT(compare(dy, numeric_grad(y, f)).rel(), FD_TOL);
    EXPECT_NEAR(out[0],
                0.5 * x[0] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[0] + 0.044715 * std::pow(x[0], 3)))) + y[0],
                1e-14);
}

// The tiled GEMM against plain loops, at shapes that cover full and partial row and column tiles, more than
// one k block and more than one column group, in both precisions (their tile widths differ).
template <typename Real> void check_matmul(int B, int T, int C, int OC, double tol) {
    const int BT = B * T;
    Rng rng(5);
    auto rnd = [&](size_t n) {
        std::vector<Real> v(n);
        for (Real& x : v) x = (Real)rng.next_normal();
        return v;
    };
    const std::vector<Real> inp = rnd(BT * C), w = rnd((size_t)OC * C), bias = rnd(OC), dout = rnd((size_t)BT * OC);
    const std::vector<Real> dinp0 = rnd(BT * C), dw0 = rnd((size_t)OC * C), db0 = rnd(OC);
    std::vector<Real> out((size_t)BT * OC), dinp = dinp0, dw = dw0, db = db0;
    cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), B, T, C, OC);
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), B, T, C, OC);
    double err = 0;
    for (int bt = 0; bt < BT; bt++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int c = 0; c < C; c++) s += (double)inp[bt * C + c] * w[(size_t)o * C + c];
            err = std::max(err, std::abs(s - out[(size_t)bt * OC + o]) / std::sqrt((double)C));
        }
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) {
            double s = dinp0[bt * C + c];
            for (int o = 0; o < OC; o++) s += (double)dout[(size_t)bt * OC + o] * w[(size_t)o * C + c];
            err = std::max(err, std::abs(s - dinp[bt * C + c]) / std::sqrt((double)OC));
        }
    for (int o = 0; o < OC; o++) {
        double sb = db0[o];
        for (int c = 0; c < C; c++) {
            double s = dw0[(size_t)o * C + c];
            for (int bt = 0; bt < BT; bt++) s += (double)dout[(size_t)bt * OC + o] * inp[bt * C + c];
            err = std::max(err, std::abs(s - dw[(size_t)o * C + c]) / std::sqrt((double)BT));
        }
        for (int bt = 0; bt < BT; bt++) sb += dout[(size_t)bt * OC + o];
        err = std::max(err, std::abs(sb - db[o]) / std::sqrt((double)BT));
    }
    // err is relative to the sqrt(K) size of a sum of K unit-variance products.
    EXPECT_LT(err, tol) << "B=" << B << " T=" << T << " C=" << C << " OC=" << OC;
}

TEST(GradCheck, MatmulMatchesPlainLoops) {
    for (auto [B, T, C, OC] :
         {std::array<int, 4>{2, 5, 8, 29}, {1, 1, 3, 2}, {3, 7, 37, 50}, {2, 19, 300, 600}, {1, 64, 96, 33}}) {
        check_matmul<double>(B, T, C, OC, 1e-14);
        check_matmul<float>(B, T, C, OC, 1e-5);
    }
}
