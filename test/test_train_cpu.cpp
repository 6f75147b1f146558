// train_gpt2 end to end, as a user runs it: flags and exit codes, overfitting one batch, gradient
// accumulation, bit-exact resume, checkpoints as -e input. Uses a small-vocabulary model file so each
// run takes well under a second.
#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/util/rand.h"
#include "test/report_data.h"
#include "test/test_util.h"

using namespace llmc;
using testutil::run;
using testutil::slurp;
using testutil::TempDir;

namespace {

struct Step {
    int step;
    double loss, norm;
    std::string line_without_timing;
};

std::vector<Step> parse_steps(const std::string& out) {
    std::vector<Step> steps;
    std::regex re(R"((step +(\d+)/\d+ \| loss ([-0-9.naif]+) \| norm ([-0-9.naif]+) \| lr [^|]+)\|)");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
        steps.push_back({std::stoi((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4]), (*it)[1]});
    return steps;
}

/*
 * Two runs over the same tokens and math whose fp32 sums are taken in different orders: losses within 1e-4 and
 * norms within 1e-3 relative, the few ulps per element that AdamW carries into later steps.
 */
void expect_same_up_to_summation_order(const std::string& out_a, const std::string& out_b, size_t steps) {
    auto a = parse_steps(out_a), b = parse_steps(out_b);
    ASSERT_EQ(a.size(), steps) << out_a;
    ASSERT_EQ(b.size(), steps) << out_b;
    for (size_t i = 0; i < steps; i++) {
        EXPECT_NEAR(a[i].loss, b[i].loss, 1e-4 * a[i].loss) << i;
        EXPECT_NEAR(a[i].norm, b[i].norm, 1e-3 * a[i].norm) << i;
    }
}

std::vector<double> parse_val(const std::string& out) {
    std::vector<double> v;
    std::regex re(R"(val loss ([0-9.]+))");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
        v.push_back(std::stod((*it)[1]));
    return v;
}

// A data directory with train and val shards of token ids < 60, and a V=60 (Vp=64) model file.
class TrainCpu : public testing::Test {
protected:
    void SetUp() override {
        std::mt19937 g(42);
        // Low-entropy text (a repeating pattern with noise) so that val loss falls as the model learns.
        auto make = [&](size_t n) {
            std::vector<uint16_t> t(n);
            for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(g() % 8 == 0 ? g() % 60 : (i * 7) % 23);
            return t;
        };
        write_shard(dir / "toy_train.bin", make(20000));
        write_shard(dir / "toy_val.bin", make(4000));
        GPT2Config c;
        c.max_seq_len = 32;
        c.vocab_size = 60;
        c.padded_vocab_size = 64;
        c.num_layers = 2;
        c.num_heads = 2;
        c.channels = 32;
        GPT2CPU<float> m(c);
        m.init_random(7);
        save_model(model_path(), c, m.params_memory.data());
    }
    std::string model_path() const { return dir / "toy_model.bin"; }
    /*
     * `launch` + train(flags) straight into dir/a (`last` steps, a checkpoint at `mid`), then again from that
     * checkpoint alone in dir/b: the resumed steps and the last checkpoint must be the straight run's, bit for bit.
     * The two outputs come back in *straight and *resumed.
     */
    void expect_resume_bit_exact(const std::string& launch, const std::string& flags, int mid, int last,
                                 std::string* straight, std::string* resumed) const {
        auto a_run = run(launch + train(flags + "-o " + (dir / "a")));
        ASSERT_EQ(a_run.exit_code, 0) << a_run.output;
        ASSERT_EQ(run("mkdir -p " + (dir / "b") + " && cp " + checkpoint_model_path(dir / "a", mid) + " " +
                      checkpoint_state_path(dir / "a", mid) + " " + (dir / "b/"))
                      .exit_code,
                  0);
        auto b_run = run(launch + train(flags + "-y 1 -o " + (dir / "b")));
        ASSERT_EQ(b_run.exit_code, 0) << b_run.output;
        auto a = parse_steps(a_run.output), b = parse_steps(b_run.output);
        ASSERT_EQ(a.size(), (size_t)last);
        ASSERT_EQ(b.size(), (size_t)(last - mid));
        for (int i = 0; i < last - mid; i++) EXPECT_EQ(a[mid + i].line_without_timing, b[i].line_without_timing);
        EXPECT_EQ(slurp(checkpoint_model_path(dir / "a", last)), slurp(checkpoint_model_path(dir / "b", last)));
        EXPECT_EQ(slurp(checkpoint_state_path(dir / "a", last)), slurp(checkpoint_state_path(dir / "b", last)));
        *straight = a_run.output, *resumed = b_run.output;
    }
    // train_gpt2 on the toy data and model, -b 4 -t 16 and no samples unless `args` give their own (a flag is
    // given once).
    std::string train(const std::string& args) const { return sampling(0, args); }
    std::string sampling(int every, const std::string& args) const {
        std::string cmd = "./train_gpt2 -i " + dir.path + " -e " + model_path();
        const std::vector<std::pair<std::string, std::string>> defaults = {
            {" -b ", "4"}, {" -t ", "16"}, {" -s ", std::to_string(every)}};
        for (const auto& [flag, value] : defaults)
            if ((" " + args).find(flag) == std::string::npos) cmd += flag + value;
        return cmd + " " + args;
    }
    TempDir dir;
};

} // namespace

TEST(TrainCpuCli, HelpAndUsageErrors) {
    auto h = run("./train_gpt2 --help");
    EXPECT_EQ(h.exit_code, 0);
    EXPECT_NE(h.output.find("--checkpoint-every"), std::string::npos);
    auto bad = run("./train_gpt2 --nope");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_EQ(bad.output, "error: unknown flag '--nope' (see --help)\n");
    auto val = run("./train_gpt2 -b -3");
    EXPECT_EQ(val.exit_code, 2);
    EXPECT_NE(val.output.find("error: -b:"), std::string::npos);
    auto model = run("./train_gpt2 -e gpt5");
    EXPECT_EQ(model.exit_code, 2);
    EXPECT_NE(model.output.find("-e: 'gpt5' is neither dN"), std::string::npos);
    // CUDA graphs are the GPU trainer's: refused before anything is read.
    auto graphs = run("./train_gpt2 -e d1 -i /nonexistent/data --cuda-graph 1");
    EXPECT_EQ(graphs.exit_code, 2);
    EXPECT_EQ(graphs.output, "error: --cuda-graph 1: train_gpt2 runs on the CPU; CUDA graphs are train_gpt2cu's\n");
    EXPECT_NE(h.output.find("--cuda-graph 0|1"), std::string::npos) << h.output;
}

TEST(TrainCpuCli, MissingDataSaysHowToPrepareIt) {
    auto r = run("./train_gpt2 -e d1 -i data/tinyshakespeare_absent");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("data/tinyshakespeare_absent: not found; prepare it with `make tinyshakespeare`"),
              std::string::npos)
        << r.output;
}

