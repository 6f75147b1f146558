/*
 * Bias-gradient benchmark: llmc::bias_backward (llmc/bias_backward.cuh), dbias (OC) += column sums of dout
 * (BT, OC), at each OC of GPT-2 124M's matmuls (qkv 3C, attention projection C, fc 4C, fc projection C).
 *
 * Validated against the CPU reference (llmc/cpu/matmul.h's dbias) on small shapes with a partial column tile
 * and a partial last slab, then timed at BT = B*T (B=16, T=1024).
 *
 *   build/dev/cuda/bias_backward [-b B] [-t T]
 *
 * Bytes counted: the read of dout (2*BT*OC); the fp32 partials (a few hundred KB) are left out.
 */
#include <cstdio>
#include <vector>

#include "dev/cuda/bench_common.cuh"
#include "llmc/bias_backward.cuh"
#include "llmc/cpu/matmul.h"

using llmc::floatX;
using namespace devutil;

namespace {

bool validate_small(int BT, int OC) {
    const int C = 8; // the reference's matmul backward also forms dinp and dweight: keep them small
    auto dout = bf16_round(random_normal((size_t)BT * OC, 1.0f, 1)), db0 = bf16_round(random_normal(OC, 1.0f, 2));
    std::vector<float> dinp((size_t)BT * C, 0.0f), dw((size_t)OC * C, 0.0f), db = db0;
    const std::vector<float> inp((size_t)BT * C, 0.0f), w((size_t)OC * C, 0.0f);
    llmc::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), 1, BT, C, OC);
    DeviceBuffer<floatX> d_dout(to_bf16(dout)), d_db(to_bf16(db0));
    DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(OC));
    llmc::bias_backward(d_db, scratch, d_dout, BT, OC, 0);
    return bench::validate("bias_backward OC=" + std::to_string(OC), to_float(d_db.download()), db, 1e-2);
}

int run(int argc, char** argv) {
    const bench::Shape shape = bench::parse_shape(argc, argv);
    const int C = 768;
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    if (!validate_small(4099, 200) || !validate_small(333, 3 * C)) return bench::validation_failed();

    const int BT = shape.B * shape.T;
    printf("\ntiming BT=B*T=%d (median of 20 after 5 warmup)\n", BT);
    DeviceBuffer<floatX> dout((size_t)BT * 4 * C), db(4 * C);
    DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(4 * C));
    bench::fill(dout, 0.0f, 1.0f, 1), bench::fill(db, 0.0f, 1.0f, 2);
    double per_layer = 0;
    for (int OC : {3 * C, C, 4 * C, C}) {
        const llmc::BiasBackwardPlan p = llmc::bias_backward_plan(BT, OC);
        const std::string name = "bias_backward OC=" + std::to_string(OC) + " (" + std::to_string(p.tiles) + "x" +
                                 std::to_string(p.slabs) + " blocks)";
        // dbias accumulates on every repeat; the traffic is the same.
        per_layer += bench::measure(name, 0, 2.0 * BT * OC, ceilings,
                                    [&] { llmc::bias_backward(db, scratch, dout, BT, OC, 0); });
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("per layer (qkv + attn_proj + fc + fc_proj): %.4f ms\n", per_layer);
    return 0;
}

} // namespace

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
