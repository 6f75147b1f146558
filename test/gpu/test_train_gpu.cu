// train_gpt2cu as a user runs it: bit-exact resume, checkpoints shared with train_gpt2, sampling past -t, and
// the out-of-memory message. Child processes on a real GPU; not part of the emulated tier.
#include <gtest/gtest.h>
#include <random>
#include <regex>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/model/gpt2_init.h"
#include "test/gpu/gpu_test_util.cuh"
#include "test/test_util.h"

using namespace llmc;

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

// With the cuBLASLt autotune on: the resumed process takes the algorithms the first one timed, recorded beside
// the checkpoint (choices_00000004_rank0.txt), and continues bitwise.
TEST_F(TrainGpu, ResumeIsBitExact) {
    std::string flags = "-x 8 -l 1e-3 -u 2 -q 0.1 -c 0.1 -v 4 -n 4 ";
    auto a = testutil::run("./train_gpt2cu" + args(flags + "-o " + (dir / "a")));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(testutil::run("mkdir -p " + (dir / "b") + " && cp " + (dir / "a/*_00000004*") + " " + (dir / "b/")).exit_code, 0);
    auto b = testutil::run("./train_gpt2cu" + args(flags + "-y 1 -o " + (dir / "b")));
    EXPECT_EQ(b.output.find("cuBLASLt algorithms are chosen again"), std::string::npos) << b.output;
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
