// Fused causal attention (llmc/attention.cuh) against the CPU reference (llmc/cpu/attention.h) on the same
// bf16-rounded inputs. Tolerances (relative L2): out 1e-2, from bf16 storage of P and the output; lse 1e-3 (fp32
// statistics throughout); dq, dk, dv 1e-2 against a double backward that takes D = rowsum(dO * out) from the
// kernel's bf16 out, as the kernel does (FlashAttention-2's definition). Against the exact out, D's rounding
// (~2^-9 |dO| |out|) is not small next to dP - D in rows whose softmax is nearly one-hot, and the relative error
// of dq/dk at a short T can reach 0.1 with nothing wrong.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/attention.cuh"
#include "llmc/cpu/attention.h"
#include "test/gpu/gpu_test_util.cuh"

using gputest::DeviceBuffer;
using llmc::floatX;

namespace {

struct Reference {
    std::vector<float> out, lse, dqkv;
};

// CPU forward + backward in Real (double for small shapes), and lse in double.
template <typename Real>
Reference cpu_reference(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    std::vector<Real> inp(qkv.begin(), qkv.end()), g(dout.begin(), dout.end());
    std::vector<Real> out((size_t)B * T * C), att((size_t)B * NH * T * T), dinp(qkv.size(), Real(0));
    llmc::cpu::attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH);
    llmc::cpu::attention_backward(dinp.data(), g.data(), inp.data(), att.data(), B, T, C, NH); // accumulates
    Reference r;
    r.out.assign(out.begin(), out.end());
    r.dqkv.assign(dinp.begin(), dinp.end());
    r.lse.resize((size_t)B * NH * T);
    const double scale = 1.0 / std::sqrt((double)HS);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<double> s(T);
            for (int t = 0; t < T; t++) {
                const float* q = qkv.data() + ((size_t)b * T + t) * 3 * C + h * HS;
                double m = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv.data() + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    double dot = 0;
                    for (int i = 0; i < HS; i++) dot += (double)q[i] * k[i];
                    s[t2] = dot * scale;
                    m = std::max(m, s[t2]);
                }
                double sum = 0;
                for (int t2 = 0; t2 <= t; t2++) sum += std::exp(s[t2] - m);
                r.lse[((size_t)b * NH + h) * T + t] = (float)(m + std::log(sum));
            }
        }
    return r;
}

// dqkv in double from exact scores and lse, with D = rowsum(dout * out) over the given (the kernel's) out.
std::vector<float> backward_given_out(const std::vector<float>& qkv, const std::vector<float>& dout,
                                      const std::vector<float>& out, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const double scale = 1.0 / std::sqrt((double)HS);
    std::vector<double> d(qkv.size(), 0.0);
    const auto row = [&](const std::vector<float>& x, int b, int t, int part, int h, int width) {
        return x.data() + ((size_t)b * T + t) * width + (size_t)part * C + h * HS;
    };
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<double> s(T), p(T);
            for (int t = 0; t < T; t++) {
                const float *q = row(qkv, b, t, 0, h, 3 * C), *g = row(dout, b, t, 0, h, C), *o = row(out, b, t, 0, h, C);
                double m = -INFINITY, sum = 0, D = 0;
                for (int j = 0; j <= t; j++) {
                    const float* k = row(qkv, b, j, 1, h, 3 * C);
                    double dot = 0;
                    for (int i = 0; i < HS; i++) dot += (double)q[i] * k[i];
                    s[j] = dot * scale;
                    m = std::max(m, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = std::exp(s[j] - m));
                for (int i = 0; i < HS; i++) D += (double)g[i] * o[i];
                double* dq = d.data() + ((size_t)b * T + t) * 3 * C + h * HS;
                for (int j = 0; j <= t; j++) {
                    const float *k = row(qkv, b, j, 1, h, 3 * C), *v = row(qkv, b, j, 2, h, 3 * C);
                    const double pj = p[j] / sum;
                    double dp = 0;
                    for (int i = 0; i < HS; i++) dp += (double)g[i] * v[i];
                    const double ds = pj * (dp - D) * scale;
                    double* dk = d.data() + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double* dv = dk + C;
                    for (int i = 0; i < HS; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                        dv[i] += pj * g[i];
                    }
                }
            }
        }
    return std::vector<float>(d.begin(), d.end());
}

