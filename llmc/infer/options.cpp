// The inference programs' flag table and the checks that tie its flags together (llmc/infer/options.h).
#include "llmc/infer/options.h"

#include <algorithm>

#include "llmc/util/utils.h"

namespace llmc {

namespace {

// "1,2,3" -> {1, 2, 3}; ids are checked against the model's vocabulary later, when it is known.
std::vector<int> parse_id_list(const std::string& flag, const std::string& v) {
    std::vector<int> ids;
    size_t pos = 0;
    while (pos <= v.size()) {
        size_t comma = std::min(v.find(',', pos), v.size());
        ids.push_back((int)parse_long_flag(flag, v.substr(pos, comma - pos), 0, IMAX));
        pos = comma + 1;
    }
    return ids;
}

// A value --help does not show (its default means "off").
FlagValue hidden(FlagValue v) {
    v.show = nullptr;
    return v;
}

// The prompt flags exclude each other: each one given is recorded, as written.
FlagValue counted(FlagValue v, std::vector<std::string>& given) {
    auto set = v.set;
    v.set = [set, &given](const std::string& f, const std::string& value) {
        set(f, value);
        given.push_back(f);
    };
    return v;
}

void add_model_and_prompts(FlagTable& t, InferOptions& o, std::vector<std::string>& prompt_flags) {
    t.add({"-e", "--model", "dN|FILE", "random model dN (seeded by --seed) or an llm.c model file",
           flag::text(o.model)});
    t.add({"-p", "--prompt", "TEXT",
           "one prompt as text (GPT-2's encoder.json and vocab.bpe from\n"
           "$GPT2_VOCAB_DIR, else the repository's dev/data/gpt2)",
           counted(flag::text(o.prompt_text, "empty prompt"), prompt_flags)});
    t.add({"", "--prompt-file", "FILE", "one prompt per line",
           counted(flag::text(o.prompt_file, "empty path"), prompt_flags)});
    t.add({"", "--prompt-ids", "LIST", "one prompt as token ids, \"1,2,3\"",
           counted(flag::custom(o.prompt_ids, parse_id_list, [](const std::vector<int>&) { return std::string(); }),
                   prompt_flags)});
    t.add({"", "--prompt-len", "N",
           "one synthetic prompt of N random token ids per sequence\n"
           "(without a prompt flag: the prompt is <|endoftext|>)",
           hidden(counted(flag::integer(o.prompt_len, 1, IMAX), prompt_flags))});
}

void add_generation(FlagTable& t, InferOptions& o) {
    t.add({"-b", "--batch", "N",
           "sequences run together (at most 65535); prompts are cycled to fill them\n",
           flag::integer(o.B, 1, kMaxInferBatch), "number of prompts"});
    t.add({"-n", "--new-tokens", "N", "tokens generated per sequence", flag::integer(o.new_tokens, 1, IMAX)});
    t.add({"", "--temperature", "X", "sampling temperature, 0 = greedy", flag::real(o.temperature, 0.0f, 100.0f)});
    t.add({"", "--top-k", "N", "sample from the N most likely tokens, 0 = all", flag::integer(o.top_k, 0, IMAX)});
    t.add({"", "--seed", "N", "seed for the random model, synthetic prompts and sampling",
           flag::integer(o.seed, 0, IMAX)});
    t.add({"", "--stop-eot", "", "stop a sequence at <|endoftext|>", flag::on(o.stop_eot)});
    t.add({"", "--json", "", "one JSON object per sequence and a summary object, one per line", flag::on(o.json)});
}

void add_profile_and_memory(FlagTable& t, InferOptions& o) {
    t.add({"", "--profile", "DIR", "profile prefill and decode, write the profile to DIR",
           flag::text(o.profile_dir, "empty directory name"), "off"});
    t.add({"", "--memory-plan", "",
           "GPU program: print the memory plan (weights, activations, KV cache) and\n"
           "the largest -b that fits, then exit (no GPU needed; prompt length from\n"
           "--prompt-len or --prompt-ids)",
           flag::on(o.memory_plan)});
    t.add(device_memory_flag(o.device_memory));
    t.add({"", "--cuda-graph", "0|1",
           "GPU program: each decode step, token choice included, as one CUDA\n"
           "graph launch (0: its kernels launched one by one)",
           flag::zero_or_one(o.cuda_graph)});
    t.add(help_flag(o.help));
}

FlagTable infer_flags(const char* program, InferOptions& opt, std::vector<std::string>& prompt_flags) {
    FlagTable t(strprintf("usage: %s [options]", program));
    add_model_and_prompts(t, opt, prompt_flags);
    add_generation(t, opt);
    add_profile_and_memory(t, opt);
    return t;
}

} // namespace

InferOptions parse_infer_options(int argc, char** argv, InferOptions defaults) {
    InferOptions opt = std::move(defaults);
    std::vector<std::string> prompt_flags;
    infer_flags("", opt, prompt_flags).parse(argc, argv);
    if (prompt_flags.size() > 1)
        throw UsageError(strprintf("%s: give one of -p, --prompt-file, --prompt-ids and --prompt-len, not several (%s "
                                   "is given too)", prompt_flags[1].c_str(), prompt_flags[0].c_str()));
    if (opt.device_memory && !opt.memory_plan) throw UsageError("--device-memory: only with --memory-plan");
    if (opt.memory_plan && (!opt.prompt_text.empty() || !opt.prompt_file.empty()))
        throw UsageError("--memory-plan: give the prompt length with --prompt-len N (or --prompt-ids), not as text");
    return opt;
}

std::string infer_usage(const char* program, const InferOptions& defaults) {
    InferOptions d = defaults;
    std::vector<std::string> prompt_flags;
    return infer_flags(program, d, prompt_flags).help();
}

} // namespace llmc
