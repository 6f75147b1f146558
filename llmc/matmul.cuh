/*
 * Matmuls through cuBLASLt: bf16 operands, fp32 accumulate, bias and GELU fused as epilogues.
 *
 * All tensors are row-major. A row-major (R, K) matrix is a column-major (K, R) one, so out (BT, OC) =
 * inp (BT, C) @ weight^T with weight (OC, C) is, in cuBLAS's column-major terms, out^T = weight^T' * inp^T:
 * m = OC, n = BT, k = C, A = weight transposed, B = inp as is.
 *
 * Bias gradients use our own kernel (llmc/bias_backward.cuh) rather than the BGRADB epilogue: the epilogue
 * overwrites, and gradient accumulation needs +=, deterministically.
 *
 * Where cuBLASLt offers no algorithm for a GELU epilogue (GELU_AUX, GELU_AUX_BIAS, DGELU) at some shape, that
 * shape's plan falls back to the GEMM without the GELU (BIAS or DEFAULT) followed by the llmc/gelu.cuh kernel,
 * decided once when the plan is built, and one line on stderr says so, once per shape.
 *
 * Autotune: when a plan is built (the first call of its problem), the heuristic is asked for up to
 * GEMM_AUTOTUNE_CANDIDATES algorithms and each is timed on the call's stream with CUDA events
 * (GEMM_AUTOTUNE_WARMUP untimed calls, then GEMM_AUTOTUNE_CALLS timed ones); the fastest (the earlier one on a
 * tie) serves every later call of the plan, so results are deterministic within a run. The timed calls are the
 * real call's: same operands, epilogue pointers and beta. A call that overwrites its outputs (beta 0: D and
 * any aux it writes) is timed in place, since the real call rewrites them right after, in stream order; one
 * that accumulates (beta 1) is timed on a scratch D allocated for the timing and freed after it. Plan building
 * therefore synchronises the stream once. LLMC_GEMM_AUTOTUNE=0 keeps the heuristic's first algorithm untimed;
 * any value but 0 or 1 is an error. With LLMC_VERBOSE=1 each plan prints one line on stderr: the algorithm
 * chosen and the candidates' times. gemm_tunings() lists every plan's decision (the profile's
 * gemm_algorithms). D must not overlap A, B, the bias or aux (cuBLASLt's rule).
 */
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cub/cub.cuh>
#include <cublasLt.h>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/bias_backward.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/gelu.cuh"
#include "llmc/profiler/gemm_tuning.h"

namespace llmc {

// cuBLAS and cuBLASLt share the status type: one check for both.
inline void cublas_check(cublasStatus_t s, const char* what, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(strprintf("cuBLAS error %d in %s (%s:%d)", (int)s, what, file, line));
}
#define CUBLAS_CHECK(call) ::llmc::cublas_check((call), #call, __FILE__, __LINE__)

// cuBLASLt objects, destroyed on every path (an error thrown between creation and use included).
template <typename T> using LtPtr = std::unique_ptr<std::remove_pointer_t<T>, cublasStatus_t (*)(T)>;

inline const char* epilogue_name(cublasLtEpilogue_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    default: return "other";
    }
}

/*
 * Everything cuBLASLt needs for one problem shape, built once and reused: the matmul descriptor (transposes,
 * epilogue, aux leading dimension; the bias and aux pointers, set before the heuristic is asked so that it
 * sees their alignments, and again per call), the three matrix layouts, the heuristic's candidates and the
 * algorithm chosen among them, which also keeps results bitwise reproducible from step to step. gelu_apart:
 * the GELU epilogue had no algorithm, so the descriptor's epilogue is the one without it and the GELU kernel
 * runs after the GEMM. tuning: the decision, for the log and the profile.
 */
