/*
 * infer_gpt2: GPT-2 text generation on the CPU in fp32 with a KV cache (llmc/cpu/gpt2_decoder.h): the prompts
 * of all B sequences go through the model together (prefill), then one token per sequence per step (decode).
 * Flags and output: llmc/infer.h, doc/flags.md.
 *
 *   ./infer_gpt2 -e d4 -p "To be or not" -n 32 --temperature 0 --json
 */
#include <chrono>
#include <cstdio>
#include <memory>
#include <sys/resource.h>

#include "llmc/cpu/gpt2_decoder.h"
#include "llmc/infer.h"
#include "llmc/profiler/cpu_source.h"
#include "llmc/profiler/session.h"

namespace llmc {
namespace {

// Resident set high-water mark of this process.
double peak_rss_mib() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; // KiB on Linux
}

int run(int argc, char** argv) {
    const InferOptions opt = parse_infer_options(argc, argv);
    if (opt.help) {
        printf("%s", infer_usage("infer_gpt2").c_str());
        return 0;
    }
    if (opt.memory_plan)
        throw UsageError("--memory-plan: infer_gpt2 has no GPU memory to plan; ./infer_gpt2cu --memory-plan answers "
                         "without a GPU");
    // ---- model, tokenizer, prompts ----
    InferInputs in = load_infer_inputs(opt);
    const GPT2Config& cfg = in.cfg;
    const std::vector<std::vector<int>>& prompts = in.prompts;
    const int B = (int)prompts.size(), longest = in.longest, eot = in.eot;
    GPT2CPU<float> model(cfg);
    std::copy(in.params.begin(), in.params.end(), model.params_memory.begin());
    in.params = std::vector<float>(); // the model holds its own copy
    const int max_len = longest + opt.new_tokens;
    GPT2DecoderCPU<float> dec(model, B, max_len);
    std::vector<float> logits((size_t)B * cfg.padded_vocab_size);

    // ---- --profile (llmc/infer.h InferProfile): the sub-block executions timed into `timings` ----
    SubBlockTimes timings;
    InferProfile profile(opt, prompts, sizeof(float));
    profile.shape.kv_cache_bytes = dec.cache_bytes();
    profile.start([&](const prof::SessionOptions& so) {
        return prof::make_cpu_inference_session(so, cfg, profile.shape, longest, &timings);
    });
    if (profile.on()) dec.timings = &timings;

    // ---- prefill, then one decode step per new token while any sequence is running ----
    using Clock = std::chrono::steady_clock;
    Rng rng(opt.seed);
    std::vector<SequenceResult> seqs(B);
    std::vector<bool> running(B, true);
    InferSummary sum;
    auto choose = [&](int b) {
        const int id = pick_token(logits.data() + (size_t)b * cfg.padded_vocab_size, cfg.vocab_size, opt.temperature,
                                  opt.top_k, rng.next_f32());
        check_token(id, b, seqs[b].ids.size() + 1);
        seqs[b].ids.push_back(id);
        if ((opt.stop_eot && id == eot) || (int)seqs[b].ids.size() == opt.new_tokens) running[b] = false;
    };
    const auto t0 = Clock::now();
    profile.begin_step();
    dec.phase = Phase::prefill;
    dec.append(prompts, logits.data());
    sum.prefill_ms = ms_since(t0);
    for (int b = 0; b < B; b++) choose(b);
    sum.ttft_ms = ms_since(t0);
    profile.end_step(profile.shape.prompt_tokens, std::count(running.begin(), running.end(), true) == 0);
    record_prefill(prompts, seqs, sum);
    std::vector<std::vector<int>> step(B);
    DecodeProgress progress(opt.new_tokens);
    dec.phase = Phase::decode;
    while (std::count(running.begin(), running.end(), true) > 0) {
        const auto ts = Clock::now();
        profile.begin_step();
        for (int b = 0; b < B; b++) step[b] = running[b] ? std::vector<int>{seqs[b].ids.back()} : std::vector<int>{};
        const long rows = profile.count_decode_step(running, [&](int b) { return dec.length(b); });
        dec.append(step, logits.data());
        for (int b = 0; b < B; b++)
            if (running[b]) choose(b), sum.decode_tokens++;
        const double ms = ms_since(ts);
        profile.end_step(rows, std::count(running.begin(), running.end(), true) == 0);
        sum.step_ms.push_back(ms);
        for (int b = 0; b < B; b++)
            if (!step[b].empty()) seqs[b].decode_ms += ms;
        progress.tick((long)sum.step_ms.size() + 1);
    }

    // ---- output ----
    sum.peak_mem_mib = peak_rss_mib();
    sum.avg_power_w = profile.avg_power_w(), sum.j_per_token = profile.joules_per_token();
    print_results(opt, in, seqs, sum);
    profile.throw_if_not_written();
    return 0;
}

} // namespace
} // namespace llmc

int main(int argc, char** argv) {
    return llmc::main_guard([&] { return llmc::run(argc, argv); }, llmc::kInferOomHint);
}
