// scripts/sweep.py end to end: a tiny CPU training sweep through ./train_gpt2 (rows checked against each run's
// own log, a failing configuration recorded as a row, resume, the plots), the inference path through a stand-in
// for the inference programs (test/fake_infer.py: oom, timeout, the --json summary), and the script's errors.
// The sweeps plot, so they need matplotlib (LLMC_SKIP_PLOT_TESTS=1 skips them, as test_plots.cpp's).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/io/formats.h"
#include "llmc/model/gpt2_config.h"
#include "test/energy_sample.h"
#include "test/one_line.h"
#include "test/test_util.h"

using testutil::expect_one_line;
using testutil::has;
using testutil::is_png;
using testutil::read_csv;
using testutil::run;
using testutil::RunResult;
using testutil::slurp;
using testutil::TempDir;

namespace {

// Relative tolerance of a number the sweep wrote (6 significant digits) against the one it was read from.
constexpr double kCsvRel = 1e-5;

void expect_near_rel(double got, double want, const std::string& what) {
    EXPECT_NEAR(got, want, kCsvRel * std::fabs(want) + 1e-9) << what;
}

// A V=60 toy vocabulary: train and val shards, two model files (1 and 2 layers) and a truncated one.
class Sweep : public testing::Test {
protected:
    void SetUp() override {
        std::mt19937 g(std::random_device{}());
        auto tokens = [&](size_t n) {
            std::vector<uint16_t> t(n);
            for (auto& x : t) x = (uint16_t)(g() % 60);
            return t;
        };
        (void)!system(("mkdir -p " + (dir / "data")).c_str());
        llmc::write_shard(dir / "data/toy_train.bin", tokens(8000));
        llmc::write_shard(dir / "data/toy_val.bin", tokens(2000));
        for (int L : {1, 2}) {
            llmc::GPT2CPU<float> m(config(L));
            m.init_random((uint64_t)g());
            llmc::save_model(model(L), config(L), m.params_memory.data());
        }
        std::string whole = slurp(model(1));
        FILE* f = fopen((dir / "bad.bin").c_str(), "wb");
        fwrite(whole.data(), 1, whole.size() / 2, f);
        fclose(f);
    }
    static llmc::GPT2Config config(int L) {
        llmc::GPT2Config c;
        c.max_seq_len = 32, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = L, c.num_heads = 2;
        c.channels = 32;
        return c;
    }
    std::string model(int L) const { return dir / ("toy" + std::to_string(L) + ".bin"); }
    std::string out() const { return dir / "out"; }
    TempDir dir;
};

RunResult sweep(const std::string& args) { return run("python3 scripts/sweep.py " + args); }

// The step lines' "X ms" and "loss X" fields, and the last val loss, from a trainer's log.
struct TrainLog {
    std::vector<double> ms, loss;
    double val_loss = NAN;
};
TrainLog read_train_log(const std::string& text) {
    TrainLog t;
    std::regex step(R"(step +\d+/\d+ \| loss ([0-9.]+) \|.*?\| ([0-9.]+) ms\b)"), val(R"(val loss ([0-9.]+))");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), step); it != std::sregex_iterator(); ++it)
        t.loss.push_back(std::stod((*it)[1])), t.ms.push_back(std::stod((*it)[2]));
    for (auto it = std::sregex_iterator(text.begin(), text.end(), val); it != std::sregex_iterator(); ++it)
        t.val_loss = std::stod((*it)[1]);
    return t;
}

// Whether process pid exists and has not ended (a zombie has ended).
bool running(int pid) {
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// Waits up to `seconds` for a file to exist.
bool wait_for_file(const std::string& path, double seconds) {
    for (auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
         std::chrono::steady_clock::now() < end; std::this_thread::sleep_for(std::chrono::milliseconds(50)))
        if (std::ifstream(path)) return true;
    return false;
}

// An executable shell script.
void write_script(const std::string& path, const std::string& text) {
    std::ofstream(path) << "#!/bin/sh\n" << text;
    (void)!system(("chmod +x " + path).c_str());
}

int count_lines(const std::string& text, const std::string& pattern) {
    std::regex re(pattern);
    int n = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) n++;
    return n;
}

} // namespace

