/*
 * train_gpt2cu: the GPU trainer. bf16 parameters, activations and gradients; fp32 master weights, AdamW
 * moments, layernorm statistics and losses; cuBLASLt matmuls with fused epilogues; our own fused kernels for
 * the rest (one header per op in llmc/). The loop, flags and files are the CPU reference's (llmc/train_loop.h), so every
 * result can be checked against ./train_gpt2 and checkpoints move freely between the two.
 *
 *   make train_gpt2cu && ./train_gpt2cu -i data/tinyshakespeare
 *
 * A step queues all its kernels without waiting; the one synchronisation is reading the step's loss and
 * grad norm at its end. With --profile DIR a window of steps is traced in-process with CUPTI (the same
 * collector and report as profile_gpt2cu) and DIR is written when the window closes.
 */
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "llmc/calibrate.cuh"
#include "llmc/cupti_collector.cuh"
#include "llmc/nvml_sampler.h"
#include "llmc/device_specs.h"
#include "llmc/gpt2.cuh"
#include "llmc/optimizer.h"
#include "llmc/profile_report.h"
#include "llmc/profile_schedule.h"
#include "llmc/profile_writers.h"
#include "llmc/train_loop.h"

using namespace llmc;

/*
 * --profile DIR: the steps its schedule selects (llmc/profile_schedule.h) traced with CUPTI. Everything the
 * profiler adds to the loop happens between steps, after the step line is printed: the collector starts
 * one step before the window, each traced step is flushed after its loss read, and the profile is written
 * when the window closes (or the run ends inside it). The ceilings are measured (or read from their cache)
 * at construction, before the model takes the device memory.
 */
class ProfileWindow {
public:
    ProfileWindow(const GPT2Config& c, const TrainOptions& opt)
        : dir_(opt.profile_dir), schedule_(opt.profile_start, opt.profile_steps), config_(c), B_(opt.B), T_(opt.T),
          grad_accum_(opt.grad_accum), ceilings_(prof::measure_ceilings(true)) {
        printf("profile: %s into %s/; ceilings bf16 %.0f TFLOP/s, DRAM %.0f GB/s (%s)\n", schedule_.window().c_str(),
               dir_.c_str(), ceilings_.bf16_tflops, ceilings_.dram_gbps, ceilings_.source.c_str());
        if (schedule_.arm_at_start()) arm();
    }
    // Brackets a step's work; step is the run's 0-based step index.
    void begin(int step) {
        step_ = step;
        in_window_ = armed() && schedule_.in_window(step);
        if (!in_window_) return;
        power_->mark();
        collector_->begin_step(schedule_.num_recorded());
    }
    void end(long tokens) {
        if (!in_window_) return;
        collector_->end_step(tokens);
        power_->mark();
        schedule_.recorded(step_);
        in_window_ = false;
    }
    void step_done(bool last_step) {
        if (armed()) {
            // Off the step's clock but not free: the run's throughput pays it, so it is reported at the end.
            int64_t t0 = steady_ns();
            collector_->flush();
            flush_ns_ += steady_ns() - t0;
        }
        switch (schedule_.after_step(step_, last_step, armed())) {
        case prof::ProfileSchedule::Next::arm: arm(); break;
        case prof::ProfileSchedule::Next::write: finish(); break;
        case prof::ProfileSchedule::Next::give_up:
            stop();
            printf("%s\n", schedule_.nothing_recorded(step_, dir_).c_str());
            break;
        case prof::ProfileSchedule::Next::keep_going: break;
        }
    }

private:
    bool armed() const { return collector_ && collector_->running(); }
    void arm() {
        collector_ = std::make_unique<prof::CuptiCollector>();
        bool started = false;
        try {
            started = collector_->start(); // false: another tool holds CUPTI
        } catch (const Error& e) {
            printf("%s; training goes on untraced\n", e.what());
        }
        if (!started) {
            schedule_.abandon();
            collector_.reset();
            return;
        }
        // Power in CUPTI's timebase, sampled for as long as the collector runs.
        int device = 0;
        char bus_id[32] = {};
        if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) != cudaSuccess)
            bus_id[0] = '\0';
        power_ = std::make_unique<prof::PowerSampler>(prof::CuptiCollector::timestamp, 100, bus_id);
        if (!power_->start()) printf("power: %s\n", power_->status().c_str());
    }
    void stop() {
        if (!collector_) return;
        collector_->stop();
        power_->stop();
    }
    void finish() {
        stop();
        prof::ProfileRecords records = collector_->take();
        power_->take_into(records);
        collector_.reset();
        power_.reset();
        prof::ProfileContext ctx = prof::gpu_profile_context("train_gpt2cu", config_, B_, T_, grad_accum_);
        ctx.ceilings = ceilings_;
        prof::Report report = prof::build_report(records, ctx);
        printf("%s", prof::format_summary(report).c_str());
        prof::write_profile_dir(dir_, report, records);
        std::string dropped = records.dropped_records ? strprintf(" (%llu CUPTI records dropped: incomplete)",
                                                                 (unsigned long long)records.dropped_records)
                                                      : "";
        printf("profile: %s written to %s/%s\n", schedule_.recorded_steps().c_str(), dir_.c_str(), dropped.c_str());
        printf("profile: %.3f ms per traced step flushing CUPTI buffers between steps (not in the step times)\n",
               flush_ns_ / 1e6 / schedule_.num_recorded());
    }

    std::string dir_;
    prof::ProfileSchedule schedule_;
    GPT2Config config_;
    int B_, T_, grad_accum_;
    prof::Ceilings ceilings_;
    std::unique_ptr<prof::CuptiCollector> collector_;
    std::unique_ptr<prof::PowerSampler> power_; // set with a running collector_
    int step_ = -1;
    int64_t flush_ns_ = 0; // summed time of the between-step flushes
    bool in_window_ = false;
};

