/*
 * Matmuls through cuBLASLt: bf16 operands, fp32 accumulate, bias and GELU fused as epilogues.
 *
 * All tensors are row-major. A row-major (R, K) matrix is a column-major (K, R) one, so out (BT, OC) =
 * inp (BT, C) @ weight^T with weight (OC, C) is, in cuBLAS's column-major terms, out^T = weight^T' * inp^T:
 * m = OC, n = BT, k = C, A = weight transposed, B = inp as is.
 *
 * Bias gradients use our own two-pass kernel rather than the BGRADB epilogue: the epilogue overwrites, and
 * gradient accumulation needs +=, deterministically.
 */
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cub/cub.cuh>
#include <cublasLt.h>
#include <map>

#include "llmc/cuda_common.cuh"

namespace llmc {

// cuBLAS and cuBLASLt share the status type: one check for both.
inline void cublas_check(cublasStatus_t s, const char* what, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(strprintf("cuBLAS error %d in %s (%s:%d)", (int)s, what, file, line));
}
#define CUBLAS_CHECK(call) ::llmc::cublas_check((call), #call, __FILE__, __LINE__)

/*
 * One handle and workspace per process, and a cache of the heuristic's algorithm per problem shape: the
 * heuristic query costs host time on every call otherwise, and a fixed algorithm keeps results bitwise
 * reproducible from step to step.
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

    // m, n, k, transA, transB, epilogue, accumulate, and the alignments of A, B, D, bias and aux: the
    // heuristic picks an algorithm for the pointers it is shown, so layers whose tensors sit at other
    // alignments (odd layers of a model whose C*2 bytes is not a multiple of 256) get their own.
    using Key = std::array<int, 12>;
    std::map<Key, cublasLtMatmulAlgo_t> algos;

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

/*
 * D (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * D, column-major, with an optional epilogue
 * (bias of length m; GELU with its pre-activation aux (m, n) written or read).
 */
inline void matmul_cublaslt(floatX* d, const floatX* a, const floatX* b, const floatX* bias, int m, int n, int k,
                            bool trans_a, bool trans_b, bool accumulate, cublasLtEpilogue_t epilogue,
                            floatX* aux, cudaStream_t stream) {
    CublasLt& lt = CublasLt::get();
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) {
        int64_t ld_aux = m;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    }
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));

    const uint32_t align_a = pointer_alignment(a), align_b = pointer_alignment(b), align_d = pointer_alignment(d);
    CublasLt::Key key{m, n, k, trans_a, trans_b, (int)epilogue, accumulate, (int)align_a, (int)align_b, (int)align_d,
                      pointer_alignment(bias), pointer_alignment(aux)};
    auto it = lt.algos.find(key);
    if (it == lt.algos.end()) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        size_t ws = CublasLt::WORKSPACE_BYTES;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        // The preferences default to 256-byte operands; state the real alignments (C is D here).
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                          sizeof(align_a)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                          sizeof(align_b)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                          sizeof(align_d)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                          sizeof(align_d)));
        cublasLtMatmulHeuristicResult_t result;
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, desc, la, lb, ld, ld, pref, 1, &result, &found));
        cublasLtMatmulPreferenceDestroy(pref);
        if (found == 0)
            throw Error(strprintf("cuBLASLt has no algorithm for m=%d n=%d k=%d epilogue %d", m, n, k, (int)epilogue));
        it = lt.algos.emplace(key, result.algo).first;
    }
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt.handle, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &it->second, lt.workspace,
                                CublasLt::WORKSPACE_BYTES, stream));
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
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

// Pass 1 of the bias gradient: column sums of dout over a fixed slice of rows per block row, fp32 partials.
constexpr int BIAS_ROW_SLICES = 64;
static __global__ void bias_backward_partial_kernel(float* partial, const floatX* dout, int BT, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    int rows_per_slice = ceil_div(BT, BIAS_ROW_SLICES);
    int r0 = blockIdx.y * rows_per_slice, r1 = min(BT, r0 + rows_per_slice);
    float s = 0.0f;
    for (int r = r0; r < r1; r++) s += __bfloat162float(dout[(size_t)r * OC + col]);
    partial[(size_t)blockIdx.y * OC + col] = s;
}
// Pass 2: slices added in order, then once into the bf16 gradient.
static __global__ void bias_backward_final_kernel(floatX* dbias, const float* partial, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < BIAS_ROW_SLICES; i++) s += partial[(size_t)i * OC + col];
    dbias[col] = __float2bfloat16(__bfloat162float(dbias[col]) + s);
}
inline size_t bias_backward_scratch_floats(int OC) { return (size_t)BIAS_ROW_SLICES * OC; }

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
    if (dbias) {
        dim3 grid(ceil_div(OC, 256), BIAS_ROW_SLICES);
        bias_backward_partial_kernel<<<grid, 256, 0, stream>>>(scratch, dout, BT, OC);
        CUDA_LAUNCH_CHECK();
        bias_backward_final_kernel<<<ceil_div(OC, 256), 256, 0, stream>>>(dbias, scratch, OC);
        CUDA_LAUNCH_CHECK();
    }
}

} // namespace llmc
