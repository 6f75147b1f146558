// The inference driver (llmc/infer/driver.h).
#include "llmc/infer/driver.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unistd.h>

#include "llmc/model/gpt2_config.h"
#include "llmc/infer/inputs.h"
#include "llmc/util/progress.h"
#include "llmc/util/rand.h"
#include "llmc/infer/sampler.h"
#include "llmc/util/utils.h"

namespace llmc {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Long generations show that they move: "generating: token 130/512, 12 s elapsed, ETA ..." every few seconds on
// stderr, when stderr is a terminal (never into a pipe, a log or --json's stdout).
class DecodeProgress {
public:
    explicit DecodeProgress(int new_tokens)
        : on_(isatty(STDERR_FILENO) == 1), total_(new_tokens), progress_("generating", "token", 5.0, stderr) {}
    // After `done` tokens of each running sequence.
    void tick(long done) {
        if (on_) progress_.tick(done, total_);
    }

private:
    bool on_;
    long total_;
    Progress progress_;
};

// One run of generate(): the sequences, which of them still run, and the sampling stream.
class Generation {
public:
    Generation(InferBackend& be, const InferOptions& opt, int B, int eot, InferProfile& profile)
        : be_(be), opt_(opt), eot_(eot), profile_(profile), rng_(opt.seed), running_(B, true), coins_(B, 0.5f) {
        out.seqs.resize(B);
    }
    Generated out;

    // The prefill step: every sequence's prompt and first token, the time to it shared by all.
    void prefill(const std::vector<std::vector<int>>& prompts) {
        const auto t0 = Clock::now();
        profile_.begin_step();
        be_.prefill(prompts);
        out.sum.prefill_ms = ms_since(t0);
        choose();
        out.sum.ttft_ms = ms_since(t0);
        profile_.end_step(profile_.shape.prompt_tokens, !any_running());
        for (size_t b = 0; b < prompts.size(); b++) {
            out.seqs[b].prompt_ids = prompts[b];
            out.seqs[b].ttft_ms = out.sum.ttft_ms;
            out.sum.prefill_tokens += (long)prompts[b].size();
        }
    }

    // Decode steps while any sequence runs; only the running ones take part in a step.
    void decode() {
        DecodeProgress progress(opt_.new_tokens);
        while (any_running()) {
            const std::vector<bool> was = running_;
            profile_.begin_step();
            const auto ts = Clock::now(); // inside the profile's step: its wall time holds this one
            const long rows = profile_.count_decode_step(running_, [&](int b) { return be_.length(b); });
            be_.decode(running_);
            choose();
            const double ms = ms_since(ts);
            profile_.end_step(rows, !any_running());
            out.sum.step_ms.push_back(ms);
            for (size_t b = 0; b < was.size(); b++)
                if (was[b]) out.seqs[b].decode_ms += ms, out.sum.decode_tokens++;
            progress.tick((long)out.sum.step_ms.size() + 1);
        }
    }

private:
    bool any_running() const { return std::count(running_.begin(), running_.end(), true) > 0; }

    // One coin per running sequence, in sequence order; the backend's ids appended, and the sequences that are
    // done stopped.
    void choose() {
        for (size_t b = 0; b < running_.size(); b++)
            if (running_[b]) coins_[b] = rng_.next_f32();
        const int* ids = be_.sample(opt_.temperature, opt_.top_k, coins_);
        for (size_t b = 0; b < running_.size(); b++) {
            if (!running_[b]) continue;
            std::vector<int>& seq = out.seqs[b].ids;
            if (ids[b] == kNotFinite)
                throw Error(strprintf("the model's logits are not finite (NaN or inf) for sequence %zu, token %zu: the "
                                      "model's weights are not finite, or it diverged",
                                      b, seq.size() + 1));
            seq.push_back(ids[b]);
            if ((opt_.stop_eot && ids[b] == eot_) || (int)seq.size() == opt_.new_tokens) running_[b] = false;
        }
    }

    InferBackend& be_;
    const InferOptions& opt_;
    const int eot_;
    InferProfile& profile_;
    Rng rng_;
    std::vector<bool> running_;
    std::vector<float> coins_;
};

} // namespace

Generated generate(InferBackend& be, const InferOptions& opt, const std::vector<std::vector<int>>& prompts, int eot,
                   InferProfile& profile) {
    Generation g(be, opt, (int)prompts.size(), eot, profile);
    g.prefill(prompts);
    g.decode();
    return std::move(g.out);
}

int run_inference(const InferProgram& program, int argc, char** argv) {
    const InferOptions opt = parse_infer_options(argc, argv, program.defaults);
    if (opt.help) {
        printf("%s", infer_usage(program.name, program.defaults).c_str());
        return 0;
    }
    if (opt.cuda_graph && !program.cuda_graphs)
        throw UsageError(strprintf("--cuda-graph 1: %s runs on the CPU; CUDA graphs are infer_gpt2cu's", program.name));
    if (opt.memory_plan) {
        if (!program.memory_plan)
            throw UsageError(strprintf("--memory-plan: %s has no GPU memory to plan; ./infer_gpt2cu --memory-plan "
                                       "answers without a GPU",
                                       program.name));
        return program.memory_plan(opt);
    }
    if (program.check_device) program.check_device();
    InferInputs in = load_infer_inputs(opt);
    const int B = (int)in.prompts.size();
    std::unique_ptr<InferBackend> be =
        program.make_backend(in.cfg, InferShape{B, in.longest, in.longest + opt.new_tokens, opt.cuda_graph});
    InferProfile profile(opt, in.prompts, be->elem_bytes());
    profile.start([&](const prof::SessionOptions& so) { return be->profile_session(so, profile.shape); });
    be->load(std::move(in.params));
    profile.shape.kv_cache_bytes = be->kv_cache_bytes();
    Generated run = generate(*be, opt, in.prompts, in.eot, profile);
    run.sum.peak_mem_mib = be->peak_memory_mib();
    run.sum.graph_steps = be->graph_steps();
    run.sum.avg_power_w = profile.avg_power_w(), run.sum.j_per_token = profile.joules_per_token();
    run.sum.decode_floor_share = profile.decode_floor_share(run.sum.decode_ms()), run.sum.dram_gbps = profile.dram_gbps();
    print_results(opt, in, run.seqs, run.sum);
    profile.throw_if_not_written();
    return 0;
}

} // namespace llmc
