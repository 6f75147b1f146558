// The CPU trainer's event source and session (llmc/profiler/cpu_source.h).
#include "llmc/profiler/cpu_source.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <omp.h>

#include "llmc/cpu/matmul.h"
#include "llmc/cpu/vec.h"
#include "llmc/profiler/ceiling_cache.h"
#include "llmc/profiler/report.h"

namespace llmc::prof {

std::string cpu_op_name(SubBlock s, SubBlockPart part) {
    static constexpr const char* ops[] = {"encoder", "layernorm", "matmul", "attention", "matmul",
                                          "residual", "layernorm", "matmul", "gelu",      "matmul",
                                          "residual", "layernorm", "matmul", "adamw",     "global_norm",
                                          "mpi"};
    std::string op = part == SubBlockPart::softmax_loss ? "softmax_loss" : enum_table<SubBlock>(ops)[(int)s];
    std::string name = subblock_name(s);
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
    static constexpr const char* phase_ranges[] = {"forward", "backward", "optimizer", "prefill", "decode"};
    const StepWindow window(steps);
    std::vector<RangeRecord> beside; // other threads' work: ranges on their own tracks, after the phase ranges
    for (const SubBlockEvent& e : events) {
        auto start = (uint64_t)e.start_ns, end = (uint64_t)e.end_ns;
        int si = window.step_of(start);
        Attribution where{(int)e.subblock, (int)e.phase, e.layer, si < 0 ? -1 : window.steps()[si].step};
        if (e.thread != 0) {
            std::string name = cpu_op_name(e.subblock, e.part) + (e.layer >= 0 ? strprintf(" layer %d", e.layer)
                                                                                : std::string(" outside the layers"));
            beside.push_back({name, start, end, e.thread, 0, where});
            continue;
        }
        // Consecutive executions of one phase make one range ("forward" of a micro-batch, ...), whose
        // correlation id the executions carry.
        RangeRecord* last = rec.ranges.size() > steps.size() ? &rec.ranges.back() : nullptr;
        if (last && last->where.phase == (int)e.phase && last->where.step == where.step)
            last->end_ns = std::max(last->end_ns, end);
        else
            rec.ranges.push_back({enum_table<Phase>(phase_ranges)[(int)e.phase], start, end, 0, 1,
                                  {-1, (int)e.phase, -1, where.step}, (uint32_t)rec.ranges.size() + 1});
        KernelRecord k;
        k.name = cpu_op_name(e.subblock, e.part);
        k.start_ns = start, k.end_ns = end;
        k.correlation = rec.ranges.back().correlation;
        k.where = where;
        rec.kernels.push_back(k);
    }
    rec.ranges.insert(rec.ranges.end(), beside.begin(), beside.end());
    return rec;
}

std::vector<MatmulShape> cpu_matmul_shapes(const GPT2Config& c, int B, int T) {
    const int BT = B * T, C = c.channels;
    std::vector<MatmulShape> shapes;
    for (MatmulShape m : {MatmulShape{BT, C, 3 * C}, {BT, C, C}, {BT, C, 4 * C}, {BT, 4 * C, C},
                          {BT, C, c.padded_vocab_size}})
        if (std::find(shapes.begin(), shapes.end(), m) == shapes.end()) shapes.push_back(m);
    return shapes;
}

namespace {

// Rounds per measurement and the least time of one round: long enough for turbo clocks and idle threads to
// settle, short enough that calibrating a small model takes a couple of seconds.
constexpr int ROUNDS = 3;
constexpr double ROUND_S = 0.1;

// fp32 FLOP/s of the reference matmul forward at one shape, with operands that are not all zeros.
double matmul_rate(const MatmulShape& m) {
    std::vector<float> inp((size_t)m.BT * m.C), w((size_t)m.OC * m.C), b(m.OC), out((size_t)m.BT * m.OC);
    for (size_t i = 0; i < inp.size(); i++) inp[i] = (float)(i % 7) * 0.25f - 0.75f;
    for (size_t i = 0; i < w.size(); i++) w[i] = (float)(i % 5) * 0.125f - 0.25f;
    for (size_t i = 0; i < b.size(); i++) b[i] = 0.5f;
    return best_rate([&] { cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), 1, m.BT, m.C, m.OC); },
                     2.0 * m.BT * m.C * m.OC, ROUNDS, ROUND_S);
}

