/*
 * cuBLASLt autotune (llmc/matmul.cuh): a new plan times the heuristic's candidates (up to 8) and keeps the
 * fastest; the timing leaves no trace in the results (a call that overwrites its outputs is timed in place, one
 * that accumulates on scratch), and LLMC_GEMM_AUTOTUNE=0 keeps the heuristic's first, untimed. On a device the
 * times are the library's own: the chosen candidate must be the fastest measured. Under the emulator each
 * algorithm's time is set (emu_cublaslt_set_algorithm_times), so the test also knows which one must win.
 * Results are compared with the CPU reference in double, relative L2 1e-2 (bf16 outputs, as test_kernels.cu).
 */
#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "llmc/cpu/gelu.h"
#include "llmc/cpu/matmul.h"
#include "llmc/matmul.cuh"
#include "test/gpu/gpu_test_util.cuh"

using llmc::floatX;
using namespace gputest;

namespace {

// No plan survives from before or into after: each test sees its own plans built.
struct FreshPlans {
    FreshPlans() {
        llmc::CublasLt::get().plans.clear();
        llmc::CublasLt::get().preset.clear();
    }
    ~FreshPlans() {
#ifdef LLMC_EMU
        emu_cublaslt_set_algorithm_times({});
#endif
        llmc::CublasLt::get().plans.clear();
        llmc::CublasLt::get().preset.clear();
    }
};

/*
 * The four plans of one layer's fc: forward with BIAS and with GELU_AUX_BIAS (both timed in place), backward's
 * dinp through DGELU (in place) and dweight (accumulating: timed on scratch). Every result against the CPU,
 * dweight's increment alone too, so a timed call that added into the real dweight fails.
 */
void run_fc_layer_against_cpu(int BT, int C, int OC) {
    SCOPED_TRACE(testing::Message() << "BT=" << BT << " C=" << C << " OC=" << OC);
    const size_t n_in = (size_t)BT * C, n_out = (size_t)BT * OC, n_w = (size_t)OC * C;
    auto inp = bf16_round(random_normal(n_in)), w = bf16_round(random_normal(n_w, 0.2f));
    auto bias = bf16_round(random_normal(OC)), dout = bf16_round(random_normal(n_out));
    auto pre_in = bf16_round(random_normal(n_in, 2.0f)), dw0 = bf16_round(random_normal(n_w));
    DeviceBuffer<floatX> d_inp(to_bf16(inp)), d_w(to_bf16(w)), d_bias(to_bf16(bias)), d_dout(to_bf16(dout));
    DeviceBuffer<floatX> d_pre_in(to_bf16(pre_in)), d_dw(to_bf16(dw0));
    DeviceBuffer<floatX> d_out(n_out), d_gelu(n_out), d_pre(n_out), d_dinp(n_in);
    DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(OC));
    d_out.poison(), d_gelu.poison(), d_pre.poison(), d_dinp.poison();

    llmc::matmul_forward(d_out, d_inp, d_w, d_bias, BT, C, OC, nullptr, 0);
    llmc::matmul_forward(d_gelu, d_inp, d_w, d_bias, BT, C, OC, d_pre, 0);
    llmc::matmul_backward(d_dinp, d_dw, nullptr, scratch, d_dout, d_inp, d_w, BT, C, OC, d_pre_in, 0);

    std::vector<double> ref(n_out), ref_gelu(n_out), dinp(n_in, 0.0), dw = wide(dw0), dgelu(n_in);
    llmc::cpu::matmul_forward(ref.data(), wide(inp).data(), wide(w).data(), wide(bias).data(), 1, BT, C, OC);
    llmc::cpu::gelu_forward(ref_gelu.data(), ref.data(), n_out);
    std::vector<double> no_db(OC, 0.0);
    llmc::cpu::matmul_backward(dinp.data(), dw.data(), no_db.data(), wide(dout).data(), wide(inp).data(),
                               wide(w).data(), 1, BT, C, OC);
    llmc::cpu::gelu_backward(dgelu.data(), wide(pre_in).data(), dinp.data(), n_in);
    EXPECT_TRUE(close_rel(to_float(d_out.download()), narrow(ref), 1e-2, "out"));
    EXPECT_TRUE(close_rel(to_float(d_pre.download()), narrow(ref), 1e-2, "pre-GELU (aux)"));
    EXPECT_TRUE(close_rel(to_float(d_gelu.download()), narrow(ref_gelu), 1e-2, "GELU out"));
    EXPECT_TRUE(close_rel(to_float(d_dinp.download()), narrow(dgelu), 1e-2, "dinp through DGELU"));
    std::vector<float> inc = to_float(d_dw.download()), inc_ref(n_w);
    for (size_t i = 0; i < n_w; i++) inc[i] -= dw0[i], inc_ref[i] = (float)(dw[i] - dw0[i]);
    EXPECT_TRUE(close_rel(inc, inc_ref, 1e-2, "dweight increment"));
}

