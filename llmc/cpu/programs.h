/*
 * The CPU programs' contracts with their drivers, each a backend over the fp32 reference model and what only it
 * does: train_gpt2's TrainProgram (llmc/train/loop.h; the backend in llmc/cpu/train_backend.cpp: GPT2CPU and
 * AdamW, T=64 by default as llm.c's CPU reference, no --memory-plan) and infer_gpt2's InferProgram
 * (llmc/infer/driver.h; llmc/cpu/infer_backend.cpp: the KV-cache decoder of llmc/cpu/gpt2_decoder.h, tokens
 * chosen by pick_token). Both run anywhere.
 */
#pragma once
#include "llmc/infer/driver.h"
#include "llmc/train/loop.h"

namespace llmc {

TrainProgram cpu_train_program();
InferProgram cpu_infer_program();

} // namespace llmc
