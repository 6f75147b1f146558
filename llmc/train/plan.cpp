// A training run's plan (llmc/train/plan.h).
#include "llmc/train/plan.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "llmc/profiler/session.h"
#include "llmc/train/common.h"
#include "llmc/train/dist.h"

namespace llmc {

namespace {

// The flags against each other and the ranks; the output and profile directories checked, nothing made.
void check_flags(RunPlan& p) {
    TrainOptions& opt = p.opt;
    if (opt.grad_accum % p.world != 0)
        throw UsageError(strprintf("-d: total batch %ld tokens is %d micro-batches of B*T = %ld, which %d ranks cannot "
                                   "share; make it a multiple of B*T*%d", opt.total_batch, opt.grad_accum,
                                   (long)opt.B * opt.T, p.world, p.world));
    p.profile_root = opt.profile_dir;
    if (p.world > 1 && !opt.profile_dir.empty()) opt.profile_dir += strprintf("/rank%d", p.rank);
    if (!opt.output_dir.empty() && p.rank == 0) { // rank 0 makes it and writes into it
        check_output_dir(opt.output_dir);
        check_output_file(opt.output_dir + "/main.log");
        for (const std::string& name : checkpoint_files(opt.output_dir)) check_output_file(opt.output_dir + "/" + name);
    }
    if (!opt.profile_dir.empty()) prof::check_profile_dir(opt.profile_dir, "--profile"); // before the data is read
}

/*
 * A resume continues the checkpoint's model; a -e given beside -y 1 must describe that model (a dN with its shape,
 * or a model file of its shape), else the run would silently train another model than the one asked for. Without
 * -e the checkpoint's model is used, and the banner names it.
 */
void check_resumed_model(const TrainOptions& opt, const GPT2Config& ckpt, int64_t resume_step) {
    const GPT2Config want = load_model_source(opt.model, opt.seed, /*weights=*/false).cfg;
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

/*
 * A run that does not resume writes its log and checkpoints into -o from step 0: another run's checkpoints there
 * would mix with its own (a later -y 1 resumes whichever is latest, and main.log holds both). Refused, unless none
 * is there; resuming them is the user's call (-y 1), as is another -o.
 */
void check_no_other_run(const TrainOptions& opt) {
    const std::vector<std::string> found = checkpoint_files(opt.output_dir);
    if (found.empty()) return;
    const std::string which = found.size() == 1 ? found[0]
                              : strprintf("%s ... %s, %zu files", found.front().c_str(), found.back().c_str(), found.size());
    throw UsageError(strprintf("-o %s: holds another run's checkpoints (%s)%s; pass -y 1 to resume that run, or choose "
                               "another -o", opt.output_dir.c_str(), which.c_str(),
                               opt.resume ? ", none of them complete (model_N.bin and state_N.bin)" : ""));
}

// The model's shape: random init (dN), a model file, or the latest checkpoint when resuming; headers only.
void plan_model(RunPlan& p) {
    const TrainOptions& opt = p.opt;
    p.resume_step = opt.resume ? find_latest_checkpoint(opt.output_dir) : -1;
    if (p.resume_step < 0 && !opt.output_dir.empty() && p.rank == 0) check_no_other_run(opt);
    p.source = p.resume_step >= 0 ? checkpoint_model_path(opt.output_dir, p.resume_step) : opt.model;
    ModelSource src = load_model_source(p.source, opt.seed, /*weights=*/false);
    p.cfg = src.cfg;
    p.random_init = src.random;
    if (p.resume_step >= 0 && opt.model_given) check_resumed_model(opt, p.cfg, p.resume_step);
    check_seq_len(p.cfg, opt.T);
}

// The train shards (every one's header and tokens checked), the val shards and the samples' tokenizer.
void plan_data(RunPlan& p) {
    const TrainOptions& opt = p.opt;
    const int V = p.cfg.vocab_size;
    p.train = std::make_unique<DataLoader>(opt.train_data, "train", opt.B, opt.T, V, opt.overfit, p.rank, p.world);
    p.val_spec = find_val_spec(opt, p.train->files()[0]);
    p.has_val = !p.val_spec.empty() && opt.val_every > 0; // rank 0 evaluates
    if (p.has_val && p.rank == 0) p.val = std::make_unique<DataLoader>(p.val_spec, "val", opt.B, opt.T, V);
    p.val_batches = p.val ? (int)std::min<size_t>(opt.val_batches, p.val->batches_per_epoch()) : 0;
    if (opt.sample_every > 0) p.tokenizer = find_sample_tokenizer(p.train->files()[0]);
}

// The steps: -x, or one epoch of the train data; the profile window must open within them.
void plan_steps(RunPlan& p) {
    const TrainOptions& opt = p.opt;
    p.grad_accum = opt.grad_accum / p.world;
    p.max_steps = opt.max_steps >= 0
                      ? opt.max_steps
                      : (int)std::min<size_t>(p.train->batches_per_epoch() / opt.grad_accum, INT32_MAX);
    if (p.max_steps == 0 && opt.max_steps < 0)
        throw UsageError(strprintf("-d: one step takes %d micro-batches, more than one epoch of %s has (%zu); lower -d "
                                   "or set -x", opt.grad_accum, opt.train_data.c_str(), p.train->batches_per_epoch()));
    if (!opt.profile_dir.empty() && opt.profile_start > p.max_steps)
        throw UsageError(strprintf("--profile-start: step %d is past the run's last step %d%s", opt.profile_start,
                                   p.max_steps, opt.max_steps >= 0 ? " (-x)" : " (one epoch; set -x)"));
}

// The checkpoint's state must be the one its file names say, for this run: nothing is written otherwise.
void plan_resume(RunPlan& p) {
    if (p.resume_step < 0) return;
    const TrainOptions& opt = p.opt;
    p.state = load_state(checkpoint_state_path(opt.output_dir, p.resume_step), num_parameters(p.cfg), p.resume_step);
    const TrainState& st = p.state;
    if (st.B != opt.B || st.T != opt.T)
        throw UsageError(strprintf("-b/-t: checkpoint was written with B=%d T=%d; resume with the same shape", st.B,
                                   st.T));
    if (st.world != p.world)
        throw UsageError(strprintf("-y: the checkpoint in %s was written by %d data-parallel ranks, this run has "
                                   "%d; resume with the same number", opt.output_dir.c_str(), st.world, p.world));
    if (p.resume_step > p.max_steps)
        throw UsageError(strprintf("-x: the checkpoint in %s is at step %lld, past this run's last step %d",
                                   opt.output_dir.c_str(), (long long)p.resume_step, p.max_steps));
    p.train->restore(st.data);
    p.start_step = (int)p.resume_step;
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

} // namespace

RunPlan plan_model_only(const TrainOptions& opt) {
    RunPlan p;
    p.opt = opt;
    p.rank = -1; // no rank writes: a plan of the model alone
    plan_model(p);
    return p;
}

RunPlan plan_run(const TrainOptions& opt, int rank, int world) {
    RunPlan p;
    p.opt = opt;
    p.rank = rank, p.world = world;
    check_flags(p);
    plan_model(p);
    plan_data(p);
    plan_steps(p);
    plan_resume(p);
    return p;
}

std::unique_ptr<DirLock> claim_output_dir(const RunPlan& plan) {
    const std::string& dir = plan.opt.output_dir;
    if (dir.empty() || plan.rank != 0) return nullptr;
    make_dirs(dir);
    auto lock = std::make_unique<DirLock>(dir, "-o");
    // What the plan read may have changed before the lock was taken (a run that held it until then).
    if (plan.resume_step < 0) check_no_other_run(plan.opt);
    else if (find_latest_checkpoint(dir) != plan.resume_step)
        throw Error(strprintf("-o %s: another run wrote a checkpoint there while this one was starting (it planned to "
                              "resume step %lld); start it again", dir.c_str(), (long long)plan.resume_step));
    if (int n = remove_stale_temporaries(dir))
        printf("removed %d temporary file%s left in %s by a run that was stopped while writing\n", n, n > 1 ? "s" : "",
               dir.c_str());
    return lock;
}

std::vector<float> initial_weights(RunPlan& plan) {
    // A checkpoint from the GPU trainer carries fp32 master weights next to its bf16 model file: they, not the
    // rounded copy, are what training continues from.
    if (!plan.state.master.empty()) return std::move(plan.state.master);
    return load_model_source(plan.source, plan.opt.seed).params;
}

// A rank whose -o, data or model file differs (a node-local copy) would otherwise train on silently from other
// weights, or stop at another step and leave the rest waiting in a collective for ever.
void check_same_run(Communicator& comm, const RunPlan& plan, const std::vector<float>& weights) {
    const TrainOptions& opt = plan.opt;
    const DataLoader& train = *plan.train;
    const int64_t resume_step = plan.resume_step;
    if (opt.resume)
        check_same_on_every_rank(comm, (uint64_t)resume_step,
                                 strprintf("find another checkpoint to resume from in %s than rank 0 (%s); every rank "
                                           "needs the same -o", opt.output_dir.c_str(),
                                           resume_step >= 0 ? strprintf("step %lld", (long long)resume_step).c_str()
                                                            : "none"));
    const uint64_t data[] = {train.files().size(), train.total_tokens(), (uint64_t)plan.max_steps, plan.has_val,
                             shards_fingerprint(train.files())};
    check_same_on_every_rank(comm, fnv1a(data, sizeof data),
                             strprintf("see other data than rank 0 (%zu train shards, %zu tokens, %d steps, val %s); "
                                       "every rank needs the same -i and -j", train.files().size(),
                                       train.total_tokens(), plan.max_steps, plan.has_val ? "on" : "off"));
    check_same_on_every_rank(comm, fnv1a_floats(weights.data(), weights.size()),
                             strprintf("start from other weights than rank 0 (%s); every rank needs the same model",
                                       plan.source.c_str()));
}

RunPlan fixed_steps_plan(const std::string& model, const GPT2Config& cfg, int B, int T, int steps, float lr) {
    RunPlan p;
    TrainOptions& t = p.opt;
    t.model = model;
    t.B = B, t.T = T;
    t.total_batch = (long)B * T, t.grad_accum = 1;
    t.lr = lr, t.schedule = Schedule::constant, t.warmup = 0;
    t.adam = AdamWConfig{};
    t.output_dir = "", t.val_every = 0, t.sample_every = 0, t.checkpoint_every = 0;
    t.max_steps = steps;
    p.source = model;
    p.cfg = cfg;
    p.max_steps = steps;
    return p;
}

} // namespace llmc
