/*
 * Causal self-attention benchmark, the ladder's rungs on the same inputs in one run:
 *   naive   permute qkv -> q, k, v (B, NH, T, HS); scores = q k^T with cuBLAS into fp32 (B, NH, T, T); causal
 *           softmax kernel -> bf16 probabilities; y = att v with cuBLAS; unpermute (forward only);
 *   wmma    the previous fused kernels (dev/cuda/attention_wmma.cuh: WMMA, S/P staged in shared memory);
 *   mma     llmc::attention_forward / attention_backward (mma.sync, ldmatrix, cp.async; doc/attention.md);
 *   torch   PyTorch's scaled_dot_product_attention (is_causal=True) where python3 imports torch with CUDA
 *           (dev/cuda/attention_torch.py, run on the inputs written to a temporary directory).
 *
 * Every path is first validated against the CPU reference (llmc/cpu/attention.h, double) on a smaller
 * shape with partial tiles, then timed on GPT-2 124M's shape (B=16, T=1024, NH=12, HS=64); at that shape the
 * fused outputs are also checked against the naive one and PyTorch's.
 *
 *   build/dev/cuda/attention [-b B] [-t T]
 *
 * FLOPs are counted for causal attention: forward 4*B*NH*T^2*HS/2 (two matmuls over the lower triangle;
 * the naive path computes the full T x T but is credited the same), backward 2.5x the forward.
 */
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "dev/cuda/attention_wmma.cuh"
#include "dev/cuda/bench_common.cuh"
#include "llmc/attention.cuh"
#include "llmc/cpu/attention.h"

using llmc::floatX;
using namespace devutil;

// ---- naive path ----

// Offset of element idx of a (B, NH, T, HS) tensor in a (B, T, parts, NH, HS) one, within part 0.
__device__ size_t token_major_offset(size_t idx, int T, int NH, int HS, int parts) {
    const int d = (int)(idx % HS);
    size_t r = idx / HS;
    const int t = (int)(r % T);
    r /= T;
    const int h = (int)(r % NH);
    const size_t b = r / NH;
    return (b * T + t) * parts * NH * HS + (size_t)h * HS + d;
}

// qkv (B, T, 3, NH, HS) -> q, k, v each (B, NH, T, HS); one thread per element.
__global__ void permute_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    const size_t C = (size_t)NH * HS, src = token_major_offset(idx, T, NH, HS, 3);
    q[idx] = qkv[src];
    k[idx] = qkv[src + C];
    v[idx] = qkv[src + 2 * C];
}

// y (B, NH, T, HS) -> out (B, T, NH, HS).
__global__ void unpermute_kernel(floatX* out, const floatX* y, int B, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    out[token_major_offset(idx, T, NH, HS, 1)] = y[idx];
}

