// Flag parsing (llmc/train/options.h), LR schedules (llmc/train/schedulers.h) and the sampler (llmc/infer/sampler.h).
#include <cmath>
#include <functional>
#include <new>
#include <stdexcept>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "llmc/train/options.h"
#include "llmc/infer/sampler.h"
#include "llmc/train/schedulers.h"
#include "test/test_util.h"

using namespace llmc;

namespace {
TrainOptions parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    testutil::CommandLine cl(std::move(args));
    return parse_train_options(cl.argc(), cl.argv(), TrainOptions{});
}
std::string usage_error(std::vector<std::string> args) {
    try {
        parse(args);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(no error)";
}
} // namespace

TEST(Cli, ShortAndLongFlags) {
    TrainOptions o = parse({"-i", "a/b", "-e", "d4", "-b", "8", "--seq-len", "128", "-d", "2048", "--lr=1e-3", "-k",
                            "linear", "-x", "50", "-y", "0", "--top-k", "40", "--temperature", "0.7"});
    EXPECT_EQ(o.train_data, "a/b");
    EXPECT_EQ(o.model, "d4");
    EXPECT_EQ(o.B, 8);
    EXPECT_EQ(o.T, 128);
    EXPECT_EQ(o.total_batch, 2048);
    EXPECT_FLOAT_EQ(o.lr, 1e-3f);
    EXPECT_EQ(o.schedule, Schedule::linear);
    EXPECT_EQ(o.max_steps, 50);
    EXPECT_EQ(o.top_k, 40);
    EXPECT_FLOAT_EQ(o.temperature, 0.7f);
    EXPECT_FALSE(o.help);
}

// The optimizer's flags: defaults are the GPU trainer's (llm.c's train_gpt2cu), each can be set, and values that
// would break the update (a decay of 1 divides by zero in the bias correction; eps 0 divides by zero) are refused.
TEST(Cli, AdamWFlags) {
    TrainOptions d = parse({});
    EXPECT_EQ(d.adam.beta1, 0.9f);
    EXPECT_EQ(d.adam.beta2, 0.95f);
    EXPECT_EQ(d.adam.eps, 1e-8f);
    EXPECT_EQ(d.adam.grad_clip, 1.0f);
    EXPECT_EQ(d.adam.weight_decay, 0.0f);
    TrainOptions o = parse({"--beta1", "0.8", "--beta2=0.999", "--eps", "1e-6", "--grad-clip", "0", "-c", "0.1"});
    EXPECT_EQ(o.adam.beta1, 0.8f);
    EXPECT_EQ(o.adam.beta2, 0.999f);
    EXPECT_EQ(o.adam.eps, 1e-6f);
    EXPECT_EQ(o.adam.grad_clip, 0.0f);
    EXPECT_EQ(o.adam.weight_decay, 0.1f);
    for (auto bad : std::vector<std::vector<std::string>>{
             {"--beta1", "1"}, {"--beta1", "-0.1"}, {"--beta2", "1.5"}, {"--eps", "0"}, {"--grad-clip", "-1"}, {"--eps", "inf"}})
        EXPECT_EQ(usage_error(bad).rfind(bad[0] + ":", 0), 0u) << bad[0] << " " << bad[1] << ": " << usage_error(bad);
    for (const char* flag : {"--beta1", "--beta2", "--eps", "--grad-clip"})
        EXPECT_NE(usage("train_gpt2", d).find(flag), std::string::npos) << flag;
}

TEST(Cli, TotalBatchDefaultsToOneMicroBatch) {
    TrainOptions o = parse({"-b", "3", "-t", "16"});
    EXPECT_EQ(o.total_batch, 48);
}

