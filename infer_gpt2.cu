/*
 * infer_gpt2cu: GPT-2 text generation on the GPU in bf16 with a KV cache: the prompts of all B sequences go through
 * the model together (prefill), then one token per sequence per step (decode). Same flags, output and driver as
 * infer_gpt2 (llmc/infer/driver.h, doc/flags.md); the backend is llmc/gpu/gpt2_decoder.cu, and --memory-plan
 * answers without a GPU.
 *
 *   ./infer_gpt2cu -e d12 --prompt-len 128 -n 128 -b 8 --temperature 0
 *   ./infer_gpt2cu -e d12 --prompt-len 128 -n 128 -b 8 --temperature 0 --profile prof_infer
 */
#include "llmc/gpu/programs.h"

int main(int argc, char** argv) {
    return llmc::main_guard([&] { return llmc::run_inference(llmc::gpu_infer_program(), argc, argv); },
                            llmc::kInferOomHint);
}
