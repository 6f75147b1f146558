/*
 * train_gpt2: the CPU fp32 reference trainer. Same flags, files and loop as the GPU trainer (llmc/train_loop.h);
 * slow, but every GPU result is checked against it, and its per-sub-block timings are the CPU half of
 * CPU-vs-GPU profiles. With --profile DIR the sub-block executions of a window of steps are recorded and
 * written as a profile directory in the GPU profiler's format (llmc/cpu_profile.h).
 *
 *   ./train_gpt2 -i data/tinyshakespeare -e d4 -b 4 -t 64 -x 200
 */
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "llmc/cpu/adamw.h"
#include "llmc/cpu_profile.h"
#include "llmc/gpt2_cpu.h"
#include "llmc/train_loop.h"

using namespace llmc;

class CPUBackend {
public:
    CPUBackend(const GPT2Config& c, const TrainOptions& opt)
        : model_(c), B_(opt.B), T_(opt.T), m_(model_.num_parameters(), 0.0f), v_(m_.size(), 0.0f) {
        adam_.weight_decay = opt.weight_decay;
        if (!opt.profile_dir.empty())
            profile_ = std::make_unique<prof::CPUProfileWindow>(c, opt.profile_dir, opt.profile_start,
                                                                opt.profile_steps, opt.B, opt.T,
                                                                opt.grad_accum);
    }
    const char* name() const { return "CPU fp32"; }
    void load_weights(const std::vector<float>& w) { std::copy(w.begin(), w.end(), model_.params_memory.begin()); }
    std::vector<float> weights() { return model_.params_memory; }
    int model_file_version() const { return MODEL_VERSION_FP32; }
    void get_moments(std::vector<float>& m, std::vector<float>& v) { m = m_, v = v_; }
    void set_moments(const std::vector<float>& m, const std::vector<float>& v) { m_ = m, v_ = v; }
    const SubBlockTimes* timings() const { return &timings_; }
    std::string step_extras(double, long) const { return ""; }
    void print_memory() const {
        size_t n = model_.num_parameters();
        printf("memory: params %.1f MiB, grads %.1f MiB, AdamW state %.1f MiB\n", n * 4 / 1048576.0,
               n * 4 / 1048576.0, n * 8 / 1048576.0);
    }

    StepStats train_step(DataLoader& train, int grad_accum, float lr, int t) {
        if (profile_) timings_.events = profile_->begin(t - 1);
        StepStats s = run_step(train, grad_accum, lr, t);
        if (profile_) profile_->end((long)grad_accum * B_ * T_);
        timings_.events = nullptr;
        return s;
    }
    void profile_step_done(bool last_step) {
        if (profile_) profile_->step_done(last_step);
    }

    float val_loss(DataLoader& val, int batches) {
        val.restore(DataPosition{}); // the same batches every time
        double sum = 0;
        for (int i = 0; i < batches; i++) {
            val.next_batch();
            model_.forward(val.inputs(), val.targets(), B_, T_);
            sum += model_.mean_loss;
        }
        return (float)(sum / batches);
    }

    std::vector<float> next_token_probs(const std::vector<int>& ids) {
        int t = (int)ids.size();
        model_.forward(ids.data(), nullptr, 1, t);
        const float* p = model_.probs(0, t - 1);
        return std::vector<float>(p, p + model_.config.vocab_size);
    }

private:
    StepStats run_step(DataLoader& train, int grad_accum, float lr, int t) {
        model_.timings = &timings_;
        model_.zero_grad();
        double loss = 0;
        for (int micro = 0; micro < grad_accum; micro++) {
            train.next_batch();
            model_.forward(train.inputs(), train.targets(), B_, T_);
            loss += model_.mean_loss;
            model_.backward(1.0f / grad_accum);
        }
        double norm;
        {
            ScopedSubBlockTimer timer(&timings_, SubBlock::grad_norm, Phase::opt);
            norm = cpu::global_norm(model_.grads_memory.data(), model_.num_parameters());
        }
        {
            ScopedSubBlockTimer timer(&timings_, SubBlock::optimizer, Phase::opt);
            cpu::adamw_update(model_.params_memory.data(), model_.grads_memory.data(), m_.data(), v_.data(),
                              model_.config, adam_, lr, t, norm);
        }
        model_.timings = nullptr;
        return {(float)(loss / grad_accum), (float)norm};
    }

    std::unique_ptr<prof::CPUProfileWindow> profile_;
    GPT2CPU<float> model_;
    int B_, T_;
    std::vector<float> m_, v_;
    AdamWConfig adam_;
    SubBlockTimes timings_;
};

int main(int argc, char** argv) {
    return main_guard([&] {
        TrainOptions defaults;
        defaults.T = 64; // the CPU trainer defaults to short sequences, as llm.c's CPU reference does
        return run_training<CPUBackend>("train_gpt2", argc, argv, defaults);
    });
}
