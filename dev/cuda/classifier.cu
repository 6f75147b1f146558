/*
 * Output-head softmax / cross-entropy benchmark over logits (BT, Vp):
 *   - unfused: a softmax kernel that turns the logits into bf16 probabilities in place (max, sum and write
 *     passes), a loss kernel (-log p[target]) and a dlogits kernel ((p - onehot) * dloss, in place);
 *   - fused: llmc::fused_classifier (llmc/classifier.cuh), with and without writing dlogits.
 *
 * Every version is validated against the CPU reference (llmc/cpu/classifier.h, run with C = Vp and an
 * identity wte so that its matmul returns the logits exactly) on a small shape with padded columns, then
 * timed on GPT-2 124M's shape (B=16, T=1024, V=50257, Vp=50304). The unfused loss is checked at 1e-2, not
 * 1e-5: it is taken from bf16 probabilities, which is one more reason to fuse.
 *
 *   build/dev/cuda/classifier [-b B] [-t T]
 *
 * Bytes counted (minimum traffic): with dlogits, read the logits and write the dlogits once (4*BT*Vp) plus
 * targets and losses (8BT), whichever version runs it; loss only, 2*BT*Vp + 8BT. Timed runs work in place:
 * after the first repeat the "logits" are the previous dlogits, which costs the same.
 */
#include <cstdio>
#include <vector>

#include <cub/cub.cuh>

#include "dev/cuda/bench_common.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cpu/classifier.h"

using llmc::floatX;
using llmc::x128;
using namespace devutil;

namespace {

// ---- unfused path ----

constexpr int SOFTMAX_THREADS = 512;

// x (BT, Vp) logits -> probabilities in place over the first V columns, 0 in the padding. One block per row;
// three passes over the row (max, sum, write), each statistic reduced with cub::BlockReduce.
__global__ void softmax_kernel(floatX* logits, int V, int Vp) {
    using BlockReduce = cub::BlockReduce<float, SOFTMAX_THREADS>;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ float shared_m, shared_s;
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += SOFTMAX_THREADS) m = fmaxf(m, __bfloat162float(x[i]));
    m = BlockReduce(temp).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
    if (threadIdx.x == 0) shared_m = m;
    __syncthreads(); // also guards the reuse of temp below
    m = shared_m;
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += SOFTMAX_THREADS) s += expf(__bfloat162float(x[i]) - m);
    s = BlockReduce(temp).Sum(s);
    if (threadIdx.x == 0) shared_s = s;
    __syncthreads();
    const float inv = 1.0f / shared_s;
    for (int i = threadIdx.x; i < Vp; i += SOFTMAX_THREADS)
        x[i] = __float2bfloat16(i < V ? expf(__bfloat162float(x[i]) - m) * inv : 0.0f);
}

// losses (BT) = -log p[row, target[row]].
__global__ void loss_kernel(float* losses, const floatX* probs, const int* targets, int BT, int Vp) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < BT) losses[r] = -logf(__bfloat162float(probs[(size_t)r * Vp + targets[r]]));
}

// probs (BT, Vp) -> dlogits in place: (p - [col == target]) * dloss for col < V, 0 in the padding.
__global__ void dlogits_kernel(floatX* probs, const int* targets, float dloss, int BT, int V, int Vp) {
    const size_t chunk = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int chunks_per_row = Vp / x128::size;
    if (chunk >= (size_t)BT * chunks_per_row) return;
    const size_t r = chunk / chunks_per_row;
    const int c0 = (int)(chunk % chunks_per_row) * x128::size;
    const int target = targets[r];
    floatX* p = probs + r * Vp + c0;
    x128 v = llmc::load128cs(p), d;
    for (int k = 0; k < x128::size; k++) {
        const int c = c0 + k;
        d[k] = __float2bfloat16(c < V ? (__bfloat162float(v[k]) - (c == target ? 1.0f : 0.0f)) * dloss : 0.0f);
    }
    llmc::store128(p, d);
}

void unfused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int BT, int V, int Vp) {
    softmax_kernel<<<BT, SOFTMAX_THREADS>>>(logits, V, Vp);
    CUDA_LAUNCH_CHECK();
    loss_kernel<<<llmc::ceil_div(BT, 256), 256>>>(losses, logits, targets, BT, Vp);
    CUDA_LAUNCH_CHECK();
    const size_t chunks = (size_t)BT * (Vp / x128::size);
    dlogits_kernel<<<(unsigned)llmc::ceil_div(chunks, (size_t)256), 256>>>(logits, targets, dloss, BT, V, Vp);
    CUDA_LAUNCH_CHECK();
}

// ---- validation ----