// Bytes/s of a[i] = b[i] + s·c[i] over three arrays of TRIAD_FLOATS floats (64 MiB each, far past any L3),
// counted as STREAM does: two reads and one write per element.
constexpr size_t TRIAD_FLOATS = 16u << 20;
double triad_rate() {
    std::vector<float> a(TRIAD_FLOATS), b(TRIAD_FLOATS, 1.0f), c(TRIAD_FLOATS, 2.0f);
    const long n = (long)TRIAD_FLOATS;
    return best_rate(
        [&] {
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        },
        3.0 * sizeof(float) * n, ROUNDS, ROUND_S);
}

std::string shapes_text(const std::vector<MatmulShape>& shapes) {
    std::string s;
    for (const MatmulShape& m : shapes) s += strprintf("%s%dx%dx%d", s.empty() ? "" : ",", m.BT, m.C, m.OC);
    return s;
}

// FNV-1a of the cache identity, for a file name that stays the same from one build to the next.
std::string fnv1a_hex(const std::string& text) {
    return strprintf("%016llx", (unsigned long long)fnv1a(text.data(), text.size()));
}

} // namespace

Ceilings measure_cpu_ceilings(const GPT2Config& cfg, int B, int T, bool use_cache) {
    const std::vector<MatmulShape> shapes = cpu_matmul_shapes(cfg, B, T);
    const ceiling_cache::Lines identity = {{"cpu", cpu_model_name()},
                                           {"threads", std::to_string(omp_get_max_threads())},
                                           {"isa", cpu::vec::isa_name(cpu::vec::active_isa())},
                                           {"gemm", cpu_blas::describe()},
                                           {"shapes", shapes_text(shapes)}};
    std::string id_text;
    for (const auto& [key, value] : identity) id_text += key + "=" + value + ";";
    const std::string dir = ceiling_cache::dir();
    const std::string path = dir.empty() ? "" : dir + "/cpu-ceilings-" + fnv1a_hex(id_text) + ".txt";
    Ceilings c;
    if (use_cache && !path.empty()) {
        std::map<std::string, std::string> e = ceiling_cache::read(path);
        const double tflops = ceiling_cache::measured(e, "matmul_tflops"), gbps = ceiling_cache::measured(e, "dram_gbps");
        if (ceiling_cache::matches(e, identity) && tflops && gbps) {
            c.fp32_tflops = c.bf16_tflops = tflops, c.dram_gbps = gbps;
            c.source = "calibrated (cached " + path + ")";
            return c;
        }
    }
    MatmulShape best{};
    for (size_t i = 0; i < shapes.size(); i++) {
        const MatmulShape& m = shapes[i];
        printf("profile: calibrating the CPU ceilings: matmul %d/%zu (%dx%d -> %d)...", (int)i + 1, shapes.size(), m.BT,
               m.C, m.OC);
        fflush(stdout);
        double tflops = matmul_rate(m) / 1e12;
        printf(" %.4f TFLOP/s\n", tflops);
        if (tflops > c.fp32_tflops) c.fp32_tflops = c.bf16_tflops = tflops, best = m;
    }
    printf("profile: calibrating the CPU ceilings: memory bandwidth (triad, 3 x %zu MiB)...", TRIAD_FLOATS * 4 >> 20);
    fflush(stdout);
    c.dram_gbps = triad_rate() / 1e9;
    printf(" %.1f GB/s\n", c.dram_gbps);
    c.source = strprintf("calibrated: fp32 matmul at the model's %zu shapes (best %dx%d -> %d), triad 3 x %zu MiB, "
                         "%d threads, best of %d",
                         shapes.size(), best.BT, best.C, best.OC, TRIAD_FLOATS * 4 >> 20, omp_get_max_threads(), ROUNDS);
    if (!path.empty()) {
        try {
            ceiling_cache::Lines lines = identity;
            lines.push_back({"matmul_tflops", strprintf("%.6g", c.fp32_tflops)});
            lines.push_back({"dram_gbps", strprintf("%.6g", c.dram_gbps)});
            ceiling_cache::write(path, "llmc CPU roofline ceilings (llmc/profiler/cpu_source.cpp)", lines);
        } catch (const Error& e) {
            printf("profile: could not cache the CPU ceilings (%s)\n", e.what());
        }
    }
    return c;
}

