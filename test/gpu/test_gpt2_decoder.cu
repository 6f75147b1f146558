// The GPU decoder (llmc/gpu/gpt2_decoder.cuh) and the GPU sampler (llmc/sample.cuh) on a tiny random model:
//  - greedy generation with the KV cache against full recomputation through the training forward (GPT2GPU) on
//    the same prefix, ragged prompts in one batch, sequences stopping at different steps (decode then computes
//    rows for the running ones only; the others' caches and lengths stay): the logits of every generated
//    position within relative L2 3e-2 (bf16 activations; decode attention sums in another order than the
//    training kernel), and the same token unless the recomputation's best and the cache's choice lie within
//    twice the two runs' largest logit difference (a near tie that bf16 rounding may decide either way);
//  - the same logits against the CPU decoder (fp32, llmc/cpu/gpt2_decoder.h) on the bf16-rounded weights,
//    relative L2 5e-2 (bf16 rounding of every activation against none);
//  - the profiler's view: every kernel the decoder launches sits in a sub-block range of Phase::prefill in
//    prefill() and of Phase::decode in decode() (and in sample() after each), inside "layer N" for the layers;
//  - the memory plan: what it calls the largest batch fits, and an impossible request is refused before allocating;
//  - the sampler: greedy is the argmax (lowest id on ties), top-k never picks outside the top k, and draws at
//    a temperature follow softmax(logits / T) (fixed-seed coins, 5 sigma per id) and agree with the CPU's
//    pick_token for the same coin.
#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "llmc/cpu/gpt2_decoder.h"
#include "llmc/gpu/gpt2.cuh"
#include "llmc/gpu/gpt2_decoder.cuh"
#include "llmc/model/gpt2_init.h"
#include "llmc/infer/pick_token.h"
#include "llmc/nvtx.h"
#include "llmc/sample.cuh"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using gputest::DeviceBuffer;

namespace {

// Random weights, matmuls and embeddings scaled up (as test_gpt2.cu does) so that logits spread and every
// layer matters; rounded to bf16 so that the CPU reference sees what the GPU computes with.
std::vector<float> tiny_weights(const GPT2Config& cfg) {
    std::vector<float> w(num_parameters(cfg));
    init_gpt2_parameters(w.data(), cfg, gputest::fresh_seed());
    auto sizes = parameter_sizes(cfg);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const bool layernorm = i == LN1W || i == LN1B || i == LN2W || i == LN2B || i == LNFW || i == LNFB;
        if (!layernorm)
            for (size_t j = off; j < off + sizes[i]; j++) w[j] *= 4.0f;
        off += sizes[i];
    }
    return gputest::bf16_round(w);
}

int argmax(const float* x, int n) { return (int)(std::max_element(x, x + n) - x); }

double max_abs_diff(const float* a, const float* b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = std::max(m, (double)std::fabs(a[i] - b[i]));
    return m;
}

} // namespace