class GPUBackend {
public:
    GPUBackend(const GPT2Config& c, const TrainOptions& opt)
        : profile_(opt.profile_dir.empty() ? nullptr : std::make_unique<ProfileWindow>(c, opt)),
          model_(c, opt.B, opt.T), B_(opt.B), T_(opt.T) {
        adam_.weight_decay = opt.weight_decay;
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
        name_ = strprintf("GPU bf16, %s", p.name);
        spec_ = lookup_device_spec(p.name);
    }
    const char* name() const { return name_.c_str(); }
    void load_weights(const std::vector<float>& w) { model_.set_parameters(w.data()); }
    std::vector<float> weights() { return model_.get_master_weights(); }
    int model_file_version() const { return MODEL_VERSION_BF16; }
    void get_moments(std::vector<float>& m, std::vector<float>& v) {
        m = model_.get_moments_m();
        v = model_.get_moments_v();
    }
    void set_moments(const std::vector<float>& m, const std::vector<float>& v) { model_.set_moments(m, v); }
    const SubBlockTimes* timings() const { return nullptr; } // per-kernel GPU timing is the profiler's job
    // MFU against the datasheet bf16 peak, and device memory in use (everything is allocated up front, so
    // this is the run's peak).
    std::string step_extras(double ms, long tokens) const {
        std::string s;
        if (spec_) {
            const GPT2Config& c = model_.config;
            double flops = gpt2_flops_per_token(model_.num_params, c.num_layers, c.channels, T_) * tokens;
            s += strprintf(" | MFU %.1f%%", 100.0 * flops / (ms * 1e-3) / (spec_->bf16_tflops * 1e12));
        }
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            s += strprintf(" | mem %.2f GiB", (total_b - free_b) / 1073741824.0);
        return s;
    }
    void print_memory() const {
        const GPUMemoryPlan& p = model_.memory;
        auto mib = [](size_t b) { return b / 1048576.0; };
        printf("GPU memory: params %.0f MiB, grads %.0f MiB, optimizer (master, m, v) %.0f MiB, activations %.0f MiB "
               "(of %.0f MiB free); largest micro-batch at T=%d: %d\n",
               mib(p.params), mib(p.grads), mib(p.optimizer), mib(p.activations), mib(p.free_before), T_, p.max_batch);
    }

    StepStats train_step(DataLoader& train, int grad_accum, float lr, int t) {
        if (profile_) profile_->begin(t - 1);
        StepStats s = run_step(train, grad_accum, lr, t);
        if (profile_) profile_->end((long)grad_accum * B_ * T_);
        return s;
    }
    void profile_step_done(bool last_step) {
        if (profile_) profile_->step_done(last_step);
    }

    float val_loss(DataLoader& val, int batches) {
        val.restore(DataPosition{}); // the same batches every time
        model_.zero_loss();
        for (int i = 0; i < batches; i++) {
            val.next_batch();
            model_.forward(val.inputs(), val.targets(), B_, T_, 1.0f / ((float)B_ * T_ * batches), 0.0f);
        }
        model_.fetch_scalars();
        return model_.read_scalars().first;
    }

    // The activations hold B*T positions: a longer context (only with -b 1 and -g beyond -t) is cut to its
    // last B*T tokens.
    std::vector<float> next_token_probs(const std::vector<int>& ids) {
        int t = std::min((int)ids.size(), B_ * T_);
        model_.forward(ids.data() + ids.size() - t, nullptr, 1, t, 0.0f, 0.0f);
        std::vector<float> logits = model_.logits_row(t - 1);
        int V = model_.config.vocab_size;
        float mx = *std::max_element(logits.begin(), logits.begin() + V);
        double sum = 0;
        std::vector<float> p(V);
        for (int i = 0; i < V; i++) sum += p[i] = std::exp(logits[i] - mx);
        for (float& x : p) x = (float)(x / sum);
        return p;
    }

private:
    StepStats run_step(DataLoader& train, int grad_accum, float lr, int t) {
        auto next = [&train] {
            train.next_batch();
            return std::make_pair(train.inputs(), train.targets());
        };
        auto [loss, norm] = model_.train_step(next, B_, T_, grad_accum, lr, adam_, t);
        return {loss, norm};
    }

    std::unique_ptr<ProfileWindow> profile_; // before model_: the ceilings are measured before it is allocated
    GPT2GPU model_;
    int B_, T_;
    AdamWConfig adam_;
    std::string name_;
    const DeviceSpec* spec_ = nullptr;
};

int main(int argc, char** argv) {
    return main_guard([&] {
        TrainOptions defaults; // GPT-2 124M, B=4, T=1024 (llm.c's defaults)
        bool help = false;
        for (int i = 1; i < argc; i++) help |= std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help";
        if (!help) {
            if (cuda_device_count() == 0)
                throw Error("no CUDA device found: train_gpt2cu needs an NVIDIA GPU (sm_80 or newer); "
                            "./train_gpt2 is the CPU trainer with the same flags");
            cudaDeviceProp p;
            CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
            if (p.major < 8)
                throw Error(strprintf("%s is sm_%d%d: train_gpt2cu needs sm_80 or newer (bf16 tensor cores)", p.name,
                                      p.major, p.minor));
        }
        return run_training<GPUBackend>("train_gpt2cu", argc, argv, defaults);
    });
}
