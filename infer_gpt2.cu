/*
 * infer_gpt2cu: GPT-2 text generation on the GPU in bf16 with a KV cache (llmc/gpt2_decoder.cuh): the prompts
 * of all B sequences go through the model together (prefill), then one token per sequence per step (decode);
 * tokens are chosen on the GPU (llmc/sample.cuh) and only their ids cross to the host. Same flags and output
 * as infer_gpt2 (llmc/infer.h, doc/flags.md); --profile is infer_gpt2's alone for now.
 *
 *   ./infer_gpt2cu -e d12 --prompt-len 128 -n 128 -b 8 --temperature 0
 */
#include <chrono>
#include <cstdio>
#include <vector>

#include "llmc/gpt2_decoder.cuh"
#include "llmc/infer.h"

namespace llmc {
namespace {

int run(int argc, char** argv) {
    const InferOptions opt = parse_infer_options(argc, argv);
    if (opt.help) {
        printf("%s", infer_usage("infer_gpt2cu").c_str());
        return 0;
    }
    if (!opt.profile_dir.empty())
        throw UsageError("--profile: infer_gpt2cu does not profile yet; infer_gpt2 --profile profiles the CPU run");
    InferInputs in = load_infer_inputs(opt);
    const GPT2Config& cfg = in.cfg;
    const int B = (int)in.prompts.size();
    GPT2DecoderGPU dec(cfg, in.params.data(), B, in.longest, in.longest + opt.new_tokens);
    in.params = std::vector<float>(); // the device holds the weights now

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
            seqs[b].ids.push_back(ids[b]);
            if ((opt.stop_eot && ids[b] == in.eot) || (int)seqs[b].ids.size() == opt.new_tokens) running[b] = false;
        }
    };
    auto any_running = [&] { return std::count(running.begin(), running.end(), true) > 0; };
    const auto t0 = Clock::now();
    dec.prefill(in.prompts);
    sum.prefill_ms = ms_since(t0);
    choose();
    sum.ttft_ms = ms_since(t0);
    record_prefill(in.prompts, seqs, sum);
    while (any_running()) {
        // Every sequence steps (a fixed shape); a finished one's tokens are dropped, and its cache has room for
        // them: it stopped before its prompt + -n tokens.
        const std::vector<bool> was = running;
        const auto ts = Clock::now();
        dec.decode();
        choose();
        const double ms = ms_since(ts);
        sum.step_ms.push_back(ms);
        for (int b = 0; b < B; b++)
            if (was[b]) seqs[b].decode_ms += ms, sum.decode_tokens++;
    }

    // ---- output ----
    sum.peak_mem_mib = dec.memory.total() / 1048576.0; // device memory: the weights, the one allocation, cuBLASLt's
    print_results(opt, in, seqs, sum);
    return 0;
}

} // namespace
} // namespace llmc

int main(int argc, char** argv) {
    return llmc::main_guard([&] { return llmc::run(argc, argv); });
}
