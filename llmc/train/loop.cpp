// The training driver (llmc/train/loop.h).
#include "llmc/train/loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/io/dataloader.h"
#include "llmc/profiler/distributed.h"
#include "llmc/profiler/session.h"
#include "llmc/util/progress.h"
#include "llmc/util/rand.h"
#include "llmc/train/schedulers.h"
#include "llmc/train/common.h"
#include "llmc/train/dist.h"
#include "llmc/train/plan.h"

namespace llmc {

LoaderBatches::LoaderBatches(DataLoader& loader) : TokenBatches(loader.B(), loader.T()), loader_(loader) {}
void LoaderBatches::next_batch() { loader_.next_batch(); }
const int* LoaderBatches::inputs() const { return loader_.inputs(); }
const int* LoaderBatches::targets() const { return loader_.targets(); }

RandomBatches::RandomBatches(int B, int T, int vocab_size, uint64_t seed)
    : TokenBatches(B, T), vocab_(vocab_size), tokens_((size_t)B * T + 1), rng_(seed) {}
void RandomBatches::next_batch() {
    for (int& t : tokens_) t = (int)(rng_.next_u32() % vocab_);
}

TrainShape train_shape(const TrainOptions& opt) {
    return TrainShape{opt.B, opt.T, opt.adam, opt.zero_stage != 0, opt.cuda_graph};
}

void check_batch_shape(const TokenBatches& batches, const TrainShape& shape) {
    if (batches.B != shape.B || batches.T != shape.T)
        throw Error(strprintf("train_step: batches of (%d, %d) for a backend built for (%d, %d)", batches.B, batches.T,
                              shape.B, shape.T));
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Tokens per sample: -g, within the model's context after the one-token prompt.
int sample_length(const GPT2Config& cfg, const TrainOptions& opt) { return std::min(opt.gen_tokens, cfg.max_seq_len - 1); }

// Generates from an EOT prompt and prints the text (token ids without a tokenizer): the inference driver's
// generate() over a KV-cache decoder of the trained weights, its coins from a seed drawn from `rng` (whose state
// the checkpoints keep). Long samples show their progress on a terminal as inference does.
void print_sample(TrainBackend& be, InferBackendFactory make_sampler, const GPT2Config& cfg, Rng& rng,
                  const TrainOptions& opt, const GPT2Tokenizer* tok) {
    InferOptions io;
    io.new_tokens = sample_length(cfg, opt);
    io.temperature = opt.temperature, io.top_k = opt.top_k;
    io.seed = rng.next_u32() & 0x7fffffff; // a seed infer_gpt2 --seed takes: the same sample from the checkpoint
    // The prompt is EOT, which GPT-2 puts last in its vocabulary; V-1 is the same id for GPT-2 and stays in
    // range for the small-vocabulary models the tests use.
    const int eot = cfg.vocab_size - 1;
    const std::vector<std::vector<int>> prompt{{eot}};
    std::unique_ptr<InferBackend> dec = make_sampler(cfg, InferShape{1, 1, 1 + io.new_tokens, opt.cuda_graph});
    dec->load(be.weights());
    InferProfile unprofiled(io, prompt, dec->elem_bytes());
    const std::vector<int> ids = generate(*dec, io, prompt, eot, unprofiled).seqs[0].ids;
    printf("---- sample ----\n");
    if (tok) {
        printf("%s\n", tok->decode(ids).c_str());
    } else {
        for (int id : ids) printf("%d ", id);
        printf("\n(token ids: no gpt2_tokenizer.bin beside the train data)\n");
    }
    printf("----------------\n");
}

// The backend at the run's starting point: the weights (which allocate the model), then a checkpoint's moments and
// run choices. Returns the samples' RNG, where the checkpoint left it.
Rng start_backend(TrainBackend& be, RunPlan& plan, std::vector<float> weights) {
    be.load_weights(weights);
    weights = std::vector<float>(); // the backend holds them now
    Rng sample_rng(plan.opt.seed);
    if (plan.resume_step >= 0) {
        be.set_moments(plan.state.m, plan.state.v);
        be.load_run_choices(checkpoint_choices_path(plan.opt.output_dir, plan.resume_step, plan.rank));
        sample_rng.state = plan.state.rng_state;
        plan.state = TrainState();
        printf("resumed from %s (step %d)\n", plan.source.c_str(), plan.start_step);
    }
    return sample_rng;
}

// --profile DIR: the backend's session over the plan's window (the session counts steps from 0, the flag as the step
// lines do, from 1), made before the backend allocates; null without --profile.
std::unique_ptr<prof::ProfileSession> make_profile_session(const char* program, TrainBackend& be, const RunPlan& plan) {
    const TrainOptions& opt = plan.opt;
    if (opt.profile_dir.empty()) return nullptr;
    prof::ProfileContext ctx = prof::profile_context(program, plan.cfg, opt.B, opt.T, plan.grad_accum);
    ctx.rank = plan.rank, ctx.world_size = plan.world;
    prof::SessionOptions so{opt.profile_dir, opt.profile_start - 1, opt.profile_steps};
    so.energy = opt.energy, so.energy_seconds = opt.energy_seconds;
    return be.profile_session(so, std::move(ctx));
}

void print_banner(const TrainBackend& be, const RunPlan& p) {
    const TrainOptions& opt = p.opt;
    const GPT2Config& cfg = p.cfg;
    const DataLoader& train = *p.train;
    printf("+-----------------------+------------------------------------------+\n");
    printf("| trainer               | %-40s |\n", be.name());
    printf("| model                 | %-40s |\n", p.source.c_str());
    printf("| L / NH / C            | %-40s |\n", strprintf("%d / %d / %d", cfg.num_layers, cfg.num_heads, cfg.channels).c_str());
    printf("| maxT / V / Vp         | %-40s |\n", strprintf("%d / %d / %d", cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size).c_str());
    printf("| parameters            | %-40zu |\n", num_parameters(cfg));
    printf("| B / T / grad accum    | %-40s |\n", strprintf("%d / %d / %d", opt.B, opt.T, p.grad_accum).c_str());
    printf("| data-parallel ranks   | %-40s |\n", strprintf("%d%s", p.world, opt.zero_stage ? ", optimizer sharded (ZeRO-1)" : "").c_str());
    printf("| train tokens / shards | %-40s |\n", strprintf("%zu / %zu", train.total_tokens(), train.files().size()).c_str());
    printf("| val                   | %-40s |\n", p.val ? strprintf("%s, %d batches", p.val_spec.c_str(), p.val_batches).c_str() : "off");
    printf("| steps                 | %-40d |\n", p.max_steps);
    printf("| lr / schedule         | %-40s |\n", strprintf("%g / %s, warmup %d, final x%g", opt.lr, schedule_name(opt.schedule), opt.warmup, opt.final_lr_frac).c_str());
    const AdamWConfig& adam = opt.adam;
    printf("| AdamW b1 b2 eps / wd  | %-40s |\n", strprintf("%g %g %g / %g", adam.beta1, adam.beta2, adam.eps, adam.weight_decay).c_str());
    printf("| grad clip             | %-40s |\n", adam.grad_clip > 0 ? strprintf("global norm %g", adam.grad_clip).c_str() : "off");
    printf("+-----------------------+------------------------------------------+\n");
    if (opt.sample_every > 0 && sample_length(cfg, opt) < opt.gen_tokens)
        printf("samples: -g %d is more than the model's context holds after the prompt: %d tokens each\n",
               opt.gen_tokens, sample_length(cfg, opt));
    be.print_memory();
}

// The work due at a step boundary; the same on every rank (rank 0 alone evaluates, samples and writes files).
struct Boundary {
    bool val = false, sample = false, checkpoint = false;
    bool any() const { return val || sample || checkpoint; }
};

/*
 * One rank's run of its plan (data parallelism, llmc/train/dist.h): every rank runs this loop on its part of each
 * batch; rank 0 alone prints, logs, samples, evaluates and writes files. Steps are numbered as the step lines print
 * them: step N is the N-th, and what is reported "at step N" (val loss, samples, checkpoints) comes after it (step
 * 0: before training).
 */
struct TrainRun {
    TrainRun(RunPlan& plan, TrainBackend& be, Communicator& comm, TokenBatches& batches, Rng sample_rng,
             prof::ProfileSession* profile, InferBackendFactory sampler = nullptr)
        : plan(plan), opt(plan.opt), be(be), comm(comm), batches(batches), profile(profile), sampler(sampler),
          sample_rng(sample_rng),
          log(plan.rank == 0 ? opt.output_dir : "", plan.resume_step),
          sched{opt.schedule, opt.lr, opt.warmup, opt.final_lr_frac, plan.max_steps},
          every{plan.has_val ? opt.val_every : 0, opt.sample_every, opt.checkpoint_every} {}

    int loop(const char* program);
    Boundary boundary_work(int step);
    void save_checkpoint(int step);
    void print_next_command(const char* program, int step) const;
    void train_step(int step);
    void summary();
    void write_distributed_summary();

    RunPlan& plan;
    const TrainOptions& opt;
    TrainBackend& be;
    Communicator& comm;
    TokenBatches& batches;         // what the steps train on
    prof::ProfileSession* profile; // with --profile
    InferBackendFactory sampler;   // the samples' decoder (null: no samples)
    Rng sample_rng;
    TrainLog log;
    LRScheduler sched;
    RunEta eta;
    const long every[RunEta::kinds]; // steps between val losses, samples and checkpoints (0: none)
    Clock::time_point run_start;
    int trained = 0;      // steps trained by this run
    double trained_seconds = 0;
    CommStats step_comm;  // the collectives of the training steps (not the setup's checks, nor checkpoints')
};

int TrainRun::loop(const char* program) {
    run_start = Clock::now();
    for (int step = plan.start_step; step <= plan.max_steps; step++) {
        const Boundary done = boundary_work(step);
        if (step == plan.max_steps) {
            if (done.checkpoint && plan.rank == 0) print_next_command(program, step);
            break;
        }
        // The other ranks wait here for it, untimed: else they would start the step and wait in its first
        // collective, a wait the profile would count as theirs (their step longer, their communication slower).
        if (plan.world > 1 && done.any()) comm.barrier();
        train_step(step);
    }
    summary();
    return log.failed() ? 1 : 0; // its one error line was printed when the write failed
}

Boundary TrainRun::boundary_work(int step) {
    const int max_steps = plan.max_steps;
    const bool last = step == max_steps;
    Boundary due;
    due.val = plan.has_val && (step % opt.val_every == 0 || last);
    due.sample = sampler && opt.sample_every > 0 && step > plan.start_step && (step % opt.sample_every == 0 || last);
    due.checkpoint = opt.checkpoint_every > 0 && step > plan.start_step && (step % opt.checkpoint_every == 0 || last);
    // Each piece's time goes to the ETA and, inside a profile window, to the profile's rows of work outside the steps.
    auto t_boundary = Clock::now();
    auto account = [&](RunEta::Kind kind, const char* name) {
        const double s = seconds_since(t_boundary);
        eta.boundary(kind, s);
        if (profile) profile->boundary_work(name, s);
    };
    if (due.val && plan.val) {
        Progress progress(strprintf("step %d/%d | val loss", step, max_steps), "batch");
        float vl = be.val_loss(*plan.val, plan.val_batches, progress);
        printf("step %4d/%d | val loss %.6f\n", step, max_steps, vl);
        log.val(step, vl);
        account(RunEta::val, "val");
    }
    if (due.sample && plan.rank == 0) {
        t_boundary = Clock::now();
        print_sample(be, sampler, plan.cfg, sample_rng, opt, plan.tokenizer.get());
        account(RunEta::sample, "sample");
    }
    if (due.checkpoint) {
        t_boundary = Clock::now();
        save_checkpoint(step);
        account(RunEta::checkpoint, "checkpoint");
    }
    return due;
}

// Every rank takes part in gathering the moments; rank 0 writes them all, and the data position, which is the
// same on every rank.
void TrainRun::save_checkpoint(int step) {
    std::vector<float> w = be.weights();
    TrainState st{step, sample_rng.state, plan.train->position(), opt.B, opt.T, plan.world, {}, {}, {}};
    be.get_moments(st.m, st.v);
    // Before the model and state: a checkpoint complete enough to resume from has them.
    be.save_run_choices(checkpoint_choices_path(opt.output_dir, step, plan.rank));
    if (plan.world > 1) comm.barrier();
    if (plan.rank != 0) return;
    save_model(checkpoint_model_path(opt.output_dir, step), plan.cfg, w.data(), be.model_file_version());
    if (be.model_file_version() != MODEL_VERSION_FP32) st.master = std::move(w);
    save_state(checkpoint_state_path(opt.output_dir, step), st);
    printf("checkpoint: %s\n", checkpoint_model_path(opt.output_dir, step).c_str());
}

// What to do with the model just trained: its generation command, in the inference program that matches this
// trainer (infer_gpt2 for train_gpt2, infer_gpt2cu for train_gpt2cu).
void TrainRun::print_next_command(const char* program, int step) const {
    const std::string trainer = program;
    const std::string infer = trainer.rfind("train", 0) == 0 ? "infer" + trainer.substr(5) : "infer_gpt2";
    printf("generate from it: ./%s -e %s -p \"ROMEO:\" -n 64\n", infer.c_str(),
           checkpoint_model_path(opt.output_dir, step).c_str());
}

void TrainRun::train_step(int step) {
    const int max_steps = plan.max_steps;
    float lr = sched.lr(step);
    if (profile) profile->begin_step(step);
    const CommStats comm_before = plan.world > 1 ? be.comm_stats(comm) : CommStats{};
    // The step's own time: the profile session's readings at its edges (NVML power) stay outside it.
    auto t0 = Clock::now();
    StepStats s = be.train_step(batches, plan.grad_accum, lr, step + 1);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (plan.world > 1) step_comm += be.comm_stats(comm).since(comm_before);
    if (profile) profile->end_step((long)plan.grad_accum * opt.B * opt.T);
    if (!std::isfinite(s.loss))
        throw Error(strprintf("loss is %f at step %d; stopping%s", s.loss, step + 1,
                              opt.checkpoint_every > 0 && !opt.output_dir.empty()
                                  ? " (checkpoints in -o are from before this step)"
                                  : ""));
    trained++;
    trained_seconds += ms / 1e3;
    eta.step(ms / 1e3);
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s%s | %s elapsed, ETA %s\n", step + 1,
           max_steps, s.loss, s.grad_norm, lr, ms, opt.total_batch / (ms / 1e3),
           be.step_extras(ms, opt.total_batch).c_str(), format_duration(seconds_since(run_start)).c_str(),
           format_duration(eta.eta(step + 1, max_steps, every)).c_str());
    log.train(step + 1, s.loss, lr, s.grad_norm);
    if (profile) profile->step_done(step + 1 == max_steps);
}

void TrainRun::summary() {
    if (const SubBlockTimes* t = be.timings()) print_subblock_table(*t, trained);
    if (profile) profile->print_outcome();
    if (plan.world > 1 && !plan.profile_root.empty()) write_distributed_summary();
    if (profile) profile->throw_if_not_written(); // after the checkpoints and the summary
}

// The ranks' step times and communication side by side, written by rank 0 beside the rank<r>/ profiles.
void TrainRun::write_distributed_summary() {
    prof::RankRecord mine{plan.rank, trained, trained_seconds, step_comm, be.link()};
    std::vector<prof::RankRecord> all = prof::gather_rank_records(comm, mine);
    if (plan.rank != 0) return;
    std::string text = prof::format_distributed(prof::summarize_ranks(all));
    make_dirs(plan.profile_root);
    AtomicFile f(plan.profile_root + "/distributed.txt");
    f.write(text.data(), text.size());
    f.commit();
    printf("\n%s", text.c_str());
}

// --memory-plan: the plan of the model the run would train (rank 0 prints it), nothing trained.
int print_memory_plan(const TrainProgram& program, const TrainOptions& opt, const Communicator& comm) {
    if (!program.memory_plan)
        throw UsageError(strprintf("--memory-plan: %s has no GPU memory to plan; ./train_gpt2cu --memory-plan answers "
                                   "without a GPU", program.name));
    const RunPlan model = plan_model_only(opt);
    if (comm.rank() != 0) return 0;
    if (opt.zero_stage && comm.world() == 1)
        printf("-z 1 in one process shards nothing: under mpirun -n N the optimizer state is split N ways\n");
    return program.memory_plan(model, opt.zero_stage ? comm.world() : 1);
}

// One rank's run. backend: the caller's, so that it outlives an error.
int train_run(Communicator* comm, const TrainProgram& program, int argc, char** argv,
              std::unique_ptr<TrainBackend>& backend) {
    check_same_args(*comm, argc, argv);
    const TrainOptions opt = parse_train_options(argc, argv, program.defaults);
    if (opt.help) {
        printf("%s", usage(program.name, program.defaults).c_str());
        return 0;
    }
    if (opt.memory_plan) return print_memory_plan(program, opt, *comm);
    if (opt.cuda_graph && !program.cuda_graphs)
        throw UsageError(strprintf("--cuda-graph 1: %s runs on the CPU; CUDA graphs are train_gpt2cu's", program.name));
    if (program.check_device) program.check_device();
    // ---- every input is checked before the model is allocated: model shape, data, checkpoint ----
    RunPlan plan = plan_run(opt, comm->rank(), comm->world());
    if (opt.resume && plan.resume_step < 0) printf("resume: no checkpoint in %s, starting fresh\n", opt.output_dir.c_str());
    std::vector<float> weights = initial_weights(plan);
    if (plan.world > 1) check_same_run(*comm, plan, weights);
    const std::unique_ptr<DirLock> lock = claim_output_dir(plan); // held to the end of the run
    // ---- the model ----
    backend = program.make_backend(plan.cfg, train_shape(plan.opt), *comm);
    const std::unique_ptr<prof::ProfileSession> profile = make_profile_session(program.name, *backend, plan);
    LoaderBatches batches(*plan.train);
    TrainRun run(plan, *backend, *comm, batches, start_backend(*backend, plan, std::move(weights)), profile.get(),
                 program.make_sampler);
    print_banner(*backend, plan);
    return run.loop(program.name);
}

} // namespace