// One warp per row of scores (BNH*T rows of T, already scaled): att = softmax over t2 <= t, zeros above.
__global__ void causal_softmax_kernel(floatX* att, const float* scores, int BNH, int T) {
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (size_t)BNH * T) return; // whole warp leaves together (row is warp-uniform)
    const int t = (int)(row % T);
    const float* s = scores + row * T;
    floatX* a = att + row * T;
    float m = -INFINITY;
    for (int i = lane; i <= t; i += 32) m = fmaxf(m, s[i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0;
    for (int i = lane; i <= t; i += 32) sum += expf(s[i] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = 1.0f / sum;
    for (int i = lane; i < T; i += 32) a[i] = __float2bfloat16(i <= t ? expf(s[i] - m) * inv : 0.0f);
}

struct Naive {
    int B, T, NH, HS;
    cublasHandle_t handle;
    DeviceBuffer<floatX> q, k, v, y, att; // q, k, v, y (B, NH, T, HS); att (B, NH, T, T)
    DeviceBuffer<float> scores;           // (B, NH, T, T)
    Naive(int B_, int T_, int NH_, int HS_)
        : B(B_), T(T_), NH(NH_), HS(HS_), q((size_t)B * NH * T * HS), k(q.n), v(q.n), y(q.n),
          att((size_t)B * NH * T * T), scores(att.n) {
        CUBLAS_CHECK(cublasCreate(&handle));
    }
    ~Naive() { cublasDestroy(handle); }
    void forward(floatX* out, const floatX* qkv) {
        const size_t n = (size_t)B * NH * T * HS;
        const int block = 256, BNH = B * NH;
        permute_kernel<<<(unsigned)llmc::ceil_div(n, (size_t)block), block>>>(q, k, v, qkv, B, T, NH, HS);
        CUDA_LAUNCH_CHECK();
        // Row-major (T, T) scores = q k^T is column-major scores^T = k_c^T q_c with k_c, q_c the (HS, T)
        // column-major views of k and q.
        const float alpha = 1.0f / sqrtf((float)HS), zero = 0.0f, one = 1.0f;
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &alpha, k, CUDA_R_16BF, HS,
                                                (long long)T * HS, q, CUDA_R_16BF, HS, (long long)T * HS, &zero,
                                                scores, CUDA_R_32F, T, (long long)T * T, BNH, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
        causal_softmax_kernel<<<(unsigned)llmc::ceil_div((size_t)BNH * T * 32, (size_t)block), block>>>(att, scores,
                                                                                                        BNH, T);
        CUDA_LAUNCH_CHECK();
        // Row-major (T, HS) y = att v is column-major y^T = v_c att_c (v_c: (HS, T), att_c = att^T: (T, T)).
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &one, v, CUDA_R_16BF, HS,
                                                (long long)T * HS, att, CUDA_R_16BF, T, (long long)T * T, &zero, y,
                                                CUDA_R_16BF, HS, (long long)T * HS, BNH, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
        unpermute_kernel<<<(unsigned)llmc::ceil_div(n, (size_t)block), block>>>(out, y, B, T, NH, HS);
        CUDA_LAUNCH_CHECK();
    }
};

// ---- inputs and outputs of both paths ----

struct Buffers {
    // qkv, dqkv, dqkv_wmma (B, T, 3C); out, out_wmma, out_naive, dout (B, T, C)
    DeviceBuffer<floatX> qkv, dqkv, dqkv_wmma, out, out_wmma, out_naive, dout;
    DeviceBuffer<float> lse, lse_wmma, scratch; // lse (B, NH, T)
    Buffers(int B, int T, int NH, int HS)
        : qkv((size_t)B * T * 3 * NH * HS), dqkv(qkv.n), dqkv_wmma(qkv.n), out((size_t)B * T * NH * HS),
          out_wmma(out.n), out_naive(out.n), dout(out.n), lse((size_t)B * NH * T), lse_wmma(lse.n),
          scratch(llmc::attention_backward_scratch_floats(B, T, NH)) {}
    void run_mma(int B, int T, int NH, int HS) {
        llmc::attention_forward(out, lse, qkv, B, T, NH, HS, 0);
        llmc::attention_backward(dqkv, scratch, dout, out, lse, qkv, B, T, NH, HS, 0);
    }
    void run_wmma(int B, int T, int NH) {
        wmma_attention::forward(out_wmma, lse_wmma, qkv, B, T, NH, 0);
        wmma_attention::backward(dqkv_wmma, scratch, dout, out_wmma, lse_wmma, qkv, B, T, NH, 0);
    }
    // Returns the bf16-rounded host copies of what was uploaded.
    void fill(std::vector<float>& h_qkv, std::vector<float>& h_dout, uint64_t seed) {
        h_qkv = bf16_round(random_normal(qkv.n, 1.0f, seed));
        h_dout = bf16_round(random_normal(dout.n, 1.0f, seed + 1));
        qkv.upload(to_bf16(h_qkv));
        dout.upload(to_bf16(h_dout));
    }
};

// Validates naive forward, fused forward (out and lse) and fused backward against the CPU reference.
bool validate_small(int B, int T, int NH, int HS) {
    printf("validation on B=%d T=%d NH=%d HS=%d against the CPU reference (double)\n", B, T, NH, HS);
    const int C = NH * HS;
    Buffers buf(B, T, NH, HS);
    std::vector<float> qkv, dout;
    buf.fill(qkv, dout, 1234);
    Naive naive(B, T, NH, HS);
    naive.forward(buf.out_naive, buf.qkv);
    buf.run_wmma(B, T, NH);
    buf.run_mma(B, T, NH, HS);
    CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<double> inp(qkv.begin(), qkv.end()), g(dout.begin(), dout.end());
    std::vector<double> out(buf.out.n), att((size_t)B * NH * T * T), dinp(buf.qkv.n, 0.0);
    llmc::cpu::attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH);
    llmc::cpu::attention_backward(dinp.data(), g.data(), inp.data(), att.data(), B, T, C, NH);
    // lse from the saved probabilities: att[t][0] = exp(s0 - lse), so lse = s0 - log(att[t][0]).
    std::vector<float> lse_ref(buf.lse.n);
    const double scale = 1.0 / std::sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = inp.data() + ((size_t)b * T + t) * 3 * C + h * HS;
                const double* k = inp.data() + (size_t)b * T * 3 * C + C + h * HS;
                double s0 = 0;
                for (int i = 0; i < HS; i++) s0 += q[i] * k[i];
                lse_ref[((size_t)b * NH + h) * T + t] =
                    (float)(s0 * scale - std::log(att[(((size_t)b * NH + h) * T + t) * T]));
            }

    bool ok = true;
    const std::vector<float> out_ref(out.begin(), out.end()), dqkv_ref(dinp.begin(), dinp.end());
    ok &= bench::validate("naive forward out", to_float(buf.out_naive.download()), out_ref, 1e-2);
    ok &= bench::validate("wmma forward out", to_float(buf.out_wmma.download()), out_ref, 1e-2);
    ok &= bench::validate("wmma forward lse", buf.lse_wmma.download(), lse_ref, 1e-3);
    ok &= bench::validate("wmma backward dqkv", to_float(buf.dqkv_wmma.download()), dqkv_ref, 2e-2);
    ok &= bench::validate("mma forward out", to_float(buf.out.download()), out_ref, 1e-2);
    ok &= bench::validate("mma forward lse", buf.lse.download(), lse_ref, 1e-3);
    ok &= bench::validate("mma backward dqkv", to_float(buf.dqkv.download()), dqkv_ref, 2e-2);
    return ok;
}