struct MatmulPlan {
    LtPtr<cublasLtMatmulDesc_t> desc{nullptr, cublasLtMatmulDescDestroy};
    LtPtr<cublasLtMatrixLayout_t> la{nullptr, cublasLtMatrixLayoutDestroy}, lb{nullptr, cublasLtMatrixLayoutDestroy},
        ld{nullptr, cublasLtMatrixLayoutDestroy};
    std::vector<cublasLtMatmulAlgo_t> candidates; // the heuristic's order
    cublasLtMatmulAlgo_t algo{};
    bool gelu_apart = false;
    GemmTuning tuning;
    std::string what; // "m=.. n=.. k=.. ..." for error messages
};

/*
 * One handle and workspace per process, and the plans by problem: m, n, k, transA, transB, epilogue,
 * accumulate, and the alignments of A, B, D, bias and aux. The heuristic picks an algorithm for the pointers it
 * is shown, so layers whose tensors sit at other alignments (odd layers of a model whose C*2 bytes is not a
 * multiple of 256) get their own.
 */
class CublasLt {
public:
    static CublasLt& get() {
        static CublasLt instance;
        return instance;
    }
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    static constexpr size_t WORKSPACE_BYTES = 32u << 20;

    using Key = std::array<int, 12>;
    std::map<Key, std::unique_ptr<MatmulPlan>> plans;
    std::set<std::string> gelu_apart_reported; // shapes whose GELU epilogue fell back, told once each
    // Algorithms to take instead of timing (set_gemm_choices: those a checkpoint recorded), per problem.
    std::map<Key, cublasLtMatmulAlgo_t> preset;

private:
    CublasLt() {
        CUBLAS_CHECK(cublasLtCreate(&handle));
        CUDA_CHECK(cudaMalloc(&workspace, WORKSPACE_BYTES));
    }
};

// The largest power of two up to 256 that divides the address (256 for null): what an algorithm may assume.
inline int pointer_alignment(const void* p) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return a ? (int)std::min<uintptr_t>(256, a & (~a + 1)) : 256;
}

// A failed cuBLASLt call, named with the problem it was for.
inline void lt_check(cublasStatus_t s, const char* call, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(strprintf("cuBLASLt error %d in %s for the matmul %s", (int)s, call, what.c_str()));
}

template <typename T> void lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v,
                                  const std::string& what) {
    lt_check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), "cublasLtMatmulDescSetAttribute", what);
}

inline bool has_gelu_epilogue(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

/*
 * A descriptor for one epilogue with its bias and aux pointers set (null: not used): cuBLASLt's heuristic picks
 * an algorithm for the alignments it sees on the descriptor and assumes the best for a pointer not yet set.
 */
inline LtPtr<cublasLtMatmulDesc_t> make_matmul_desc(bool trans_a, bool trans_b, cublasLtEpilogue_t epilogue, int m,
                                                    const void* bias, const void* aux, const std::string& what) {
    LtPtr<cublasLtMatmulDesc_t> out{nullptr, cublasLtMatmulDescDestroy};
    cublasLtMatmulDesc_t desc = nullptr;
    lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", what);
    out.reset(desc);
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, ta, what);
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, tb, what);
    lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, what);
    if (has_gelu_epilogue(epilogue)) lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)m, what);
    if (bias) lt_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, what);
    if (aux) lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, what);
    return out;
}

constexpr int GEMM_AUTOTUNE_CANDIDATES = 8; // heuristic results asked for and timed
constexpr int GEMM_AUTOTUNE_WARMUP = 1;      // untimed calls per candidate
constexpr int GEMM_AUTOTUNE_CALLS = 3;       // timed calls per candidate

// LLMC_GEMM_AUTOTUNE, read when a plan is built: unset, empty or 1 times the candidates, 0 keeps the first.
inline bool gemm_autotune_enabled() {
    const char* v = getenv("LLMC_GEMM_AUTOTUNE");
    if (!v || !*v || !strcmp(v, "1")) return true;
    if (!strcmp(v, "0")) return false;
    throw Error(strprintf("LLMC_GEMM_AUTOTUNE=%s: expected 0 (cuBLASLt's first heuristic algorithm) or 1 (the "
                          "fastest of its first %d, timed)", v, GEMM_AUTOTUNE_CANDIDATES));
}