GPU_TEST(GpuGPT2Decoder, GreedyCacheMatchesRecomputeAndCpu) {
    REQUIRE_GPU();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    const int V = cfg.vocab_size, Vp = cfg.padded_vocab_size, new_tokens = gputest::kEmulated ? 6 : 16;
    const std::vector<int> lengths = {5, 1, 12}; // ragged: one of one token, one past two rows of 4
    const int B = (int)lengths.size(), longest = 12, max_len = longest + new_tokens;
    std::vector<std::vector<int>> prompts;
    for (int n : lengths) prompts.push_back(gputest::random_tokens(n, V));
    const std::vector<float> w = tiny_weights(cfg);

    GPT2DecoderGPU dec(cfg, w.data(), B, longest, max_len);
    GPT2GPU full(cfg, 1, max_len);
    full.set_parameters(w.data());
    GPT2CPU<float> cpu_model(cfg);
    std::copy(w.begin(), w.end(), cpu_model.params_memory.begin());
    GPT2DecoderCPU<float> cpu(cpu_model, B, max_len);
    std::vector<float> cpu_logits((size_t)B * Vp);

    // Sequences stop at different steps, as at <|endoftext|> or -n: decode then computes the running ones only.
    const std::vector<int> stop_after = {new_tokens, 2, new_tokens - 2}; // tokens each sequence generates
    std::vector<bool> running(B, true);
    std::vector<std::vector<int>> seqs = prompts;
    dec.prefill(prompts);
    cpu.append(prompts, cpu_logits.data());
    const std::vector<float> coins(B, 0.5f); // unused at temperature 0
    int near_ties = 0;
    for (int step = 0; step < new_tokens; step++) {
        SCOPED_TRACE(testing::Message() << "generated token " << step);
        std::vector<int> want_rows;
        for (int b = 0; b < B; b++)
            if (running[b]) want_rows.push_back(b);
        ASSERT_EQ(dec.logits_rows(), want_rows);
        const std::vector<float> logits = dec.logits_host();
        const int* ids = dec.sample(0.0f, 0, coins);
        for (size_t i = 0; i < want_rows.size(); i++) {
            const int b = want_rows[i];
            const float* got = logits.data() + i * Vp;
            EXPECT_EQ(ids[b], argmax(got, V)) << "sequence " << b << ": the sampler's greedy id";
            // Full recomputation of this sequence's prefix through the training forward.
            full.forward(seqs[b].data(), nullptr, 1, (int)seqs[b].size(), 0.0f, 0.0f);
            const std::vector<float> ref = full.logits_row((int)seqs[b].size() - 1);
            const std::vector<float> got_v(got, got + V), ref_v(ref.begin(), ref.begin() + V);
            EXPECT_TRUE(gputest::close_rel(got_v, ref_v, 3e-2, "cache vs recompute, sequence " + std::to_string(b)));
            const int best = argmax(ref.data(), V);
            if (ids[b] != best) {
                const double gap = ref[best] - ref[ids[b]], diff = max_abs_diff(got, ref.data(), V);
                EXPECT_LE(gap, 2 * diff) << "sequence " << b << ": cache chose " << ids[b] << ", recompute " << best;
                near_ties++;
            }
            const float* cpu_row = cpu_logits.data() + (size_t)b * Vp;
            EXPECT_TRUE(gputest::close_rel(got_v, std::vector<float>(cpu_row, cpu_row + V), 5e-2,
                                           "GPU vs CPU decoder, sequence " + std::to_string(b)));
        }
        std::vector<std::vector<int>> next(B);
        for (int b : want_rows) {
            seqs[b].push_back(ids[b]);
            if ((int)(seqs[b].size() - prompts[b].size()) == stop_after[b]) running[b] = false;
            else next[b] = {ids[b]};
        }
        if (std::count(running.begin(), running.end(), true) == 0) break;
        dec.decode(running);
        cpu.append(next, cpu_logits.data());
        for (int b = 0; b < B; b++)
            EXPECT_EQ(dec.length(b), (int)seqs[b].size() - (running[b] ? 0 : 1)) << "sequence " << b;
    }
    for (int b = 0; b < B; b++)
        EXPECT_EQ((int)(seqs[b].size() - prompts[b].size()), stop_after[b]) << "sequence " << b;
    EXPECT_LE(near_ties, 1) << "more near ties than bf16 rounding explains";
}

namespace {

/*
 * The ranges the decoder pushes, as the profiler's hook sees them: each push with the stack under it, and,
 * under the emulator (which counts launches), the kernels launched with each range innermost. A real GPU
 * checks the same through CUPTI (InferGpuProgram.ProfileWritesPrefillAndDecode).
 */
struct RangeLog {
    struct Pushed {
        RangeInfo info;
        std::string name;
        int parent_phase; // phase of the enclosing range, -2 at the outermost
    };
    std::vector<Pushed> pushed;
    std::vector<int> open; // indices into pushed
    std::vector<long> launches; // per pushed range, kernels launched while it was innermost
    long outside = 0;           // kernels launched outside every range
    uint64_t last = 0;

    static uint64_t launch_count() {
#ifdef LLMC_EMU
        return emu::stats().launches;
#else
        return 0;
#endif
    }
    void settle() { // the launches since the last push or pop belong to the innermost open range
        const uint64_t now = launch_count();
        (open.empty() ? outside : launches[open.back()]) += (long)(now - last);
        last = now;
    }
    static void push(const RangeInfo& info, void* ctx) {
        auto* self = static_cast<RangeLog*>(ctx);
        self->settle();
        const int parent = self->open.empty() ? -2 : self->pushed[self->open.back()].info.phase;
        self->pushed.push_back({info, info.name, parent});
        self->launches.push_back(0);
        self->open.push_back((int)self->pushed.size() - 1);
    }
    static void pop(void* ctx) {
        auto* self = static_cast<RangeLog*>(ctx);
        self->settle();
        self->open.pop_back();
    }
};

} // namespace

