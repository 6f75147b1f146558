/*
 * GPU kernels (encoder, layernorm, matmul, gelu, classifier, optimizer) against the CPU references in llmc/cpu/.
 *
 * Every test starts with REQUIRE_GPU() and skips without a device (and is also built against the emulator,
 * suites Emu*). Inputs are fresh random values every run; the CPU reference runs in double on the bf16-rounded
 * inputs the kernel reads. Outputs a kernel writes are poisoned (NaN) first, so an element it misses fails;
 * outputs that accumulate start from random values and are checked as old + delta. Tolerances are relative L2
 * (close_rel): bf16 outputs 1e-2 (bf16 rounding alone is ~3e-3), fp32 statistics and losses 1e-5, fp32 master
 * weights 1e-6. Backward passes and reductions are run twice from the same state and must agree bitwise.
 */
#include <cstring>
#include <numeric>

#include "llmc/adamw.cuh"
#include "llmc/bias_backward.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cpu/adamw.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/matmul.h"
#include "llmc/encoder.cuh"
#include "llmc/gelu.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "test/gpu/gpu_test_util.cuh"

using llmc::floatX;
using namespace gputest;

namespace {

std::vector<float> download_float(const DeviceBuffer<floatX>& b) { return to_float(b.download()); }

// Each bf16 output within one bf16 ulp (8 significant bits) of the double reference: what an fp32 sum rounded
// once into bf16 gives, and what a lost or doubled share of a sum does not.
// Within one bf16 ulp of ref, plus, for a sum of n_terms fp32 terms whose magnitudes add to abs_sum[i], the
// bound of any fp32 summation order, (n_terms - 1) * 2^-24 * abs_sum[i]: where the terms nearly cancel (a column
// sum close to 0), that, not bf16's rounding of the result, is what fp32 arithmetic allows.
testing::AssertionResult within_one_bf16_ulp(const std::vector<float>& got, const std::vector<double>& ref,
                                             const std::string& what, const std::vector<double>* abs_sum = nullptr,
                                             int n_terms = 1) {
    if (got.size() != ref.size()) return testing::AssertionFailure() << what << ": size " << got.size();
    for (size_t i = 0; i < got.size(); i++) {
        int e = 0;
        std::frexp(ref[i], &e); // |ref| in [2^(e-1), 2^e): a bf16 ulp there is 2^(e-8)
        const double ulp = ref[i] == 0.0 ? 0.0 : std::ldexp(1.0, e - 8);
        const double fp32 = abs_sum ? (n_terms - 1) * std::ldexp((*abs_sum)[i], -24) : 0.0;
        if (!(std::fabs((double)got[i] - ref[i]) <= ulp + fp32))
            return testing::AssertionFailure() << what << "[" << i << "] = " << got[i] << ", reference " << ref[i]
                                               << " (one bf16 ulp " << ulp << ", fp32 summation bound " << fp32 << ")";
    }
    return testing::AssertionSuccess();
}

} // namespace

// ------------------------------------------------------------------------------------------------ encoder

GPU_TEST(KernelsEncoder, ForwardMatchesCpu) {
    REQUIRE_GPU();
    struct Shape { int B, T, C, V, maxT; };
    for (Shape s : {Shape{1, 1, 8, 7, 8}, Shape{2, 7, 8, 7, 8}, Shape{3, 17, 64, 100, 32}, Shape{2, 65, 64, 100, 80},
                    Shape{1, 130, 24, 50, 130}, Shape{4, 64, 768, 1000, 80}}) {
        SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C);
        const int Vp = (s.V + 7) / 8 * 8;
        auto wte = bf16_round(random_normal((size_t)Vp * s.C));
        auto wpe = bf16_round(random_normal((size_t)s.maxT * s.C));
        auto tok = random_tokens((size_t)s.B * s.T, s.V);
        DeviceBuffer<floatX> d_wte(to_bf16(wte)), d_wpe(to_bf16(wpe)), d_out((size_t)s.B * s.T * s.C);
        DeviceBuffer<int> d_tok(tok);
        d_out.poison();
        llmc::encoder_forward(d_out, d_tok, d_wte, d_wpe, s.B, s.T, s.C, 0);
        std::vector<double> ref((size_t)s.B * s.T * s.C);
        llmc::cpu::encoder_forward(ref.data(), tok.data(), wide(wte).data(), wide(wpe).data(), s.B, s.T, s.C);
        EXPECT_TRUE(close_rel(download_float(d_out), narrow(ref), 1e-2, "encoder out"));
    }
}

