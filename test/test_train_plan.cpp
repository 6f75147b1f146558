// A training run's plan (llmc/train/plan.h), read without running it: what a command line would train (steps,
// micro-batches, model, checkpoint, profile directory) and the one error each bad input gets, with nothing written
// and no weights allocated.
#include <algorithm>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/train/options.h"
#include "llmc/io/formats.h"
#include "llmc/cpu/programs.h"
#include "llmc/train/dist.h"
#include "llmc/train/loop.h"
#include "llmc/train/plan.h"
#include "test/test_util.h"

using namespace llmc;
using testutil::TempDir;

namespace {

bool exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// Train (20000 tokens) and val (4000) shards of ids < 60, a V=60 model file of maxT 32, and a checkpoint of that
// model at step 3 (B=4, T=16, one rank) in dir/ckpt.
class TrainPlan : public testing::Test {
protected:
    static constexpr int kCkptStep = 3;
    void SetUp() override {
        write_shard(dir / "toy_train.bin", std::vector<uint16_t>(20000, 7));
        write_shard(dir / "toy_val.bin", std::vector<uint16_t>(4000, 5));
        cfg.max_seq_len = 32, cfg.vocab_size = 60, cfg.padded_vocab_size = 64;
        cfg.num_layers = 2, cfg.num_heads = 2, cfg.channels = 32;
        const size_t n = num_parameters(cfg);
        save_model(model_path(), cfg, std::vector<float>(n, 0.5f).data());
        make_dirs(ckpt());
        save_model(checkpoint_model_path(ckpt(), kCkptStep), cfg, std::vector<float>(n, 1.0f).data());
        write_state({});
    }
    // The checkpoint's state: its data position at shard 0, token 192 (three steps of B*T).
    void write_state(std::vector<float> master, int B = 4) const {
        const size_t n = num_parameters(cfg);
        TrainState st{kCkptStep, 99, {0, 192}, B, 16, 1, std::vector<float>(n, 0.25f), std::vector<float>(n, 0.125f),
                      std::move(master)};
        save_state(checkpoint_state_path(ckpt(), kCkptStep), st);
    }
    std::string model_path() const { return dir / "toy_model.bin"; }
    std::string ckpt() const { return dir / "ckpt"; }
    // The plan for `args` after the toy data, model and shape flags that `args` do not give (a flag is given once),
    // as `rank` of `world`.
    RunPlan plan(std::vector<std::string> args, int rank = 0, int world = 1) const {
        std::vector<std::string> all{"train_gpt2"};
        for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
                 {"-i", dir.path}, {"-e", model_path()}, {"-b", "4"}, {"-t", "16"}})
            if (std::find(args.begin(), args.end(), flag) == args.end()) all.insert(all.end(), {flag, value});
        all.insert(all.end(), args.begin(), args.end());
        testutil::CommandLine cl(std::move(all));
        TrainOptions opt = parse_train_options(cl.argc(), cl.argv(), TrainOptions{});
        return plan_run(opt, rank, world);
    }
    // The error plan(args) throws, as main_guard prints it: its exit code and message ("" and 0 when none).
    std::pair<int, std::string> error_of(std::vector<std::string> args, int world = 1) const {
        try {
            plan(args, 0, world);
        } catch (const std::exception& e) {
            return {exit_code_for(e), e.what()};
        }
        return {0, ""};
    }
    TempDir dir;
    GPT2Config cfg;
};

} // namespace

TEST_F(TrainPlan, FreshRunFromAModelFile) {
    RunPlan p = plan({"-x", "7", "-d", "128", "-s", "0"});
    EXPECT_EQ(p.max_steps, 7);
    EXPECT_EQ(p.grad_accum, 2); // 128 tokens of B*T = 64
    EXPECT_EQ(p.start_step, 0);
    EXPECT_EQ(p.resume_step, -1);
    EXPECT_EQ(p.source, model_path());
    EXPECT_FALSE(p.random_init);
    EXPECT_EQ(p.cfg.vocab_size, 60);
    EXPECT_EQ(p.cfg.num_layers, 2);
    ASSERT_TRUE(p.train);
    EXPECT_EQ(p.train->total_tokens(), 20000u);
    EXPECT_TRUE(p.has_val);
    ASSERT_TRUE(p.val);
    EXPECT_EQ(p.val_spec, dir.path);
    EXPECT_EQ(p.val_batches, 20); // -m's 20 of the 62 batches the val shard has
    EXPECT_FALSE(p.tokenizer);
    EXPECT_TRUE(p.profile_root.empty());
    EXPECT_TRUE(p.state.m.empty());
    EXPECT_EQ(initial_weights(p), std::vector<float>(num_parameters(cfg), 0.5f));
}