void run_steps(const char* program, RunPlan& plan, TrainBackend& be, Communicator& comm, TokenBatches& batches,
               prof::ProfileSession* profile) {
    const TrainOptions& o = plan.opt;
    if (plan.has_val || o.sample_every > 0 || o.checkpoint_every > 0 || !o.output_dir.empty() || plan.world != 1)
        throw Error("run_steps: a plan with val loss, samples, checkpoints, a log or several ranks needs run_training");
    TrainRun run(plan, be, comm, batches, Rng(plan.opt.seed), profile);
    run.loop(program);
}

int run_training(Communicator& comm, const TrainProgram& program, int argc, char** argv) {
    std::unique_ptr<TrainBackend> backend;
    return train_run(&comm, program, argc, argv, backend);
}

int run_training(const TrainProgram& program, int argc, char** argv) {
    // The communicator lives until the process exits: MPI_Finalize (its destructor) comes after main_guard has
    // printed the error line, so no rank can end the job (and mpirun kill rank 0) before rank 0 has said why.
    static const std::unique_ptr<Communicator> comm = make_communicator();
    // on_error runs while the backend still exists: a rank alone with an error must reach MPI_Abort before
    // tearing down what its peers may be waiting on (destroying an NCCL communicator, or joining the reducer
    // thread, inside a collective the others never finish would block for ever).
    std::unique_ptr<TrainBackend> backend;
    try {
        return train_run(comm.get(), program, argc, argv, backend);
    } catch (const std::exception& e) {
        comm->on_error(e.what(), exit_code_for(e)); // returns when every rank has failed
        throw;
    }
}

} // namespace llmc