TEST_F(Sweep, TrainRowsAgreeWithTheirLogsAndResumeAddsAFailingModel) {
    REQUIRE_MATPLOTLIB();
    const std::string grid = "--cpu --mode train --batch 1,2 --seq 16 --warmup 1 --steps 3 -i " + (dir / "data") +
                             " -o " + out() + " --models ";
    auto r = sweep(grid + model(1) + "," + model(2));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // One progress line per configuration, with its result and the time left.
    EXPECT_EQ(count_lines(r.output, R"(\n?\[[1-4]/4\] train cpu \S+ B=[12] T=16: ok, [0-9.]+ ms/step, [0-9]+ tok/s, )"
                                    R"([0-9]+ MiB; [0-9]+m[0-9]{2}s left\n)"), 4) << r.output;
    // The columns doc/sweeps.md documents, in its order (rows are read by these names below).
    const std::string csv = slurp(out() + "/sweep.csv");
    EXPECT_EQ(csv.substr(0, csv.find('\n') + 1),
              "mode,device,model,params,B,T,prompt_len,gen_len,status,ms_per_step,tok_s,peak_mem_mib,mem_limit_mib,"
              "mfu_pct,avg_power_w,j_per_token,flops_per_w,energy_j_per_token,train_loss,val_loss,fwd_ms,bwd_ms,"
              "opt_ms,ttft_ms,"
              "prefill_tok_s,decode_tok_s,latency_p50_ms,latency_p90_ms,log,profile\n");
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 4u);
    int i = 0;
    for (int L : {1, 2})
        for (int B : {1, 2}) {
            auto& row = rows[i++];
            std::string what = "L=" + std::to_string(L) + " B=" + std::to_string(B);
            EXPECT_EQ(row["mode"], "train") << what;
            EXPECT_EQ(row["device"], "cpu") << what;
            EXPECT_EQ(row["model"], model(L)) << what;
            EXPECT_EQ(row["B"], std::to_string(B)) << what;
            EXPECT_EQ(row["T"], "16") << what;
            EXPECT_EQ(row["status"], "ok") << what;
            EXPECT_EQ(row["params"], std::to_string(llmc::num_parameters(config(L)))) << what;
            // Timed steps are the ones after the warmup; tok/s is B*T tokens over their mean time.
            TrainLog log = read_train_log(slurp(out() + "/" + row["log"]));
            ASSERT_EQ(log.ms.size(), 4u) << what;
            double ms = (log.ms[1] + log.ms[2] + log.ms[3]) / 3;
            expect_near_rel(std::stod(row["ms_per_step"]), ms, what + " ms_per_step");
            expect_near_rel(std::stod(row["tok_s"]), B * 16 * 1e3 / ms, what + " tok_s");
            expect_near_rel(std::stod(row["train_loss"]), log.loss.back(), what + " train_loss");
            expect_near_rel(std::stod(row["val_loss"]), log.val_loss, what + " val_loss");
            // Max RSS of the trainer: more than its parameters, gradients and AdamW state, less than the machine.
            double params_mib = 16.0 * llmc::num_parameters(config(L)) / 1048576;
            EXPECT_GT(std::stod(row["peak_mem_mib"]), params_mib) << what;
            EXPECT_LT(std::stod(row["peak_mem_mib"]), std::stod(row["mem_limit_mib"])) << what;
            EXPECT_EQ(row["avg_power_w"], "") << what; // not measured on the CPU
            EXPECT_EQ(row["profile"], "") << what;
        }
    for (const char* png : {"train_throughput.png", "train_memory.png", "train_efficiency.png", "train_phases.png"})
        EXPECT_TRUE(is_png(out() + "/" + png)) << png;

    // Again with a damaged model file added: the four rows are kept as they are, the new model's two
    // configurations run, fail, and are rows with the trainer's error line.
    const std::string before = slurp(out() + "/sweep.csv");
    auto again = sweep(grid + model(1) + "," + model(2) + "," + (dir / "bad.bin"));
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_TRUE(has(again.output, "resuming: 4 configuration(s) already in")) << again.output;
    EXPECT_EQ(count_lines(again.output, R"(\[[12]/2\] train cpu \S+bad.bin B=[12] T=16: error: )"), 2) << again.output;
    const std::string after = slurp(out() + "/sweep.csv");
    EXPECT_EQ(after.substr(0, before.size()), before);
    rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 6u);
    for (int k : {4, 5}) {
        EXPECT_EQ(rows[k]["model"], dir / "bad.bin");
        EXPECT_EQ(rows[k]["status"].rfind("error: ", 0), 0u) << rows[k]["status"];
        EXPECT_TRUE(has(rows[k]["status"], "bad.bin")) << rows[k]["status"];
        EXPECT_EQ(rows[k]["ms_per_step"], "");
        EXPECT_TRUE(has(slurp(out() + "/" + rows[k]["log"]), rows[k]["status"]));
    }
}

TEST_F(Sweep, ProfiledTrainingRowsSplitTheStepByPhase) {
    REQUIRE_MATPLOTLIB();
    auto r = sweep("--cpu --models " + model(1) + " --batch 2 --seq 16 --warmup 1 --steps 2 --profile -i " +
                   (dir / "data") + " -o " + out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 1u);
    auto& row = rows[0];
    ASSERT_EQ(row["status"], "ok");
    // The phases are the profile's per-step means; they add up to no more than the step's wall time.
    std::string json = slurp(out() + "/" + row["profile"] + "/profile.json");
    ASSERT_FALSE(json.empty()) << "profile column: '" << row["profile"] << "'";
    auto prof = nlohmann::json::parse(json);
    ASSERT_EQ(prof["steps"].size(), 2u);
    double sum = 0;
    for (const char* ph : {"fwd", "bwd", "opt"}) {
        std::string key = std::string(ph) + "_ms";
        double want = (prof["steps"][0][key].get<double>() + prof["steps"][1][key].get<double>()) / 2;
        expect_near_rel(std::stod(row[key]), want, key);
        sum += std::stod(row[key]);
    }
    EXPECT_LE(sum, std::stod(row["ms_per_step"]) * 1.05);
    EXPECT_TRUE(is_png(out() + "/train_phases.png"));
}

