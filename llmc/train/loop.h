/*
 * The training driver shared by train_gpt2 (CPU), train_gpt2cu (GPU) and profile_gpt2cu: one run of a TrainProgram
 * (its flags, the run's plan, the backend it builds, the profile session it owns, the step loop with val loss,
 * samples, checkpoints and resume, the printed step line). Compiled once (loop.cpp; every check before the model is
 * allocated is the run's plan, llmc/train/plan.h); what runs where is the TrainBackend's business, and a backend
 * lives beside its model (llmc/cpu/train_backend.cpp, llmc/gpu/gpt2.cu). profile_gpt2cu plans and starts its own run
 * and hands it to the same step loop (run_steps).
 */
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "llmc/infer/driver.h"
#include "llmc/model/optimizer.h"
#include "llmc/train/dist.h"
#include "llmc/train/options.h"
#include "llmc/util/rand.h"

namespace llmc {

class DataLoader;
class Progress;
struct GPT2Config;
struct SubBlockTimes;
namespace prof {
class ProfileSession;
struct ProfileContext;
struct SessionOptions;
} // namespace prof

// The token batches the steps train on, B*T positions each: the train DataLoader's (LoaderBatches), or what a
// program hands run_steps (profile_gpt2cu's random token ids). Their shape is the backend's (TrainBackend::
// train_step refuses batches of another).
class TokenBatches {
public:
    TokenBatches(int B, int T) : B(B), T(T) {}
    virtual ~TokenBatches() = default;
    virtual void next_batch() = 0;
    virtual const int* inputs() const = 0;
    virtual const int* targets() const = 0;
    const int B, T;
};

class LoaderBatches : public TokenBatches {
public:
    explicit LoaderBatches(DataLoader& loader);
    void next_batch() override;
    const int* inputs() const override;
    const int* targets() const override;

private:
    DataLoader& loader_;
};

// Fresh uniform token ids below vocab_size for each batch, from a seeded Rng (profile_gpt2cu without -i: kernel
// times do not depend on the values).
class RandomBatches : public TokenBatches {
public:
    RandomBatches(int B, int T, int vocab_size, uint64_t seed);
    void next_batch() override;
    const int* inputs() const override { return tokens_.data(); }
    const int* targets() const override { return tokens_.data() + 1; }

private:
    int vocab_;
    std::vector<int> tokens_;
    Rng rng_;
};

// What a backend is built for, given once: the micro-batch every step and val batch has, and the optimizer.
struct TrainShape {
    int B = 0, T = 0;
    AdamWConfig adam;
    bool zero = false; // -z 1: the optimizer state sharded over the communicator's ranks (ZeRO-1)
    bool cuda_graph = false; // --cuda-graph 1: a GPU backend's steps as CUDA graph launches
};

struct StepStats {
    float loss;
    float grad_norm;
};

/*
 * Where the model runs. Constructed by the program's BackendFactory for a TrainShape, as one of the communicator's
 * data-parallel ranks (llmc/train/dist.h), without allocating the model: the driver first asks for the profile
 * session (--profile only), then load_weights() allocates. train_step's loss and norm are over all ranks, and
 * get_moments/set_moments take the whole moments on every rank.
 */
class TrainBackend {
public:
    virtual ~TrainBackend() = default;
    virtual const char* name() const = 0; // "CPU fp32", "GPU bf16, <device>"
    /*
     * --profile: the session of this backend's device (the CPU's sub-block timers, or CUPTI with the ceilings
     * measured now, before the model takes the device memory), over `ctx` (program, model, batch, ranks) with the
     * backend's memory plan added; the driver owns it and brackets the steps.
     */
    virtual std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                                  prof::ProfileContext ctx) = 0;
    virtual void load_weights(const std::vector<float>& fp32_params) = 0; // llm.c order; allocates the first time
    virtual std::vector<float> weights() = 0;                              // fp32 (the master weights on the GPU)
    virtual int model_file_version() const = 0;                            // 3 (fp32) or 5 (bf16 + master in state)
    virtual void get_moments(std::vector<float>& m, std::vector<float>& v) = 0;
    virtual void set_moments(const std::vector<float>& m, const std::vector<float>& v) = 0;
    // grad_accum: this rank's micro-batches of `train` (of the backend's shape); t: 1-based AdamW step
    virtual StepStats train_step(TokenBatches& train, int grad_accum, float lr, int t) = 0;
    virtual float val_loss(DataLoader& val, int batches, Progress& progress) = 0; // progress: ticked per batch
    virtual const SubBlockTimes* timings() const { return nullptr; }  // per-sub-block wall time, or null
    virtual std::string step_extras(double /*ms*/, long /*tokens*/) const { return ""; } // more step-line fields
    virtual void print_memory() const = 0;
    // This rank's communication over the run, for the merged data-parallel profile (llmc/profiler/distributed.h):
    // by default the communicator's own collectives; a backend whose collectives the communicator does not time
    // (queued on a GPU stream) reports them itself.
    virtual CommStats comm_stats(const Communicator& comm) const { return comm.stats(); }
    virtual Link link() const { return {}; } // the link those collectives cross
    // Choices of this rank that a resumed run must repeat to continue bitwise and that the checkpoint's model and
    // state do not hold (the GPU's timed cuBLASLt algorithms): written beside each checkpoint, read on resume
    // (`path` may not exist: a checkpoint written without them). Nothing by default.
    virtual void save_run_choices(const std::string& /*path*/) const {}
    virtual void load_run_choices(const std::string& /*path*/) {}
};

