/*
 * Emulated cuBLASLt (declarations in test/emu/include/cublasLt.h), by the library's documented semantics:
 *   D = epilogue(alpha * op(A) op(B) + beta * C), column-major, A/B/C/D bf16, fp32 accumulation and scale;
 *   BIAS adds bias[row] (length m, type of D); GELU_AUX(_BIAS) stores the pre-activation (bias included) to aux
 *   (m x n, leading dimension aux_ld) and writes gelu(x) to D; DGELU multiplies by gelu'(aux). GELU is taken to
 *   be the tanh form, which the library does not document.
 * Every attribute is checked when set; values the project does not use are refused with NOT_SUPPORTED, so a
 * change in llmc/matmul.cuh that reaches for another feature fails here instead of being silently ignored.
 * The heuristic's algorithm remembers the operand alignments it was chosen for (the preferences, 256 bytes by
 * default; for the bias and aux pointers, those set on the descriptor when it was asked, 256 for one not yet
 * set) and a matmul with less aligned pointers fails, as an algorithm that assumes them would.
 * emu_cublaslt_refuse_gelu_epilogues(true) makes the heuristic offer no algorithm for GELU_AUX, GELU_AUX_BIAS and
 * DGELU (NOT_SUPPORTED), as a library version or device without them would.
 * The heuristic offers several algorithms (three by default, at most as many as asked for), with distinct ids,
 * that all compute the same result; a call with one adds that algorithm's emulated time to the event clock
 * (emu_cublaslt_set_algorithm_times), so code that times them with CUDA events sees which is "fastest".
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cublasLt.h"
#include "cuda_bf16.h"

struct cublasLtContext {
    int magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque_t {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    void* aux = nullptr;
    int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
    size_t max_workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D
};

namespace {

int g_live = 0; // descriptors, layouts and preferences alive
bool g_refuse_gelu = false;
const std::vector<double> kDefaultAlgorithmMs = {1000, 0, 2000};
std::vector<double> g_algorithm_ms = kDefaultAlgorithmMs; // emulated ms per call, by the heuristic's index
constexpr uint64_t kAlgoTag = 0x656d75;                     // data[0]'s low half; the high half is the index

// Every descriptor, layout and preference is made and freed through these, so g_live counts them all.
template <typename T> cublasStatus_t created(T** out, T* obj) {
    *out = obj;
    g_live++;
    return CUBLAS_STATUS_SUCCESS;
}
template <typename T> cublasStatus_t destroyed(T* obj) {
    g_live -= obj != nullptr;
    delete obj;
    return CUBLAS_STATUS_SUCCESS;
}

constexpr float kGeluScale = 0.7978845608028654f, kGeluCube = 0.044715f;
// a·b over k contiguous floats: 16 running sums (vector lanes) combined in a fixed order, then the tail.
float dot(const float* a, const float* b, uint64_t k) {
    float acc[16] = {};
    uint64_t p = 0;
    for (; p + 16 <= k; p += 16)
        for (int q = 0; q < 16; q++) acc[q] = std::fma(a[p + q], b[p + q], acc[q]);
    for (int w = 8; w > 0; w /= 2)
        for (int q = 0; q < w; q++) acc[q] += acc[q + w];
    float s = acc[0];
    for (; p < k; p++) s = std::fma(a[p], b[p], s);
    return s;
}
float gelu(float x) { return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCube * x * x * x))); }
float dgelu(float x) {
    const float th = std::tanh(kGeluScale * (x + kGeluCube * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

template <typename T> bool read_attr(T& out, const void* buf, size_t size) {
    if (size != sizeof(T) || !buf) return false;
    std::memcpy(&out, buf, sizeof(T));
    return true;
}

uint32_t alignment(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint32_t r = 1;
    while (r < 256 && a % (r * 2) == 0) r *= 2;
    return r;
}

bool has_bias(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool has_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

// The checks a heuristic query and a matmul share: types and shapes. (The epilogue's pointers are the call's.)
cublasStatus_t check_problem(const cublasLtMatmulDescOpaque_t* d, const cublasLtMatrixLayoutOpaque_t* a,
                             const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                             const cublasLtMatrixLayoutOpaque_t* dl, uint64_t& m, uint64_t& n, uint64_t& k) {
    if (!d || !a || !b || !c || !dl) return CUBLAS_STATUS_INVALID_VALUE;
    for (auto* l : {a, b, c, dl})
        if (l->type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    m = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
    k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols;
    n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (kb != k || c->rows != m || c->cols != n || dl->rows != m || dl->cols != n) {
        fprintf(stderr,
                "emu cuBLASLt: inconsistent shapes: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu\n",
                (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n,
                (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)dl->rows,
                (unsigned long long)dl->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

size_t cublasLtGetVersion() { return 130000; }
int emu_cublaslt_live_objects() { return g_live; }
void emu_cublaslt_refuse_gelu_epilogues(bool refuse) { g_refuse_gelu = refuse; }
void emu_cublaslt_set_algorithm_times(const std::vector<double>& ms) {
    g_algorithm_ms = ms.empty() ? kDefaultAlgorithmMs : ms;
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = new cublasLtContext;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    return created(d, new cublasLtMatmulDescOpaque_t);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return destroyed(d); }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    bool ok = false;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        cublasOperation_t op;
        if (!read_attr(op, buf, size)) return CUBLAS_STATUS_INVALID_VALUE;
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = op;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        cublasLtEpilogue_t e;
        if (!read_attr(e, buf, size)) return CUBLAS_STATUS_INVALID_VALUE;
        if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX &&
            e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && e != CUBLASLT_EPILOGUE_DGELU)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        d->epilogue = e;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        ok = read_attr(d->bias, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        ok = read_attr(d->aux, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        ok = read_attr(d->aux_ld, buf, size);
        break;
    default:
        fprintf(stderr, "emu cuBLASLt: matmul descriptor attribute %d is not implemented\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (ld < (int64_t)rows || ld <= 0) return CUBLAS_STATUS_INVALID_VALUE; // column-major: ld >= rows
    return created(l, new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld});
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { return destroyed(l); }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    return created(p, new cublasLtMatmulPreferenceOpaque_t);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { return destroyed(p); }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return read_attr(p->max_workspace, buf, size) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        uint32_t v;
        if (!read_attr(v, buf, size) || v == 0 || (v & (v - 1))) return CUBLAS_STATUS_INVALID_VALUE;
        p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    default:
        fprintf(stderr, "emu cuBLASLt: preference attribute %d is not implemented\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

// An algorithm: data[0] tags it (low half) and holds its index in the heuristic's list (high half), data[1..4] are
// the alignments (A, B, C, D) it may assume, data[5] its workspace, data[6..7] the alignments of the bias and aux
// pointers (those on the descriptor now; 256 where none is set).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
    if (!h || !pref || requested < 1 || !results || !found) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    if (cublasStatus_t s = check_problem(d, a, b, c, dl, m, n, k)) return s;
    // Operands must be at least element-aligned (2 bytes) for any algorithm.
    for (uint32_t al : pref->align)
        if (al < 2) return CUBLAS_STATUS_NOT_SUPPORTED;
    *found = 0;
    if (g_refuse_gelu && has_aux(d->epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const int offered = std::min<int>(requested, (int)g_algorithm_ms.size());
    for (int i = 0; i < offered; i++) {
        cublasLtMatmulHeuristicResult_t& r = results[i];
        std::memset(&r, 0, sizeof r);
        r.algo.data[0] = kAlgoTag | (uint64_t)i << 32;
        for (int j = 0; j < 4; j++) r.algo.data[1 + j] = pref->align[j];
        r.workspaceSize = std::min<size_t>(pref->max_workspace, 1 << 20);
        r.algo.data[5] = r.workspaceSize;
        r.algo.data[6] = has_bias(d->epilogue) ? alignment(d->bias) : 256;
        r.algo.data[7] = has_aux(d->epilogue) ? alignment(d->aux) : 256;
        r.state = CUBLAS_STATUS_SUCCESS;
        r.wavesCount = 1.0f;
    }
    *found = offered;
    return CUBLAS_STATUS_SUCCESS;
}

// What an algorithm says of itself: its id (distinct per index), tile, split-K and stages (descriptive only here).
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t size,
                                                    size_t* written) {
    if (!algo || (algo->data[0] & 0xffffffffu) != kAlgoTag) return CUBLAS_STATUS_INVALID_VALUE;
    const int index = (int)(algo->data[0] >> 32);
    uint32_t v;
    switch (attr) {
    case CUBLASLT_ALGO_CONFIG_ID: v = 21 + 2 * index; break;
    case CUBLASLT_ALGO_CONFIG_TILE_ID: v = 15 + index; break;
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: v = 1 + index % 2; break;
    case CUBLASLT_ALGO_CONFIG_STAGES_ID: v = 8 + index; break;
    default:
        fprintf(stderr, "emu cuBLASLt: algorithm attribute %d is not implemented\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (size == 0) {
        if (!written) return CUBLAS_STATUS_INVALID_VALUE;
        *written = sizeof v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size != sizeof v) return CUBLAS_STATUS_INVALID_VALUE; // every one of these is 4 bytes
    std::memcpy(buf, &v, sizeof v);
    if (written) *written = sizeof v;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    if (!h || !alpha_p || !beta_p || !algo || (algo->data[0] & 0xffffffffu) != kAlgoTag)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    if (cublasStatus_t s = check_problem(d, la, lb, lc, ld, m, n, k)) return s;
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (alignment(ptrs[i]) < algo->data[1 + i]) {
            fprintf(stderr, "emu cuBLASLt: operand %c is %u-byte aligned, the algorithm was chosen for %u\n", "ABCD"[i],
                    alignment(ptrs[i]), (unsigned)algo -> data[1 + i]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    if (workspace_bytes < algo->data[5] || (algo->data[5] && !emu::is_device_range(workspace, algo->data[5])))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
    // Device operands must lie inside device allocations, whole.
    auto span = [](const cublasLtMatrixLayoutOpaque_t* l) { return ((l->cols - 1) * l->ld + l->rows) * 2; };
    if (!emu::is_device_range(A, span(la)) || !emu::is_device_range(B, span(lb)) ||
        !emu::is_device_range(D, span(ld)) || (beta != 0.0f && !emu::is_device_range(C, span(lc))))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (has_aux(d->epilogue) && (d->aux == nullptr || d->aux_ld < (int64_t)m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (has_bias(d->epilogue) && d->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    const void* epilogue_ptrs[2] = {has_bias(d->epilogue) ? d->bias : nullptr, has_aux(d->epilogue) ? d->aux : nullptr};
    for (int i = 0; i < 2; i++)
        if (alignment(epilogue_ptrs[i]) < algo->data[6 + i]) {
            fprintf(stderr, "emu cuBLASLt: the %s pointer is %u-byte aligned, the algorithm was chosen for %u\n",
                    i ? "aux" : "bias", alignment(epilogue_ptrs[i]), (unsigned)algo->data[6 + i]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    const auto desc = *d; // descriptors and the algorithm are read at the call; the caller may destroy them
    const cublasLtMatmulAlgo_t alg = *algo;
    const size_t index = (size_t)(alg.data[0] >> 32);
    const double emulated_ms = index < g_algorithm_ms.size() ? g_algorithm_ms[index] : 0.0;
    const auto a = *la, b = *lb, c = *lc, dd = *ld;
    if (has_aux(desc.epilogue) && !emu::is_device_range(desc.aux, ((n - 1) * desc.aux_ld + m) * 2))
        return CUBLAS_STATUS_INVALID_VALUE;
    emu::enqueue_host_op(stream, "cublasLtMatmul", [=] {
        using bf = __nv_bfloat16;
        const bf* pa = static_cast<const bf*>(A);
        const bf* pb = static_cast<const bf*>(B);
        const bf* pc = static_cast<const bf*>(C);
        bf* pd = static_cast<bf*>(D);
        bf* aux = static_cast<bf*>(desc.aux);
        const bf* bias = static_cast<const bf*>(desc.bias);
        // op(A)(i, p) and op(B)(p, j), column-major storage.
        auto opa = [&](uint64_t i, uint64_t p) { return desc.ta == CUBLAS_OP_N ? pa[p * a.ld + i] : pa[i * a.ld + p]; };
        auto opb = [&](uint64_t p, uint64_t j) { return desc.tb == CUBLAS_OP_N ? pb[j * b.ld + p] : pb[p * b.ld + j]; };
        // op(A)'s rows and op(B)'s columns as contiguous fp32, then each output a dot product in a fixed order
        // (deterministic whatever the thread count), over blocks of op(A)'s rows that stay in cache.
        std::vector<float> af(m * k), bt(n * k), out(m * n);
#pragma omp parallel for schedule(static)
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t p = 0; p < k; p++) af[i * k + p] = __bfloat162float(opa(i, p));
#pragma omp parallel for schedule(static)
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t p = 0; p < k; p++) bt[j * k + p] = __bfloat162float(opb(p, j));
        constexpr uint64_t kRows = 32;
#pragma omp parallel for schedule(static)
        for (uint64_t i0 = 0; i0 < m; i0 += kRows)
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = i0; i < std::min(m, i0 + kRows); i++) {
                    float x = alpha * dot(&af[i * k], &bt[j * k], k);
                    if (beta != 0.0f) x += beta * __bfloat162float(pc[j * c.ld + i]);
                    if (has_bias(desc.epilogue)) x += __bfloat162float(bias[i]);
                    out[j * m + i] = x;
                }
        // The scratch an algorithm may use is not preserved.
        if (alg.data[5]) std::memset(workspace, 0xA5, alg.data[5]);
        emu::advance_clock(emulated_ms);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float x = out[j * m + i];
                switch (desc.epilogue) {
                case CUBLASLT_EPILOGUE_GELU_AUX:
                case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
                    aux[j * desc.aux_ld + i] = __float2bfloat16(x);
                    x = gelu(x);
                    break;
                case CUBLASLT_EPILOGUE_DGELU:
                    x *= dgelu(__bfloat162float(aux[j * desc.aux_ld + i]));
                    break;
                default:
                    break;
                }
                pd[j * dd.ld + i] = __float2bfloat16(x);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}
