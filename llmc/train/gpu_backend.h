/*
 * The GPU trainer's TrainBackend (llmc/train/loop.h): bf16 GPT2GPU (llmc/gpt2.cuh), NCCL data parallelism where
 * the build has it (llmc/train/dist_nccl.cuh), CUPTI tracing with --profile; and train_gpt2cu's --memory-plan.
 * train_gpt2cu and profile_gpt2cu both train through it. Compiled once (gpu_backend.cu), so that a program's own
 * translation unit does not compile the model's kernels.
 */
#pragma once
#include <memory>

#include "llmc/cli.h"
#include "llmc/gpt2_config.h"
#include "llmc/train/dist.h"
#include "llmc/train/loop.h"

namespace llmc {

struct MemoryPlan;

// The GPU backend with the hooks profile_gpt2cu drives beyond the TrainBackend interface.
class GpuTrainBackend : public TrainBackend {
public:
    // The program's own profile session in place of --profile's, made once the model is allocated (its context
    // holds memory_plan()); the backend owns it from here on and profile_session() returns it.
    virtual void set_profile_session(std::unique_ptr<prof::ProfileSession> session) = 0;
    virtual const MemoryPlan& memory_plan() const = 0; // every allocation of the model, as made
    // Gives the model's device memory back (profile_gpt2cu measures its ceilings at the end of the run, before the
    // profile is written): profile_session() is the only call left to make.
    virtual void free_model() = 0;
};

// One data-parallel rank's backend on its GPU (chosen by local rank).
std::unique_ptr<GpuTrainBackend> make_gpu_train_backend(const GPT2Config& c, const TrainOptions& opt,
                                                        Communicator& comm);
// The same as a BackendFactory.
std::unique_ptr<TrainBackend> make_gpu_backend(const GPT2Config& c, const TrainOptions& opt, Communicator& comm);

/*
 * train_gpt2cu: this backend, llm.c's defaults (GPT-2 124M, B=4, T=1024), a GPU required; and --memory-plan, answered
 * without one: the plan of every allocation of `cfg` at -b and -t with the optimizer state in `shards`, its
 * analysis, and the largest micro-batch at this T whose plan fits --device-memory (or the present GPU's free memory).
 */
TrainProgram gpu_train_program();

} // namespace llmc