// With --energy each training run gets the trainers' --energy, and a configuration whose profile has energy.csv
// gets energy_j_per_token: the whole step's joules (energy.csv's step row) over the profile's tokens per step
// (B x T x grad_accum of its context, here 4 x 1024 x 2). Without --energy the profile has no energy.csv and the
// cell is empty; --energy without --profile is refused. The trainer is a stand-in that prints its step lines and
// leaves a profile directory: the sample with energy.csv where it was given --energy, without otherwise.
TEST_F(Sweep, EnergyPerTokenFromTheProfilesEnergyCsv) {
    const std::string with = dir / "with_energy", without = dir / "without_energy";
    testutil::write_energy_sample("test/data/sample_profile", with);
    ASSERT_EQ(run("python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); "
                  "p[\"context\"][\"batch\"][\"grad_accum\"] = 2; json.dump(p, open(sys.argv[1], \"w\"))' " + with +
                  "/profile.json").exit_code, 0);
    ASSERT_EQ(run("cp -r " + with + " " + without + " && rm " + without + "/energy.csv").exit_code, 0);
    write_script(dir / "trainer.sh", "prof=; from=" + without + "\n"
                                     "while [ $# -gt 0 ]; do\n"
                                     "  case $1 in --profile) prof=$2; shift;; --energy) from=" + with + ";; esac; shift\n"
                                     "done\n"
                                     "for i in 1 2 3; do echo \"step $i/3 | loss 4.0 | 10.0 ms\"; done\n"
                                     "cp -r $from \"$prof\"\n");
    const std::string grid = "--cpu --program " + (dir / "trainer.sh") + " --models d1 --batch 1,2 --seq 16 --warmup 1 "
                             "--steps 2 --profile --no-plots -i " + (dir / "data") + " -o ";
    for (bool energy : {true, false}) {
        SCOPED_TRACE(energy ? "--energy" : "without --energy");
        const std::string o = dir / (energy ? "energy" : "plain");
        auto r = sweep(grid + o + (energy ? " --energy" : ""));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        auto rows = read_csv(o + "/sweep.csv");
        ASSERT_EQ(rows.size(), 2u);
        for (auto& row : rows) {
            ASSERT_EQ(row["status"], "ok") << row["B"];
            EXPECT_NE(row["fwd_ms"], ""); // the profile is read either way
            const std::string energy_csv = o + "/" + row["profile"] + "/energy.csv";
            ASSERT_EQ(llmc::file_exists(energy_csv), energy) << energy_csv;
            if (!energy) {
                EXPECT_EQ(row["energy_j_per_token"], "") << row["B"];
                continue;
            }
            double step_j = -1;
            for (auto& e : read_csv(energy_csv))
                if (e["sub_block"] == "step") step_j = std::stod(e["j_per_step"]);
            ASSERT_EQ(step_j, 0.11);
            expect_near_rel(std::stod(row["energy_j_per_token"]), step_j / (4 * 1024 * 2), "energy_j_per_token");
        }
    }
    expect_one_line(sweep("--cpu --program " + (dir / "trainer.sh") + " --models d1 --batch 1 --seq 16 --no-plots -i " +
                          (dir / "data") + " -o " + (dir / "refused") + " --energy"),
                    2, "sweep.py: error: ", "--energy: the energy per sub-block is measured into each run's profile; add "
                                            "--profile");
    EXPECT_FALSE(llmc::file_exists(dir / "refused"));
}

// A configuration whose memory plan does not fit is a row "oom (planned)", and never launched: its log is the
// plan's answer alone.
TEST_F(Sweep, PlannedOomIsNotLaunched) {
    auto r = run("FAKE_INFER_PLAN_MAX_BATCH=2 python3 scripts/sweep.py --gpu --mode infer --program test/fake_infer.py "
                 "--models d1 --batch 1,4 --prompt-len 8 --gen-len 4 --device-memory 1GiB --no-plots -o " + out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 2u);
    for (auto& row : rows) {
        const std::string log = slurp(out() + "/" + row["log"]);
        if (row["B"] == "4") {
            EXPECT_EQ(row["status"], "oom (planned)");
            EXPECT_TRUE(has(log, "--memory-plan --device-memory 1GiB")) << log;
            EXPECT_FALSE(has(log, "summary")) << log;
        } else {
            EXPECT_EQ(row["status"], "ok");
            EXPECT_TRUE(has(log, "summary")) << log;
        }
    }
}

// The real GPU trainer's plan, on any machine: GPT-2 124M at B=64, T=1024 does not fit 8 GiB.
TEST_F(Sweep, TrainerPlanSkipsAConfigurationThatCannotFit) {
    if (!llmc::file_exists("./train_gpt2cu")) GTEST_SKIP() << "./train_gpt2cu not built (needs nvcc)";
    auto r = run("python3 scripts/sweep.py --gpu --models d12 --batch 64 --seq 1024 --device-memory 8GiB -i " +
                 std::string("test/data") + " --no-plots -o " + out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["status"], "oom (planned)") << slurp(out() + "/" + rows[0]["log"]);
}

TEST_F(Sweep, InferenceRowsFromTheJsonSummaryWithOomAndTimeout) {
    REQUIRE_MATPLOTLIB();
    // -b 4 does not fit, -b 8 never finishes (stopped by the 1 s limit).
    auto r = run("FAKE_INFER_MAX_BATCH=2 FAKE_INFER_HANG_BATCH=8 python3 scripts/sweep.py --gpu --mode infer "
                 "--program test/fake_infer.py --models d1 --batch 1,2,4,8 --prompt-len 8,16 --gen-len 4 "
                 "--timeout 1 -o " + out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 8u);
    const double params = (double)llmc::num_parameters(llmc::gpt2_config_for_depth(1));
    for (auto& row : rows) {
        std::string what = "B=" + row["B"] + " prompt=" + row["prompt_len"];
        EXPECT_EQ(row["mode"], "infer");
        EXPECT_EQ(row["gen_len"], "4");
        EXPECT_EQ(row["T"], "");
        int B = std::stoi(row["B"]);
        if (B == 4) { // the refusal names the free device memory: the row's limit
            EXPECT_EQ(row["status"], "oom") << what;
            std::smatch free;
            std::string log = slurp(out() + "/" + row["log"]);
            ASSERT_TRUE(std::regex_search(log, free, std::regex(R"(MiB of GPU memory, ([0-9]+) MiB are free)"))) << log;
            EXPECT_EQ(row["mem_limit_mib"], free[1].str()) << what;
            continue;
        }
        if (B == 8) {
            EXPECT_EQ(row["status"], "timeout") << what;
            continue;
        }
        ASSERT_EQ(row["status"], "ok") << what;
        // The summary line of the program's own output, and what the sweep derives from it.
        std::string log = slurp(out() + "/" + row["log"]);
        size_t at = log.rfind("{\"summary\"");
        ASSERT_NE(at, std::string::npos) << log;
        auto s = nlohmann::json::parse(log.substr(at, log.find('\n', at) - at))["summary"];
        for (const char* k : {"ttft_ms", "prefill_tok_s", "decode_tok_s", "latency_p50_ms", "latency_p90_ms",
                              "peak_mem_mib", "avg_power_w", "j_per_token"})
            expect_near_rel(std::stod(row[k]), s[k].get<double>(), what + " " + k);
        expect_near_rel(std::stod(row["tok_s"]), s["decode_tok_s"].get<double>(), what + " tok_s");
        expect_near_rel(std::stod(row["ms_per_step"]), B * 1e3 / s["decode_tok_s"].get<double>(), what + " ms");
        expect_near_rel(std::stod(row["flops_per_w"]), 2 * params / s["j_per_token"].get<double>(), what + " FLOP/W");
        EXPECT_EQ(row["params"], std::to_string((size_t)params));
    }
    for (const char* png : {"infer_throughput.png", "infer_ttft.png", "infer_memory.png", "infer_efficiency.png"})
        EXPECT_TRUE(is_png(out() + "/" + png)) << png;
}

