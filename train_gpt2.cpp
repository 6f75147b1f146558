/*
 * train_gpt2: the CPU fp32 reference trainer. Same flags, files and loop as the GPU trainer
 * (llmc/train/loop.h); slow, but every GPU result is checked against it, and its per-sub-block timings are
 * the CPU half of CPU-vs-GPU profiles. With --profile DIR the sub-block executions of a window of steps are
 * recorded and written as a profile directory in the GPU profiler's format (llmc/profiler/cpu_source.h).
 * The model and its backend are llmc/cpu/gpt2.h and llmc/cpu/train_backend.cpp.
 *
 *   ./train_gpt2 -i data/tinyshakespeare -e d4 -b 4 -t 64 -x 200
 */
#include "llmc/cpu/programs.h"

int main(int argc, char** argv) {
    return llmc::main_guard([&] { return llmc::run_training(llmc::cpu_train_program(), argc, argv); });
}