// Inputs are checked before the model is allocated: with a model far too big to allocate, a missing data
// path is still what the user hears about.
TEST(TrainCpuCli, InputsAreCheckedBeforeTheModelIsAllocated) {
    auto r = run("./train_gpt2 -e d999 -i /nonexistent/llmc_data");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.output, "error: /nonexistent/llmc_data: no such file or directory\n");
}

TEST_F(TrainCpu, TotalBatchBeyondIntMicroBatchesOrOneEpoch) {
    // 2^40 and 2^35 tokens are 2^36 and 2^31 micro-batches of 2*8: more than an int holds.
    for (const char* d : {"1099511627776", "34359738368"}) {
        for (const char* x : {"", "-x 1"}) {
            auto r = run(train(std::string("-b 2 -t 8 -v 0 -d ") + d + " " + x));
            EXPECT_EQ(r.exit_code, 2) << r.output;
            EXPECT_EQ(r.output.rfind(std::string("error: -d: total batch ") + d, 0), 0u) << r.output;
        }
    }
    // Without -x the run is one epoch: a step bigger than the epoch would train nothing.
    auto r = run(train("-b 2 -t 8 -v 0 -d 32768"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("error: -d: one step takes 2048 micro-batches, more than one epoch"), std::string::npos)
        << r.output;
}

TEST_F(TrainCpu, DataThatIsAFifoIsRefused) {
    ASSERT_EQ(mkfifo((dir / "fifo_train.bin").c_str(), 0644), 0);
    auto r = run("timeout 60 ./train_gpt2 -i " + (dir / "fifo_train.bin") + " -e " + model_path() + " -b 4 -t 16 -x 1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.output, "error: " + (dir / "fifo_train.bin") + ": cannot open (not a regular file)\n");
}

TEST_F(TrainCpu, RejectsOutOfRangeTokensAndTooLongSequences) {
    std::vector<uint16_t> bad(200, 3);
    bad[150] = 60;
    write_shard(dir / "bad_train.bin", bad);
    auto r = run("./train_gpt2 -i " + (dir / "bad_train.bin") + " -e " + model_path() + " -b 1 -t 8 -x 1 -v 0 -s 0");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("bad_train.bin: token 150 has id 60"), std::string::npos) << r.output;
    auto t = run(train("-t 64 -x 1"));
    EXPECT_EQ(t.exit_code, 2);
    EXPECT_NE(t.output.find("-t: sequence length 64 exceeds the model's maximum 32"), std::string::npos) << t.output;
}

TEST_F(TrainCpu, OverfitsOneBatch) {
    auto r = run(train("-a 1 -x 40 -l 3e-3 -v 0"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto steps = parse_steps(r.output);
    ASSERT_EQ(steps.size(), 40u);
    EXPECT_NEAR(steps[0].loss, std::log(60.0), 0.3); // near-uniform predictions at init
    EXPECT_LT(steps.back().loss, 0.3 * steps[0].loss) << r.output;
}

// llm.c's CPU trainer's optimizer (beta2 0.999, no clipping, no weight decay) through the flags: overfitting one batch,
// the trainer's losses and norms are those of a plain loop over the same model code with the textbook AdamW update
// (Loshchilov & Hutter, bias-corrected; written here, not the trainer's), within the 6 printed decimals. The
// gradient norm is above 1 from the first step, so the default clipping is active in the default run, whose losses
// part from these (by little: Adam's step is nearly invariant to a gradient scale that changes slowly).
TEST_F(TrainCpu, LlmcCpuOptimizerSettingsGiveTheTextbookAdamW) {
    const int B = 4, T = 16, steps = 4;
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    const std::string common = "-a 1 -x 4 -v 0 -l 0.001 -k constant ";
    auto r = run(train(common + "--beta2 0.999 --grad-clip 0 -c 0"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("| AdamW b1 b2 eps / wd  | 0.9 0.999 1e-08 / 0 "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("| grad clip             | off "), std::string::npos) << r.output;
    std::vector<Step> got = parse_steps(r.output);
    ASSERT_EQ(got.size(), (size_t)steps) << r.output;

    ModelFile mf = load_model(model_path());
    GPT2CPU<float> m(mf.config);
    m.params_memory = mf.params;
    std::ifstream shard(dir / "toy_train.bin", std::ios::binary);
    std::vector<uint16_t> tok(B * T + 1);
    shard.seekg(HEADER_BYTES);
    shard.read(reinterpret_cast<char*>(tok.data()), tok.size() * sizeof(uint16_t));
    ASSERT_TRUE(shard.good());
    std::vector<int> inputs(tok.begin(), tok.end() - 1), targets(tok.begin() + 1, tok.end());
    const size_t n = m.params_memory.size();
    std::vector<float> mom(n, 0.0f), var(n, 0.0f);
    for (int t = 1; t <= steps; t++) {
        m.zero_grad();
        m.forward(inputs.data(), targets.data(), B, T);
        m.backward();
        double norm2 = 0;
        for (float g : m.grads_memory) norm2 += (double)g * g;
        EXPECT_NEAR(got[t - 1].loss, m.mean_loss, 2e-6) << "step " << t;
        EXPECT_NEAR(got[t - 1].norm, std::sqrt(norm2), 1e-4 * std::sqrt(norm2)) << "step " << t;
        if (t == 1) {
            ASSERT_GT(std::sqrt(norm2), 1.0) << "a norm below 1 would not tell clipping from none";
        }
        for (size_t i = 0; i < n; i++) {
            const float g = m.grads_memory[i];
            mom[i] = beta1 * mom[i] + (1.0f - beta1) * g;
            var[i] = beta2 * var[i] + (1.0f - beta2) * g * g;
            const float mhat = mom[i] / (1.0f - std::pow(beta1, (float)t));
            const float vhat = var[i] / (1.0f - std::pow(beta2, (float)t));
            m.params_memory[i] -= lr * (mhat / (std::sqrt(vhat) + eps));
        }
    }

    std::vector<Step> defaults = parse_steps(run(train(common)).output);
    ASSERT_EQ(defaults.size(), (size_t)steps);
    EXPECT_EQ(defaults[0].loss, got[0].loss);
    EXPECT_GT(std::fabs(defaults.back().loss - got.back().loss), 2e-5)
        << defaults.back().loss << " vs " << got.back().loss;
}

TEST_F(TrainCpu, ValLossFallsAndLogIsWritten) {
    auto r = run(train("-x 60 -l 3e-3 -v 30 -m 4 -o " + (dir / "out")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto val = parse_val(r.output);
    ASSERT_EQ(val.size(), 3u); // steps 0, 30, 60
    EXPECT_LT(val[2], val[0] - 0.5) << r.output;
    std::string log = slurp(dir / "out/main.log");
    EXPECT_NE(log.find("s:1 trl:"), std::string::npos);
    EXPECT_NE(log.find("s:60 tel:"), std::string::npos);
    // The per-sub-block table closes the run, every model sub-block present.
    for (const char* s : {"encoder", "ln1", "qkv", "attention", "attn_proj", "residual1", "ln2", "fc ", "gelu",
                          "fc_proj", "residual2", "lnf", "classifier", "optimizer", "grad_norm"})
        EXPECT_NE(r.output.find(std::string("\n") + s), std::string::npos) << s;
}

// Each step line ends with the time since training started and the time left at that pace; a val loss names
// the step it follows, numbered as the step lines are (step 0: before training).
TEST_F(TrainCpu, StepLinesShowElapsedAndEtaAndValLinesTheirStep) {
    auto r = run(train("-x 6 -v 3 -m 2"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::regex step_re(R"(^step +(\d+)/6 \| loss .* \| ([0-9.]+) s elapsed, ETA ([0-9.]+) s$)");
    std::vector<double> elapsed, eta;
    std::vector<int> val_steps;
    size_t pos = 0;
    while (pos < r.output.size()) {
        size_t eol = r.output.find('\n', pos);
        std::string line = r.output.substr(pos, eol - pos);
        pos = eol == std::string::npos ? r.output.size() : eol + 1;
        std::smatch m;
        if (std::regex_match(line, m, step_re)) elapsed.push_back(std::stod(m[2])), eta.push_back(std::stod(m[3]));
        else if (std::regex_match(line, m, std::regex(R"(^step +(\d+)/6 \| val loss [0-9.]+$)")))
            val_steps.push_back(std::stoi(m[1]));
    }
    ASSERT_EQ(elapsed.size(), 6u) << r.output;
    for (size_t i = 1; i < elapsed.size(); i++) EXPECT_GE(elapsed[i], elapsed[i - 1]) << r.output;
    // After the last step only the last val loss is left: an ETA of its cost, at most the whole run so far.
    EXPECT_LE(eta.back(), elapsed.back()) << r.output;
    EXPECT_EQ(val_steps, (std::vector<int>{0, 3, 6})) << r.output;
}

TEST_F(TrainCpu, GradientAccumulationMatchesTheBigBatch) {
    auto big = run(train("-x 3 -v 0 -b 4 -d 64"));
    auto acc = run(train("-x 3 -v 0 -b 2 -d 64"));
    ASSERT_EQ(big.exit_code, 0) << big.output;
    ASSERT_EQ(acc.exit_code, 0) << acc.output;
    EXPECT_NE(acc.output.find("| B / T / grad accum    | 2 / 16 / 2"), std::string::npos);
    expect_same_up_to_summation_order(big.output, acc.output, 3);
}

TEST_F(TrainCpu, ResumeIsBitExact) {
    // N steps straight, checkpointing at N/2 ...
    // ... against N/2 steps, save, resume from that checkpoint alone, N/2 more steps.
    std::string straight, resumed;
    expect_resume_bit_exact("", " -x 8 -l 1e-3 -u 2 -k cosine -q 0.1 -c 0.1 -v 4 -s 4 -g 8 -n 4 ", 4, 8, &straight,
                            &resumed);
    if (HasFatalFailure()) return;
    EXPECT_NE(resumed.find("resumed from"), std::string::npos);
    // Samples after the resume point use the restored RNG: the step-8 sample is the same text.
    auto last_sample = [](const std::string& out) {
        size_t begin = out.rfind("---- sample ----"), end = out.find("----------------", begin + 16);
        return out.substr(begin, end - begin);
    };
    EXPECT_NE(last_sample(straight).size(), 0u);
    EXPECT_EQ(last_sample(straight), last_sample(resumed));
}

// A run killed after its last checkpoint, resumed: main.log reads as if the run had never stopped.
TEST_F(TrainCpu, LogAfterResumeReadsAsOneRun) {
    std::string flags = " -x 8 -l 1e-3 -v 3 -m 2 -n 4 ";
    ASSERT_EQ(run(train(flags + "-o " + (dir / "a"))).exit_code, 0);
    // The interrupted run logged steps 5-8 but died before writing the step-8 checkpoint.
    ASSERT_EQ(run("cp -r " + (dir / "a") + " " + (dir / "b") + " && rm " + (dir / "b/model_00000008.bin") + " " +
                  (dir / "b/state_00000008.bin"))
                  .exit_code,
              0);
    auto resumed = run(train(flags + "-y 1 -o " + (dir / "b")));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    std::string log = slurp(dir / "a/main.log");
    EXPECT_NE(log.find("s:8 trl:"), std::string::npos) << log;
    EXPECT_EQ(slurp(dir / "b/main.log"), log);
}

// A state file whose step is not the one in its name is refused, and the failed resume changes no file.
TEST_F(TrainCpu, ResumeRefusesAStateForAnotherStep) {
    ASSERT_EQ(run(train("-x 4 -v 0 -n 4 -o " + (dir / "c"))).exit_code, 0);
    std::string state = dir / "c/state_00000004.bin";
    const std::string good = slurp(state);
    auto listing = [&] { return run("cd " + (dir / "c") + " && ls -l --time-style=+%s.%N && md5sum *").output; };
    for (int64_t step : {(int64_t)0, (int64_t)-1, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MIN}) {
        std::string bad = good;
        memcpy(&bad[ST_STEP * 4], &step, 8);
        {
            File f(state, "wb");
            f.write(bad.data(), bad.size());
        }
        std::string before = listing();
        auto r = run(train("-x 8 -v 0 -n 4 -y 1 -o " + (dir / "c")));
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output, strprintf("error: %s: state is for step %lld, its file name says step 4\n", state.c_str(),
                                      (long long)step));
        EXPECT_EQ(listing(), before) << step;
    }
    // The same checkpoint past the run's last step: refused too.
    {
        File f(state, "wb");
        f.write(good.data(), good.size());
    }
    auto r = run(train("-x 3 -v 0 -n 4 -y 1 -o " + (dir / "c")));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("-x: the checkpoint in " + (dir / "c") + " is at step 4, past this run's last step 3"),
              std::string::npos) << r.output;
}

// -e beside -y 1 must name the checkpoint's model: another dN or another model file is refused (it was ignored
// silently, while another -b was refused), the same one or none resumes (the banner names the checkpoint).
TEST_F(TrainCpu, ResumeRefusesAnotherModel) {
    ASSERT_EQ(run(train("-x 2 -v 0 -n 2 -o " + (dir / "c"))).exit_code, 0);
    GPT2Config other;
    other.max_seq_len = 32, other.vocab_size = 60, other.padded_vocab_size = 64;
    other.num_layers = 1, other.num_heads = 2, other.channels = 32;
    GPT2CPU<float> m(other);
    m.init_random(3);
    save_model(dir / "other_model.bin", other, m.params_memory.data());
    const std::string base = "./train_gpt2 -i " + dir.path + " -b 4 -t 16 -s 0 -x 3 -v 0 -n 3 -y 1 -o " + (dir / "c");
    const std::string ckpt = "L=2 NH=2 C=32 V=60 maxT=32";
    struct Case {
        std::string model, not_shape;
    };
    for (const Case& c : std::vector<Case>{{"d2", "L=2 NH=2 C=128 V=50257 maxT=1024"},
                                           {dir / "other_model.bin", "L=1 NH=2 C=32 V=60 maxT=32"}}) {
        auto r = run(base + " -e " + c.model);
        EXPECT_EQ(r.exit_code, 2) << r.output;
        EXPECT_EQ(r.output, "error: -e " + c.model + ": the checkpoint in " + (dir / "c") +
                                " (step 2) holds another model (" + ckpt + ", not " + c.not_shape +
                                "); resume with its -e, or without -e\n");
        EXPECT_FALSE(file_exists(checkpoint_model_path(dir / "c", 3))) << c.model;
    }
    auto same = run(base + " -e " + model_path());
    ASSERT_EQ(same.exit_code, 0) << same.output;
    auto none = run("./train_gpt2 -i " + dir.path + " -b 4 -t 16 -s 0 -x 4 -v 0 -n 4 -y 1 -o " + (dir / "c"));
    ASSERT_EQ(none.exit_code, 0) << none.output;
    EXPECT_NE(none.output.find("resumed from " + checkpoint_model_path(dir / "c", 3)), std::string::npos) << none.output;
}

// A --profile path that cannot be a directory is refused before the first step (it failed when the window closed
// and took the run down with no checkpoint).
TEST_F(TrainCpu, ProfilePathCheckedBeforeTraining) {
    const std::string file = dir / "existing";
    ASSERT_EQ(run("echo keep > '" + file + "'").exit_code, 0);
    auto r = run(train("-x 3 -v 0 -n 1 -o " + (dir / "ckp") + " --profile " + file + " --profile-start 1 --profile-steps 2"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("error: --profile: " + file + ": cannot create directory"), std::string::npos) << r.output;
    EXPECT_TRUE(parse_steps(r.output).empty()) << r.output;
    EXPECT_EQ(slurp(file), "keep\n");
}

// Inside an existing profile directory, a file of a profile's names that is a link, a FIFO or a directory is found
// before the first step (it was found only when the profile was written, after the run).
TEST_F(TrainCpu, ProfileFilesCheckedBeforeTraining) {
    const std::string prof = dir / "prof", target = dir / "precious.txt";
    ASSERT_EQ(run("mkdir -p " + prof + " && echo keep > " + target).exit_code, 0);
    struct Case {
        std::string make, name, what;
    };
    for (const Case& c : std::vector<Case>{{"ln -s " + target, "summary.txt", "a symbolic link"},
                                           {"mkfifo", "trace.json", "a FIFO"},
                                           {"mkdir", "profile.json", "a directory"},
                                           {"ln -s /dev/null", "memory.csv", "a symbolic link"}}) {
        const std::string path = prof + "/" + c.name;
        ASSERT_EQ(run("rm -rf " + prof + "/* && " + c.make + " " + path).exit_code, 0) << c.make;
        auto r = run("timeout 60 " + train("-x 3 -v 0 --profile " + prof + " --profile-start 1 --profile-steps 2"));
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output, "error: --profile: " + path + ": exists and is " + c.what +
                                "; an output must be a regular file or a new name\n");
    }
    EXPECT_EQ(slurp(target), "keep\n");
}

// The last checkpoint loads as a model file, and the run ends by saying how to generate from it.
TEST_F(TrainCpu, CheckpointLoadsAsModel) {
    auto r = run(train("-x 2 -v 0 -n 2 -o " + (dir / "c")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("generate from it: ./infer_gpt2 -e " + (dir / "c/model_00000002.bin") + " -p \"ROMEO:\" -n 64\n"),
              std::string::npos) << r.output;
    auto again = run("./train_gpt2 -i " + dir.path + " -e " + (dir / "c/model_00000002.bin") + " -b 4 -t 16 -x 1 -v 0 -s 0");
    ASSERT_EQ(again.exit_code, 0) << again.output;
    auto s = parse_steps(again.output);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_TRUE(std::isfinite(s[0].loss));
}

TEST_F(TrainCpu, NonFiniteLossStopsWithoutCheckpointing) {
    // A model whose final LayerNorm weight is NaN produces a NaN loss on the first step.
    ModelFile mf = load_model(model_path());
    size_t lnfw = 0;
    auto sizes = parameter_sizes(mf.config);
    for (int i = 0; i < LNFW; i++) lnfw += sizes[i];
    mf.params[lnfw] = NAN;
    save_model(dir / "nan_model.bin", mf.config, mf.params.data());
    auto r = run("./train_gpt2 -i " + dir.path + " -e " + (dir / "nan_model.bin") + " -b 4 -t 16 -s 0 -v 0 -x 4 -n 1 -o " +
                 (dir / "nan_out"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("error: loss is nan at step 1; stopping (checkpoints in -o are from before this step)"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(find_latest_checkpoint(dir / "nan_out"), -1);
    // Without checkpoints the line says nothing of them.
    r = run("./train_gpt2 -i " + dir.path + " -e " + (dir / "nan_model.bin") + " -b 4 -t 16 -s 0 -v 0 -x 4");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("error: loss is nan at step 1; stopping\n"), std::string::npos) << r.output;
}

// ---- the run directory (-o): what is in it is the run's own, and nothing else is touched ----

// main.log is an output like the checkpoints: a link there is refused (its target was overwritten with loss lines),
// a FIFO refused at once (it blocked the run for ever), and nothing is trained either way.
TEST_F(TrainCpu, LogThatIsALinkOrAFifoIsRefused) {
    const std::string out = dir / "r", target = dir / "precious.txt";
    ASSERT_EQ(run("mkdir -p " + out + " && echo keep > " + target + " && ln -s " + target + " " + out + "/main.log")
                  .exit_code,
              0);
    auto link = run(train("-x 2 -v 0 -o " + out));
    EXPECT_EQ(link.exit_code, 1) << link.output;
    EXPECT_EQ(link.output, "error: " + out + "/main.log: exists and is a symbolic link; an output must be a regular "
                                             "file or a new name\n");
    EXPECT_EQ(slurp(target), "keep\n");
    ASSERT_EQ(run("rm " + out + "/main.log && mkfifo " + out + "/main.log").exit_code, 0);
    auto fifo = run("timeout 60 " + train("-x 2 -v 0 -o " + out));
    EXPECT_EQ(fifo.exit_code, 1) << fifo.output;
    EXPECT_EQ(fifo.output, "error: " + out + "/main.log: exists and is a FIFO; an output must be a regular file or a "
                                             "new name\n");
}

// A log write that fails (here: the file-size limit, as a full disk would) is one error line; training and its
// checkpoints go on, and the run exits 1. A model small enough that its checkpoint files stay under the limit.
TEST_F(TrainCpu, FailedLogWriteIsOneErrorAndTheCheckpointsAreKept) {
    GPT2Config c;
    c.max_seq_len = 16, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 1, c.num_heads = 1, c.channels = 8;
    GPT2CPU<float> m(c);
    m.init_random(5);
    save_model(dir / "tiny.bin", c, m.params_memory.data());
    const std::string out = dir / "full";
    // ulimit -f counts 1024-byte blocks; with SIGXFSZ ignored a write past the limit fails with EFBIG.
    auto r = run("bash -c 'ulimit -f 16; trap \"\" XFSZ; exec ./train_gpt2 -i " + dir.path + " -e " +
                 (dir / "tiny.bin") + " -b 1 -t 8 -s 0 -v 0 -x 400 -n 100 -o " + out + "'");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(parse_steps(r.output).size(), 400u);
    std::smatch mt;
    const std::regex err("error: " + out + "/main.log: write failed \\([^)]*\\); training goes on without its log, "
                         "and the run will exit with status 1\n");
    EXPECT_TRUE(std::regex_search(r.output, mt, err)) << r.output;
    EXPECT_EQ(r.output.find("error:"), r.output.rfind("error:")) << "one error line\n" << r.output;
    for (int step : {100, 200, 300, 400}) {
        EXPECT_NO_THROW(load_model(checkpoint_model_path(out, step))) << step;
        EXPECT_NO_THROW(load_state(checkpoint_state_path(out, step), num_parameters(c), step)) << step;
    }
    const std::string log = slurp(out + "/main.log");
    EXPECT_GE(log.size(), 16u * 1024 - 100);
    EXPECT_LE(log.size(), 16u * 1024);
    EXPECT_EQ(log.rfind("s:1 trl:", 0), 0u);
}

// A run that does not resume refuses a directory holding another run's checkpoints (the issue's three runs: the
// third resumed the first run's step 8 with the second run's steps in its log), and changes nothing in it.
TEST_F(TrainCpu, FreshRunRefusesAnotherRunsCheckpoints) {
    const std::string out = dir / "r";
    ASSERT_EQ(run(train("-x 8 -v 0 -n 2 -o " + out)).exit_code, 0);
    const std::string before = run("cd " + out + " && ls -l --time-style=+%s.%N && md5sum *").output;
    for (const char* flags : {"-x 2 -v 0 -n 1 --seed 7", "-x 2 -v 0", "-x 2 -v 0 -y 0"}) {
        auto r = run(train(std::string(flags) + " -o " + out));
        EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.output;
        EXPECT_EQ(r.output, "error: -o " + out + ": holds another run's checkpoints (model_00000002.bin ... "
                                                 "state_00000008.bin, 8 files); pass -y 1 to resume that run, or choose "
                                                 "another -o\n")
            << flags;
        EXPECT_EQ(run("cd " + out + " && ls -l --time-style=+%s.%N && md5sum *").output, before) << flags;
    }
    auto resumed = run(train("-x 9 -v 0 -n 1 -y 1 -o " + out));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    const std::string log = slurp(out + "/main.log");
    for (int step = 1; step <= 9; step++) EXPECT_NE(log.find(strprintf("s:%d trl:", step)), std::string::npos) << log;
    // With -y 1 and only pieces of checkpoints (no state beside the model): refused as well.
    const std::string partial = dir / "partial";
    ASSERT_EQ(run("mkdir -p " + partial + " && cp " + out + "/model_00000009.bin " + partial).exit_code, 0);
    auto p = run(train("-x 2 -v 0 -y 1 -o " + partial));
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_EQ(p.output, "error: -o " + partial + ": holds another run's checkpoints (model_00000009.bin), none of them "
                                                 "complete (model_N.bin and state_N.bin); pass -y 1 to resume that run, "
                                                 "or choose another -o\n");
}

// One run at a time in a directory: a second run into an -o that another process holds is refused naming its pid
// (the lock is the kernel's: a process that dies leaves the directory free), before it writes anything.
TEST_F(TrainCpu, SecondRunIntoALockedDirectoryIsRefused) {
    const std::string out = dir / "r";
    ASSERT_EQ(run("mkdir -p " + out).exit_code, 0);
    {
        DirLock held(out, "-o");
        auto r = run(train("-x 2 -v 0 -n 1 -o " + out));
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output, strprintf("error: -o %s: in use by another run (pid %d); wait for it to end or choose "
                                      "another -o\n",
                                      out.c_str(), (int)getpid()));
        EXPECT_FALSE(file_exists(out + "/main.log"));
        EXPECT_TRUE(checkpoint_files(out).empty());
    }
    // A holder killed with SIGKILL: the kernel releases its lock, and the next run goes ahead.
    const pid_t child = fork();
    if (child == 0) {
        DirLock held(out, "-o");
        pause();
        _exit(0);
    }
    for (int i = 0; i < 500 && slurp(out + "/.lock") != std::to_string(child) + "\n"; i++) usleep(10000);
    auto refused = run(train("-x 2 -v 0 -o " + out));
    EXPECT_NE(refused.output.find(strprintf("(pid %d)", (int)child)), std::string::npos) << refused.output;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    auto ok = run(train("-x 2 -v 0 -n 1 -o " + out));
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_EQ(find_latest_checkpoint(out), 2);
}

// Two trainers started on one -o, as the issue's reproducer: the second is refused naming the first, which
// finishes with its own losses in its log.
TEST_F(TrainCpu, TwoRunsOnOneDirectoryDoNotMix) {
    const std::string out = dir / "r";
    const std::string first = train("-x 300 -v 0 -n 100 -o " + out) + " > " + (dir / "first.log") + " 2>&1 & echo $!";
    const int pid = std::stoi(run(first).output);
    for (int i = 0; i < 1000 && slurp(out + "/.lock") != std::to_string(pid) + "\n"; i++) usleep(10000);
    auto second = run(train("-x 2 -v 0 -n 1 --seed 7 -o " + out));
    EXPECT_EQ(second.exit_code, 1) << second.output;
    EXPECT_NE(second.output.find(strprintf("in use by another run (pid %d)", pid)), std::string::npos) << second.output;
    ASSERT_EQ(run(strprintf("while kill -0 %d 2>/dev/null; do sleep 0.05; done", pid)).exit_code, 0);
    const auto steps = parse_steps(slurp(dir / "first.log"));
    ASSERT_EQ(steps.size(), 300u) << slurp(dir / "first.log");
    const std::string log = slurp(out + "/main.log");
    EXPECT_NE(log.find(strprintf("s:300 trl:%.6f", steps.back().loss)), std::string::npos) << log;
    EXPECT_EQ(find_latest_checkpoint(out), 300);
}

// What a run killed mid-write left (the temporaries of its atomic writes) is removed by the next run into the
// directory; files of other names stay.
TEST_F(TrainCpu, StaleTemporariesAreRemovedAtStart) {
    const std::string out = dir / "r";
    ASSERT_EQ(run(train("-x 2 -v 0 -n 2 -o " + out)).exit_code, 0);
    for (const char* name : {"model_00000004.bin.tmp", "state_00000004.bin.tmp", "main.log.tmp",
                             "choices_00000004_rank0.txt.tmp", "notes.tmp", "model_4.bin.tmp"})
        std::ofstream(out + "/" + name) << "partial";
    auto r = run(train("-x 4 -v 0 -n 2 -y 1 -o " + out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("removed 4 temporary files left in " + out + " by a run that was stopped while writing"),
              std::string::npos)
        << r.output;
    for (const char* gone : {"model_00000004.bin.tmp", "state_00000004.bin.tmp", "main.log.tmp",
                             "choices_00000004_rank0.txt.tmp"})
        EXPECT_FALSE(file_exists(out + "/" + gone)) << gone;
    EXPECT_EQ(slurp(out + "/notes.tmp"), "partial");
    EXPECT_EQ(slurp(out + "/model_4.bin.tmp"), "partial");
    EXPECT_EQ(find_latest_checkpoint(out), 4);
}

// Samples come from the inference driver over a KV-cache decoder of the trained weights: the trainer's sample is
// infer_gpt2's output for the same checkpoint and seed; a -g beyond the context is said to be capped.
TEST_F(TrainCpu, SamplesAreTheInferenceDecodersOutput) {
    const std::string out = dir / "s";
    auto r = run(sampling(2, "-x 2 -v 0 -n 2 -g 12 -o " + out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("---- sample ----\n([0-9 ]+)\n"))) << r.output;
    const std::string sampled = m[1];
    Rng rng(1337); // --seed's default: the sample's seed is the first draw of the samples' stream
    const unsigned seed = rng.next_u32() & 0x7fffffff;
    auto infer = run(strprintf("./infer_gpt2 -e %s --prompt-ids 59 -n 12 --seed %u --json",
                               checkpoint_model_path(out, 2).c_str(), seed));
    ASSERT_EQ(infer.exit_code, 0) << infer.output;
    const nlohmann::json seq = nlohmann::json::parse(infer.output.substr(0, infer.output.find('\n')));
    std::string ids;
    for (int id : seq["ids"]) ids += std::to_string(id) + " ";
    EXPECT_EQ(sampled, ids);
    auto capped = run(sampling(1, "-x 1 -v 0 -g 100"));
    ASSERT_EQ(capped.exit_code, 0) << capped.output;
    EXPECT_NE(capped.output.find("samples: -g 100 is more than the model's context holds after the prompt: 31 tokens "
                                 "each"),
              std::string::npos)
        << capped.output;
    ASSERT_TRUE(std::regex_search(capped.output, m, std::regex("---- sample ----\n([0-9 ]+)\n"))) << capped.output;
    EXPECT_EQ(std::count(m[1].first, m[1].second, ' '), 31);
}

TEST_F(TrainCpu, ExplicitValDataMustExist) {
    auto r = run(train("-x 1 -j " + (dir / "no_such_val.bin")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("no_such_val.bin: no such file or directory"), std::string::npos) << r.output;
}

// ---- data parallelism (llmc/train/dist.h): two ranks of train_gpt2 under mpirun, one OpenMP thread each ----

namespace {
// --oversubscribe: two ranks even on a one-core machine; --allow-run-as-root: CI containers run as root.
const std::string MPIRUN = "OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -q ";
// "" when two ranks of ./train_gpt2 can run, else why not: no mpirun, or a trainer built without MPI (SAN=1
// builds leave it out), which refuses them.
std::string mpi_missing() {
    static const std::string why = [] {
        if (testutil::run("command -v mpirun").exit_code != 0) return std::string("mpirun not found (Debian: openmpi-bin)");
        if (testutil::run(MPIRUN + "-np 2 ./train_gpt2 --help").exit_code != 0)
            return std::string("./train_gpt2 was built without MPI (Debian: libopenmpi-dev; not under SAN=1)");
        return std::string();
    }();
    return why;
}
int count(const std::string& text, const std::string& part) {
    int n = 0;
    for (size_t p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) n++;
    return n;
}
} // namespace
#define SKIP_WITHOUT_MPIRUN() \
    if (!mpi_missing().empty()) GTEST_SKIP() << mpi_missing()

TEST_F(TrainCpu, TwoRanksMatchOneProcess) {
    SKIP_WITHOUT_MPIRUN();
    // -d 128 = 4 micro-batches of 2x16: one process runs all four, each rank two of them.
    const std::string flags = "-x 4 -v 0 -b 2 -l 1e-3 -d 128";
    auto one = run(train(flags));
    auto two = run(MPIRUN + "-np 2 " + train(flags));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    ASSERT_EQ(two.exit_code, 0) << two.output;
    EXPECT_TRUE(testutil::has(two.output, "| data-parallel ranks   | 2 ")) << two.output;
    EXPECT_TRUE(testutil::has(two.output, "| B / T / grad accum    | 2 / 16 / 2 ")) << two.output;
    EXPECT_EQ(count(two.output, "step    1/4"), 1) << "rank 0 alone prints\n" << two.output;
    // The same four micro-batches and the same math; only the order of the fp32 gradient sum differs
    // ((g0+g2)+(g1+g3) against ((g0+g1)+g2)+g3).
    expect_same_up_to_summation_order(one.output, two.output, 4);
}

// Without -x a run is one epoch of the train data, however many ranks share it.
TEST_F(TrainCpu, TwoRanksTrainOneEpochByDefault) {
    SKIP_WITHOUT_MPIRUN();
    const std::string flags = "-v 0 -b 32 -t 16 -d 1024"; // 20000 tokens: 39 batches of 512, 19 steps of 2
    auto one = run(train(flags)), two = run(MPIRUN + "-np 2 " + train(flags));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    ASSERT_EQ(two.exit_code, 0) << two.output;
    const size_t epoch = (20000 - 1) / 512 / 2;
    EXPECT_EQ(parse_steps(one.output).size(), epoch);
    EXPECT_EQ(parse_steps(two.output).size(), epoch);
}

// ZeRO-1 reduces into shards and updates each shard on its own rank; every element meets the same operations
// in the same order as under plain data parallelism, so the runs agree bit for bit.
TEST_F(TrainCpu, ShardedOptimizerMatchesPlainDataParallel) {
    SKIP_WITHOUT_MPIRUN();
    const std::string flags = " -x 4 -v 0 -b 2 -l 1e-3 -c 0.1 -d 64 -n 4 ";
    auto plain = run(MPIRUN + "-np 2 " + train(flags + "-z 0 -o " + (dir / "z0")));
    auto zero = run(MPIRUN + "-np 2 " + train(flags + "-z 1 -o " + (dir / "z1")));
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    ASSERT_EQ(zero.exit_code, 0) << zero.output;
    EXPECT_TRUE(testutil::has(zero.output, "optimizer sharded (ZeRO-1)")) << zero.output;
    auto a = parse_steps(plain.output), b = parse_steps(zero.output);
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    for (int i = 0; i < 4; i++) EXPECT_EQ(a[i].line_without_timing, b[i].line_without_timing);
    EXPECT_EQ(slurp(dir / "z0/model_00000004.bin"), slurp(dir / "z1/model_00000004.bin"));
    // The state file holds every rank's shard of the moments: the whole of them, as -z 0 has.
    EXPECT_EQ(slurp(dir / "z0/state_00000004.bin"), slurp(dir / "z1/state_00000004.bin"));
}

TEST_F(TrainCpu, TwoRankResumeIsBitExact) {
    SKIP_WITHOUT_MPIRUN();
    const std::string flags = " -x 6 -v 0 -b 2 -l 1e-3 -d 64 -z 1 -n 3 ";
    std::string straight, resumed;
    expect_resume_bit_exact(MPIRUN + "-np 2 ", flags, 3, 6, &straight, &resumed);
    if (HasFatalFailure()) return;
    // The same checkpoint with another rank count is refused, by rank 0 on one line.
    auto single = run(train(flags + "-y 1 -o " + (dir / "b")));
    EXPECT_EQ(single.exit_code, 2) << single.output;
    EXPECT_TRUE(testutil::has(single.output, "written by 2 data-parallel ranks, this run has 1")) << single.output;
}

// Errors every rank meets: one line, from rank 0, and a non-zero exit.
TEST_F(TrainCpu, DataParallelUsageErrors) {
    SKIP_WITHOUT_MPIRUN();
    // 3 micro-batches of 2x16 for 2 ranks.
    auto odd = run(MPIRUN + "-np 2 " + train("-x 1 -v 0 -b 2 -d 96"));
    EXPECT_NE(odd.exit_code, 0) << odd.output;
    EXPECT_EQ(count(odd.output, "error:"), 1) << odd.output;
    EXPECT_TRUE(testutil::has(odd.output, "error: -d: total batch 96 tokens is 3 micro-batches of B*T = 32, which 2 "
                                          "ranks cannot share"))
        << odd.output;
    // Rank 1 with another learning rate (mpirun's MPMD form: one command per rank).
    auto mixed = run(MPIRUN + "-np 1 " + train("-x 1 -v 0 -b 2 -d 64") + " : -np 1 " +
                     train("-x 1 -v 0 -b 2 -d 64 -l 0.5"));
    EXPECT_NE(mixed.exit_code, 0) << mixed.output;
    EXPECT_EQ(count(mixed.output, "error:"), 1) << mixed.output;
    EXPECT_TRUE(testutil::has(mixed.output, "error: 1 of 2 ranks were started with flags different from rank 0's"))
        << mixed.output;
}

// Every rank must train the same run. The flags can be the same while the files behind them differ (node-local
// copies, here each rank's working directory): other train data, or another model file, is one line from rank 0
// and every rank stops before training (else the ranks would train different models, or stop at different
// steps and hang).
TEST_F(TrainCpu, RanksMustSeeTheSameDataAndWeights) {
    SKIP_WITHOUT_MPIRUN();
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
    auto setup = [&](const std::string& wdir, const std::string& shard, const std::string& model) {
        std::filesystem::create_directories(wdir + "/data");
        std::filesystem::copy_file(shard, wdir + "/data/toy_train.bin");
        std::filesystem::copy_file(model, wdir + "/model.bin");
    };
    // Rank 1's shard is shorter than rank 0's, or as long with other tokens; rank 1's model another random init.
    std::vector<uint16_t> tokens(12000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)((i * 7) % 23);
    write_shard(dir / "short_train.bin", tokens);
    tokens.resize(20000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)((i * 5) % 29);
    write_shard(dir / "other_train.bin", tokens);
    GPT2CPU<float> other(load_model(model_path()).config);
    other.init_random(8);
    save_model(dir / "other_model.bin", other.config, other.params_memory.data());
    setup(dir / "same0", dir / "toy_train.bin", model_path());
    setup(dir / "data1", dir / "short_train.bin", model_path());
    setup(dir / "content1", dir / "other_train.bin", model_path());
    setup(dir / "model1", dir / "toy_train.bin", dir / "other_model.bin");
    const std::string flags = " -i data -e model.bin -b 2 -t 16 -d 64 -x 2 -v 0 -s 0";
    auto two = [&](const std::string& w1) {
        return run("timeout 120 env " + MPIRUN + "-np 1 --wdir " + (dir / "same0") + " " + cwd + "/train_gpt2" +
                   flags + " : -np 1 --wdir " + (dir / w1) + " " + cwd + "/train_gpt2" + flags);
    };
    auto data = two("data1");
    EXPECT_NE(data.exit_code, 0) << data.output;
    EXPECT_EQ(count(data.output, "error:"), 1) << data.output;
    EXPECT_TRUE(testutil::has(data.output, "error: 1 of 2 ranks see other data than rank 0 (1 train shards, 20000 "
                                           "tokens"))
        << data.output;
    EXPECT_EQ(count(data.output, "step    1/"), 0) << data.output;
    auto content = two("content1"); // the same size: told apart by content
    EXPECT_NE(content.exit_code, 0) << content.output;
    EXPECT_TRUE(testutil::has(content.output, "error: 1 of 2 ranks see other data than rank 0")) << content.output;
    auto model = two("model1");
    EXPECT_NE(model.exit_code, 0) << model.output;
    EXPECT_EQ(count(model.output, "error:"), 1) << model.output;
    EXPECT_TRUE(testutil::has(model.output, "error: 1 of 2 ranks start from other weights than rank 0 (model.bin)"))
        << model.output;
    EXPECT_EQ(count(model.output, "step    1/"), 0) << model.output;
    // The same files on both: it trains.
    setup(dir / "same1", dir / "toy_train.bin", model_path());
    auto same = two("same1");
    EXPECT_EQ(same.exit_code, 0) << same.output;
}

// An error only one rank meets (here a checkpoint only rank 0 writes: its path is taken by a directory) would
// leave the other rank waiting in its next collective: the failing rank names itself and stops them all.
TEST_F(TrainCpu, ErrorOnOneRankStopsEveryRank) {
    SKIP_WITHOUT_MPIRUN();
    std::filesystem::create_directories(dir / "ck/model_00000002.bin/taken");
    auto r = run("timeout 120 env " + MPIRUN + "-np 2 " + train("-x 4 -v 0 -b 2 -d 64 -n 2 -o " + (dir / "ck")));
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "the run hung\n" << r.output;
    EXPECT_TRUE(testutil::has(r.output, "error: rank 0 of 2: ")) << r.output;
    EXPECT_TRUE(testutil::has(r.output, "model_00000002.bin")) << r.output;
    EXPECT_EQ(count(r.output, "step    4/4"), 0) << "rank 1 trained on alone\n" << r.output;
}

// --profile under two ranks: a profile directory per rank, and rank 0's merged summary of communication and
// step times.
TEST_F(TrainCpu, TwoRankProfileShowsCommunication) {
    SKIP_WITHOUT_MPIRUN();
    const std::string prof = dir / "prof";
    auto r = run(MPIRUN + "-np 2 " + train("-x 3 -v 0 -b 2 -d 64 --profile " + prof + " --profile-start 1 --profile-steps 2"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* rank : {"rank0", "rank1"}) {
        auto rows = testutil::read_csv(prof + "/" + rank + "/subblocks.csv");
        bool comm = false;
        for (auto& row : rows) comm |= row["subblock"] == "comm";
        EXPECT_TRUE(comm) << rank << ": no comm row in subblocks.csv";
    }
    // The buckets' all-reduces on the reducer thread's track of the trace, beside backward: the 2 layers' and
    // the rest's, in each of the 2 profiled steps.
    const std::string trace0 = slurp(prof + "/rank0/trace.json");
    EXPECT_TRUE(testutil::has(trace0, "\"thread 1: ranges\"")) << "no reducer track";
    EXPECT_EQ(count(trace0, "\"cpu:mpi comm layer 0\""), 2);
    EXPECT_EQ(count(trace0, "\"cpu:mpi comm layer 1\""), 2);
    EXPECT_EQ(count(trace0, "\"cpu:mpi comm outside the layers\""), 2);
    // Each rank's trace names its rank, so HTA can analyse the set of traces together.
    EXPECT_TRUE(testutil::has(slurp(prof + "/rank1/trace.json"),
                              "\"distributedInfo\": {\"backend\": \"mpi\", \"rank\": 1, \"world_size\": 2}"));
    std::string merged = slurp(prof + "/distributed.txt");
    EXPECT_TRUE(testutil::has(merged, "data-parallel profile: 2 ranks")) << merged;
    EXPECT_TRUE(testutil::has(merged, "all_reduce")) << merged;
    // The gradient is summed in buckets while backward goes on (each of a layer's 12 tensors, then the 4 outside
    // the layers), beside the loss and the norm: at least 18 all-reduces a step, against 3 without buckets. How much
    // of it is hidden depends on how busy the machine is (Distributed.BackgroundReducerOverlapsTheCaller tests the
    // overlap itself); the share is reported either way.
    // This toy model's tensors are all under 64 KiB, so its buckets share the `all_reduce small` row with the
    // loss and the norm; both rows are counted.
    std::smatch m;
    int all_reduces = 0;
    const std::regex row_re(R"(\nall_reduce(?: small)? +([0-9]+) )");
    for (auto it = std::sregex_iterator(merged.begin(), merged.end(), row_re); it != std::sregex_iterator(); ++it)
        all_reduces += std::stoi((*it)[1]);
    EXPECT_GE(all_reduces, 1 + 3 * 18) << merged;
    ASSERT_TRUE(std::regex_search(merged, m, std::regex(R"(, ([0-9.]+)% of it hidden behind compute)"))) << merged;
    EXPECT_LE(std::stod(m[1]), 100.0) << merged;
    // Two ranks on this machine: shared memory, its peak from the memory bandwidth the profile measured.
    EXPECT_TRUE(testutil::has(merged, "link: shared memory, peak ")) << merged;
    EXPECT_EQ(count(merged, "<- straggler"), 1) << merged;
    // Each rank's report.html (where plotly is installed: test_report.cpp requires it) has the data-parallel section:
    // the rank, its comm rows, and the reducer's all-reduces on the trace, partly under the backward's ops or not.
    if (run("python3 -c 'import plotly'").exit_code == 0)
        for (int rank : {0, 1}) {
            const auto d = testutil::page_data(prof + "/rank" + std::to_string(rank) + "/report.html")["distributed"];
            ASSERT_TRUE(d.is_object()) << "rank " << rank;
            EXPECT_EQ(d["world_size"], 2);
            EXPECT_EQ(d["rank"], rank);
            EXPECT_FALSE(d["comm"].empty());
            EXPECT_GT(d["comm_us"].get<double>(), 0);
            EXPECT_LE(d["overlapped_us"].get<double>(), d["comm_us"].get<double>());
        }
    EXPECT_TRUE(testutil::has(merged, "rank            step    waiting  computing\n")) << merged;
    EXPECT_TRUE(testutil::has(merged, "small: messages under 64 KiB")) << merged;
    // HTA, where installed, reads the two traces as one set (test/hta_check.py; test_hta.cpp covers GPU ranks).
    if (run("python3 -c 'import hta.trace_analysis'").exit_code == 0) {
        auto hta = run("python3 test/hta_check.py " + prof);
        EXPECT_EQ(hta.exit_code, 0) << hta.output;
        EXPECT_TRUE(testutil::has(hta.output, "ranks: 2 traces, each with its directory's rank in distributedInfo"))
            << hta.output;
        EXPECT_TRUE(testutil::has(hta.output, "communication overlap: rank 1: no NCCL kernels")) << hta.output;
    }
}

// A trainer built without MPI (SAN=1 builds, or no libopenmpi-dev) run by a launcher of several ranks: one line
// saying so, never N independent runs writing the same files.
TEST_F(TrainCpu, BuildWithoutMpiRefusesSeveralRanks) {
    if (mpi_missing().find("without MPI") == std::string::npos)
        GTEST_SKIP() << "./train_gpt2 has MPI here (TwoRanks* test it)";
    auto r = run("PMI_SIZE=2 " + train("-x 1 -v 0"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("error: started as 2 ranks, but this build has no MPI", 0), 0u) << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
}

// --energy (doc/profiling.md, "Energy per sub-block"): with --profile only, --energy-seconds with --energy only (exit
// 2), and refused in one line before any step where the CPU's RAPL counter cannot be read (exit 1), not guessed.
TEST_F(TrainCpu, EnergyFlagsAndAnUnreadableCounter) {
    auto alone = run("./train_gpt2 -e d1 -i /nonexistent/data --energy");
    EXPECT_EQ(alone.exit_code, 2);
    EXPECT_EQ(alone.output, "error: --energy: only with --profile DIR\n");
    auto seconds = run("./train_gpt2 -e d1 -i /nonexistent/data --profile /tmp/x --energy-seconds 5");
    EXPECT_EQ(seconds.exit_code, 2);
    EXPECT_EQ(seconds.output, "error: --energy-seconds: only with --energy\n");
    auto zero = run("./train_gpt2 -e d1 --profile /tmp/x --energy --energy-seconds 0");
    EXPECT_EQ(zero.exit_code, 2);
    EXPECT_NE(zero.output.find("error: --energy-seconds:"), std::string::npos) << zero.output;
    auto r = run("LLMC_POWERCAP_ROOT=" + (dir / "no_powercap") + " ./train_gpt2 -i " + dir.path + " -e " +
                 model_path() + " -b 1 -t 16 -x 2 -v 0 -s 0 --profile " + (dir / "p") + " --profile-start 1 --energy");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("error: --energy: RAPL not readable: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step    1/2"), std::string::npos) << "refused before the first step\n" << r.output;
    EXPECT_EQ(r.output.find("ceilings"), std::string::npos) << "refused before the ceilings\n" << r.output;
}
