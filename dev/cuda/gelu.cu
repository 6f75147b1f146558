/*
 * GELU benchmark: llmc::gelu_forward and llmc::gelu_backward_inplace (llmc/gelu.cuh), elementwise over the
 * MLP activation (B, T, 4C).
 *
 * Validated against the CPU reference (llmc/cpu/gelu.h) on a small N with a partial group of 8, then timed
 * on GPT-2 124M's shape (B=16, T=1024, C=768: N = 50M values).
 *
 *   build/dev/cuda/gelu [-b B] [-t T]
 *
 * Bytes counted (minimum traffic, bf16): forward reads inp and writes out (4N); backward reads inp and d and
 * writes d (6N).
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/cpu/gelu.h"
#include "llmc/gelu.cuh"

using llmc::floatX;

namespace {

template <typename T> struct DevArray {
    T* p = nullptr;
    explicit DevArray(size_t n) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T) + 16)); }
    ~DevArray() { cudaFree(p); }
    DevArray(const DevArray&) = delete;
    operator T*() const { return p; }
};

std::vector<floatX> to_bf16(const std::vector<float>& x) {
    std::vector<floatX> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = __float2bfloat16(x[i]);
    return r;
}
std::vector<float> round_bf16(const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = __bfloat162float(__float2bfloat16(x[i]));
    return r;
}
void upload(floatX* d, const std::vector<float>& x) {
    auto b = to_bf16(x);
    CUDA_CHECK(cudaMemcpy(d, b.data(), b.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}
std::vector<float> download(const floatX* d, size_t n) {
    std::vector<floatX> b(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(b.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) r[i] = __bfloat162float(b[i]);
    return r;
}

// Deterministic pseudo-random fill on the device (uniform in [-scale, scale]): no host round trip for big N.
__global__ void fill_kernel(floatX* x, size_t n, float scale, unsigned seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = __float2bfloat16(scale * (2.0f * (h >> 8) / 16777216.0f - 1.0f));
}
void fill(floatX* x, size_t n, float scale, unsigned seed) {
    fill_kernel<<<(unsigned)llmc::ceil_div(n, (size_t)256), 256>>>(x, n, scale, seed);
    CUDA_LAUNCH_CHECK();
}

bool validate_small(size_t N) {
    auto inp = round_bf16(bench::random_normal(N, 2.0f, 1));
    auto d = round_bf16(bench::random_normal(N, 1.0f, 2));
    DevArray<floatX> d_inp(N), d_out(N), d_d(N);
    upload(d_inp, inp);
    upload(d_d, d);
    CUDA_CHECK(cudaMemset(d_out, 0xFF, N * sizeof(floatX))); // NaN: a missed element fails
    llmc::gelu_forward(d_out, d_inp, N, 0);
    llmc::gelu_backward_inplace(d_d, d_inp, N, 0);
    std::vector<float> out(N), dinp(N, 0.0f);
    llmc::cpu::gelu_forward(out.data(), inp.data(), N);
    llmc::cpu::gelu_backward(dinp.data(), inp.data(), d.data(), N);
    bool ok = bench::validate("gelu_forward", download(d_out, N), out, 1e-2);
    ok &= bench::validate("gelu_backward_inplace", download(d_d, N), dinp, 1e-2);
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

    if (!validate_small(8 * 4096 + 5)) {
        fprintf(stderr, "validation FAILED\n");
        return 1;
    }

    const size_t N = (size_t)B * T * 4 * C;
    printf("\ntiming B=%d T=%d 4C=%d: N=%zu (median of 20 after 5 warmup)\n", B, T, 4 * C, N);
    DevArray<floatX> inp(N), out(N), d(N);
    fill(inp, N, 3.0f, 1);
    fill(d, N, 1.0f, 2);
    const double t_fwd = bench::time_ms([&] { llmc::gelu_forward(out, inp, N, 0); });
    bench::report("gelu_forward", t_fwd, 0, 4.0 * N, ceilings);
    // In place: d changes every repeat (shrinks towards 0 where |gelu'| < 1); the traffic does not.
    const double t_bwd = bench::time_ms([&] { llmc::gelu_backward_inplace(d, inp, N, 0); });
    bench::report("gelu_backward_inplace", t_bwd, 0, 6.0 * N, ceilings);
    CUDA_CHECK(cudaDeviceSynchronize());
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
