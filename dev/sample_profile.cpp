/*
 * Writes test/data/sample_profile/: a profile directory from synthetic records that resemble two
 * train_gpt2cu steps of GPT-2 124M (B=4, T=1024) on an H100, with power samples and the hardware counters of
 * a counted step (--counters). It exercises the plot and compare scripts (test/test_plots.cpp), the GPU report
 * (test/test_gpu_check.cpp) and Holistic Trace Analysis (test/test_hta.cpp) on a machine without a GPU,
 * through the project's own aggregation and writers. Kernel times are the analytic floor
 * (llmc/profiler/roofline.h) over a plausible efficiency; launches run ahead of the GPU; each step ends in a
 * loss read and a stream sync. The counted step is the last one as kernel replay would count it: the analytic
 * GEMM FLOPs less 0.2% (attention's masked tiles 2% less), elementwise FLOPs 20% more, DRAM bytes 15% more.
 * Its energy.csv (--energy) is measured on a scripted counter and says so (synthetic).
 *
 *   make sample_profile   (writes test/data/sample_profile)
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/profiler/counter_records.h"
#include "llmc/profiler/report.h"
#include "llmc/profiler/writers.h"
#include "test/scripted_energy.h"

using namespace llmc;
using namespace llmc::prof;

namespace {

constexpr uint64_t US = 1000;

// The kernels of one execution of a sub-block, and the share of its time each takes.
std::vector<std::pair<std::string, double>> kernels_of(SubBlock s, Phase p) {
    const std::string gemm = "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT";
    const bool bwd = p == Phase::bwd;
    switch (s) {
    case SubBlock::encoder:
        return {{bwd ? "void llmc::encoder_backward_wte_kernel(__nv_bfloat16*)" : "void llmc::encoder_forward_kernel(int)", 1}};
    case SubBlock::ln1:
    case SubBlock::ln2:
    case SubBlock::lnf:
        return {{bwd ? "void llmc::layernorm_backward_kernel(__nv_bfloat16*)" : "void llmc::layernorm_forward_kernel(__nv_bfloat16*)", 1}};
    case SubBlock::attention:
        if (bwd)
            return {{"void llmc::attention_detail::attention_backward_dq_kernel<64, 64>(int)", 0.45},
                    {"void llmc::attention_detail::attention_backward_dkv_kernel<64, 64>(int)", 0.55}};
        return {{"void llmc::attention_detail::attention_forward_kernel<64, 64>(int)", 1}};
    case SubBlock::classifier:
        if (bwd) return {{gemm, 0.5}, {gemm, 0.5}};
        return {{gemm, 0.8}, {"void llmc::fused_classifier_kernel(__nv_bfloat16*)", 0.2}};
    case SubBlock::optimizer: return {{"void llmc::adamw_kernel(__nv_bfloat16*, float*)", 1}};
    case SubBlock::grad_norm: return {{"void llmc::global_norm_partial_kernel(float*)", 1}};
    default: // the matmuls: one GEMM forward; dinp and dweight GEMMs and the bias reduction backward
        if (bwd) return {{gemm, 0.45}, {gemm, 0.45}, {"void llmc::bias_backward_partial_kernel(float*)", 0.1}};
        return {{gemm, 1}};
    }
}

// Kernel k as kernel replay counts it, for its share `cost` of the analytic model (the file's comment says how
// the counts differ from the model's).
KernelCounters counted_kernel(const KernelRecord& k, const OpCost& cost, const Ceilings& ceilings) {
    KernelCounters n;
    n.name = k.name;
    n.time_ns = (k.end_ns - k.start_ns) * 1.05;
    n.tensor_ops = cost.gemm_flops * (k.where.subblock == (int)SubBlock::attention ? 0.98 : 0.998);
    n.ffma = cost.other_flops * 0.6; // two FLOPs each: 20% more than the analytic count
    n.dram_read = cost.bytes * 0.8, n.dram_write = cost.bytes * 0.35, n.l2_bytes = cost.bytes * 2.1;
    n.peak_tensor_flops = ceilings.bf16_tflops * 1e12, n.peak_fp32_flops = ceilings.fp32_tflops * 1e12;
    n.peak_dram_bytes = ceilings.dram_gbps * 1e9;
    return n;
}

// NVML-like samples every 2 ms from 0 to t_end: idle, then under load during the steps.
void add_power_samples(ProfileRecords& rec, uint64_t t_end) {
    for (uint64_t t = 0; t <= t_end; t += 2000 * US) {
        bool busy = t >= rec.steps.front().start_ns && t < rec.steps.back().end_ns;
        double w = busy ? 610 + 40 * std::sin(t / 3e6) : 120 + 0.02 * (t / 1e6);
        rec.power.push_back({t, w, busy ? 1980 : 1755, 2619, busy ? 58 : 41, 0});
    }
    rec.power_reading = "instantaneous";
}

// The counted kernels joined to the traced kernels of the last step and summed per sub-block, as profile_gpt2cu
// does; returns why they do not join ("" when they do).
std::string join_counted_step(const ProfileRecords& rec, CounterReport& counted) {
    std::string why = join_by_launch_order(last_step_kernels(rec), counted.kernels);
    if (why.empty()) aggregate_counters(counted);
    return why;
}

} // namespace

/*
 * --energy's measurements (llmc/profiler/energy.h) on a scripted counter (test/scripted_energy.h), labelled
 * synthetic: each sub-block of the traced steps replayed at its time per step and a power by what bounds it
 * (compute 640 W, memory 480 W, else 300 W; idle 90 W), the counter updated every 100 ms with 3% noise per update.
 */
