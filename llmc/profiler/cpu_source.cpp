// The CPU trainer's event source and session (llmc/profiler/cpu_source.h).
#include "llmc/profiler/cpu_source.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <omp.h>

#include "llmc/cpu/matmul.h"
#include "llmc/profiler/report.h"

namespace llmc::prof {

std::string cpu_op_name(SubBlock s) {
    static constexpr const char* ops[] = {"encoder", "layernorm", "matmul",     "attention", "matmul",
                                          "residual", "layernorm", "matmul",     "gelu",      "matmul",
                                          "residual", "layernorm", "classifier", "adamw",     "global_norm",
                                          "mpi"};
    std::string op = enum_table<SubBlock>(ops)[(int)s], name = subblock_name(s);
    return "cpu:" + op + (op == name ? "" : " " + name);
}

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
            std::string v = line.substr(line.find(':') + 1);
            v.erase(0, v.find_first_not_of(" \t"));
            return v;
        }
    return "unknown CPU";
}

ProfileRecords cpu_profile_records(const std::vector<SubBlockEvent>& events, const std::vector<StepRecord>& steps) {
    ProfileRecords rec;
    rec.steps = steps;
    for (const StepRecord& s : steps) rec.ranges.push_back({"step", s.start_ns, s.end_ns, 0, 0, {-1, -1, -1, s.step}});
    static constexpr const char* phase_ranges[] = {"forward", "backward", "optimizer"};
    const StepWindow window(steps);
    for (const SubBlockEvent& e : events) {
        auto start = (uint64_t)e.start_ns, end = (uint64_t)e.end_ns;
        int si = window.step_of(start);
        Attribution where{(int)e.subblock, (int)e.phase, e.layer, si < 0 ? -1 : window.steps()[si].step};
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
            rec.ranges.push_back({enum_table<Phase>(phase_ranges)[(int)e.phase], start, end, 0, 1,
                                  {-1, (int)e.phase, -1, where.step}});
    }
    return rec;
}

Ceilings measure_cpu_ceilings() {
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

void CpuEventSource::begin_step(int index) {
    index_ = index;
    timings_->events = &events_;
    step_start_ = steady_ns();
}

void CpuEventSource::end_step(long tokens) {
    steps_.push_back({index_, (uint64_t)step_start_, (uint64_t)steady_ns(), tokens});
    timings_->events = nullptr;
}

std::unique_ptr<ProfileSession> make_cpu_profile_session(const SessionOptions& opt, const GPT2Config& c, int B, int T,
                                                         int grad_accum, SubBlockTimes* timings, int rank,
                                                         int world_size) {
    ProfileContext ctx;
    ctx.program = "train_gpt2";
    ctx.device_kind = DeviceKind::CPU;
    ctx.device = strprintf("%s (%d threads)", cpu_model_name().c_str(), omp_get_max_threads());
    ctx.build = strprintf("C++ %s, fp32, OpenMP %d threads", __VERSION__, omp_get_max_threads());
    ctx.model = c;
    ctx.num_parameters = num_parameters(c);
    ctx.B = B, ctx.T = T, ctx.grad_accum = grad_accum;
    ctx.rank = rank, ctx.world_size = world_size;
    ctx.ceilings = measure_cpu_ceilings();
    printf("profile: %s into %s/; ceilings fp32 %.3f TFLOP/s, memory %.0f GB/s (%s)\n",
           ProfileSchedule(opt.first_step, opt.steps).window().c_str(), opt.dir.c_str(), ctx.ceilings.fp32_tflops,
           ctx.ceilings.dram_gbps, ctx.ceilings.source.c_str());
    return std::make_unique<ProfileSession>(opt, std::move(ctx), std::make_unique<CpuEventSource>(timings));
}

} // namespace llmc::prof