// The inference mode through the real CPU program, ./infer_gpt2: each row is its run's --json summary line.
TEST_F(Sweep, InferenceRowsFromInferGpt2) {
    REQUIRE_MATPLOTLIB();
    auto r = sweep("--cpu --mode infer --models " + model(1) + " --batch 1,2 --prompt-len 4 --gen-len 3 -o " + out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 2u) << r.output;
    for (auto& row : rows) {
        const std::string what = "B=" + row["B"];
        EXPECT_EQ(row["status"], "ok") << what;
        EXPECT_EQ(row["prompt_len"], "4") << what;
        EXPECT_EQ(row["gen_len"], "3") << what;
        nlohmann::json summary;
        std::istringstream log(slurp(out() + "/" + row["log"]));
        for (std::string line; std::getline(log, line);)
            if (line.rfind("{\"summary\"", 0) == 0) summary = nlohmann::json::parse(line)["summary"];
        ASSERT_TRUE(summary.is_object()) << what;
        EXPECT_EQ(summary["B"].get<int>(), std::stoi(row["B"])) << what;
        for (const char* k : {"ttft_ms", "prefill_tok_s", "decode_tok_s", "latency_p50_ms", "latency_p90_ms"})
            expect_near_rel(std::stod(row[k]), summary[k].get<double>(), what + " " + k);
        // A decode step makes one token for each of the B sequences.
        expect_near_rel(std::stod(row["ms_per_step"]), std::stoi(row["B"]) * 1e3 / summary["decode_tok_s"].get<double>(),
                        what + " ms_per_step");
    }
    for (const char* png : {"infer_throughput.png", "infer_ttft.png", "infer_memory.png", "infer_efficiency.png"})
        EXPECT_TRUE(is_png(out() + "/" + png)) << png;
}

// The sweep counts parameters itself (a configuration that fails before the program prints its table still has
// them): the same count as the trainers' for every kind of dN.
TEST(SweepParams, DepthDescriptorsCountAsTheTrainersDo) {
    for (int depth : {1, 3, 12, 24, 36, 48}) {
        auto r = run("python3 -c 'import sys; sys.path.insert(0, \"scripts\"); import sweep; "
                     "print(sweep.model_params(\"d" + std::to_string(depth) + "\"))'");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_EQ(r.output, std::to_string(llmc::num_parameters(llmc::gpt2_config_for_depth(depth))) + "\n")
            << "d" << depth;
    }
}

// Step lines are read field by field: fields added to the line (elapsed time, ETA, ...) leave the others as they
// were, wherever they stand.
TEST(SweepParse, StepLineFieldsWhateverElseTheLineCarries) {
    std::mt19937 g(std::random_device{}());
    std::uniform_real_distribution<double> u(0.5, 5000);
    double loss = u(g) / 1000, ms = u(g), tok = std::round(u(g)), mfu = u(g) / 100, mem = u(g) / 1000;
    char line[512];
    snprintf(line, sizeof(line),
             "step    3/8 | loss %.6f | norm 1.0 | lr 3.00e-04 | %.2f ms (elapsed 37 s, ETA 1m02s) | %.0f tok/s | "
             "elapsed 12 s | MFU %.1f%% | ETA 3m20s | mem %.2f GiB",
             loss, ms, tok, mfu, mem);
    auto r = run(std::string("python3 -c 'import sys, json; sys.path.insert(0, \"scripts\"); import sweep; "
                             "print(json.dumps(sweep.step_fields(sys.argv[1])))' '") + line + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto f = nlohmann::json::parse(r.output);
    EXPECT_NEAR(f["loss"].get<double>(), loss, 1e-6) << line;
    EXPECT_NEAR(f["ms"].get<double>(), ms, 0.005) << line;
    EXPECT_EQ(f["tok/s"].get<double>(), tok) << line;
    EXPECT_NEAR(f["MFU"].get<double>(), mfu, 0.05) << line;
    EXPECT_NEAR(f["mem"].get<double>(), mem, 0.005) << line;
    EXPECT_FALSE(f.contains("ETA")) << line; // not a number
}

// A sweep killed in its first configuration (kill -9, or SIGHUP when its terminal closes) leaves a sweep.csv that
// the same command resumes; SIGHUP also stops the running configuration, as SIGTERM and Ctrl-C do.
TEST_F(Sweep, KilledInItsFirstConfigurationTheSameCommandResumes) {
    for (int sig : {SIGKILL, SIGHUP}) {
        SCOPED_TRACE(strsignal(sig));
        TempDir d;
        const std::string out = d / "out", pids = d / "pids";
        // Says who started it (the sweep) and who it is, then hangs.
        write_script(d / "hang.sh", "echo $PPID $$ > " + pids + ".tmp && mv " + pids + ".tmp " + pids + "\nexec sleep 60\n");
        const std::string grid = "--cpu --mode infer --models d1 --batch 1 --no-plots -o " + out;
        (void)!system(("(python3 scripts/sweep.py --program " + (d / "hang.sh") + " " + grid + " > " + (d / "log") +
                       " 2>&1; echo $? > " + (d / "rc") + ") &")
                          .c_str());
        ASSERT_TRUE(wait_for_file(pids, 60)) << slurp(d / "log");
        int sweep_pid = 0, run_pid = 0;
        std::ifstream(pids) >> sweep_pid >> run_pid;
        ASSERT_GT(sweep_pid, 1);
        ASSERT_GT(run_pid, 1);
        kill(sweep_pid, sig);
        ASSERT_TRUE(wait_for_file(d / "rc", 30));
        if (sig == SIGHUP) {
            EXPECT_FALSE(running(run_pid)) << "the configuration outlived its sweep";
        }
        if (running(run_pid)) kill(run_pid, SIGKILL); // kill -9 leaves it: nothing could stop it
        const std::string csv = slurp(out + "/sweep.csv");
        EXPECT_EQ(csv.substr(0, 17), "mode,device,model") << "'" << csv << "'";
        EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1) << csv; // the header only

        auto again = sweep("--program test/fake_infer.py " + grid);
        ASSERT_EQ(again.exit_code, 0) << again.output;
        auto rows = read_csv(out + "/sweep.csv");
        ASSERT_EQ(rows.size(), 1u);
        EXPECT_EQ(rows[0]["status"], "ok");
    }
}

