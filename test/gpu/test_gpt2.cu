// The whole GPU model against the CPU reference on a tiny config (head size 64, as the attention kernel
// needs): loss and every parameter gradient, ten AdamW steps, determinism; and train_gpt2cu end to end:
// bit-exact resume and checkpoints shared with train_gpt2. Skipped without a GPU.
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <regex>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/cpu/adamw.h"
#include "llmc/gpt2.cuh"
#include "llmc/cpu/gpt2.h"
#include "llmc/gpt2_init.h"
#include "test/gpu/gpu_test_util.cuh"
#include "test/test_util.h"

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
        cpu.params_memory = bf16_round(w);
        gpu.set_parameters(w.data());
    }
};

} // namespace

namespace {
// One forward and backward of a (b, t) batch on a model allocated for (B, T), against the CPU model.
void expect_loss_and_gradients_match_cpu(int B, int T, int b, int t) {
    SCOPED_TRACE(testing::Message() << "allocated (" << B << ", " << T << "), run (" << b << ", " << t << ")");
    Pair p(B, T, std::random_device{}());
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

TEST(GPT2GPU, LossAndEveryGradientMatchTheCPU) {
    REQUIRE_GPU();
    expect_loss_and_gradients_match_cpu(2, 48, 2, 48); // T not a multiple of the attention tile
}

// Smaller batches than allocated (the per-layer strides stay those of the allocation), and a t beyond the
// allocated T with b*t within it, as sampling runs.
TEST(GPT2GPU, ShapesOtherThanTheAllocatedOneMatchTheCPU) {
    REQUIRE_GPU();
    expect_loss_and_gradients_match_cpu(4, 32, 3, 20);
    expect_loss_and_gradients_match_cpu(4, 32, 1, 64);
}

TEST(GPT2GPU, RejectsOutOfRangeTokensAndShapes) {
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

TEST(GPT2GPU, TenAdamWStepsTrackTheCPU) {
    REQUIRE_GPU();
    const int B = 4, T = 64, steps = 10;
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
}

TEST(GPT2GPU, SameSeedSameBits) {
    REQUIRE_GPU();
    const int B = 2, T = 64;
    auto in = gputest::random_tokens(B * T, 500), tg = gputest::random_tokens(B * T, 500);
    auto run = [&] {
        Pair p(B, T, 99);
        std::vector<float> losses;
        auto batch = [&] { return std::make_pair(in.data(), tg.data()); };
        for (int t = 1; t <= 3; t++) losses.push_back(p.gpu.train_step(batch, B, T, 1, 1e-3f, AdamWConfig{}, t).first);
        return std::make_pair(losses, p.gpu.get_master_weights());
    };
    auto a = run(), b = run();
    EXPECT_EQ(a.first, b.first);
    EXPECT_TRUE(a.second == b.second) << "master weights differ between identical runs";
}

// ---- train_gpt2cu as a user runs it ----
namespace {
class TrainGpu : public testing::Test {
protected:
    void SetUp() override {
        REQUIRE_GPU_FOR_CHILD_PROCESS();
        std::mt19937 g(3);
        auto make = [&](size_t n) {
            std::vector<uint16_t> t(n);
            for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(g() % 8 == 0 ? g() % 500 : (i * 7) % 23);
            return t;
        };
        write_shard(dir / "toy_train.bin", make(40000));
        write_shard(dir / "toy_val.bin", make(8000));
        GPT2Config c = gputest::tiny_gpt2_config();
        std::vector<float> w(num_parameters(c));
        init_gpt2_parameters(w.data(), c, 5);
        save_model(dir / "toy_model.bin", c, w.data());
    }
    std::string args(const std::string& more) const {
        return " -i " + dir.path + " -e " + (dir / "toy_model.bin") + " -b 4 -t 64 -s 0 " + more;
    }
    static std::vector<std::string> step_lines(const std::string& out) {
        std::vector<std::string> v;
        std::regex re(R"(step +\d+/\d+ \| loss [^|]+\| norm [^|]+\| lr [^|]+)");
        for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
            v.push_back(it->str());
        return v;
    }
    testutil::TempDir dir;
};
} // namespace

TEST_F(TrainGpu, ResumeIsBitExact) {
    std::string flags = "-x 8 -l 1e-3 -u 2 -q 0.1 -c 0.1 -v 4 -n 4 ";
    auto a = testutil::run("./train_gpt2cu" + args(flags + "-o " + (dir / "a")));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(testutil::run("mkdir -p " + (dir / "b") + " && cp " + (dir / "a/*_00000004.bin") + " " + (dir / "b/")).exit_code, 0);
    auto b = testutil::run("./train_gpt2cu" + args(flags + "-y 1 -o " + (dir / "b")));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    auto la = step_lines(a.output), lb = step_lines(b.output);
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 4u);
    for (int i = 0; i < 4; i++) EXPECT_EQ(la[4 + i], lb[i]);
}

TEST_F(TrainGpu, CheckpointsMoveBetweenCpuAndGpuTrainers) {
    // GPU checkpoint (bf16 model + fp32 master) resumed by the CPU trainer, and a CPU checkpoint by the GPU one.
    auto g = testutil::run("./train_gpt2cu" + args("-x 2 -v 0 -n 2 -o " + (dir / "g")));
    ASSERT_EQ(g.exit_code, 0) << g.output;
    auto c = testutil::run("./train_gpt2" + args("-x 4 -v 0 -n 2 -y 1 -o " + (dir / "g")));
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_NE(c.output.find("resumed from"), std::string::npos);
    EXPECT_EQ(step_lines(c.output).size(), 2u);
    auto back = testutil::run("./train_gpt2cu" + args("-x 6 -v 0 -n 2 -y 1 -o " + (dir / "g")));
    ASSERT_EQ(back.exit_code, 0) << back.output;
    EXPECT_EQ(step_lines(back.output).size(), 2u);
}

TEST_F(TrainGpu, SamplesLongerThanTheTrainingSequence) {
    // -g 40 beyond -t 16: the sample runs forward on up to 40 positions of the 64 the model allows.
    for (const char* b : {"4", "1"}) { // with -b 1 the context is cut to the B*T = 16 positions allocated
        auto r = testutil::run("./train_gpt2cu -i " + dir.path + " -e " + (dir / "toy_model.bin") + " -b " + b +
                               " -t 16 -x 2 -v 0 -s 2 -g 40");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("---- sample ----"), std::string::npos) << r.output;
    }
}

TEST_F(TrainGpu, OutOfMemoryBatchGetsAMessage) {
    // GPT-2 124M at B=1024, T=1024 needs about 400 GB of activations: more than any single GPU has.
    std::vector<uint16_t> tokens(1024 * 1024 + 1);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i % 50257);
    ASSERT_EQ(testutil::run("mkdir -p " + (dir / "big")).exit_code, 0);
    write_shard(dir / "big/big_train.bin", tokens);
    auto r = testutil::run("./train_gpt2cu -i " + (dir / "big") + " -e d12 -b 1024 -t 1024 -x 1 -v 0 -s 0");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("error: -b 1024: needs"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the largest micro-batch that fits at T=1024 is"), std::string::npos) << r.output;
}
