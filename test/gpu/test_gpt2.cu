// The whole GPU model against the CPU reference on a tiny config (head size 64, as the attention kernel
// needs): loss and every parameter gradient, AdamW steps, determinism. Skipped without a GPU; also built
// against the emulator (suite EmuGPT2GPU). train_gpt2cu end to end is in test_train_gpu.cu.
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <vector>

#include "llmc/cpu/adamw.h"
#include "llmc/gpt2.cuh"
#include "llmc/cpu/gpt2.h"
#include "llmc/gpt2_init.h"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using gputest::bf16_round;
using gputest::close_rel;

namespace {

// Both models from the same weights: the CPU one gets the bf16-rounded values the GPU computes with.
struct Pair {
    GPT2Config cfg = gputest::tiny_gpt2_config();
    GPT2CPU<float> cpu{cfg};
    GPT2GPU gpu;
    Pair(int B, int T, uint64_t seed) : gpu(cfg, B, T) {
        std::vector<float> w(num_parameters(cfg));
        init_gpt2_parameters(w.data(), cfg, seed);
        // Larger-than-init matmul and embedding weights make every sub-block's contribution visible in the
        // gradients. LayerNorm weights stay at 1: scaling them too would make the attention scores so large
        // (std ~13) that the softmax is nearly one-hot, and bf16 rounding of q and k alone moves its gradient
        // by several percent.
        auto sizes = parameter_sizes(cfg);
        size_t off = 0;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            bool layernorm = i == LN1W || i == LN1B || i == LN2W || i == LN2B || i == LNFW || i == LNFB;
            if (!layernorm)
                for (size_t j = off; j < off + sizes[i]; j++) w[j] *= 4.0f;
            off += sizes[i];
        }
        // Copied into the model's own buffer: assigning a new vector would leave its tensor views dangling.
        const std::vector<float> rounded = bf16_round(w);
        std::copy(rounded.begin(), rounded.end(), cpu.params_memory.begin());
        gpu.set_parameters(w.data());
    }
};

} // namespace

namespace {
// One forward and backward of a (b, t) batch on a model allocated for (B, T), against the CPU model.
void expect_loss_and_gradients_match_cpu(int B, int T, int b, int t) {
    SCOPED_TRACE(testing::Message() << "allocated (" << B << ", " << T << "), run (" << b << ", " << t << ")");
    Pair p(B, T, gputest::fresh_seed());
    auto in = gputest::random_tokens(b * t, p.cfg.vocab_size), tg = gputest::random_tokens(b * t, p.cfg.vocab_size);

    p.cpu.zero_grad();
    p.cpu.forward(in.data(), tg.data(), b, t);
    p.cpu.backward(1.0f);

    p.gpu.zero_grad();
    p.gpu.zero_loss();
    float scale = 1.0f / (b * t);
    p.gpu.forward(in.data(), tg.data(), b, t, scale, scale);
    p.gpu.backward();
    p.gpu.fetch_scalars();
    float loss = p.gpu.read_scalars().first;
    // bf16 activations through two layers: the loss agrees to about 1%.
    EXPECT_NEAR(loss, p.cpu.mean_loss, 1e-2 * p.cpu.mean_loss);

    std::vector<float> g = gputest::to_float(gputest::download(p.gpu.grads_memory, p.gpu.num_params));
    auto sizes = parameter_sizes(p.cfg);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        if (i == WTE) n = (size_t)p.cfg.vocab_size * p.cfg.channels; // padded rows: both exactly 0, below
        std::vector<float> gg(g.begin() + off, g.begin() + off + n);
        std::vector<float> cg(p.cpu.grads_memory.begin() + off, p.cpu.grads_memory.begin() + off + n);
        // bf16 gradients of bf16 activations, accumulated over B*T positions: 5e-2 relative L2.
        testing::AssertionResult close = close_rel(gg, cg, 5e-2, parameter_name(i));
        EXPECT_TRUE(close);
        if (close) printf("  %s\n", close.message()); // the measured errors, for the record
        off += sizes[i];
    }
    for (size_t i = (size_t)p.cfg.vocab_size * p.cfg.channels; i < sizes[WTE]; i++) ASSERT_EQ(g[i], 0.0f) << i;
}
} // namespace

