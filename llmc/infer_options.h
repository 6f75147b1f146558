/*
 * The inference programs' command line (infer_gpt2 and infer_gpt2cu take the same flags; doc/flags.md).
 * A bad flag or value throws UsageError naming the flag; the programs print it on one line and exit 2.
 */
#pragma once
#include <string>
#include <vector>

#include "llmc/cli.h"
#include "llmc/utils.h"

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
    bool help = false;              // -h
};

inline std::string infer_usage(const char* program) {
    InferOptions d;
    return strprintf(
        "usage: %s [options]\n"
        "  -e, --model dN|FILE        random model dN (seeded by --seed) or an llm.c model file [%s]\n"
        "  -p, --prompt TEXT          one prompt as text (GPT-2's encoder.json and vocab.bpe from\n"
        "                             $GPT2_VOCAB_DIR, else the repository's dev/data/gpt2)\n"
        "      --prompt-file FILE     one prompt per line\n"
        "      --prompt-ids LIST      one prompt as token ids, \"1,2,3\"\n"
        "      --prompt-len N         one synthetic prompt of N random token ids per sequence\n"
        "                             (without a prompt flag: the prompt is <|endoftext|>)\n"
        "  -b, --batch N              sequences run together (at most 65535); prompts are cycled to fill them\n"
        "                             [number of prompts]\n"
        "  -n, --new-tokens N         tokens generated per sequence [%d]\n"
        "      --temperature X        sampling temperature, 0 = greedy [%g]\n"
        "      --top-k N              sample from the N most likely tokens, 0 = all [%d]\n"
        "      --seed N               seed for the random model, synthetic prompts and sampling [%llu]\n"
        "      --stop-eot             stop a sequence at <|endoftext|>\n"
        "      --json                 one JSON object per sequence and a summary object, one per line\n"
        "      --profile DIR          profile prefill and decode, write the profile to DIR [off]\n"
        "      --memory-plan          GPU program: print the memory plan (weights, activations, KV cache) and\n"
        "                             the largest -b that fits, then exit (no GPU needed; prompt length from\n"
        "                             --prompt-len or --prompt-ids)\n"
        "      --device-memory SIZE   with --memory-plan: device memory to plan for, e.g. 80GiB, 40GB, 512MiB\n"
        "                             or bytes [the GPU's free memory]\n"
        "  -h, --help                 this help\n",
        program, d.model.c_str(), d.new_tokens, d.temperature, d.top_k, d.seed);
}

// "1,2,3" -> {1, 2, 3}; ids are checked against the model's vocabulary later, when it is known.
inline std::vector<int> parse_id_list(const std::string& flag, const std::string& v) {
    std::vector<int> ids;
    size_t pos = 0;
    while (pos <= v.size()) {
        size_t comma = std::min(v.find(',', pos), v.size());
        ids.push_back((int)detail::parse_long(flag, v.substr(pos, comma - pos), 0, 2147483647));
        pos = comma + 1;
    }
    return ids;
}

// Throws UsageError (exit 2) on anything it does not understand.
inline InferOptions parse_infer_options(int argc, char** argv) {
    using detail::parse_float;
    using detail::parse_long;
    constexpr long IMAX = 2147483647;
    InferOptions opt;
    int prompt_flags = 0;
    for (int i = 1; i < argc; i++) {
        detail::Arg a = detail::split_arg(argv[i]);
        const std::string& flag = a.flag;
        if (flag == "-h" || flag == "--help") detail::no_value(a), opt.help = true;
        else if (flag == "--stop-eot") detail::no_value(a), opt.stop_eot = true;
        else if (flag == "--json") detail::no_value(a), opt.json = true;
        else if (flag == "--memory-plan") detail::no_value(a), opt.memory_plan = true;
        else {
            static const char* table[][2] = {{"-e", "--model"},        {"-p", "--prompt"},   {"--prompt-file", ""},
                                             {"--prompt-ids", ""},     {"--prompt-len", ""}, {"-b", "--batch"},
                                             {"-n", "--new-tokens"},   {"--temperature", ""}, {"--top-k", ""},
                                             {"--seed", ""},           {"--profile", ""},     {"--device-memory", ""}};
            const char* key = nullptr;
            for (auto& row : table)
                if (flag == row[0] || (*row[1] && flag == row[1])) key = row[0];
            if (!key) throw UsageError(strprintf("unknown flag '%s' (see --help)", flag.c_str()));
            const std::string value = detail::take_value(a, argc, argv, i);
            const std::string k = key;
            if (k == "-e") opt.model = value;
            else if (k == "-p") {
                if (value.empty()) throw UsageError("-p: empty prompt");
                opt.prompt_text = value, prompt_flags++;
            }
            else if (k == "--prompt-file") {
                if (value.empty()) throw UsageError("--prompt-file: empty path");
                opt.prompt_file = value, prompt_flags++;
            }
            else if (k == "--prompt-ids") opt.prompt_ids = parse_id_list(flag, value), prompt_flags++;
            else if (k == "--prompt-len") opt.prompt_len = (int)parse_long(flag, value, 1, IMAX), prompt_flags++;
            else if (k == "-b") opt.B = (int)parse_long(flag, value, 1, kMaxInferBatch);
            else if (k == "-n") opt.new_tokens = (int)parse_long(flag, value, 1, IMAX);
            else if (k == "--temperature") opt.temperature = parse_float(flag, value, 0.0f, 100.0f);
            else if (k == "--top-k") opt.top_k = (int)parse_long(flag, value, 0, IMAX);
            else if (k == "--seed") opt.seed = (unsigned long long)parse_long(flag, value, 0, IMAX);
            else if (k == "--profile") {
                if (value.empty()) throw UsageError("--profile: empty directory name");
                opt.profile_dir = value;
            }
            else if (k == "--device-memory") opt.device_memory = detail::parse_bytes(flag, value);
        }
    }
    if (prompt_flags > 1)
        throw UsageError("-p: give one of -p, --prompt-file, --prompt-ids and --prompt-len, not several");
    if (opt.device_memory && !opt.memory_plan) throw UsageError("--device-memory: only with --memory-plan");
    if (opt.memory_plan && (!opt.prompt_text.empty() || !opt.prompt_file.empty()))
        throw UsageError("--memory-plan: give the prompt length with --prompt-len N (or --prompt-ids), not as text");
    return opt;
}

} // namespace llmc