bool validate_small(int BT, int V, int Vp) {
    const size_t n = (size_t)BT * Vp;
    auto logits = bf16_round(random_normal(n, 2.0f, 1));
    const std::vector<int> targets = random_tokens(BT, V, 2);
    const float dloss = 1.0f / BT;

    // CPU: C = Vp and wte = identity, so the head's matmul returns the logits exactly.
    std::vector<float> eye((size_t)Vp * Vp, 0.0f);
    for (int i = 0; i < Vp; i++) eye[(size_t)i * Vp + i] = 1.0f;
    std::vector<float> probs(n), losses(BT), dinp(n, 0.0f), dwte((size_t)Vp * Vp, 0.0f);
    llmc::cpu::classifier_forward(probs.data(), losses.data(), logits.data(), eye.data(), targets.data(), 1, BT, Vp, V,
                                  Vp);
    llmc::cpu::classifier_backward(dinp.data(), dwte.data(), probs.data(), logits.data(), eye.data(), targets.data(),
                                   dloss, 1, BT, Vp, V, Vp); // probs -> dlogits in place

    DeviceBuffer<floatX> d_logits(n);
    DeviceBuffer<int> d_targets(targets);
    DeviceBuffer<float> d_losses(BT);
    bool ok = true;

    d_logits.upload(to_bf16(logits));
    d_losses.poison();
    unfused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp);
    ok &= bench::validate("unfused loss (bf16 probs)", d_losses.download(), losses, 1e-2);
    ok &= bench::validate("unfused dlogits", to_float(d_logits.download()), probs, 1e-2);

    d_logits.upload(to_bf16(logits));
    d_losses.poison();
    llmc::fused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp, false, 0);
    ok &= bench::validate("fused loss only: loss", d_losses.download(), losses, 1e-5);
    ok &= bench::validate("fused loss only: logits kept", to_float(d_logits.download()), logits, 0.0);

    d_losses.poison();
    llmc::fused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp, true, 0);
    ok &= bench::validate("fused loss", d_losses.download(), losses, 1e-5);
    auto got = to_float(d_logits.download());
    ok &= bench::validate("fused dlogits", got, probs, 1e-2);
    bool pad_zero = true;
    for (int r = 0; r < BT; r++)
        for (int i = V; i < Vp; i++) pad_zero &= got[(size_t)r * Vp + i] == 0.0f;
    printf("  check %-28s %s\n", "fused padded dlogits == 0", pad_zero ? "OK" : "FAILED");
    return ok && pad_zero;
}

int run(int argc, char** argv) {
    const bench::Shape shape = bench::parse_shape(argc, argv);
    const int V = 50257, Vp = 50304;
    const bench::Ceilings ceilings = bench::require_device(argv[0]);

    // Padded columns, a chunk straddling V, and rows longer than one pass of the block (Vp / 8 > 512).
    if (!validate_small(32, 4100, 4112)) return bench::validation_failed();

    const int BT = shape.B * shape.T;
    const size_t n = (size_t)BT * Vp;
    printf("\ntiming BT=%d V=%d Vp=%d (median of 20 after 5 warmup)\n", BT, V, Vp);
    DeviceBuffer<floatX> logits(n);
    DeviceBuffer<int> targets(random_tokens(BT, V, 3));
    DeviceBuffer<float> losses(BT);
    bench::fill(logits, 0.0f, 4.0f, 1);
    const float dloss = 1.0f / BT;
    const double bytes_full = 4.0 * n + 8.0 * BT, bytes_loss = 2.0 * n + 8.0 * BT;

    bench::measure("fused_classifier (loss only)", 0, bytes_loss, ceilings,
                   [&] { llmc::fused_classifier(logits, losses, targets, dloss, BT, V, Vp, false, 0); });
    const double t_unfused = bench::measure("softmax + loss + dlogits (3 kernels)", 0, bytes_full, ceilings,
                                            [&] { unfused_classifier(logits, losses, targets, dloss, BT, V, Vp); });
    const double t_fused = bench::measure("fused_classifier (loss + dlogits)", 0, bytes_full, ceilings, [&] {
        llmc::fused_classifier(logits, losses, targets, dloss, BT, V, Vp, true, 0);
    });
    // In a step the lm_head matmul writes the logits just before: its last rows are still in L2, which the
    // classifier's reverse row order reads first. A producer writing the logits in row order stands in for it.
    const double t_producer = bench::measure("producer (logits written in row order)", 0, 2.0 * n, ceilings,
                                             [&] { bench::fill(logits, 0.0f, 4.0f, 1); });
    const double t_after = bench::measure("producer + fused_classifier (loss + dlogits)", 0, 2.0 * n + bytes_full,
                                          ceilings, [&] {
                                              bench::fill(logits, 0.0f, 4.0f, 1);
                                              llmc::fused_classifier(logits, losses, targets, dloss, BT, V, Vp, true, 0);
                                          });
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("unfused/fused: %.2fx\n", t_unfused / t_fused);
    printf("fused_classifier after its producer: %.4f ms (from a cold L2: %.4f ms)\n", t_after - t_producer, t_fused);
    return 0;
}

} // namespace

int main(int argc, char** argv) { return bench::run_main(run, argc, argv); }
