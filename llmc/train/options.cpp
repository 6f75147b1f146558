// The trainers' flag table and the checks that tie flags together (llmc/train/options.h).
#include "llmc/train/options.h"

namespace llmc {

namespace {

// A value whose default is "nothing": --help shows `when_empty` until it is set.
FlagValue shown_as(FlagValue v, const char* when_empty) {
    auto show = v.show;
    v.show = [show, when_empty] {
        const std::string s = show();
        return s.empty() ? std::string(when_empty) : s;
    };
    return v;
}

void add_data_and_model(FlagTable& t, TrainOptions& o) {
    t.add({"-i", "--input", "DIR|GLOB|FILE", "train shards (a directory's *train*.bin)", flag::text(o.train_data)});
    t.add({"-j", "--val", "DIR|GLOB|FILE", "val shards", shown_as(flag::text(o.val_data), "*val*.bin beside -i")});
    t.add({"-e", "--model", "dN|FILE",
           "d12/d24/d36/d48 = GPT-2 124M/350M/774M/1558M, other dN: L=N C=64N NH=N,\n"
           "or an llm.c model file (fp32 or bf16)",
           flag::text(o.model)});
    t.add({"-o", "--output", "DIR", "log and checkpoints", shown_as(flag::text(o.output_dir), "none")});
    t.add({"-b", "--batch", "N", "micro-batch size", flag::integer(o.B, 1, IMAX)});
    t.add({"-t", "--seq-len", "N", "sequence length", flag::integer(o.T, 1, IMAX)});
    t.add({"-d", "--total-batch", "N", "tokens per step over all ranks, a multiple of B*T*ranks",
           flag::integer(o.total_batch, -1, (long)1 << 40), "B*T"});
}

void add_optimizer(FlagTable& t, TrainOptions& o) {
    t.add({"-l", "--lr", "X", "learning rate", flag::real(o.lr, 0.0f, 10.0f)});
    t.add({"-u", "--warmup", "N", "warmup steps", flag::integer(o.warmup, 0, IMAX)});
    t.add({"-q", "--final-lr-frac", "X", "final LR as a fraction of -l", flag::real(o.final_lr_frac, 0.0f, 1.0f)});
    t.add({"-k", "--scheduler", "NAME", "cosine | linear | constant",
           flag::custom(
               o.schedule, [](const std::string&, const std::string& v) { return parse_schedule(v); },
               [](Schedule s) { return std::string(schedule_name(s)); })});
    t.add({"-c", "--weight-decay", "X", "AdamW weight decay", flag::real(o.adam.weight_decay, 0.0f, 10.0f)});
    // Decays in [0, 1): at 1 the moment never moves and the bias correction divides by zero.
    t.add({"", "--beta1", "X", "AdamW first-moment decay", flag::real(o.adam.beta1, 0.0f, 0.999999f)});
    t.add({"", "--beta2", "X", "AdamW second-moment decay", flag::real(o.adam.beta2, 0.0f, 0.999999f)});
    t.add({"", "--eps", "X", "AdamW epsilon", flag::real(o.adam.eps, 1e-30f, 1.0f)});
    t.add({"", "--grad-clip", "X", "clip the global gradient norm to X, 0 = no clipping",
           flag::real(o.adam.grad_clip, 0.0f, 1e30f)});
}

void add_run(FlagTable& t, TrainOptions& o) {
    t.add({"-x", "--max-steps", "N", "steps to train", flag::integer(o.max_steps, -1, IMAX), "-1 = one epoch"});
    t.add({"-v", "--val-every", "N", "val loss every N steps, 0 = never", flag::integer(o.val_every, 0, IMAX)});
    t.add({"-m", "--val-batches", "N", "batches per val loss", flag::integer(o.val_batches, 1, IMAX)});
    t.add({"-s", "--sample-every", "N", "sample every N steps, 0 = never", flag::integer(o.sample_every, 0, IMAX)});
    t.add({"-g", "--gen-tokens", "N", "tokens per sample", flag::integer(o.gen_tokens, 1, IMAX)});
    t.add({"-n", "--checkpoint-every", "N", "checkpoint into -o every N steps and at the end, 0 = never",
           flag::integer(o.checkpoint_every, 0, IMAX)});
    t.add({"-y", "--resume", "0|1", "resume from the latest checkpoint in -o", flag::zero_or_one(o.resume)});
    t.add({"-a", "--overfit", "0|1", "every step uses the first batch of the first shard",
           flag::zero_or_one(o.overfit)});
    t.add({"-z", "--zero", "0|1", "under mpirun: 1 = shard AdamW state across ranks (ZeRO-1)",
           flag::integer(o.zero_stage, 0, 1)});
    t.add({"", "--seed", "N", "seed for init and sampling", flag::integer(o.seed, 0, IMAX)});
    t.add({"", "--temperature", "X", "sampling temperature", flag::real(o.temperature, 1e-3f, 100.0f)});
    t.add({"", "--top-k", "N", "sample from the N most likely tokens, 0 = all", flag::integer(o.top_k, 0, IMAX)});
}

void add_profile_and_memory(FlagTable& t, TrainOptions& o) {
    t.add({"", "--profile", "DIR", "profile a window of steps (GPU: CUPTI), write the profile to DIR",
           shown_as(flag::text(o.profile_dir), "off")});
    t.add({"", "--profile-start", "N", "first profiled step, as the step lines number them (from 1)",
           flag::integer(o.profile_start, 1, IMAX)});
    t.add({"", "--profile-steps", "N", "profiled steps", flag::integer(o.profile_steps, 1, IMAX)});
    t.add({"", "--energy", "",
           "with --profile: joules per sub-block, each replayed after the window\n"
           "long enough for the energy counter (NVML on the GPU, RAPL on the CPU)",
           flag::on(o.energy)});
    t.add(energy_seconds_flag(o.energy_seconds));
    t.add({"", "--memory-plan", "",
           "GPU trainer: print the memory plan for these flags and the largest\n"
           "micro-batch that fits, then exit (no GPU needed)",
           flag::on(o.memory_plan)});
    t.add(device_memory_flag(o.device_memory));
    t.add({"", "--cuda-graph", "0|1",
           "GPU trainer: each micro-step (forward, backward) and each update (norm,\n"
           "AdamW) as one CUDA graph launch; the samples' decode steps too",
           flag::zero_or_one(o.cuda_graph)});
    t.add(help_flag(o.help));
}

// The checks between flags, and what follows from them (grad_accum from -d).
void finish(TrainOptions& opt) {
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
}

// The trainers' flag table, bound to `opt`: parsing sets its fields, --help shows their current values.
FlagTable train_flags(const char* program, TrainOptions& opt) {
    FlagTable t(strprintf("usage: %s [options]", program));
    add_data_and_model(t, opt);
    add_optimizer(t, opt);
    add_run(t, opt);
    add_profile_and_memory(t, opt);
    return t;
}

} // namespace

TrainOptions parse_train_options(int argc, char** argv, TrainOptions opt) {
    FlagTable t = train_flags("", opt);
    t.parse(argc, argv);
    opt.model_given = t.given("--model");
    for (const char* f : {"--profile-start", "--profile-steps", "--energy"})
        if (t.given(f) && opt.profile_dir.empty()) throw UsageError(strprintf("%s: only with --profile DIR", f));
    if (t.given("--energy-seconds") && !opt.energy) throw UsageError("--energy-seconds: only with --energy");
    finish(opt);
    return opt;
}

std::string usage(const char* program, const TrainOptions& defaults) {
    TrainOptions d = defaults;
    return train_flags(program, d).help();
}

} // namespace llmc
