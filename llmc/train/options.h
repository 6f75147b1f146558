/*
 * Command line shared by train_gpt2 (CPU) and train_gpt2cu (GPU): llm.c's short flags, each with a long
 * alias, in one flag table (llmc/util/flags.h; the table is in llmc/train/options.cpp). Every flag but -h and --memory-plan
 * takes a value ("-x 10", "--max-steps 10" or "--max-steps=10"). A bad flag or value throws UsageError naming
 * the flag; programs print it on one line and exit 2.
 */
#pragma once
#include <string>

#include "llmc/util/flags.h"
#include "llmc/model/optimizer.h"
#include "llmc/train/schedulers.h"
#include "llmc/util/utils.h"

namespace llmc {

struct TrainOptions {
    std::string train_data = "data/tinyshakespeare"; // -i
    std::string val_data;                            // -j ("" = *val*.bin beside -i)
    std::string model = "d12";                        // -e
    bool model_given = false;                         // -e was on the command line (a resume checks it)
    std::string output_dir;                           // -o ("" = no log, no checkpoints)
    int B = 4;                                        // -b
    int T = 1024;                                     // -t
    long total_batch = -1;                            // -d (tokens; -1 = B*T, no accumulation)
    int grad_accum = 1;                               // micro-batches per step: total_batch / (B*T), from -d
    float lr = 3e-4f;                                 // -l
    int warmup = 0;                                   // -u
    float final_lr_frac = 1.0f;                       // -q
    Schedule schedule = Schedule::cosine;             // -k
    AdamWConfig adam;                                 // -c (weight decay), --beta1, --beta2, --eps, --grad-clip
    int max_steps = -1;                               // -x (-1 = one epoch of the train data)
    int val_every = 20;                               // -v
    int val_batches = 20;                             // -m
    int sample_every = 20;                            // -s
    int gen_tokens = 64;                              // -g
    int checkpoint_every = 0;                         // -n
    bool resume = false;                              // -y
    bool overfit = false;                             // -a
    int zero_stage = 0;                               // -z: 1 = shard the optimizer across data-parallel ranks
    unsigned long long seed = 1337;                   // --seed: init and sampling
    float temperature = 1.0f;                         // --temperature
    int top_k = 0;                                    // --top-k
    std::string profile_dir;                          // --profile ("" = off)
    int profile_start = 6;                            // --profile-start: first profiled step, numbered as the
                                                      // step lines number them (from 1)
    int profile_steps = 5;                            // --profile-steps
    bool energy = false;                              // --energy: joules per sub-block after the window
    float energy_seconds = 60;                        // --energy-seconds
    bool memory_plan = false;                         // --memory-plan: print the GPU memory plan and exit
    size_t device_memory = 0;                         // --device-memory (0 = the present GPU's free memory)
    bool cuda_graph = false;                          // --cuda-graph: micro-steps and updates as CUDA graphs (GPU)
    bool help = false;                                // -h
};

// argv over the program's defaults, checked (-d against B*T, -y and -n against -o, --device-memory); throws
// UsageError on anything it does not understand.
TrainOptions parse_train_options(int argc, char** argv, TrainOptions defaults);
// --help, with the program's defaults.
std::string usage(const char* program, const TrainOptions& defaults);

} // namespace llmc