GPU_TEST(GpuGPT2Decoder, RangesCarryPhaseAndSubBlock) {
    REQUIRE_GPU();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    const std::vector<float> w = tiny_weights(cfg);
    GPT2DecoderGPU dec(cfg, w.data(), 2, 4, 8);
    const std::vector<std::vector<int>> prompts = {gputest::random_tokens(4, cfg.vocab_size),
                                                   gputest::random_tokens(2, cfg.vocab_size)};
    const std::vector<float> coins(2, 0.5f);
    for (Phase phase : {Phase::prefill, Phase::decode}) {
        SCOPED_TRACE(phase_name(phase));
        RangeLog log;
        log.last = RangeLog::launch_count();
        range_hook() = RangeHook{&RangeLog::push, &RangeLog::pop, &log};
        if (phase == Phase::prefill) dec.prefill(prompts);
        else dec.decode({true, true});
        dec.sample(0.0f, 0, coins);
        CUDA_CHECK(cudaDeviceSynchronize());
        range_hook() = RangeHook{};
        log.settle();
        EXPECT_TRUE(log.open.empty()) << "a range left open";
        EXPECT_EQ(log.outside, 0) << "kernels outside every range";
        std::set<int> subblocks;
        int layers = 0;
        long in_subblocks = 0;
        for (size_t i = 0; i < log.pushed.size(); i++) {
            const RangeLog::Pushed& p = log.pushed[i];
            EXPECT_EQ(p.info.phase, (int)phase) << p.name;
            if (p.info.subblock < 0) {
                EXPECT_EQ(log.launches[i], 0) << p.name << ": kernels outside a sub-block";
                EXPECT_EQ(p.name, "layer " + std::to_string(layers)) << "structural range";
                layers++;
                continue;
            }
            subblocks.insert(p.info.subblock);
            in_subblocks += log.launches[i];
            const SubBlock s = (SubBlock)p.info.subblock;
            const bool per_layer = s != SubBlock::encoder && s != SubBlock::lnf && s != SubBlock::classifier;
            EXPECT_EQ(p.info.layer >= 0, per_layer) << p.name;
            if (per_layer) {
                EXPECT_EQ(p.parent_phase, (int)phase) << p.name << ": not inside its layer's range";
            }
        }
        EXPECT_EQ(layers, cfg.num_layers);
        const std::set<int> want = {(int)SubBlock::encoder, (int)SubBlock::ln1,       (int)SubBlock::qkv,
                                    (int)SubBlock::attention, (int)SubBlock::attn_proj, (int)SubBlock::ln2,
                                    (int)SubBlock::fc,        (int)SubBlock::fc_proj,   (int)SubBlock::lnf,
                                    (int)SubBlock::classifier};
        EXPECT_EQ(subblocks, want);
        // embed, per layer ln1 + kv write + attention + ln2, lnf, the sampler: at least this many kernels.
        if (gputest::kEmulated) {
            EXPECT_GE(in_subblocks, 2L + 4L * cfg.num_layers + 1);
        }
    }
}

// decode() appends the ids sample() chose at the last step: before sample(), or for a sequence that stopped
// before the last step, there is no such id, and decode() refuses instead of embedding a stale one.
GPU_TEST(GpuGPT2Decoder, DecodeAppendsOnlyTokensTheLastStepChose) {
    REQUIRE_GPU();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    const std::vector<float> w = tiny_weights(cfg);
    GPT2DecoderGPU dec(cfg, w.data(), 2, 3, 8);
    const std::vector<float> coins(2, 0.5f);
    dec.prefill({gputest::random_tokens(3, cfg.vocab_size), gputest::random_tokens(2, cfg.vocab_size)});
    EXPECT_THROW(dec.decode({true, true}), Error); // nothing sampled yet
    dec.sample(0.0f, 0, coins);
    dec.decode({true, false}); // sequence 1 stops
    EXPECT_EQ(dec.logits_rows(), std::vector<int>{0});
    dec.sample(0.0f, 0, coins);
    EXPECT_THROW(dec.decode({true, true}), Error); // sequence 1 has no token from the last step
    EXPECT_THROW(dec.decode({false, false}), Error);
    EXPECT_THROW(dec.sample(0.0f, 0, {0.5f}), Error); // a coin per sequence
    dec.decode({true, false});
    EXPECT_EQ(dec.length(0), 5);
    EXPECT_EQ(dec.length(1), 2);
}

