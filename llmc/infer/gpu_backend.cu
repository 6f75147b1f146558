// infer_gpt2cu's backend (llmc/infer/gpu_backend.h).
#include "llmc/infer/gpu_backend.h"

#include <cstdio>
#include <optional>

#include "llmc/checkpoint.h"
#include "llmc/gpt2_decoder.cuh"
#include "llmc/nvtx.h"
#include "llmc/profiler/gpu_session.h"
#include "llmc/profiler/memory.h"

namespace llmc {

namespace {

/*
 * Each step is one NVTX range of its phase, "prefill" or "decode", from prefill() or decode() to the end of the
 * sample() that follows: the step in the trace, as the CPU profile's phase range. The decoder's own sub-block
 * ranges put its kernels in Phase::prefill and Phase::decode.
 */
class GpuInferBackend : public InferBackend {
public:
    GpuInferBackend(const GPT2Config& c, int B, int longest, int max_len)
        : cfg_(c), B_(B), longest_(longest), max_len_(max_len) {}

    int elem_bytes() const override { return sizeof(floatX); }

    std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                          const prof::InferenceShape& shape) override {
        prof::ProfileContext ctx = prof::profile_context("infer_gpt2cu", cfg_, B_, longest_, 1);
        ctx.inference = shape;
        ctx.memory = plan_gpu_inference(cfg_, B_, longest_, max_len_);
        return prof::make_gpu_profile_session(so, std::move(ctx));
    }

    void load(std::vector<float> params) override {
        dec_ = std::make_unique<GPT2DecoderGPU>(cfg_, params.data(), B_, longest_, max_len_);
    }
    size_t kv_cache_bytes() const override { return dec_->cache_bytes(); }
    int length(int b) const override { return dec_->length(b); }

    void prefill(const std::vector<std::vector<int>>& prompts) override {
        step_.emplace("prefill", -1, Phase::prefill);
        dec_->prefill(prompts);
    }
    // Only the running sequences step: the decoder computes a row for each of them and none for the others.
    void decode(const std::vector<bool>& running) override {
        step_.emplace("decode", -1, Phase::decode);
        dec_->decode(running);
    }
    const int* sample(float temperature, int top_k, const std::vector<float>& coins) override {
        const int* ids = dec_->sample(temperature, top_k, coins);
        step_.reset();
        return ids;
    }

    // Device memory: the weights, the one allocation, cuBLASLt's workspace.
    double peak_memory_mib() const override { return dec_->memory.total() / 1048576.0; }

private:
    const GPT2Config cfg_;
    const int B_, longest_, max_len_;
    std::unique_ptr<GPT2DecoderGPU> dec_;
    std::optional<Range> step_; // the open step's range
};

} // namespace

std::unique_ptr<InferBackend> make_gpu_infer_backend(const GPT2Config& c, int B, int longest, int max_len) {
    return std::make_unique<GpuInferBackend>(c, B, longest, max_len);
}

int print_gpu_memory_plan(const InferOptions& opt) {
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

void require_inference_gpu() { require_gpu("infer_gpt2cu", "./infer_gpt2 generates on the CPU with the same flags"); }

} // namespace llmc
