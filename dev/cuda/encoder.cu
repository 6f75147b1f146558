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
#include <set>
#include <string>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/cpu/encoder.h"
#include "llmc/encoder.cuh"

using llmc::floatX;
using namespace devutil;

namespace {

bool validate_small(int B, int T, int C, int V, int vocab_hint) {
    const int Vp = (V + 7) / 8 * 8, maxT = T + 3;
    const size_t BTC = (size_t)B * T * C;
    auto wte = bf16_round(random_normal((size_t)Vp * C, 1.0f, 1));
    auto wpe = bf16_round(random_normal((size_t)maxT * C, 1.0f, 2));
    auto dout = bf16_round(random_normal(BTC, 1.0f, 3));
    auto tok = random_tokens((size_t)B * T, V, 4);
    std::vector<float> out(BTC), dwte = bf16_round(random_normal((size_t)Vp * C, 1.0f, 5)),
                                 dwpe = bf16_round(random_normal((size_t)maxT * C, 1.0f, 6));

    DeviceBuffer<floatX> d_wte(to_bf16(wte)), d_wpe(to_bf16(wpe)), d_out(BTC), d_dout(to_bf16(dout));
    DeviceBuffer<floatX> d_dwte(to_bf16(dwte)), d_dwpe(to_bf16(dwpe));
    DeviceBuffer<int> d_tok(tok);
    d_out.poison();

    llmc::encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, 0);
    llmc::EncoderBackwardScratch scratch(B, T, vocab_hint);
    llmc::encoder_backward(d_dwte, d_dwpe, scratch, d_dout, d_tok, B, T, C, 0);

    llmc::cpu::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    llmc::cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    bool ok = bench::validate("encoder_forward", to_float(d_out.download()), out, 1e-2);
    ok &= bench::validate("encoder_backward dwte", to_float(d_dwte.download()), dwte, 1e-2);
    ok &= bench::validate("encoder_backward dwpe", to_float(d_dwpe.download()), dwpe, 1e-2);
    return ok;
}

int run(int argc, char** argv) {
    const bench::Shape shape = bench::parse_shape(argc, argv);
    const int B = shape.B, T = shape.T;
    const int C = 768, V = 50257, Vp = 50304;
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    if (!validate_small(4, 64, 768, 7, 0) || !validate_small(3, 50, 64, 1000, 1000)) return bench::validation_failed();

    const int BT = B * T;
    const size_t BTC = (size_t)BT * C;
    auto tok = random_tokens(BT, V, 42);
    const size_t distinct = std::set<int>(tok.begin(), tok.end()).size();
    printf("\ntiming B=%d T=%d C=%d Vp=%d, %zu distinct tokens (median of 20 after 5 warmup)\n", B, T, C, Vp, distinct);
    DeviceBuffer<floatX> wte((size_t)Vp * C), wpe((size_t)T * C), out(BTC), dout(BTC), dwte((size_t)Vp * C),
        dwpe((size_t)T * C);
    DeviceBuffer<int> d_tok(tok);
    bench::fill(wte, 0.0f, 1.0f, 1), bench::fill(wpe, 0.0f, 1.0f, 2), bench::fill(dout, 0.0f, 1.0f, 3);
    CUDA_CHECK(cudaMemset(dwte, 0, (size_t)Vp * C * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(dwpe, 0, (size_t)T * C * sizeof(floatX)));

    const double row = 2.0 * C; // bytes of one bf16 row
    const double fwd_bytes = 4.0 * BT + row * distinct + row * T + row * BT;
    const double bwd_bytes = 4.0 * BT + row * BT + 2 * row * distinct + 2 * row * T;
    bench::measure("encoder_forward", 0, fwd_bytes, ceilings,
                   [&] { llmc::encoder_forward(out, d_tok, wte, wpe, B, T, C, 0); });
    // The gradients accumulate on every repeat; the traffic is the same.
    llmc::EncoderBackwardScratch full(B, T), hinted(B, T, Vp);
    bench::measure("encoder_backward (32-bit sort)", 0, bwd_bytes, ceilings,
                   [&] { llmc::encoder_backward(dwte, dwpe, full, dout, d_tok, B, T, C, 0); });
    bench::measure("encoder_backward (" + std::to_string(hinted.key_bits) + "-bit sort)", 0, bwd_bytes, ceilings,
                   [&] { llmc::encoder_backward(dwte, dwpe, hinted, dout, d_tok, B, T, C, 0); });
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

} // namespace

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
