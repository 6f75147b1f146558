/*
 * profile_gpt2cu: a few GPT-2 training steps on the GPU, fully traced in-process with CUPTI, turned into a
 * profile directory (summary.txt, kernels.csv, subblocks.csv, steps.csv, api.csv, roofline.csv, trace.json,
 * profile.json; see doc/profiling.md). The steps are train_gpt2cu's: its GPU backend (llmc/gpu/programs.h) and the
 * training driver's step loop (llmc/train/loop.h) run forward, backward, global norm and AdamW, on random token ids
 * unless -i gives data, with the profile session the backend makes for the driver, as train_gpt2cu --profile.
 * Warmup steps run untraced first (cuBLASLt heuristics, lazy module loading), then each traced step is flushed
 * after its loss read, outside its timing. What is this program's own: its flags (llmc/profiler/options.h), the
 * random batches, the replay-sized run under ncu and the --counters step.
 *
 *   make profile_gpt2cu && ./profile_gpt2cu                 # GPT-2 124M, B=8, T=1024 -> profile/
 *   ncu --set full ./profile_gpt2cu                         # under ncu: 1 layer, 1 step (explicit flags win)
 *   nsys profile ./profile_gpt2cu                           # the steps as given, NVTX ranges per sub-block
 */
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "llmc/gpu/programs.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/dataloader.h"
#include "llmc/matmul.cuh"
#include "llmc/profiler/cupti_counters.cuh"
#include "llmc/profiler/cupti_source.cuh"
#include "llmc/profiler/options.h"
#include "llmc/train/dist.h"
#include "llmc/train/plan.h"

using namespace llmc;