// Every plan: timed, the chosen one the fastest measured (the earlier on a tie); expected_index >= 0 (emulator):
// that one and `expected_count` candidates with distinct ids.
void expect_fastest_chosen(int expected_count, int expected_index) {
    const std::vector<llmc::GemmTuning> plans = llmc::gemm_tunings();
    EXPECT_EQ(plans.size(), 4u);
    std::set<std::string> epilogues;
    for (const llmc::GemmTuning& t : plans) {
        SCOPED_TRACE(testing::Message() << "m=" << t.m << " n=" << t.n << " k=" << t.k << " " << t.epilogue);
        epilogues.insert(t.epilogue + (t.accumulate ? " accumulate" : ""));
        ASSERT_FALSE(t.candidates.empty());
        if (t.candidates.size() == 1) {
            EXPECT_FALSE(t.autotuned) << "one candidate needs no timing";
            continue;
        }
        EXPECT_TRUE(t.autotuned);
        ASSERT_GE(t.chosen, 0);
        ASSERT_LT(t.chosen, (int)t.candidates.size());
        EXPECT_LE(t.candidates.size(), (size_t)llmc::GEMM_AUTOTUNE_CANDIDATES);
        int fastest = 0;
        for (size_t i = 0; i < t.candidates.size(); i++) {
            EXPECT_EQ(t.candidates[i].index, (int)i);
            EXPECT_GE(t.candidates[i].us, 0.0) << "candidate " << i << " not timed";
            if (t.candidates[i].us < t.candidates[fastest].us) fastest = (int)i;
        }
        EXPECT_EQ(t.chosen, fastest);
        if (expected_index >= 0) {
            EXPECT_EQ((int)t.candidates.size(), expected_count);
            EXPECT_EQ(t.chosen, expected_index);
            std::set<int> ids;
            for (const llmc::GemmCandidate& c : t.candidates) ids.insert(c.algo_id);
            EXPECT_EQ(ids.size(), t.candidates.size()) << "candidates with the same algorithm id";
        }
    }
    EXPECT_EQ(epilogues, (std::set<std::string>{"BIAS", "GELU_AUX_BIAS", "DGELU", "DEFAULT accumulate"}));
}

} // namespace

GPU_TEST(KernelsMatmulAutotune, KeepsTheFastestCandidateAndResultsMatchCpu) {
    REQUIRE_GPU();
    ScopedEnv autotune("LLMC_GEMM_AUTOTUNE", nullptr);
    FreshPlans plans;
#ifdef LLMC_EMU
    // Emulated ms per call of the heuristic's 1st, 2nd, ...: the 3rd is the fastest; then the 1st, with more
    // algorithms on offer than the 8 asked for. The margins (tens of ms) dwarf what a loaded host adds to a call.
    emu_cublaslt_set_algorithm_times({50, 30, 5, 70});
    run_fc_layer_against_cpu(24, 32, 40);
    expect_fastest_chosen(4, 2);
    llmc::CublasLt::get().plans.clear();
    emu_cublaslt_set_algorithm_times({2, 90, 90, 90, 90, 90, 90, 90, 90, 90});
    run_fc_layer_against_cpu(24, 32, 40);
    expect_fastest_chosen(llmc::GEMM_AUTOTUNE_CANDIDATES, 0);
#else
    run_fc_layer_against_cpu(128, 768, 3072);
    expect_fastest_chosen(0, -1);
#endif
}

// LLMC_GEMM_AUTOTUNE=0: one candidate asked for, the heuristic's first, untimed (the emulator's fastest is
// another); results as before. Any value but 0 or 1 is refused with one line naming the variable.
GPU_TEST(KernelsMatmulAutotune, OffKeepsTheHeuristicsFirst) {
    REQUIRE_GPU();
    FreshPlans plans;
    {
        ScopedEnv off("LLMC_GEMM_AUTOTUNE", "0");
#ifdef LLMC_EMU
        emu_cublaslt_set_algorithm_times({0.5, 0, 0});
#endif
        run_fc_layer_against_cpu(24, 32, 40);
        const std::vector<llmc::GemmTuning> tunings = llmc::gemm_tunings();
        EXPECT_EQ(tunings.size(), 4u);
        for (const llmc::GemmTuning& t : tunings) {
            SCOPED_TRACE(t.epilogue);
            EXPECT_FALSE(t.autotuned);
            EXPECT_EQ(t.chosen, 0);
            ASSERT_EQ(t.candidates.size(), 1u);
            EXPECT_LT(t.candidates[0].us, 0.0) << "timed although LLMC_GEMM_AUTOTUNE=0";
        }
    }
    llmc::CublasLt::get().plans.clear();
    ScopedEnv bad("LLMC_GEMM_AUTOTUNE", "yes");
    DeviceBuffer<floatX> a(64), b(64), d(64);
    try {
        llmc::matmul_forward(d, a, b, nullptr, 8, 8, 8, nullptr, 0);
        ADD_FAILURE() << "LLMC_GEMM_AUTOTUNE=yes was accepted";
    } catch (const llmc::Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("LLMC_GEMM_AUTOTUNE=yes: expected 0", 0), 0u) << e.what();
    }
}

