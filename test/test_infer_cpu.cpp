// CPU inference: the KV-cache decoder (llmc/cpu/gpt2_decoder.h) against the training forward's full
// recomputation, ragged batches against each sequence alone, the host plumbing of llmc/infer/, and infer_gpt2
// as a user runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/cpu/gpt2_decoder.h"
#include "llmc/infer/pick_token.h"
#include "llmc/infer/profile.h"
#include "llmc/infer/results.h"
#include "llmc/profiler/findings.h"
#include "llmc/profiler/report.h"
#include "test/infer_profile_check.h"
#include "test/test_util.h"

using namespace llmc;
using namespace testutil;

namespace {

// A 2-layer body (C=64, NH=2) with a small vocabulary, random weights: the decoder's plumbing, not GPT-2's head.
GPT2Config infer_config() {
    GPT2Config c = gpt2_config_for_depth(2);
    c.max_seq_len = 40;
    c.vocab_size = 1000;
    c.padded_vocab_size = 1024;
    return c;
}

std::vector<int> random_ids(int n, int V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int> ids(n);
    for (int& id : ids) id = (int)(rng.next_u32() % (uint32_t)V);
    return ids;
}

// softmax over the first V of a logits row, in double.
std::vector<double> softmax(const float* logits, int V) {
    double mx = *std::max_element(logits, logits + V), sum = 0;
    std::vector<double> p(V);
    for (int i = 0; i < V; i++) sum += p[i] = std::exp((double)logits[i] - mx);
    for (double& x : p) x /= sum;
    return p;
}

// Greedy continuation of `prompt` by n full forwards of the training model (no cache): the ground truth.
std::vector<int> greedy_recompute(GPT2CPU<float>& model, std::vector<int> ids, int n) {
    const int V = model.config.vocab_size;
    const size_t start = ids.size();
    for (int i = 0; i < n; i++) {
        model.forward(ids.data(), nullptr, 1, (int)ids.size());
        const float* p = model.probs(0, (int)ids.size() - 1);
        ids.push_back((int)(std::max_element(p, p + V) - p));
    }
    return std::vector<int>(ids.begin() + start, ids.end());
}

} // namespace

