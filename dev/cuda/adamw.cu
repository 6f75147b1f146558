/*
 * Optimizer benchmark (llmc/adamw.cuh) over GPT-2 124M's parameter count:
 *   - llmc::global_norm_squared (fixed grid, deterministic);
 *   - unfused AdamW: a one-thread clip-scale kernel (scale from the squared norm into a device scalar), a
 *     moment/master-weight update kernel, and a kernel casting the master weights to the bf16 parameters;
 *   - fused: llmc::adamw_update, one pass.
 *
 * Every version is validated against the CPU reference (llmc/cpu/adamw.h) on a tiny model for three steps
 * with clipping active, then timed on n = num_parameters(d12) = 124M as one tensor (the trainer makes one
 * call per tensor; the traffic is the same).
 *
 *   build/dev/cuda/adamw [-b B] [-t T]     (accepted for uniformity; the optimizer does not depend on them)
 *
 * Bytes counted (minimum traffic per parameter): global norm reads the bf16 gradient (2); AdamW reads the
 * gradient (2), master, m, v (12) and writes master, m, v (12) and the bf16 parameter (2): 28 bytes.
 */
#include <cstdio>
#include <string>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/adamw.cuh"
#include "llmc/cpu/adamw.h"
#include "llmc/model/gpt2_config.h"

using llmc::f128;
using llmc::floatX;
using llmc::x128;
using namespace devutil;

namespace {

// ---- unfused path ----

// *scale = clip / norm when norm = sqrt(*norm2) > clip > 0, else 1. One thread.
__global__ void clip_scale_kernel(float* scale, const float* norm2, float clip) {
    const float norm = sqrtf(*norm2);
    *scale = (clip > 0.0f && norm > clip) ? clip / norm : 1.0f;
}

// master, m, v (n) updated from grads (n) * *scale; 8 values per thread (n a multiple of 8).
__global__ void moments_update_kernel(float* master, float* m, float* v, const floatX* grads, const float* scale,
                                      size_t n, float lr, float beta1, float beta2, float bc1, float bc2, float eps,
                                      float wd) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    const float s = *scale;
    const x128 g = llmc::load128cs(grads + i);
    for (int h = 0; h < 2; h++) {
        f128 p = llmc::load128cs(master + i + 4 * h), mm = llmc::load128cs(m + i + 4 * h),
             vv = llmc::load128cs(v + i + 4 * h);
        for (int j = 0; j < 4; j++) {
            const float gj = __bfloat162float(g[4 * h + j]) * s;
            mm[j] = beta1 * mm[j] + (1.0f - beta1) * gj;
            vv[j] = beta2 * vv[j] + (1.0f - beta2) * gj * gj;
            p[j] -= lr * ((mm[j] / bc1) / (sqrtf(vv[j] / bc2) + eps) + wd * p[j]);
        }
        llmc::store128(master + i + 4 * h, p);
        llmc::store128(m + i + 4 * h, mm);
        llmc::store128(v + i + 4 * h, vv);
    }
}

// params (n) = bf16(master (n)).
__global__ void cast_kernel(floatX* params, const float* master, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    const f128 a = llmc::load128cs(master + i), b = llmc::load128cs(master + i + 4);
    x128 o;
    for (int k = 0; k < 4; k++) o[k] = __float2bfloat16(a[k]), o[k + 4] = __float2bfloat16(b[k]);
    llmc::store128(params + i, o);
}

void unfused_adamw(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n, float lr,
                   float beta1, float beta2, int t, float eps, float wd, const float* norm2, float clip,
                   float* scale) {
    if (n % x128::size != 0) throw llmc::Error("unfused_adamw: n must be a multiple of 8");
    const float bc1 = 1.0f - std::pow(beta1, (float)t), bc2 = 1.0f - std::pow(beta2, (float)t);
    const unsigned grid = (unsigned)llmc::ceil_div(n / x128::size, (size_t)256);
    clip_scale_kernel<<<1, 1>>>(scale, norm2, clip);
    CUDA_LAUNCH_CHECK();
    moments_update_kernel<<<grid, 256>>>(master, m, v, grads, scale, n, lr, beta1, beta2, bc1, bc2, eps, wd);
    CUDA_LAUNCH_CHECK();
    cast_kernel<<<grid, 256>>>(params, master, n);
    CUDA_LAUNCH_CHECK();
}

// ---- validation: three steps of a tiny model, each version against cpu::adamw_update ----