// --timeout stops every process of the run, also those that left its session: at -b 1 the program waits for
// one process in a session of its own (setsid) and leaves another behind; at -b 2 it hands over to one that
// forks away and so returns at once (setsid(1) started as a session leader). Both rows say timeout, nothing
// the runs started is left, and the sweep does not wait for them.
TEST_F(Sweep, TimeoutStopsEveryProcessOfTheRun) {
    const std::vector<std::string> pid_files = {dir / "left.pid", dir / "waited.pid", dir / "forked.pid"};
    write_script(dir / "escape.sh", "if [ \"$4\" = 1 ]; then\n"
                                    "  setsid sh -c 'echo $$ > " + pid_files[0] + "; exec sleep 60' &\n"
                                    "  setsid sh -c 'echo $$ > " + pid_files[1] + "; exec sleep 60'\n"
                                    "else\n"
                                    "  exec setsid sh -c 'echo $$ > " + pid_files[2] + "; exec sleep 60'\n"
                                    "fi\n");
    const auto start = std::chrono::steady_clock::now();
    auto r = sweep("--cpu --mode infer --program " + (dir / "escape.sh") +
                   " --models d1 --batch 1,2 --timeout 1 --no-plots -o " + out());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_LT(seconds, 30) << r.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 2u);
    for (auto& row : rows) EXPECT_EQ(row["status"], "timeout") << "B=" << row["B"];
    for (const std::string& f : pid_files) {
        int pid = 0;
        std::ifstream(f) >> pid;
        ASSERT_GT(pid, 1) << f;
        EXPECT_FALSE(running(pid)) << f << ": still running";
        if (running(pid)) kill(pid, SIGKILL);
    }
}

// The plots of a sweep on both devices, whose two sequence lengths took the same memory: every line has its own
// marker and line style (lines that coincide would otherwise hide each other), each device's limit says what it
// is (host RAM on the CPU, the free GPU memory on the GPU), and every plot with data has both axes labelled with
// their units.
TEST_F(Sweep, PlotsTellLinesApartAndNameEachLimit) {
    REQUIRE_MATPLOTLIB();
    std::ofstream(dir / "plots.py") << R"py(import csv, json, os, sys
sys.path.insert(0, "scripts")
import plot_sweep, sweep
d = sys.argv[1]
rows = []
for device, limit in (("cpu", 24105), ("gpu", 81000)):
    for T in (32, 64):
        for B in (1, 2, 4):
            fits = device == "cpu" or B < 4
            rows.append(dict(mode="train", device=device, model="d2", params=6966784, B=B, T=T,
                             status="ok" if fits else "oom", tok_s=B * 100 if fits else "",
                             peak_mem_mib=137.25 * B if fits else "", mem_limit_mib=limit))
with open(d + "/sweep.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=sweep.COLUMNS, restval="")
    w.writeheader()
    w.writerows(rows)
seen, finish = {}, plot_sweep.finish
def record(plt, fig, ax, out, title, legend=True):
    seen[os.path.basename(out)] = {"xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "lines": [
        [l.get_label(), l.get_marker(), l.get_linestyle()] for l in ax.get_lines() if not l.get_label().startswith("_")]}
    finish(plt, fig, ax, out, title, legend)
plot_sweep.finish = record
plot_sweep.plot(d + "/sweep.csv", d)
print(json.dumps(seen))
)py";
    auto r = run("python3 " + (dir / "plots.py") + " " + dir.path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto plots = nlohmann::json::parse(r.output);
    for (const char* png : {"train_throughput.png", "train_memory.png"}) {
        SCOPED_TRACE(png);
        std::map<std::string, std::string> style_of; // a data line's label -> its marker and line style
        std::vector<std::string> labels;
        for (const auto& l : plots[png]["lines"]) {
            labels.push_back(l[0]);
            if (has(l[0], " d2 T=")) style_of[l[0]] = l[1].get<std::string>() + " " + l[2].get<std::string>();
        }
        ASSERT_EQ(style_of.size(), 4u) << plots[png].dump(); // CPU and GPU, T=32 and T=64
        std::set<std::string> styles;
        for (auto& [label, style] : style_of) styles.insert(style);
        EXPECT_EQ(styles.size(), 4u) << plots[png].dump();
        if (std::string(png) == "train_memory.png") {
            EXPECT_NE(std::find(labels.begin(), labels.end(), "host RAM 24105 MiB"), labels.end()) << plots[png].dump();
            EXPECT_NE(std::find(labels.begin(), labels.end(), "free GPU memory 81000 MiB"), labels.end())
                << plots[png].dump();
            for (const std::string& l : labels) EXPECT_FALSE(has(l, "device limit")) << l;
        }
    }
    for (auto& [png, p] : plots.items()) {
        if (p["lines"].empty()) continue; // a placeholder: nothing to show (no power, no profiled row)
        EXPECT_TRUE(has(p["xlabel"], "(")) << png << ": x axis '" << p["xlabel"] << "'";
        EXPECT_TRUE(has(p["ylabel"], "(")) << png << ": y axis '" << p["ylabel"] << "'";
    }
}

