/*
 * LayerNorm benchmark (llmc/layernorm.cuh):
 *   - unfused: a residual-add kernel (residual = inp1 + inp2) followed by llmc::layernorm_forward, which
 *     reads the residual back;
 *   - fused: llmc::fused_residual_layernorm_forward, one pass;
 *   - llmc::layernorm_forward alone, and llmc::layernorm_backward (one kernel: rows, then the parameter
 *     gradients' partial sums added by the last blocks to finish).
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
#include <string>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/residual.h"
#include "llmc/layernorm.cuh"

using llmc::floatX;
using llmc::x128;
using namespace devutil;

namespace {

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
    auto a = random_normal(NC, 1.0f, 1), b = bf16_round(random_normal(NC, 0.5f, 2));
    for (auto& x : a) x += 2.0f; // row means far from 0: their 1e-5 relative check is meaningful
    a = bf16_round(a);
    auto w = bf16_round(random_normal(C, 1.0f, 3)), bias = bf16_round(random_normal(C, 1.0f, 4));
    auto dout = bf16_round(random_normal(NC, 1.0f, 5)), dinp0 = bf16_round(random_normal(NC, 1.0f, 6));
    auto dw0 = bf16_round(random_normal(C, 1.0f, 7)), db0 = bf16_round(random_normal(C, 1.0f, 8));

    // CPU: residual rounded to bf16 (what the GPU stores), then LayerNorm forward and backward on it.
    std::vector<float> res(NC), out(NC), mean(N), rstd(N);
    llmc::cpu::residual_forward(res.data(), a.data(), b.data(), NC);
    res = bf16_round(res);
    llmc::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), w.data(), bias.data(), 1, N, C);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    llmc::cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), res.data(), w.data(), mean.data(),
                                  rstd.data(), 1, N, C);

    DeviceBuffer<floatX> d_a(to_bf16(a)), d_b(to_bf16(b)), d_w(to_bf16(w)), d_bias(to_bf16(bias)), d_res(NC), d_out(NC);
    DeviceBuffer<floatX> d_dout(to_bf16(dout)), d_dinp(to_bf16(dinp0)), d_dw(to_bf16(dw0)), d_db(to_bf16(db0));
    DeviceBuffer<float> d_mean(N), d_rstd(N), scratch(llmc::layernorm_backward_scratch_floats(N, C));
    bool ok = true;
    for (int fused = 0; fused < 2; fused++) {
        d_res.poison(), d_out.poison(), d_mean.poison(), d_rstd.poison();
        if (fused) llmc::fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0);
        else unfused_residual_layernorm(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C);
        const std::string tag = fused ? "fused" : "unfused";
        ok &= bench::validate(tag + " residual", to_float(d_res.download()), res, 1e-2);
        ok &= bench::validate(tag + " normed", to_float(d_out.download()), out, 1e-2);
        ok &= bench::validate(tag + " mean", d_mean.download(), mean, 1e-5);
        ok &= bench::validate(tag + " rstd", d_rstd.download(), rstd, 1e-5);
    }
    d_res.upload(to_bf16(res)), d_mean.upload(mean), d_rstd.upload(rstd);
    llmc::layernorm_backward(d_dinp, d_dw, d_db, scratch, d_dout, d_res, d_w, d_mean, d_rstd, N, C, 0);
    ok &= bench::validate("backward dinp", to_float(d_dinp.download()), dinp, 1e-2);
    ok &= bench::validate("backward dweight", to_float(d_dw.download()), dw, 1e-2);
    ok &= bench::validate("backward dbias", to_float(d_db.download()), db, 1e-2);
    return ok;
}

int run(int argc, char** argv) {
    const bench::Shape shape = bench::parse_shape(argc, argv);
    const int C = 768;
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    if (!validate_small(4 * 64 + 3, C) || !validate_small(37, 1600) || !validate_small(6003, C))
        return bench::validation_failed();

    const int N = shape.B * shape.T;
    const size_t NC = (size_t)N * C;
    printf("\ntiming N=B*T=%d C=%d (median of 20 after 5 warmup)\n", N, C);
    DeviceBuffer<floatX> a(NC), b(NC), res(NC), out(NC), w(C), bias(C), dout(NC), dinp(NC), dw(C), db(C);
    DeviceBuffer<float> mean(N), rstd(N), scratch(llmc::layernorm_backward_scratch_floats(N, C));
    bench::fill(a, 0.0f, 1.0f, 1), bench::fill(b, 0.0f, 1.0f, 2), bench::fill(w, 1.0f, 0.1f, 3);
    bench::fill(bias, 0.0f, 0.1f, 4), bench::fill(dout, 0.0f, 1.0f, 5), bench::fill(dinp, 0.0f, 1.0f, 6);
    bench::fill(dw, 0.0f, 1.0f, 7), bench::fill(db, 0.0f, 1.0f, 8);

    const double bytes_res_ln = 8.0 * NC + 8.0 * N;
    const double t_unfused = bench::measure("residual + layernorm (2 kernels)", 0, bytes_res_ln, ceilings, [&] {
        unfused_residual_layernorm(res, out, mean, rstd, a, b, w, bias, N, C);
    });
    const double t_fused = bench::measure("fused_residual_layernorm_forward", 0, bytes_res_ln, ceilings, [&] {
        llmc::fused_residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, C, 0);
    });
    bench::measure("layernorm_forward", 0, 4.0 * NC + 8.0 * N, ceilings,
                   [&] { llmc::layernorm_forward(out, mean, rstd, res, w, bias, N, C, 0); });

    // Real statistics for the backward (rstd from the forward just run on `res`).
    llmc::layernorm_forward(out, mean, rstd, res, w, bias, N, C, 0);
    // dinp accumulates on every repeat; the traffic is the same.
    bench::measure("layernorm_backward", 0, 8.0 * NC + 8.0 * N, ceilings,
                   [&] { llmc::layernorm_backward(dinp, dw, db, scratch, dout, res, w, mean, rstd, N, C, 0); });
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("unfused/fused residual+layernorm: %.2fx\n", t_unfused / t_fused);
    return 0;
}

} // namespace

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