/*
 * CUDA graphs (llmc/gpu/step_graphs.cuh): a decoder replaying its decode steps as graphs chooses the same ids and
 * leaves the same logits, bit for bit, as one launching every kernel, greedy and sampled (fresh coins every step),
 * while sequences stop at different steps, so the running rows go 3, 2, 1 and each row count gets its own graph:
 * its first step eager, its second captured and launched, the later ones replayed (launch and capture counts
 * exact). Sampling parameters that change from step to step get a graph each too. The prefill and its token choice
 * stay eager.
 */
GPU_TEST(GpuGPT2Decoder, GraphStepsAreTheEagerStepsBitForBit) {
    REQUIRE_GPU();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    const std::vector<float> w = tiny_weights(cfg);
    const std::vector<int> lengths = {4, 1, 7};
    const std::vector<int> stop_after = {8, 3, 6}; // tokens each sequence generates: decode rows 3, 3, 2, 2, 2, 1, 1
    const int B = 3, longest = 7, max_len = longest + 8;
    std::vector<std::vector<int>> prompts;
    for (int n : lengths) prompts.push_back(gputest::random_tokens(n, cfg.vocab_size));
    struct Sampling {
        float temperature;
        int top_k;
    };
    struct Case {
        std::vector<Sampling> by_step; // step i samples with by_step[i % size]
        long captures, launches;
    };
    const Sampling greedy{0.0f, 0}, sampled{1.0f, 0}, top5{1.5f, 5};
    // Rows 3: decode steps 1-2, rows 2: steps 3-5, rows 1: steps 6-7. Alternating: only rows 2's third step repeats
    // a key (step 5 is step 3's).
    for (const Case& c : {Case{{greedy}, 3, 1 + 2 + 1}, Case{{sampled}, 3, 4}, Case{{top5, sampled}, 1, 1}}) {
        SCOPED_TRACE(testing::Message() << "sampling 1 of " << c.by_step.size() << ": temperature "
                                        << c.by_step[0].temperature << ", top-k " << c.by_step[0].top_k);
        GPT2DecoderGPU eager(cfg, w.data(), B, longest, max_len, false), graphs(cfg, w.data(), B, longest, max_len, true);
        std::mt19937 rng((uint32_t)gputest::fresh_seed());
        std::uniform_real_distribution<float> coin(0.0f, 1.0f);
        std::vector<int> made(B, 0);
        std::vector<bool> running(B, true);
        eager.prefill(prompts), graphs.prefill(prompts);
        for (int step = 0;; step++) {
            SCOPED_TRACE(testing::Message() << "step " << step);
            std::vector<float> coins(B);
            for (float& c : coins) c = coin(rng);
            const std::vector<int> rows = eager.logits_rows();
            ASSERT_EQ(graphs.logits_rows(), rows);
            const Sampling sampling = c.by_step[step % c.by_step.size()];
            const int* eager_ids = eager.sample(sampling.temperature, sampling.top_k, coins);
            const std::vector<int> want(eager_ids, eager_ids + B);
            const int* got = graphs.sample(sampling.temperature, sampling.top_k, coins);
            for (int b : rows) EXPECT_EQ(got[b], want[b]) << "sequence " << b;
            EXPECT_TRUE(gputest::same_bits(graphs.logits_host(), eager.logits_host())) << "logits differ";
            for (int b : rows)
                if (++made[b] == stop_after[b]) running[b] = false;
            if (std::count(running.begin(), running.end(), true) == 0) break;
            eager.decode(running), graphs.decode(running);
        }
        EXPECT_EQ(eager.graph_launches(), 0);
        EXPECT_EQ(graphs.graph_captures(), c.captures) << "one graph per running-row count and sampling";
        EXPECT_EQ(graphs.graph_launches(), c.launches);
    }
}

