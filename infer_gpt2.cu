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

#include "llmc/gpt2_decoder.cuh"
#include "llmc/infer.h"
#include "llmc/profiler/cupti_source.cuh"

namespace llmc {
namespace {

int run(int argc, char** argv) {
    const InferOptions opt = parse_infer_options(argc, argv);
    if (opt.help) {
        printf("%s", infer_usage("infer_gpt2cu").c_str());
        return 0;
    }
    require_gpu("infer_gpt2cu", "./infer_gpt2 generates on the CPU with the same flags");
    InferInputs in = load_infer_inputs(opt);
    const GPT2Config& cfg = in.cfg;
    const int B = (int)in.prompts.size();
    // --profile (llmc/infer.h InferProfile): the session, and its ceilings, before the decoder takes the memory.
    InferProfile profile(opt, in.prompts, sizeof(floatX));
    profile.start([&](const prof::SessionOptions& so) {
        prof::ProfileContext ctx = prof::gpu_profile_context("infer_gpt2cu", cfg, B, in.longest, 1);
        ctx.inference = profile.shape;
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