// LLMC_VERBOSE=1: plan-time decisions (the algorithm chosen per matmul shape) on stderr.
inline bool llmc_verbose() {
    const char* v = getenv("LLMC_VERBOSE");
    return v && !strcmp(v, "1");
}

// The heuristic's algorithms (at most `max`, in its order) for the plan's layouts, this descriptor and the
// operand alignments (A, B, C = D); empty when it offers none.
inline std::vector<cublasLtMatmulAlgo_t> find_matmul_algos(MatmulPlan& plan, cublasLtMatmulDesc_t desc,
                                                           const uint32_t (&align)[3], int max) {
    LtPtr<cublasLtMatmulPreference_t> pref{nullptr, cublasLtMatmulPreferenceDestroy};
    cublasLtMatmulPreference_t p = nullptr;
    lt_check(cublasLtMatmulPreferenceCreate(&p), "cublasLtMatmulPreferenceCreate", plan.what);
    pref.reset(p);
    auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v) {
        lt_check(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), "cublasLtMatmulPreferenceSetAttribute",
                 plan.what);
    };
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, CublasLt::WORKSPACE_BYTES);
    // The preferences default to 256-byte operands; state the real alignments (C is D here).
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]);
    std::vector<cublasLtMatmulHeuristicResult_t> results(max);
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(CublasLt::get().handle, desc, plan.la.get(), plan.lb.get(),
                                                            plan.ld.get(), plan.ld.get(), p, max, results.data(), &found);
    std::vector<cublasLtMatmulAlgo_t> algos;
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) return algos; // what the heuristic answers for a problem it cannot do
    lt_check(s, "cublasLtMatmulAlgoGetHeuristic", plan.what);
    for (int i = 0; i < std::min(found, max); i++)
        if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
    return algos;
}

/*
 * Builds the plan for one problem: layouts, descriptor with the epilogue's pointers, and the heuristic's
 * candidates for these alignments (up to GEMM_AUTOTUNE_CANDIDATES; the first only when `autotune` is off). A
 * GELU epilogue the heuristic has no algorithm for is left to the GELU kernel (gelu_apart): the GEMM then runs
 * with BIAS or no epilogue, the forward's writing the pre-activation into aux, and stderr gets one line, once
 * per shape. The algorithm is chosen afterwards (choose_matmul_algo), with the call's operands.
 */