// dev/cuda/attention_torch.py beside this program's source: the program is build/dev/cuda/attention or
// gpu_bundle/dev/cuda/attention, three levels below the repository.
std::string torch_script(const char* argv0) {
    std::string dir = argv0;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    return dir + "/../../../dev/cuda/attention_torch.py";
}

template <typename T> void write_raw(const std::string& path, const std::vector<T>& v) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), (std::streamsize)(v.size() * sizeof(T)));
    if (!f) throw llmc::Error("cannot write " + path);
}

// PyTorch's SDPA on the same inputs: prints its timing lines and checks its output against ours. Returns false
// only when PyTorch ran and disagrees; an absent PyTorch is reported and skipped.
bool run_torch(const char* argv0, Buffers& buf, int B, int T, int NH, int HS) {
    const std::string script = torch_script(argv0);
    if (access(script.c_str(), R_OK) != 0) {
        printf("torch: skipped (%s not found)\n", script.c_str());
        return true;
    }
    char tmpl[] = "/tmp/attention_bench_XXXXXX";
    if (!mkdtemp(tmpl)) throw llmc::Error("attention: cannot make a temporary directory");
    const std::string dir = tmpl;
    write_raw(dir + "/qkv.bf16", buf.qkv.download());
    write_raw(dir + "/dout.bf16", buf.dout.download());
    const std::string cmd = "python3 '" + script + "' '" + dir + "' " + std::to_string(B) + " " + std::to_string(T) +
                            " " + std::to_string(NH) + " " + std::to_string(HS);
    fflush(stdout);
    const int rc = system(cmd.c_str());
    bool ok = true;
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 0) {
        std::vector<floatX> theirs(buf.out.n);
        std::ifstream f(dir + "/out_torch.bf16", std::ios::binary);
        f.read(reinterpret_cast<char*>(theirs.data()), (std::streamsize)(theirs.size() * sizeof(floatX)));
        ok = f && bench::validate("mma vs torch out", to_float(buf.out.download()), to_float(theirs), 1e-2);
    } else {
        printf("torch: skipped (%s exited with %d)\n", script.c_str(), WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    }
    system(("rm -rf '" + dir + "'").c_str());
    return ok;
}