// A capture the runtime refuses (here LLMC_SYNC=1's synchronisation after every launch, which no capture may hold)
// falls back to eager steps with one line saying why, once: the ids are the eager decoder's, no graph is launched.
GPU_TEST(GpuGPT2Decoder, RefusedCaptureFallsBackToEagerStepsWithOneLine) {
    REQUIRE_GPU();
    const GPT2Config cfg = gputest::tiny_gpt2_config();
    const std::vector<float> w = tiny_weights(cfg);
    const std::vector<std::vector<int>> prompts = {gputest::random_tokens(3, cfg.vocab_size)};
    auto generate = [&](GPT2DecoderGPU& dec) {
        std::vector<int> ids;
        dec.prefill(prompts);
        for (int t = 0; t < 5; t++) {
            if (t > 0) dec.decode({true});
            ids.push_back(dec.sample(0.0f, 0, {0.5f})[0]);
        }
        return ids;
    };
    GPT2DecoderGPU eager(cfg, w.data(), 1, 3, 8, false), graphs(cfg, w.data(), 1, 3, 8, true);
    const std::vector<int> want = generate(eager);
    struct SyncAfterEveryLaunch {
        const bool was = sync_after_launch();
        SyncAfterEveryLaunch() { sync_after_launch() = true; }
        ~SyncAfterEveryLaunch() { sync_after_launch() = was; }
    };
    testing::internal::CaptureStdout();
    std::vector<int> got;
    {
        SyncAfterEveryLaunch sync;
        got = generate(graphs);
    }
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(got, want);
    EXPECT_EQ(graphs.graph_launches(), 0);
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_EQ(out.rfind("cuda graphs: the decode step could not be captured (CUDA error in the kernel launched at ", 0),
              0u)
        << out;
    EXPECT_NE(out.find("); it runs eagerly from here on\n"), std::string::npos) << out;
}

GPU_TEST(GpuGPT2Decoder, MemoryPlanAndRefusal) {
    REQUIRE_GPU();
    GPT2Config cfg = gputest::tiny_gpt2_config();
    const size_t free_bytes = 64ull << 20;
    const DecoderMemoryPlan p = plan_decoder_memory(cfg, 1, 40, 60, free_bytes);
    ASSERT_GT(p.max_batch, 1);
    EXPECT_LE(plan_decoder_memory(cfg, p.max_batch, 40, 60, free_bytes).total(), p.budget());
    EXPECT_GT(plan_decoder_memory(cfg, p.max_batch + p.max_batch / 10 + 2, 40, 60, free_bytes).total(), p.budget());
    // Far past any device: 65535 sequences of 1024 tokens. Refused with the largest -b, nothing allocated.
    cfg.max_seq_len = 1024;
    const std::vector<float> w(num_parameters(cfg), 0.0f);
    try {
        GPT2DecoderGPU dec(cfg, w.data(), 65535, 1000, 1024);
        FAIL() << "a request far beyond device memory was accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("-b 65535"), std::string::npos) << msg;
        EXPECT_NE(msg.find("the largest -b that fits"), std::string::npos) << msg;
    }
}

namespace {

// Runs the sampler on `rows` copies of one logits row (bf16), one coin each; returns the id chosen for each
// row. The rows name sequences rows..1 in reverse order and sequence 0 is named by none, as after it stopped:
// coins are read and ids written at the row's sequence, and sequence 0's id is left as it was.
std::vector<int> sample_rows(const std::vector<float>& row, int V, int rows, float temperature, int top_k,
                             const std::vector<float>& coins) {
    const int Vp = (int)row.size(), S = rows + 1;
    std::vector<float> all;
    for (int r = 0; r < rows; r++) all.insert(all.end(), row.begin(), row.end());
    std::vector<int> seq(rows);
    std::vector<float> by_seq(S, 2.0f); // the unnamed sequence's coin is out of range: never read
    for (int r = 0; r < rows; r++) seq[r] = S - 1 - r, by_seq[seq[r]] = coins[r];
    DeviceBuffer<floatX> d_logits(gputest::to_bf16(all));
    DeviceBuffer<int> d_seq(seq);
    DeviceBuffer<float> d_coins(by_seq);
    DeviceBuffer<int> d_ids(std::vector<int>(S, -7));
    sample_tokens(d_ids, d_logits, d_seq, d_coins, rows, V, Vp, temperature, top_k, 0);
    const std::vector<int> ids = d_ids.download();
    EXPECT_EQ(ids[0], -7) << "the id of a sequence no row names was written";
    std::vector<int> out(rows);
    for (int r = 0; r < rows; r++) out[r] = ids[seq[r]];
    return out;
}

std::vector<float> random_row(int V, int Vp, float scale) {
    std::vector<float> row = gputest::bf16_round(gputest::random_normal(Vp, scale));
    for (int i = V; i < Vp; i++) row[i] = 1e30f; // the padding: never a candidate
    return row;
}

} // namespace