// LLMC_VERBOSE=1: one line per plan on stderr, naming the shape, the algorithm chosen and every candidate's time.
GPU_TEST(KernelsMatmulAutotune, VerboseLogNamesTheChosenAlgorithmPerShape) {
    REQUIRE_GPU();
    ScopedEnv autotune("LLMC_GEMM_AUTOTUNE", nullptr);
    ScopedEnv verbose("LLMC_VERBOSE", "1");
    FreshPlans plans;
#ifdef LLMC_EMU
    emu_cublaslt_set_algorithm_times({50, 30, 5, 70});
#endif
    testing::internal::CaptureStderr();
    run_fc_layer_against_cpu(24, 32, 40);
    run_fc_layer_against_cpu(24, 32, 40); // the same plans again: no more lines
    const std::string err = testing::internal::GetCapturedStderr();
    size_t lines = 0;
    for (size_t at = err.find("matmul: m="); at != std::string::npos; at = err.find("matmul: m=", at + 1)) lines++;
    EXPECT_EQ(lines, 4u) << err;
    for (const llmc::GemmTuning& t : llmc::gemm_tunings()) {
        const std::string head = llmc::strprintf("matmul: m=%d n=%d k=%d transA=%d transB=%d epilogue %s: cuBLASLt algorithm "
                                           "%d of %d (id %d, ",
                                           t.m, t.n, t.k, (int)t.trans_a, (int)t.trans_b, t.epilogue.c_str(),
                                           t.chosen + 1, (int)t.candidates.size(), t.candidates[t.chosen].algo_id);
        EXPECT_NE(err.find(head), std::string::npos) << head << "\n" << err;
    }
#ifdef LLMC_EMU
    EXPECT_NE(err.find("matmul: m=40 n=24 k=32 transA=1 transB=0 epilogue BIAS: cuBLASLt algorithm 3 of 4 (id 25, "),
              std::string::npos)
        << err;
#endif
}

// The algorithms recorded with a checkpoint (gemm_choices_text) are taken instead of timing in a later process
// (here: after the plans are dropped, with other candidates now the fastest), so a resumed run repeats them.
GPU_TEST(KernelsMatmulAutotune, RecordedChoicesAreTakenInsteadOfTiming) {
    REQUIRE_GPU();
    ScopedEnv autotune("LLMC_GEMM_AUTOTUNE", nullptr);
    FreshPlans plans;
#ifdef LLMC_EMU
    emu_cublaslt_set_algorithm_times({50, 30, 5, 70});
#endif
    run_fc_layer_against_cpu(24, 32, 40);
    const std::string recorded = llmc::gemm_choices_text();
    std::vector<int> chosen;
    for (const llmc::GemmTuning& t : llmc::gemm_tunings()) chosen.push_back(t.chosen);
    ASSERT_EQ(chosen.size(), 4u);
    llmc::CublasLt::get().plans.clear();
#ifdef LLMC_EMU
    emu_cublaslt_set_algorithm_times({1, 90, 90, 90}); // timing now would pick the first
#endif
    llmc::set_gemm_choices(recorded, "recorded");
    run_fc_layer_against_cpu(24, 32, 40);
    EXPECT_EQ(llmc::gemm_choices_text(), recorded);
    size_t i = 0;
    for (const llmc::GemmTuning& t : llmc::gemm_tunings()) {
        SCOPED_TRACE(t.epilogue);
        EXPECT_TRUE(t.restored || t.candidates.size() == 1);
        EXPECT_FALSE(t.autotuned) << "timed although an algorithm was recorded";
        EXPECT_EQ(t.chosen, chosen[i++]);
    }
    for (const char* bad : {"1 2 3\n", "40 24 32 1 0 1 0 256 256 256 256 256 00000000000000zz 0 0 0 0 0 0 0\n"}) {
        try {
            llmc::set_gemm_choices(bad, "x.txt");
            ADD_FAILURE() << "accepted: " << bad;
        } catch (const llmc::Error& e) {
            EXPECT_EQ(std::string(e.what()), "x.txt: line 1 is not a matmul problem and its cuBLASLt algorithm");
        }
    }
}