int run(int argc, char** argv) {
    const bench::Shape shape = bench::parse_shape(argc, argv);
    const int B = shape.B, T = shape.T, NH = 12, HS = 64;
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    // Partial tiles (T = 200 is not a multiple of 64) and several heads.
    if (!validate_small(2, 200, NH, HS)) return bench::validation_failed();

    printf("\ntiming B=%d T=%d NH=%d HS=%d (median of 20 after 5 warmup)\n", B, T, NH, HS);
    printf("FLOPs counted as causal attention: forward 4*B*NH*T^2*HS/2 (the naive path computes the full T x T but is\n"
           "credited the same), backward 2.5x forward\n");
    Buffers buf(B, T, NH, HS);
    std::vector<float> h_qkv, h_dout;
    buf.fill(h_qkv, h_dout, 42);
    Naive naive(B, T, NH, HS);
    const double fwd_flops = 4.0 * B * NH * (double)T * T * HS / 2, bwd_flops = 2.5 * fwd_flops;

    // Cross-check the fused forwards against the naive one at this shape too (no CPU reference needed).
    naive.forward(buf.out_naive, buf.qkv);
    buf.run_wmma(B, T, NH);
    buf.run_mma(B, T, NH, HS);
    const std::vector<float> naive_out = to_float(buf.out_naive.download());
    if (!bench::validate("wmma vs naive out", to_float(buf.out_wmma.download()), naive_out, 1e-2) ||
        !bench::validate("mma vs naive out", to_float(buf.out.download()), naive_out, 1e-2))
        return bench::validation_failed();

    const double t_naive = bench::measure("naive forward (cuBLAS + softmax)", fwd_flops, 0, ceilings,
                                          [&] { naive.forward(buf.out_naive, buf.qkv); });
    const double t_wfwd = bench::measure("wmma forward", fwd_flops, 0, ceilings,
                                         [&] { wmma_attention::forward(buf.out_wmma, buf.lse_wmma, buf.qkv, B, T, NH, 0); });
    const double t_wbwd = bench::measure("wmma backward", bwd_flops, 0, ceilings, [&] {
        wmma_attention::backward(buf.dqkv_wmma, buf.scratch, buf.dout, buf.out_wmma, buf.lse_wmma, buf.qkv, B, T, NH, 0);
    });
    const double t_fwd = bench::measure("mma forward", fwd_flops, 0, ceilings,
                                        [&] { llmc::attention_forward(buf.out, buf.lse, buf.qkv, B, T, NH, HS, 0); });
    const double t_bwd = bench::measure("mma backward", bwd_flops, 0, ceilings, [&] {
        llmc::attention_backward(buf.dqkv, buf.scratch, buf.dout, buf.out, buf.lse, buf.qkv, B, T, NH, HS, 0);
    });
    bench::report("wmma forward + backward", t_wfwd + t_wbwd, fwd_flops + bwd_flops, 0, ceilings);
    bench::report("mma forward + backward", t_fwd + t_bwd, fwd_flops + bwd_flops, 0, ceilings);
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("wmma/mma forward speedup: %.2fx\n", t_wfwd / t_fwd);
    printf("wmma/mma backward speedup: %.2fx\n", t_wbwd / t_bwd);
    printf("naive/mma forward speedup: %.2fx\n", t_naive / t_fwd);
    if (!run_torch(argv[0], buf, B, T, NH, HS)) return bench::validation_failed();
    return 0;
}

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