inline std::unique_ptr<MatmulPlan> make_matmul_plan(int m, int n, int k, bool trans_a, bool trans_b, bool accumulate,
                                                    cublasLtEpilogue_t epilogue, const void* bias, const void* aux,
                                                    const uint32_t (&align)[3], bool autotune) {
    auto plan = std::make_unique<MatmulPlan>();
    plan->what = strprintf("m=%d n=%d k=%d transA=%d transB=%d epilogue %s", m, n, k, (int)trans_a, (int)trans_b,
                           epilogue_name(epilogue));
    const std::string& what = plan->what;
    GemmTuning& t = plan->tuning;
    t.m = m, t.n = n, t.k = k, t.trans_a = trans_a, t.trans_b = trans_b, t.accumulate = accumulate;
    t.epilogue = epilogue_name(epilogue);
    for (int i = 0; i < 3; i++) t.align[i] = (int)align[i];
    t.align[3] = pointer_alignment(bias), t.align[4] = pointer_alignment(aux);
    auto layout = [&](LtPtr<cublasLtMatrixLayout_t>& l, uint64_t rows, uint64_t cols) {
        cublasLtMatrixLayout_t h = nullptr;
        lt_check(cublasLtMatrixLayoutCreate(&h, CUDA_R_16BF, rows, cols, (int64_t)rows), "cublasLtMatrixLayoutCreate",
                 what);
        l.reset(h);
    };
    layout(plan->la, trans_a ? k : m, trans_a ? m : k);
    layout(plan->lb, trans_b ? n : k, trans_b ? k : n);
    layout(plan->ld, m, n);

    const int max = autotune ? GEMM_AUTOTUNE_CANDIDATES : 1;
    plan->desc = make_matmul_desc(trans_a, trans_b, epilogue, m, bias, aux, what);
    plan->candidates = find_matmul_algos(*plan, plan->desc.get(), align, max);
    if (!plan->candidates.empty()) return plan;
    if (!has_gelu_epilogue(epilogue)) throw Error("cuBLASLt has no algorithm for the matmul " + what);
    // Without the GELU: the forward's GEMM writes the pre-activation into aux, so aux is its C and D.
    const cublasLtEpilogue_t plain =
        epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const bool forward = epilogue != CUBLASLT_EPILOGUE_DGELU;
    const uint32_t align_apart[3] = {align[0], align[1], forward ? (uint32_t)pointer_alignment(aux) : align[2]};
    plan->desc = make_matmul_desc(trans_a, trans_b, plain, m, bias, nullptr, what);
    plan->candidates = find_matmul_algos(*plan, plan->desc.get(), align_apart, max);
    if (plan->candidates.empty())
        throw Error("cuBLASLt has no algorithm for the matmul " + what + ", nor without its GELU");
    plan->gelu_apart = true;
    t.gelu_kernel = true;
    if (CublasLt::get().gelu_apart_reported.insert(what).second)
        fprintf(stderr, "matmul: cuBLASLt has no algorithm for the %s epilogue of the matmul %s; using %s and the "
                        "GELU kernel for this shape\n",
                epilogue_name(epilogue), what.c_str(), epilogue_name(plain));
    return plan;
}

// What cuBLASLt says of an algorithm (-1 for an attribute it does not report).
inline GemmCandidate describe_matmul_algo(const cublasLtMatmulAlgo_t& algo, int index) {
    GemmCandidate c;
    c.index = index;
    auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
        int32_t v = -1;
        size_t written = 0;
        return cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written) == CUBLAS_STATUS_SUCCESS
                   ? (int)v
                   : -1;
    };
    c.algo_id = get(CUBLASLT_ALGO_CONFIG_ID);
    c.tile_id = get(CUBLASLT_ALGO_CONFIG_TILE_ID);
    c.splitk = get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    c.stages_id = get(CUBLASLT_ALGO_CONFIG_STAGES_ID);
    return c;
}

/*
 * Microseconds per call of each candidate, timed with CUDA events on `stream` as the module contract says:
 * on `out` itself when the call overwrites it (beta 0), on a scratch D when it accumulates.
 */
