/*
 * profile_gpt2cu: a few GPT-2 training steps on the GPU, fully traced in-process with CUPTI, turned into a
 * profile directory (summary.txt, kernels.csv, subblocks.csv, steps.csv, api.csv, roofline.csv, trace.json,
 * profile.json; see doc/profiling.md). The steps are train_gpt2cu's: forward, backward, global norm and
 * AdamW, on random token ids unless -i gives data. Warmup steps run untraced first (cuBLASLt heuristics,
 * lazy module loading), then each traced step is flushed after its loss read, outside its timing.
 *
 *   make profile_gpt2cu && ./profile_gpt2cu                 # GPT-2 124M, B=8, T=1024 -> profile/
 *   ncu --nvtx --nvtx-include "llmc@forward/" --set full ./profile_gpt2cu --layers 1 --steps 1 --warmup 1
 */
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/cli.h"
#include "llmc/dataloader.h"
#include "llmc/gpt2.cuh"
#include "llmc/gpt2_init.h"
#include "llmc/optimizer.h"
#include "llmc/profiler/calibrate.cuh"
#include "llmc/profiler/cupti_counters.cuh"
#include "llmc/profiler/cupti_source.cuh"
#include "llmc/rand.h"

using namespace llmc;

namespace {

struct Options {
    std::string model = "d12";
    int layers = 0; // 0: the model's own
    int B = 8, T = 1024;
    std::string data; // "" = random token ids
    int warmup = 3, steps = 5;
    std::string output = "profile";
    bool calibrate = true;
    bool counters = false;
    int top = 15;
    bool help = false;
};

std::string usage(const Options& d) {
    return strprintf(
        "usage: profile_gpt2cu [options]\n"
        "Runs GPT-2 training steps on the GPU traced with CUPTI and writes a profile directory.\n"
        "  -e, --model dN|FILE   dN (d12 = GPT-2 124M; other dN: L=N C=64N NH=N) or an llm.c model file [%s]\n"
        "      --layers N        override L of a dN model (a smaller model for ncu) [the model's]\n"
        "  -b, --batch N         micro-batch size [%d]\n"
        "  -t, --seq-len N       sequence length [%d]\n"
        "  -i, --input DATA      train shards (DIR|GLOB|FILE) [random token ids]\n"
        "      --warmup N        untraced steps before the profile [%d]\n"
        "      --steps N         profiled steps [%d]\n"
        "  -o, --output DIR      profile directory [%s]\n"
        "      --no-calibrate    roofline against the datasheet ceilings instead of measured ones\n"
        "      --counters        one more step under CUPTI's range profiler: per-kernel FLOPs and DRAM bytes\n"
        "      --top N           kernels listed in the summary [%d]\n"
        "  -h, --help            this help\n"
        "Under ncu keep the replay short: ncu --nvtx --nvtx-include \"llmc@forward/\" ./profile_gpt2cu --layers 1 "
        "--steps 1 --warmup 1\n",
        d.model.c_str(), d.B, d.T, d.warmup, d.steps, d.output.c_str(), d.top);
}

Options parse_options(int argc, char** argv) {
    using llmc::detail::parse_long;
    constexpr long IMAX = 2147483647;
    Options o;
    for (int i = 1; i < argc; i++) {
        llmc::detail::Arg a = llmc::detail::split_arg(argv[i]);
        const std::string& flag = a.flag;
        if (flag == "-h" || flag == "--help") {
            o.help = true;
            continue;
        }
        if (flag == "--no-calibrate" || flag == "--counters") {
            if (a.has_value) throw UsageError(strprintf("%s: takes no value", flag.c_str()));
            if (flag == "--counters") o.counters = true;
            else o.calibrate = false;
            continue;
        }
        static const char* with_value[] = {"-e", "--model", "--layers", "-b", "--batch", "-t", "--seq-len", "-i",
                                           "--input", "--warmup", "--steps", "-o", "--output", "--top"};
        bool known = false;
        for (const char* f : with_value) known |= flag == f;
        if (!known) throw UsageError(strprintf("unknown flag '%s' (see --help)", flag.c_str()));
        const std::string value = llmc::detail::take_value(a, argc, argv, i);
        if (flag == "-e" || flag == "--model") o.model = value;
        else if (flag == "--layers") o.layers = (int)parse_long(flag, value, 1, 1000);
        else if (flag == "-b" || flag == "--batch") o.B = (int)parse_long(flag, value, 1, IMAX);
        else if (flag == "-t" || flag == "--seq-len") o.T = (int)parse_long(flag, value, 1, IMAX);
        else if (flag == "-i" || flag == "--input") o.data = value;
        else if (flag == "--warmup") o.warmup = (int)parse_long(flag, value, 0, IMAX);
        else if (flag == "--steps") o.steps = (int)parse_long(flag, value, 1, IMAX);
        else if (flag == "-o" || flag == "--output") o.output = value;
        else if (flag == "--top") o.top = (int)parse_long(flag, value, 1, IMAX);
    }
    return o;
}

// Token ids for each step: the next batch of the -i shards, or fresh uniform ids from a seeded Rng (kernel
// times do not depend on the values).
class Batches {
public:
    Batches(const std::string& data, int B, int T, int vocab_size) : vocab_(vocab_size) {
        if (!data.empty()) loader_ = std::make_unique<DataLoader>(data, "train", B, T, vocab_size);
        else tokens_.resize((size_t)B * T + 1);
    }
    void next() {
        if (loader_) return loader_->next_batch();
        for (int& t : tokens_) t = (int)(rng_.next_u32() % vocab_);
    }
    const int* inputs() const { return loader_ ? loader_->inputs() : tokens_.data(); }
    const int* targets() const { return loader_ ? loader_->targets() : tokens_.data() + 1; }

private:
    int vocab_;
    std::unique_ptr<DataLoader> loader_;
    std::vector<int> tokens_;
    Rng rng_{1337};
};

// One step as train_gpt2cu runs it (GPT2GPU::train_step, no gradient accumulation).
float train_step(GPT2GPU& m, Batches& data, int B, int T, int t) {
    auto next = [&data] {
        data.next();
        return std::make_pair(data.inputs(), data.targets());
    };
    return m.train_step(next, B, T, 1, 3e-4f, AdamWConfig{}, t).first;
}

// Running under nsys or ncu: both inject themselves through CUDA_INJECTION64_PATH; ncu also exports its
// metrics directory. The replayed or traced run then leaves calibration and counters to the tool.
bool under_cuda_tool() {
    return prof::cuda_tool_injected() || getenv("NV_COMPUTE_PROFILER_PERFWORKS_DIR") != nullptr;
}

/*
 * --counters: one more step under CUPTI's range profiler, in a step of its own (the range profiler replays
 * every kernel, which tracing would record). Its kernels take the sub-blocks of the last traced step's,
 * joined by launch order.
 */
template <typename Step>
prof::CounterReport count_last_step(const prof::ProfileRecords& records, bool wanted, Step&& step) {
    prof::CounterReport counters;
    if (!wanted) return counters;
    if (under_cuda_tool()) {
        printf("counters: skipped under nsys/ncu (the tool owns the counters)\n");
        return counters;
    }
    if (records.steps.empty()) return counters;
    const prof::StepRecord& last = records.steps.back();
    std::vector<prof::KernelRecord> traced_step;
    for (const prof::KernelRecord& k : records.kernels)
        if (k.start_ns >= last.start_ns && k.start_ns <= last.end_ns) traced_step.push_back(k);
    counters = prof::collect_counters(step, 2 * traced_step.size() + 64, [](const char* n) { return prof::demangle(n); });
    if (!counters.collected) {
        printf("counters: %s; the rest of the profile is written\n", counters.note.c_str());
        return counters;
    }
    std::string why = prof::join_by_launch_order(traced_step, counters.kernels);
    if (!why.empty()) counters.note += (counters.note.empty() ? "" : "; ") + ("no sub-block attribution: " + why);
    prof::aggregate_counters(counters);
    printf("counters: %zu kernels counted%s%s\n", counters.kernels.size(), why.empty() ? "" : "; ", why.c_str());
    return counters;
}

} // namespace