TEST_F(Sweep, ClearErrors) {
    auto one_line = [](const RunResult& r, int code, const std::string& part) {
        expect_one_line(r, code, "sweep.py: error: ", part);
    };
    const std::string data = " -i " + (dir / "data") + " -o " + out();
    one_line(sweep("--models d1" + data), 2, "--cpu");
    one_line(sweep("--cpu --gpu --models d1" + data), 2, "--gpu");
    one_line(sweep("--cpu --models d1 --batch 0" + data), 2, "--batch: '0'");
    one_line(sweep("--cpu --models d1 --seq 16,x" + data), 2, "--seq: '16,x'");
    one_line(sweep("--cpu --models gpt5" + data), 2, "--models: 'gpt5' is neither dN");
    one_line(sweep("--cpu --models d1 --steps 0" + data), 2, "--steps");
    // A configuration named twice would be two rows of one key; an empty grid or no time limit, not a sweep.
    one_line(sweep("--cpu --models d1,d1" + data), 2, "--models: 'd1' is given twice");
    one_line(sweep("--cpu --models " + model(1) + "," + dir.path + "/./toy1.bin" + data), 2,
             "--models: '" + dir.path + "/./toy1.bin' is given twice (as '" + model(1) + "')");
    one_line(sweep("--cpu --models ''" + data), 2, "--models: '' is not");
    one_line(sweep("--cpu --models d1, " + data), 2, "--models: 'd1,' is not");
    one_line(sweep("--cpu --models d1 --batch 2,1,2" + data), 2, "--batch: '2' is given twice");
    one_line(sweep("--cpu --models d1 --timeout nan" + data), 2, "--timeout: 'nan' is not a positive number");
    one_line(sweep("--cpu --models d1 --timeout inf" + data), 2, "--timeout: 'inf' is not a positive number");
    // -o must be a directory (or not exist yet); a file given there is left as it is.
    std::ofstream(dir / "notes.md") << "notes\n";
    one_line(sweep("--cpu --models d1 -i " + (dir / "data") + " -o " + (dir / "notes.md")), 2,
             "-o: '" + (dir / "notes.md") + "' exists and is not a directory");
    EXPECT_EQ(slurp(dir / "notes.md"), "notes\n");
    one_line(sweep("--cpu --models d1 -i " + (dir / "data") + " -o /dev/null"), 2,
             "-o: '/dev/null' exists and is not a directory");
    one_line(sweep("--cpu --models d1 -i " + (dir / "nodata") + " -o " + out()), 1, "nodata' not found");
    one_line(sweep("--cpu --models d1 --program " + (dir / "none") + data), 1, "--program");
    // A CSV from something else is not appended to.
    (void)!system(("mkdir -p " + out() + " && echo a,b > " + out() + "/sweep.csv").c_str());
    one_line(sweep("--cpu --models d1" + data), 1, "sweep.csv: its columns are not this sweep's");
    EXPECT_EQ(slurp(out() + "/sweep.csv"), "a,b\n");
    auto plot = run("python3 scripts/plot_sweep.py " + (dir / "data"));
    EXPECT_EQ(plot.exit_code, 2);
    EXPECT_TRUE(has(plot.output, "plot_sweep.py: error: no sweep.csv in")) << plot.output;
}

// The flags passed to every run are checked against what the programs take, and the grid against each model's
// maximum sequence length, before anything runs: one line and exit 2, not a sweep of error rows (nor, for
// --device-memory, plans that all fail and configurations launched without them).
TEST_F(Sweep, FlagsTheProgramsWouldRefuseAreRefusedBeforeTheFirstRun) {
    const std::string train = "--cpu --program test/fake_infer.py --models d1 --seq 16 --no-plots -i " + (dir / "data") +
                              " -o " + out() + " ";
    const std::string infer = "--mode infer --program test/fake_infer.py --models d1 --no-plots -o " + out() + " ";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {train + "--seed -1", "--seed: expected an integer in [0, 2147483647], got '-1'"},
        {train + "--val-batches 0", "--val-batches: expected an integer in [1, 2147483647], got '0'"},
        {train + "--steps 99999999999", "--steps: expected an integer in [1, 2147483647], got '99999999999'"},
        {train + "--warmup 2147483647", "--warmup, --steps: 2147483647 + 5 steps are more than the trainers' 2147483647"},
        {train + "--models d0", "--models: 'd0' is neither dN (d1 to d999, e.g. d12) nor an existing model file"},
        {train + "--seq 2048", "--seq: 2048 is longer than d1's maximum sequence length 1024"},
        {train + "--models " + model(1) + " --seq 64", "--seq: 64 is longer than " + model(1) +
                                                          "'s maximum sequence length 32"},
        {infer + "--cpu --batch 70000", "--batch: expected an integer in [1, 65535], got '70000'"},
        {infer + "--cpu --prompt-len 1000 --gen-len 100",
         "--prompt-len, --gen-len: 1000 + 100 tokens are longer than d1's maximum sequence length 1024"},
        {infer + "--gpu --device-memory 80G",
         "--device-memory: expected a size such as 80GiB, 40GB, 512MiB or 4096B, got '80G'"},
    };
    for (const auto& [args, part] : cases) {
        SCOPED_TRACE(args);
        expect_one_line(sweep(args), 2, "sweep.py: error: ", part);
        EXPECT_FALSE(llmc::file_exists(out())) << "written before the refusal";
    }
}

