// The CPU trainer's backend (llmc/train/loop.h): the fp32 reference model (llmc/cpu/gpt2.h) and AdamW.
#pragma once
#include <memory>

#include "llmc/train/loop.h"

namespace llmc {

std::unique_ptr<TrainBackend> make_cpu_backend(const GPT2Config& c, const TrainOptions& opt, Communicator& comm);

// train_gpt2: this backend, T=64 by default (as llm.c's CPU reference), no --memory-plan, runs anywhere.
TrainProgram cpu_train_program();

} // namespace llmc