// Greedy tokens with the cache equal the tokens of full recomputation exactly, and at every generated
// position the cached logits give the training forward's probabilities. Both paths run the same ops in the
// same summation order (cpu::attention_row, row-independent matmuls), so the expected difference is rounding
// only: 1e-6 absolute on probabilities (fp32 ops, values in [0, 1]).
static void expect_cached_greedy_equals_recompute(const GPT2Config& c, int prompt_len, int n) {
    GPT2CPU<float> model(c);
    model.init_random(11);
    const std::vector<int> prompt = random_ids(prompt_len, c.vocab_size, 12);
    const std::vector<int> expected = greedy_recompute(model, prompt, n);

    GPT2DecoderCPU<float> dec(model, 1, (int)prompt.size() + n);
    std::vector<float> logits(c.padded_vocab_size);
    std::vector<int> ids = prompt, got;
    dec.append({prompt}, logits.data());
    for (int i = 0; i < n; i++) {
        const int next = pick_token(logits.data(), c.vocab_size, 0.0f, 0, 0.0f);
        // The training forward over the same prefix: its last position's probabilities.
        model.forward(ids.data(), nullptr, 1, (int)ids.size());
        const std::vector<double> p = softmax(logits.data(), c.vocab_size);
        const float* ref = model.probs(0, (int)ids.size() - 1);
        double worst = 0;
        for (int v = 0; v < c.vocab_size; v++) worst = std::max(worst, std::fabs(p[v] - ref[v]));
        EXPECT_LT(worst, 1e-6) << "generated position " << i;
        got.push_back(next);
        ids.push_back(next);
        if (i + 1 < n) dec.append({{next}}, logits.data());
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(dec.length(0), (int)prompt.size() + n - 1);
}

TEST(InferCPU, CachedGreedyEqualsRecompute) { expect_cached_greedy_equals_recompute(infer_config(), 7, 20); }

// A prompt long enough that prefill's attention takes the threads (GPT2DecoderCPU's ATTENTION_PARALLEL_MIN:
// 2 * 128 channels * (1 + ... + 95) keys and values > 2^20), then decode steps on one thread.
TEST(InferCPU, LongPromptCachedGreedyEqualsRecompute) {
    GPT2Config c = infer_config();
    c.max_seq_len = 100;
    ASSERT_EQ(c.channels, 128);
    expect_cached_greedy_equals_recompute(c, 95, 5);
}

// Prompts of lengths 1, 5 and 9 prefilled together, then decoded together with one sequence idle for a step,
// give each sequence the logits it gets alone (same ops per row: expected equal to rounding, 1e-5 relative to
// the row's largest logit) and the same greedy tokens.
TEST(InferCPU, RaggedBatchEqualsEachAlone) {
    const GPT2Config c = infer_config();
    const int Vp = c.padded_vocab_size, V = c.vocab_size, steps = 6;
    GPT2CPU<float> model(c);
    model.init_random(21);
    const std::vector<std::vector<int>> prompts = {random_ids(1, V, 1), random_ids(5, V, 2), random_ids(9, V, 3)};
    const int B = (int)prompts.size();

    // Together: sequence 1 sits out decode step 2 and catches up at the end, so rows of different sequences
    // sit at different positions in every call.
    GPT2DecoderCPU<float> dec(model, B, 9 + steps + 1);
    std::vector<float> logits((size_t)B * Vp);
    std::vector<std::vector<float>> together(B); // every logits row each sequence produced, in order
    std::vector<std::vector<int>> ids(B);
    auto take = [&](int b) {
        const float* row = logits.data() + (size_t)b * Vp;
        together[b].insert(together[b].end(), row, row + Vp);
        ids[b].push_back(pick_token(row, V, 0.0f, 0, 0.0f));
    };
    dec.append(prompts, logits.data());
    for (int b = 0; b < B; b++) take(b);
    for (int s = 0; s < steps; s++) {
        std::vector<std::vector<int>> step(B);
        for (int b = 0; b < B; b++)
            if (!(b == 1 && s == 2)) step[b] = {ids[b].back()};
        dec.append(step, logits.data());
        for (int b = 0; b < B; b++)
            if (!step[b].empty()) take(b);
    }
    std::vector<std::vector<int>> catch_up(B);
    catch_up[1] = {ids[1].back()};
    dec.append(catch_up, logits.data());
    take(1);

    for (int b = 0; b < B; b++) {
        SCOPED_TRACE("sequence " + std::to_string(b));
        GPT2DecoderCPU<float> alone(model, 1, 9 + steps + 1);
        std::vector<float> row(Vp);
        std::vector<int> alone_ids;
        alone.append({prompts[b]}, row.data());
        for (size_t k = 0;; k++) {
            const float* t = together[b].data() + k * Vp;
            const float scale = std::fabs(*std::max_element(row.begin(), row.begin() + V));
            for (int v = 0; v < V; v++) ASSERT_NEAR(t[v], row[v], 1e-5f * scale) << "token " << k << " logit " << v;
            alone_ids.push_back(pick_token(row.data(), V, 0.0f, 0, 0.0f));
            if (alone_ids.size() == ids[b].size()) break;
            alone.append({{alone_ids.back()}}, row.data());
        }
        EXPECT_EQ(alone_ids, ids[b]);
    }
}

TEST(InferCPU, DecoderRefusesOverflowAndBadIds) {
    const GPT2Config c = infer_config();
    GPT2CPU<float> model(c);
    model.init_random(3);
    GPT2DecoderCPU<float> dec(model, 2, 4);
    std::vector<float> logits(2 * c.padded_vocab_size);
    EXPECT_THROW(dec.append({{1, 2, 3, 4, 5}, {}}, logits.data()), Error);
    EXPECT_THROW(dec.append({{1}, {c.vocab_size}}, logits.data()), Error);
    EXPECT_THROW(dec.append({{1}}, logits.data()), Error);
    EXPECT_THROW(GPT2DecoderCPU<float>(model, 1, c.max_seq_len + 1), Error);
    EXPECT_EQ(dec.cache_bytes(), 2 * sizeof(float) * c.num_layers * 2 * 4 * c.channels);
}

// Temperature 0 and top-k 1 both pick the largest logit, whatever the coin; a coin just below 1 at a high
// temperature can reach a token that greedy never picks.
TEST(InferCPU, PickToken) {
    const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.9f, 0.0f};
    for (float coin : {0.0f, 0.3f, 0.999f}) {
        EXPECT_EQ(pick_token(logits.data(), 5, 0.0f, 0, coin), 1);
        EXPECT_EQ(pick_token(logits.data(), 5, 1.0f, 1, coin), 1);
    }
    EXPECT_EQ(pick_token(logits.data(), 5, 100.0f, 0, 0.9999f), 4);
    EXPECT_EQ(pick_token(logits.data(), 5, 1.0f, 2, 0.999f), 3); // top 2 = {1, 3}
}

TEST(InferCPU, Quantile) {
    EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.5), 2.5);
    EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.0), 1);
    EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 1.0), 4);
    EXPECT_DOUBLE_EQ(quantile({10, 20}, 0.9), 19);
}

// ---- infer_gpt2 as a user runs it ----

namespace {
std::string infer(const std::string& args) {
    return "GPT2_VOCAB_DIR=" + testutil::vocab_dir() + " ./infer_gpt2 " + args;
}
std::vector<nlohmann::json> json_lines(const std::string& out) {
    std::vector<nlohmann::json> v;
    size_t pos = 0;
    while (pos < out.size()) {
        size_t eol = std::min(out.find('\n', pos), out.size());
        if (eol > pos) v.push_back(nlohmann::json::parse(out.substr(pos, eol - pos)));
        pos = eol + 1;
    }
    return v;
}
} // namespace