// Part p (0 = q, 1 = k, 2 = v) of a (B, T, 3C) tensor, so each gradient is judged against its own norm.
std::vector<float> part(const std::vector<float>& x, int p, size_t BT, int C) {
    std::vector<float> r(BT * C);
    for (size_t i = 0; i < BT; i++) std::memcpy(&r[i * C], &x[i * 3 * C + (size_t)p * C], C * sizeof(float));
    return r;
}

// close_rel, except where the reference is exactly zero (T = 1: a single key gets probability 1 and passes no
// gradient to q or k); then every value must be finite and tiny (|x| <= 1e-3, the residue of dP - D summed in
// two different orders).
testing::AssertionResult close_rel_or_zero(const std::vector<float>& out, const std::vector<float>& ref,
                                           double rel_tol, const std::string& what) {
    double den = 0;
    for (float r : ref) den += (double)r * r;
    if (den > 0 || out.size() != ref.size()) return gputest::close_rel(out, ref, rel_tol, what);
    for (size_t i = 0; i < out.size(); i++)
        if (!std::isfinite(out[i]) || std::fabs(out[i]) > 1e-3)
            return testing::AssertionFailure() << what << ": reference is zero but element " << i << " is " << out[i];
    return testing::AssertionSuccess() << what << ": zero as expected";
}

// Runs forward then backward on fresh random inputs (poisoned outputs) and checks all three results.
void check_attention(int B, int T, int NH, float input_scale = 1.0f) {
    const int HS = 64, C = NH * HS;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_lse = (size_t)B * NH * T;
    const std::vector<float> qkv = gputest::bf16_round(gputest::random_normal(n_qkv, input_scale));
    const std::vector<float> dout = gputest::bf16_round(gputest::random_normal(n_out));

    DeviceBuffer<floatX> d_qkv(gputest::to_bf16(qkv)), d_dout(gputest::to_bf16(dout));
    DeviceBuffer<floatX> d_out(n_out), d_dqkv(n_qkv);
    DeviceBuffer<float> d_lse(n_lse), d_scratch(llmc::attention_backward_scratch_floats(B, T, NH));
    d_out.poison();
    d_lse.poison();
    d_dqkv.poison();
    d_scratch.poison();
    llmc::attention_forward(d_out, d_lse, d_qkv, B, T, NH, HS, 0);
    llmc::attention_backward(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, B, T, NH, HS, 0);
    CUDA_CHECK(cudaDeviceSynchronize());

    // float reference for the big shapes (the saved att matrix is B*NH*T*T), double otherwise
    const bool big = (size_t)B * NH * T * T > (size_t)(1 << 22);
    const Reference ref = big ? cpu_reference<float>(qkv, dout, B, T, NH, HS)
                              : cpu_reference<double>(qkv, dout, B, T, NH, HS);
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " NH=" << NH << " HS=" << HS);
    const std::vector<float> out = gputest::to_float(d_out.download());
    EXPECT_TRUE(gputest::close_rel(out, ref.out, 1e-2, "out"));
    EXPECT_TRUE(gputest::close_rel(d_lse.download(), ref.lse, 1e-3, "lse"));
    const std::vector<float> dqkv = gputest::to_float(d_dqkv.download());
    const std::vector<float> dqkv_ref = backward_given_out(qkv, dout, out, B, T, NH, HS);
    // The double backward above is the CPU reference's own backward when given the exact out.
    EXPECT_TRUE(close_rel_or_zero(backward_given_out(qkv, dout, ref.out, B, T, NH, HS), ref.dqkv, 1e-4,
                                  "backward_given_out(exact out) vs llmc::cpu::attention_backward"));
    const char* names[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++)
        EXPECT_TRUE(close_rel_or_zero(part(dqkv, p, (size_t)B * T, C), part(dqkv_ref, p, (size_t)B * T, C), 1e-2,
                                      names[p]));
}

} // namespace