// Batches of another shape than the backend's TrainShape: Error (the two are built from one plan and must agree).
void check_batch_shape(const TokenBatches& batches, const TrainShape& shape);

using BackendFactory = std::unique_ptr<TrainBackend> (*)(const GPT2Config&, const TrainShape&, Communicator&);
struct RunPlan;

// One training program: its name (--help, messages), its defaults and backend, and what only some programs do.
struct TrainProgram {
    const char* name;
    TrainOptions defaults;
    BackendFactory make_backend;
    // --memory-plan: prints the plan of the model the run would train (model.cfg: -e's, or with -y 1 the
    // checkpoint's; model.opt: the flags) with the optimizer state split `shards` ways (-z 1: one shard per rank),
    // and returns the exit code; null: the program refuses the flag.
    int (*memory_plan)(const RunPlan& model, int shards) = nullptr;
    // After the flags, before anything is planned: throws when the program cannot run here (no GPU); null: it
    // always can.
    void (*check_device)() = nullptr;
    // The samples (-s, -g): the program's inference backend (llmc/infer/driver.h), a KV-cache decoder made for
    // each sample from the trained weights; null: no samples.
    InferBackendFactory make_sampler = nullptr;
    // --cuda-graph 1 is the program's (a GPU program); false: refused.
    bool cuda_graphs = false;
};

// The whole run of a trainer: returns the exit code (errors are thrown, for main_guard).
int run_training(const TrainProgram& program, int argc, char** argv);
// The same as one process over `comm` (a test's single_process_communicator(): no MPI, whatever the build).
int run_training(Communicator& comm, const TrainProgram& program, int argc, char** argv);

struct RunPlan;

/*
 * The step loop of a run its program has planned and started itself (profile_gpt2cu): steps 1..plan.max_steps of
 * `be`, already holding its weights, on `batches` (plan.train is not read), each bracketed by `profile` (the
 * program's own session; may be null) and printed as run_training prints it; then the session's outcome. plan.opt's
 * val loss, samples and checkpoints must be off (-v 0 -s 0 -n 0, no -o) and plan.world 1. Errors are thrown, for
 * main_guard.
 */
void run_steps(const char* program, RunPlan& plan, TrainBackend& be, Communicator& comm, TokenBatches& batches,
               prof::ProfileSession* profile);

// The TrainShape of a plan's options (its -b, -t, AdamW flags and -z).
TrainShape train_shape(const TrainOptions& opt);

} // namespace llmc