TEST_F(TrainPlan, WithoutMaxStepsOneEpoch) {
    // (20000 - 1) / 64 = 312 micro-batches in an epoch; two per step.
    EXPECT_EQ(plan({"-d", "128"}).max_steps, 156);
    EXPECT_EQ(plan({}).max_steps, 312);
    // Two ranks share an epoch's micro-batches: each takes one of every step's two.
    RunPlan two = plan({"-d", "128"}, 1, 2);
    EXPECT_EQ(two.max_steps, 156);
    EXPECT_EQ(two.grad_accum, 1);
    EXPECT_FALSE(two.val); // rank 1 does not evaluate
    EXPECT_TRUE(two.has_val);
}

// A dN far too large to allocate plans in an instant: the plan holds its shape, not its weights; and neither -o
// nor --profile is made.
TEST_F(TrainPlan, PlansAModelItDoesNotAllocateAndWritesNothing) {
    RunPlan p = plan({"-e", "d999", "-x", "9", "-o", dir / "out", "--profile", dir / "prof", "--profile-start", "4",
                      "--profile-steps", "3", "-d", "128"},
                     1, 2);
    EXPECT_TRUE(p.random_init);
    EXPECT_EQ(p.source, "d999");
    EXPECT_EQ(p.cfg.num_layers, 999);
    EXPECT_EQ(p.cfg.channels, 64 * 999);
    EXPECT_EQ(p.opt.profile_dir, dir / "prof/rank1");
    EXPECT_EQ(p.profile_root, dir / "prof");
    EXPECT_EQ(p.opt.profile_start, 4);
    EXPECT_EQ(p.opt.profile_steps, 3);
    EXPECT_EQ(p.max_steps, 9);
    EXPECT_FALSE(exists(dir / "out"));
    EXPECT_FALSE(exists(dir / "prof"));
}

TEST_F(TrainPlan, ResumesFromTheLatestCheckpoint) {
    RunPlan p = plan({"-y", "1", "-o", ckpt(), "-x", "10"});
    EXPECT_EQ(p.resume_step, kCkptStep);
    EXPECT_EQ(p.start_step, kCkptStep);
    EXPECT_EQ(p.source, checkpoint_model_path(ckpt(), kCkptStep));
    EXPECT_FALSE(p.random_init);
    EXPECT_EQ(p.max_steps, 10);
    EXPECT_EQ(p.state.rng_state, 99u);
    EXPECT_EQ(p.state.m, std::vector<float>(num_parameters(cfg), 0.25f));
    EXPECT_EQ(p.train->position().offset, 192);
    // A checkpoint without master weights continues from its model file's.
    EXPECT_EQ(initial_weights(p), std::vector<float>(num_parameters(cfg), 1.0f));
    // With them (a GPU checkpoint), from those.
    write_state(std::vector<float>(num_parameters(cfg), 2.0f));
    RunPlan gpu = plan({"-y", "1", "-o", ckpt(), "-x", "10"});
    EXPECT_EQ(initial_weights(gpu), std::vector<float>(num_parameters(cfg), 2.0f));
    // No checkpoint: a fresh run from -e.
    RunPlan none = plan({"-y", "1", "-o", dir / "empty", "-x", "10"});
    EXPECT_EQ(none.resume_step, -1);
    EXPECT_EQ(none.source, model_path());
    EXPECT_FALSE(exists(dir / "empty"));
}

