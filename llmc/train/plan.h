/*
 * A training run's plan: every check that can fail before the model is allocated (the flags against each other
 * and the ranks, the output and profile directories, the model source, the data, the checkpoint to resume from),
 * made once and kept, so that the driver (llmc/train/loop.cpp) starts only what has been checked and a test can
 * read what a command line would run without running it. Planning reads headers and the data's shards; it writes
 * nothing, and allocates neither the model nor its weights.
 */
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/train/options.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/tokenizer.h"

namespace llmc {

class Communicator;

struct RunPlan {
    TrainOptions opt;         // as parsed, but profile_dir: this rank's (rank<r>/ under --profile with several ranks)
    int rank = 0, world = 1;  // this process among the data-parallel ranks
    std::string profile_root; // --profile as given ("" = no profile)
    // ---- the model ----
    std::string source;       // what the weights come from: a dN, a model file, or the resumed checkpoint's model
    GPT2Config cfg;
    bool random_init = false; // a dN and no checkpoint: the weights are drawn from --seed
    int64_t resume_step = -1; // the checkpoint this run continues (-1: a fresh run)
    TrainState state;         // that checkpoint's moments, data position and sampling RNG
    // ---- the data ----
    std::unique_ptr<DataLoader> train; // this rank's part of each batch, at the checkpoint's position on a resume
    std::string val_spec;              // the val shards ("" = none)
    bool has_val = false;              // val loss is taken (-v > 0 and val data): the same on every rank
    std::unique_ptr<DataLoader> val;   // rank 0's, which evaluates
    int val_batches = 0;               // per val loss
    std::unique_ptr<GPT2Tokenizer> tokenizer; // decodes samples; null: they print token ids
    // ---- the schedule ----
    int grad_accum = 1; // this rank's micro-batches per step
    int max_steps = 0;  // the last step (-x, or one epoch)
    int start_step = 0; // the first step trained is start_step + 1 (the checkpoint's step on a resume)
};

/*
 * The model part of a run's plan (opt, source, cfg, resume_step), from headers alone: -e's model, or with -y 1
 * the latest checkpoint's in -o (a -e given beside it must describe that model); -t checked against its maximum.
 * What --memory-plan plans.
 */
RunPlan plan_model_only(const TrainOptions& opt);

// The plan of a run of these options as rank `rank` of `world`; throws UsageError for a flag that does
// not fit (exit 2) and Error for an input that cannot be used (exit 1), each naming the flag or file.
RunPlan plan_run(const TrainOptions& opt, int rank, int world);

/*
 * -o made and locked for this run (rank 0 with -o; null otherwise): the lock (DirLock) is held for as long as the
 * returned object lives, and a second run into the same -o is refused naming this one's pid. Once it is held, the
 * checkpoints are checked again against the plan (another run may have written one meanwhile), and the
 * temporaries that a run killed mid-write left are removed.
 */
std::unique_ptr<DirLock> claim_output_dir(const RunPlan& plan);

// The weights the run starts from, in llm.c order: drawn from --seed, the model file's, or the checkpoint's
// (its fp32 master weights when it has them). Takes the master weights out of plan.state.
std::vector<float> initial_weights(RunPlan& plan);

/*
 * The plan of a run its program drives itself through run_steps (llmc/train/loop.h; profile_gpt2cu): `steps`
 * steps of one micro-batch of B x T at a constant learning rate `lr` with AdamW's defaults, on batches the program
 * hands over; no data loaders, val loss, samples, checkpoints or log. `model` names the weights' source.
 */
RunPlan fixed_steps_plan(const std::string& model, const GPT2Config& cfg, int B, int T, int steps, float lr);

/*
 * Every rank must train the same model on the same data from the same point: the -o checkpoint, the data and the
 * starting weights are compared with rank 0's before the backend allocates; a difference is one line from rank 0
 * on every rank.
 */
void check_same_run(Communicator& comm, const RunPlan& plan, const std::vector<float>& weights);

} // namespace llmc