TEST(InferProgram, BadFlagsAndFiles) {
    struct Case {
        std::string args;
        int code;
        std::string message;
    };
    const std::vector<Case> cases = {
        {"--nope", 2, "error: unknown flag '--nope' (see --help)"},
        {"-n 0", 2, "error: -n:"},
        {"--temperature -1", 2, "error: --temperature:"},
        {"-p ''", 2, "error: -p: empty prompt"},
        {"-p a --prompt-len 4", 2, "error: --prompt-len: give one of -p, --prompt-file, --prompt-ids and --prompt-len, "
                                   "not several (-p is given too)"},
        {"--prompt-len 4 --prompt-len 5", 2, "error: --prompt-len: given more than once; give each flag once"},
        {"-e d1 --device-memory 80", 2, "error: --device-memory: '80' has no unit"},
        {"--prompt-ids 1,x", 2, "error: --prompt-ids:"},
        {"-e d1 --prompt-ids 1,50257", 2, "error: --prompt-ids: token id 50257"},
        {"-e gpt5", 2, "error: -e:"},
        {"-e d1 --prompt-file /nonexistent/prompts.txt", 1, "error: /nonexistent/prompts.txt"},
        {"-e d1 --prompt-len 1000 -n 100", 1, "error: -n:"},
        {"-e d1 --prompt-ids 1,2,3 -b 0", 2, "error: -b:"},
        {"-e d1 --prompt-ids 1,2,3 -b 65536", 2, "error: -b:"}, // the GPU decode's grid limit, on both
        {"-e d1 --prompt-file ''", 2, "error: --prompt-file: empty path"},
        {"-e d1 --profile ''", 2, "error: --profile: empty directory name"},
        // A switch given a value reads as "off" to whoever wrote it: refused rather than taken as on.
        {"-e d1 --json=0", 2, "error: --json: a switch, takes no value"},
        {"-e d1 --json=false", 2, "error: --json: a switch, takes no value"},
        {"-e d1 --stop-eot=1", 2, "error: --stop-eot: a switch, takes no value"},
        {"--help=1", 2, "error: --help: a switch, takes no value"},
        // CUDA graphs are the GPU program's: 1 is refused on the CPU, before anything loads.
        {"-e d1 --cuda-graph 1", 2, "error: --cuda-graph 1: infer_gpt2 runs on the CPU; CUDA graphs are infer_gpt2cu's"},
        {"-e d1 --cuda-graph 2", 2, "error: --cuda-graph:"},
        // Refused before two billion prompt ids are drawn (this would take gigabytes and minutes).
        {"-e d1 --prompt-len 2000000000 -n 1", 1, "error: -n: a prompt of 2000000000 tokens"},
    };
    for (const Case& c : cases) {
        auto r = run(infer(c.args));
        EXPECT_EQ(r.exit_code, c.code) << c.args << ": " << r.output;
        EXPECT_EQ(r.output.rfind(c.message, 0), 0u) << c.args << ": " << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << c.args << ": " << r.output;
    }
    auto h = run("./infer_gpt2 --help");
    EXPECT_EQ(h.exit_code, 0);
    EXPECT_TRUE(has(h.output, "--prompt-file"));
    EXPECT_TRUE(has(h.output, "--cuda-graph 0|1")) << h.output;
}