// Accumulation into random dwte/dwpe; few distinct tokens (vocab 7) make long runs per token.
GPU_TEST(KernelsEncoder, BackwardMatchesCpuAndIsDeterministic) {
    REQUIRE_GPU();
    struct Shape { int B, T, C, V, maxT, scratch_B, vocab_hint; };
    for (Shape s : {Shape{8, 64, 768, 7, 80, 8, 0}, Shape{3, 37, 64, 7, 40, 4, 8}, Shape{4, 128, 64, 50257, 128, 4, 50304},
                    Shape{2, 33, 768, 1000, 33, 2, 1000}, Shape{1, 1, 8, 1, 1, 1, 0}}) {
        SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
        const int Vp = (s.V + 7) / 8 * 8;
        const size_t BTC = (size_t)s.B * s.T * s.C;
        auto dout = bf16_round(random_normal(BTC));
        auto dwte0 = bf16_round(random_normal((size_t)Vp * s.C));
        auto dwpe0 = bf16_round(random_normal((size_t)s.maxT * s.C));
        auto tok = random_tokens((size_t)s.B * s.T, s.V);
        DeviceBuffer<floatX> d_dout(to_bf16(dout)), d_dwte(to_bf16(dwte0)), d_dwpe(to_bf16(dwpe0));
        DeviceBuffer<int> d_tok(tok);
        // Scratch possibly larger than B*T (scratch_B >= B): a smaller batch must work too.
        llmc::EncoderBackwardScratch scratch(s.scratch_B, s.T, s.vocab_hint);
        llmc::encoder_backward(d_dwte, d_dwpe, scratch, d_dout, d_tok, s.B, s.T, s.C, 0);
        auto got_wte = d_dwte.download(), got_wpe = d_dwpe.download();

        std::vector<double> ref_wte = wide(dwte0), ref_wpe = wide(dwpe0);
        llmc::cpu::encoder_backward(ref_wte.data(), ref_wpe.data(), wide(dout).data(), tok.data(), s.B, s.T, s.C);
        EXPECT_TRUE(close_rel(to_float(got_wte), narrow(ref_wte), 1e-2, "dwte"));
        EXPECT_TRUE(close_rel(to_float(got_wpe), narrow(ref_wpe), 1e-2, "dwpe"));
        // With a large vocabulary most dwte rows are untouched and would hide a lost run in the total: the
        // increments alone are compared too (untouched rows: exactly 0 on both sides).
        std::vector<float> inc_got = to_float(got_wte), inc_ref(inc_got.size());
        for (size_t i = 0; i < inc_got.size(); i++) inc_got[i] -= dwte0[i], inc_ref[i] = (float)(ref_wte[i] - dwte0[i]);
        EXPECT_TRUE(close_rel(inc_got, inc_ref, 1e-2, "dwte increment"));

        // Same state, same inputs: bitwise the same result.
        d_dwte.upload(to_bf16(dwte0));
        d_dwpe.upload(to_bf16(dwpe0));
        llmc::encoder_backward(d_dwte, d_dwpe, scratch, d_dout, d_tok, s.B, s.T, s.C, 0);
        EXPECT_TRUE(same_bits(got_wte, d_dwte.download())) << "dwte differs between two runs";
        EXPECT_TRUE(same_bits(got_wpe, d_dwpe.download())) << "dwpe differs between two runs";
    }
}

GPU_TEST(KernelsEncoder, RejectsBadShapes) {
    REQUIRE_GPU();
    llmc::EncoderBackwardScratch scratch(2, 4);
    DeviceBuffer<floatX> buf(1024);
    DeviceBuffer<int> tok(64);
    EXPECT_THROW(llmc::encoder_forward(buf, tok, buf, buf, 2, 4, 12, 0), llmc::Error);           // C % 8
    EXPECT_THROW(llmc::encoder_backward(buf, buf, scratch, buf, tok, 4, 4, 8, 0), llmc::Error); // B*T > capacity
}

// ---------------------------------------------------------------------------------------------- layernorm

namespace {
struct LnShape { int N, C; };
// Rows not a multiple of a block's slice or of the warps, C/8 below a warp (8, 200) and not a multiple of it
// (1600: 6.25 chunks per lane), blocks in a partial last group (6003 rows at C=768: 251 blocks, 16 groups),
// a single warp per block (C=8192).
const LnShape ln_shapes[] = {{1, 8}, {37, 768}, {129, 64}, {33, 1600}, {6003, 768}, {20001, 64}, {301, 200},
                             {7, 8192}};
} // namespace

GPU_TEST(KernelsLayernorm, ForwardMatchesCpu) {
    REQUIRE_GPU();
    for (LnShape s : ln_shapes) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
        const size_t NC = (size_t)s.N * s.C;
        // Offset 2: row means stay far from 0, so their relative error is a meaningful 1e-5 check.
        auto inp = random_normal(NC);
        for (auto& x : inp) x += 2.0f;
        inp = bf16_round(inp);
        auto w = bf16_round(random_normal(s.C)), b = bf16_round(random_normal(s.C));
        DeviceBuffer<floatX> d_inp(to_bf16(inp)), d_w(to_bf16(w)), d_b(to_bf16(b)), d_out(NC);
        DeviceBuffer<float> d_mean(s.N), d_rstd(s.N);
        d_out.poison(), d_mean.poison(), d_rstd.poison();
        llmc::layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, s.N, s.C, 0);

        std::vector<double> out(NC), mean(s.N), rstd(s.N);
        llmc::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), wide(inp).data(), wide(w).data(),
                                     wide(b).data(), 1, s.N, s.C);
        EXPECT_TRUE(close_rel(download_float(d_out), narrow(out), 1e-2, "ln out"));
        EXPECT_TRUE(close_rel(d_mean.download(), narrow(mean), 1e-5, "ln mean"));
        EXPECT_TRUE(close_rel(d_rstd.download(), narrow(rstd), 1e-5, "ln rstd"));
    }
}

