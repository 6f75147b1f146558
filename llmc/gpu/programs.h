/*
 * The GPU programs' contracts with their drivers, each a backend over the bf16 GPU model and what only it does:
 * train_gpt2cu's TrainProgram (llmc/train/loop.h; the backend in llmc/gpu/gpt2.cu: GPT2GPU, NCCL data parallelism
 * where the build has it, CUPTI with --profile; llm.c's defaults, GPT-2 124M at B=4, T=1024; --memory-plan) and
 * infer_gpt2cu's InferProgram (llmc/infer/driver.h; llmc/gpu/gpt2_decoder.cu: the KV-cache decoder, tokens chosen on
 * the GPU; --memory-plan). Both need a GPU (sm_80 or newer), except for --memory-plan, which answers without one.
 * The backends are compiled once by nvcc, so that a program's own translation unit compiles no model code.
 */
#pragma once
#include "llmc/infer/driver.h"
#include "llmc/train/loop.h"

namespace llmc {

TrainProgram gpu_train_program();
InferProgram gpu_infer_program();

} // namespace llmc