EnergyRecords scripted_energy(const Report& traced) {
    std::vector<testutil::ScriptedPart> parts;
    std::vector<std::string> layers;
    std::vector<std::string> names; // the parts' names outlive them
    names.reserve(2 * traced.subblocks.size());
    for (const SubBlockRow& row : traced.subblocks) {
        if (row.subblock < 0 || row.time_us <= 0) continue;
        const std::string bound = row.roof.bound;
        const double watts = bound == "compute" ? 640 : bound == "memory" ? 480 : 300;
        names.push_back(subblock_name((SubBlock)row.subblock));
        names.push_back(phase_name((Phase)row.phase));
        parts.push_back({names[names.size() - 2].c_str(), names.back().c_str(),
                         row.time_us * 1e-6 / std::max(1, traced.num_steps), watts});
        const SubBlock sb = (SubBlock)row.subblock;
        const bool per_layer = sb != SubBlock::encoder && sb != SubBlock::lnf && sb != SubBlock::classifier &&
                               row.phase != (int)Phase::opt;
        layers.push_back(per_layer ? strprintf("0-%d", traced.context.model.num_layers - 1) : "-");
    }
    testutil::ScriptedEnergyDevice dev(90, 0.1, 0.03, 7);
    std::vector<ReplayTarget> targets = testutil::scripted_targets(dev, parts);
    for (size_t i = 0; i < layers.size(); i++) targets[i].layers = layers[i];
    targets.insert(targets.begin(), ReplayTarget{"idle", "-", "-", EnergyKind::idle, nullptr});
    return measure_energy(targets, dev, dev.clock(), EnergyOptions{});
}

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : "test/data/sample_profile";
    GPT2Config cfg = gpt2_config_for_depth(12);
    const int B = 4, T = 1024, L = cfg.num_layers, steps = 2;
    ProfileContext ctx;
    ctx.program = "train_gpt2cu";
    ctx.device = "NVIDIA H100 80GB HBM3 (synthetic sample)";
    ctx.build = "synthetic records from dev/sample_profile.cpp";
    ctx.model = cfg;
    ctx.num_parameters = num_parameters(cfg);
    ctx.B = B, ctx.T = T;
    ctx.ceilings = {720, 48, 3000, "calibrated (synthetic)"};
    ctx.peak_memory_bytes = 12ull << 30;
    const CostTable costs = analytic_costs(cfg, B, T, 1);

    ProfileRecords rec;
    CounterReport counted;
    counted.collected = true;
    counted.tensor_flops_per_op = 1;
    uint64_t cpu = 10000 * US, gpu = cpu; // CPU launch cursor, GPU cursor
    uint32_t corr = 1;
    auto launch = [&](SubBlock s, Phase p, int layer, int step) {
        const bool per_layer = s >= SubBlock::ln1 && s <= SubBlock::residual2;
        const OpCost& c = costs[(int)s][(int)p];
        RooflinePoint floor = roofline_point(c * (per_layer ? 1.0 / L : 1.0), 0, ctx.ceilings);
        if (!(floor.floor_s > 0)) return; // fused into a neighbour on the GPU: no kernel of its own
        double efficiency = c.gemm_flops > 0 ? 0.6 : 0.4;
        for (auto& [name, share] : kernels_of(s, p)) {
            ApiRecord a{"cudaLaunchKernel", cpu, cpu + 3 * US, 1, corr};
            cpu += 4 * US;
            KernelRecord k;
            k.name = name;
            k.start_ns = std::max(gpu, a.end_ns) + 1 * US;
            k.end_ns = k.start_ns + (uint64_t)(floor.floor_s / efficiency * share * 1e9) + 2 * US;
            k.stream = 7, k.correlation = corr++;
            k.grid[0] = 528, k.block[0] = 256, k.registers_per_thread = 64;
            k.where = {(int)s, (int)p, layer, step};
            gpu = k.end_ns;
            rec.api.push_back(a);
            rec.kernels.push_back(k);
            if (step == steps)
                counted.kernels.push_back(counted_kernel(k, c * (share / (per_layer ? L : 1)), ctx.ceilings));
        }
    };
    auto range = [&](const char* name, uint64_t start, int depth, Attribution w) {
        rec.ranges.push_back({name, start, std::max(cpu, start + 1), 1, depth, w});
    };
    for (int step = 1; step <= steps; step++) { // numbered as a run's step lines number them
        const uint64_t step_start = cpu;
        uint64_t t = cpu;
        launch(SubBlock::encoder, Phase::fwd, -1, step);
        for (int l = 0; l < L; l++)
            for (int s = (int)SubBlock::ln1; s <= (int)SubBlock::residual2; s++)
                launch((SubBlock)s, Phase::fwd, l, step);
        launch(SubBlock::lnf, Phase::fwd, -1, step);
        launch(SubBlock::classifier, Phase::fwd, -1, step);
        range("forward", t, 1, {-1, (int)Phase::fwd, -1, step});
        t = cpu;
        launch(SubBlock::classifier, Phase::bwd, -1, step);
        launch(SubBlock::lnf, Phase::bwd, -1, step);
        for (int l = L - 1; l >= 0; l--)
            for (int s = (int)SubBlock::residual2; s >= (int)SubBlock::ln1; s--) launch((SubBlock)s, Phase::bwd, l, step);
        launch(SubBlock::encoder, Phase::bwd, -1, step);
        range("backward", t, 1, {-1, (int)Phase::bwd, -1, step});
        t = cpu;
        launch(SubBlock::grad_norm, Phase::opt, -1, step);
        launch(SubBlock::optimizer, Phase::opt, -1, step);
        range("optimizer", t, 1, {-1, (int)Phase::opt, -1, step});
        // The loss read: a small copy after the last kernel, and the CPU blocked until it lands.
        rec.api.push_back({"cudaMemcpyAsync", cpu, cpu + 5 * US, 1, corr});
        MemcpyRecord m;
        m.kind = CopyKind::DtoH, m.bytes = 8, m.start_ns = gpu + 2 * US, m.end_ns = gpu + 4 * US;
        m.stream = 7, m.correlation = corr++, m.where = {-1, -1, -1, step};
        rec.memcpys.push_back(m);
        rec.api.push_back({"cudaStreamSynchronize", cpu + 6 * US, m.end_ns + 3 * US, 1, corr});
        rec.syncs.push_back({"stream", cpu + 6 * US, m.end_ns + 3 * US, 7, corr++});
        gpu = cpu = m.end_ns + 60 * US; // the step line is printed between steps
        range("step", step_start, 0, {-1, -1, -1, step});
        rec.steps.push_back({step, step_start, cpu, (long)B * T});
    }
    add_power_samples(rec, cpu + 10000 * US);
    const std::string unjoined = join_counted_step(rec, counted);
    if (!unjoined.empty()) {
        fprintf(stderr, "sample_profile: the counted step does not join the traced one: %s\n", unjoined.c_str());
        return 1;
    }

    rec.energy_replays = scripted_energy(build_report(rec, ctx));
    Report report = build_report(rec, ctx);
    report.counters = std::move(counted);
    write_profile_dir(dir, report, rec);
    printf("wrote %s: %zu kernels, %zu power samples, %d steps\n", dir.c_str(), rec.kernels.size(), rec.power.size(),
           steps);
    return 0;
}