TEST(Cli, ErrorsNameTheFlag) {
    EXPECT_EQ(usage_error({"--bogus"}), "unknown flag '--bogus' (see --help)");
    EXPECT_NE(usage_error({"-b", "abc"}).find("-b: expected an integer"), std::string::npos);
    EXPECT_NE(usage_error({"-b", "0"}).find("-b:"), std::string::npos);
    EXPECT_NE(usage_error({"-l", "nan"}).find("-l:"), std::string::npos);
    EXPECT_NE(usage_error({"-k", "step"}).find("-k: unknown scheduler 'step'"), std::string::npos);
    EXPECT_NE(usage_error({"-x"}).find("-x: missing value"), std::string::npos);
    EXPECT_NE(usage_error({"-b", "4", "-t", "64", "-d", "100"}).find("-d: total batch 100"), std::string::npos);
    EXPECT_NE(usage_error({"-y", "1"}).find("-y:"), std::string::npos);
    EXPECT_NE(usage_error({"-n", "5"}).find("-n:"), std::string::npos);
    EXPECT_NE(usage_error({"-a", "2"}).find("-a:"), std::string::npos);
    EXPECT_EQ(usage_error({"--help=0"}), "--help: a switch, takes no value");
}

TEST(Cli, TotalBatchIsAtMostIntMaxMicroBatches) {
    EXPECT_EQ(parse({"-b", "2", "-t", "8", "-d", "64"}).grad_accum, 4);
    EXPECT_EQ(parse({"-b", "2", "-t", "8", "-d", "34359738352"}).grad_accum, 2147483647); // 16 * (2^31 - 1)
    // 2^35 / 16 = 2^31 and 2^40 / 16 = 2^36 micro-batches do not fit an int.
    for (const char* d : {"34359738368", "1099511627776"}) {
        std::string e = usage_error({"-b", "2", "-t", "8", "-d", d});
        EXPECT_EQ(e.rfind(std::string("-d: total batch ") + d + " tokens is", 0), 0u) << e;
        EXPECT_NE(e.find("micro-batches"), std::string::npos) << e;
    }
}

TEST(Cli, ProfileWindowEndsWithinIntRange) {
    EXPECT_EQ(parse({"--profile", "p", "--profile-start", "2147483647", "--profile-steps", "1"}).profile_start,
              2147483647);
    EXPECT_NE(usage_error({"--profile", "p", "--profile-start", "2147483647"}).find("--profile-start: the window of 5 "
                                                                                    "steps"),
              std::string::npos);
    EXPECT_NE(usage_error({"--profile", "p", "--profile-start", "2147483600", "--profile-steps", "49"})
                  .find("--profile-start:"),
              std::string::npos);
}

// --profile-start numbers steps as the step lines do, from 1: step 0 does not exist.
TEST(Cli, ProfileStartCountsFromOne) {
    EXPECT_EQ(parse({}).profile_start, 6);
    EXPECT_EQ(parse({"--profile", "p", "--profile-start", "1"}).profile_start, 1);
    EXPECT_NE(usage_error({"--profile", "p", "--profile-start", "0"}).find("--profile-start: expected an integer in [1, "),
              std::string::npos);
}

// The profile window's flags mean nothing without a profile: refused, as --device-memory is without --memory-plan;
// and a flag given twice is refused rather than the last value silently taken.
TEST(Cli, FlagsThatNeedAnotherOrWereGivenTwice) {
    EXPECT_EQ(usage_error({"--profile-start", "3"}), "--profile-start: only with --profile DIR");
    EXPECT_EQ(usage_error({"--profile-steps", "2"}), "--profile-steps: only with --profile DIR");
    EXPECT_EQ(usage_error({"-x", "5", "--max-steps", "6"}), "--max-steps: given more than once (-x and --max-steps are "
                                                            "one flag); give each flag once");
    EXPECT_EQ(usage_error({"--seed", "1", "--seed", "1"}), "--seed: given more than once; give each flag once");
}