// residual = bf16(inp1 + inp2) exactly; normed/mean/rstd bitwise equal to layernorm_forward of that residual.
GPU_TEST(KernelsLayernorm, FusedResidualMatchesUnfusedAndCpu) {
    REQUIRE_GPU();
    for (LnShape s : ln_shapes) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
        const size_t NC = (size_t)s.N * s.C;
        auto a = random_normal(NC), b = bf16_round(random_normal(NC, 0.5f));
        for (auto& x : a) x += 2.0f; // row means far from 0 (see ForwardMatchesCpu)
        a = bf16_round(a);
        auto w = bf16_round(random_normal(s.C)), bias = bf16_round(random_normal(s.C));
        DeviceBuffer<floatX> d_a(to_bf16(a)), d_b(to_bf16(b)), d_w(to_bf16(w)), d_bias(to_bf16(bias));
        DeviceBuffer<floatX> d_res(NC), d_normed(NC), d_normed2(NC);
        DeviceBuffer<float> d_mean(s.N), d_rstd(s.N), d_mean2(s.N), d_rstd2(s.N);
        d_res.poison(), d_normed.poison(), d_mean.poison(), d_rstd.poison();
        llmc::fused_residual_layernorm_forward(d_res, d_normed, d_mean, d_rstd, d_a, d_b, d_w, d_bias, s.N, s.C, 0);

        std::vector<float> sum(NC);
        for (size_t i = 0; i < NC; i++) sum[i] = a[i] + b[i];
        auto res = bf16_round(sum);
        auto got_res = download_float(d_res);
        EXPECT_TRUE(same_bits(got_res, res)) << "residual is not bf16(inp1 + inp2)";

        std::vector<double> out(NC), mean(s.N), rstd(s.N);
        llmc::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), wide(res).data(), wide(w).data(),
                                     wide(bias).data(), 1, s.N, s.C);
        auto got_normed = d_normed.download();
        auto got_mean = d_mean.download(), got_rstd = d_rstd.download();
        EXPECT_TRUE(close_rel(to_float(got_normed), narrow(out), 1e-2, "fused normed"));
        EXPECT_TRUE(close_rel(got_mean, narrow(mean), 1e-5, "fused mean"));
        EXPECT_TRUE(close_rel(got_rstd, narrow(rstd), 1e-5, "fused rstd"));

        llmc::layernorm_forward(d_normed2, d_mean2, d_rstd2, d_res, d_w, d_bias, s.N, s.C, 0);
        EXPECT_TRUE(same_bits(got_normed, d_normed2.download())) << "fused and unfused normed differ";
        EXPECT_TRUE(same_bits(got_mean, d_mean2.download())) << "fused and unfused mean differ";
        EXPECT_TRUE(same_bits(got_rstd, d_rstd2.download())) << "fused and unfused rstd differ";
    }
}

GPU_TEST(KernelsLayernorm, BackwardMatchesCpuAndIsDeterministic) {
    REQUIRE_GPU();
    for (LnShape s : ln_shapes) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
        const size_t NC = (size_t)s.N * s.C;
        auto inp = bf16_round(random_normal(NC));
        auto w = bf16_round(random_normal(s.C)), bias = bf16_round(random_normal(s.C));
        auto dout = bf16_round(random_normal(NC));
        // Saved statistics from the CPU forward (rounded to the fp32 the GPU keeps), so the backward is checked
        // on its own.
        std::vector<double> out_d(NC), mean_d(s.N), rstd_d(s.N);
        llmc::cpu::layernorm_forward(out_d.data(), mean_d.data(), rstd_d.data(), wide(inp).data(), wide(w).data(),
                                     wide(bias).data(), 1, s.N, s.C);
        const std::vector<float> mean = narrow(mean_d), rstd = narrow(rstd_d);
        auto dinp0 = bf16_round(random_normal(NC));
        auto dw0 = bf16_round(random_normal(s.C)), db0 = bf16_round(random_normal(s.C));

        DeviceBuffer<floatX> d_inp(to_bf16(inp)), d_w(to_bf16(w)), d_dout(to_bf16(dout));
        DeviceBuffer<floatX> d_dinp(to_bf16(dinp0)), d_dw(to_bf16(dw0)), d_db(to_bf16(db0));
        DeviceBuffer<float> d_mean(mean), d_rstd(rstd);
        DeviceBuffer<float> scratch(llmc::layernorm_backward_scratch_floats(s.N, s.C));
        scratch.poison(); // every partial the final pass reads must have been written
        llmc::layernorm_backward(d_dinp, d_dw, d_db, scratch, d_dout, d_inp, d_w, d_mean, d_rstd, s.N, s.C, 0);
        auto got_dinp = d_dinp.download(), got_dw = d_dw.download(), got_db = d_db.download();

        std::vector<double> dinp = wide(dinp0), dw = wide(dw0), db = wide(db0);
        llmc::cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), wide(dout).data(), wide(inp).data(),
                                      wide(w).data(), wide(mean).data(), wide(rstd).data(), 1, s.N, s.C);
        EXPECT_TRUE(close_rel(to_float(got_dinp), narrow(dinp), 1e-2, "ln dinp"));
        EXPECT_TRUE(close_rel(to_float(got_dw), narrow(dw), 1e-2, "ln dweight"));
        EXPECT_TRUE(close_rel(to_float(got_db), narrow(db), 1e-2, "ln dbias"));
        // Column sums in fp32 round once into bf16: each within one bf16 ulp of the double reference, plus the
        // fp32 summation bound of its N + 1 terms (the old value and one per row).
        std::vector<double> mag_w(s.C), mag_b(s.C);
        for (int c = 0; c < s.C; c++) mag_w[c] = std::fabs(dw0[c]), mag_b[c] = std::fabs(db0[c]);
        for (int r = 0; r < s.N; r++)
            for (int c = 0; c < s.C; c++) {
                const size_t i = (size_t)r * s.C + c;
                mag_w[c] += std::fabs((double)dout[i] * ((double)inp[i] - mean[r]) * rstd[r]);
                mag_b[c] += std::fabs((double)dout[i]);
            }
        EXPECT_TRUE(within_one_bf16_ulp(to_float(got_dw), dw, "ln dweight", &mag_w, s.N + 1));
        EXPECT_TRUE(within_one_bf16_ulp(to_float(got_db), db, "ln dbias", &mag_b, s.N + 1));

        d_dinp.upload(to_bf16(dinp0)), d_dw.upload(to_bf16(dw0)), d_db.upload(to_bf16(db0));
        llmc::layernorm_backward(d_dinp, d_dw, d_db, scratch, d_dout, d_inp, d_w, d_mean, d_rstd, s.N, s.C, 0);
        EXPECT_TRUE(same_bits(got_dinp, d_dinp.download())) << "dinp differs between two runs";
        EXPECT_TRUE(same_bits(got_dw, d_dw.download())) << "dweight differs between two runs";
        EXPECT_TRUE(same_bits(got_db, d_db.download())) << "dbias differs between two runs";
    }
}