namespace {

// Token ids for each step: the next batch of the -i shards, or random ones.
struct StepBatches {
    StepBatches(const std::string& data, int B, int T, int vocab_size) {
        if (data.empty()) {
            batches = std::make_unique<RandomBatches>(B, T, vocab_size, 1337);
            return;
        }
        loader = std::make_unique<DataLoader>(data, "train", B, T, vocab_size);
        batches = std::make_unique<LoaderBatches>(*loader);
    }
    std::unique_ptr<DataLoader> loader;
    std::unique_ptr<TokenBatches> batches;
};

/*
 * Running under nsys or ncu: both inject themselves through CUDA_INJECTION64_PATH (a library in the tool's own
 * install tree); ncu also exports its metrics directory (NV_COMPUTE_PROFILER_PERFWORKS_DIR). The traced or
 * replayed run then leaves calibration and counters to the tool.
 */
enum class CudaTool { none, ncu, nsys, other };
CudaTool attached_cuda_tool() {
    const char* inj = getenv("CUDA_INJECTION64_PATH");
    const std::string path = inj ? inj : "";
    if (getenv("NV_COMPUTE_PROFILER_PERFWORKS_DIR") || path.find("nsight-compute") != std::string::npos ||
        path.find("TreeLauncher") != std::string::npos)
        return CudaTool::ncu;
    if (path.find("nsight-systems") != std::string::npos || path.find("ToolsInjection") != std::string::npos)
        return CudaTool::nsys;
    return prof::cuda_tool_injected() ? CudaTool::other : CudaTool::none;
}
bool under_cuda_tool() { return attached_cuda_tool() != CudaTool::none; }

/*
 * The tensor-op counter's unit, checked on this device instead of assumed: one GEMM of known size through the
 * model's own matmul path, counted like the step. Returns FLOPs per counted op, 0 when nothing was counted.
 */
constexpr int kCalibrationGemm = 1024;
double calibrate_tensor_ops() {
    const int n = kCalibrationGemm;
    floatX *a = nullptr, *b = nullptr, *d = nullptr;
    CUDA_CHECK(cudaMalloc(&a, (size_t)n * n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&b, (size_t)n * n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d, (size_t)n * n * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(a, 0, (size_t)n * n * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(b, 0, (size_t)n * n * sizeof(floatX)));
    // The plan first (its autotune runs the GEMM's candidates, which must not be counted).
    matmul_forward(d, a, b, nullptr, n, n, n, nullptr, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    prof::CounterReport r = prof::collect_counters(
        [&] {
            matmul_forward(d, a, b, nullptr, n, n, n, nullptr, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
        },
        16, [](const char* name) { return prof::demangle(name); });
    cudaFree(a), cudaFree(b), cudaFree(d);
    double ops = 0;
    for (const prof::KernelCounters& k : r.kernels) ops += k.tensor_ops;
    return r.collected ? prof::tensor_flops_per_op(ops, n, n, n) : 0.0;
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
    const std::vector<prof::KernelRecord> traced_step = prof::last_step_kernels(records);
    counters = prof::collect_counters(step, 2 * traced_step.size() + 64, [](const char* n) { return prof::demangle(n); });
    if (!counters.collected) {
        printf("counters: %s; the rest of the profile is written\n", counters.note.c_str());
        return counters;
    }
    const double flops_per_op = calibrate_tensor_ops();
    prof::scale_tensor_ops(counters, flops_per_op);
    if (flops_per_op > 0)
        printf("counters: one counted tensor op = %.4f FLOPs (a %dx%dx%d GEMM counted as 2*M*N*K)\n", flops_per_op,
               kCalibrationGemm, kCalibrationGemm, kCalibrationGemm);
    else
        counters.note += (counters.note.empty() ? "" : "; ") + std::string("tensor-op unit not calibrated (assumed 1)");
    std::string why = prof::join_by_launch_order(traced_step, counters.kernels);
    if (!why.empty()) counters.note += (counters.note.empty() ? "" : "; ") + ("no sub-block attribution: " + why);
    prof::aggregate_counters(counters);
    printf("counters: %zu kernels counted%s%s\n", counters.kernels.size(), why.empty() ? "" : "; ", why.c_str());
    return counters;
}

/*
 * The run's profile session, made by the backend before it allocates the model (the ceilings are measured then,
 * unless --no-calibrate or a tool is attached): CUPTI over the steps after the warmup ones, the summary printed
 * when it is written. At write time, --counters' step.
 */
std::unique_ptr<prof::ProfileSession> make_session(TrainBackend& be, const ProfileOptions& opt, const RunPlan& plan,
                                                   TokenBatches& batches) {
    prof::SessionOptions so{opt.output, opt.warmup, opt.steps, opt.top, true, "-o"};
    so.energy = opt.energy, so.energy_seconds = opt.energy_seconds;
    so.measure_ceilings = opt.calibrate && !under_cuda_tool(); // ncu would replay the calibration, nsys show it
    std::unique_ptr<prof::ProfileSession> session =
        be.profile_session(so, prof::profile_context("profile_gpt2cu", plan.cfg, opt.B, opt.T, 1));
    const float lr = plan.opt.lr;
    const int counted_step = plan.max_steps + 1; // the AdamW step after the run's
    session->before_report([&be, &batches, counters = opt.counters, lr, counted_step](
                               const prof::ProfileRecords& records, prof::ProfileContext&) {
        return count_last_step(records, counters, [&] { be.train_step(batches, 1, lr, counted_step); });
    });
    return session;
}

} // namespace

int main(int argc, char** argv) {
    return main_guard([&] {
        ProfileOptions opt = parse_profile_options(argc, argv);
        if (opt.help) {
            printf("%s", profile_usage().c_str());
            return 0;
        }
        if (opt.version) {
            printf("profile_gpt2cu: %s\n", prof::toolchain_versions().c_str());
            return 0;
        }
        if (attached_cuda_tool() == CudaTool::ncu) printf("%s\n", shrink_for_ncu(opt).c_str());
        require_gpu("profile_gpt2cu"); // before the note on --warmup: without a GPU, one line
        if (!under_cuda_tool() && opt.warmup == 0) {
            // CUPTI is started one step ahead of the traced ones: its start-up must not land in a traced step.
            opt.warmup = 1;
            printf("profile_gpt2cu: --warmup 1: CUPTI starts during an untraced step\n");
        }
        prof::check_profile_dir(opt.output, "-o"); // before the model is built
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

        // ---- model: dN (optionally with fewer layers) or a model file ----
        ModelSource src = load_model_source(opt.model, 1337, true, opt.layers);
        const GPT2Config cfg = src.cfg;
        check_seq_len(cfg, opt.T);
        StepBatches data(opt.data, opt.B, opt.T, cfg.vocab_size);
        // The warmup and profiled steps at a constant learning rate of 3e-4, one micro-batch each, through the GPU
        // trainer's backend.
        RunPlan plan = fixed_steps_plan(opt.model, cfg, opt.B, opt.T, opt.warmup + opt.steps, 3e-4f);
        plan.opt.cuda_graph = opt.cuda_graph;
        const std::unique_ptr<Communicator> comm = single_process_communicator();
        const std::unique_ptr<TrainBackend> be = gpu_train_program().make_backend(cfg, train_shape(plan.opt), *comm);
        const std::unique_ptr<prof::ProfileSession> session = make_session(*be, opt, plan, *data.batches);
        be->load_weights(src.params);
        src.params = std::vector<float>();
        printf("profile_gpt2cu: %s, L=%d NH=%d C=%d (%.1fM parameters), B=%d T=%d, %d warmup + %d profiled steps\n",
               prop.name, cfg.num_layers, cfg.num_heads, cfg.channels, num_parameters(cfg) / 1e6, opt.B, opt.T,
               opt.warmup, opt.steps);
        if (attached_cuda_tool() == CudaTool::nsys)
            printf("profile_gpt2cu: under nsys: the steps as given, with their NVTX ranges; in-process CUPTI off\n");
        // Warmup steps run untraced (the session arms the collector after the last of them), then the traced ones.
        run_steps("profile_gpt2cu", plan, *be, *comm, *data.batches, session.get());
        if (!session->written()) {
            printf("profiler: no in-process profile written%s\n",
                   under_cuda_tool() ? " (the attached tool has the trace)" : "");
            return 0;
        }
        std::string files;
        for (const std::string& f : session->written_files()) files += (files.empty() ? "" : ", ") + f;
        printf("profile written to %s/ (%s)\n", opt.output.c_str(), files.c_str());
        return 0;
    });
}
