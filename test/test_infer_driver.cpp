// The inference driver (llmc/infer/driver.h) over a fake backend that records what it is asked: the order of
// prefill, decode and sample, the rows each decode runs, the coins each sample gets (the Rng(--seed) stream, one
// per running sequence in sequence order, whatever the backend), stopping at -n and at EOT with --stop-eot, and
// the program's whole run from the flags to the output lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/model/gpt2_config.h"
#include "llmc/infer/driver.h"
#include "llmc/util/rand.h"
#include "llmc/infer/sampler.h"
#include "llmc/util/utils.h"

using namespace llmc;

namespace {

// What the fake backend was asked, in order.
struct FakeLog {
    std::vector<std::string> calls;            // "prefill 1|2,3,4", "decode 101", "sample", "load 123", ...
    std::vector<std::vector<float>> coins;     // per sample(): the coins of the rows it chose for (-1 elsewhere)
    int B = 0, longest = 0, max_len = 0;       // the factory's arguments
    bool cuda_graph = false;                   // ... and --cuda-graph
    bool gpu = false;                          // the fake stands for a GPU backend (it counts graph steps)
};

// The id sample() gives sequence b at step s (0: prefill, k: the k-th decode step).
using Script = std::function<int(int s, int b)>;

class FakeBackend : public InferBackend {
public:
    FakeBackend(FakeLog& log, Script script, int B) : log_(log), script_(std::move(script)), len_(B), ids_(B, -7) {}
    int elem_bytes() const override { return 3; }
    std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions&,
                                                          const prof::InferenceShape&) override {
        log_.calls.push_back("profile_session");
        return nullptr;
    }
    void load(std::vector<float> params) override { log_.calls.push_back("load " + std::to_string(params.size())); }
    size_t kv_cache_bytes() const override { return 4096; }
    int length(int b) const override { return len_.at(b); }
    void prefill(const std::vector<std::vector<int>>& prompts) override {
        std::string s = "prefill ";
        for (size_t b = 0; b < prompts.size(); b++) {
            for (size_t j = 0; j < prompts[b].size(); j++) s += (j ? "," : "") + std::to_string(prompts[b][j]);
            s += b + 1 < prompts.size() ? "|" : "";
            len_[b] = (int)prompts[b].size();
        }
        log_.calls.push_back(s);
        rows_.assign(len_.size(), true);
        step_ = 0;
    }
    void decode(const std::vector<bool>& running) override {
        std::string s = "decode ";
        for (size_t b = 0; b < running.size(); b++) {
            s += running[b] ? "1" : "0";
            if (running[b]) len_[b]++;
        }
        log_.calls.push_back(s);
        rows_ = running;
        step_++;
    }
    const int* sample(float, int, const std::vector<float>& coins) override {
        log_.calls.push_back("sample");
        std::vector<float> seen(coins.size(), -1.0f);
        for (size_t b = 0; b < coins.size(); b++)
            if (rows_[b]) seen[b] = coins[b], ids_[b] = script_(step_, (int)b);
        log_.coins.push_back(seen);
        return ids_.data();
    }
    double peak_memory_mib() const override { return 1.5; }
    // As the GPU backend: every decode step with --cuda-graph 1 (the fake has no warm-up step), none without.
    long graph_steps() const override { return !log_.gpu ? -1 : log_.cuda_graph ? std::max(step_, 0) : 0; }

private:
    FakeLog& log_;
    Script script_;
    std::vector<int> len_, ids_;
    std::vector<bool> rows_;
    int step_ = -1;
};

// The words of `flags` after the program's name, as main() gets them (no quoting: the tests' flags have no spaces).
struct Argv {
    explicit Argv(const std::string& flags) {
        std::istringstream in(flags);
        for (std::string w; in >> w;) words.push_back(w);
        for (std::string& w : words) ptrs.push_back(w.data());
    }
    int argc() { return (int)ptrs.size(); }
    char** argv() { return ptrs.data(); }
    std::vector<std::string> words{"fake_infer"};
    std::vector<char*> ptrs;
};

// generate() over the fake with these flags and prompts (EOT = 9): what the fake was asked, what came out and the
// profile's counts.
struct FakeRun {
    FakeRun(const std::string& flags, const std::vector<std::vector<int>>& prompts, const Script& script)
        : opt(parse(flags)), profile(opt, prompts, 3) {
        FakeBackend be(log, script, (int)prompts.size());
        out = generate(be, opt, prompts, 9, profile);
    }
    static InferOptions parse(const std::string& flags) {
        Argv a(flags);
        return parse_infer_options(a.argc(), a.argv());
    }
    InferOptions opt;
    InferProfile profile;
    FakeLog log;
    Generated out;
};

// The coins the driver must hand out: Rng(seed)'s stream, one per running sequence per step, in sequence order.
std::vector<std::vector<float>> expected_coins(uint64_t seed, const std::vector<std::vector<bool>>& running) {
    Rng rng(seed);
    std::vector<std::vector<float>> out;
    for (const auto& r : running) {
        out.emplace_back(r.size(), -1.0f);
        for (size_t b = 0; b < r.size(); b++)
            if (r[b]) out.back()[b] = rng.next_f32();
    }
    return out;
}

} // namespace

