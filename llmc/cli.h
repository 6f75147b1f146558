/*
 * Command line shared by train_gpt2 (CPU) and train_gpt2cu (GPU): llm.c's short flags, each with a long
 * alias. Every flag but -h and --memory-plan takes a value ("-x 10", "--max-steps 10" or "--max-steps=10").
 * A bad flag or value throws UsageError naming the flag; programs print it on one line and exit 2.
 */
#pragma once
#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "llmc/optimizer.h"
#include "llmc/schedulers.h"
#include "llmc/utils.h"

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
    bool memory_plan = false;                         // --memory-plan: print the GPU memory plan and exit
    size_t device_memory = 0;                         // --device-memory (0 = the present GPU's free memory)
    bool help = false;                                // -h
};

inline std::string usage(const char* program, const TrainOptions& d) {
    return strprintf(
               "usage: %s [options]\n"
               "  -i, --input DIR|GLOB|FILE  train shards (a directory's *train*.bin) [%s]\n"
               "  -j, --val DIR|GLOB|FILE    val shards [*val*.bin beside -i]\n"
               "  -e, --model dN|FILE        d12/d24/d36/d48 = GPT-2 124M/350M/774M/1558M, other dN: L=N C=64N NH=N,\n"
               "                             or an llm.c model file (fp32 or bf16) [%s]\n"
               "  -o, --output DIR           log and checkpoints [none]\n",
               program, d.train_data.c_str(), d.model.c_str()) +
           strprintf("  -b, --batch N              micro-batch size [%d]\n"
                     "  -t, --seq-len N            sequence length [%d]\n"
                     "  -d, --total-batch N        tokens per step over all ranks, a multiple of B*T*ranks [B*T]\n"
                     "  -l, --lr X                 learning rate [%g]\n"
                     "  -u, --warmup N             warmup steps [%d]\n"
                     "  -q, --final-lr-frac X      final LR as a fraction of -l [%g]\n"
                     "  -k, --scheduler NAME       cosine | linear | constant [%s]\n"
                     "  -c, --weight-decay X       AdamW weight decay [%g]\n",
                     d.B, d.T, d.lr, d.warmup, d.final_lr_frac, schedule_name(d.schedule), d.adam.weight_decay) +
           strprintf("      --beta1 X              AdamW first-moment decay [%g]\n"
                     "      --beta2 X              AdamW second-moment decay [%g]\n"
                     "      --eps X                AdamW epsilon [%g]\n"
                     "      --grad-clip X          clip the global gradient norm to X, 0 = no clipping [%g]\n",
                     d.adam.beta1, d.adam.beta2, d.adam.eps, d.adam.grad_clip) +
           strprintf("  -x, --max-steps N          steps to train [-1 = one epoch]\n"
                     "  -v, --val-every N          val loss every N steps, 0 = never [%d]\n"
                     "  -m, --val-batches N        batches per val loss [%d]\n"
                     "  -s, --sample-every N       sample every N steps, 0 = never [%d]\n"
                     "  -g, --gen-tokens N         tokens per sample [%d]\n"
                     "  -n, --checkpoint-every N   checkpoint into -o every N steps and at the end, 0 = never [%d]\n"
                     "  -y, --resume 0|1           resume from the latest checkpoint in -o [0]\n"
                     "  -a, --overfit 0|1          every step uses the first batch of the first shard [0]\n"
                     "  -z, --zero 0|1             under mpirun: 1 = shard AdamW state across ranks (ZeRO-1) [0]\n"
                     "      --seed N               seed for init and sampling [%llu]\n"
                     "      --temperature X        sampling temperature [%g]\n"
                     "      --top-k N              sample from the N most likely tokens, 0 = all [%d]\n",
                     d.val_every, d.val_batches, d.sample_every, d.gen_tokens, d.checkpoint_every, d.seed,
                     d.temperature, d.top_k) +
           strprintf("      --profile DIR          profile a window of steps (GPU: CUPTI), write the profile to DIR [off]\n"
                     "      --profile-start N      first profiled step, as the step lines number them (from 1) [%d]\n"
                     "      --profile-steps N      profiled steps [%d]\n"
                     "      --memory-plan          GPU trainer: print the memory plan for these flags and the largest\n"
                     "                             micro-batch that fits, then exit (no GPU needed)\n"
                     "      --device-memory SIZE   with --memory-plan: device memory to plan for, e.g. 80GiB, 40GB,\n"
                     "                             512MiB or bytes [the GPU's free memory]\n"
                     "  -h, --help                 this help\n",
                     d.profile_start, d.profile_steps);
}