// ---------------------------------------------------------------------------------------------------- gelu

// ------------------------------------------------------------------------------------------------- matmul

namespace {
/*
 * matmul_forward (bias; bias with the fused GELU) and matmul_backward (dinp written, dweight and dbias
 * accumulated; with the fused DGELU) against the CPU reference in double. offset: elements by which the bias and
 * the pre-GELU buffers are moved off their allocation's 256-byte start (their alignment is then what the
 * offset leaves).
 */
void expect_matmul_matches_cpu(int BT, int C, int OC, int offset = 0) {
    SCOPED_TRACE(testing::Message() << "BT=" << BT << " C=" << C << " OC=" << OC << " offset=" << offset);
    const size_t n_in = (size_t)BT * C, n_out = (size_t)BT * OC, n_w = (size_t)OC * C;
    auto inp = bf16_round(random_normal(n_in)), w = bf16_round(random_normal(n_w, 0.2f));
    auto bias = bf16_round(random_normal(OC)), dout = bf16_round(random_normal(n_out));
    std::vector<float> bias_at(offset, 0.0f);
    bias_at.insert(bias_at.end(), bias.begin(), bias.end());
    DeviceBuffer<floatX> d_inp(to_bf16(inp)), d_w(to_bf16(w)), d_bias_at(to_bf16(bias_at)), d_dout(to_bf16(dout));
    DeviceBuffer<floatX> d_out(n_out), d_pre_at(n_out + offset);
    floatX *d_bias = d_bias_at + offset, *d_pre = d_pre_at + offset;

    std::vector<double> ref(n_out), ref_gelu(n_out);
    llmc::cpu::matmul_forward(ref.data(), wide(inp).data(), wide(w).data(), wide(bias).data(), 1, BT, C, OC);
    llmc::cpu::gelu_forward(ref_gelu.data(), ref.data(), n_out);
    d_out.poison();
    llmc::matmul_forward(d_out, d_inp, d_w, d_bias, BT, C, OC, nullptr, 0);
    EXPECT_TRUE(close_rel(download_float(d_out), narrow(ref), 1e-2, "out"));
    d_out.poison(), d_pre_at.poison();
    llmc::matmul_forward(d_out, d_inp, d_w, d_bias, BT, C, OC, d_pre, 0);
    std::vector<float> pre = download_float(d_pre_at);
    pre.erase(pre.begin(), pre.begin() + offset);
    EXPECT_TRUE(close_rel(pre, narrow(ref), 1e-2, "pre-GELU (aux)"));
    EXPECT_TRUE(close_rel(download_float(d_out), narrow(ref_gelu), 1e-2, "GELU out"));

    // Backward: dinp = dout W (written), dweight += dout^T inp, dbias += column sums of dout.
    auto dw0 = bf16_round(random_normal(n_w)), db0 = bf16_round(random_normal(OC));
    DeviceBuffer<floatX> d_dinp(n_in), d_dw(to_bf16(dw0)), d_db(to_bf16(db0));
    DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(OC));
    d_dinp.poison(), scratch.poison();
    llmc::matmul_backward(d_dinp, d_dw, d_db, scratch, d_dout, d_inp, d_w, BT, C, OC, nullptr, 0);
    std::vector<double> dinp(n_in, 0.0), dw = wide(dw0), db = wide(db0);
    llmc::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), wide(dout).data(), wide(inp).data(), wide(w).data(),
                               1, BT, C, OC);
    EXPECT_TRUE(close_rel(download_float(d_dinp), narrow(dinp), 1e-2, "dinp"));
    EXPECT_TRUE(close_rel(download_float(d_dw), narrow(dw), 1e-2, "dweight"));
    EXPECT_TRUE(close_rel(download_float(d_db), narrow(db), 1e-2, "dbias"));
    // The increments alone, so a lost share of the rows cannot hide in the random starting values.
    std::vector<float> db_inc = download_float(d_db), db_inc_ref(OC);
    for (int o = 0; o < OC; o++) db_inc[o] -= db0[o], db_inc_ref[o] = (float)(db[o] - db0[o]);
    EXPECT_TRUE(close_rel(db_inc, db_inc_ref, 1e-2, "dbias increment"));

    // With the DGELU epilogue: dinp = (dout W) * gelu'(pre), pre being the forward's bf16 aux.
    // (the layer below's pre-activation has the shape of dinp: (BT, C))
    auto pre_in = bf16_round(random_normal(n_in, 2.0f));
    std::vector<float> pre_in_at(offset, 0.0f);
    pre_in_at.insert(pre_in_at.end(), pre_in.begin(), pre_in.end());
    DeviceBuffer<floatX> d_pre_in_at(to_bf16(pre_in_at));
    d_dinp.poison();
    llmc::matmul_backward(d_dinp, d_dw, nullptr, scratch, d_dout, d_inp, d_w, BT, C, OC, d_pre_in_at + offset, 0);
    std::vector<double> dgelu(n_in, 0.0);
    llmc::cpu::gelu_backward(dgelu.data(), wide(pre_in).data(), dinp.data(), n_in);
    EXPECT_TRUE(close_rel(download_float(d_dinp), narrow(dgelu), 1e-2, "dinp through DGELU"));
}
} // namespace

// BT = 1 and 7 leave most of the bias gradient's row threads idle; OC = 24 and 96 leave part of a 64-column tile.
GPU_TEST(KernelsMatmul, ForwardAndBackwardMatchCpu) {
    REQUIRE_GPU();
    struct Shape { int BT, C, OC; };
    for (Shape s : {Shape{1, 8, 16}, Shape{7, 64, 24}, Shape{130, 64, 256}, Shape{192, 128, 96}})
        expect_matmul_matches_cpu(s.BT, s.C, s.OC);
}