// Prompts are cycled in order to fill -b: three prompts and -b 5 run as a, b, c, a, b (both programs share the
// prompts' code, llmc/infer/inputs.cpp).
TEST(InferProgram, PromptsAreCycledInOrder) {
    TempDir dir;
    const std::string file = dir / "prompts.txt";
    std::ofstream(file) << "alpha\nbeta gamma\ndelta epsilon zeta\n";
    auto r = run(infer("-e d1 --prompt-file " + file + " -b 5 -n 1 --temperature 0 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto lines = json_lines(r.output);
    ASSERT_EQ(lines.size(), 6u) << r.output;
    const GPT2Tokenizer tok =
        GPT2Tokenizer::from_gpt2_files(testutil::vocab_dir() + "/encoder.json", testutil::vocab_dir() + "/vocab.bpe");
    const char* order[] = {"alpha", "beta gamma", "delta epsilon zeta", "alpha", "beta gamma"};
    for (int b = 0; b < 5; b++) EXPECT_EQ(lines[b]["prompt_ids"].get<std::vector<int>>(), tok.encode(order[b])) << b;
}

// What went wrong, named where it is: a prompt file's bad line by file and line, a model whose vocabulary is not
// the tokenizer's by what to give instead.
TEST(InferProgram, PromptErrorsSayWhereAndWhat) {
    TempDir dir;
    const std::string file = dir / "prompts.txt";
    std::ofstream(file) << "fine\nbad \xff byte\n";
    auto r = run(infer("-e d1 --prompt-file " + file + " -n 1"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("error: " + file + ": line 2: invalid UTF-8", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    GPT2CPU<float> m(infer_config()); // V = 1000
    m.init_random(3);
    const std::string model = dir / "v1000.bin";
    save_model(model, m.config, m.params_memory.data());
    auto v = run(infer("-e " + model + " -p 'Hello' -n 1"));
    EXPECT_EQ(v.exit_code, 1) << v.output;
    EXPECT_EQ(v.output, "error: -p: the model's vocabulary has 1000 tokens, GPT-2's tokenizer 50257: text cannot be "
                        "encoded for it; give token ids (--prompt-ids)\n");
    auto ids = run(infer("-e " + model + " --prompt-ids 1,2 -n 2 --temperature 0"));
    EXPECT_EQ(ids.exit_code, 0) << ids.output;
}

// The command: greedy ids for the encoded prompt, equal to full recomputation with the same random
// model (d4, --seed default 1337), the text their decoding, and the summary's fields.
TEST(InferProgram, GreedyJsonMatchesRecompute) {
    auto r = run(infer("-e d4 -p 'To be or not' -n 32 --temperature 0 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto lines = json_lines(r.output);
    ASSERT_EQ(lines.size(), 2u) << r.output;
    const nlohmann::json& seq = lines[0];
    const GPT2Tokenizer tok =
        GPT2Tokenizer::from_gpt2_files(testutil::vocab_dir() + "/encoder.json", testutil::vocab_dir() + "/vocab.bpe");
    const std::vector<int> prompt = tok.encode("To be or not"), ids = seq["ids"].get<std::vector<int>>();
    EXPECT_EQ(seq["prompt_ids"].get<std::vector<int>>(), prompt);
    ASSERT_EQ(ids.size(), 32u);
    EXPECT_EQ(seq["text"].get<std::string>(), tok.decode(ids));
    EXPECT_GT(seq["ttft_ms"].get<double>(), 0);
    EXPECT_GT(seq["decode_tok_s"].get<double>(), 0);

    GPT2CPU<float> model(gpt2_config_for_depth(4));
    model.init_random(1337);
    EXPECT_EQ(ids, greedy_recompute(model, prompt, 32));

    const nlohmann::json& s = lines[1]["summary"];
    for (const char* k : {"prefill_tok_s", "ttft_ms", "decode_tok_s", "latency_p50_ms", "latency_p90_ms", "peak_mem_mib"})
        EXPECT_GT(s[k].get<double>(), 0) << k;
    EXPECT_LE(s["latency_p50_ms"].get<double>(), s["latency_p90_ms"].get<double>());
    EXPECT_EQ(s["B"], 1);
    EXPECT_EQ(s["prompt_len"], (int)prompt.size());
    EXPECT_EQ(s["gen_len"], 32);
    EXPECT_EQ(s["params"], model.num_parameters());
    EXPECT_TRUE(s["avg_power_w"].is_null());
    EXPECT_TRUE(s["j_per_token"].is_null());
    EXPECT_TRUE(s["decode_floor_share"].is_null()); // no --profile: no measured bandwidth
}

// Two prompts of different lengths in one batch (and cycled to fill -b 3) give what each gives alone.
TEST(InferProgram, RaggedPromptFileEqualsEachAlone) {
    TempDir dir;
    const std::string file = dir / "prompts.txt";
    FILE* f = fopen(file.c_str(), "w");
    fputs("Hello\nThe quick brown fox jumps over the lazy dog\n", f);
    fclose(f);
    auto r = run(infer("-e d2 --prompt-file " + file + " -b 3 -n 6 --temperature 0 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto lines = json_lines(r.output);
    ASSERT_EQ(lines.size(), 4u) << r.output;
    const std::vector<std::string> prompts = {"Hello", "The quick brown fox jumps over the lazy dog", "Hello"};
    for (int b = 0; b < 3; b++) {
        auto alone = run(infer("-e d2 -p '" + prompts[b] + "' -n 6 --temperature 0 --json"));
        ASSERT_EQ(alone.exit_code, 0) << alone.output;
        EXPECT_EQ(json_lines(alone.output)[0]["ids"], lines[b]["ids"]) << prompts[b];
    }
    EXPECT_NE(lines[0]["prompt_ids"], lines[1]["prompt_ids"]);
    EXPECT_EQ(lines[3]["summary"]["B"], 3);
}

// The lowest allowed temperature (1e-3) with or without top-k 1 gives the greedy tokens (it gave token 0 when
// p^(1/T) underflowed for every token).
TEST(InferProgram, LowestTemperatureIsGreedy) {
    auto greedy = run(infer("-e d2 --prompt-ids 5,6,7 -n 10 --json --temperature 0"));
    ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
    const nlohmann::json want = json_lines(greedy.output)[0]["ids"];
    EXPECT_NE(want, nlohmann::json(std::vector<int>(10, 0)));
    for (const char* flags : {"--temperature 0.001 --top-k 1", "--temperature 0.001"}) {
        auto r = run(infer("-e d2 --prompt-ids 5,6,7 -n 10 --json " + std::string(flags)));
        ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.output;
        EXPECT_EQ(json_lines(r.output)[0]["ids"], want) << flags;
    }
}

// A model file whose weights hold a NaN (or an inf) gives logits that are not finite: one line, exit 1, no
// tokens printed (it printed "!!!!!", token 0, and exited 0).
TEST(InferProgram, NonFiniteLogitsStopTheRun) {
    TempDir dir;
    const GPT2Config c = infer_config();
    for (float bad : {NAN, INFINITY}) {
        GPT2CPU<float> m(c);
        m.init_random(7);
        m.params_memory[m.params_memory.size() - 1] = bad; // lnf's last bias
        const std::string file = dir / "bad_model.bin";
        save_model(file, c, m.params_memory.data());
        for (const char* flags : {"--temperature 0", "--temperature 1", "--temperature 0 --json"}) {
            auto r = run(infer("-e " + file + " --prompt-ids 5,6,7 -n 4 " + flags));
            EXPECT_EQ(r.exit_code, 1) << flags << ": " << r.output;
            EXPECT_EQ(r.output, "error: the model's logits are not finite (NaN or inf) for sequence 0, token 1: the "
                                "model's weights are not finite, or it diverged\n")
                << flags;
        }
    }
}

// Out of host memory, the hint names inference's own flags (there is no -t): 65535 sequences' logits alone are
// 13 GB, refused under a 2 GB address-space limit. (AddressSanitizer's shadow memory needs more address space
// than any such limit leaves.)
TEST(InferProgram, OutOfMemoryNamesItsOwnFlags) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "an address-space limit and AddressSanitizer do not mix";
#endif
    auto r = run("ulimit -v 2000000; " + infer("-e d1 --prompt-ids 5,6,7 -b 65535 -n 2 --temperature 0"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, "error: out of memory (try a smaller -b, -n, prompt or model)\n");
}

// A --profile path that cannot be a directory (an existing file, a path under one) is refused before anything
// is generated, and the file is left as it was.
TEST(InferProgram, ProfilePathCheckedBeforeGenerating) {
    TempDir dir;
    const std::string file = dir / "existing";
    ASSERT_EQ(run("echo keep > '" + file + "'").exit_code, 0);
    for (const std::string& path : {file, file + "/p"}) {
        auto r = run(infer("-e d2 --prompt-ids 5,6,7 -n 8 --temperature 0 --profile '" + path + "'"));
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output.rfind("error: --profile: " + path + ": cannot create directory (", 0), 0u) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
    EXPECT_EQ(slurp(file), "keep\n");
}

// -n 1: the prefill gives the only token, there is no decode step: decode's rate and latencies are null (they
// were 0, a measurement of nothing), and the summary line says there was none.
TEST(InferProgram, NoDecodeStepGivesNullDecodeFigures) {
    auto r = run(infer("-e d1 --prompt-ids 5,6,7 -b 2 -n 1 --temperature 0 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto lines = json_lines(r.output);
    ASSERT_EQ(lines.size(), 3u) << r.output;
    EXPECT_TRUE(lines[0]["decode_tok_s"].is_null()) << r.output;
    const nlohmann::json& s = lines[2]["summary"];
    for (const char* k : {"decode_tok_s", "latency_p50_ms", "latency_p90_ms"}) EXPECT_TRUE(s[k].is_null()) << k;
    EXPECT_GT(s["prefill_tok_s"].get<double>(), 0);
    auto text = run(infer("-e d1 --prompt-ids 5,6,7 -n 1 --temperature 0"));
    ASSERT_EQ(text.exit_code, 0) << text.output;
    EXPECT_NE(text.output.find("| decode none (-n 1) |"), std::string::npos) << text.output;
}

// Sampling is seeded: the same seed gives the same tokens, synthetic prompts have the length asked for.
TEST(InferProgram, SeededSamplingAndSyntheticPrompts) {
    const std::string cmd = infer("-e d1 --prompt-len 5 -b 2 -n 8 --temperature 1 --top-k 40 --json");
    auto a = run(cmd + " --seed 5"), b = run(cmd + " --seed 5"), c = run(cmd + " --seed 6");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    const auto la = json_lines(a.output), lb = json_lines(b.output), lc = json_lines(c.output);
    ASSERT_EQ(la.size(), 3u);
    EXPECT_EQ(la[0]["ids"], lb[0]["ids"]);
    EXPECT_NE(la[0]["ids"], lc[0]["ids"]);
    EXPECT_EQ(la[0]["prompt_ids"].size(), 5u);
    EXPECT_NE(la[0]["prompt_ids"], la[1]["prompt_ids"]);
}

// ---- inference profiles ----

// Decode's analytic bytes per step are the weights once plus the KV cache it attends: one more cached
// position adds exactly K and V of every layer; B sequences in one step share the weight reads, so the
// arithmetic intensity grows with B. Prefill of a prompt reads the weights once for all its tokens.
TEST(InferProfile, DecodeCostsGrowWithContextAndBatch) {
    const GPT2Config c = infer_config();
    auto decode = [&](long B, double context) {
        prof::InferenceShape s;
        s.sequences = B, s.prompt_tokens = 1, s.decode_steps = 1, s.decode_tokens = B, s.decode_context = B * context;
        const prof::CostTable t = prof::inference_costs(c, s);
        prof::OpCost sum;
        for (auto& row : t) sum += row[(int)Phase::decode];
        return sum;
    };
    const double E = 4, L = c.num_layers, C = c.channels;
    EXPECT_DOUBLE_EQ(decode(1, 11).bytes - decode(1, 10).bytes, E * 2 * L * C);
    const double weights = (double)num_parameters(c) - (double)c.max_seq_len * C; // all but wpe
    EXPECT_GT(decode(1, 10).bytes, E * weights);
    // At B=1 the weights are nearly all of it (the row activations and 10 cached positions: 2% at C=64).
    EXPECT_LT(decode(1, 10).bytes, E * weights * 1.05);
    double last = 0;
    for (long B : {1, 2, 4, 8}) {
        const prof::OpCost d = decode(B, 10);
        EXPECT_GT(d.flops() / d.bytes, last * 1.5) << "B=" << B;
        last = d.flops() / d.bytes;
    }
}

// The GPU decoder's fusions (inference_costs with fused): the residual adds and GELU have no cells of their own;
// their FLOPs move into ln1, ln2, lnf and fc, so decode's FLOPs (where lnf already runs on every row) are the
// unfused model's, and its bytes are fewer (each residual sum is not read back). Prefill's lnf runs on every
// prompt row, not only the last ones.
TEST(InferProfile, FusedCostsMoveTheResidualsAndGelu) {
    const GPT2Config c = infer_config();
    prof::InferenceShape s;
    s.sequences = 2, s.prompt_tokens = 12, s.prompt_pairs = 42, s.decode_steps = 3, s.decode_tokens = 6;
    s.decode_context = 2 * (7 + 8 + 9), s.elem_bytes = 2;
    const prof::CostTable plain = prof::inference_costs(c, s), fused = prof::inference_costs(c, s, true);
    for (Phase p : {Phase::prefill, Phase::decode}) {
        SCOPED_TRACE(phase_name(p));
        prof::OpCost a, b;
        for (int sb = 0; sb < NUM_SUBBLOCKS; sb++) a += plain[sb][(int)p], b += fused[sb][(int)p];
        for (SubBlock sb : {SubBlock::residual1, SubBlock::residual2, SubBlock::gelu}) {
            EXPECT_GT(plain[(int)sb][(int)p].flops(), 0) << subblock_name(sb);
            EXPECT_EQ(fused[(int)sb][(int)p].flops() + fused[(int)sb][(int)p].bytes, 0) << subblock_name(sb);
        }
        EXPECT_GT(fused[(int)SubBlock::fc][(int)p].other_flops, 0); // GELU as the epilogue
        EXPECT_LT(b.bytes, a.bytes);
        if (p == Phase::decode) {
            EXPECT_DOUBLE_EQ(b.flops(), a.flops());
        } else {
            EXPECT_GT(b.flops(), a.flops()); // lnf over all 12 prompt rows rather than the 2 last ones
        }
    }
}

// Steps 2.. of an inference profile (step 1 is the prefill) are decode steps: grouped in order, each group's
// context range and sums.
TEST(InferProfile, DecodeBuckets) {
    prof::Report r;
    r.context.T = 10;
    for (int i = 0; i <= 5; i++) {
        prof::StepRow s;
        s.step = prof::PREFILL_STEP + i, s.tokens = i == 0 ? 20 : 2, s.wall_ms = i, s.decode_ms = i == 0 ? 0 : i - 0.5;
        r.steps.push_back(s);
    }
    prof::fill_decode_buckets(r, 2);
    ASSERT_EQ(r.decode_buckets.size(), 2u);
    EXPECT_EQ(r.decode_buckets[0].first_pos, 11);
    EXPECT_EQ(r.decode_buckets[0].last_pos, 13);
    EXPECT_EQ(r.decode_buckets[0].steps, 3);
    EXPECT_EQ(r.decode_buckets[0].tokens, 6);
    EXPECT_DOUBLE_EQ(r.decode_buckets[0].wall_ms, 1 + 2 + 3);
    EXPECT_DOUBLE_EQ(r.decode_buckets[0].time_ms, 0.5 + 1.5 + 2.5);
    EXPECT_EQ(r.decode_buckets[1].first_pos, 14);
    EXPECT_EQ(r.decode_buckets[1].last_pos, 15);
    EXPECT_DOUBLE_EQ(r.decode_buckets[1].ms_per_step(), 4.5);
}

// The check: a profile of a batch-1 run whose summary separates prefill and decode and calls decode
// memory-bound, with the phases in every table, the trace and the findings; stdout stays JSON lines.
TEST(InferProgram, ProfileSeparatesPrefillAndDecode) {
    TempDir dir;
    const std::string prof_dir = dir / "profile";
    // Its own ceilings cache and no RAPL, as the training profile tests (test/cpu_profile_fixture.h).
    auto r = run("{ XDG_CACHE_HOME=" + (dir / "cache") + " LLMC_POWERCAP_ROOT=" + (dir / "no_powercap") + " " +
                 infer("-e d2 --prompt-len 8 -n 6 --temperature 0 --json --profile " + prof_dir) + " 2>/dev/null; }");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(json_lines(r.output).size(), 2u) << r.output; // parses: nothing else on stdout

    const nlohmann::json pj = check_inference_profile(prof_dir, {1, 8, 6});
    EXPECT_EQ(pj["context"]["program"], "infer_gpt2");
    EXPECT_EQ(pj["inference"]["elem_bytes"], 4);
    const auto phases = read_csv(prof_dir + "/phases.csv");
    ASSERT_EQ(phases.size(), 2u);
    // The summary's share of the decode floor: the decode steps' analytic bytes (the profile's) at the profile's
    // bandwidth (as measured, or raised to what a sub-block reached, as in its tables) over the summary's own
    // decode time (its tokens over its rate). The profile's wall time of the same steps also holds the profiler's
    // step bookkeeping, so it can only be longer; the sub-blocks' times inside it, only shorter: at most the floor.
    const nlohmann::json sum = json_lines(r.output)[1]["summary"];
    const double floor_s = std::stod(phases[1].at("bytes")) / (pj["context"]["ceilings"]["dram_gbps"].get<double>() * 1e9);
    ASSERT_EQ(phases[1].at("tokens"), "5");
    const double decode_s = 5 / sum["decode_tok_s"].get<double>();
    ASSERT_TRUE(sum["decode_floor_share"].is_number()) << sum.dump();
    EXPECT_NEAR(sum["decode_floor_share"].get<double>(), floor_s / decode_s, 1e-7 * floor_s / decode_s) << sum.dump();
    // (phases.csv prints wall_ms to the nanosecond: 10 ns of slack.)
    EXPECT_LE(decode_s, std::stod(phases[1].at("wall_ms")) / 1e3 + 1e-8) << sum.dump();
    EXPECT_LE(sum["decode_floor_share"].get<double>(), 1 + 1e-6) << sum.dump();
    bool weight_bound = false;
    for (auto& f : pj["findings"]) weight_bound |= f["rule"] == "decode_weight_bound";
    // The bound follows the ceilings the profile measured (CPU: fp32 throughout): decode at batch 1 does about
    // 0.5 FLOP per byte, and a CPU's ridge is several FLOP per byte, so decode is memory-bound and the finding
    // says to batch more. A sanitizer build's calibration (its matmul many times slower) can flatten the ridge
    // below decode's intensity; there only the consistency is checked.
    const auto& ce = pj["context"]["ceilings"];
    const double ridge = ce["fp32_tflops"].get<double>() * 1e3 / ce["dram_gbps"].get<double>();
    const double intensity = std::stod(phases[1].at("intensity"));
    EXPECT_EQ(phases[1].at("bound"), intensity < ridge ? "memory" : "compute") << ridge << " " << intensity;
    if (ridge > 2 * intensity) {
        EXPECT_EQ(phases[1].at("bound"), "memory");
        EXPECT_TRUE(weight_bound) << pj["findings"].dump();
    }
    // The summary speaks of inference on the CPU: sequences and tokens (no T, no gradient accumulation), a step
    // table by prefill/decode (no forward/backward/optimizer columns of zeros), no CUPTI, no bf16.
    const std::string summary = slurp(prof_dir + "/summary.txt");
    EXPECT_NE(summary.find("  batch     1 sequences, 8 prompt tokens, 6 generated tokens, 6 profiled steps"),
              std::string::npos) << summary;
    EXPECT_NE(summary.find("== Steps (CPU time) ==\n  step  phase"), std::string::npos) << summary;
    EXPECT_NE(summary.find("     1  prefill"), std::string::npos) << summary;
    EXPECT_NE(summary.find("     2  decode"), std::string::npos) << summary;
    for (const char* absent : {"grad_accum", "fwd_ms", "bwd_ms", "CUPTI", "bf16"})
        EXPECT_EQ(summary.find(absent), std::string::npos) << absent << " in\n" << summary;
}

// The summary's avg_power_w and j_per_token are the profile's power over the run: on a CPU whose RAPL counter
// is readable (here a fake powercap tree whose counter a background writer advances every 0.2 ms, replacing
// the file whole so that no read sees half of it), the values of profile.json; without --profile, null.
TEST(InferProgram, SummaryPowerIsTheProfiles) {
    TempDir dir;
    const std::string zone = dir / "powercap/intel-rapl:0";
    ASSERT_EQ(run("mkdir -p '" + zone + "' && echo package-0 > '" + zone + "/name' && echo 5000000 > '" + zone +
                  "/energy_uj' && echo 262143328850 > '" + zone + "/max_energy_range_uj'")
                  .exit_code,
              0);
    const std::string writer = "import os, sys, time\n"
                               "e = 5000000\n"
                               "while os.path.exists(sys.argv[2]):\n"
                               "    e += 1000\n"
                               "    open(sys.argv[1] + '.tmp', 'w').write(str(e) + '\\n')\n"
                               "    os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
                               "    time.sleep(0.0002)\n";
    std::ofstream(dir / "writer.py") << writer;
    const std::string prof_dir = dir / "profile", running = dir / "running";
    // A step in which the writer was not scheduled leaves the profile without power (null in both, which the
    // comparison accepts); the run is tried up to three times for one with numbers.
    bool measured = false;
    for (int attempt = 0; attempt < 3 && !measured; attempt++) {
        auto r = run("rm -rf '" + prof_dir + "'; touch '" + running + "'; python3 '" + (dir / "writer.py") + "' '" +
                     zone + "/energy_uj' '" + running + "' & sleep 0.2; { XDG_CACHE_HOME=" + (dir / "cache") +
                     " LLMC_POWERCAP_ROOT=" + (dir / "powercap") + " nice -n 5 env " +
                     infer("-e d4 -b 4 --prompt-len 16 -n 3 --temperature 0 --json --profile " + prof_dir) +
                     " 2>/dev/null; }; status=$?; rm -f '" + running + "'; wait; exit $status");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const auto lines = json_lines(r.output);
        ASSERT_FALSE(lines.empty());
        const nlohmann::json summary = lines.back()["summary"];
        const auto pj = nlohmann::json::parse(testutil::slurp(prof_dir + "/profile.json"));
        EXPECT_EQ(summary["avg_power_w"], pj["power"]["avg_w"]) << summary.dump();
        EXPECT_EQ(summary["j_per_token"], pj["power"]["joules_per_token"]) << summary.dump();
        measured = pj["power"]["avg_w"].is_number() && pj["power"]["avg_w"].get<double>() > 0;
    }
    EXPECT_TRUE(measured) << "three runs without a power reading";

    auto plain = run(infer("-e d2 --prompt-len 8 -n 4 --temperature 0 --json"));
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    const nlohmann::json s2 = json_lines(plain.output).back()["summary"]; // a copy: the lines are a temporary
    EXPECT_TRUE(s2["avg_power_w"].is_null()) << s2.dump();
    EXPECT_TRUE(s2["j_per_token"].is_null()) << s2.dump();
}

// The two inference rules from a hand-made report: a decode row that is memory-bound on weight reads, and
// decode steps whose wall time is mostly idle; neither fires on a training report.
TEST(InferProfile, DecodeFindings) {
    prof::Report r;
    r.has_model = true;
    r.context.model = infer_config();
    r.context.device_kind = prof::DeviceKind::GPU;
    r.context.ceilings = {100, 50, 1000, "test"};
    prof::InferenceShape& s = r.context.inference;
    s.sequences = 1, s.prompt_tokens = 4, s.decode_steps = 10, s.decode_tokens = 10, s.decode_context = 100;
    r.num_steps = 11;
    r.costs = prof::inference_costs(r.context.model, s);
    for (auto& row : r.costs)
        for (prof::OpCost& cell : row) cell = cell * (1.0 / r.num_steps);
    for (int i = 0; i <= 10; i++) {
        prof::StepRow st;
        st.step = i, st.tokens = 1, st.wall_ms = 10, st.idle_ms = i == 0 ? 0 : 6; // 60% idle per decode step
        r.steps.push_back(st);
        r.wall_s += 0.01;
    }
    prof::SubBlockRow d;
    d.subblock = (int)SubBlock::qkv, d.phase = (int)Phase::decode, d.time_us = 40e3;
    d.cost = r.costs[(int)SubBlock::qkv][(int)Phase::decode];
    for (int b = 0; b < NUM_SUBBLOCKS; b++) d.cost += b == (int)SubBlock::qkv ? prof::OpCost{} : r.costs[b][(int)Phase::decode];
    r.subblocks.push_back(d);
    prof::fill_phase_table(r);
    const prof::ProfileRecords rec;
    const prof::FindingInput in(r, rec);
    const auto weight = prof::decode_weight_rule(in), launch = prof::decode_launch_rule(in);
    ASSERT_EQ(weight.size(), 1u);
    EXPECT_EQ(weight[0].rule, "decode_weight_bound");
    EXPECT_TRUE(has(weight[0].what, "memory-bound at B=1")) << weight[0].what;
    EXPECT_TRUE(has(weight[0].next_step, "batch more sequences")) << weight[0].next_step;
    ASSERT_EQ(launch.size(), 1u);
    EXPECT_EQ(launch[0].rule, "decode_launch_bound");
    EXPECT_TRUE(has(launch[0].what, "60%")) << launch[0].what;
    EXPECT_TRUE(has(launch[0].next_step, "fewer, larger launches")) << launch[0].next_step;

    prof::Report training = r;
    training.phases.clear();
    const prof::FindingInput tin(training, rec);
    EXPECT_TRUE(prof::decode_weight_rule(tin).empty());
    EXPECT_TRUE(prof::decode_launch_rule(tin).empty());
}

// infer_gpt2cu's profile from CUPTI records, synthetic here: kernels tagged prefill or decode by the decoder's
// ranges give the phase rows, the per-step phase columns and the decode buckets; the decode counts come from
// InferProfile, which counts the running sequences' rows only (the rows the decoder computes).
TEST(InferProfile, GpuRecordsGivePhasesAndBuckets) {
    InferOptions opt;
    opt.new_tokens = 4;
    const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {4, 5}};
    InferProfile counter(opt, prompts, 2);
    EXPECT_FALSE(counter.on()); // no --profile: no session
    EXPECT_EQ(counter.shape.prompt_tokens, 5);
    EXPECT_DOUBLE_EQ(counter.shape.prompt_pairs, 6 + 3);
    // Three decode steps; sequence 1 stops after the first. Cached lengths before each step: 3+k and 2+k.
    const std::vector<bool> both = {true, true}, first = {true, false};
    std::vector<int> len = {3, 2};
    auto length = [&](int b) { return len[b]; };
    for (int k = 0; k < 3; k++) {
        EXPECT_EQ(counter.count_decode_step(k == 0 ? both : first, length), k == 0 ? 2 : 1);
        len[0]++, len[1]++;
    }
    const prof::InferenceShape& s = counter.shape;
    EXPECT_EQ(s.decode_steps, 3);
    EXPECT_EQ(s.decode_tokens, 4);
    EXPECT_DOUBLE_EQ(s.decode_context, (4 + 3) + 5 + 6);

    // Steps 1 (prefill) to 4, 1 ms apart; each step's kernels: one qkv kernel of its phase and one with no
    // sub-block, random durations.
    prof::ProfileContext ctx;
    ctx.program = "infer_gpt2cu";
    ctx.model = infer_config();
    ctx.B = 2, ctx.T = 3;
    ctx.ceilings = {100, 50, 1000, "test"};
    ctx.inference = s;
    prof::ProfileRecords rec;
    Rng rng(std::random_device{}());
    std::vector<double> prefill_us, decode_us;
    for (int step = 1; step <= 4; step++) {
        const uint64_t t0 = (uint64_t)step * 1000000;
        rec.steps.push_back({step, t0, t0 + 900000, step == 1 ? 5L : step == 2 ? 2L : 1L});
        const int phase = (int)(step == 1 ? Phase::prefill : Phase::decode);
        uint64_t at = t0 + 1000;
        for (int sub : {(int)SubBlock::qkv, -1}) {
            prof::KernelRecord k;
            k.name = sub < 0 ? "sample_tokens_kernel" : "gemm";
            k.start_ns = at, k.end_ns = at + 1000 + rng.next_u32() % 100000;
            k.where = {sub, phase, sub < 0 ? -1 : 0, step};
            (step == 1 ? prefill_us : decode_us).push_back((k.end_ns - k.start_ns) / 1e3);
            at = k.end_ns + 500;
            rec.kernels.push_back(k);
        }
    }
    const prof::Report r = prof::build_report(rec, ctx);
    ASSERT_EQ(r.phases.size(), 2u);
    double want_prefill = 0, want_decode = 0;
    for (double us : prefill_us) want_prefill += us;
    for (double us : decode_us) want_decode += us;
    EXPECT_EQ(r.phases[0].phase, (int)Phase::prefill);
    EXPECT_EQ(r.phases[0].steps, 1);
    EXPECT_EQ(r.phases[0].tokens, 5);
    EXPECT_NEAR(r.phases[0].time_us, want_prefill, 1e-6);
    EXPECT_EQ(r.phases[1].phase, (int)Phase::decode);
    EXPECT_EQ(r.phases[1].steps, 3);
    EXPECT_EQ(r.phases[1].tokens, 4);
    EXPECT_NEAR(r.phases[1].time_us, want_decode, 1e-6);
    EXPECT_GT(r.phases[1].cost.bytes, 0);
    ASSERT_EQ(r.steps.size(), 4u);
    EXPECT_NEAR(r.steps[0].prefill_ms, (prefill_us[0] + prefill_us[1]) / 1e3, 1e-9);
    EXPECT_EQ(r.steps[0].decode_ms, 0);
    EXPECT_NEAR(r.steps[3].decode_ms, (decode_us[4] + decode_us[5]) / 1e3, 1e-9);
    ASSERT_FALSE(r.decode_buckets.empty());
    EXPECT_EQ(r.decode_buckets.front().first_pos, 4);
    EXPECT_EQ(r.decode_buckets.back().last_pos, 6);
    long bucket_tokens = 0;
    for (const prof::DecodeBucket& b : r.decode_buckets) bucket_tokens += b.tokens;
    EXPECT_EQ(bucket_tokens, 4);
}
