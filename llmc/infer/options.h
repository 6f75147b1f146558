/*
 * The inference programs' command line (infer_gpt2 and infer_gpt2cu take the same flags; doc/flags.md), one
 * flag table (llmc/util/flags.h) in llmc/infer/options.cpp.
 * A bad flag or value throws UsageError naming the flag; the programs print it on one line and exit 2.
 */
#pragma once
#include <string>
#include <vector>

#include "llmc/util/flags.h"

namespace llmc {

// What running out of host memory suggests to change (main_guard), in the inference programs' own flags.
constexpr const char* kInferOomHint = "try a smaller -b, -n, prompt or model";

// Sequences run together at most: the GPU decode attention puts them on a grid dimension of at most 65535
// blocks; both programs take the same limit.
constexpr int kMaxInferBatch = 65535;

struct InferOptions {
    std::string model = "d12";      // -e: dN or a model file
    std::string prompt_text;        // -p
    std::string prompt_file;        // --prompt-file: one prompt per line
    std::vector<int> prompt_ids;    // --prompt-ids "1,2,3"
    int prompt_len = 0;             // --prompt-len: synthetic prompts of this many random ids (0 = off)
    int B = 0;                      // -b (0 = as many as there are prompts)
    int new_tokens = 64;            // -n
    float temperature = 1.0f;       // --temperature (0 = greedy)
    int top_k = 0;                  // --top-k (0 = all)
    unsigned long long seed = 1337; // --seed: random model, synthetic prompts, sampling
    bool stop_eot = false;          // --stop-eot
    bool json = false;              // --json
    std::string profile_dir;        // --profile ("" = off)
    bool memory_plan = false;       // --memory-plan: print the GPU memory plan and exit
    size_t device_memory = 0;       // --device-memory (0 = the present GPU's free memory)
    bool cuda_graph = false;        // --cuda-graph: decode steps as CUDA graph launches (GPU; its default is 1)
    bool help = false;              // -h
};

// argv over the program's defaults; throws UsageError (exit 2) on anything it does not understand.
InferOptions parse_infer_options(int argc, char** argv, InferOptions defaults = {});
// --help, with the program's defaults.
std::string infer_usage(const char* program, const InferOptions& defaults = {});

} // namespace llmc