// Ragged prompts prefilled together, then decode steps for the running sequences only; sequence 1 draws EOT as
// its second token and stops there under --stop-eot, the others run to -n 4.
TEST(InferDriver, PrefillThenDecodeRunningRowsStopAtEot) {
    const std::vector<std::vector<int>> prompts = {{1}, {2, 3, 4}, {5, 6}};
    const Script script = [](int s, int b) { return b == 1 && s == 1 ? 9 : 10 * s + b; };
    const FakeRun run("-n 4 --stop-eot --seed 21", prompts, script);
    const FakeLog& log = run.log;
    const Generated& g = run.out;
    const prof::InferenceShape& shape = run.profile.shape;
    const std::vector<std::string> calls = {"prefill 1|2,3,4|5,6", "sample", "decode 111", "sample",
                                            "decode 101", "sample", "decode 101", "sample"};
    EXPECT_EQ(log.calls, calls);
    EXPECT_EQ(log.coins, expected_coins(21, {{1, 1, 1}, {1, 1, 1}, {1, 0, 1}, {1, 0, 1}}));

    ASSERT_EQ(g.seqs.size(), 3u);
    EXPECT_EQ(g.seqs[0].ids, (std::vector<int>{0, 10, 20, 30}));
    EXPECT_EQ(g.seqs[1].ids, (std::vector<int>{1, 9})); // EOT included
    EXPECT_EQ(g.seqs[2].ids, (std::vector<int>{2, 12, 22, 32}));
    for (size_t b = 0; b < 3; b++) EXPECT_EQ(g.seqs[b].prompt_ids, prompts[b]);
    EXPECT_EQ(g.sum.prefill_tokens, 6);
    EXPECT_EQ(g.sum.decode_tokens, 3 + 2 + 2);
    EXPECT_EQ(g.sum.step_ms.size(), 3u);
    EXPECT_GE(g.sum.ttft_ms, g.sum.prefill_ms);
    EXPECT_EQ(g.seqs[1].ttft_ms, g.sum.ttft_ms);
    // Sequence 1 took part in one decode step, the others in all three.
    EXPECT_DOUBLE_EQ(g.seqs[1].decode_ms, g.sum.step_ms[0]);
    EXPECT_DOUBLE_EQ(g.seqs[0].decode_ms, g.sum.step_ms[0] + g.sum.step_ms[1] + g.sum.step_ms[2]);
    // The profile's decode counts: the running rows, each attending its cached tokens and the new one.
    EXPECT_EQ(shape.decode_steps, 3);
    EXPECT_EQ(shape.decode_tokens, 7);
    EXPECT_DOUBLE_EQ(shape.decode_context, (2 + 4 + 3) + (3 + 4) + (4 + 5));
}

// Without --stop-eot an EOT is a token like any other; -n 1 takes its one token from the prefill (no decode).
TEST(InferDriver, EotRunsOnWithoutStopEotAndOneTokenNeedsNoDecode) {
    const Script script = [](int s, int b) { return s == 0 ? 9 : 100 + b; };
    const FakeRun on("-n 3 --seed 5", {{4}, {7, 8}}, script);
    EXPECT_EQ(on.out.seqs[0].ids, (std::vector<int>{9, 100, 100}));
    EXPECT_EQ(on.out.seqs[1].ids, (std::vector<int>{9, 101, 101}));
    EXPECT_EQ(on.log.coins, expected_coins(5, {{1, 1}, {1, 1}, {1, 1}}));

    const FakeRun stop("-n 3 --stop-eot", {{4}, {7, 8}}, script);
    EXPECT_EQ(stop.log.calls, (std::vector<std::string>{"prefill 4|7,8", "sample"}));
    EXPECT_TRUE(stop.out.sum.step_ms.empty());
    EXPECT_EQ(stop.out.seqs[1].ids, (std::vector<int>{9}));

    const FakeRun one("-n 1", {{4}}, script);
    EXPECT_EQ(one.log.calls, (std::vector<std::string>{"prefill 4", "sample"}));
    EXPECT_EQ(one.out.seqs[0].ids, (std::vector<int>{9}));
}

// A row whose logits are not finite stops the run with one error naming the sequence and its token.
TEST(InferDriver, NotFiniteStopsTheRun) {
    const Script script = [](int s, int b) { return s == 2 && b == 1 ? kNotFinite : 3; };
    try {
        FakeRun("-n 5", {{1}, {2}}, script);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "the model's logits are not finite (NaN or inf) for sequence 1, token 3: the model's "
                               "weights are not finite, or it diverged");
    }
}

