/*
 * Encoder (token + position embedding) benchmark: llmc::encoder_forward and llmc::encoder_backward
 * (llmc/encoder.cuh). The backward is timed twice: with a scratch that radix-sorts all 32 key bits, and with
 * one told the vocabulary size (EncoderBackwardScratch(B, T, Vp)), which sorts only the 16 bits GPT-2's
 * token ids can use.
 *
 * Validated against the CPU reference (llmc/cpu/encoder.h) on a small shape with few distinct tokens (long
 * runs per token), then timed on GPT-2 124M's shape (B=16, T=1024, C=768, Vp=50304) with uniformly random
 * tokens.
 *
 *   build/dev/cuda/encoder [-b B] [-t T]
 *
 * Bytes counted (minimum traffic): forward reads the tokens (4BT), one wte row per distinct token and the T
 * wpe rows, and writes out (2BTC); backward reads the tokens and dout (2BTC), reads and writes one dwte row
 * per distinct token and the T dwpe rows. The sort's own traffic is not counted: it is overhead.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/cpu/encoder.h"
#include "llmc/encoder.cuh"

using llmc::floatX;

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
void upload(int* d, const std::vector<int>& x) {
    CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(int), cudaMemcpyHostToDevice));
}
std::vector<float> download(const floatX* d, size_t n) {
    std::vector<floatX> b(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(b.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) r[i] = __bfloat162float(b[i]);
    return r;
}
std::vector<int> random_tokens(size_t n, int vocab, unsigned seed) {
    std::mt19937 g(seed);
    std::vector<int> t(n);
    for (auto& x : t) x = (int)(g() % vocab);
    return t;
}

// Deterministic pseudo-random fill on the device (uniform in [-scale, scale]).
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

bool validate_small(int B, int T, int C, int V, int vocab_hint) {
    const int Vp = (V + 7) / 8 * 8, maxT = T + 3;
    const size_t BTC = (size_t)B * T * C;
    auto wte = round_bf16(bench::random_normal((size_t)Vp * C, 1.0f, 1));
    auto wpe = round_bf16(bench::random_normal((size_t)maxT * C, 1.0f, 2));
    auto dout = round_bf16(bench::random_normal(BTC, 1.0f, 3));
    auto tok = random_tokens((size_t)B * T, V, 4);
    std::vector<float> out(BTC), dwte = round_bf16(bench::random_normal((size_t)Vp * C, 1.0f, 5)),
                                 dwpe = round_bf16(bench::random_normal((size_t)maxT * C, 1.0f, 6));

    DevArray<floatX> d_wte((size_t)Vp * C), d_wpe((size_t)maxT * C), d_out(BTC), d_dout(BTC);
    DevArray<floatX> d_dwte((size_t)Vp * C), d_dwpe((size_t)maxT * C);
    DevArray<int> d_tok((size_t)B * T);
    upload(d_wte, wte), upload(d_wpe, wpe), upload(d_dout, dout), upload(d_tok, tok);
    upload(d_dwte, dwte), upload(d_dwpe, dwpe);
    CUDA_CHECK(cudaMemset(d_out, 0xFF, BTC * sizeof(floatX)));

    llmc::encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, 0);
    llmc::EncoderBackwardScratch scratch(B, T, vocab_hint);
    llmc::encoder_backward(d_dwte, d_dwpe, scratch, d_dout, d_tok, B, T, C, 0);

    llmc::cpu::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    llmc::cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    bool ok = bench::validate("encoder_forward", download(d_out, BTC), out, 1e-2);
    ok &= bench::validate("encoder_backward dwte", download(d_dwte, (size_t)Vp * C), dwte, 1e-2);
    ok &= bench::validate("encoder_backward dwpe", download(d_dwpe, (size_t)maxT * C), dwpe, 1e-2);
    return ok;
}

int run(int argc, char** argv) {
    int B = 16, T = 1024;
    const int C = 768, V = 50257, Vp = 50304;
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

    if (!validate_small(4, 64, 768, 7, 0) || !validate_small(3, 50, 64, 1000, 1000)) {
        fprintf(stderr, "validation FAILED\n");
        return 1;
    }

    const int BT = B * T;
    const size_t BTC = (size_t)BT * C;
    auto tok = random_tokens(BT, V, 42);
    const size_t distinct = std::set<int>(tok.begin(), tok.end()).size();
    printf("\ntiming B=%d T=%d C=%d Vp=%d, %zu distinct tokens (median of 20 after 5 warmup)\n", B, T, C, Vp, distinct);
    DevArray<floatX> wte((size_t)Vp * C), wpe((size_t)T * C), out(BTC), dout(BTC), dwte((size_t)Vp * C),
        dwpe((size_t)T * C);
    DevArray<int> d_tok(BT);
    upload(d_tok, tok);
    fill(wte, (size_t)Vp * C, 1.0f, 1), fill(wpe, (size_t)T * C, 1.0f, 2), fill(dout, BTC, 1.0f, 3);
    CUDA_CHECK(cudaMemset(dwte, 0, (size_t)Vp * C * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(dwpe, 0, (size_t)T * C * sizeof(floatX)));

    const double row = 2.0 * C; // bytes of one bf16 row
    const double fwd_bytes = 4.0 * BT + row * distinct + row * T + row * BT;
    const double bwd_bytes = 4.0 * BT + row * BT + 2 * row * distinct + 2 * row * T;
    const double t_fwd = bench::time_ms([&] { llmc::encoder_forward(out, d_tok, wte, wpe, B, T, C, 0); });
    bench::report("encoder_forward", t_fwd, 0, fwd_bytes, ceilings);
    // The gradients accumulate on every repeat; the traffic is the same.
    llmc::EncoderBackwardScratch full(B, T), hinted(B, T, Vp);
    const double t_bwd32 =
        bench::time_ms([&] { llmc::encoder_backward(dwte, dwpe, full, dout, d_tok, B, T, C, 0); });
    bench::report("encoder_backward (32-bit sort)", t_bwd32, 0, bwd_bytes, ceilings);
    const double t_bwd16 =
        bench::time_ms([&] { llmc::encoder_backward(dwte, dwpe, hinted, dout, d_tok, B, T, C, 0); });
    char name[64];
    snprintf(name, sizeof name, "encoder_backward (%d-bit sort)", hinted.key_bits);
    bench::report(name, t_bwd16, 0, bwd_bytes, ceilings);
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
