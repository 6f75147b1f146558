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

std::vector<KernelRecord> last_step_kernels(const ProfileRecords& records) {
    std::vector<KernelRecord> v;
    if (records.steps.empty()) return v;
    const StepRecord& last = records.steps.back();
    for (const KernelRecord& k : records.kernels)
        if (k.start_ns >= last.start_ns && k.start_ns <= last.end_ns) v.push_back(k);
    return v;
}

std::vector<MeasuredRow> measured_rows(const CounterReport& r, const CostTable& costs, bool has_model) {
    std::vector<MeasuredRow> rows;
    OpCost total_cost;
    for (const CounterRow& c : r.subblocks) {
        const bool known =
            has_model && c.subblock >= 0 && c.subblock < NUM_SUBBLOCKS && c.phase >= 0 && c.phase < NUM_PHASES;
        MeasuredRow m{c.subblock >= 0 ? subblock_name((SubBlock)c.subblock) : "(none)",
                      c.phase >= 0 ? phase_name((Phase)c.phase) : "", c, known, {}};
        if (known) total_cost += m.analytic = costs[c.subblock][c.phase];
        rows.push_back(std::move(m));
    }
    rows.push_back({"total", "", r.total, has_model, total_cost});
    return rows;
}

} // namespace llmc::prof