GPU_TEST(GPT2GPU, LossAndEveryGradientMatchTheCPU) {
    REQUIRE_GPU();
    expect_loss_and_gradients_match_cpu(2, 48, 2, 48); // T not a multiple of the attention tile
}

// Smaller batches than allocated (the per-layer strides stay those of the allocation), and a t beyond the
// allocated T with b*t within it, as sampling runs.
GPU_TEST(GPT2GPU, ShapesOtherThanTheAllocatedOneMatchTheCPU) {
    REQUIRE_GPU();
    expect_loss_and_gradients_match_cpu(4, 32, 3, 20);
    expect_loss_and_gradients_match_cpu(4, 32, 1, 64);
}

GPU_TEST(GPT2GPU, RejectsOutOfRangeTokensAndShapes) {
    REQUIRE_GPU();
    Pair p(2, 16, 7);
    std::vector<int> in(32, 1), tg(32, 2);
    in[5] = p.cfg.vocab_size;
    try {
        p.gpu.forward(in.data(), tg.data(), 2, 16, 1.0f, 1.0f);
        ADD_FAILURE() << "token id V accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("input token id 500 at position 5"), std::string::npos) << e.what();
    }
    in[5] = 1, tg[0] = -1;
    EXPECT_THROW(p.gpu.forward(in.data(), tg.data(), 2, 16, 1.0f, 1.0f), Error);
    EXPECT_THROW(p.gpu.forward(in.data(), nullptr, 3, 16, 0.0f, 0.0f), Error); // b*t beyond the allocation
    EXPECT_THROW(p.gpu.backward(), Error);                                     // no forward with targets ran
    EXPECT_THROW(GPT2GPU(p.cfg, 1, p.cfg.max_seq_len + 1), Error);           // T beyond the model's maxT
}

// Ten steps on a device, two under the emulator (a step there takes seconds).
GPU_TEST(GPT2GPU, AdamWStepsTrackTheCPU) {
    REQUIRE_GPU();
    const int B = 4, T = 64, steps = gputest::kEmulated ? 2 : 10;
    Pair p(B, T, 1234);
    AdamWConfig adam;
    adam.weight_decay = 0.1f;
    std::vector<float> m(p.gpu.num_params, 0.0f), v(p.gpu.num_params, 0.0f);
    auto in = gputest::random_tokens(B * T, p.cfg.vocab_size), tg = gputest::random_tokens(B * T, p.cfg.vocab_size);
    float first_loss = 0;
    for (int t = 1; t <= steps; t++) {
        float lr = 1e-3f;
        p.cpu.zero_grad();
        p.cpu.forward(in.data(), tg.data(), B, T);
        p.cpu.backward(1.0f);
        double norm = cpu::global_norm(p.cpu.grads_memory.data(), p.cpu.num_parameters());
        cpu::adamw_update(p.cpu.params_memory.data(), p.cpu.grads_memory.data(), m.data(), v.data(), p.cfg, adam, lr,
                          t, norm);

        auto batch = [&] { return std::make_pair(in.data(), tg.data()); };
        auto [loss, gnorm] = p.gpu.train_step(batch, B, T, 1, lr, adam, t);
        if (t == 1) first_loss = loss;
        EXPECT_NEAR(loss, p.cpu.mean_loss, 2e-2 * p.cpu.mean_loss) << "step " << t;
        EXPECT_NEAR(gnorm, norm, 5e-2 * norm) << "step " << t;
    }
    EXPECT_LT(p.cpu.mean_loss, first_loss); // both trained on the fixed batch
    // The GPU's fp32 master weights after its updates against the CPU model's weights after its own. Their
    // gradients differ by bf16 rounding, and AdamW moves a weight by about lr whatever its gradient's size, so
    // where a small gradient's sign differs the two move 2 lr apart: the gap grows with the steps (measured
    // under the emulator: 2e-3 relative after 2 steps).
    EXPECT_TRUE(close_rel(p.gpu.get_master_weights(), p.cpu.params_memory, 3e-3 * steps, "master weights"));
}

