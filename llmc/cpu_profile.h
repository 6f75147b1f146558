/*
 * train_gpt2 --profile DIR: the CPU trainer's profile directory, in the GPU profiler's format so the two
 * line up row by row (scripts/compare_profiles.py). Every timed sub-block execution (llmc/subblocks.h)
 * becomes an activity record on a "CPU" device track, named after its op ("cpu:matmul qkv") and attributed
 * to its sub-block, phase, layer and step; each profiled step becomes a StepRecord and each run of one
 * phase inside a step a range. The GPU-only parts (CUDA API, synchronisation, power, device memory) stay
 * empty. Ceilings are a quick calibration: the reference matmul's fp32 FLOP/s and memcpy's bytes/s.
 */
#pragma once
#include <algorithm>
#include <cstring>
#include <fstream>
#include <omp.h>
#include <string>
#include <vector>

#include "llmc/cpu/matmul.h"
#include "llmc/gpt2_config.h"
#include "llmc/profile_report.h"
#include "llmc/profile_schedule.h"
#include "llmc/profile_writers.h"
#include "llmc/subblocks.h"

namespace llmc::prof {

// The op a CPU sub-block runs, as its activity name: "cpu:matmul qkv".
inline std::string cpu_op_name(SubBlock s) {
    static const char* ops[] = {"encoder", "layernorm", "matmul", "attention", "matmul", "residual", "layernorm",
                                "matmul", "gelu", "matmul", "residual", "layernorm", "classifier", "adamw",
                                "global_norm"};
    std::string op = ops[(int)s], name = subblock_name(s);
    return "cpu:" + op + (op == name ? "" : " " + name);
}

// "model name" from /proc/cpuinfo; "unknown CPU" where there is none (not Linux x86, say).
inline std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
            std::string v = line.substr(line.find(':') + 1);
            v.erase(0, v.find_first_not_of(" \t"));
            return v;
        }
    return "unknown CPU";
}

/*
 * Sub-block executions and steps to profiler records. A step's `step` is its index in the window; an
 * execution belongs to the step whose interval holds its start (none are outside one: both are timed by
 * the same clock around the same code).
 */
inline ProfileRecords cpu_profile_records(const std::vector<SubBlockEvent>& events,
                                          const std::vector<StepRecord>& steps) {
    ProfileRecords rec;
    rec.steps = steps;
    for (const StepRecord& s : steps) rec.ranges.push_back({"step", s.start_ns, s.end_ns, 0, 0, {-1, -1, -1, s.step}});
    static const char* phase_ranges[] = {"forward", "backward", "optimizer"};
    for (const SubBlockEvent& e : events) {
        auto start = (uint64_t)e.start_ns, end = (uint64_t)e.end_ns;
        int si = report_detail::step_of(steps, start);
        Attribution where{(int)e.subblock, (int)e.phase, e.layer, si < 0 ? -1 : steps[si].step};
        KernelRecord k;
        k.name = cpu_op_name(e.subblock);
        k.start_ns = start, k.end_ns = end;
        k.where = where;
        rec.kernels.push_back(k);
        // Consecutive executions of one phase make one range ("forward" of a micro-batch, ...).
        RangeRecord* last = rec.ranges.size() > steps.size() ? &rec.ranges.back() : nullptr;
        if (last && last->where.phase == (int)e.phase && last->where.step == where.step)
            last->end_ns = std::max(last->end_ns, end);
        else
            rec.ranges.push_back({phase_ranges[(int)e.phase], start, end, 0, 1, {-1, (int)e.phase, -1, where.step}});
    }
    return rec;
}

/*
 * Compute and bandwidth ceilings of this CPU, measured: the best of a few runs of the reference fp32
 * matmul (the op that dominates a CPU step) and of a 64 MiB memcpy (bytes read + written). About 0.2 s.
 * Both compute ceilings are the fp32 matmul rate: the CPU trainer runs everything in fp32.
 */