// The bias 2 bytes past a 256-byte boundary and the pre-GELU buffers 16: the epilogue's pointers are on the
// descriptor when cuBLASLt's heuristic is asked, so it picks an algorithm for these alignments.
GPU_TEST(KernelsMatmul, EpiloguePointersOffTheirBestAlignmentMatchCpu) {
    REQUIRE_GPU();
    expect_matmul_matches_cpu(7, 64, 24, 1);
    expect_matmul_matches_cpu(16, 64, 40, 8);
}

#ifdef LLMC_EMU
// Emulator only (a device offers the epilogues): with cuBLASLt refusing every GELU epilogue, the matmuls fall
// back to the GEMM and the GELU kernels with the same results, and stderr says so once per shape and epilogue.
EMU_TEST(KernelsMatmul, RefusedGeluEpiloguesFallBackToTheGeluKernels) {
    struct Plans { // fresh plans on the way in and out: none made with the epilogues refused is kept
        Plans() { clear(); }
        ~Plans() {
            emu_cublaslt_refuse_gelu_epilogues(false);
            clear();
        }
        static void clear() {
            llmc::CublasLt::get().plans.clear();
            llmc::CublasLt::get().gelu_apart_reported.clear();
        }
    } plans;
    emu_cublaslt_refuse_gelu_epilogues(true);
    testing::internal::CaptureStderr();
    for (int round = 0; round < 2; round++) {
        expect_matmul_matches_cpu(7, 64, 24);
        expect_matmul_matches_cpu(16, 64, 40, 8);
    }
    const std::string err = testing::internal::GetCapturedStderr();
    auto count = [&](const std::string& what) {
        int n = 0;
        for (size_t at = err.find(what); at != std::string::npos; at = err.find(what, at + 1)) n++;
        return n;
    };
    const std::string line = "matmul: cuBLASLt has no algorithm for the ";
    EXPECT_EQ(count(line), 4) << err; // GELU_AUX_BIAS and DGELU at each of the two shapes, once each
    EXPECT_EQ(count(line + "GELU_AUX_BIAS epilogue of the matmul m=24 n=7 k=64 transA=1 transB=0 epilogue "
                           "GELU_AUX_BIAS; using BIAS and the GELU kernel for this shape\n"), 1)
        << err;
    EXPECT_EQ(count(line + "DGELU epilogue of the matmul m=64 n=16 k=40 transA=0 transB=0 epilogue DGELU; using "
                           "DEFAULT and the GELU kernel for this shape\n"), 1)
        << err;
}
#endif

// Host arithmetic, no GPU: the alignment the cuBLASLt algorithm cache keys on.
TEST(KernelsMatmul, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
    EXPECT_EQ(llmc::pointer_alignment(nullptr), 256);
    EXPECT_EQ(llmc::pointer_alignment(reinterpret_cast<void*>(0x10000)), 256);
    EXPECT_EQ(llmc::pointer_alignment(reinterpret_cast<void*>(0x10180)), 128); // d3's layer-1 bias: 384 bytes in
    EXPECT_EQ(llmc::pointer_alignment(reinterpret_cast<void*>(0x10010)), 16);
    EXPECT_EQ(llmc::pointer_alignment(reinterpret_cast<void*>(0x10002)), 2);
}

/*
 * bias_backward alone: dbias += column sums of dout, against the CPU matmul backward's dbias in double, each
 * element within one bf16 ulp; run twice from the same state (bitwise equal: a fixed summation order, and the
 * tile counters reset by the first launch). Shapes: OC not a multiple of the 64-column tile (8, 24, 200, 2312),
 * rows not a multiple of the 32 row threads or of the slab, one slab (BT <= 32) and many (4099 rows at OC=768:
 * 86 slabs of 48 rows, the last one 19), GPT-2's OCs (768, 2304, 3072).
 */
GPU_TEST(KernelsMatmul, BiasBackwardMatchesCpuAndIsDeterministic) {
    REQUIRE_GPU();
    struct Shape { int BT, OC; };
    const std::vector<Shape> shapes =
        kEmulated ? std::vector<Shape>{{1, 8}, {7, 24}, {33, 200}, {4099, 768}, {333, 2312}, {130, 3072}}
                  : std::vector<Shape>{{1, 8}, {7, 24}, {33, 200}, {4099, 768}, {333, 2312}, {16384, 2304}, {16384, 3072}};
    for (Shape s : shapes) {
        SCOPED_TRACE(testing::Message() << "BT=" << s.BT << " OC=" << s.OC);
        const int C = 8; // the reference's matmul backward also forms dinp and dweight: keep them small
        auto dout = bf16_round(random_normal((size_t)s.BT * s.OC)), db0 = bf16_round(random_normal(s.OC));
        std::vector<double> dinp((size_t)s.BT * C, 0.0), dw((size_t)s.OC * C, 0.0), db = wide(db0);
        const std::vector<double> inp((size_t)s.BT * C, 0.0), w((size_t)s.OC * C, 0.0);
        llmc::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), wide(dout).data(), inp.data(), w.data(), 1, s.BT,
                                   C, s.OC);

        DeviceBuffer<floatX> d_dout(to_bf16(dout)), d_db(to_bf16(db0));
        DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(s.OC));
        scratch.poison(); // every partial the last block reads must have been written
        llmc::bias_backward(d_db, scratch, d_dout, s.BT, s.OC, 0);
        const auto got = d_db.download();
        std::vector<double> mag(s.OC); // the fp32 summation bound of the old value and BT rows
        for (int c = 0; c < s.OC; c++) mag[c] = std::fabs(db0[c]);
        for (size_t i = 0; i < dout.size(); i++) mag[i % s.OC] += std::fabs(dout[i]);
        EXPECT_TRUE(within_one_bf16_ulp(to_float(got), db, "dbias", &mag, s.BT + 1));

        d_db.upload(to_bf16(db0));
        llmc::bias_backward(d_db, scratch, d_dout, s.BT, s.OC, 0);
        EXPECT_TRUE(same_bits(got, d_db.download())) << "dbias differs between two runs";
    }
}