// main_guard: whatever escapes the program, the user sees one "error: " line and exit status 1 or 2.
TEST(Cli, MainGuardTurnsEveryExceptionIntoOneLine) {
    struct Case {
        std::function<int()> fn;
        int status;
        std::string line;
    };
    std::vector<Case> cases{
        {[]() -> int { throw UsageError("-x: bad"); }, 2, "error: -x: bad\n"},
        {[]() -> int { throw Error("f.bin: bad"); }, 1, "error: f.bin: bad\n"},
        {[]() -> int { throw std::bad_alloc(); }, 1, "error: out of memory (try a smaller -b, -t or model)\n"},
        {[]() -> int { throw std::length_error("basic_string::_M_create"); }, 1, "error: basic_string::_M_create\n"},
        {[]() -> int { return 0; }, 0, ""},
    };
    for (const Case& c : cases) {
        testing::internal::CaptureStderr();
        int status = main_guard(c.fn);
        EXPECT_EQ(testing::internal::GetCapturedStderr(), c.line);
        EXPECT_EQ(status, c.status) << c.line;
    }
    // Each program names its own flags when memory runs out (inference has no -t), or none.
    auto oom = []() -> int { throw std::bad_alloc(); };
    testing::internal::CaptureStderr();
    EXPECT_EQ(main_guard(oom, "try a smaller -b, -n, prompt or model"), 1);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: out of memory (try a smaller -b, -n, prompt or model)\n");
    testing::internal::CaptureStderr();
    EXPECT_EQ(main_guard(oom, ""), 1);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: out of memory\n");
}

TEST(Cli, HelpListsEveryShortFlag) {
    EXPECT_TRUE(parse({"-h"}).help);
    std::string u = usage("prog", TrainOptions{});
    for (const char* f : {"-i", "-j", "-e", "-o", "-b", "-t", "-d", "-l", "-u", "-q", "-k", "-c", "-x", "-v", "-m",
                          "-s", "-g", "-n", "-y", "-a", "-h"})
        EXPECT_NE(u.find(std::string("  ") + f + ","), std::string::npos) << f;
}

TEST(Schedulers, CosineWithWarmup) {
    LRScheduler s{Schedule::cosine, 1.0f, 10, 0.1f, 110};
    EXPECT_FLOAT_EQ(s.lr(0), 0.1f);  // (0+1)/10
    EXPECT_FLOAT_EQ(s.lr(9), 1.0f);  // warmup done
    EXPECT_FLOAT_EQ(s.lr(10), 1.0f); // cos(0)
    EXPECT_NEAR(s.lr(60), 0.1f + 0.5f * 0.9f, 1e-6); // halfway: cos(pi/2) = 0
    EXPECT_NEAR(s.lr(110), 0.1f, 1e-6);
    EXPECT_NEAR(s.lr(35), 0.1f + 0.9f * 0.5f * (1 + std::cos(M_PI * 0.25)), 1e-6);
}

TEST(Schedulers, LinearAndConstant) {
    LRScheduler lin{Schedule::linear, 2.0f, 0, 0.0f, 100};
    EXPECT_FLOAT_EQ(lin.lr(0), 2.0f);
    EXPECT_FLOAT_EQ(lin.lr(25), 1.5f);
    EXPECT_FLOAT_EQ(lin.lr(100), 0.0f);
    LRScheduler con{Schedule::constant, 0.5f, 4, 0.0f, 100};
    EXPECT_FLOAT_EQ(con.lr(1), 0.25f);
    EXPECT_FLOAT_EQ(con.lr(3), 0.5f);
    EXPECT_FLOAT_EQ(con.lr(99), 0.5f);
    EXPECT_THROW(parse_schedule("cosin"), UsageError);
}

TEST(Sampler, FollowsTheDistribution) {
    // Counts over a uniform grid of coins reproduce the probabilities exactly (up to grid resolution).
    std::vector<float> p{0.1f, 0.0f, 0.6f, 0.3f};
    std::vector<int> counts(4, 0);
    const int N = 10000;
    for (int i = 0; i < N; i++) counts[sample_token(p.data(), 4, SamplerConfig{}, (i + 0.5f) / N)]++;
    EXPECT_EQ(counts[0], 1000);
    EXPECT_EQ(counts[1], 0);
    EXPECT_EQ(counts[2], 6000);
    EXPECT_EQ(counts[3], 3000);
}

