/*
 * LayerNorm benchmark (llmc/layernorm.cuh):
 *   - unfused: a residual-add kernel (residual = inp1 + inp2) followed by llmc::layernorm_forward, which
 *     reads the residual back;
 *   - fused: llmc::fused_residual_layernorm_forward, one pass;
 *   - llmc::layernorm_forward alone, and llmc::layernorm_backward (both kernels: rows + parameter partials).
 *
 * Every version is validated against the CPU reference (llmc/cpu/layernorm.h, residual.h) on a small shape
 * (N not a multiple of the rows per block), then timed on GPT-2 124M's shape (B=16, T=1024, C=768).
 *
 *   build/dev/cuda/layernorm [-b B] [-t T]
 *
 * Bytes counted are the operation's minimum traffic (bf16 tensors of N*C, fp32 statistics of N; the C-sized
 * weights are negligible and ignored): residual + layernorm reads inp1, inp2 and writes residual, normed
 * (8NC) plus mean and rstd (8N), whichever version runs it, so the unfused version's extra read and write
 * of the residual shows as a lower rate. layernorm_forward: 4NC + 8N. layernorm_backward: reads dout, inp,
 * dinp, writes dinp (8NC), reads mean and rstd (8N).
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/residual.h"
#include "llmc/layernorm.cuh"

using llmc::floatX;
using llmc::x128;

namespace {

template <typename T> struct DevArray {
    T* p = nullptr;
    explicit DevArray(size_t n) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T) + 16)); }
    ~DevArray() { cudaFree(p); }
    DevArray(const DevArray&) = delete;
    operator T*() const { return p; }
};

std::vector<float> round_bf16(const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = __bfloat162float(__float2bfloat16(x[i]));
    return r;
}
void upload(floatX* d, const std::vector<float>& x) {
    std::vector<floatX> b(x.size());
    for (size_t i = 0; i < x.size(); i++) b[i] = __float2bfloat16(x[i]);
    CUDA_CHECK(cudaMemcpy(d, b.data(), b.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}
void upload(float* d, const std::vector<float>& x) {
    CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
}
std::vector<float> download(const floatX* d, size_t n) {
    std::vector<floatX> b(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(b.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) r[i] = __bfloat162float(b[i]);
    return r;
}
std::vector<float> download(const float* d, size_t n) {
    std::vector<float> r(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(r.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return r;
}

// Deterministic pseudo-random fill on the device (uniform in [offset - scale, offset + scale]).
__global__ void fill_kernel(floatX* x, size_t n, float offset, float scale, unsigned seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = __float2bfloat16(offset + scale * (2.0f * (h >> 8) / 16777216.0f - 1.0f));
}
void fill(floatX* x, size_t n, float offset, float scale, unsigned seed) {
    fill_kernel<<<(unsigned)llmc::ceil_div(n, (size_t)256), 256>>>(x, n, offset, scale, seed);
    CUDA_LAUNCH_CHECK();
}
// ---- unfused path: the residual add as its own kernel ----

// out (n) = bf16(a + b), 8 values per thread (n a multiple of 8).
__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    x128 va = llmc::load128cs(a + i), vb = llmc::load128cs(b + i), o;
    for (int k = 0; k < x128::size; k++) o[k] = __float2bfloat16(__bfloat162float(va[k]) + __bfloat162float(vb[k]));
    llmc::store128(out + i, o);
}
void unfused_residual_layernorm(floatX* residual, floatX* normed, float* mean, float* rstd, const floatX* a,
                                const floatX* b, const floatX* w, const floatX* bias, int N, int C) {
    const size_t n = (size_t)N * C;
    residual_forward_kernel<<<(unsigned)llmc::ceil_div(n / x128::size, (size_t)256), 256>>>(residual, a, b, n);
    CUDA_LAUNCH_CHECK();
    llmc::layernorm_forward(normed, mean, rstd, residual, w, bias, N, C, 0);
}

bool validate_small(int N, int C) {
    const size_t NC = (size_t)N * C;
    auto a = bench::random_normal(NC, 1.0f, 1), b = round_bf16(bench::random_normal(NC, 0.5f, 2));
    for (auto& x : a) x += 2.0f; // row means far from 0: their 1e-5 relative check is meaningful
    a = round_bf16(a);
    auto w = round_bf16(bench::random_normal(C, 1.0f, 3)), bias = round_bf16(bench::random_normal(C, 1.0f, 4));
    auto dout = round_bf16(bench::random_normal(NC, 1.0f, 5)), dinp0 = round_bf16(bench::random_normal(NC, 1.0f, 6));
    auto dw0 = round_bf16(bench::random_normal(C, 1.0f, 7)), db0 = round_bf16(bench::random_normal(C, 1.0f, 8));

    // CPU: residual rounded to bf16 (what the GPU stores), then LayerNorm forward and backward on it.
    std::vector<float> res(NC), out(NC), mean(N), rstd(N);
    llmc::cpu::residual_forward(res.data(), a.data(), b.data(), NC);
    res = round_bf16(res);
    llmc::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), w.data(), bias.data(), 1, N, C);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    llmc::cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), res.data(), w.data(), mean.data(),
                                  rstd.data(), 1, N, C);

    DevArray<floatX> d_a(NC), d_b(NC), d_w(C), d_bias(C), d_res(NC), d_out(NC);
    DevArray<floatX> d_dout(NC), d_dinp(NC), d_dw(C), d_db(C);
    DevArray<float> d_mean(N), d_rstd(N), scratch(llmc::layernorm_backward_scratch_floats(N, C));
    upload(d_a, a), upload(d_b, b), upload(d_w, w), upload(d_bias, bias);
    bool ok = true;
    for (int fused = 0; fused < 2; fused++) {
        CUDA_CHECK(cudaMemset(d_res, 0xFF, NC * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(d_out, 0xFF, NC * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(d_mean, 0xFF, N * sizeof(float)));
        CUDA_CHECK(cudaMemset(d_rstd, 0xFF, N * sizeof(float)));
        if (fused) llmc::fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0);
        else unfused_residual_layernorm(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C);
        const char* tag = fused ? "fused" : "unfused";
        char name[64];
        snprintf(name, sizeof name, "%s residual", tag);
        ok &= bench::validate(name, download(d_res, NC), res, 1e-2);
        snprintf(name, sizeof name, "%s normed", tag);
        ok &= bench::validate(name, download(d_out, NC), out, 1e-2);
        snprintf(name, sizeof name, "%s mean", tag);
        ok &= bench::validate(name, download(d_mean, N), mean, 1e-5);
        snprintf(name, sizeof name, "%s rstd", tag);
        ok &= bench::validate(name, download(d_rstd, N), rstd, 1e-5);
    }
    upload(d_res, res), upload(d_mean, mean), upload(d_rstd, rstd);
    upload(d_dout, dout), upload(d_dinp, dinp0), upload(d_dw, dw0), upload(d_db, db0);
    llmc::layernorm_backward(d_dinp, d_dw, d_db, scratch, d_dout, d_res, d_w, d_mean, d_rstd, N, C, 0);
    ok &= bench::validate("backward dinp", download(d_dinp, NC), dinp, 1e-2);
    ok &= bench::validate("backward dweight", download(d_dw, C), dw, 1e-2);
    ok &= bench::validate("backward dbias", download(d_db, C), db, 1e-2);
    return ok;
}

int run(int argc, char** argv) {
    int B = 16, T = 1024;
    const int C = 768;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) T = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-b batch (16)] [-t seq_len (1024)]\n", argv[0]);
            return 2;
        }
    }
    if (B <= 0 || T <= 0) {
        fprintf(stderr, "%s: -b and -t must be positive\n", argv[0]);
        return 2;
    }
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    if (!validate_small(4 * 64 + 3, C) || !validate_small(37, 1600)) {
        fprintf(stderr, "validation FAILED\n");
        return 1;
    }

    const int N = B * T;
    const size_t NC = (size_t)N * C;
    printf("\ntiming N=B*T=%d C=%d (median of 20 after 5 warmup)\n", N, C);
    DevArray<floatX> a(NC), b(NC), res(NC), out(NC), w(C), bias(C), dout(NC), dinp(NC), dw(C), db(C);
    DevArray<float> mean(N), rstd(N), scratch(llmc::layernorm_backward_scratch_floats(N, C));
    fill(a, NC, 0.0f, 1.0f, 1), fill(b, NC, 0.0f, 1.0f, 2), fill(w, C, 1.0f, 0.1f, 3), fill(bias, C, 0.0f, 0.1f, 4);
    fill(dout, NC, 0.0f, 1.0f, 5), fill(dinp, NC, 0.0f, 1.0f, 6), fill(dw, C, 0.0f, 1.0f, 7), fill(db, C, 0.0f, 1.0f, 8);

    const double bytes_res_ln = 8.0 * NC + 8.0 * N;
    const double t_unfused =
        bench::time_ms([&] { unfused_residual_layernorm(res, out, mean, rstd, a, b, w, bias, N, C); });
    bench::report("residual + layernorm (2 kernels)", t_unfused, 0, bytes_res_ln, ceilings);
    const double t_fused = bench::time_ms(
        [&] { llmc::fused_residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, C, 0); });
    bench::report("fused_residual_layernorm_forward", t_fused, 0, bytes_res_ln, ceilings);
    const double t_ln = bench::time_ms([&] { llmc::layernorm_forward(out, mean, rstd, res, w, bias, N, C, 0); });
    bench::report("layernorm_forward", t_ln, 0, 4.0 * NC + 8.0 * N, ceilings);

    // Real statistics for the backward (rstd from the forward just run on `res`).
    llmc::layernorm_forward(out, mean, rstd, res, w, bias, N, C, 0);
    // dinp accumulates on every repeat; the traffic is the same.
    const double t_bwd = bench::time_ms(
        [&] { llmc::layernorm_backward(dinp, dw, db, scratch, dout, res, w, mean, rstd, N, C, 0); });
    bench::report("layernorm_backward", t_bwd, 0, 8.0 * NC + 8.0 * N, ceilings);
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("unfused/fused residual+layernorm: %.2fx\n", t_unfused / t_fused);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const llmc::Error& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