bool validate_small() {
    llmc::GPT2Config cfg;
    cfg.num_layers = 2, cfg.num_heads = 2, cfg.channels = 32, cfg.vocab_size = 100, cfg.padded_vocab_size = 128;
    cfg.max_seq_len = 16;
    llmc::AdamWConfig opt;
    opt.weight_decay = 0.1f;
    opt.grad_clip = 1.0f; // the gradients' norm is ~ sqrt(n) >> 1: clipping is active
    const float lr = 1e-3f;
    const size_t n = llmc::num_parameters(cfg);
    const auto sizes = llmc::parameter_sizes(cfg);
    auto master0 = random_normal(n, 0.5f, 1);

    DeviceBuffer<floatX> params(n), grads(n);
    DeviceBuffer<float> master(n), m(n), v(n), norm2(1), scale(1), scratch(llmc::global_norm_scratch_floats());
    bool ok = true;
    for (int fused = 0; fused < 2; fused++) {
        master.upload(master0);
        CUDA_CHECK(cudaMemset(m, 0, n * sizeof(float)));
        CUDA_CHECK(cudaMemset(v, 0, n * sizeof(float)));
        llmc::copy_float_to_bf16(params, master, n, 0);
        std::vector<float> ref = master0, ref_m(n, 0.0f), ref_v(n, 0.0f);
        float norm2_got = 0.0f;
        double norm_ref = 0.0;
        for (int t = 1; t <= 3; t++) {
            auto g = bf16_round(random_normal(n, 1.0f, 10 + t));
            grads.upload(to_bf16(g));
            llmc::global_norm_squared(norm2, scratch, grads, n, 0);
            DeviceBuffer<llmc::AdamWStep> step(std::vector<llmc::AdamWStep>{llmc::adamw_step(lr, opt.beta1, opt.beta2, t)});
            size_t off = 0;
            for (int k = 0; k < llmc::NUM_PARAMETER_TENSORS; k++) {
                const float wd = llmc::parameter_decays(k) ? opt.weight_decay : 0.0f;
                if (fused)
                    llmc::adamw_update(params.ptr + off, master.ptr + off, grads.ptr + off, m.ptr + off, v.ptr + off,
                                       sizes[k], step, opt.beta1, opt.beta2, opt.eps, wd, norm2, opt.grad_clip, 0);
                else
                    unfused_adamw(params.ptr + off, master.ptr + off, grads.ptr + off, m.ptr + off, v.ptr + off,
                                  sizes[k], lr, opt.beta1, opt.beta2, t, opt.eps, wd, norm2, opt.grad_clip, scale);
                off += sizes[k];
            }
            norm2_got = norm2.download()[0];
            norm_ref = llmc::cpu::global_norm(g.data(), n);
            llmc::cpu::adamw_update(ref.data(), g.data(), ref_m.data(), ref_v.data(), cfg, opt, lr, t, norm_ref);
        }
        const std::string tag = fused ? "fused" : "unfused";
        if (fused) ok &= bench::validate("global_norm_squared", {norm2_got}, {(float)(norm_ref * norm_ref)}, 1e-5);
        auto got_master = master.download();
        ok &= bench::validate(tag + " master (3 steps)", got_master, ref, 1e-6);
        ok &= bench::validate(tag + " m", m.download(), ref_m, 1e-6);
        ok &= bench::validate(tag + " v", v.download(), ref_v, 1e-6);
        ok &= bench::validate(tag + " params = bf16(master)", to_float(params.download()), bf16_round(got_master), 0.0);
    }
    return ok;
}

int run(int argc, char** argv) {
    bench::parse_shape(argc, argv, "   (accepted; the optimizer does not use them)");
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    if (!validate_small()) return bench::validation_failed();

    const size_t n = llmc::num_parameters(llmc::gpt2_config_for_depth(12));
    printf("\ntiming n=%zu parameters (GPT-2 124M) as one tensor (median of 20 after 5 warmup)\n", n);
    DeviceBuffer<floatX> params(n), grads(n);
    DeviceBuffer<float> master(n), m(n), v(n), norm2(1), scale(1), scratch(llmc::global_norm_scratch_floats());
    bench::fill(grads, 0.0f, 1e-2f, 1);
    bench::fill(master, 0.0f, 0.1f, 2);
    bench::fill(m, 0.0f, 1e-3f, 3);
    bench::fill(v, 5e-6f, 5e-6f, 4); // second moments are >= 0

    const float lr = 6e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 1.0f;
    bench::measure("global_norm_squared", 0, 2.0 * n, ceilings,
                   [&] { llmc::global_norm_squared(norm2, scratch, grads, n, 0); });
    const double t_unfused = bench::measure("adamw unfused (3 kernels)", 0, 28.0 * n, ceilings, [&] {
        unfused_adamw(params, master, grads, m, v, n, lr, beta1, beta2, 10, eps, wd, norm2, clip, scale);
    });
    DeviceBuffer<llmc::AdamWStep> step(std::vector<llmc::AdamWStep>{llmc::adamw_step(lr, beta1, beta2, 10)});
    const double t_fused = bench::measure("adamw_update (fused)", 0, 28.0 * n, ceilings, [&] {
        llmc::adamw_update(params, master, grads, m, v, n, step, beta1, beta2, eps, wd, norm2, clip, 0);
    });
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("unfused/fused: %.2fx\n", t_unfused / t_fused);
    return 0;
}

} // namespace

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
