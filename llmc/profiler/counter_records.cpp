// Hardware counters joined to the traced kernels and summed per sub-block (llmc/profiler/counter_records.h).
#include "llmc/profiler/counter_records.h"

#include <algorithm>

namespace llmc::prof {

void scale_tensor_ops(CounterReport& r, double flops_per_op) {
    if (flops_per_op <= 0) return;
    for (KernelCounters& k : r.kernels) k.tensor_ops *= flops_per_op, k.peak_tensor_flops *= flops_per_op;
    r.tensor_flops_per_op = flops_per_op;
}

std::string kernel_base_name(const std::string& name) {
    std::string s = name.substr(0, name.find('('));
    size_t sp = s.find_last_of(' ');
    if (sp != std::string::npos && s.find('<') > sp) s = s.substr(sp + 1); // drop a return type
    return s;
}

bool is_range_index(const std::string& name) {
    return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
}

std::string join_by_launch_order(std::vector<KernelRecord> traced, std::vector<KernelCounters>& counted) {
    std::stable_sort(traced.begin(), traced.end(),
                     [](const KernelRecord& a, const KernelRecord& b) { return a.correlation < b.correlation; });
    if (traced.size() != counted.size())
        return strprintf("the counted step launched %zu kernels, the traced step %zu", counted.size(),
                                  traced.size());
    for (size_t i = 0; i < traced.size(); i++)
        if (!is_range_index(counted[i].name) && kernel_base_name(traced[i].name) != kernel_base_name(counted[i].name))
            return strprintf("kernel %zu is %s in the counted step but %s in the traced step", i,
                                      counted[i].name.c_str(), traced[i].name.c_str());
    for (size_t i = 0; i < traced.size(); i++) counted[i].name = traced[i].name, counted[i].where = traced[i].where;
    return "";
}

void aggregate_counters(CounterReport& r) {
    auto phase_key = [](int p) { return p < 0 ? 1 << 20 : p; }; // "(none)" last
    auto sub_key = [](int s) { return s < 0 ? 1 << 20 : s; };
    std::map<std::pair<int, int>, CounterRow> by_sub;
    std::map<std::tuple<std::string, int, int>, CounterRow> by_kernel;
    r.total = CounterRow{};
    for (const KernelCounters& k : r.kernels) {
        CounterRow& s = by_sub[{phase_key(k.where.phase), sub_key(k.where.subblock)}];
        s.subblock = k.where.subblock, s.phase = k.where.phase;
        s.add(k);
        CounterRow& n = by_kernel[{k.name, k.where.subblock, k.where.phase}];
        n.subblock = k.where.subblock, n.phase = k.where.phase, n.kernel = k.name;
        n.add(k);
        r.total.add(k);
    }
    r.subblocks.clear(), r.per_kernel.clear();
    for (auto& [key, row] : by_sub) r.subblocks.push_back(row);
    for (auto& [key, row] : by_kernel) r.per_kernel.push_back(row);
    std::stable_sort(r.per_kernel.begin(), r.per_kernel.end(),
                     [](const CounterRow& a, const CounterRow& b) { return a.time_ns > b.time_ns; });
}

const CounterRow* find_counter_row(const CounterReport& r, int subblock, int phase) {
    for (const CounterRow& c : r.subblocks)
        if (c.subblock == subblock && c.phase == phase) return &c;
    return nullptr;
}

std::string measured_vs_analytic(const CounterReport& r, const CostTable& costs, bool has_model) {
    if (!r.collected) return r.note.empty() ? "" : "\n== Measured vs analytic ==\n  counters: " + r.note + "\n";
    auto g = [](double v) { return std::isfinite(v) ? strprintf("%.3f", v) : std::string("-"); };
    std::string s = "\n== Measured vs analytic (hardware counters of one extra step under kernel replay; GFLOP, MB) ==\n";
    s += strprintf("  %-11s %-5s %5s %9s %11s %11s %10s %10s %9s %9s %9s %8s %8s %6s %s\n", "subblock", "phase",
                   "kern", "ms", "gemm_an", "tensor_hw", "elem_an", "fp32_hw", "MB_an", "MB_dram", "MB_L2",
                   "TFLOP/s", "FLOP/B", "%roof", "bound");
    auto row = [&](const CounterRow& c, const std::string& sub, const std::string& phase, const OpCost* a) {
        s += strprintf("  %-11s %-5s %5ld %9.3f %11s %11.3f %10s %10.3f %9s %9.1f %9.1f %8s %8s %6s %s\n",
                       sub.c_str(), phase.c_str(), c.kernels, c.time_ns / 1e6, a ? g(a->gemm_flops / 1e9).c_str() : "-",
                       c.tensor_flops / 1e9, a ? g(a->other_flops / 1e9).c_str() : "-", c.fp32_flops / 1e9,
                       a ? g(a->bytes / 1e6).c_str() : "-", c.dram_bytes / 1e6, c.l2_bytes / 1e6,
                       g(c.tflops()).c_str(), g(c.intensity()).c_str(),
                       std::isfinite(c.pct_of_roofline()) ? strprintf("%.0f", c.pct_of_roofline()).c_str() : "-",
                       c.bound());
    };
    OpCost total_cost;
    for (const CounterRow& c : r.subblocks) {
        bool known = has_model && c.subblock >= 0 && c.subblock < NUM_SUBBLOCKS && c.phase >= 0 && c.phase < NUM_PHASES;
        const OpCost* a = known ? &costs[c.subblock][c.phase] : nullptr;
        if (a) total_cost += *a;
        row(c, c.subblock >= 0 ? subblock_name((SubBlock)c.subblock) : "(none)",
            c.phase >= 0 ? phase_name((Phase)c.phase) : "", a);
    }
    row(r.total, "total", "", has_model ? &total_cost : nullptr);
    s += "  _an: analytic model; _hw: counters (tensor = sm__ops_path_tensor_src_bf16_dst_fp32, fp32 = fadd + fmul +\n"
         "  2·ffma, MB_dram = read + write). Rates from summed counts; %roof = summed per-kernel floors / time.\n"
         "  " + std::string(REPLAY_NOTE) + "\n";
    if (!r.note.empty()) s += "  note: " + r.note + "\n";
    return s;
}

} // namespace llmc::prof
