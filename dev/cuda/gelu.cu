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
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/cpu/gelu.h"
#include "llmc/gelu.cuh"

using llmc::floatX;
using namespace devutil;

namespace {

bool validate_small(size_t N) {
    auto inp = bf16_round(random_normal(N, 2.0f, 1));
    auto d = bf16_round(random_normal(N, 1.0f, 2));
    DeviceBuffer<floatX> d_inp(to_bf16(inp)), d_out(N), d_d(to_bf16(d));
    d_out.poison();
    llmc::gelu_forward(d_out, d_inp, N, 0);
    llmc::gelu_backward_inplace(d_d, d_inp, N, 0);
    std::vector<float> out(N), dinp(N, 0.0f);
    llmc::cpu::gelu_forward(out.data(), inp.data(), N);
    llmc::cpu::gelu_backward(dinp.data(), inp.data(), d.data(), N);
    bool ok = bench::validate("gelu_forward", to_float(d_out.download()), out, 1e-2);
    ok &= bench::validate("gelu_backward_inplace", to_float(d_d.download()), dinp, 1e-2);
    return ok;
}

int run(int argc, char** argv) {
    const bench::Shape shape = bench::parse_shape(argc, argv);
    const int B = shape.B, T = shape.T, C = 768;
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    if (!validate_small(8 * 4096 + 5)) return bench::validation_failed();

    const size_t N = (size_t)B * T * 4 * C;
    printf("\ntiming B=%d T=%d 4C=%d: N=%zu (median of 20 after 5 warmup)\n", B, T, 4 * C, N);
    DeviceBuffer<floatX> inp(N), out(N), d(N);
    bench::fill(inp, 0.0f, 3.0f, 1);
    bench::fill(d, 0.0f, 1.0f, 2);
    bench::measure("gelu_forward", 0, 4.0 * N, ceilings, [&] { llmc::gelu_forward(out, inp, N, 0); });
    // In place: d changes every repeat (shrinks towards 0 where |gelu'| < 1); the traffic does not.
    bench::measure("gelu_backward_inplace", 0, 6.0 * N, ceilings, [&] { llmc::gelu_backward_inplace(d, inp, N, 0); });
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

} // namespace

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
