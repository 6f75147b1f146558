/*
 * infer_gpt2cu's backend (llmc/infer/driver.h): the bf16 KV-cache decoder (llmc/gpt2_decoder.cuh), tokens chosen
 * on the GPU (llmc/sample.cuh) so that only their ids cross to the host; --profile traces the run in-process with
 * CUPTI (llmc/profiler/gpu_session.h). Compiled by nvcc (gpu_backend.cu); declared here for the program.
 */
#pragma once
#include <memory>

#include "llmc/infer/driver.h"

namespace llmc {

std::unique_ptr<InferBackend> make_gpu_infer_backend(const GPT2Config& c, int B, int longest, int max_len);

// --memory-plan: the decoder's allocations for these flags (-e, -b, the prompt length, -n), and the largest -b
// whose plan fits --device-memory (or the present GPU's free memory); no GPU, no weights needed.
int print_gpu_memory_plan(const InferOptions& opt);

// A usable GPU, else an Error that names infer_gpt2 as the CPU's alternative.
void require_inference_gpu();

} // namespace llmc