GPU_TEST(GpuSampleTokens, GreedyIsArgmaxLowestOnTies) {
    REQUIRE_GPU();
    const int V = 1000, Vp = 1024;
    std::vector<float> row = random_row(V, Vp, 1.0f);
    const std::vector<int> got = sample_rows(row, V, 1, 0.0f, 0, {0.5f});
    EXPECT_EQ(got[0], argmax(row.data(), V));
    // Ties: the maximum at three ids, the lowest must win.
    std::mt19937 g((unsigned)gputest::fresh_seed());
    std::vector<int> at = {(int)(g() % V), (int)(g() % V), (int)(g() % V)};
    for (int i : at) row[i] = 8.0f;
    EXPECT_EQ(sample_rows(row, V, 1, 0.0f, 0, {0.5f})[0], *std::min_element(at.begin(), at.end()));
}

GPU_TEST(GpuSampleTokens, TopKNeverOutsideTopK) {
    REQUIRE_GPU();
    const int V = 300, Vp = 304, rows = gputest::kEmulated ? 64 : 4096;
    for (int k : {1, 5, 40}) {
        const std::vector<float> row = random_row(V, Vp, 2.0f);
        std::vector<float> sorted(row.begin(), row.begin() + V);
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        const float kth = sorted[k - 1];
        std::vector<float> coins(rows);
        std::mt19937 g((unsigned)gputest::fresh_seed());
        for (float& c : coins) c = std::uniform_real_distribution<float>(0.0f, 1.0f)(g);
        for (int id : sample_rows(row, V, rows, 1.5f, k, coins)) {
            ASSERT_TRUE(id >= 0 && id < V) << id;
            EXPECT_GE(row[id], kth) << "top-" << k << " picked id " << id;
        }
    }
}

GPU_TEST(GpuSampleTokens, TemperatureFollowsDistribution) {
    REQUIRE_GPU();
    const int V = 40, Vp = 48, rows = gputest::kEmulated ? 600 : 20000;
    const float T = 0.8f;
    const std::vector<float> row = random_row(V, Vp, 1.5f);
    std::mt19937 g(20261123); // fixed: a statistical bound, not a comparison
    std::vector<float> coins(rows);
    for (float& c : coins) c = std::uniform_real_distribution<float>(0.0f, 1.0f)(g);
    const std::vector<int> ids = sample_rows(row, V, rows, T, 0, coins);
    std::vector<int> count(V, 0);
    int same_as_cpu = 0;
    for (int r = 0; r < rows; r++) {
        ASSERT_TRUE(ids[r] >= 0 && ids[r] < V) << ids[r];
        count[ids[r]]++;
        same_as_cpu += ids[r] == pick_token(row.data(), V, T, 0, coins[r]);
    }
    const float mx = *std::max_element(row.begin(), row.begin() + V);
    double total = 0;
    std::vector<double> p(V);
    for (int i = 0; i < V; i++) total += p[i] = std::exp((row[i] - mx) / T);
    for (int i = 0; i < V; i++) {
        p[i] /= total;
        EXPECT_NEAR((double)count[i] / rows, p[i], 5 * std::sqrt(p[i] * (1 - p[i]) / rows) + 1.0 / rows) << "id " << i;
    }
    // The same coin gives the same id as the CPU except where fp32 and double CDFs straddle it.
    EXPECT_GE(same_as_cpu, rows - rows / 100);
}

