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
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <cub/cub.cuh>

#include "dev/cuda/bench_common.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cpu/classifier.h"

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

// Deterministic pseudo-random fill on the device (uniform in [-scale, scale]).
__global__ void fill_kernel(floatX* x, size_t n, float scale, unsigned seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = __float2bfloat16(scale * (2.0f * (h >> 8) / 16777216.0f - 1.0f));
}

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
    auto logits = round_bf16(bench::random_normal(n, 2.0f, 1));
    std::mt19937 g(2);
    std::vector<int> targets(BT);
    for (auto& t : targets) t = (int)(g() % V);
    const float dloss = 1.0f / BT;

    // CPU: C = Vp and wte = identity, so the head's matmul returns the logits exactly.
    std::vector<float> eye((size_t)Vp * Vp, 0.0f);
    for (int i = 0; i < Vp; i++) eye[(size_t)i * Vp + i] = 1.0f;
    std::vector<float> probs(n), losses(BT), dinp(n, 0.0f), dwte((size_t)Vp * Vp, 0.0f);
    llmc::cpu::classifier_forward(probs.data(), losses.data(), logits.data(), eye.data(), targets.data(), 1, BT, Vp, V,
                                  Vp);
    llmc::cpu::classifier_backward(dinp.data(), dwte.data(), probs.data(), logits.data(), eye.data(), targets.data(),
                                   dloss, 1, BT, Vp, V, Vp); // probs -> dlogits in place

    DevArray<floatX> d_logits(n);
    DevArray<int> d_targets(BT);
    DevArray<float> d_losses(BT);
    CUDA_CHECK(cudaMemcpy(d_targets, targets.data(), BT * sizeof(int), cudaMemcpyHostToDevice));
    bool ok = true;

    upload(d_logits, logits);
    CUDA_CHECK(cudaMemset(d_losses, 0xFF, BT * sizeof(float)));
    unfused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp);
    ok &= bench::validate("unfused loss (bf16 probs)", download(d_losses, BT), losses, 1e-2);
    ok &= bench::validate("unfused dlogits", download(d_logits, n), probs, 1e-2);

    upload(d_logits, logits);
    CUDA_CHECK(cudaMemset(d_losses, 0xFF, BT * sizeof(float)));
    llmc::fused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp, false, 0);
    ok &= bench::validate("fused loss only: loss", download(d_losses, BT), losses, 1e-5);
    ok &= bench::validate("fused loss only: logits kept", download(d_logits, n), logits, 0.0);

    CUDA_CHECK(cudaMemset(d_losses, 0xFF, BT * sizeof(float)));
    llmc::fused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp, true, 0);
    ok &= bench::validate("fused loss", download(d_losses, BT), losses, 1e-5);
    auto got = download(d_logits, n);
    ok &= bench::validate("fused dlogits", got, probs, 1e-2);
    bool pad_zero = true;
    for (int r = 0; r < BT; r++)
        for (int i = V; i < Vp; i++) pad_zero &= got[(size_t)r * Vp + i] == 0.0f;
    printf("  check %-28s %s\n", "fused padded dlogits == 0", pad_zero ? "OK" : "FAILED");
    return ok && pad_zero;
}

int run(int argc, char** argv) {
    int B = 16, T = 1024;
    const int V = 50257, Vp = 50304;
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

    // Padded columns, a chunk straddling V, and rows longer than one pass of the block (Vp / 8 > 512).
    if (!validate_small(32, 4100, 4112)) {
        fprintf(stderr, "validation FAILED\n");
        return 1;
    }

    const int BT = B * T;
    const size_t n = (size_t)BT * Vp;
    printf("\ntiming BT=%d V=%d Vp=%d (median of 20 after 5 warmup)\n", BT, V, Vp);
    DevArray<floatX> logits(n);
    DevArray<int> targets(BT);
    DevArray<float> losses(BT);
    fill_kernel<<<(unsigned)llmc::ceil_div(n, (size_t)256), 256>>>(logits, n, 4.0f, 1);
    CUDA_LAUNCH_CHECK();
    {
        std::mt19937 g(3);
        std::vector<int> t(BT);
        for (auto& x : t) x = (int)(g() % V);
        CUDA_CHECK(cudaMemcpy(targets, t.data(), BT * sizeof(int), cudaMemcpyHostToDevice));
    }
    const float dloss = 1.0f / BT;
    const double bytes_full = 4.0 * n + 8.0 * BT, bytes_loss = 2.0 * n + 8.0 * BT;

    const double t_loss = bench::time_ms([&] { llmc::fused_classifier(logits, losses, targets, dloss, BT, V, Vp, false, 0); });
    bench::report("fused_classifier (loss only)", t_loss, 0, bytes_loss, ceilings);
    const double t_unfused = bench::time_ms([&] { unfused_classifier(logits, losses, targets, dloss, BT, V, Vp); });
    bench::report("softmax + loss + dlogits (3 kernels)", t_unfused, 0, bytes_full, ceilings);
    const double t_fused = bench::time_ms([&] { llmc::fused_classifier(logits, losses, targets, dloss, BT, V, Vp, true, 0); });
    bench::report("fused_classifier (loss + dlogits)", t_fused, 0, bytes_full, ceilings);
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("unfused/fused: %.2fx\n", t_unfused / t_fused);
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