inline Ceilings measure_cpu_ceilings() {
    const int BT = 256, C = 768, OC = 768;
    std::vector<float> inp((size_t)BT * C, 0.5f), w((size_t)OC * C, 0.25f), b(OC, 0.f), out((size_t)BT * OC);
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        int64_t t0 = steady_ns();
        cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), 1, BT, C, OC);
        best = std::min(best, (steady_ns() - t0) * 1e-9);
    }
    const size_t bytes = 64u << 20;
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    double best_copy = 1e30;
    for (int i = 0; i < 3; i++) {
        int64_t t0 = steady_ns();
        std::memcpy(dst.data(), src.data(), bytes);
        best_copy = std::min(best_copy, (steady_ns() - t0) * 1e-9);
    }
    Ceilings c;
    c.fp32_tflops = c.bf16_tflops = 2.0 * BT * C * OC / best / 1e12;
    c.dram_gbps = 2.0 * bytes / best_copy / 1e9;
    c.source = strprintf("calibrated: fp32 matmul %dx%dx%d, memcpy 64 MiB", BT, C, OC);
    return c;
}

inline ProfileContext cpu_profile_context(const GPT2Config& c, int B, int T, int grad_accum) {
    ProfileContext ctx;
    ctx.program = "train_gpt2";
    ctx.device_kind = "CPU";
    ctx.device = strprintf("%s (%d threads)", cpu_model_name().c_str(), omp_get_max_threads());
    ctx.build = strprintf("C++ %s, fp32, OpenMP %d threads", __VERSION__, omp_get_max_threads());
    ctx.num_layers = c.num_layers, ctx.num_heads = c.num_heads, ctx.channels = c.channels;
    ctx.max_seq_len = c.max_seq_len, ctx.vocab_size = c.vocab_size, ctx.padded_vocab_size = c.padded_vocab_size;
    ctx.num_parameters = num_parameters(c);
    ctx.B = B, ctx.T = T, ctx.grad_accum = grad_accum;
    return ctx;
}

/*
 * train_gpt2 --profile: records the sub-block executions of the steps its schedule selects
 * (llmc/profile_schedule.h) and writes DIR after the window's last step is printed (or when the run ends
 * inside it).
 */
class CPUProfileWindow {
public:
    CPUProfileWindow(const GPT2Config& c, const std::string& dir, int first, int count, int B, int T, int grad_accum)
        : dir_(dir), schedule_(first, count), ctx_(cpu_profile_context(c, B, T, grad_accum)) {
        ctx_.ceilings = measure_cpu_ceilings();
        printf("profile: %s into %s/; ceilings fp32 %.3f TFLOP/s, memory %.0f GB/s (%s)\n", schedule_.window().c_str(),
               dir_.c_str(), ctx_.ceilings.fp32_tflops, ctx_.ceilings.dram_gbps, ctx_.ceilings.source.c_str());
    }
    // Brackets a step's work (step: the run's 0-based step index); returns where to record its sub-blocks.
    std::vector<SubBlockEvent>* begin(int step) {
        step_ = step;
        in_window_ = schedule_.in_window(step);
        if (!in_window_) return nullptr;
        step_start_ = steady_ns();
        return &events_;
    }
    void end(long tokens) {
        if (!in_window_) return;
        steps_.push_back({(int)steps_.size(), (uint64_t)step_start_, (uint64_t)steady_ns(), tokens});
        schedule_.recorded(step_);
        in_window_ = false;
    }
    void step_done(bool last_step) {
        switch (schedule_.after_step(step_, last_step, true)) {
        case ProfileSchedule::Next::write: finish(); break;
        case ProfileSchedule::Next::give_up: printf("%s\n", schedule_.nothing_recorded(step_, dir_).c_str()); break;
        default: break;
        }
    }

private:
    void finish() {
        ProfileRecords records = cpu_profile_records(events_, steps_);
        Report report = build_report(records, ctx_);
        printf("%s", format_summary(report).c_str());
        write_profile_dir(dir_, report, records);
        printf("profile: %s written to %s/\n", schedule_.recorded_steps().c_str(), dir_.c_str());
    }

    std::string dir_;
    ProfileSchedule schedule_;
    ProfileContext ctx_;
    std::vector<SubBlockEvent> events_;
    std::vector<StepRecord> steps_;
    int64_t step_start_ = 0;
    int step_ = -1;
    bool in_window_ = false;
};

} // namespace llmc::prof
