/*
 * infer_gpt2: GPT-2 text generation on the CPU in fp32 with a KV cache: the prompts of all B sequences go through
 * the model together (prefill), then one token per sequence per step (decode). Same flags, output and driver as
 * infer_gpt2cu (llmc/infer/driver.h, doc/flags.md); the backend is llmc/cpu/infer_backend.cpp.
 *
 *   ./infer_gpt2 -e d4 -p "To be or not" -n 32 --temperature 0 --json
 */
#include "llmc/cpu/programs.h"

int main(int argc, char** argv) {
    return llmc::main_guard([&] { return llmc::run_inference(llmc::cpu_infer_program(), argc, argv); },
                            llmc::kInferOomHint);
}