GPU_TEST(KernelsMatmul, BiasBackwardRejectsBadShapes) {
    REQUIRE_GPU();
    DeviceBuffer<floatX> buf(64);
    DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(16));
    EXPECT_THROW(llmc::bias_backward(buf, scratch, buf, 2, 12, 0), llmc::Error);    // OC not a multiple of 8
    EXPECT_THROW(llmc::bias_backward(buf, scratch, buf, 2, 0, 0), llmc::Error);     // no columns
    EXPECT_THROW(llmc::bias_backward(buf, scratch, buf, -1, 8, 0), llmc::Error);    // negative rows
    EXPECT_THROW(llmc::bias_backward(buf, scratch, buf + 1, 2, 8, 0), llmc::Error); // dout not 16-byte aligned
    EXPECT_THROW(llmc::bias_backward(buf, scratch, buf, 1, llmc::BIAS_BWD_MAX_OC + 8, 0), llmc::Error);
}

// Host arithmetic, no GPU: the bias gradient's scratch sized for OC holds the partials of any (BT, oc <= OC).
TEST(KernelsMatmul, BiasBackwardScratchCoversEveryShapeBelowItsSize) {
    for (int OC = 8; OC <= 4 * 1600; OC += 8) {
        const size_t have = llmc::bias_backward_scratch_floats(OC);
        for (int BT : {1, 31, 33, 1000, 4097, 16384, 65536, 1 << 20}) {
            const llmc::BiasBackwardPlan p = llmc::bias_backward_plan(BT, OC);
            ASSERT_LE((size_t)p.slabs * p.tiles * llmc::BIAS_BWD_TILE, have) << "BT=" << BT << " OC=" << OC;
            ASSERT_GE((size_t)p.slabs * p.rows_per_slab, (size_t)BT);
            ASSERT_LT((size_t)(p.slabs - 1) * p.rows_per_slab, (size_t)BT) << "an empty slab";
        }
        ASSERT_LE(have, llmc::bias_backward_scratch_floats(OC + 8)) << "not monotone at OC=" << OC;
    }
}

// Host arithmetic, no GPU: the scratch sized for N rows holds the partials of a backward on any n <= N rows
// (the model runs backward on fewer rows than it allocated for; the block count is not monotone in n).
TEST(KernelsLayernorm, BackwardScratchCoversEveryRowCountBelowItsSize) {
    for (int C : {32, 128, 768, 1600, 3072, 8192}) {
        size_t needed = 0; // the most any n <= N needs
        for (int N = 1; N <= 20000; N++) {
            const llmc::LayernormBackwardPlan p = llmc::layernorm_backward_plan(N, C);
            needed = std::max(needed, (size_t)(p.blocks + p.groups) * 2 * C);
            ASSERT_LE(p.blocks, llmc::LN_BWD_MAX_BLOCKS);
            ASSERT_LT((p.blocks - 1) * p.rows_per_block, N) << "an empty block";
            ASSERT_LE(needed, llmc::layernorm_backward_scratch_floats(N, C)) << "C=" << C << " N=" << N;
        }
    }
    // The block count is not monotone: 4096 rows take 256 blocks of 16, 4097 rows 241 of 17.
    EXPECT_GT(llmc::layernorm_backward_plan(4096, 768).blocks, llmc::layernorm_backward_plan(4097, 768).blocks);
}

GPU_TEST(KernelsGelu, ForwardAndBackwardMatchCpu) {
    REQUIRE_GPU();
    for (size_t N : {(size_t)5, (size_t)8 * 1000 + 3, (size_t)4 * 768 * 64}) {
        SCOPED_TRACE(testing::Message() << "N=" << N);
        auto inp = bf16_round(random_normal(N, 2.0f));
        auto d = bf16_round(random_normal(N));
        DeviceBuffer<floatX> d_inp(to_bf16(inp)), d_out(N), d_d(to_bf16(d));
        d_out.poison();
        llmc::gelu_forward(d_out, d_inp, N, 0);
        llmc::gelu_backward_inplace(d_d, d_inp, N, 0);

        std::vector<double> out(N), dinp(N, 0.0);
        llmc::cpu::gelu_forward(out.data(), wide(inp).data(), N);
        llmc::cpu::gelu_backward(dinp.data(), wide(inp).data(), wide(d).data(), N); // into zeros: d * gelu'
        EXPECT_TRUE(close_rel(download_float(d_out), narrow(out), 1e-2, "gelu out"));
        EXPECT_TRUE(close_rel(download_float(d_d), narrow(dinp), 1e-2, "gelu dinp"));
    }
}

// ---------------------------------------------------------------------------------------------- classifier