GPU_TEST(GPT2GPU, SameSeedSameBits) {
    REQUIRE_GPU();
    const int B = 2, T = 64;
    auto in = gputest::random_tokens(B * T, 500), tg = gputest::random_tokens(B * T, 500);
    auto run = [&] {
        Pair p(B, T, 99);
        std::vector<float> losses;
        auto batch = [&] { return std::make_pair(in.data(), tg.data()); };
        const int steps = gputest::kEmulated ? 2 : 3;
        for (int t = 1; t <= steps; t++)
            losses.push_back(p.gpu.train_step(batch, B, T, 1, 1e-3f, AdamWConfig{}, t).first);
        return std::make_pair(losses, p.gpu.get_master_weights());
    };
    auto a = run(), b = run();
    EXPECT_EQ(a.first, b.first);
    EXPECT_TRUE(a.second == b.second) << "master weights differ between identical runs";
}

namespace {
/*
 * A stand-in for the all-reduce over two ranks that hold the same batch: each bucket of gradients is doubled
 * when backward hands it over, and the loss when the step finishes. It waits for the model's stream first, as
 * the real reduction's stream does for its event, and writes back on that stream (a plain cudaMemcpy to the
 * device could land after the model's non-blocking stream has read the buffer).
 */
struct DoublingReduce {
    GPT2GPU& gpu;
    std::vector<int> buckets; // in the order backward handed them over
    template <typename T> void double_in_place(T* d, size_t n) {
        std::vector<T> h(n);
        CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
        for (T& x : h) x = (T)(2.0f * (float)x); // exact: a power of two
        CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice, gpu.stream));
        CUDA_CHECK(cudaStreamSynchronize(gpu.stream)); // h goes out of scope
    }
    void layer_done(int layer) {
        buckets.push_back(layer);
        for (const ParamRange& r : layer_parameter_ranges(gpu.config, layer))
            double_in_place(gpu.grads_memory + r.offset, r.count);
    }
    void finish(float* loss) { double_in_place(loss, 1); }
};
} // namespace

/*
 * train_step as one of two data-parallel ranks (llmc/train/dist_nccl.cuh drives it with NCCL): every micro-batch
 * weighs half, and the buckets summed over two ranks with the same batch (doubled) must give one process's step
 * bit for bit, since halving and doubling are exact. A bucket handed over before its last gradient kernel, one
 * left out or one handed over twice would not; the buckets come in the order backward finishes them.
 */
GPU_TEST(GPT2GPU, DataParallelBucketsCoverEveryGradientOnce) {
    REQUIRE_GPU();
    const int B = 2, T = 32;
    const uint64_t seed = gputest::fresh_seed();
    Pair one(B, T, seed), rank(B, T, seed);
    auto in = gputest::random_tokens(B * T, one.cfg.vocab_size), tg = gputest::random_tokens(B * T, one.cfg.vocab_size);
    auto batch = [&] { return std::make_pair(in.data(), tg.data()); };
    auto [loss1, norm1] = one.gpu.train_step(batch, B, T, 1, 1e-3f, AdamWConfig{}, 1);
    DoublingReduce reduce{rank.gpu, {}};
    auto [loss2, norm2] = rank.gpu.train_step(batch, B, T, 1, 1e-3f, AdamWConfig{}, 1, 2, reduce);
    EXPECT_EQ(loss1, loss2);
    EXPECT_EQ(norm1, norm2);
    std::vector<int> order;
    for (int l = one.cfg.num_layers - 1; l >= -1; l--) order.push_back(l);
    EXPECT_EQ(reduce.buckets, order);
    EXPECT_TRUE(one.gpu.get_master_weights() == rank.gpu.get_master_weights());
}