namespace {

FakeLog* g_program_log = nullptr;

std::unique_ptr<InferBackend> make_fake_backend(const GPT2Config&, const InferShape& s) {
    g_program_log->B = s.B, g_program_log->longest = s.longest, g_program_log->max_len = s.max_len;
    g_program_log->cuda_graph = s.cuda_graph;
    g_program_log->calls.push_back("make");
    return std::make_unique<FakeBackend>(*g_program_log, [](int s, int b) { return 1000 * b + s; }, s.B);
}

// run_inference over the fake for these flags: exit code and stdout. log.gpu: the program is a GPU program's shape
// (CUDA graphs on by default, as infer_gpt2cu's), else a CPU program's.
std::pair<int, std::string> run_fake_program(const std::string& flags, FakeLog& log) {
    Argv a(flags);
    g_program_log = &log;
    InferOptions defaults;
    defaults.cuda_graph = log.gpu;
    const InferProgram program{"fake_infer", defaults, make_fake_backend, nullptr, nullptr, log.gpu};
    testing::internal::CaptureStdout();
    const int code = run_inference(program, a.argc(), a.argv());
    fflush(stdout);
    return {code, testing::internal::GetCapturedStdout()};
}

} // namespace

// The whole run: the backend made for the prompts' shape, loaded with the model's weights, stepped, and the
// output lines from its ids.
TEST(InferDriver, ProgramRunsFlagsToOutputLines) {
    FakeLog log;
    const auto [code, out] = run_fake_program("-e d1 --prompt-ids 5,6,7 -b 2 -n 3 --json", log);
    ASSERT_EQ(code, 0) << out;
    const GPT2Config d1 = gpt2_config_for_depth(1);
    EXPECT_EQ(log.B, 2);
    EXPECT_EQ(log.longest, 3);
    EXPECT_EQ(log.max_len, 6);
    const std::vector<std::string> calls = {"make", "load " + std::to_string(num_parameters(d1)),
                                            "prefill 5,6,7|5,6,7", "sample", "decode 11", "sample", "decode 11",
                                            "sample"};
    EXPECT_EQ(log.calls, calls); // no profile_session without --profile
    std::vector<nlohmann::json> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(lines.size(), 3u) << out;
    EXPECT_EQ(lines[0]["ids"], nlohmann::json({0, 1, 2}));
    EXPECT_EQ(lines[1]["ids"], nlohmann::json({1000, 1001, 1002}));
    EXPECT_EQ(lines[1]["prompt_ids"], nlohmann::json({5, 6, 7}));
    const nlohmann::json& s = lines[2]["summary"];
    EXPECT_EQ(s["B"], 2);
    EXPECT_EQ(s["prompt_len"], 3);
    EXPECT_EQ(s["gen_len"], 3);
    EXPECT_EQ(s["params"], num_parameters(d1));
    EXPECT_EQ(s["peak_mem_mib"], 1.5);
}

// --cuda-graph: a GPU program's backend is made with it, on by default, and the summary counts its graph steps (text
// and --json); a CPU program refuses --cuda-graph 1 before anything loads, and its summary has no such field.
TEST(InferDriver, CudaGraphReachesTheBackendAndTheSummary) {
    FakeLog gpu;
    gpu.gpu = true;
    const auto [code, out] = run_fake_program("-e d1 --prompt-ids 5,6,7 -b 2 -n 3", gpu);
    ASSERT_EQ(code, 0) << out;
    EXPECT_TRUE(gpu.cuda_graph);
    EXPECT_NE(out.find(" MiB | CUDA graphs: 2 of 2 decode steps\n"), std::string::npos) << out;
    FakeLog eager;
    eager.gpu = true;
    const auto [code0, json] = run_fake_program("-e d1 --prompt-ids 5,6,7 -b 2 -n 3 --json --cuda-graph 0", eager);
    ASSERT_EQ(code0, 0) << json;
    EXPECT_FALSE(eager.cuda_graph);
    EXPECT_NE(json.find("\"graph_steps\":0"), std::string::npos) << json;

    FakeLog cpu;
    const auto [code_cpu, plain] = run_fake_program("-e d1 --prompt-ids 5,6,7 -b 2 -n 3 --json", cpu);
    ASSERT_EQ(code_cpu, 0) << plain;
    EXPECT_FALSE(cpu.cuda_graph);
    EXPECT_EQ(plain.find("graph_steps"), std::string::npos) << plain;
    FakeLog refused;
    try {
        run_fake_program("-e d1 --cuda-graph 1", refused);
        FAIL() << "no error";
    } catch (const UsageError& e) {
        (void)testing::internal::GetCapturedStdout();
        EXPECT_STREQ(e.what(), "--cuda-graph 1: fake_infer runs on the CPU; CUDA graphs are infer_gpt2cu's");
    }
    EXPECT_TRUE(refused.calls.empty());
}

// --help names the program; --memory-plan is refused by a program without one, before anything loads.
TEST(InferDriver, HelpAndMemoryPlanRefusal) {
    FakeLog log;
    const auto [code, out] = run_fake_program("--help", log);
    EXPECT_EQ(code, 0);
    EXPECT_EQ(out.rfind("usage: fake_infer [options]", 0), 0u) << out;
    try {
        run_fake_program("--memory-plan", log);
        FAIL() << "no error";
    } catch (const UsageError& e) {
        (void)testing::internal::GetCapturedStdout();
        EXPECT_STREQ(e.what(), "--memory-plan: fake_infer has no GPU memory to plan; ./infer_gpt2cu --memory-plan "
                               "answers without a GPU");
    }
    EXPECT_TRUE(log.calls.empty());
}
