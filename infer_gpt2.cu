/*
 * infer_gpt2cu: GPT-2 text generation on the GPU in bf16 with a KV cache (llmc/gpt2_decoder.cuh): the prompts
 * of all B sequences go through the model together (prefill), then one token per sequence per step (decode);
 * tokens are chosen on the GPU (llmc/sample.cuh) and only their ids cross to the host. Same flags and output
 * as infer_gpt2 (llmc/infer.h, doc/flags.md).
 *
 * --profile DIR traces the whole run in-process with CUPTI (llmc/profiler/cupti_source.cuh), step 1 the prefill
 * and each later step one decode step, as infer_gpt2 --profile does on the CPU; the decoder's ranges put its
 * kernels in Phase::prefill and Phase::decode.
 *
 *   ./infer_gpt2cu -e d12 --prompt-len 128 -n 128 -b 8 --temperature 0
 *   ./infer_gpt2cu -e d12 --prompt-len 128 -n 128 -b 8 --temperature 0 --profile prof_infer
 */
#include <chrono>
#include <cstdio>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/gpt2_decoder.cuh"
#include "llmc/infer.h"
#include "llmc/profiler/cupti_source.cuh"
#include "llmc/profiler/memory.h"

namespace llmc {
namespace {

/*
 * --memory-plan: the decoder's allocations for these flags (-e, -b, the prompt length, -n), and the largest -b
 * whose plan fits --device-memory (or the present GPU's free memory); no GPU, no weights needed.
 */
int print_memory_plan(const InferOptions& opt) {
    const GPT2Config cfg = load_model_source(opt.model, opt.seed, false).cfg;
    const int longest = opt.prompt_len > 0 ? opt.prompt_len : opt.prompt_ids.empty() ? 1 : (int)opt.prompt_ids.size();
    const int B = std::max(opt.B, 1);
    if ((long)longest + opt.new_tokens > cfg.max_seq_len)
        throw UsageError(strprintf("-n: prompts of %d tokens and %d new tokens exceed the model's maximum length %d",
                                   longest, opt.new_tokens, cfg.max_seq_len));
    const int max_len = longest + opt.new_tokens;
    const MemoryPlan plan = plan_gpu_inference(cfg, B, longest, max_len);
    printf("memory plan: infer_gpt2cu -e %s -b %d, prompts of %d tokens, %d new tokens\n", opt.model.c_str(), B,
           longest, opt.new_tokens);
    printf("%s", prof::format_memory_report(plan, prof::analyze_memory(plan)).c_str());
    prof::FitAnswer fit;
    fit.largest_what = strprintf("number of sequences at %d tokens each", max_len);
    fit.device_bytes = device_memory_to_plan(opt.device_memory, &fit.source);
    if (fit.device_bytes) {
        fit.budget = plan_decoder_memory(cfg, B, longest, max_len, fit.device_bytes).budget();
        fit.largest = largest_decode_batch(cfg, longest, max_len, fit.budget);
    }
    printf("%s", prof::format_fit(plan, fit).c_str());
    return 0;
}

int run(int argc, char** argv) {
    const InferOptions opt = parse_infer_options(argc, argv);
    if (opt.help) {
        printf("%s", infer_usage("infer_gpt2cu").c_str());
        return 0;
    }
    if (opt.memory_plan) return print_memory_plan(opt);
    require_gpu("infer_gpt2cu", "./infer_gpt2 generates on the CPU with the same flags");
    InferInputs in = load_infer_inputs(opt);
    const GPT2Config& cfg = in.cfg;
    const int B = (int)in.prompts.size();
    // --profile (llmc/infer.h InferProfile): the session, and its ceilings, before the decoder takes the memory.
    InferProfile profile(opt, in.prompts, sizeof(floatX));
    profile.start([&](const prof::SessionOptions& so) {
        prof::ProfileContext ctx = prof::gpu_profile_context("infer_gpt2cu", cfg, B, in.longest, 1);
        ctx.inference = profile.shape;
        ctx.memory = plan_gpu_inference(cfg, B, in.longest, in.longest + opt.new_tokens);
        return prof::make_gpu_profile_session(so, std::move(ctx));
    });
    GPT2DecoderGPU dec(cfg, in.params.data(), B, in.longest, in.longest + opt.new_tokens);
    in.params = std::vector<float>(); // the device holds the weights now
    profile.shape.kv_cache_bytes = dec.cache_bytes();

    // ---- prefill, then one decode step per new token while any sequence is running ----
    using Clock = std::chrono::steady_clock;
    Rng rng(opt.seed);
    std::vector<SequenceResult> seqs(B);
    std::vector<bool> running(B, true);
    std::vector<float> coins(B, 0.5f);
    InferSummary sum;
    // One coin per running sequence, in sequence order: the CPU program's stream, so both sample alike.
    auto choose = [&] {
        for (int b = 0; b < B; b++)
            if (running[b]) coins[b] = rng.next_f32();
        const int* ids = dec.sample(opt.temperature, opt.top_k, coins);
        for (int b = 0; b < B; b++) {
            if (!running[b]) continue;
            check_token(ids[b], b, seqs[b].ids.size() + 1);
            seqs[b].ids.push_back(ids[b]);
            if ((opt.stop_eot && ids[b] == in.eot) || (int)seqs[b].ids.size() == opt.new_tokens) running[b] = false;
        }
    };
    auto any_running = [&] { return std::count(running.begin(), running.end(), true) > 0; };
    const auto t0 = Clock::now();
    profile.begin_step();
    {
        Range r("prefill", -1, Phase::prefill); // the step in the trace, as the CPU profile's phase range
        dec.prefill(in.prompts);
        sum.prefill_ms = ms_since(t0);
        choose();
    }
    sum.ttft_ms = ms_since(t0);
    profile.end_step(profile.shape.prompt_tokens, !any_running());
    record_prefill(in.prompts, seqs, sum);
    DecodeProgress progress(opt.new_tokens);
    while (any_running()) {
        // Only the running sequences step: the decoder computes a row for each of them and none for the others.
        const std::vector<bool> was = running;
        const auto ts = Clock::now();
        profile.begin_step();
        const long rows = profile.count_decode_step(running, [&](int b) { return dec.length(b); });
        {
            Range r("decode", -1, Phase::decode);
            dec.decode(running);
            choose();
        }
        const double ms = ms_since(ts);
        profile.end_step(rows, !any_running());
        sum.step_ms.push_back(ms);
        for (int b = 0; b < B; b++)
            if (was[b]) seqs[b].decode_ms += ms, sum.decode_tokens++;
        progress.tick((long)sum.step_ms.size() + 1);
    }

    // ---- output ----
    sum.peak_mem_mib = dec.memory.total() / 1048576.0; // device memory: the weights, the one allocation, cuBLASLt's
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