// Each bad input's one line and exit code (2: a flag, 1: a file), and no -o made for any of them.
TEST_F(TrainPlan, BadInputsAreRefusedWithOneLine) {
    write_shard(dir / "not_a_dir", std::vector<uint16_t>(100, 1));
    const std::string out = dir / "out";
    struct Case {
        std::vector<std::string> args;
        int world, code;
        std::string starts;
    } cases[] = {
        {{"-e", "gpt5"}, 1, 2, "-e: 'gpt5' is neither dN (e.g. d12) nor an existing model file"},
        {{"-t", "64"}, 1, 2, "-t: sequence length 64 exceeds the model's maximum 32"},
        {{"-d", "128"}, 3, 2, "-d: total batch 128 tokens is 2 micro-batches of B*T = 64, which 3 ranks cannot share"},
        {{"--profile", dir / "prof", "-x", "5", "--profile-start", "9"}, 1, 2,
         "--profile-start: step 9 is past the run's last step 5 (-x)"},
        {{"--profile", dir / "prof", "-d", "1536", "--profile-start", "20"}, 1, 2,
         "--profile-start: step 20 is past the run's last step 13 (one epoch; set -x)"},
        {{"-i", dir / "absent"}, 1, 1, dir / "absent: "},
        {{"-o", dir / "not_a_dir/out"}, 1, 1, dir / "not_a_dir/out: cannot create directory"},
        {{"-d", "32768"}, 1, 2, "-d: one step takes 512 micro-batches, more than one epoch"},
        {{"-y", "1", "-o", ckpt(), "-b", "2"}, 1, 2, "-b/-t: checkpoint was written with B=4 T=16"},
        {{"-y", "1", "-o", ckpt(), "-x", "2"}, 1, 2, "-x: the checkpoint in " + ckpt() + " is at step 3, past"},
        {{"-y", "1", "-o", ckpt(), "-d", "128"}, 2, 2, "-y: the checkpoint in " + ckpt() + " was written by 1"},
        {{"-y", "1", "-o", ckpt(), "-e", "d2"}, 1, 2, "-e d2: the checkpoint in " + ckpt() + " (step 3) holds another"},
    };
    for (const Case& c : cases) {
        std::vector<std::string> args = c.args;
        if (c.args[0] != "-y" && c.args[0] != "-o") args.insert(args.end(), {"-o", out});
        auto [code, message] = error_of(args, c.world);
        EXPECT_EQ(code, c.code) << message;
        EXPECT_EQ(message.rfind(c.starts, 0), 0u) << message;
        EXPECT_FALSE(exists(out)) << c.starts;
    }
    // A state file that does not fit the model is found by the plan, before the weights are read.
    save_state(checkpoint_state_path(ckpt(), kCkptStep), TrainState{kCkptStep, 0, {}, 4, 16, 1, {1.0f}, {1.0f}, {}});
    auto [code, message] = error_of({"-y", "1", "-o", ckpt()});
    EXPECT_EQ(code, 1);
    EXPECT_NE(message.find("state is for 1 parameters, the model has"), std::string::npos) << message;
}

// Random token ids < 60 that count the batches taken, for run_steps (profile_gpt2cu hands it random batches).
class CountedBatches : public RandomBatches {
public:
    CountedBatches(int B, int T) : RandomBatches(B, T, 60, 7) {}
    void next_batch() override {
        taken++;
        RandomBatches::next_batch();
    }
    int taken = 0;
};

// run_steps trains a plan its program made on the batches it is handed: one per micro-batch of each of the plan's
// steps, the plan's own loader untouched; the weights move and the loss stays finite (it throws otherwise).
TEST_F(TrainPlan, RunStepsTrainsOnTheBatchesItIsHanded) {
    RunPlan p = plan({"-x", "3", "-d", "128", "-v", "0", "-s", "0"}); // B*T = 64: 2 micro-batches a step
    ASSERT_EQ(p.grad_accum, 2);
    const DataPosition before = p.train->position();
    const std::unique_ptr<Communicator> comm = single_process_communicator();
    std::unique_ptr<TrainBackend> be = cpu_train_program().make_backend(p.cfg, train_shape(p.opt), *comm);
    const std::vector<float> w0 = initial_weights(p);
    be->load_weights(w0);
    CountedBatches batches(4, 16);
    run_steps("train_gpt2", p, *be, *comm, batches, nullptr);
    EXPECT_EQ(batches.taken, 3 * 2);
    EXPECT_EQ(p.train->position().shard, before.shard);
    EXPECT_EQ(p.train->position().offset, before.offset);
    EXPECT_NE(be->weights(), w0);
    // Batches of another shape than the backend's: refused before a step.
    CountedBatches other(2, 16);
    EXPECT_THROW(run_steps("train_gpt2", p, *be, *comm, other, nullptr), Error);
    EXPECT_EQ(other.taken, 0);
}

// What run_steps does not do (val loss, samples, checkpoints, a log, several ranks) it refuses before a step.
TEST_F(TrainPlan, RunStepsRefusesAPlanItCannotRun) {
    const std::unique_ptr<Communicator> comm = single_process_communicator();
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"-x", "2", "-v", "1", "-s", "0"}, {"-x", "2", "-v", "0", "-s", "1"},
             {"-x", "2", "-v", "0", "-s", "0", "-o", dir / "out"}}) {
        RunPlan p = plan(args);
        std::unique_ptr<TrainBackend> be = cpu_train_program().make_backend(p.cfg, train_shape(p.opt), *comm);
        CountedBatches batches(4, 16);
        try {
            run_steps("train_gpt2", p, *be, *comm, batches, nullptr);
            ADD_FAILURE() << args[3] << " " << args[5] << ": taken";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()), "run_steps: a plan with val loss, samples, checkpoints, a log or several "
                                             "ranks needs run_training");
        }
        EXPECT_EQ(batches.taken, 0);
    }
}
