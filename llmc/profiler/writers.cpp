// The profile directory's files from a Report (llmc/profiler/writers.h).
#include "llmc/profiler/writers.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "llmc/profiler/findings.h"
#include "llmc/utils.h"

namespace llmc::prof {

namespace {


// printf-style number; NaN becomes `none` ("-" in text tables, "" in CSV).
std::string num(double v, const char* fmt, const char* none = "-") {
    if (!std::isfinite(v)) return none;
    char buf[64];
    snprintf(buf, sizeof(buf), fmt, v);
    return buf;
}

// A plain-text table: columns padded to their widest cell, text left-aligned, numbers right-aligned.
class TextTable {
public:
    TextTable(std::vector<std::string> headers, std::string align) : align_(std::move(align)) {
        rows_.push_back(std::move(headers));
    }
    void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
    std::string str() const {
        std::vector<size_t> w(rows_[0].size(), 0);
        for (const auto& r : rows_)
            for (size_t i = 0; i < r.size(); i++) w[i] = std::max(w[i], r[i].size());
        std::string out;
        for (const auto& r : rows_) {
            std::string line = "  ";
            for (size_t i = 0; i < r.size(); i++) {
                std::string pad(w[i] - r[i].size(), ' ');
                line += align_[i] == 'l' ? r[i] + pad : pad + r[i];
                if (i + 1 < r.size()) line += "  ";
            }
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out += line + "\n";
        }
        return out;
    }

private:
    std::string align_;
    std::vector<std::vector<std::string>> rows_;
};

std::string truncate(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

// A rate or a ratio in a CSV (TFLOP/s, GB/s, FLOP/B, percentages, ceilings): six significant digits, since a
// CPU's rates are thousandths of a TFLOP/s and fixed decimals would round them away. Unknown: empty.
std::string csv_rate(double v) { return num(v, "%.6g", ""); }

std::string csv_line(const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); i++) line += (i ? "," : "") + csv_field(cells[i]);
    return line + "\n";
}

void write_file(const std::string& path, const std::string& text) {
    AtomicFile f(path);
    f.write(text.data(), text.size());
    f.commit();
}

// ns since t0 as microseconds with 3 decimals: exact, since the records are whole nanoseconds.
std::string trace_us(uint64_t ns) {
    return strprintf("%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json spread_json(const StepSpread& s) {
    return {{"median", finite_or_null(s.median_ms)}, {"min", finite_or_null(s.min_ms)}, {"max", finite_or_null(s.max_ms)}};
}

// TFLOP/s in text: one decimal, or three significant digits below 1 (a CPU's rates would all read 0.0).
std::string tflops_text(double v) { return num(v, std::fabs(v) >= 1 ? "%.1f" : "%.3g"); }



} // namespace

namespace {

// What a summary section needs besides the report: the CPU trainer's profile has no GPU, no CUDA calls and
// no device memory; its "kernels" are sub-block executions on the CPU, so the report speaks of CPU time and
// leaves the GPU-only sections out.
struct SummaryStyle {
    explicit SummaryStyle(const Report& r)
        : on_gpu(r.context.device_kind != DeviceKind::CPU), dev(on_gpu ? "GPU" : "CPU"),
          pct_col(on_gpu ? "%gpu" : "%cpu"), matmul(on_gpu ? "bf16" : "fp32 matmul") {}
    bool on_gpu;
    const char* dev;
    const char* pct_col;
    const char* matmul; // the compute ceiling MFU and GEMMs are measured against
};

std::string summary_header(const Report& r, const SummaryStyle& style) {
    const ProfileContext& c = r.context;
    const GPT2Config& m = c.model;
    std::string s;
    s += strprintf("llmc profile: %s\n", c.program.empty() ? "(unnamed)" : c.program.c_str());
    s += "  device    " + c.device + "\n";
    if (!c.build.empty()) s += "  build     " + c.build + "\n";
    if (r.has_model)
        s += strprintf("  model     GPT-2 L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %.2fM parameters\n", m.num_layers,
                       m.num_heads, m.channels, m.max_seq_len, m.vocab_size, m.padded_vocab_size,
                       (c.num_parameters ? c.num_parameters : num_parameters(m)) / 1e6);
    if (c.inference.active()) // no T, no gradient accumulation: sequences, their prompts, what they generated
        s += strprintf("  batch     %ld sequences, %ld prompt tokens, %ld generated tokens, %d profiled steps (a "
                       "prefill, then decode steps)\n",
                       c.inference.sequences, c.inference.prompt_tokens,
                       c.inference.sequences + c.inference.decode_tokens, r.num_steps);
    else
        s += strprintf("  batch     B=%d T=%d grad_accum=%d (%ld tokens per step), %d profiled steps\n", c.B, c.T,
                       c.grad_accum, (long)c.B * c.T * c.grad_accum, r.num_steps);
    const Ceilings& ce = c.ceilings;
    s += strprintf("  ceilings  %s %s TFLOP/s, fp32 %s TFLOP/s, DRAM %s GB/s, ridge %s FLOP/B (%s)\n", style.matmul,
                   tflops_text(ce.bf16_tflops > 0 ? ce.bf16_tflops : NAN).c_str(),
                   tflops_text(ce.fp32_tflops > 0 ? ce.fp32_tflops : NAN).c_str(),
                   num(ce.dram_gbps > 0 ? ce.dram_gbps : NAN, "%.0f").c_str(),
                   num(ce.dram_gbps > 0 ? ce.bf16_tflops * 1e3 / ce.dram_gbps : NAN, "%.0f").c_str(),
                   ce.source.empty() ? "none" : ce.source.c_str());
    const CeilingRaise& up = r.ceiling_raise;
    if (up.raised()) {
        auto factor = [](double k, const std::string& by) {
            return k > 1 ? strprintf("x%.3f (%s beat it)", k, by.c_str()) : std::string("x1 (not beaten)");
        };
        s += strprintf("  raised    this profile beat the measured ceilings, so they were raised to what it measured: "
                       "compute %s, bandwidth %s; measured: %s %s, fp32 %s TFLOP/s, DRAM %s GB/s\n",
                       factor(up.compute, up.compute_by).c_str(), factor(up.memory, up.memory_by).c_str(), style.matmul,
                       num(up.before.bf16_tflops, "%.3g").c_str(), num(up.before.fp32_tflops, "%.3g").c_str(),
                       num(up.before.dram_gbps, "%.0f").c_str());
    }
    if (c.inference.active())
        s += strprintf("  roofline  the KV-cache decoder's analytic model, %d-byte elements; decode reads every weight "
                       "per step\n", c.inference.elem_bytes);
    else if (!style.on_gpu)
        s += "  roofline  the CPU step's analytic model: fp32 tensors, no fusions (residual adds and GELU on their "
             "own); every FLOP against the matmul ceiling\n";
    if (style.on_gpu)
        s += strprintf("  records   %zu kernels, %zu memcpys, %zu memsets, %zu API calls, %zu syncs, %zu ranges, %zu "
                       "power samples; %llu dropped; CUPTI overhead %.3f ms\n",
                       r.records.kernels, r.records.memcpys, r.records.memsets, r.records.api, r.records.syncs,
                       r.records.ranges, r.records.power, (unsigned long long)r.dropped_records, r.cupti_overhead_ms);
    else // timed on the CPU: no CUDA calls, no copies, no CUPTI
        s += strprintf("  records   %zu op executions, %zu ranges, %zu power samples\n", r.records.kernels,
                       r.records.ranges, r.records.power);
    return s;
}

std::string summary_throughput(const Report& r, const SummaryStyle& style) {
    const ProfileContext& c = r.context;
    const Ceilings& ce = c.ceilings;
    std::string s;
    s += "\n== Throughput ==\n";
    const double per_step = r.num_steps ? 1.0 / r.num_steps : NAN;
    s += strprintf("  %s tokens/s over %d steps (%s ms per step); %s time %s ms per step\n",
                   num(r.tokens_per_s, "%.0f").c_str(), r.num_steps, num(r.wall_s * 1e3 * per_step, "%.3f").c_str(),
                   style.dev, num(r.gpu_time_us / 1e3 * per_step, "%.3f").c_str());
    if (r.has_model)
        s += strprintf("  model FLOPs %.4g per token (%s) -> %s TFLOP/s, MFU %s%% of %s %s TFLOP/s\n",
                       r.flops_per_token, c.inference.active() ? "forward, analytic" : "6N + 12LCT",
                       tflops_text(r.model_tflops).c_str(), num(r.mfu, "%.1f").c_str(), style.matmul,
                       tflops_text(ce.bf16_tflops > 0 ? ce.bf16_tflops : NAN).c_str());
    if (style.on_gpu) s += strprintf("  peak GPU memory %.2f GiB\n", c.peak_memory_bytes / 1073741824.0);
    return s;
}

std::string summary_top_kernels(const Report& r, const SummaryStyle& style, int top_n) {
    std::string s;
    s += strprintf("\n== Top %d %s (of %zu rows; %% of %s time) ==\n", top_n, style.on_gpu ? "kernels" : "ops",
                   r.kernels.size(), style.dev);
    TextTable kt({style.on_gpu ? "kernel" : "op", "subblock", "phase", "category", "calls", "total_ms", "avg_us", style.pct_col},
                 "llllrrrr");
    for (int i = 0; i < top_n && i < (int)r.kernels.size(); i++) {
        const KernelRow& k = r.kernels[i];
        kt.row({truncate(short_kernel_name(k.name), 60), subblock_label(k.subblock), phase_label(k.phase), category_name(k.category),
                std::to_string(k.calls), num(k.total_us / 1e3, "%.3f"), num(k.avg_us, "%.1f"), num(k.pct, "%.1f")});
    }
    s += kt.str();
    return s;
}

std::string summary_subblocks(const Report& r, const SummaryStyle& style) {
    std::string s;
    s += "\n== Sub-blocks and roofline (analytic FLOPs and bytes, time per step) ==\n";
    TextTable st({"subblock", "phase", "calls", "ms/step", "median [min, max]", style.pct_col, "GFLOP", "MB", "FLOP/B",
                  "floor_ms", "TFLOP/s", "GB/s", "%roof", "bound"},
                 "llrrrrrrrrrrrl");
    auto sub_row = [&](const SubBlockRow& b, const std::string& name, const std::string& phase) {
        bool modelled = b.cost.flops() > 0 || b.cost.bytes > 0;
        const StepSpread& sp = b.per_step;
        std::string spread = std::isfinite(sp.median_ms) ? strprintf("%.3f [%.3f, %.3f]", sp.median_ms, sp.min_ms,
                                                                     sp.max_ms)
                                                         : "-";
        st.row({name, phase, std::to_string(b.calls), num(b.roof.time_s * 1e3, "%.3f"), spread, num(b.pct, "%.1f"),
                modelled ? num(b.cost.flops() / 1e9, "%.1f") : "-", modelled ? num(b.cost.bytes / 1e6, "%.1f") : "-",
                num(b.roof.intensity, "%.1f"), num(b.roof.floor_s * 1e3, "%.3f"), tflops_text(b.roof.tflops),
                num(b.roof.gbps, "%.0f"), num(b.roof.pct_of_roofline, "%.0f"), b.roof.bound});
    };
    for (const SubBlockRow& b : r.subblocks) sub_row(b, subblock_label(b.subblock), phase_label(b.phase));
    sub_row(r.total, "total", "");
    s += st.str();
    s += "  ms/step: the mean over the profiled steps; median [min, max]: the sub-block's time in each step.\n"
         "  %roof = floor / time: achieved over the ceiling that bounds the sub-block. ";
    s += style.on_gpu ? "GEMM FLOPs against bf16,\n  elementwise FLOPs against fp32 (bf16 when unknown); "
                      : "Every FLOP against the fp32\n  matmul ceiling; ";
    s += "bytes: minimum DRAM traffic (doc/profiling.md).\n";
    s += measured_vs_analytic(r.counters, r.costs, r.has_model);
    return s;
}

// Inference: prefill against decode with their rooflines, the KV cache, and decode's cost by context length.
std::string summary_inference(const Report& r, const SummaryStyle& style) {
    const InferenceShape& in = r.context.inference;
    std::string s = "\n== Inference: prefill and decode ==\n";
    s += strprintf("  %ld sequences, %ld prompt tokens, %ld decode steps (%ld tokens); KV cache %.2f MiB\n", in.sequences,
                   in.prompt_tokens, in.decode_steps, in.decode_tokens, in.kv_cache_bytes / 1048576.0);
    TextTable pt({"phase", "steps", "tokens", "wall_ms", "tok/s", std::string(style.dev) + "_ms", "GFLOP", "MB", "FLOP/B",
                  "%roof", "bound"},
                 "lrrrrrrrrrl");
    for (const PhaseRow& p : r.phases) {
        const double steps = std::max(1, r.num_steps); // costs are per step of the window
        pt.row({phase_label(p.phase), std::to_string(p.steps), std::to_string(p.tokens), num(p.wall_ms, "%.3f"),
                num(p.wall_ms > 0 ? p.tokens / (p.wall_ms / 1e3) : NAN, "%.1f"), num(p.time_us / 1e3, "%.3f"),
                num(p.cost.flops() * steps / 1e9, "%.2f"), num(p.cost.bytes * steps / 1e6, "%.1f"),
                num(p.roof.intensity, "%.2f"), num(p.roof.pct_of_roofline, "%.0f"), p.roof.bound});
    }
    s += pt.str();
    s += "  decode bytes per step: every weight plus the KV cache positions attended (doc/profiling.md, \"Inference\")\n";
    if (!r.decode_buckets.empty()) {
        s += "  decode by context length:\n";
        TextTable bt({"context", "steps", "tokens", "ms/step", "tok/s"}, "lrrrr");
        for (const DecodeBucket& b : r.decode_buckets)
            bt.row({strprintf("%d-%d", b.first_pos, b.last_pos), std::to_string(b.steps), std::to_string(b.tokens),
                    num(b.ms_per_step(), "%.3f"), num(b.tok_s(), "%.1f")});
        s += bt.str();
    }
    return s;
}

std::string summary_steps(const Report& r, const SummaryStyle& style) {
    std::string s;
    if (r.context.inference.active()) { // no forward/backward/optimizer split: each step is a prefill or a decode
        s += strprintf("\n== Steps (%s time) ==\n", style.dev);
        TextTable pt({"step", "phase", "wall_ms", "busy_ms", "idle_ms", "tokens", "tok/s", "energy_J", "power_W"},
                     "rlrrrrrrr");
        for (const StepRow& x : r.steps)
            pt.row({std::to_string(x.step), x.step == 1 ? "prefill" : "decode", num(x.wall_ms, "%.3f"),
                    num(x.gpu_busy_ms, "%.3f"), num(x.idle_ms, "%.3f"), std::to_string(x.tokens), num(x.tok_s, "%.0f"),
                    num(x.energy_j, "%.2f"), num(x.avg_power_w, "%.0f")});
        return s + pt.str();
    }
    s += strprintf("\n== Steps (%s time by phase) ==\n", style.dev);
    TextTable pt({"step", "wall_ms", "busy_ms", "idle_ms", "fwd_ms", "bwd_ms", "opt_ms", "other_ms", "tok/s",
                  "energy_J", "power_W"},
                 "rrrrrrrrrrr");
    for (const StepRow& x : r.steps)
        pt.row({std::to_string(x.step), num(x.wall_ms, "%.3f"), num(x.gpu_busy_ms, "%.3f"), num(x.idle_ms, "%.3f"),
                num(x.fwd_ms, "%.3f"), num(x.bwd_ms, "%.3f"), num(x.opt_ms, "%.3f"), num(x.other_ms, "%.3f"),
                num(x.tok_s, "%.0f"), num(x.energy_j, "%.2f"), num(x.avg_power_w, "%.0f")});
    s += pt.str();

    return s;
}

std::string summary_gpu_idle_and_api(const Report& r) {
    std::string s = "\n== GPU idle ==\n";
    s += strprintf("  %.3f ms idle in %ld gaps over %d steps (%s%% of wall time)\n", r.idle_us / 1e3, r.idle_gaps,
                   r.num_steps, num(r.wall_s > 0 ? 100 * r.idle_us / (r.wall_s * 1e6) : NAN, "%.1f").c_str());
    TextTable gs({"gap size", "gaps", "total_ms", "%idle"}, "lrrr");
    for (const NamedTime& g : r.gap_sizes)
        gs.row({g.name, std::to_string(g.calls), num(g.total_us / 1e3, "%.3f"), num(g.pct, "%.1f")});
    s += gs.str();
    s += "  idle time by what the CPU thread was doing:\n";
    TextTable ic({"CPU in", "gaps", "idle_ms", "%idle"}, "lrrr");
    for (const NamedTime& g : r.idle_by_cpu)
        ic.row({g.name, std::to_string(g.calls), num(g.total_us / 1e3, "%.3f"), num(g.pct, "%.1f")});
    s += ic.str();
    s += "  largest gaps:\n";
    TextTable lg({"step", "at_ms", "gap_us", "main CUDA call in the gap", "its_us", "no_call_us", "CPU range"},
                 "rrrlrrl");
    for (const IdleGap& g : r.largest_gaps)
        lg.row({std::to_string(g.step), num(g.offset_us / 1e3, "%.3f"), num(g.dur_us, "%.1f"),
                g.api.empty() ? "(none)" : g.api, num(g.api_us, "%.1f"), num(g.outside_api_us, "%.1f"),
                g.range.empty() ? "-" : g.range});
    s += lg.str();

    s += strprintf("\n== CUDA API (CPU thread; %.1f%% of the window in CUDA calls) ==\n", r.api_pct);
    auto time_row = [&](TextTable& t, const NamedTime& a) {
        t.row({a.name, std::to_string(a.calls), num(a.total_us / 1e3, "%.3f"), num(a.avg_us, "%.2f"),
               num(a.pct, "%.1f")});
    };
    TextTable at({"api", "calls", "total_ms", "avg_us", "%cpu"}, "lrrrr");
    for (const NamedTime& a : r.api) time_row(at, a);
    s += at.str();
    s += strprintf("\n== Synchronisation (CPU blocked; %.1f%% of the window) ==\n", r.sync_pct);
    TextTable yt({"type", "calls", "total_ms", "avg_us", "%cpu"}, "lrrrr");
    for (const NamedTime& a : r.syncs) time_row(yt, a);
    s += yt.str();
    return s;
}

std::string summary_power(const Report& r) {
    std::string s;
    s += "\n== Power ==\n";
    const PowerSummary& p = r.power;
    if (!std::isfinite(p.energy_j)) {
        s += "  energy, J/token, tokens/J, FLOP/s per W: n/a (" + (p.status.empty() ? "no NVML" : p.status) + ")\n";
        return s;
    }
    if (p.samples > 0)
        s += strprintf("  %zu samples%s: energy %.2f J, average %.0f W, peak %.0f W\n", p.samples,
                       p.reading.empty() ? "" : (" (" + p.reading + " power)").c_str(), p.energy_j, p.avg_w, p.peak_w);
    else
        s += strprintf("  energy %.2f J, average %.1f W\n", p.energy_j, p.avg_w);
    s += strprintf("  %s J/token, %s tokens/J, %s GFLOP/s per W\n", num(p.joules_per_token, "%.5f").c_str(),
                   num(p.tokens_per_j, "%.1f").c_str(), num(p.flops_per_w / 1e9, "%.1f").c_str());
    const std::string why = std::isfinite(p.counter_still_ms) ? "the " + p.counter + " did not advance over the window"
                                                               : "no readings of the " + p.counter;
    const std::string window = p.window_source == EnergySource::counter ? p.counter + " over the whole window"
                                                                        : "steps' energies summed (" + why + ")";
    const std::string steps = p.counter_steps && p.integrated_steps ? "the counter or integrated power samples"
                              : p.counter_steps                     ? "the counter"
                                                                    : "integrated power samples";
    s += strprintf("  energy from the %s; each step's from %s (%d steps counter, %d integrated)\n", window.c_str(),
                   steps.c_str(), p.counter_steps, p.integrated_steps);
    if (p.below_counter_period_steps > 0)
        s += strprintf("  %d of %zu steps no longer than the %.1f ms the energy counter stood still: the counter cannot "
                       "measure them, their energy is an estimate (steps.csv below_counter_period)\n",
                       p.below_counter_period_steps, r.steps.size(), p.counter_still_ms);
    if (p.samples > 0) {
        std::string throttled = throttle_names(p.throttle_reasons);
        s += strprintf("  SM clock %d-%d MHz (max %s), max temperature %d C, throttle reasons 0x%llx (%s)\n",
                       p.min_sm_clock_mhz, p.max_sm_clock_mhz,
                       p.max_sm_clock_limit_mhz ? std::to_string(p.max_sm_clock_limit_mhz).c_str() : "unknown",
                       p.max_temperature_c, (unsigned long long)p.throttle_reasons,
                       throttled.empty() ? "no throttling" : throttled.c_str());
    }
    return s;
}

std::string summary_findings(const Report& r) {
    std::string s;
    s += "\n== Findings ==\n";
    if (r.findings.empty()) s += "  nothing stands out: no rule found time at stake\n";
    for (size_t i = 0; i < r.findings.size(); i++) {
        const Finding& f = r.findings[i];
        s += strprintf("  %zu. [%s] %s (~%.3f ms per step at stake)\n", i + 1, f.rule.c_str(), f.what.c_str(),
                       f.ms_per_step);
        s += "     evidence: " + f.evidence + "\n";
        s += "     next: " + f.next_step + "\n";
    }
    return s;
}

} // namespace

std::string format_summary(const Report& r, int top_n) {
    const SummaryStyle st(r);
    std::string s = summary_header(r, st) + summary_throughput(r, st) + summary_top_kernels(r, st, top_n) +
                    summary_subblocks(r, st) + (r.phases.empty() ? "" : summary_inference(r, st)) +
                    summary_steps(r, st);
    if (st.on_gpu) s += summary_gpu_idle_and_api(r);
    s += summary_power(r) + summary_findings(r);
    if (r.memory.present) s += "\n" + format_memory_report(r.context.memory, r.memory);
    return s;
}

std::string format_outcome(const Report& r, const std::string& dir, int max_findings) {
    std::string s = strprintf("profile: %s/summary.txt: %s tokens/s over %d step%s", dir.c_str(),
                              num(r.tokens_per_s, "%.0f").c_str(), r.num_steps, r.num_steps == 1 ? "" : "s");
    if (std::isfinite(r.mfu)) s += strprintf(", MFU %.1f%%", r.mfu);
    s += "\n";
    if (r.findings.empty()) return s + "profile: no finding: no rule found time at stake\n";
    const int shown = std::min<int>(max_findings, (int)r.findings.size());
    s += strprintf("profile: top %d of %zu findings (evidence and next steps in the summary):\n", shown,
                   r.findings.size());
    for (int i = 0; i < shown; i++) {
        const Finding& f = r.findings[i];
        s += strprintf("  %d. [%s] %s (~%.3f ms per step at stake)\n", i + 1, f.rule.c_str(), f.what.c_str(),
                       f.ms_per_step);
    }
    return s;
}

std::string kernels_csv(const Report& r) {
    std::string s = csv_line({"kernel", "subblock", "phase", "category", "calls", "total_us", "avg_us", "pct"});
    for (const KernelRow& k : r.kernels)
        s += csv_line({k.name, subblock_label(k.subblock), phase_label(k.phase), category_name(k.category),
                       std::to_string(k.calls),
                       num(k.total_us, "%.3f", ""), num(k.avg_us, "%.3f", ""), csv_rate(k.pct)});
    return s;
}

// time_us and pct over the window; flops, bytes, rates and the floor per step (the mean); the median, minimum
// and maximum of the sub-block's time in each profiled step.
std::string subblocks_csv(const Report& r) {
    std::string s = csv_line({"subblock", "phase", "calls", "time_us", "pct", "flops", "bytes", "tflops", "gbps",
                              "intensity", "bound", "time_per_step_us", "floor_us", "pct_of_roofline",
                              "step_median_us", "step_min_us", "step_max_us"});
    for (const SubBlockRow& b : r.subblocks) {
        bool modelled = b.cost.flops() > 0 || b.cost.bytes > 0;
        s += csv_line({subblock_label(b.subblock), phase_label(b.phase), std::to_string(b.calls),
                       num(b.time_us, "%.3f", ""), csv_rate(b.pct),
                       modelled ? num(b.cost.flops(), "%.0f", "") : "", modelled ? num(b.cost.bytes, "%.0f", "") : "",
                       csv_rate(b.roof.tflops), csv_rate(b.roof.gbps), csv_rate(b.roof.intensity), b.roof.bound,
                       num(b.roof.time_s * 1e6, "%.3f", ""), num(b.roof.floor_s * 1e6, "%.3f", ""),
                       csv_rate(b.roof.pct_of_roofline), num(b.per_step.median_ms * 1e3, "%.3f", ""),
                       num(b.per_step.min_ms * 1e3, "%.3f", ""), num(b.per_step.max_ms * 1e3, "%.3f", "")});
    }
    return s;
}

namespace {
// The busy-time column: the union of GPU activity, or on the CPU of sub-block executions.
const char* busy_column(const Report& r) {
    return r.context.device_kind == DeviceKind::CPU ? "busy_ms" : "gpu_busy_ms";
}
} // namespace

std::string steps_csv(const Report& r) {
    std::string s = csv_line({"step", "wall_ms", busy_column(r), "fwd_ms", "bwd_ms", "opt_ms", "other_ms", "tok_s",
                              "energy_j", "avg_power_w", "idle_ms", "idle_gaps", "tokens", "j_per_token",
                              "tokens_per_j", "flops_per_w", "energy_source", "below_counter_period"});
    for (const StepRow& x : r.steps)
        s += csv_line({std::to_string(x.step), num(x.wall_ms, "%.6f", ""), num(x.gpu_busy_ms, "%.6f", ""),
                       num(x.fwd_ms, "%.6f", ""), num(x.bwd_ms, "%.6f", ""), num(x.opt_ms, "%.6f", ""),
                       num(x.other_ms, "%.6f", ""), num(x.tok_s, "%.1f", ""), num(x.energy_j, "%.6f", ""),
                       num(x.avg_power_w, "%.3f", ""), num(x.idle_ms, "%.6f", ""), std::to_string(x.gaps),
                       std::to_string(x.tokens), num(x.j_per_token, "%.9f", ""), num(x.tokens_per_j, "%.3f", ""),
                       num(x.flops_per_w, "%.6g", ""), energy_source_name(x.energy_source),
                       x.below_counter_period ? "1" : "0"});
    return s;
}

// CUDA API rows (kind "api"), then the synchronisation types (kind "sync"), shares of the CPU window.
// Inference only: one row per phase, costs over the whole window.
std::string phases_csv(const Report& r) {
    std::string s = csv_line({"phase", "steps", "tokens", "wall_ms", "time_us", "flops", "bytes", "intensity", "bound",
                              "pct_of_roofline"});
    const double steps = std::max(1, r.num_steps);
    for (const PhaseRow& p : r.phases)
        s += csv_line({phase_label(p.phase), std::to_string(p.steps), std::to_string(p.tokens), num(p.wall_ms, "%.6f", ""),
                       num(p.time_us, "%.3f", ""), num(p.cost.flops() * steps, "%.0f", ""),
                       num(p.cost.bytes * steps, "%.0f", ""), csv_rate(p.roof.intensity), p.roof.bound,
                       csv_rate(p.roof.pct_of_roofline)});
    return s;
}

std::string decode_buckets_csv(const Report& r) {
    std::string s = csv_line({"first_pos", "last_pos", "steps", "tokens", "wall_ms", "time_ms", "ms_per_step", "tok_s"});
    for (const DecodeBucket& b : r.decode_buckets)
        s += csv_line({std::to_string(b.first_pos), std::to_string(b.last_pos), std::to_string(b.steps),
                       std::to_string(b.tokens), num(b.wall_ms, "%.6f", ""), num(b.time_ms, "%.6f", ""),
                       num(b.ms_per_step(), "%.6f", ""), num(b.tok_s(), "%.3f", "")});
    return s;
}

std::string api_csv(const Report& r) {
    std::string s = csv_line({"api", "calls", "total_us", "avg_us", "pct_of_cpu_time", "kind"});
    for (const auto* rows : {&r.api, &r.syncs})
        for (const NamedTime& a : *rows)
            s += csv_line({a.name, std::to_string(a.calls), num(a.total_us, "%.3f", ""), num(a.avg_us, "%.3f", ""),
                           csv_rate(a.pct), rows == &r.api ? "api" : "sync"});
    return s;
}

/*
 * One row per (sub-block, phase) (scope "subblock") and the whole step (scope "total"), per step:
 * analytic FLOPs (tensor-core GEMM and CUDA-core parts) and bytes, measured time, the floors, the ceilings
 * and the achieved rates. With hardware counters (--counters) replay_flops (tensor + FP32) and replay_bytes
 * (DRAM read + write) are filled, and one row per kernel (scope "kernel_replay", summed over its launches in the
 * sub-block) follows, with the counted time and the ceilings it ran at: all figures of kernel replay (REPLAY_NOTE).
 */
std::string roofline_csv(const Report& r) {
    const Ceilings& c = r.context.ceilings;
    std::string s = csv_line({"scope", "subblock", "phase", "kernel", "gemm_flops", "other_flops", "flops", "bytes",
                              "intensity", "time_us", "floor_us", "compute_floor_us", "memory_floor_us", "bf16_tflops",
                              "fp32_tflops", "dram_gbps", "tflops", "gbps", "pct_of_roofline", "bound",
                              "replay_flops", "replay_bytes"});
    auto line = [&](const char* scope, const std::string& sub, const std::string& phase, const SubBlockRow& b,
                    const CounterRow* m) {
        s += csv_line({scope, sub, phase, "", num(b.cost.gemm_flops, "%.0f", ""), num(b.cost.other_flops, "%.0f", ""),
                       num(b.cost.flops(), "%.0f", ""), num(b.cost.bytes, "%.0f", ""),
                       csv_rate(b.roof.intensity),
                       num(b.roof.time_s * 1e6, "%.3f", ""), num(b.roof.floor_s * 1e6, "%.3f", ""),
                       num(b.roof.compute_floor_s * 1e6, "%.3f", ""), num(b.roof.memory_floor_s * 1e6, "%.3f", ""),
                       csv_rate(c.bf16_tflops > 0 ? c.bf16_tflops : NAN),
                       csv_rate(c.fp32_tflops > 0 ? c.fp32_tflops : NAN),
                       csv_rate(c.dram_gbps > 0 ? c.dram_gbps : NAN), csv_rate(b.roof.tflops),
                       csv_rate(b.roof.gbps), csv_rate(b.roof.pct_of_roofline), b.roof.bound,
                       m ? num(m->flops(), "%.0f", "") : "", m ? num(m->dram_bytes, "%.0f", "") : ""});
    };
    const CounterReport& hw = r.counters;
    for (const SubBlockRow& b : r.subblocks)
        if (b.cost.flops() > 0 || b.cost.bytes > 0)
            line("subblock", subblock_label(b.subblock), phase_label(b.phase), b,
                 hw.collected ? find_counter_row(hw, b.subblock, b.phase) : nullptr);
    line("total", "", "", r.total, hw.collected ? &hw.total : nullptr);
    for (const CounterRow& k : hw.per_kernel)
        s += csv_line({"kernel_replay", subblock_label(k.subblock), phase_label(k.phase), k.kernel, "", "", "", "",
                       csv_rate(k.intensity()), num(k.time_ns / 1e3, "%.3f", ""),
                       num(k.floor_s() * 1e6, "%.3f", ""), num(k.compute_floor_s() * 1e6, "%.3f", ""),
                       num(k.memory_floor_s * 1e6, "%.3f", ""), csv_rate(k.tensor_ceiling_tflops()),
                       csv_rate(k.fp32_ceiling_tflops()), csv_rate(k.dram_ceiling_gbps()),
                       csv_rate(k.tflops()), csv_rate(k.gbps()), csv_rate(k.pct_of_roofline()),
                       k.bound(), num(k.flops(), "%.0f", ""), num(k.dram_bytes, "%.0f", "")});
    return s;
}

namespace {

// A trace slice on one track (pid, tid); flow: the correlation id of the launch arrow it starts (a CUDA call)
// or ends (the GPU work it launched), 0 for none.
struct Slice {
    int pid;
    uint64_t tid, start, end;
    uint32_t flow;
    bool gpu;
    std::string name, cat;
    nlohmann::json args;
};

int gpu_pid(uint32_t device) { return 1 + (int)device; }

nlohmann::json where_args(const Attribution& w) {
    return nlohmann::json{{"subblock", subblock_label(w.subblock)}, {"phase", phase_label(w.phase)},
                          {"layer", w.layer}, {"step", w.step}};
}

// The tracks: steps (tid 0), then per CPU thread (in order of id) a track of its Ranges and, where it made
// CUDA calls, one of those, then one per (device, stream). t0: the earliest timestamp.
struct TraceTracks {
    std::vector<Slice> slices;
    std::map<uint32_t, uint64_t> range_tid;          // CPU thread -> its Ranges' tid; its CUDA calls' is +1
    std::set<uint32_t> api_threads;                  // CPU threads with CUDA calls
    std::set<std::pair<uint32_t, uint32_t>> streams; // (device, stream)
    uint64_t t0 = UINT64_MAX;
    void seen(uint64_t t) { t0 = std::min(t0, t); }
};

/*
 * Device work in the form PyTorch's profiler (Kineto) writes it, which trace analysers such as Holistic Trace
 * Analysis read: cat "kernel", "gpu_memcpy" or "gpu_memset"; the kernel's full name, copies named "Memcpy
 * <kind>" and sets "Memset" (HTA tells memory work from compute by those prefixes); args "device", "stream"
 * and "correlation" (the CUDA call that launched it, or the CPU trainer's phase range).
 */
Slice activity_slice(const Activity& a) {
    nlohmann::json args = where_args(a.where);
    std::string name, cat;
    if (const KernelRecord* k = a.kernel) {
        name = k->name, cat = "kernel";
        args["grid"] = {k->grid[0], k->grid[1], k->grid[2]};
        args["block"] = {k->block[0], k->block[1], k->block[2]};
        args["registers"] = k->registers_per_thread;
        args["static_smem"] = k->static_smem;
        args["dynamic_smem"] = k->dynamic_smem;
    } else if (const MemcpyRecord* m = a.copy) {
        name = std::string("Memcpy ") + copy_kind_name(m->kind), cat = "gpu_memcpy";
        args["bytes"] = m->bytes;
        if (a.end > a.start) args["GB/s"] = (double)m->bytes / (a.end - a.start);
    } else {
        name = "Memset", cat = "gpu_memset";
        args["bytes"] = a.set->bytes;
    }
    args["device"] = a.device;
    args["stream"] = a.stream;
    args["correlation"] = a.correlation;
    return {gpu_pid(a.device), a.stream, a.start, a.end, a.correlation, true, name, cat, args};
}

/*
 * Steps are "ProfilerStep#N" and Ranges "user_annotation" slices, CUDA calls "cuda_runtime", as Kineto names
 * them: HTA numbers iterations by the ProfilerStep slices. Launch arrows go from CUDA calls to GPU work; the
 * CPU trainer's ops have no launching call, so no arrow: their correlation is their phase range's. Device
 * work is the tables' (the window's, report.h), so a trace analyser's totals match kernels.csv; CPU ranges
 * and calls outside it stay, to show the set-up around the steps.
 */
TraceTracks trace_tracks(const ProfileRecords& rec) {
    TraceTracks t;
    std::set<uint32_t> threads;
    for (const RangeRecord& x : rec.ranges) threads.insert(x.thread);
    for (const ApiRecord& x : rec.api) threads.insert(x.thread), t.api_threads.insert(x.thread);
    uint64_t next_tid = 1;
    for (uint32_t th : threads) t.range_tid[th] = next_tid, next_tid += 2;
    for (const StepRecord& x : rec.steps) {
        t.seen(x.start_ns);
        t.slices.push_back({0, 0, x.start_ns, x.end_ns, 0, false, strprintf("ProfilerStep#%d", x.step),
                            "user_annotation", {{"step", x.step}, {"tokens", x.tokens}}});
    }
    for (const RangeRecord& x : rec.ranges) {
        t.seen(x.start_ns);
        nlohmann::json args = where_args(x.where);
        if (x.correlation) args["correlation"] = x.correlation;
        t.slices.push_back(
            {0, t.range_tid[x.thread], x.start_ns, x.end_ns, 0, false, x.name, "user_annotation", args});
    }
    for (const ApiRecord& x : rec.api) {
        t.seen(x.start_ns);
        t.slices.push_back({0, t.range_tid[x.thread] + 1, x.start_ns, x.end_ns, x.correlation, false, x.name,
                            "cuda_runtime", {{"correlation", x.correlation}}});
    }
    const StepWindow window(rec.steps);
    for (const Activity& a : gpu_activities(rec)) {
        if (!window.contains(a.start)) continue; // set-up work: not in the tables, so not in the trace either
        t.seen(a.start);
        t.streams.insert({a.device, a.stream});
        t.slices.push_back(activity_slice(a));
    }
    for (const PowerSample& p : rec.power) t.seen(p.t_ns);
    if (t.t0 == UINT64_MAX) t.t0 = 0;
    return t;
}

// Nests every track: sorted by (start, longest first), a slice is clipped to the end of the one enclosing it.
void nest_slices(std::vector<Slice>& slices) {
    for (Slice& x : slices) x.end = std::max(x.end, x.start);
    std::vector<size_t> order(slices.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const Slice &x = slices[a], &y = slices[b];
        return std::tie(x.pid, x.tid, x.start, y.end) < std::tie(y.pid, y.tid, y.start, x.end);
    });
    std::vector<uint64_t> open_ends;
    for (size_t i = 0; i < order.size(); i++) {
        Slice& x = slices[order[i]];
        if (i == 0 || slices[order[i - 1]].pid != x.pid || slices[order[i - 1]].tid != x.tid) open_ends.clear();
        while (!open_ends.empty() && open_ends.back() <= x.start) open_ends.pop_back();
        if (!open_ends.empty()) x.end = std::min(x.end, open_ends.back());
        open_ends.push_back(x.end);
    }
}

// Event lines: each event's fields, then ts (and dur) as microseconds with 3 decimals since t0.
class TraceEvents {
public:
    explicit TraceEvents(uint64_t t0) : t0_(t0) {}
    void event(const nlohmann::json& e, uint64_t ts_ns, const uint64_t* dur_ns = nullptr) {
        std::string line = e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        line.pop_back();
        line += ",\"ts\":" + trace_us(ts_ns - t0_);
        if (dur_ns) line += ",\"dur\":" + trace_us(*dur_ns);
        lines_.push_back(line + "}");
    }
    void meta(const char* what, int pid, uint64_t tid, const std::string& value, int sort_index) {
        event({{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", value}}}}, t0_);
        event({{"name", std::string(what) + "_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
               {"args", {{"sort_index", sort_index}}}},
              t0_);
    }
    // `header`: the top-level fields before traceEvents, one per line.
    std::string str(const std::vector<std::string>& header) const {
        std::string out = "{";
        for (const std::string& h : header) out += h + ",\n";
        out += "\"traceEvents\":[\n";
        for (size_t i = 0; i < lines_.size(); i++) out += lines_[i] + (i + 1 < lines_.size() ? ",\n" : "\n");
        return out + "]}\n";
    }

private:
    uint64_t t0_;
    std::vector<std::string> lines_;
};

// Process and thread names; returns the devices with a process (the power counters go to the first).
std::set<uint32_t> name_tracks(TraceEvents& ev, const TraceTracks& t, const ProfileContext& c, bool has_power) {
    ev.meta("process_name", 0, 0, "CPU: " + (c.program.empty() ? std::string("llmc") : c.program), 0);
    ev.meta("thread_name", 0, 0, "steps", 0);
    const bool cpu = c.device_kind == DeviceKind::CPU; // the CPU trainer: one track of sub-block executions
    for (auto& [thread, tid] : t.range_tid) {
        ev.meta("thread_name", 0, tid, strprintf("thread %u: ranges", thread), (int)tid);
        if (t.api_threads.count(thread))
            ev.meta("thread_name", 0, tid + 1, strprintf("thread %u: CUDA API", thread), (int)tid + 1);
    }
    std::set<uint32_t> devices;
    for (const auto& [device, stream] : t.streams) devices.insert(device);
    if (has_power) devices.insert(devices.empty() ? 0 : *devices.begin());
    for (uint32_t d : devices)
        ev.meta("process_name", gpu_pid(d), 0, strprintf("%s %u: ", device_kind_name(c.device_kind), d) + c.device,
                gpu_pid(d));
    for (const auto& [device, stream] : t.streams)
        ev.meta("thread_name", gpu_pid(device), stream, cpu ? "sub-blocks" : strprintf("stream %u", stream),
                (int)stream);
    return devices;
}

// The slices, then a flow from each launch to its GPU activity, at the middle of both slices (unambiguous
// even where slices touch). Flows are "ac2g", Kineto's category for them.
void slice_events(TraceEvents& ev, const std::vector<Slice>& slices) {
    std::map<uint32_t, const Slice*> launch, target; // correlation -> API slice, GPU slice
    for (const Slice& x : slices) {
        if (x.flow) (x.gpu ? target : launch)[x.flow] = &x;
        const uint64_t dur = x.end - x.start;
        ev.event({{"name", x.name}, {"cat", x.cat}, {"ph", "X"}, {"pid", x.pid}, {"tid", x.tid}, {"args", x.args}},
                 x.start, &dur);
    }
    for (const auto& [corr, api] : launch) {
        auto it = target.find(corr);
        if (it == target.end()) continue;
        const Slice* k = it->second;
        ev.event({{"name", "launch"}, {"cat", "ac2g"}, {"ph", "s"}, {"id", corr}, {"pid", 0}, {"tid", api->tid}},
                 api->start + (api->end - api->start) / 2);
        ev.event({{"name", "launch"}, {"cat", "ac2g"}, {"ph", "f"}, {"bp", "e"}, {"id", corr}, {"pid", k->pid},
                  {"tid", k->tid}},
                 k->start + (k->end - k->start) / 2);
    }
}

void power_events(TraceEvents& ev, const std::vector<PowerSample>& power, int pid) {
    for (const PowerSample& p : power) {
        auto counter = [&](const char* name, nlohmann::json args) {
            ev.event({{"name", name}, {"ph", "C"}, {"pid", pid}, {"tid", 0}, {"args", args}}, p.t_ns);
        };
        counter("power", {{"W", p.power_w}});
        counter("clocks", {{"sm_MHz", p.sm_clock_mhz}, {"mem_MHz", p.mem_clock_mhz}});
        counter("temperature", {{"C", p.temperature_c}});
    }
}

/*
 * The top-level fields Kineto writes before its events. HTA maps trace files to ranks by matching
 * `"rank": N` with a space after the colon, so distributedInfo is written by hand in that form: the process's
 * rank in a data-parallel run (HTA's analyses then run over the set of traces), or rank 0 of 1 with no
 * collective backend. deviceProperties: each GPU's id, name and, where known, per-SM limits.
 */
std::vector<std::string> trace_header(const ProfileContext& c, const std::set<uint32_t>& devices) {
    const char* backend = c.world_size <= 1 ? "none" : c.device_kind == DeviceKind::GPU ? "nccl" : "mpi";
    std::vector<std::string> h = {"\"schemaVersion\":1", "\"displayTimeUnit\":\"ns\"",
                                  strprintf("\"distributedInfo\": {\"backend\": \"%s\", \"rank\": %d, \"world_size\": %d}",
                                            backend, c.rank, c.world_size)};
    if (c.device_kind == DeviceKind::GPU) {
        nlohmann::json props = nlohmann::json::array();
        for (uint32_t d : devices) {
            nlohmann::json p = {{"id", d}, {"name", c.device}};
            if (c.sm.known())
                p.update({{"regsPerMultiprocessor", c.sm.regs}, {"maxThreadsPerMultiProcessor", c.sm.threads},
                          {"sharedMemPerMultiprocessor", c.sm.smem}});
            props.push_back(p);
        }
        h.push_back("\"deviceProperties\":" + props.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    return h;
}

} // namespace

/*
 * Chrome trace event format, in the dialect PyTorch's profiler writes (doc/profiling.md, "trace.json"), so
 * Perfetto and Holistic Trace Analysis both read it. Processes: pid 0 is the CPU (a "steps" track, then per
 * CPU thread a track of its Ranges and, where it made CUDA calls, a track of those), pid 1 + d is GPU d (one
 * track per stream, and counter tracks for power, clocks and temperature) or, for the CPU trainer, the CPU
 * running the ops. A flow (ph s on the API call, ph f with bp e on the GPU activity, id = correlation id)
 * links each launch to its kernel, memcpy or memset. Within a track, a slice that would overlap the end of
 * the one enclosing it (timer jitter) is clipped, so slices always nest.
 */
std::string trace_json(const Report& r, const ProfileRecords& rec) {
    TraceTracks tracks = trace_tracks(rec);
    nest_slices(tracks.slices);
    TraceEvents ev(tracks.t0);
    std::set<uint32_t> devices = name_tracks(ev, tracks, r.context, !rec.power.empty());
    slice_events(ev, tracks.slices);
    power_events(ev, rec.power, devices.empty() ? 1 : gpu_pid(*devices.begin()));
    return ev.str(trace_header(r.context, devices));
}

namespace {

// profile.json's memory section: the plan's allocations, totals by kind, peaks and every tensor.
nlohmann::json memory_json(const Report& r) {
    using nlohmann::json;
    const MemoryPlan& plan = r.context.memory;
    const MemoryReport& m = r.memory;
    if (!m.present) return nullptr;
    json j = {{"program", plan.program}, {"B", plan.B}, {"T", plan.T}, {"shards", plan.shards},
              {"planned_bytes", m.planned_bytes}, {"notes", plan.notes}};
    json& aj = j["allocations"] = json::array();
    for (const PlannedAllocation& a : plan.allocations)
        aj.push_back({{"name", a.name}, {"bytes", a.bytes}, {"per_process", a.per_process}});
    json& kj = j["kinds"] = json::array();
    for (const KindTotal& k : m.kinds) kj.push_back({{"kind", memory_kind_name(k.kind)}, {"bytes", k.bytes}, {"tensors", k.tensors}});
    j["live_peak"] = {{"bytes", m.live_peak},
                      {"op", m.live_peak_op >= 0 ? json(plan.ops[m.live_peak_op]) : json(nullptr)},
                      {"tensors", m.live_at_peak.size()}};
    j["caching_allocator"] = {{"reserved_bytes", m.caching.reserved_peak}, {"allocated_peak_bytes", m.caching.allocated_peak},
                              {"requested_peak_bytes", m.caching.requested_peak}, {"segments", m.caching.segments.size()},
                              {"small_pool_reserved_bytes", m.caching.small_reserved},
                              {"large_pool_reserved_bytes", m.caching.large_reserved}};
    j["top_tensors"] = m.top_tensors;
    json& tj = j["tensors"] = json::array();
    for (const PlannedTensor& t : plan.tensors)
        tj.push_back({{"name", t.name}, {"layer", t.layer},
                      {"subblock", t.subblock >= 0 ? json(subblock_name((SubBlock)t.subblock)) : json(nullptr)},
                      {"kind", memory_kind_name(t.kind)}, {"dtype", t.dtype}, {"shape", t.shape},
                      {"allocation", plan.allocations[t.allocation].name}, {"offset", t.offset}, {"bytes", t.bytes},
                      {"first_use", t.first_use}, {"last_use", t.last_use}});
    return j;
}

nlohmann::json named_times_json(const std::vector<NamedTime>& rows, const char* count_name) {
    nlohmann::json a = nlohmann::json::array();
    for (const NamedTime& n : rows)
        a.push_back(
            {{"name", n.name}, {count_name, n.calls}, {"total_us", n.total_us}, {"avg_us", n.avg_us}, {"pct", n.pct}});
    return a;
}

nlohmann::json cost_json(const OpCost& c, const RooflinePoint& p) {
    return {{"gemm_flops", c.gemm_flops}, {"other_flops", c.other_flops}, {"flops", c.flops()}, {"bytes", c.bytes},
            {"intensity", finite_or_null(p.intensity)}, {"time_per_step_s", finite_or_null(p.time_s)},
            {"tflops", finite_or_null(p.tflops)}, {"gbps", finite_or_null(p.gbps)},
            {"compute_floor_s", finite_or_null(p.compute_floor_s)},
            {"memory_floor_s", finite_or_null(p.memory_floor_s)},
            {"floor_s", finite_or_null(p.floor_s)}, {"pct_of_roofline", finite_or_null(p.pct_of_roofline)},
            {"bound", p.bound}};
}

// null when the ceilings stand as measured; else the factors, what beat the ceilings, and the measured ones.
nlohmann::json raised_json(const CeilingRaise& up) {
    if (!up.raised()) return nullptr;
    return {{"compute_factor", up.compute}, {"memory_factor", up.memory}, {"compute_by", up.compute_by},
            {"memory_by", up.memory_by},
            {"measured", {{"bf16_tflops", up.before.bf16_tflops}, {"fp32_tflops", up.before.fp32_tflops},
                          {"dram_gbps", up.before.dram_gbps}, {"source", up.before.source}}}};
}

} // namespace

std::string profile_json(const Report& r) {
    using nlohmann::json;
    const ProfileContext& c = r.context;
    const GPT2Config& m = c.model;
    json j;
    j["context"] = {{"program", c.program}, {"device", c.device}, {"device_kind", device_kind_name(c.device_kind)}, {"build", c.build},
                    {"model", {{"num_layers", m.num_layers}, {"num_heads", m.num_heads}, {"channels", m.channels},
                               {"max_seq_len", m.max_seq_len}, {"vocab_size", m.vocab_size},
                               {"padded_vocab_size", m.padded_vocab_size}, {"num_parameters", c.num_parameters}}},
                    {"batch", {{"B", c.B}, {"T", c.T}, {"grad_accum", c.grad_accum}}},
                    {"ceilings", {{"bf16_tflops", c.ceilings.bf16_tflops}, {"fp32_tflops", c.ceilings.fp32_tflops},
                                  {"dram_gbps", c.ceilings.dram_gbps}, {"source", c.ceilings.source},
                                  {"raised", raised_json(r.ceiling_raise)}}},
                    {"peak_memory_bytes", c.peak_memory_bytes}, {"rank", c.rank}, {"world_size", c.world_size}};
    j["records"] = {{"kernels", r.records.kernels}, {"memcpys", r.records.memcpys}, {"memsets", r.records.memsets},
                    {"api", r.records.api}, {"syncs", r.records.syncs}, {"ranges", r.records.ranges},
                    {"power", r.records.power}, {"dropped", r.dropped_records},
                    {"cupti_overhead_ms", r.cupti_overhead_ms}};
    j["throughput"] = {{"steps", r.num_steps}, {"tokens", r.tokens}, {"wall_s", r.wall_s},
                       {"tokens_per_s", finite_or_null(r.tokens_per_s)}, {"flops_per_token", r.flops_per_token},
                       {"model_tflops", finite_or_null(r.model_tflops)}, {"mfu_pct", finite_or_null(r.mfu)},
                       {"gpu_time_us", r.gpu_time_us}, {"kernel_time_us", r.kernel_time_us}};
    json& k = j["kernels"] = json::array();
    for (const KernelRow& x : r.kernels)
        k.push_back({{"kernel", x.name}, {"subblock", subblock_label(x.subblock)}, {"phase", phase_label(x.phase)},
                     {"category", category_name(x.category)}, {"calls", x.calls}, {"total_us", x.total_us}, {"avg_us", x.avg_us},
                     {"pct", x.pct}});
    json& sb = j["subblocks"] = json::array();
    for (const SubBlockRow& x : r.subblocks)
        sb.push_back({{"subblock", subblock_label(x.subblock)}, {"phase", phase_label(x.phase)}, {"calls", x.calls},
                      {"time_us", x.time_us}, {"pct", x.pct}, {"per_step_ms", spread_json(x.per_step)},
                      {"roofline", cost_json(x.cost, x.roof)}});
    j["total"] = {{"calls", r.total.calls}, {"time_us", r.total.time_us}, {"per_step_ms", spread_json(r.total.per_step)},
                  {"roofline", cost_json(r.total.cost, r.total.roof)}};
    json& st = j["steps"] = json::array();
    for (const StepRow& x : r.steps) {
        st.push_back({{"step", x.step}, {"tokens", x.tokens}, {"wall_ms", x.wall_ms}, {busy_column(r), x.gpu_busy_ms},
                      {"idle_ms", x.idle_ms}, {"fwd_ms", x.fwd_ms}, {"bwd_ms", x.bwd_ms}, {"opt_ms", x.opt_ms},
                      {"other_ms", x.other_ms}, {"tok_s", x.tok_s}, {"energy_j", finite_or_null(x.energy_j)},
                      {"avg_power_w", finite_or_null(x.avg_power_w)}, {"j_per_token", finite_or_null(x.j_per_token)},
                      {"tokens_per_j", finite_or_null(x.tokens_per_j)}, {"flops_per_w", finite_or_null(x.flops_per_w)},
                      {"energy_source", energy_source_name(x.energy_source)},
                      {"below_counter_period", x.below_counter_period}, {"idle_gaps", x.gaps}});
        if (!r.phases.empty()) st.back()["prefill_ms"] = x.prefill_ms, st.back()["decode_ms"] = x.decode_ms;
    }
    json gaps = json::array();
    for (const IdleGap& g : r.largest_gaps)
        gaps.push_back({{"step", g.step}, {"offset_us", g.offset_us}, {"dur_us", g.dur_us}, {"api", g.api},
                        {"api_overlap_us", g.api_us},
                        {"outside_api_us", g.outside_api_us}, {"range", g.range}});
    j["gpu_idle"] = {{"idle_us", r.idle_us}, {"gaps", r.idle_gaps}, {"by_size", named_times_json(r.gap_sizes, "gaps")},
                     {"by_cpu_activity", named_times_json(r.idle_by_cpu, "gaps")}, {"largest", gaps}};
    const CounterReport& hw = r.counters;
    if (hw.collected || !hw.note.empty())
        j["counters"] = {{"collected", hw.collected}, {"method", REPLAY_NOTE}, {"note", hw.note},
                         {"tensor_flops_per_op", hw.tensor_flops_per_op}, {"kernels", hw.kernels.size()},
                         {"replay_time_us", hw.total.time_ns / 1e3}, {"replay_flops", hw.total.flops()},
                         {"replay_dram_bytes", hw.total.dram_bytes}};
    j["api"] = named_times_json(r.api, "calls");
    j["syncs"] = named_times_json(r.syncs, "calls");
    j["api_pct_of_cpu_time"] = r.api_pct;
    j["sync_pct_of_cpu_time"] = r.sync_pct;
    const PowerSummary& p = r.power;
    j["power"] = {{"samples", p.samples}, {"energy_j", finite_or_null(p.energy_j)}, {"avg_w", finite_or_null(p.avg_w)},
                  {"peak_w", finite_or_null(p.peak_w)}, {"joules_per_token", finite_or_null(p.joules_per_token)},
                  {"max_temperature_c", p.max_temperature_c}, {"min_sm_clock_mhz", p.min_sm_clock_mhz},
                  {"max_sm_clock_mhz", p.max_sm_clock_mhz}, {"throttle_reasons", p.throttle_reasons},
                  {"tokens_per_j", finite_or_null(p.tokens_per_j)}, {"flops_per_w", finite_or_null(p.flops_per_w)},
                  {"counter_steps", p.counter_steps}, {"integrated_steps", p.integrated_steps},
                  {"window_energy_source", energy_source_name(p.window_source)},
                  {"counter_still_ms", finite_or_null(p.counter_still_ms)},
                  {"below_counter_period_steps", p.below_counter_period_steps},
                  {"max_sm_clock_limit_mhz", p.max_sm_clock_limit_mhz}, {"reading", p.reading}, {"status", p.status}};
    if (!r.phases.empty()) {
        const InferenceShape& in = c.inference;
        json& ij = j["inference"] = {{"sequences", in.sequences}, {"prompt_tokens", in.prompt_tokens},
                                     {"decode_steps", in.decode_steps}, {"decode_tokens", in.decode_tokens},
                                     {"decode_context", in.decode_context}, {"kv_cache_bytes", in.kv_cache_bytes},
                                     {"elem_bytes", in.elem_bytes}};
        json& pj = ij["phases"] = json::array();
        for (const PhaseRow& p : r.phases)
            pj.push_back({{"phase", phase_label(p.phase)}, {"steps", p.steps}, {"tokens", p.tokens},
                          {"wall_ms", p.wall_ms}, {"time_us", p.time_us}, {"roofline", cost_json(p.cost, p.roof)}});
        json& bj = ij["decode_buckets"] = json::array();
        for (const DecodeBucket& b : r.decode_buckets)
            bj.push_back({{"first_pos", b.first_pos}, {"last_pos", b.last_pos}, {"steps", b.steps}, {"tokens", b.tokens},
                          {"wall_ms", b.wall_ms}, {"time_ms", b.time_ms}});
    }
    json& gj = j["gemm_algorithms"] = json::array();
    for (const GemmTuning& g : c.gemm_algorithms) {
        json cands = json::array();
        for (const GemmCandidate& x : g.candidates)
            cands.push_back({{"index", x.index}, {"algo_id", x.algo_id}, {"tile_id", x.tile_id}, {"splitk", x.splitk},
                             {"stages_id", x.stages_id}, {"us", x.us >= 0 ? json(x.us) : json(nullptr)}});
        gj.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.trans_a}, {"trans_b", g.trans_b},
                      {"epilogue", g.epilogue}, {"gelu_kernel", g.gelu_kernel}, {"accumulate", g.accumulate},
                      {"alignment_bytes", {{"a", g.align[0]}, {"b", g.align[1]}, {"d", g.align[2]},
                                           {"bias", g.align[3]}, {"aux", g.align[4]}}},
                      {"autotuned", g.autotuned}, {"restored", g.restored}, {"chosen", g.chosen}, {"candidates", cands}});
    }
    json& fj = j["findings"] = json::array();
    for (const Finding& f : r.findings)
        fj.push_back({{"rule", f.rule}, {"what", f.what}, {"evidence", f.evidence}, {"next_step", f.next_step},
                      {"ms_per_step", f.ms_per_step}});
    j["memory"] = memory_json(r);
    return j.dump(1) + "\n";
}

void write_profile_dir(const std::string& dir, const Report& r, const ProfileRecords& rec, int top_n) {
    make_dirs(dir);
    write_file(dir + "/summary.txt", format_summary(r, top_n));
    write_file(dir + "/kernels.csv", kernels_csv(r));
    write_file(dir + "/subblocks.csv", subblocks_csv(r));
    write_file(dir + "/steps.csv", steps_csv(r));
    write_file(dir + "/api.csv", api_csv(r));
    write_file(dir + "/roofline.csv", roofline_csv(r));
    // The inference tables; a training profile removes files of their names, so that a directory that held an
    // inference profile keeps none of its files (every other file is rewritten; files of other names stay).
    for (const auto& [name, table] : {std::make_pair("phases.csv", &phases_csv),
                                      std::make_pair("decode_buckets.csv", &decode_buckets_csv)}) {
        const std::string path = dir + "/" + name;
        if (!r.phases.empty()) write_file(path, table(r));
        else if (unlink(path.c_str()) != 0 && errno != ENOENT)
            throw Error(strprintf("%s: cannot remove the previous profile's file (%s)", path.c_str(), strerror(errno)));
    }
    write_file(dir + "/trace.json", trace_json(r, rec));
    write_file(dir + "/profile.json", profile_json(r));
    write_memory_files(dir, r);
}

void write_memory_files(const std::string& dir, const Report& r) {
    const std::string pickle = dir + "/memory_snapshot.pickle";
    if (!r.memory.present) {
        if (unlink((dir + "/memory.csv").c_str()) != 0 && errno != ENOENT)
            throw Error(strprintf("%s/memory.csv: cannot remove the previous profile's file (%s)", dir.c_str(), strerror(errno)));
        if (unlink(pickle.c_str()) != 0 && errno != ENOENT)
            throw Error(strprintf("%s: cannot remove the previous profile's file (%s)", pickle.c_str(), strerror(errno)));
        return;
    }
    write_file(dir + "/memory.csv", memory_csv(r.context.memory));
    write_file(pickle, memory_snapshot_pickle(r.context.memory, r.memory));
}

} // namespace llmc::prof