// The lowest temperature the programs allow (1e-3) draws the argmax, as the CPU does.
GPU_TEST(GpuSampleTokens, LowestTemperatureDrawsTheMode) {
    REQUIRE_GPU();
    const int V = 1000, Vp = 1024;
    std::vector<float> row = random_row(V, Vp, 1.0f);
    // A mode at least 0.05 above the runner-up: at T = 1e-3 every other token weighs below e^-50 of it. (Random
    // logits alone put the top two within 0.01 of each other a few times in a hundred rows, and then the
    // runner-up's e^-10 share of the mass is a correct draw for coin 0.9999.)
    const int mode = argmax(row.data(), V);
    float runner_up = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != mode) runner_up = std::max(runner_up, row[i]);
    row[mode] = std::max(row[mode], runner_up + 0.05f);
    // Not coin 0: there the CPU's double weights of the others (e^-500, not 0 as in fp32) put the lowest id first.
    const std::vector<float> coins = {1e-3f, 0.25f, 0.5f, 0.9999f};
    const std::vector<int> ids = sample_rows(row, V, (int)coins.size(), 1e-3f, 0, coins);
    for (size_t r = 0; r < coins.size(); r++) {
        EXPECT_EQ(ids[r], argmax(row.data(), V)) << "coin " << coins[r];
        EXPECT_EQ(pick_token(row.data(), V, 1e-3f, 0, coins[r]), ids[r]) << "coin " << coins[r];
    }
}

// A row with a logit that is not finite (a broken model's NaN or inf, alone or throughout) gives kNotFinite,
// greedy or sampled, as the CPU's pick_token: the programs stop on it instead of printing a token.
GPU_TEST(GpuSampleTokens, RowWithANonFiniteLogitGivesNotFinite) {
    REQUIRE_GPU();
    const int V = 1000, Vp = 1024;
    std::mt19937 g((unsigned)gputest::fresh_seed());
    const int at = (int)(g() % V);
    for (float fill : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> throughout(Vp, fill), one = random_row(V, Vp, 1.0f);
        one[at] = fill;
        for (const std::vector<float>* row : {&throughout, &one})
            for (float T : {0.0f, 1.0f}) {
                EXPECT_EQ(sample_rows(*row, V, 1, T, 0, {0.5f})[0], kNotFinite) << fill << " T " << T;
                EXPECT_EQ(pick_token(row->data(), V, T, 0, 0.5f), kNotFinite) << fill << " T " << T;
            }
    }
    // The padding beyond V is never read: a row whose padding is NaN is sampled as usual.
    std::vector<float> padded = random_row(V, Vp, 1.0f);
    for (int i = V; i < Vp; i++) padded[i] = NAN;
    EXPECT_EQ(sample_rows(padded, V, 1, 0.0f, 0, {0.5f})[0], argmax(padded.data(), V));
}

// The two zeros are one value: with +0 the k-th largest logit, a -0 is kept as a tie, as on the CPU. Every
// coin on a grid gives the CPU's id, and -0's id is drawn for some.
GPU_TEST(GpuSampleTokens, TopKKeepsBothZerosAsATie) {
    REQUIRE_GPU();
    const int V = 40, Vp = 48, pos_zero = 7, neg_zero = 23, top = 31;
    std::vector<float> row(Vp, 1e30f);
    for (int i = 0; i < V; i++) row[i] = -1.0f - 0.125f * (i % 8);
    row[top] = 1.0f, row[pos_zero] = 0.0f, row[neg_zero] = -0.0f;
    const int rows = 256;
    std::vector<float> coins(rows);
    for (int r = 0; r < rows; r++) coins[r] = (r + 0.5f) / rows;
    const std::vector<int> ids = sample_rows(row, V, rows, 1.0f, 2, coins);
    int drew_neg_zero = 0;
    for (int r = 0; r < rows; r++) {
        EXPECT_TRUE(ids[r] == top || ids[r] == pos_zero || ids[r] == neg_zero) << "coin " << coins[r] << ": " << ids[r];
        EXPECT_EQ(ids[r], pick_token(row.data(), V, 1.0f, 2, coins[r])) << "coin " << coins[r];
        drew_neg_zero += ids[r] == neg_zero;
    }
    EXPECT_GT(drew_neg_zero, 0) << "-0 was never kept";
}

GPU_TEST(GpuSampleTokens, BadArgumentsThrow) {
    REQUIRE_GPU();
    EXPECT_THROW(sample_tokens(nullptr, nullptr, nullptr, nullptr, 0, 10, 16, 1.0f, 0, 0), Error);
    EXPECT_THROW(sample_tokens(nullptr, nullptr, nullptr, nullptr, 1, 20, 16, 1.0f, 0, 0), Error);
    EXPECT_THROW(sample_tokens(nullptr, nullptr, nullptr, nullptr, 1, 10, 16, -1.0f, 0, 0), Error);
}