int main(int argc, char** argv) {
    return main_guard([&] {
        Options opt = parse_options(argc, argv);
        if (opt.help) {
            printf("%s", usage(Options{}).c_str());
            return 0;
        }
        if (cuda_device_count() == 0)
            throw Error("no CUDA device found: profile_gpt2cu needs an NVIDIA GPU (sm_80 or newer)");
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        if (prop.major < 8)
            throw Error(
                strprintf("%s is sm_%d%d: profile_gpt2cu needs sm_80 or newer", prop.name, prop.major, prop.minor));

        // ---- model: dN (optionally with fewer layers) or a model file ----
        GPT2Config cfg;
        std::vector<float> weights;
        int depth;
        if (parse_depth_descriptor(opt.model, &depth)) {
            cfg = gpt2_config_for_depth(depth);
            if (opt.layers > 0) cfg.num_layers = opt.layers;
            weights.resize(num_parameters(cfg));
            init_gpt2_parameters(weights.data(), cfg, 1337);
        } else {
            if (opt.layers > 0) throw UsageError("--layers: only for a dN model (-e)");
            if (!file_exists(opt.model))
                throw UsageError(
                    strprintf("-e: '%s' is neither dN (e.g. d12) nor an existing model file", opt.model.c_str()));
            ModelFile mf = load_model(opt.model);
            cfg = mf.config;
            weights = std::move(mf.params);
        }
        if (opt.T > cfg.max_seq_len)
            throw UsageError(
                strprintf("-t: sequence length %d exceeds the model's maximum %d", opt.T, cfg.max_seq_len));
        Batches data(opt.data, opt.B, opt.T, cfg.vocab_size);

        auto model = std::make_unique<GPT2GPU>(cfg, opt.B, opt.T);
        model->set_parameters(weights.data());
        weights = std::vector<float>();
        printf("profile_gpt2cu: %s, L=%d NH=%d C=%d (%.1fM parameters), B=%d T=%d, %d warmup + %d profiled steps\n",
               prop.name, cfg.num_layers, cfg.num_heads, cfg.channels, num_parameters(cfg) / 1e6, opt.B, opt.T,
               opt.warmup, opt.steps);

        int t = 0; // AdamW step
        prof::ProfileSession session({opt.output, opt.warmup, opt.steps, opt.top},
                                     prof::gpu_profile_context("profile_gpt2cu", cfg, opt.B, opt.T, 1),
                                     std::make_unique<prof::CuptiEventSource>());
        session.before_report([&](const prof::ProfileRecords& records, prof::ProfileContext& ctx) {
            prof::CounterReport counters = count_last_step(records, opt.counters, [&] {
                train_step(*model, data, opt.B, opt.T, ++t);
            });
            // The ceilings are measured with the model freed (the GEMM and the copy need ~2.4 GiB) and untraced.
            model.reset();
            // Under ncu the calibration kernels would be replayed too, and under nsys they would crowd the timeline.
            ctx.ceilings =
                opt.calibrate && !under_cuda_tool() ? prof::measure_ceilings(true) : prof::spec_ceilings(prop.name);
            printf("ceilings: bf16 %.0f TFLOP/s, DRAM %.0f GB/s (%s)\n", ctx.ceilings.bf16_tflops,
                   ctx.ceilings.dram_gbps, ctx.ceilings.source.c_str());
            return counters;
        });
        const char* ncu_hint = "profiler: under ncu keep the replay short: --layers 1 --steps 1 --warmup 1, and "
                               "ncu --nvtx --nvtx-include \"llmc@forward/\"\n";
        if (under_cuda_tool()) printf("%s", ncu_hint);
        // Warmup steps run untraced (the session arms the collector after the last of them), then the traced ones.
        const long tokens = (long)opt.B * opt.T;
        const int total = opt.warmup + opt.steps;
        bool written = false;
        for (int i = 0; i < total; i++) {
            auto t0 = std::chrono::steady_clock::now();
            session.begin_step(i);
            float loss = train_step(*model, data, opt.B, opt.T, ++t);
            session.end_step(tokens);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (i >= opt.warmup)
                printf("step %d/%d | loss %.6f | %.2f ms | %.0f tok/s\n", i - opt.warmup + 1, opt.steps, loss, ms,
                       tokens / (ms / 1e3));
            written = session.step_done(i + 1 == total);
        }
        if (!written) {
            if (!under_cuda_tool()) printf("%s", ncu_hint);
            printf("profiler: no in-process profile written\n");
            return 0;
        }
        printf("profile written to %s/ (summary.txt, kernels.csv, subblocks.csv, steps.csv, api.csv, roofline.csv, "
               "trace.json, profile.json)\n",
               opt.output.c_str());
        return 0;
    });
}