inline std::vector<double> time_matmul_candidates(MatmulPlan& plan, const floatX* a, const floatX* b, floatX* out,
                                                  bool accumulate, cudaStream_t stream) {
    const size_t out_bytes = (size_t)plan.tuning.m * plan.tuning.n * sizeof(floatX);
    floatX* scratch = nullptr;
    if (accumulate) {
        const cudaError_t e = cudaMalloc(&scratch, out_bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw Error(strprintf("matmul autotune: no device memory for a %.1f MiB scratch output (%s) for the matmul "
                                  "%s; LLMC_GEMM_AUTOTUNE=0 runs without it",
                                  out_bytes / 1048576.0, cudaGetErrorString(e), plan.what.c_str()));
        }
    }
    struct Owned { // freed on every path
        floatX* scratch = nullptr;
        cudaEvent_t start = nullptr, stop = nullptr;
        ~Owned() {
            if (start) cudaEventDestroy(start);
            if (stop) cudaEventDestroy(stop);
            if (scratch) cudaFree(scratch);
        }
    } own{scratch};
    floatX* d = accumulate ? scratch : out;
    if (accumulate) CUDA_CHECK(cudaMemsetAsync(d, 0, out_bytes, stream));
    CUDA_CHECK(cudaEventCreate(&own.start));
    CUDA_CHECK(cudaEventCreate(&own.stop));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CublasLt& lt = CublasLt::get();
    auto call = [&](const cublasLtMatmulAlgo_t& algo) {
        lt_check(cublasLtMatmul(lt.handle, plan.desc.get(), &alpha, a, plan.la.get(), b, plan.lb.get(), &beta, d,
                                plan.ld.get(), d, plan.ld.get(), &algo, lt.workspace, CublasLt::WORKSPACE_BYTES, stream),
                 "cublasLtMatmul (autotune)", plan.what);
    };
    std::vector<double> us;
    for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
        for (int i = 0; i < GEMM_AUTOTUNE_WARMUP; i++) call(algo);
        CUDA_CHECK(cudaEventRecord(own.start, stream));
        for (int i = 0; i < GEMM_AUTOTUNE_CALLS; i++) call(algo);
        CUDA_CHECK(cudaEventRecord(own.stop, stream));
        CUDA_CHECK(cudaEventSynchronize(own.stop));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, own.start, own.stop));
        us.push_back(1e3 * ms / GEMM_AUTOTUNE_CALLS);
    }
    return us;
}

// "id 21, tile 15, split-k 1, stages 8" (the attributes cuBLASLt reported).
inline std::string gemm_candidate_text(const GemmCandidate& c) {
    return strprintf("id %d, tile %d, split-k %d, stages %d", c.algo_id, c.tile_id, c.splitk, c.stages_id);
}

// The candidate that is `algo` byte for byte, or -1.
inline int find_candidate(const MatmulPlan& plan, const cublasLtMatmulAlgo_t& algo) {
    for (size_t i = 0; i < plan.candidates.size(); i++)
        if (!memcmp(&plan.candidates[i], &algo, sizeof algo)) return (int)i;
    return -1;
}

/*
 * Picks the plan's algorithm, once: the preset one when there is a preset (set_gemm_choices) that the heuristic
 * offers among its candidates; else with `autotune` and more than one candidate the fastest by
 * time_matmul_candidates (the earlier on a tie), else the heuristic's first. Records the decision in
 * plan.tuning and, with LLMC_VERBOSE=1, prints it.
 */
inline void choose_matmul_algo(MatmulPlan& plan, const cublasLtMatmulAlgo_t* preset, bool autotune, const floatX* a,
                               const floatX* b, floatX* out, bool accumulate, cudaStream_t stream) {
    GemmTuning& t = plan.tuning;
    for (size_t i = 0; i < plan.candidates.size(); i++) t.candidates.push_back(describe_matmul_algo(plan.candidates[i], (int)i));
    const int restored = preset ? find_candidate(plan, *preset) : -1;
    if (preset && restored < 0)
        fprintf(stderr, "matmul: %s: the algorithm recorded with the checkpoint is not offered by this cuBLASLt; "
                        "choosing again (the run may differ in its last bits from the uninterrupted one)\n",
                plan.what.c_str());
    t.restored = restored >= 0;
    t.autotuned = !t.restored && autotune && plan.candidates.size() > 1;
    int best = t.restored ? restored : 0;
    if (t.autotuned) {
        const std::vector<double> us = time_matmul_candidates(plan, a, b, out, accumulate, stream);
        for (size_t i = 0; i < us.size(); i++) {
            t.candidates[i].us = us[i];
            if (us[i] < us[best]) best = (int)i;
        }
    }
    t.chosen = best;
    plan.algo = plan.candidates[best];
    if (!llmc_verbose()) return;
    const int n = (int)t.candidates.size();
    std::string line = strprintf("matmul: %s: cuBLASLt algorithm %d of %d (%s)", plan.what.c_str(), best + 1, n,
                                 gemm_candidate_text(t.candidates[best]).c_str());
    if (t.autotuned) {
        line += strprintf(" at %.1f us per call, the heuristic's first at %.1f us; all (us):", t.candidates[best].us,
                          t.candidates[0].us);
        for (const GemmCandidate& c : t.candidates) line += strprintf(" %.1f", c.us);
    } else if (t.restored) {
        line += ", the one recorded with the checkpoint";
    } else {
        line += autotune ? ", the only one offered" : ", the heuristic's first (LLMC_GEMM_AUTOTUNE=0)";
    }
    fprintf(stderr, "%s\n", line.c_str());
}

