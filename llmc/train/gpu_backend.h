/*
 * The GPU trainer's TrainBackend (llmc/train/loop.h): bf16 GPT2GPU (llmc/gpt2.cuh), NCCL data parallelism where
 * the build has it (llmc/train/dist_nccl.cuh), CUPTI tracing with --profile; and train_gpt2cu's --memory-plan.
 * Compiled once (gpu_backend.cu), so that a program's own translation unit does not compile the model's kernels.
 */
#pragma once
#include <memory>

#include "llmc/cli.h"
#include "llmc/gpt2_config.h"
#include "llmc/train/dist.h"
#include "llmc/train/loop.h"

namespace llmc {

// One data-parallel rank's backend on its GPU (chosen by local rank); a BackendFactory.
std::unique_ptr<TrainBackend> make_gpu_backend(const GPT2Config& c, const TrainOptions& opt, Communicator& comm);

// --memory-plan: the plan of every allocation for these flags (-e, -b, -t), its analysis, and the largest
// micro-batch at this T whose plan fits --device-memory (or the present GPU's free memory); no GPU needed.
int print_memory_plan(const TrainOptions& opt);

} // namespace llmc