// With --device-memory, a configuration whose memory plan cannot be had (the program's plan fails, as an older
// build's would) is an error row that says so, and is not launched: the limit asked for could not be checked.
// Without it the configuration runs, as before. Either way the plan's answer stays in the log, ahead of the run's.
TEST_F(Sweep, APlanThatFailsIsAnErrorRowUnderDeviceMemoryAndStaysInTheLog) {
    const std::string grid = " python3 scripts/sweep.py --gpu --mode infer --program test/fake_infer.py --models d1 "
                             "--batch 1 --prompt-len 8 --gen-len 4 --no-plots -o ";
    const std::string failing = "FAKE_INFER_PLAN_ERROR='unknown flag --memory-plan'";
    // (directory, environment, extra flags) -> the row's status, and what its log holds in this order
    struct Case {
        std::string name, env, flags, status;
        std::vector<std::string> log;
    };
    for (const Case& c : {Case{"limited", failing, " --device-memory 1GiB", "error: --memory-plan: unknown flag --memory-plan",
                               {"--memory-plan --device-memory 1GiB", "error: unknown flag --memory-plan"}},
                          Case{"unlimited", failing, "", "ok", {"error: unknown flag --memory-plan", "{\"summary\""}},
                          Case{"fits", "", " --device-memory 1GiB", "ok", {"fits: yes", "--json", "{\"summary\""}}}) {
        SCOPED_TRACE(c.name);
        auto r = run(c.env + grid + (dir / c.name) + c.flags);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        auto rows = read_csv(dir / c.name + "/sweep.csv");
        ASSERT_EQ(rows.size(), 1u);
        EXPECT_EQ(rows[0]["status"], c.status);
        const std::string log = slurp(dir / c.name + "/" + rows[0]["log"]);
        size_t at = 0;
        for (const std::string& part : c.log) {
            at = log.find(part, at);
            EXPECT_NE(at, std::string::npos) << part << " in\n" << log;
        }
        EXPECT_EQ(has(log, "{\"summary\""), c.status == "ok") << log;
    }
}