// Every plan's decision, in the plan cache's order (by problem), for the profile.
inline std::vector<GemmTuning> gemm_tunings() {
    std::vector<GemmTuning> out;
    for (const auto& [key, plan] : CublasLt::get().plans) out.push_back(plan->tuning);
    return out;
}

/*
 * The algorithm of every plan as text, one line per plan: its problem key (12 integers: m n k transA transB
 * epilogue accumulate and the alignments of A, B, D, bias, aux) and the chosen cublasLtMatmulAlgo_t's 64 bytes as
 * 8 hex words (the structure may be stored and restored for the same cuBLASLt version). A checkpoint keeps it
 * (llmc/train/loop.cpp), so that a resumed run continues with the algorithms the interrupted one timed.
 */
inline std::string gemm_choices_text() {
    std::string out;
    for (const auto& [key, plan] : CublasLt::get().plans) {
        for (int v : key) out += strprintf("%d ", v);
        for (int w = 0; w < 8; w++) out += strprintf("%016llx%s", (unsigned long long)plan->algo.data[w], w < 7 ? " " : "\n");
    }
    return out;
}

/*
 * Makes the algorithms of gemm_choices_text() the ones the matching problems use: plans built from now on take
 * them instead of timing, and a plan already built switches to its recorded algorithm when it is among its
 * candidates. Throws Error on text that is not gemm_choices_text()'s (`source`: where it came from).
 */
inline void set_gemm_choices(const std::string& text, const std::string& source) {
    CublasLt& lt = CublasLt::get();
    std::map<CublasLt::Key, cublasLtMatmulAlgo_t> preset;
    size_t line_no = 0, at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(at, end - at);
        at = end + 1;
        line_no++;
        CublasLt::Key key{};
        cublasLtMatmulAlgo_t algo{};
        const char* p = line.c_str();
        bool ok = true;
        for (int& v : key) {
            char* next = nullptr;
            const long x = strtol(p, &next, 10);
            ok = ok && next != p && x >= INT32_MIN && x <= INT32_MAX;
            v = (int)x, p = next;
        }
        for (uint64_t& w : algo.data) {
            char* next = nullptr;
            while (*p == ' ') p++;
            w = strtoull(p, &next, 16);
            ok = ok && next == p + 16;
            p = next;
        }
        if (!ok || *p != '\0')
            throw Error(strprintf("%s: line %zu is not a matmul problem and its cuBLASLt algorithm", source.c_str(), line_no));
        preset[key] = algo;
    }
    lt.preset = std::move(preset);
    for (auto& [key, plan] : lt.plans) {
        const auto it = lt.preset.find(key);
        if (it == lt.preset.end()) continue;
        const int i = find_candidate(*plan, it->second);
        if (i < 0) continue;
        plan->algo = plan->candidates[i];
        plan->tuning.chosen = i;
        plan->tuning.restored = true;
    }
}

/*
 * D (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * D, column-major, with an optional epilogue
 * (bias of length m; GELU with its pre-activation aux (m, n) written or read).
 */