TEST(Sampler, TemperatureAndTopK) {
    std::vector<float> p{0.2f, 0.5f, 0.3f};
    // top-1 always picks the mode.
    for (float coin : {0.0f, 0.3f, 0.99f}) EXPECT_EQ(sample_token(p.data(), 3, SamplerConfig{1.0f, 1}, coin), 1);
    // top-2 never picks the least likely token; the two kept share 0.5/0.8 and 0.3/0.8.
    EXPECT_EQ(sample_token(p.data(), 3, SamplerConfig{1.0f, 2}, 0.62f), 1);
    EXPECT_EQ(sample_token(p.data(), 3, SamplerConfig{1.0f, 2}, 0.63f), 2);
    // temperature 0.5 squares probabilities: 0.04, 0.25, 0.09 -> normalised 0.105, 0.658, 0.237
    EXPECT_EQ(sample_token(p.data(), 3, SamplerConfig{0.5f, 0}, 0.10f), 0);
    EXPECT_EQ(sample_token(p.data(), 3, SamplerConfig{0.5f, 0}, 0.11f), 1);
    EXPECT_EQ(sample_token(p.data(), 3, SamplerConfig{0.5f, 0}, 0.77f), 2);
}

// Every allowed temperature draws from softmax(logits / T), down to 1e-3: over GPT-2's vocabulary each token's
// probability is ~2e-5, and p^(1/T) alone underflows to 0 for every token below T ~ 0.003 (the draw then fell to
// token 0). At T = 1e-3 the draw is the mode whatever the coin; at T = 0.01 two tokens whose log-probabilities
// differ by 0.01 share the mass as 1 : e^-1, every other token vanishing.
TEST(Sampler, LowestTemperaturesDrawFromTheTemperedDistribution) {
    const int V = 50257, mode = 31777, second = 4242;
    std::vector<float> p(V, 1.0f / 60000);
    p[mode] = 4e-5f;
    // The others' weights relative to the mode are (60000 * 4e-5)^(-1/T) = 2.4^(-1/T): under 1e-76 here, so
    // every coin but a last few ulps from 0 draws the mode.
    for (float T : {1e-3f, 2e-3f, 5e-3f})
        for (float coin : {1e-3f, 0.5f, 0.9999f}) {
            EXPECT_EQ(sample_token(p.data(), V, SamplerConfig{T, 0}, coin), mode) << "T " << T << " coin " << coin;
            EXPECT_EQ(sample_token(p.data(), V, SamplerConfig{T, 1}, coin), mode) << "T " << T << " coin " << coin;
        }
    // Two tokens whose log-probabilities differ by 0.01 at T = 0.01: weights e^-1 (the lower id, first in the
    // CDF) and 1, the rest ~1e-38 each.
    p[second] = 4e-5f * std::exp(-0.01f);
    const double share = std::exp(-1.0) / (1.0 + std::exp(-1.0));
    EXPECT_EQ(sample_token(p.data(), V, SamplerConfig{0.01f, 0}, (float)share - 1e-3f), second);
    EXPECT_EQ(sample_token(p.data(), V, SamplerConfig{0.01f, 0}, (float)share + 1e-3f), mode);
    // A row of NaN (a broken model) still gives an id of the vocabulary.
    std::vector<float> nan_row(V, NAN);
    EXPECT_EQ(sample_token(nan_row.data(), V, SamplerConfig{1e-3f, 0}, 0.5f), 0);
}

// Messages and usage texts longer than any fixed buffer come out whole.
TEST(Cli, StrprintfKeepsLongMessages) {
    const std::string long_name(5000, 'x');
    const std::string s = strprintf("%s: %d", long_name.c_str(), 42);
    EXPECT_EQ(s.size(), 5004u);
    EXPECT_EQ(s.substr(4998), "xx: 42");
    EXPECT_EQ(strprintf("%s", ""), "");
}
