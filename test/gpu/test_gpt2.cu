// The whole GPU model against the CPU reference on a tiny config (head size 64, as the attention kernel
// needs): loss and every parameter gradient, AdamW steps, determinism. Skipped without a GPU; also built
// against the emulator (suite EmuGPT2GPU). train_gpt2cu end to end is in test_train_gpu.cu.
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "llmc/cpu/adamw.h"
#include "llmc/gpu/gpt2.cuh"
#include "llmc/cpu/gpt2.h"
#include "llmc/model/gpt2_init.h"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using gputest::bf16_round;
using gputest::close_rel;
using gputest::DeviceBuffer;
using gputest::to_bf16;

namespace {

// Both models from the same weights: the CPU one gets the bf16-rounded values the GPU computes with.
struct Pair {
    GPT2Config cfg = gputest::tiny_gpt2_config();
    GPT2CPU<float> cpu{cfg};
    GPT2GPU gpu;
    Pair(int B, int T, uint64_t seed, bool cuda_graphs = false) : gpu(cfg, B, T, 0, 1, cuda_graphs) {
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

#ifdef LLMC_EMU
/*
 * Emulator only (it can make a chosen launch fault): with LLMC_SYNC=1 a kernel that faults is reported at its
 * launch, with the launch site and the sub-block, phase and layer it ran in. The fourth layernorm forward of a
 * two-layer model is layer 1's ln2.
 */
EMU_TEST(GPT2GPU, SyncAfterLaunchNamesTheFaultingLaunchAndSubBlock) {
    struct Sync { // LLMC_SYNC=1 for this test only
        Sync() { sync_after_launch() = true; }
        ~Sync() { sync_after_launch() = false; }
    } sync;
    std::string error;
    {
        Pair p(2, 16, 7);
        std::vector<int> in(32, 1), tg(32, 2);
        emu::inject_fault("layernorm_forward_kernel", 3);
        try {
            p.gpu.forward(in.data(), tg.data(), 2, 16, 1.0f, 1.0f);
        } catch (const Error& e) {
            error = e.what();
        }
        EXPECT_EQ(emu::take_faults().size(), 1u);
    }
    EXPECT_NE(error.find("CUDA error in the kernel launched at "), std::string::npos) << error;
    EXPECT_NE(error.find("llmc/layernorm.cuh:"), std::string::npos) << error;
    EXPECT_NE(error.find(" in sub-block ln2 (fwd, layer 1): "), std::string::npos) << error;
    EXPECT_NE(error.find("fault injected by the test"), std::string::npos) << error;
}
#endif

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

/*
 * CUDA graphs (llmc/gpu/step_graphs.cuh): steps of two micro-batches each, every micro-batch fresh tokens and every
 * step its own learning rate, run as graph launches leave the same losses, norms, master weights, moments and
 * bf16 parameters, bit for bit, as the eager steps. Each micro-step graph is captured at its second run and the
 * update's at the second step (launch and capture counts exact); the eager model launches none.
 */
GPU_TEST(GPT2GPU, GraphStepsAreTheEagerStepsBitForBit) {
    REQUIRE_GPU();
    const int B = 2, T = 32, accum = 2, steps = 3;
    const uint64_t seed = gputest::fresh_seed();
    Pair eager(B, T, seed, false), graphs(B, T, seed, true);
    AdamWConfig adam;
    adam.weight_decay = 0.1f;
    for (int t = 1; t <= steps; t++) {
        SCOPED_TRACE(testing::Message() << "step " << t);
        std::vector<std::vector<int>> tokens;
        for (int i = 0; i < 2 * accum; i++) tokens.push_back(gputest::random_tokens(B * T, eager.cfg.vocab_size));
        auto batches = [&tokens] {
            return [&tokens, i = 0]() mutable {
                i += 2;
                return std::make_pair(tokens[i - 2].data(), tokens[i - 1].data());
            };
        };
        const float lr = 1e-3f / t; // a learning rate of its own: read from device memory by the captured update
        const auto want = eager.gpu.train_step(batches(), B, T, accum, lr, adam, t);
        const auto got = graphs.gpu.train_step(batches(), B, T, accum, lr, adam, t);
        EXPECT_EQ(got.first, want.first) << "loss";
        EXPECT_EQ(got.second, want.second) << "grad norm";
    }
    EXPECT_TRUE(graphs.gpu.get_master_weights() == eager.gpu.get_master_weights()) << "master weights differ";
    EXPECT_TRUE(graphs.gpu.get_moments_m() == eager.gpu.get_moments_m()) << "m differs";
    EXPECT_TRUE(graphs.gpu.get_moments_v() == eager.gpu.get_moments_v()) << "v differs";
    EXPECT_TRUE(gputest::same_bits(gputest::download(graphs.gpu.params_memory, graphs.gpu.num_params),
                                   gputest::download(eager.gpu.params_memory, eager.gpu.num_params)))
        << "bf16 parameters differ";
    EXPECT_EQ(eager.gpu.graph_launches(), 0);
    EXPECT_EQ(graphs.gpu.graph_captures(), 2) << "the micro-step's graph and the update's";
    EXPECT_EQ(graphs.gpu.graph_launches(), (accum * steps - 1) + (steps - 1));
}

namespace {
/*
 * A stand-in for the all-reduce over two ranks that hold the same batch: each bucket of gradients is doubled
 * when backward hands it over, and the loss when the step finishes. It waits for the model's stream first, as
 * the real reduction's stream does for its event, and writes back on that stream (a plain cudaMemcpy to the
 * device could land after the model's non-blocking stream has read the buffer).
 */
struct DoublingReduce : GradientReduce {
    explicit DoublingReduce(GPT2GPU& g) : gpu(g) {}
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
    void layer_done(int layer) override {
        buckets.push_back(layer);
        for (const ParamRange& r : layer_parameter_ranges(gpu.config, layer))
            double_in_place(gpu.grads_memory + r.offset, r.count);
    }
    void finish(float* loss) override { double_in_place(loss, 1); }
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
    DoublingReduce reduce(rank.gpu);
    auto [loss2, norm2] = rank.gpu.train_step(batch, B, T, 1, 1e-3f, AdamWConfig{}, 1, 2, &reduce);
    EXPECT_EQ(loss1, loss2);
    EXPECT_EQ(norm1, norm2);
    std::vector<int> order;
    for (int l = one.cfg.num_layers - 1; l >= -1; l--) order.push_back(l);
    EXPECT_EQ(reduce.buckets, order);
    EXPECT_TRUE(one.gpu.get_master_weights() == rank.gpu.get_master_weights());
}

namespace {
// One rank's AdamW over its shard of the padded buffers: the whole bf16 parameters afterwards, and the shard's
// master weights and moments.
struct ShardUpdate {
    std::vector<floatX> params; // (padded)
    std::vector<float> master, m, v; // (shard)
};
ShardUpdate update_one_shard(const GPT2Config& cfg, int rank, int shards, const std::vector<float>& w,
                             const std::vector<float>& g, const std::vector<float>& m, const std::vector<float>& v,
                             float norm_squared, int t) {
    const size_t n = num_parameters(cfg), padded = padded_parameter_count(n, shards);
    const Shard s = shard_of(padded, rank, shards);
    auto padded_to = [](std::vector<float> x, size_t len) { x.resize(len, 0.0f); return x; };
    auto shard_part = [&](const std::vector<float>& x) {
        std::vector<float> p = padded_to(x, padded);
        return std::vector<float>(p.begin() + s.begin, p.begin() + s.end);
    };
    DeviceBuffer<floatX> params(to_bf16(padded_to(w, padded))), grads(to_bf16(padded_to(g, padded)));
    DeviceBuffer<float> master(shard_part(w)), mm(shard_part(m)), vv(shard_part(v));
    DeviceBuffer<float> sq(std::vector<float>{norm_squared});
    const AdamWConfig adam;
    DeviceBuffer<AdamWStep> step(std::vector<AdamWStep>{adamw_step(1e-3f, adam.beta1, adam.beta2, t)});
    adamw_update_shard(cfg, s, params, master, grads, mm, vv, step, adam.beta1, adam.beta2, adam.eps, 0.1f, sq, 1.0f, 0);
    return {params.download(), master.download(), mm.download(), vv.download()};
}
} // namespace

/*
 * ZeRO-1's update (llmc/train/dist_nccl.cuh drives it with NCCL): N ranks each update their shard of the padded
 * buffers, and what an all-gather would assemble (each rank's slice of the parameters, and the shards of master,
 * m, v laid end to end) is the one-shard update bit for bit, for N = 2 and 3 (shard boundaries inside tensors;
 * N = 3 pads the buffers), with clipping on (the same norm scalar for all: summing it over ranks is the
 * communicator's). The padding stays zero.
 */
GPU_TEST(GPT2GPU, ShardedUpdateAssemblesToTheWholeUpdate) {
    REQUIRE_GPU();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    const size_t n = num_parameters(cfg);
    const std::vector<float> w = gputest::random_normal(n, 0.1f), m = gputest::random_normal(n, 1e-3f);
    const std::vector<float> g = gputest::bf16_round(gputest::random_normal(n, 1e-2f)); // what the bf16 buffer holds
    std::vector<float> v = gputest::random_normal(n, 1e-4f);
    for (float& x : v) x = x * x; // a second moment is >= 0
    const float norm_squared = 4.0f; // norm 2 > clip 1: the gradients are scaled
    const int t = 3;
    const ShardUpdate whole = update_one_shard(cfg, 0, 1, w, g, m, v, norm_squared, t);
    ASSERT_EQ(whole.master.size(), n);
    for (int shards : {2, 3}) {
        SCOPED_TRACE(testing::Message() << shards << " shards");
        const size_t padded = padded_parameter_count(n, shards);
        ASSERT_EQ(padded % (8 * shards), 0u);
        if (shards == 3) {
            ASSERT_GT(padded, n); // the padding path runs
        }
        std::vector<floatX> params(padded);
        std::vector<float> master, mm, vv;
        bool boundary_inside_a_tensor = false;
        for (int r = 0; r < shards; r++) {
            const Shard s = shard_of(padded, r, shards);
            ASSERT_EQ(s.size(), padded / shards);
            auto sizes = parameter_sizes(cfg);
            size_t off = 0;
            for (size_t size : sizes) {
                boundary_inside_a_tensor |= r > 0 && off < s.begin && s.begin < off + size;
                off += size;
            }
            const ShardUpdate u = update_one_shard(cfg, r, shards, w, g, m, v, norm_squared, t);
            std::copy(u.params.begin() + s.begin, u.params.begin() + s.end, params.begin() + s.begin);
            master.insert(master.end(), u.master.begin(), u.master.end());
            mm.insert(mm.end(), u.m.begin(), u.m.end());
            vv.insert(vv.end(), u.v.begin(), u.v.end());
        }
        EXPECT_TRUE(boundary_inside_a_tensor);
        for (size_t i = n; i < padded; i++) {
            ASSERT_EQ(__bfloat162float(params[i]), 0.0f) << "parameter padding " << i;
            ASSERT_EQ(master[i], 0.0f) << "master padding " << i;
            ASSERT_EQ(mm[i], 0.0f) << "m padding " << i;
            ASSERT_EQ(vv[i], 0.0f) << "v padding " << i;
        }
        for (size_t i = 0; i < n; i++) {
            ASSERT_EQ(__bfloat162float(params[i]), __bfloat162float(whole.params[i])) << "params " << i;
            ASSERT_EQ(master[i], whole.master[i]) << "master " << i;
            ASSERT_EQ(mm[i], whole.m[i]) << "m " << i;
            ASSERT_EQ(vv[i], whole.v[i]) << "v " << i;
        }
    }
    // The update did something: the master weights moved.
    EXPECT_NE(whole.master, w);
}

namespace {
/*
 * A stand-in for ZeRO-1's collectives over two ranks that hold the same batch (ShardedReduce in
 * llmc/train/dist_nccl.cuh drives NCCL): the reduce-scatter doubles this rank's shard of the gradients (and the
 * loss), the norm's sum adds the other shard's squares of the doubled gradients; the all-gather is left out
 * (the test compares this rank's shard). It records the order of the calls.
 */
struct ShardedDoublingReduce : GradientReduce {
    explicit ShardedDoublingReduce(GPT2GPU& g) : gpu(g) {}
    GPT2GPU& gpu;
    std::vector<std::string> calls;
    std::vector<floatX> local; // the gradients before the reduction, for the other shard's norm
    // On the model's stream, which a plain cudaMemcpy from pageable memory need not have finished before.
    template <typename T> void upload(T* d, const T* h, size_t n) {
        CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(T), cudaMemcpyHostToDevice, gpu.stream));
        CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    }
    void layer_done(int) override { calls.push_back("layer"); }
    void finish(float* loss) override {
        calls.push_back("finish");
        local = gputest::download(gpu.grads_memory, gpu.padded_params);
        std::vector<floatX> g = local;
        for (size_t i = gpu.shard.begin; i < gpu.shard.end; i++) g[i] = (floatX)(2.0f * (float)g[i]);
        upload(gpu.grads_memory, g.data(), g.size());
        float l = gputest::download(loss, 1)[0] * 2.0f;
        upload(loss, &l, 1);
    }
    void sum_norm(float* sq) override {
        calls.push_back("sum_norm");
        double other = 0;
        for (size_t i = 0; i < local.size(); i++)
            if (i < gpu.shard.begin || i >= gpu.shard.end) other += std::pow(2.0 * (float)local[i], 2);
        float s = gputest::download(sq, 1)[0] + (float)other;
        upload(sq, &s, 1);
    }
    void gather_params() override { calls.push_back("gather_params"); }
};
} // namespace

/*
 * train_step with the optimizer sharded over two ranks of the same batch: the reduce-scatter comes after the
 * whole backward (after its last bucket), the norm is summed after it and before the update, the parameters
 * gathered last. Each rank's shard of the master weights, moments and parameters is one process's,
 * bit for bit (halving and doubling are exact, clipping is off so the norm's summation order does not matter);
 * the norm agrees to fp32 rounding.
 */
GPU_TEST(GPT2GPU, ShardedTrainStepMatchesOneProcessOnItsShard) {
    REQUIRE_GPU();
    const int B = 2, T = 32, shards = 2;
    const uint64_t seed = gputest::fresh_seed();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    auto in = gputest::random_tokens(B * T, cfg.vocab_size), tg = gputest::random_tokens(B * T, cfg.vocab_size);
    auto batch = [&] { return std::make_pair(in.data(), tg.data()); };
    AdamWConfig adam;
    adam.grad_clip = 0.0f;
    adam.weight_decay = 0.1f;
    std::vector<float> w(num_parameters(cfg));
    init_gpt2_parameters(w.data(), cfg, seed);
    GPT2GPU one(cfg, B, T);
    one.set_parameters(w.data());
    const std::vector<floatX> params0 = gputest::download(one.params_memory, one.num_params);
    auto [loss1, norm1] = one.train_step(batch, B, T, 1, 1e-3f, adam, 1);
    const std::vector<float> master1 = one.get_master_weights(), m1 = one.get_moments_m(), v1 = one.get_moments_v();
    const std::vector<floatX> params1 = gputest::download(one.params_memory, one.num_params);
    for (int r = 0; r < shards; r++) {
        SCOPED_TRACE(testing::Message() << "rank " << r);
        GPT2GPU rank(cfg, B, T, r, shards);
        rank.set_parameters(w.data());
        ASSERT_EQ(rank.shard.size() * shards, rank.padded_params);
        ShardedDoublingReduce reduce(rank);
        reduce.upload(rank.params_memory, params0.data(), params0.size()); // the other shard's: the all-gather's part
        auto [loss2, norm2] = rank.train_step(batch, B, T, 1, 1e-3f, adam, 1, shards, &reduce);
        std::vector<std::string> order(cfg.num_layers + 1, "layer"); // backward hands every bucket over, unused
        for (const char* call : {"finish", "sum_norm", "gather_params"}) order.push_back(call);
        EXPECT_EQ(reduce.calls, order);
        EXPECT_EQ(loss1, loss2);
        EXPECT_NEAR(norm1, norm2, 1e-5 * norm1);
        const Shard s = rank.shard;
        const size_t real = std::min(s.end, rank.num_params) - s.begin; // the shard's values that are parameters
        const std::vector<float> master2 = rank.get_master_weights();
        const std::vector<float> m2 = rank.get_moments_m(), v2 = rank.get_moments_v();
        ASSERT_EQ(master2.size(), s.size());
        const std::vector<floatX> params2 = gputest::download(rank.params_memory, rank.padded_params);
        for (size_t k = 0; k < real; k++) {
            ASSERT_EQ(master2[k], master1[s.begin + k]) << "master " << s.begin + k;
            ASSERT_EQ(m2[k], m1[s.begin + k]) << "m " << s.begin + k;
            ASSERT_EQ(v2[k], v1[s.begin + k]) << "v " << s.begin + k;
            ASSERT_EQ((float)params2[s.begin + k], (float)params1[s.begin + k]) << "params " << s.begin + k;
        }
    }
}

namespace {
__global__ void accumulate_kernel(float* y, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
__global__ void double_kernel(float* z, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] *= 2.0f;
}
} // namespace

/*
 * --energy's replays (llmc/gpu/step_graphs.cuh SubBlockGraphs): the body runs once while each sub-block range is
 * captured (its work done, the work outside every range too); a part replayed N times leaves the buffers as N eager
 * runs of its launches do, and a part that recurs across layers keeps one graph per layer, in order.
 */
GPU_TEST(SubBlockGraphs, ReplayedNTimesIsNEagerRuns) {
    REQUIRE_GPU();
    const int n = 300, N = 3;
    const std::vector<float> x0 = gputest::random_normal(n, 1.0f), y0 = gputest::random_normal(n, 1.0f),
                             z0 = gputest::random_normal(n, 1.0f);
    DeviceBuffer<float> x(x0), y(y0), y2(y0), z(z0), w(n);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    auto accumulate = [&](float* into) {
        accumulate_kernel<<<(n + 127) / 128, 128, 0, stream>>>(into, x, n);
        CUDA_LAUNCH_CHECK();
    };
    SubBlockGraphs graphs(stream, [&] {
        for (int l = 0; l < 2; l++) {
            Range r(SubBlock::fc, Phase::fwd, l);
            accumulate(l == 0 ? y.ptr : y2.ptr);
        }
        CUDA_CHECK(cudaMemsetAsync(w, 0, n * sizeof(float), stream)); // outside every sub-block
        Range r(SubBlock::optimizer, Phase::opt);
        double_kernel<<<(n + 127) / 128, 128, 0, stream>>>(z, n);
        CUDA_LAUNCH_CHECK();
    });
    CUDA_CHECK(cudaStreamSynchronize(stream));
    ASSERT_EQ(graphs.parts().size(), 2u);
    EXPECT_EQ(graphs.parts()[0].subblock, (int)SubBlock::fc);
    EXPECT_EQ(graphs.parts()[0].phase, (int)Phase::fwd);
    EXPECT_EQ(graphs.parts()[0].first_layer, 0);
    EXPECT_EQ(graphs.parts()[0].last_layer, 1);
    EXPECT_EQ(graphs.parts()[0].graphs.size(), 2u);
    EXPECT_EQ(graphs.parts()[1].subblock, (int)SubBlock::optimizer);
    EXPECT_EQ(graphs.parts()[1].first_layer, -1);
    // The body ran once: each buffer as one eager run leaves it.
    std::vector<float> want_y = y0, want_z = z0;
    for (int i = 0; i < n; i++) want_y[i] += x0[i], want_z[i] *= 2.0f;
    EXPECT_EQ(y.download(), want_y);
    EXPECT_EQ(y2.download(), want_y);
    EXPECT_EQ(z.download(), want_z);
    EXPECT_EQ(w.download(), std::vector<float>(n, 0.0f));
    // N replays of the fc part against N eager launches on a copy; the optimizer part untouched meanwhile.
    DeviceBuffer<float> eager(want_y);
    for (int k = 0; k < N; k++) accumulate(eager.ptr);
    graphs.replay(0, N);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(gputest::same_bits(y.download(), eager.download()));
    EXPECT_TRUE(gputest::same_bits(y2.download(), eager.download()));
    EXPECT_EQ(z.download(), want_z);
    graphs.replay(1, N);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (float& v : want_z) v *= 8.0f;
    EXPECT_EQ(z.download(), want_z);
    CUDA_CHECK(cudaStreamDestroy(stream));
}

/*
 * gpu_energy_work on a trained model: its parts are every (sub-block, phase) of the step, with the layers they
 * span; the whole step's graph replayed once is the step queued eagerly again, bit for bit; restore() puts back the
 * weights and moments the replays changed.
 */
GPU_TEST(GPT2GPU, EnergyReplaysAreTheStepAndRestoreTheModel) {
    REQUIRE_GPU();
    const int B = 2, T = 16, accum = 2;
    const uint64_t seed = gputest::fresh_seed();
    Pair a(B, T, seed), b(B, T, seed);
    EXPECT_THROW(gpu_energy_work(a.gpu), Error); // no step yet
    std::vector<std::vector<int>> tokens;
    for (int i = 0; i < 2 * accum; i++) tokens.push_back(gputest::random_tokens(B * T, a.cfg.vocab_size));
    auto batches = [&tokens] {
        return [&tokens, i = 0]() mutable {
            i += 2;
            return std::make_pair(tokens[i - 2].data(), tokens[i - 1].data());
        };
    };
    AdamWConfig adam;
    adam.weight_decay = 0.1f;
    a.gpu.train_step(batches(), B, T, accum, 1e-3f, adam, 1);
    b.gpu.train_step(batches(), B, T, accum, 1e-3f, adam, 1);
    const std::vector<float> master = a.gpu.get_master_weights(), m = a.gpu.get_moments_m(), v = a.gpu.get_moments_v();
    // The reference: the step queued again, eagerly.
    b.gpu.queue_last_step();
    CUDA_CHECK(cudaStreamSynchronize(b.gpu.stream));

    prof::EnergyWork work = gpu_energy_work(a.gpu);
    std::vector<std::string> names;
    for (const prof::ReplayTarget& t : work.targets) names.push_back(t.subblock + " " + t.phase + " " + t.layers);
    const std::vector<std::string> want = {
        "encoder fwd -",    "ln1 fwd 0-1",       "qkv fwd 0-1",       "attention fwd 0-1", "attn_proj fwd 0-1",
        "ln2 fwd 0-1",      "fc fwd 0-1",        "fc_proj fwd 0-1",   "lnf fwd -",         "classifier fwd -",
        "classifier bwd -", "lnf bwd -",         "fc_proj bwd 0-1",   "fc bwd 0-1",        "ln2 bwd 0-1",
        "attn_proj bwd 0-1", "attention bwd 0-1", "qkv bwd 0-1",      "ln1 bwd 0-1",       "encoder bwd -",
        "grad_norm opt -",  "optimizer opt -",   "step all -"};
    EXPECT_EQ(names, want);
    work.restore();
    EXPECT_TRUE(a.gpu.get_master_weights() == master) << "restore: master weights";
    EXPECT_TRUE(a.gpu.get_moments_m() == m && a.gpu.get_moments_v() == v) << "restore: moments";
    work.targets.back().replay(1); // the whole step
    work.clock.sync();
    EXPECT_TRUE(a.gpu.get_master_weights() == b.gpu.get_master_weights()) << "the step's graph: master weights";
    EXPECT_TRUE(a.gpu.get_moments_v() == b.gpu.get_moments_v()) << "the step's graph: v";
    EXPECT_TRUE(gputest::same_bits(gputest::download(a.gpu.params_memory, a.gpu.num_params),
                                   gputest::download(b.gpu.params_memory, b.gpu.num_params)));
    work.restore();
    EXPECT_TRUE(a.gpu.get_master_weights() == master);
}