// A program that exits 0 without the numbers it must print (its timed step lines; the summary's decode rate) gives
// an error row, not "ok" with empty cells.
TEST_F(Sweep, ARunWithoutItsNumbersIsAnErrorRow) {
    auto r = sweep("--cpu --program /bin/true --models d1 --batch 1 --seq 16 --no-plots -i " + (dir / "data") + " -o " +
                   (dir / "train"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto rows = read_csv(dir / "train/sweep.csv");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["status"], "error: no timed step line with its time ('step N/M | loss ... | X ms') in the output");
    write_script(dir / "no_rate.sh", "echo '{\"summary\": {\"B\": 1, \"ttft_ms\": 2.5}}'\n");
    r = sweep("--cpu --mode infer --program " + (dir / "no_rate.sh") + " --models d1 --batch 1 --no-plots -o " +
              (dir / "infer"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    rows = read_csv(dir / "infer/sweep.csv");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["status"], "error: no decode_tok_s and B in the --json output's summary");
}

// Two sweeps into one directory would interleave their rows and runs: the second is refused with one line naming
// the first's pid, and leaves the CSV as it is. The lock ends with the first sweep's process, however it ends:
// after kill -9 the same command runs.
TEST_F(Sweep, ASecondSweepIntoTheSameDirectoryIsRefused) {
    const std::string pids = dir / "pids";
    write_script(dir / "hang.sh", "echo $PPID $$ > " + pids + ".tmp && mv " + pids + ".tmp " + pids + "\nexec sleep 60\n");
    const std::string grid = "--cpu --mode infer --models d1 --batch 1 --no-plots -o " + out();
    (void)!system(("python3 scripts/sweep.py --program " + (dir / "hang.sh") + " " + grid + " > " + (dir / "log") +
                   " 2>&1 &").c_str());
    ASSERT_TRUE(wait_for_file(pids, 60)) << slurp(dir / "log");
    int sweep_pid = 0, run_pid = 0;
    std::ifstream(pids) >> sweep_pid >> run_pid;
    ASSERT_GT(sweep_pid, 1);
    ASSERT_GT(run_pid, 1);
    const std::string csv = slurp(out() + "/sweep.csv");
    expect_one_line(sweep("--program test/fake_infer.py " + grid), 1, "sweep.py: error: ",
                    "-o: '" + out() + "' is in use by another sweep (pid " + std::to_string(sweep_pid) +
                        "); wait for it or choose another -o");
    EXPECT_EQ(slurp(out() + "/sweep.csv"), csv);
    kill(sweep_pid, SIGKILL);
    for (int i = 0; i < 500 && running(sweep_pid); i++) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(run_pid, SIGKILL); // kill -9 leaves the run: nothing could stop it
    auto again = sweep("--program test/fake_infer.py " + grid);
    ASSERT_EQ(again.exit_code, 0) << again.output;
    auto rows = read_csv(out() + "/sweep.csv");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["status"], "ok");
}

// A sweep.csv whose last row lacks its newline (as an editor may save it) gets the next row on a line of its own.
// A row that is not whole (two run together, as an older sweep glued them there) is named by its line, by the
// sweep, which then runs nothing, and by the plots.
TEST_F(Sweep, RowsGoOnLinesOfTheirOwnAndAMalformedOneIsNamed) {
    REQUIRE_MATPLOTLIB();
    const std::string grid = "--cpu --mode infer --program test/fake_infer.py --models d1 --no-plots -o " + out() +
                             " --batch ";
    ASSERT_EQ(sweep(grid + "1").exit_code, 0);
    const std::string path = out() + "/sweep.csv";
    std::string csv = slurp(path);
    ASSERT_EQ(csv.back(), '\n');
    csv.pop_back();
    std::ofstream(path, std::ios::binary) << csv;
    auto r = sweep(grid + "1,2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string after = slurp(path);
    EXPECT_EQ(after.substr(0, csv.size() + 1), csv + "\n");
    auto rows = read_csv(path);
    ASSERT_EQ(rows.size(), 2u) << after;
    EXPECT_EQ(rows[1]["B"], "2");
    EXPECT_EQ(rows[1]["status"], "ok");

    const size_t first = after.find('\n'), second = after.find('\n', first + 1);
    const std::string glued = after.substr(0, second) + after.substr(second + 1);
    std::ofstream(path, std::ios::binary) << glued;
    const std::string why = path + ": line 2: 59 fields where the header has 30 (a row cut short, or two rows run "
                                   "together)";
    expect_one_line(sweep(grid + "1,2,4"), 1, "sweep.py: error: ", why);
    EXPECT_EQ(slurp(path), glued);
    EXPECT_FALSE(llmc::file_exists(out() + "/runs/infer_cpu_d1_B4_P64_G64"));
    expect_one_line(run("python3 scripts/plot_sweep.py " + out()), 1, "plot_sweep.py: error: ", why);
}

// What the sweep and its plots write must be a regular file or a new name: a sweep.csv, a run's log or a plot that
// is a symbolic link (nothing is written through it) or a directory is refused with one line before anything runs,
// and plot_sweep.py's -o must be a directory.
TEST_F(Sweep, OutputsThatAreNotRegularFilesAreRefusedBeforeAnythingRuns) {
    REQUIRE_MATPLOTLIB();
    const std::string target = dir / "elsewhere.csv";
    ASSERT_EQ(run("python3 -c 'import sys; sys.path.insert(0, \"scripts\"); import sweep; "
                  "print(\",\".join(sweep.COLUMNS))' > " + target).exit_code, 0);
    const std::string header = slurp(target);
    const std::string grid = "--cpu --mode infer --program test/fake_infer.py --models d1 --batch 1 -o " + out();
    const std::string log = out() + "/runs/infer_cpu_d1_B1_P64_G64/log.txt";
    for (const auto& [make, what] : std::vector<std::pair<std::string, std::string>>{
             {"ln -s " + target + " " + out() + "/sweep.csv", out() + "/sweep.csv: a symbolic link"},
             {"mkdir " + out() + "/infer_ttft.png", out() + "/infer_ttft.png: a directory"},
             {"mkdir -p " + out() + "/runs/infer_cpu_d1_B1_P64_G64 && ln -s " + target + " " + log,
              log + ": a symbolic link"}}) {
        SCOPED_TRACE(make);
        ASSERT_EQ(run("rm -rf " + out() + " && mkdir " + out() + " && " + make).exit_code, 0);
        expect_one_line(sweep(grid), 1, "sweep.py: error: ", what + "; an output must be a regular file or a new name");
        EXPECT_EQ(slurp(target), header);
        EXPECT_FALSE(llmc::file_exists(out() + "/infer_throughput.png"));
        EXPECT_EQ(run("grep -rl summary " + out()).output, "") << "a configuration ran";
    }

    // plot_sweep.py: -o a file, left as it is; a plot that is a link, not written through, and nothing drawn.
    ASSERT_EQ(run("rm -rf " + out()).exit_code, 0);
    ASSERT_EQ(sweep(grid + " --no-plots").exit_code, 0);
    expect_one_line(run("python3 scripts/plot_sweep.py " + out() + " -o " + target), 2, "plot_sweep.py: error: ",
                    "-o: '" + target + "' exists and is not a directory");
    ASSERT_EQ(run("ln -s " + target + " " + out() + "/infer_memory.png").exit_code, 0);
    expect_one_line(run("python3 scripts/plot_sweep.py " + out()), 1, "plot_sweep.py: error: ",
                    out() + "/infer_memory.png: a symbolic link; an output must be a regular file or a new name");
    EXPECT_EQ(slurp(target), header);
    EXPECT_FALSE(llmc::file_exists(out() + "/infer_throughput.png"));
}

// A CSV the plots cannot draw: numbers that are not finite or are too large for an axis, bytes that are not UTF-8.
// One line naming the file (and the line and column of the cell), not a traceback or plots of nothing.
TEST(SweepPlot, ACsvItCannotDrawGetsOneLine) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    std::ofstream(dir / "write.py") << R"py(import csv, sys
sys.path.insert(0, "scripts")
import sweep
with open(sys.argv[1] + "/sweep.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=sweep.COLUMNS)
    w.writeheader()
    for B in (1, 2):
        w.writerow({c: sys.argv[2] for c in sweep.COLUMNS} | dict(mode="train", device="cpu", model="d1", status="ok", B=B))
)py";
    for (const char* value : {"nan", "inf", "1e308"}) {
        SCOPED_TRACE(value);
        ASSERT_EQ(run("python3 " + (dir / "write.py") + " " + dir.path + " " + value).exit_code, 0);
        expect_one_line(run("python3 scripts/plot_sweep.py " + dir.path), 1, "plot_sweep.py: error: ",
                        dir / "sweep.csv: line 2: T '" + value + "' is not a finite number of magnitude below 1e30");
    }
    std::ofstream(dir / "sweep.csv", std::ios::binary) << "mode,device\ntrain,\xff\xfe\n";
    expect_one_line(run("python3 scripts/plot_sweep.py " + dir.path), 1, "plot_sweep.py: error: ",
                    dir / "sweep.csv: not UTF-8 text");
    EXPECT_FALSE(llmc::file_exists(dir / "train_throughput.png"));
}