namespace detail {
inline long parse_long(const std::string& flag, const std::string& v, long lo, long hi) {
    errno = 0;
    char* end = nullptr;
    long x = strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || x < lo || x > hi)
        throw UsageError(strprintf("%s: expected an integer in [%ld, %ld], got '%s'", flag.c_str(), lo, hi, v.c_str()));
    return x;
}
inline float parse_float(const std::string& flag, const std::string& v, float lo, float hi) {
    char* end = nullptr;
    float x = strtof(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi)) // NaN and infinities fail the (finite) range too
        throw UsageError(strprintf("%s: expected a number in [%g, %g], got '%s'", flag.c_str(), lo, hi, v.c_str()));
    return x;
}
// One command-line argument: "--flag=value" carries its value; otherwise the value, if the flag takes one,
// is the next argument (take_value).
struct Arg {
    std::string flag, value;
    bool has_value = false;
};
inline Arg split_arg(const std::string& arg) {
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) return {arg.substr(0, eq), arg.substr(eq + 1), true};
    return {arg, "", false};
}
inline const std::string& take_value(Arg& a, int argc, char** argv, int& i) {
    if (!a.has_value) {
        if (i + 1 >= argc) throw UsageError(strprintf("%s: missing value", a.flag.c_str()));
        a.value = argv[++i];
        a.has_value = true;
    }
    return a.value;
}
// "80GiB", "40GB", "512MiB", "1.5TiB" or plain bytes: a positive size in bytes.
inline size_t parse_bytes(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const double x = strtod(v.c_str(), &end);
    const std::string unit = end ? std::string(end) : "";
    static const std::pair<const char*, double> units[] = {
        {"", 1.0},      {"B", 1.0},          {"KB", 1e3},         {"MB", 1e6},         {"GB", 1e9},
        {"TB", 1e12},   {"KiB", 1024.0},     {"MiB", 1048576.0},  {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (const auto& [name, scale] : units)
        if (unit == name && end != v.c_str() && x > 0 && x * scale < 1.8e19 && x * scale >= 1)
            return (size_t)(x * scale);
    throw UsageError(strprintf("%s: expected a size such as 80GiB, 40GB, 512MiB or a number of bytes, got '%s'",
                               flag.c_str(), v.c_str()));
}
// A switch (--json, --help, ...) takes no value: "--json=0" would read as "on" to whoever wrote it as "off".
inline void no_value(const Arg& a) {
    if (a.has_value) throw UsageError(strprintf("%s: a switch, takes no value", a.flag.c_str()));
}
} // namespace detail

// Parses argv over the program's defaults `opt`. Throws UsageError on anything it does not understand.
inline TrainOptions parse_train_options(int argc, char** argv, TrainOptions opt) {
    using detail::parse_float;
    using detail::parse_long;
    constexpr long IMAX = 2147483647;
    for (int i = 1; i < argc; i++) {
        detail::Arg a = detail::split_arg(argv[i]);
        const std::string& flag = a.flag;
        if (flag == "-h" || flag == "--help") {
            detail::no_value(a);
            opt.help = true;
            continue;
        }
        if (flag == "--memory-plan") {
            detail::no_value(a);
            opt.memory_plan = true;
            continue;
        }
        static const char* table[][2] = {
            {"-i", "--input"},        {"-j", "--val"},          {"-e", "--model"},           {"-o", "--output"},
            {"-b", "--batch"},        {"-t", "--seq-len"},      {"-d", "--total-batch"},     {"-l", "--lr"},
            {"-u", "--warmup"},       {"-q", "--final-lr-frac"}, {"-k", "--scheduler"},      {"-c", "--weight-decay"},
            {"-x", "--max-steps"},    {"-v", "--val-every"},    {"-m", "--val-batches"},     {"-s", "--sample-every"},
            {"-g", "--gen-tokens"},   {"-n", "--checkpoint-every"}, {"-y", "--resume"},      {"-a", "--overfit"},
            {"-z", "--zero"},
            {"--seed", "--seed"},     {"--temperature", "--temperature"}, {"--top-k", "--top-k"},
            {"--beta1", "--beta1"},   {"--beta2", "--beta2"},   {"--eps", "--eps"},          {"--grad-clip", "--grad-clip"},
            {"--profile", "--profile"}, {"--profile-start", "--profile-start"}, {"--profile-steps", "--profile-steps"},
            {"--device-memory", "--device-memory"}};
        const char* key = nullptr;
        for (auto& row : table)
            if (flag == row[0] || flag == row[1]) key = row[0];
        if (!key) throw UsageError(strprintf("unknown flag '%s' (see --help)", flag.c_str()));
        const std::string value = detail::take_value(a, argc, argv, i);
        std::string k = key;
        if (k == "-i") opt.train_data = value;
        else if (k == "-j") opt.val_data = value;
        else if (k == "-e") opt.model = value, opt.model_given = true;
        else if (k == "-o") opt.output_dir = value;
        else if (k == "-b") opt.B = (int)parse_long(flag, value, 1, IMAX);
        else if (k == "-t") opt.T = (int)parse_long(flag, value, 1, IMAX);
        else if (k == "-d") opt.total_batch = parse_long(flag, value, -1, (long)1 << 40);
        else if (k == "-l") opt.lr = parse_float(flag, value, 0.0f, 10.0f);
        else if (k == "-u") opt.warmup = (int)parse_long(flag, value, 0, IMAX);
        else if (k == "-q") opt.final_lr_frac = parse_float(flag, value, 0.0f, 1.0f);
        else if (k == "-k") opt.schedule = parse_schedule(value);
        else if (k == "-c") opt.adam.weight_decay = parse_float(flag, value, 0.0f, 10.0f);
        // Decays in [0, 1): at 1 the moment never moves and the bias correction divides by zero.
        else if (k == "--beta1") opt.adam.beta1 = parse_float(flag, value, 0.0f, 0.999999f);
        else if (k == "--beta2") opt.adam.beta2 = parse_float(flag, value, 0.0f, 0.999999f);
        else if (k == "--eps") opt.adam.eps = parse_float(flag, value, 1e-30f, 1.0f);
        else if (k == "--grad-clip") opt.adam.grad_clip = parse_float(flag, value, 0.0f, 1e30f);
        else if (k == "-x") opt.max_steps = (int)parse_long(flag, value, -1, IMAX);
        else if (k == "-v") opt.val_every = (int)parse_long(flag, value, 0, IMAX);
        else if (k == "-m") opt.val_batches = (int)parse_long(flag, value, 1, IMAX);
        else if (k == "-s") opt.sample_every = (int)parse_long(flag, value, 0, IMAX);
        else if (k == "-g") opt.gen_tokens = (int)parse_long(flag, value, 1, IMAX);
        else if (k == "-n") opt.checkpoint_every = (int)parse_long(flag, value, 0, IMAX);
        else if (k == "-y") opt.resume = parse_long(flag, value, 0, 1) != 0;
        else if (k == "-a") opt.overfit = parse_long(flag, value, 0, 1) != 0;
        else if (k == "-z") opt.zero_stage = (int)parse_long(flag, value, 0, 1);
        else if (k == "--seed") opt.seed = (unsigned long long)parse_long(flag, value, 0, IMAX);
        else if (k == "--temperature") opt.temperature = parse_float(flag, value, 1e-3f, 100.0f);
        else if (k == "--top-k") opt.top_k = (int)parse_long(flag, value, 0, IMAX);
        else if (k == "--profile") opt.profile_dir = value;
        else if (k == "--profile-start") opt.profile_start = (int)parse_long(flag, value, 1, IMAX);
        else if (k == "--profile-steps") opt.profile_steps = (int)parse_long(flag, value, 1, IMAX);
        else if (k == "--device-memory") opt.device_memory = detail::parse_bytes(flag, value);
    }
    if (opt.device_memory && !opt.memory_plan) throw UsageError("--device-memory: only with --memory-plan");
    const long BT = (long)opt.B * opt.T; // both <= 2^31 - 1: no overflow
    if (opt.total_batch == -1) opt.total_batch = BT;
    if (opt.total_batch <= 0 || opt.total_batch % BT != 0)
        throw UsageError(strprintf("-d: total batch %ld tokens is not a positive multiple of B*T = %ld",
                                   opt.total_batch, BT));
    if (opt.total_batch / BT > IMAX)
        throw UsageError(strprintf("-d: total batch %ld tokens is %ld micro-batches of B*T = %ld, more than %ld",
                                   opt.total_batch, opt.total_batch / BT, BT, IMAX));
    opt.grad_accum = (int)(opt.total_batch / BT);
    if ((long)opt.profile_start - 1 + opt.profile_steps > IMAX)
        throw UsageError(strprintf("--profile-start: the window of %d steps from step %d ends past step %ld",
                                   opt.profile_steps, opt.profile_start, IMAX));
    if (opt.resume && opt.output_dir.empty()) throw UsageError("-y: resuming needs an output directory (-o)");
    if (opt.checkpoint_every > 0 && opt.output_dir.empty())
        throw UsageError("-n: checkpoints need an output directory (-o)");
    return opt;
}

} // namespace llmc