namespace {
/*
 * CPU reference through llmc/cpu/classifier.h: with C = Vp and wte = identity, the head's matmul returns the
 * logits exactly (x*1 plus exact zeros), so classifier_forward/backward give probs, losses and dlogits of
 * `logits` directly. Affordable for Vp up to a few thousand.
 */
void classifier_reference(const std::vector<float>& logits, const std::vector<int>& targets, float dloss, int BT,
                          int V, int Vp, std::vector<float>* losses, std::vector<float>* dlogits) {
    std::vector<double> eye((size_t)Vp * Vp, 0.0), x = gputest::wide(logits);
    for (int i = 0; i < Vp; i++) eye[(size_t)i * Vp + i] = 1.0;
    std::vector<double> probs((size_t)BT * Vp), loss(BT, 0.0);
    llmc::cpu::classifier_forward(probs.data(), loss.data(), x.data(), eye.data(), targets.data(), 1, BT, Vp, V, Vp);
    std::vector<double> dinp((size_t)BT * Vp, 0.0), dwte((size_t)Vp * Vp, 0.0);
    llmc::cpu::classifier_backward(dinp.data(), dwte.data(), probs.data(), x.data(), eye.data(), targets.data(),
                                   (double)dloss, 1, BT, Vp, V, Vp);
    *losses = gputest::narrow(loss);
    *dlogits = gputest::narrow(probs); // turned into dlogits in place
}

// Direct double-precision softmax/cross-entropy for the GPT-2 vocabulary, where the identity trick is too big.
void classifier_reference_direct(const std::vector<float>& logits, const std::vector<int>& targets, float dloss,
                                 int BT, int V, int Vp, std::vector<float>* losses, std::vector<float>* dlogits) {
    losses->assign(BT, 0.0f);
    dlogits->assign((size_t)BT * Vp, 0.0f);
    for (int r = 0; r < BT; r++) {
        const float* x = logits.data() + (size_t)r * Vp;
        double m = x[0];
        for (int i = 1; i < V; i++) m = std::max(m, (double)x[i]);
        double sum = 0;
        for (int i = 0; i < V; i++) sum += std::exp(x[i] - m);
        (*losses)[r] = (float)(std::log(sum) - (x[targets[r]] - m));
        for (int i = 0; i < V; i++)
            (*dlogits)[(size_t)r * Vp + i] = (float)((std::exp(x[i] - m) / sum - (i == targets[r])) * dloss);
    }
}
} // namespace

GPU_TEST(KernelsClassifier, LossAndDlogitsMatchCpu) {
    REQUIRE_GPU();
    struct Shape { int BT, V, Vp; };
    for (Shape s : {Shape{37, 1000, 1024}, Shape{5, 4100, 4104}, Shape{3, 8, 8}, Shape{6, 50257, 50304}}) {
        SCOPED_TRACE(testing::Message() << "BT=" << s.BT << " V=" << s.V << " Vp=" << s.Vp);
        const size_t n = (size_t)s.BT * s.Vp;
        auto logits = bf16_round(random_normal(n, 2.0f));
        // Padded columns hold a large logit: a kernel that lets one into the softmax fails by a wide margin.
        for (int r = 0; r < s.BT; r++)
            for (int i = s.V; i < s.Vp; i++) logits[(size_t)r * s.Vp + i] = 30.0f;
        auto targets = random_tokens(s.BT, s.V);
        const float dloss = 1.0f / s.BT;
        std::vector<float> ref_loss, ref_dlogits;
        if ((size_t)s.Vp * s.Vp <= (size_t)32 << 20)
            classifier_reference(logits, targets, dloss, s.BT, s.V, s.Vp, &ref_loss, &ref_dlogits);
        else
            classifier_reference_direct(logits, targets, dloss, s.BT, s.V, s.Vp, &ref_loss, &ref_dlogits);

        DeviceBuffer<floatX> d_logits(to_bf16(logits));
        DeviceBuffer<int> d_targets(targets);
        DeviceBuffer<float> d_loss(s.BT);

        // Loss only: the logits must stay untouched.
        d_loss.poison();
        llmc::fused_classifier(d_logits, d_loss, d_targets, dloss, s.BT, s.V, s.Vp, false, 0);
        EXPECT_TRUE(close_rel(d_loss.download(), ref_loss, 1e-5, "loss (no dlogits)"));
        EXPECT_TRUE(same_bits(download_float(d_logits), logits)) << "logits changed without write_dlogits";

        d_loss.poison();
        llmc::fused_classifier(d_logits, d_loss, d_targets, dloss, s.BT, s.V, s.Vp, true, 0);
        auto got_loss = d_loss.download();
        auto got = download_float(d_logits);
        EXPECT_TRUE(close_rel(got_loss, ref_loss, 1e-5, "loss"));
        EXPECT_TRUE(close_rel(got, ref_dlogits, 1e-2, "dlogits"));
        int nonzero_pad = 0;
        for (int r = 0; r < s.BT; r++)
            for (int i = s.V; i < s.Vp; i++) nonzero_pad += got[(size_t)r * s.Vp + i] != 0.0f;
        EXPECT_EQ(nonzero_pad, 0) << "padded dlogits must be exactly 0";

        // Deterministic: the same logits again give bitwise the same loss and dlogits.
        d_logits.upload(to_bf16(logits));
        llmc::fused_classifier(d_logits, d_loss, d_targets, dloss, s.BT, s.V, s.Vp, true, 0);
        EXPECT_TRUE(same_bits(got_loss, d_loss.download())) << "loss differs between two runs";
        EXPECT_TRUE(same_bits(got, download_float(d_logits))) << "dlogits differ between two runs";
    }
}

// ----------------------------------------------------------------------------------------------- optimizer

GPU_TEST(KernelsAdamW, GlobalNormMatchesDoubleSumAndIsDeterministic) {
    REQUIRE_GPU();
    for (size_t n : {(size_t)5, (size_t)1000003, (size_t)10 * 1000 * 1000 + 7}) {
        SCOPED_TRACE(testing::Message() << "n=" << n);
        auto g = bf16_round(random_normal(n));
        DeviceBuffer<floatX> d_g(to_bf16(g));
        DeviceBuffer<float> d_out(1), scratch(llmc::global_norm_scratch_floats());
        d_out.poison();
        llmc::global_norm_squared(d_out, scratch, d_g, n, 0);
        const float got = d_out.download()[0];
        const double norm = llmc::cpu::global_norm(g.data(), n);
        EXPECT_TRUE(close_rel({got}, {(float)(norm * norm)}, 1e-5, "global norm^2"));
        llmc::global_norm_squared(d_out, scratch, d_g, n, 0);
        EXPECT_TRUE(same_bits(std::vector<float>{got}, d_out.download())) << "norm differs between two runs";
    }
}

