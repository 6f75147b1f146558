// The training driver (llmc/train/loop.h).
#include "llmc/train/loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"
#include "llmc/gpt2_init.h"
#include "llmc/profiler/distributed.h"
#include "llmc/profiler/session.h"
#include "llmc/progress.h"
#include "llmc/rand.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/train/common.h"
#include "llmc/train/dist.h"

namespace llmc {

namespace {

// Generates from an EOT prompt and prints the text (token ids without a tokenizer).
void print_sample(TrainBackend& be, const GPT2Config& cfg, Rng& rng, const TrainOptions& opt, const GPT2Tokenizer* tok) {
    int n = std::min(opt.gen_tokens, cfg.max_seq_len - 1);
    // The prompt is EOT, which GPT-2 puts last in its vocabulary; V-1 is the same id for GPT-2 and stays in
    // range for the small-vocabulary models the tests use.
    std::vector<int> ids{cfg.vocab_size - 1};
    SamplerConfig sc{opt.temperature, opt.top_k};
    for (int i = 0; i < n; i++) {
        std::vector<float> probs = be.next_token_probs(ids);
        ids.push_back(sample_token(probs.data(), cfg.vocab_size, sc, rng.next_f32()));
    }
    printf("---- sample ----\n");
    if (tok) {
        printf("%s\n", tok->decode(std::vector<int>(ids.begin() + 1, ids.end())).c_str());
    } else {
        for (size_t i = 1; i < ids.size(); i++) printf("%d ", ids[i]);
        printf("\n(token ids: no gpt2_tokenizer.bin beside the train data)\n");
    }
    printf("----------------\n");
}

// The shards' content, cheaply: each file's first and last 64 KiB (its header, and tokens at both ends).
uint64_t shards_fingerprint(const std::vector<std::string>& files) {
    uint64_t h = kFnvOffset;
    std::vector<char> buf(64 * 1024);
    for (const std::string& f : files) {
        std::ifstream in(f, std::ios::binary | std::ios::ate);
        const std::streamoff size = in.tellg(), part = (std::streamoff)buf.size();
        for (std::streamoff at : {(std::streamoff)0, std::max<std::streamoff>(0, size - part)}) {
            in.seekg(at);
            in.read(buf.data(), part);
            h = fnv1a(buf.data(), (size_t)in.gcount(), h);
            in.clear();
        }
    }
    return h;
}

/*
 * Every rank must train the same model on the same data from the same point. A rank whose -o, data or model
 * file differs (a node-local copy) would otherwise train on silently from other weights, or stop at another
 * step and leave the rest waiting in a collective for ever: each is compared with rank 0's before the backend
 * allocates, and a difference is one line from rank 0 on every rank.
 */
void check_same_run(Communicator& comm, const TrainOptions& opt, int64_t resume_step, const DataLoader& train,
                    bool has_val, int max_steps, const std::vector<float>& weights, const std::string& source) {
    if (opt.resume)
        check_same_on_every_rank(comm, (uint64_t)resume_step,
                                 strprintf("find another checkpoint to resume from in %s than rank 0 (%s); every rank "
                                           "needs the same -o", opt.output_dir.c_str(),
                                           resume_step >= 0 ? strprintf("step %lld", (long long)resume_step).c_str()
                                                            : "none"));
    const uint64_t data[] = {train.files().size(), train.total_tokens(), (uint64_t)max_steps, has_val,
                             shards_fingerprint(train.files())};
    check_same_on_every_rank(comm, fnv1a(data, sizeof data),
                             strprintf("see other data than rank 0 (%zu train shards, %zu tokens, %d steps, val %s); "
                                       "every rank needs the same -i and -j", train.files().size(),
                                       train.total_tokens(), max_steps, has_val ? "on" : "off"));
    check_same_on_every_rank(comm, fnv1a_floats(weights.data(), weights.size()),
                             strprintf("start from other weights than rank 0 (%s); every rank needs the same model",
                                       source.c_str()));
}

/*
 * A resume continues the checkpoint's model; a -e given beside -y 1 must describe that model (a dN with its shape,
 * or a model file of its shape), else the run would silently train another model than the one asked for. Without
 * -e the checkpoint's model is used, and the banner names it.
 */
void check_resumed_model(const TrainOptions& opt, const GPT2Config& ckpt, int64_t resume_step) {
    int depth;
    GPT2Config want;
    if (parse_depth_descriptor(opt.model, &depth)) want = gpt2_config_for_depth(depth);
    else if (file_exists(opt.model)) want = load_model(opt.model, /*with_params=*/false).config;
    else throw UsageError(strprintf("-e: '%s' is neither dN (e.g. d12) nor an existing model file", opt.model.c_str()));
    auto shape = [](const GPT2Config& c) {
        return strprintf("L=%d NH=%d C=%d V=%d maxT=%d", c.num_layers, c.num_heads, c.channels, c.vocab_size,
                         c.max_seq_len);
    };
    if (shape(want) != shape(ckpt) || want.padded_vocab_size != ckpt.padded_vocab_size)
        throw UsageError(strprintf("-e %s: the checkpoint in %s (step %lld) holds another model (%s, not %s); resume "
                                   "with its -e, or without -e",
                                   opt.model.c_str(), opt.output_dir.c_str(), (long long)resume_step,
                                   shape(ckpt).c_str(), shape(want).c_str()));
}

// One rank's run (data parallelism, llmc/train/dist.h): every rank runs this loop on its part of each batch; rank 0
// alone prints, logs, samples, evaluates and writes files. backend: the caller's, so that it outlives an error.
int train_run(Communicator* comm, const char* program, int argc, char** argv, const TrainOptions& defaults,
              BackendFactory make_backend, std::unique_ptr<TrainBackend>& backend) {
    using Clock = std::chrono::steady_clock;
    check_same_args(*comm, argc, argv);
    const int rank = comm->rank(), world = comm->world();
    TrainOptions opt = parse_train_options(argc, argv, defaults);
    if (opt.help) {
        printf("%s", usage(program, defaults).c_str());
        return 0;
    }
    if (opt.memory_plan) // the GPU trainer answers it before training (train_gpt2.cu)
        throw UsageError(strprintf("--memory-plan: %s has no GPU memory to plan; ./train_gpt2cu --memory-plan answers "
                                   "without a GPU", program));
    if (opt.grad_accum % world != 0)
        throw UsageError(strprintf("-d: total batch %ld tokens is %d micro-batches of B*T = %ld, which %d ranks cannot "
                                   "share; make it a multiple of B*T*%d", opt.total_batch, opt.grad_accum,
                                   (long)opt.B * opt.T, world, world));
    const std::string profile_root = opt.profile_dir;
    if (world > 1 && !opt.profile_dir.empty()) opt.profile_dir += strprintf("/rank%d", rank);
    if (!opt.output_dir.empty() && rank == 0) make_dirs(opt.output_dir);
    if (!opt.profile_dir.empty()) prof::check_profile_dir(opt.profile_dir, "--profile"); // before the data is read

    // ---- every input is checked before the model is allocated: model shape, data, checkpoint ----
    // The model: random init (dN), a model file, or the latest checkpoint when resuming.
    int64_t resume_step = opt.resume ? find_latest_checkpoint(opt.output_dir) : -1;
    if (opt.resume && resume_step < 0) printf("resume: no checkpoint in %s, starting fresh\n", opt.output_dir.c_str());
    std::string source = resume_step >= 0 ? checkpoint_model_path(opt.output_dir, resume_step) : opt.model;
    GPT2Config cfg;
    ModelFile mf; // the weights, when they come from a file
    int depth;
    const bool random_init = resume_step < 0 && parse_depth_descriptor(opt.model, &depth);
    if (random_init) {
        cfg = gpt2_config_for_depth(depth);
        validate_config(cfg, "-e " + opt.model);
    } else {
        if (resume_step < 0 && !file_exists(opt.model))
            throw UsageError(strprintf("-e: '%s' is neither dN (e.g. d12) nor an existing model file", opt.model.c_str()));
        mf = load_model(source);
        cfg = mf.config;
    }
    if (resume_step >= 0 && opt.model_given) check_resumed_model(opt, cfg, resume_step);
    if (opt.T > cfg.max_seq_len)
        throw UsageError(strprintf("-t: sequence length %d exceeds the model's maximum %d", opt.T, cfg.max_seq_len));
    size_t nparams = num_parameters(cfg);

    DataLoader train(opt.train_data, "train", opt.B, opt.T, cfg.vocab_size, opt.overfit, rank, world);
    std::string val_spec = find_val_spec(opt, train.files()[0]);
    std::unique_ptr<DataLoader> val;
    const bool has_val = !val_spec.empty() && opt.val_every > 0; // rank 0 evaluates
    if (has_val && rank == 0) val = std::make_unique<DataLoader>(val_spec, "val", opt.B, opt.T, cfg.vocab_size);
    int val_batches = val ? (int)std::min<size_t>(opt.val_batches, val->batches_per_epoch()) : 0;
    std::unique_ptr<GPT2Tokenizer> tokenizer = opt.sample_every > 0 ? find_sample_tokenizer(train.files()[0]) : nullptr;
    const int grad_accum = opt.grad_accum / world; // this rank's micro-batches per step
    int max_steps = opt.max_steps >= 0 ? opt.max_steps
                                       : (int)std::min<size_t>(train.batches_per_epoch() / opt.grad_accum, INT32_MAX);
    if (max_steps == 0 && opt.max_steps < 0)
        throw UsageError(strprintf("-d: one step takes %d micro-batches, more than one epoch of %s has (%zu); lower -d "
                                   "or set -x", opt.grad_accum, opt.train_data.c_str(), train.batches_per_epoch()));
    if (!opt.profile_dir.empty() && opt.profile_start > max_steps)
        throw UsageError(strprintf("--profile-start: step %d is past the run's last step %d%s", opt.profile_start,
                                   max_steps, opt.max_steps >= 0 ? " (-x)" : " (one epoch; set -x)"));
    LRScheduler sched{opt.schedule, opt.lr, opt.warmup, opt.final_lr_frac, max_steps};

    // The checkpoint's state must be the one its file names say, for this run: nothing is written otherwise.
    TrainState st;
    if (resume_step >= 0) {
        st = load_state(checkpoint_state_path(opt.output_dir, resume_step), nparams, resume_step);
        if (st.B != opt.B || st.T != opt.T)
            throw UsageError(strprintf("-b/-t: checkpoint was written with B=%d T=%d; resume with the same shape",
                                       st.B, st.T));
        if (st.world != world)
            throw UsageError(strprintf("-y: the checkpoint in %s was written by %d data-parallel ranks, this run has "
                                       "%d; resume with the same number", opt.output_dir.c_str(), st.world, world));
        if (resume_step > max_steps)
            throw UsageError(strprintf("-x: the checkpoint in %s is at step %lld, past this run's last step %d",
                                       opt.output_dir.c_str(), (long long)resume_step, max_steps));
        train.restore(st.data);
    }

    // ---- the model ----
    std::vector<float> weights;
    if (random_init) {
        weights.resize(nparams);
        init_gpt2_parameters(weights.data(), cfg, opt.seed);
    } else if (!st.master.empty()) {
        // A checkpoint from the GPU trainer carries fp32 master weights next to its bf16 model file: they, not
        // the rounded copy, are what training continues from.
        weights = std::move(st.master);
    } else {
        weights = std::move(mf.params);
    }
    mf = ModelFile();
    if (world > 1) check_same_run(*comm, opt, resume_step, train, has_val, max_steps, weights, source);
    backend = make_backend(cfg, opt, *comm);
    TrainBackend& be = *backend;
    prof::ProfileSession* profile = be.profile_session();
    Rng sample_rng(opt.seed);
    int start_step = 0;
    if (resume_step >= 0) {
        be.set_moments(st.m, st.v);
        be.load_run_choices(checkpoint_choices_path(opt.output_dir, resume_step, rank));
        sample_rng.state = st.rng_state;
        st = TrainState();
        start_step = (int)resume_step;
        printf("resumed from %s (step %d)\n", source.c_str(), start_step);
    }
    be.load_weights(weights);
    weights = std::vector<float>(); // the backend holds them now
    TrainLog log(rank == 0 ? opt.output_dir : "", resume_step);

    printf("+-----------------------+------------------------------------------+\n");
    printf("| trainer               | %-40s |\n", be.name());
    printf("| model                 | %-40s |\n", source.c_str());
    printf("| L / NH / C            | %-40s |\n", strprintf("%d / %d / %d", cfg.num_layers, cfg.num_heads, cfg.channels).c_str());
    printf("| maxT / V / Vp         | %-40s |\n", strprintf("%d / %d / %d", cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size).c_str());
    printf("| parameters            | %-40zu |\n", nparams);
    printf("| B / T / grad accum    | %-40s |\n", strprintf("%d / %d / %d", opt.B, opt.T, grad_accum).c_str());
    printf("| data-parallel ranks   | %-40s |\n", strprintf("%d%s", world, opt.zero_stage ? ", optimizer sharded (ZeRO-1)" : "").c_str());
    printf("| train tokens / shards | %-40s |\n", strprintf("%zu / %zu", train.total_tokens(), train.files().size()).c_str());
    printf("| val                   | %-40s |\n", val ? strprintf("%s, %d batches", val_spec.c_str(), val_batches).c_str() : "off");
    printf("| steps                 | %-40d |\n", max_steps);
    printf("| lr / schedule         | %-40s |\n", strprintf("%g / %s, warmup %d, final x%g", opt.lr, schedule_name(opt.schedule), opt.warmup, opt.final_lr_frac).c_str());
    const AdamWConfig& adam = opt.adam;
    printf("| AdamW b1 b2 eps / wd  | %-40s |\n", strprintf("%g %g %g / %g", adam.beta1, adam.beta2, adam.eps, adam.weight_decay).c_str());
    printf("| grad clip             | %-40s |\n", adam.grad_clip > 0 ? strprintf("global norm %g", adam.grad_clip).c_str() : "off");
    printf("+-----------------------+------------------------------------------+\n");
    be.print_memory();

    int trained = 0;
    // Steps are numbered as the step lines print them: step N is the N-th, and what is reported "at step N"
    // (val loss, samples, checkpoints) comes after it (step 0: before training).
    const auto run_start = Clock::now();
    auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    RunEta eta;
    const long every[RunEta::kinds] = {has_val ? opt.val_every : 0, opt.sample_every, opt.checkpoint_every};
    double trained_seconds = 0;
    CommStats step_comm; // the collectives of the training steps (not the setup's checks, nor checkpoints')
    for (int step = start_step; step <= max_steps; step++) {
        bool last = step == max_steps;
        // The same on every rank (rank 0 alone evaluates, samples and writes the checkpoint's files).
        const bool do_val = has_val && (step % opt.val_every == 0 || last);
        const bool do_sample = opt.sample_every > 0 && step > start_step && (step % opt.sample_every == 0 || last);
        const bool do_checkpoint =
            opt.checkpoint_every > 0 && step > start_step && (step % opt.checkpoint_every == 0 || last);
        auto t_boundary = Clock::now();
        if (do_val && val) {
            Progress progress(strprintf("step %d/%d | val loss", step, max_steps), "batch");
            float vl = be.val_loss(*val, val_batches, progress);
            printf("step %4d/%d | val loss %.6f\n", step, max_steps, vl);
            log.val(step, vl);
            eta.boundary(RunEta::val, seconds_since(t_boundary));
            if (profile) profile->boundary_work("val", seconds_since(t_boundary));
        }
        if (do_sample && rank == 0) {
            t_boundary = Clock::now();
            print_sample(be, cfg, sample_rng, opt, tokenizer.get());
            eta.boundary(RunEta::sample, seconds_since(t_boundary));
            if (profile) profile->boundary_work("sample", seconds_since(t_boundary));
        }
        if (do_checkpoint) {
            t_boundary = Clock::now();
            // Every rank takes part in gathering the moments; rank 0 writes them all, and the data position,
            // which is the same on every rank.
            std::vector<float> w = be.weights();
            TrainState st{step, sample_rng.state, train.position(), opt.B, opt.T, world, {}, {}, {}};
            be.get_moments(st.m, st.v);
            // Before the model and state: a checkpoint complete enough to resume from has them.
            be.save_run_choices(checkpoint_choices_path(opt.output_dir, step, rank));
            if (world > 1) comm->barrier();
            if (rank == 0) {
                save_model(checkpoint_model_path(opt.output_dir, step), cfg, w.data(), be.model_file_version());
                if (be.model_file_version() != MODEL_VERSION_FP32) st.master = std::move(w);
                save_state(checkpoint_state_path(opt.output_dir, step), st);
                printf("checkpoint: %s\n", checkpoint_model_path(opt.output_dir, step).c_str());
            }
            eta.boundary(RunEta::checkpoint, seconds_since(t_boundary));
            if (profile) profile->boundary_work("checkpoint", seconds_since(t_boundary));
        }
        if (last) {
            // What to do with the model just trained: its generation command, in the inference program that
            // matches this trainer (infer_gpt2 for train_gpt2, infer_gpt2cu for train_gpt2cu).
            const std::string trainer = program;
            const std::string infer = trainer.rfind("train", 0) == 0 ? "infer" + trainer.substr(5) : "infer_gpt2";
            if (do_checkpoint && rank == 0)
                printf("generate from it: ./%s -e %s -p \"ROMEO:\" -n 64\n", infer.c_str(),
                       checkpoint_model_path(opt.output_dir, step).c_str());
            break;
        }
        // The other ranks wait here for it, untimed: else they would start the step and wait in its first
        // collective, a wait the profile would count as theirs (their step longer, their communication slower).
        if (world > 1 && (do_val || do_sample || do_checkpoint)) comm->barrier();

        float lr = sched.lr(step);
        if (profile) profile->begin_step(step);
        const CommStats comm_before = world > 1 ? be.comm_stats(*comm) : CommStats{};
        // The step's own time: the profile session's readings at its edges (NVML power) stay outside it.
        auto t0 = Clock::now();
        StepStats s = be.train_step(train, grad_accum, lr, step + 1);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (world > 1) step_comm += be.comm_stats(*comm).since(comm_before);
        if (profile) profile->end_step((long)grad_accum * opt.B * opt.T);
        if (!std::isfinite(s.loss))
            throw Error(strprintf("loss is %f at step %d; stopping (checkpoints in -o are from before this step)",
                                  s.loss, step + 1));
        trained++;
        trained_seconds += ms / 1e3;
        eta.step(ms / 1e3);
        printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s%s | %s elapsed, ETA %s\n",
               step + 1, max_steps, s.loss, s.grad_norm, lr, ms, opt.total_batch / (ms / 1e3),
               be.step_extras(ms, opt.total_batch).c_str(), format_duration(seconds_since(run_start)).c_str(),
               format_duration(eta.eta(step + 1, max_steps, every)).c_str());
        log.train(step + 1, s.loss, lr, s.grad_norm);
        if (profile) profile->step_done(step + 1 == max_steps);
    }
    if (const SubBlockTimes* t = be.timings()) print_subblock_table(*t, trained);
    if (profile) profile->print_outcome();
    if (world > 1 && !profile_root.empty()) {
        // The ranks' step times and communication side by side, written by rank 0 beside the rank<r>/ profiles.
        prof::RankRecord mine{rank, trained, trained_seconds, step_comm, be.link()};
        std::vector<prof::RankRecord> all = prof::gather_rank_records(*comm, mine);
        if (rank == 0) {
            std::string text = prof::format_distributed(prof::summarize_ranks(all));
            make_dirs(profile_root);
            AtomicFile f(profile_root + "/distributed.txt");
            f.write(text.data(), text.size());
            f.commit();
            printf("\n%s", text.c_str());
        }
    }
    if (profile) profile->throw_if_not_written(); // after the checkpoints and the summary
    return 0;
}

} // namespace

int run_training(const char* program, int argc, char** argv, const TrainOptions& defaults,
                 BackendFactory make_backend) {
    // The communicator lives until the process exits: MPI_Finalize (its destructor) comes after main_guard has
    // printed the error line, so no rank can end the job (and mpirun kill rank 0) before rank 0 has said why.
    static const std::unique_ptr<Communicator> comm = make_communicator();
    // on_error runs while the backend still exists: a rank alone with an error must reach MPI_Abort before
    // tearing down what its peers may be waiting on (destroying an NCCL communicator, or joining the reducer
    // thread, inside a collective the others never finish would block for ever).
    std::unique_ptr<TrainBackend> backend;
    try {
        return train_run(comm.get(), program, argc, argv, defaults, make_backend, backend);
    } catch (const std::exception& e) {
        comm->on_error(e.what(), exit_code_for(e)); // returns when every rank has failed
        throw;
    }
}

} // namespace llmc
