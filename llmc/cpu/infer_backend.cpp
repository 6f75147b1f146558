// infer_gpt2's backend and program (llmc/cpu/programs.h).
#include "llmc/cpu/programs.h"

#include <sys/resource.h>

#include "llmc/cpu/gpt2_decoder.h"
#include "llmc/infer/pick_token.h"
#include "llmc/profiler/cpu_source.h"

namespace llmc {

namespace {

class CpuInferBackend : public InferBackend {
public:
    CpuInferBackend(const GPT2Config& c, int B, int longest, int max_len)
        : cfg_(c), B_(B), longest_(longest), max_len_(max_len), ids_(B, 0), rows_(B, true) {}

    int elem_bytes() const override { return sizeof(float); }

    // The sub-block executions timed into `timings_`, from load() on.
    std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                          const prof::InferenceShape& shape) override {
        profiling_ = true;
        return prof::make_cpu_inference_session(so, cfg_, shape, longest_, &timings_);
    }

    void load(std::vector<float> params) override {
        model_ = std::make_unique<GPT2CPU<float>>(cfg_);
        std::copy(params.begin(), params.end(), model_->params_memory.begin());
        params = std::vector<float>(); // the model holds its own copy, before the decoder allocates
        dec_ = std::make_unique<GPT2DecoderCPU<float>>(*model_, B_, max_len_);
        if (profiling_) dec_->timings = &timings_;
        logits_.resize((size_t)B_ * cfg_.padded_vocab_size);
    }
    size_t kv_cache_bytes() const override { return dec_->cache_bytes(); }
    int length(int b) const override { return dec_->length(b); }

    void prefill(const std::vector<std::vector<int>>& prompts) override {
        dec_->phase = Phase::prefill;
        dec_->append(prompts, logits_.data());
        rows_.assign(B_, true);
    }
    void decode(const std::vector<bool>& running) override {
        std::vector<std::vector<int>> step(B_);
        for (int b = 0; b < B_; b++)
            if (running[b]) step[b] = {ids_[b]};
        dec_->phase = Phase::decode;
        dec_->append(step, logits_.data());
        rows_ = running;
    }
    const int* sample(float temperature, int top_k, const std::vector<float>& coins) override {
        for (int b = 0; b < B_; b++)
            if (rows_[b])
                ids_[b] = pick_token(logits_.data() + (size_t)b * cfg_.padded_vocab_size, cfg_.vocab_size, temperature,
                                     top_k, coins[b]);
        return ids_.data();
    }

    // The resident set high-water mark of this process.
    double peak_memory_mib() const override {
        struct rusage ru {};
        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_maxrss / 1024.0; // KiB on Linux
    }

private:
    const GPT2Config cfg_;
    const int B_, longest_, max_len_;
    std::unique_ptr<GPT2CPU<float>> model_;
    std::unique_ptr<GPT2DecoderCPU<float>> dec_;
    std::vector<float> logits_;   // (B, Vp): each sequence's row of the last step that computed one
    std::vector<int> ids_;        // each sequence's last chosen id
    std::vector<bool> rows_;      // the sequences the last prefill() or decode() computed a row for
    SubBlockTimes timings_;
    bool profiling_ = false;
};

std::unique_ptr<InferBackend> make_backend(const GPT2Config& c, const InferShape& s) {
    return std::make_unique<CpuInferBackend>(c, s.B, s.longest, s.max_len);
}

} // namespace

InferProgram cpu_infer_program() { return InferProgram{"infer_gpt2", InferOptions{}, make_backend}; }

} // namespace llmc