namespace {
/*
 * Three AdamW steps of a tiny model's parameters, on the GPU (one adamw_update per tensor, the tensor's decay)
 * and on the CPU (cpu::adamw_update over the whole model, fp32 parameters = the master weights). When
 * per_tensor is false the GPU updates the whole buffer in one call (needs weight_decay 0), which exercises
 * an n that is not a multiple of 8.
 */
void check_adamw(const llmc::GPT2Config& cfg, const llmc::AdamWConfig& opt, bool per_tensor) {
    const size_t n = llmc::num_parameters(cfg);
    const auto sizes = llmc::parameter_sizes(cfg);
    auto master0 = random_normal(n, 0.5f);
    DeviceBuffer<float> d_master(master0), d_m(std::vector<float>(n, 0.0f)), d_v(std::vector<float>(n, 0.0f));
    DeviceBuffer<floatX> d_params(n), d_grads(n);
    DeviceBuffer<float> d_norm2(1), scratch(llmc::global_norm_scratch_floats());
    d_params.poison();
    llmc::copy_float_to_bf16(d_params, d_master, n, 0);
    ASSERT_TRUE(same_bits(d_params.download(), to_bf16(master0))) << "copy_float_to_bf16 is not round-to-nearest";

    std::vector<float> params = master0, m(n, 0.0f), v(n, 0.0f);
    const float lr = 1e-3f;
    for (int t = 1; t <= 3; t++) {
        auto grads = bf16_round(random_normal(n));
        d_grads.upload(to_bf16(grads));
        llmc::global_norm_squared(d_norm2, scratch, d_grads, n, 0);
        DeviceBuffer<llmc::AdamWStep> d_step(std::vector<llmc::AdamWStep>{llmc::adamw_step(lr, opt.beta1, opt.beta2, t)});
        if (per_tensor) {
            size_t off = 0;
            for (int k = 0; k < llmc::NUM_PARAMETER_TENSORS; k++) {
                const float wd = llmc::parameter_decays(k) ? opt.weight_decay : 0.0f;
                llmc::adamw_update(d_params.ptr + off, d_master.ptr + off, d_grads.ptr + off, d_m.ptr + off,
                                   d_v.ptr + off, sizes[k], d_step, opt.beta1, opt.beta2, opt.eps, wd, d_norm2,
                                   opt.grad_clip, 0);
                off += sizes[k];
            }
        } else {
            ASSERT_EQ(opt.weight_decay, 0.0f);
            llmc::adamw_update(d_params, d_master, d_grads, d_m, d_v, n, d_step, opt.beta1, opt.beta2, opt.eps, 0.0f,
                               d_norm2, opt.grad_clip, 0);
        }
        llmc::cpu::adamw_update(params.data(), grads.data(), m.data(), v.data(), cfg, opt, lr, t,
                                llmc::cpu::global_norm(grads.data(), n));
    }
    auto got_master = d_master.download();
    EXPECT_TRUE(close_rel(got_master, params, 1e-6, "master weights"));
    EXPECT_TRUE(close_rel(d_m.download(), m, 1e-6, "m"));
    EXPECT_TRUE(close_rel(d_v.download(), v, 1e-6, "v"));
    EXPECT_TRUE(same_bits(d_params.download(), to_bf16(got_master))) << "params are not bf16(master)";
}

llmc::GPT2Config tiny_config(int C, int V, int Vp, int maxT) {
    llmc::GPT2Config c;
    c.num_layers = 1;
    c.num_heads = 1;
    c.channels = C;
    c.vocab_size = V;
    c.padded_vocab_size = Vp;
    c.max_seq_len = maxT;
    return c;
}
} // namespace

GPU_TEST(KernelsAdamW, ThreeStepsMatchCpu) {
    REQUIRE_GPU();
    llmc::AdamWConfig opt;
    opt.weight_decay = 0.1f;
    const auto cfg = tiny_config(16, 30, 32, 8);
    {
        SCOPED_TRACE("clipping on (norm >> clip)");
        opt.grad_clip = 1.0f;
        check_adamw(cfg, opt, true);
    }
    {
        SCOPED_TRACE("clipping off (clip 0)");
        opt.grad_clip = 0.0f;
        check_adamw(cfg, opt, true);
    }
    {
        SCOPED_TRACE("clip above the norm");
        opt.grad_clip = 1e6f;
        check_adamw(cfg, opt, true);
    }
    {
        SCOPED_TRACE("one call over an odd-sized buffer");
        opt.grad_clip = 1.0f;
        opt.weight_decay = 0.0f;
        const auto odd = tiny_config(3, 7, 7, 5);
        ASSERT_NE(llmc::num_parameters(odd) % 8, 0u);
        check_adamw(odd, opt, false);
    }
}

GPU_TEST(KernelsAdamW, CopyFloatToBf16RoundsToNearest) {
    REQUIRE_GPU();
    for (size_t n : {(size_t)3, (size_t)1003, (size_t)1 << 20}) {
        auto x = random_normal(n, 3.0f);
        DeviceBuffer<float> d_x(x);
        DeviceBuffer<floatX> d_y(n);
        d_y.poison();
        llmc::copy_float_to_bf16(d_y, d_x, n, 0);
        EXPECT_TRUE(same_bits(d_y.download(), to_bf16(x))) << "n=" << n;
    }
}