GPU_TEST(GpuAttention, SingleTokenT1) {
    REQUIRE_GPU();
    check_attention(3, 1, 2);
}

GPU_TEST(GpuAttention, ExactTileMultiple) {
    REQUIRE_GPU();
    check_attention(2, 128, 2);
}

GPU_TEST(GpuAttention, PartialTiles) {
    REQUIRE_GPU();
    check_attention(2, 7, 2);   // a fraction of one warp's 16-row strip
    check_attention(2, 37, 3);  // below one tile
    check_attention(1, 64, 2);  // exactly one tile
    check_attention(1, 65, 2);  // one row into the second tile
    check_attention(2, 127, 2); // one short of two tiles
    check_attention(1, 130, 2); // two rows into the third tile
    check_attention(1, 200, 3);
}

GPU_TEST(GpuAttention, EveryLengthFrom1To130) {
    REQUIRE_GPU();
    // Every way a length can fall on the 16-row strips, the 32-column chunks, the 64-row tiles and the 128-query
    // forward tile, up to two rows into the third 64-row tile.
    for (int T = 1; T <= 130; T++) {
        check_attention(1, T, 1);
        if (testing::Test::HasFailure()) break; // one length's report, not a hundred
    }
}

GPU_TEST(GpuAttention, FullContextT1024) {
    REQUIRE_GPU();
    check_attention(1, 1024, gputest::kEmulated ? 1 : 12);
}

GPU_TEST(GpuAttention, PeakySoftmax) {
    REQUIRE_GPU();
    // Scores with std ~9: the running max moves often and most probabilities underflow.
    check_attention(1, 150, 2, 3.0f);
}

GPU_TEST(GpuAttention, ManyHeads) {
    REQUIRE_GPU();
    // B*NH = 1024 blocks along the grid's x on a device; 64 under the emulator (each block costs milliseconds).
    if (gputest::kEmulated) check_attention(4, 20, 16);
    else check_attention(16, 20, 64);
}

GPU_TEST(GpuAttention, Gpt2Shape) {
    REQUIRE_GPU();
    // GPT-2's 12 heads; the full T = 1024 on a device only.
    check_attention(gputest::kEmulated ? 1 : 2, gputest::kEmulated ? 130 : 1024, 12);
}

GPU_TEST(GpuAttention, BackwardIsDeterministic) {
    REQUIRE_GPU();
    const int B = 2, T = gputest::kEmulated ? 130 : 300, NH = 4, HS = 64, C = NH * HS;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    DeviceBuffer<floatX> d_qkv(gputest::to_bf16(gputest::random_normal(n_qkv)));
    DeviceBuffer<floatX> d_dout(gputest::to_bf16(gputest::random_normal(n_out)));
    DeviceBuffer<floatX> d_out(n_out), d_dqkv(n_qkv);
    DeviceBuffer<float> d_lse((size_t)B * NH * T), d_scratch(llmc::attention_backward_scratch_floats(B, T, NH));
    llmc::attention_forward(d_out, d_lse, d_qkv, B, T, NH, HS, 0);
    std::vector<floatX> runs[2];
    for (auto& r : runs) {
        d_dqkv.poison();
        d_scratch.poison();
        llmc::attention_backward(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, B, T, NH, HS, 0);
        r = d_dqkv.download();
    }
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), n_qkv * sizeof(floatX))) << "dqkv differs between runs";
}

GPU_TEST(GpuAttention, UnsupportedHeadSizeThrows) {
    REQUIRE_GPU();
    EXPECT_THROW(llmc::attention_forward(nullptr, nullptr, nullptr, 1, 8, 1, 48, 0), llmc::Error);
    EXPECT_THROW(llmc::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 1, 48, 0),
                 llmc::Error);
}