inline void matmul_cublaslt(floatX* d, const floatX* a, const floatX* b, const floatX* bias, int m, int n, int k,
                            bool trans_a, bool trans_b, bool accumulate, cublasLtEpilogue_t epilogue,
                            floatX* aux, cudaStream_t stream) {
    CublasLt& lt = CublasLt::get();
    const uint32_t align[3] = {(uint32_t)pointer_alignment(a), (uint32_t)pointer_alignment(b),
                               (uint32_t)pointer_alignment(d)};
    const CublasLt::Key key{m, n, k, trans_a, trans_b, (int)epilogue, accumulate, (int)align[0], (int)align[1],
                            (int)align[2], pointer_alignment(bias), pointer_alignment(aux)};
    auto it = lt.plans.find(key);
    const bool new_plan = it == lt.plans.end();
    const auto preset = lt.preset.find(key);
    const cublasLtMatmulAlgo_t* recorded = preset == lt.preset.end() ? nullptr : &preset->second;
    const bool autotune = new_plan && gemm_autotune_enabled();
    if (new_plan)
        it = lt.plans.emplace(key, make_matmul_plan(m, n, k, trans_a, trans_b, accumulate, epilogue, bias, aux, align,
                                                    autotune || recorded))
                 .first;
    MatmulPlan& plan = *it->second;
    // Per-call operands of the epilogue: the descriptor is read when cublasLtMatmul is called.
    if (bias) lt_set(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, plan.what);
    if (aux && !plan.gelu_apart) lt_set(plan.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, plan.what);
    const bool gelu_forward_apart = plan.gelu_apart && epilogue != CUBLASLT_EPILOGUE_DGELU;
    floatX* out = gelu_forward_apart ? aux : d;
    if (new_plan) {
        try {
            choose_matmul_algo(plan, recorded, autotune, a, b, out, accumulate, stream);
        } catch (...) {
            lt.plans.erase(it); // no half-built plan stays: the next call builds it again
            throw;
        }
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    lt_check(cublasLtMatmul(lt.handle, plan.desc.get(), &alpha, a, plan.la.get(), b, plan.lb.get(), &beta, out,
                            plan.ld.get(), out, plan.ld.get(), &plan.algo, lt.workspace, CublasLt::WORKSPACE_BYTES,
                            stream),
             "cublasLtMatmul", plan.what);
    launch_check("cublasLtMatmul", __FILE__, __LINE__);
    if (gelu_forward_apart) gelu_forward(d, aux, (size_t)m * n, stream);
    else if (plan.gelu_apart) gelu_backward_inplace(d, aux, (size_t)m * n, stream);
}

/*
 * out (BT, OC) = inp (BT, C) @ weight (OC, C)^T + bias (OC). With pre_gelu set, the GELU is fused:
 * pre_gelu (BT, OC) keeps the pre-activation for the backward pass and out gets gelu(pre_gelu).
 */
inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int BT, int C,
                           int OC, floatX* pre_gelu, cudaStream_t stream) {
    cublasLtEpilogue_t epi = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                      : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    matmul_cublaslt(out, weight, inp, bias, OC, BT, C, true, false, false, epi, pre_gelu, stream);
}

/*
 * Backward of matmul_forward. dinp (BT, C) is written; dweight (OC, C) and dbias (OC) accumulate (+=).
 * With pre_gelu (the forward's pre-activation of `inp`, (BT, C)), dinp is also multiplied by gelu'(pre_gelu):
 * the GELU backward of the layer below, fused as cuBLASLt's DGELU epilogue.
 */
inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                            const floatX* inp, const floatX* weight, int BT, int C, int OC, floatX* pre_gelu,
                            cudaStream_t stream) {
    // dinp^T (C, BT) = weight^T (C, OC) * dout^T (OC, BT)
    matmul_cublaslt(dinp, weight, dout, nullptr, C, BT, OC, false, false, false,
                    pre_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, pre_gelu, stream);
    // dweight^T (C, OC) += inp^T (C, BT) * dout (BT, OC)
    matmul_cublaslt(dweight, inp, dout, nullptr, C, OC, BT, false, true, true, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                    stream);
    if (dbias) bias_backward(dbias, scratch, dout, BT, OC, stream);
}

} // namespace llmc