void CpuEventSource::begin_step(int step) {
    step_ = step;
    timings_->events = &events_;
    if (rapl_.ok()) energy_.push_back({(uint64_t)steady_ns(), rapl_.joules()});
    step_start_ = steady_ns();
}

void CpuEventSource::end_step(long tokens) {
    const int64_t end = steady_ns();
    steps_.push_back({step_, (uint64_t)step_start_, (uint64_t)end, tokens});
    timings_->events = nullptr;
    if (rapl_.ok()) energy_.push_back({(uint64_t)end, rapl_.joules()});
}

ProfileRecords CpuEventSource::take() {
    ProfileRecords rec = cpu_profile_records(events_, steps_);
    rec.energy = energy_;
    rec.energy_counter = strprintf("RAPL package energy counter (%zu package%s)", rapl_.packages(),
                                   rapl_.packages() == 1 ? "" : "s");
    rec.power_status = rapl_.ok() ? "" : "RAPL not readable: " + rapl_.status();
    return rec;
}

namespace {
// The CPU and the build into a context of the program, model and batch, and the ceilings measured at its shapes.
std::unique_ptr<ProfileSession> cpu_session(const SessionOptions& opt, ProfileContext ctx, SubBlockTimes* timings) {
    const char* powercap = getenv("LLMC_POWERCAP_ROOT");
    auto source = std::make_unique<CpuEventSource>(timings, powercap && *powercap ? powercap : "/sys/class/powercap");
    // Refused before the ceilings are measured.
    std::unique_ptr<EnergyCounter> energy = opt.energy ? energy_counter_for(*source) : nullptr;
    ctx.device_kind = DeviceKind::CPU;
    ctx.device = strprintf("%s (%d threads)", cpu_model_name().c_str(), omp_get_max_threads());
    ctx.build = strprintf("C++ %s, fp32, OpenMP %d threads, %s elementwise kernels, GEMM: %s (up to %d rows: "
                          "own rows kernel)",
                          __VERSION__, omp_get_max_threads(), cpu::vec::isa_name(cpu::vec::active_isa()),
                          cpu_blas::describe().c_str(), cpu::ROWS_MAX);
    ctx.ceilings = measure_cpu_ceilings(ctx.model, ctx.B, ctx.T);
    printf("profile: %s into %s/; ceilings fp32 %.3f TFLOP/s, memory %.0f GB/s (%s)\n",
           ProfileSchedule(opt.first_step, opt.steps).window().c_str(), opt.dir.c_str(), ctx.ceilings.fp32_tflops,
           ctx.ceilings.dram_gbps, ctx.ceilings.source.c_str());
    return std::make_unique<ProfileSession>(opt, std::move(ctx), std::move(source), std::move(energy));
}
} // namespace

std::unique_ptr<ProfileSession> make_cpu_profile_session(const SessionOptions& opt, ProfileContext ctx,
                                                         SubBlockTimes* timings) {
    return cpu_session(opt, std::move(ctx), timings);
}

std::unique_ptr<ProfileSession> make_cpu_inference_session(const SessionOptions& opt, const GPT2Config& c,
                                                           const InferenceShape& shape, int prompt_len,
                                                           SubBlockTimes* timings) {
    ProfileContext ctx = profile_context("infer_gpt2", c, (int)shape.sequences, prompt_len, 1);
    ctx.inference = shape;
    return cpu_session(opt, std::move(ctx), timings);
}

} // namespace llmc::prof
