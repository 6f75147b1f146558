// scripts/gpu_check.sh and its parsers (scripts/gpu_report.py), without a GPU: the parsers on recorded samples
// of every tool's output (test/data/gpu_check/report is a whole report directory: stages.tsv, logs/, the
// one-layer kernels.csv), the report made from them, the dry run, and the one-line refusal without a GPU.
// Needs python3 (standard library only).
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include "test/test_util.h"

using testutil::has;
using testutil::run;
using testutil::RunResult;
using testutil::TempDir;

namespace {

const std::string SAMPLES = "test/data/gpu_check/report";
const std::string LOGS = SAMPLES + "/logs/";

// Asked once per process (python3 can be slow to start behind version-manager shims).
bool have_python3() {
    static const bool have = run("python3 --version").exit_code == 0;
    return have;
}
#define REQUIRE_PYTHON3() ASSERT_TRUE(have_python3()) << "python3 not found: scripts/gpu_report.py needs it"

// `gpu_report.py parse KIND LOG [extra]`: its JSON, the exit status asserted 0.
std::string parse(const std::string& kind, const std::string& log, const std::string& extra = "") {
    RunResult r = run("python3 scripts/gpu_report.py parse " + kind + " " + log + (extra.empty() ? "" : " " + extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
}


size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) n++;
    return n;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void write(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
}

} // namespace

TEST(GpuCheckParsers, GtestSummaryAndFailedTests) {
    REQUIRE_PYTHON3();
    std::string j = parse("gtest", LOGS + "gpu_tests.log");
    EXPECT_TRUE(has(j, "\"tests\": 37")) << j;
    EXPECT_TRUE(has(j, "\"passed\": 35")) << j;
    EXPECT_TRUE(has(j, "\"skipped\": 1")) << j;
    EXPECT_TRUE(has(j, "\"failed\": 1")) << j;
    EXPECT_TRUE(has(j, "\"failed_tests\": [\"TrainGpu.OutOfMemoryBatchGetsAMessage\"]")) << j;
    EXPECT_TRUE(has(j, "\"crashed_in\": null")) << j;
    EXPECT_TRUE(has(j, "\"skip_reasons\": {\"NVML not available (libnvidia-ml.so.1: cannot open shared object file)\": 1}"))
        << j;
}

TEST(GpuCheckParsers, GpuSuitesThatSawNoDeviceFail) {
    REQUIRE_PYTHON3();
    // The GPU suites run on a machine without a GPU: a few device-free tests pass, the rest skip.
    TempDir dir;
    ASSERT_EQ(run("mkdir -p " + (dir / "logs")).exit_code, 0);
    ASSERT_EQ(run("cp test/data/gpu_check/gpu_tests_no_device.log " + (dir / "logs/gpu_tests.log")).exit_code, 0);
    write(dir / "stages.tsv", "gpu_tests\t0\t1\t180\t\n");
    std::string j = parse("gtest", dir / "logs/gpu_tests.log");
    EXPECT_TRUE(has(j, "\"failed\": 0")) << j;
    EXPECT_TRUE(has(j, "\"skip_reasons\": {\"no CUDA device\": ")) << j;
    RunResult r = run("python3 scripts/gpu_report.py judge gpu_tests " + dir.path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "gpu_tests fail: ")) << r.output;
    EXPECT_TRUE(has(r.output, " no CUDA device)")) << r.output;
}

TEST(GpuCheckParsers, SanitizerSummaries) {
    REQUIRE_PYTHON3();
    std::string mem = parse("sanitizer", LOGS + "memcheck.log");
    EXPECT_TRUE(has(mem, "\"errors\": 0")) << mem;
    EXPECT_TRUE(has(mem, "\"passed\": 25")) << mem;
    EXPECT_TRUE(has(mem, "\"hazards\": null")) << mem;
    std::string race = parse("sanitizer", LOGS + "racecheck.log");
    EXPECT_TRUE(has(race, "\"hazards\": 1")) << race;
    EXPECT_TRUE(has(race, "\"errors\": 1")) << race;
    EXPECT_TRUE(has(race, "\"warnings\": 0")) << race;
    EXPECT_TRUE(has(race, "\"first_error\": \"Error: Race reported between Write access at void "
                          "llmc::attention_detail::attention_backward_dq_kernel<64, 64>"))
        << race;
    // Killed by its time limit inside a test: no summaries, and the test it stopped in.
    std::string init = parse("sanitizer", LOGS + "initcheck.log");
    EXPECT_TRUE(has(init, "\"errors\": null")) << init;
    EXPECT_TRUE(has(init, "\"summary\": false")) << init;
    EXPECT_TRUE(has(init, "\"crashed_in\": \"GPT2GPU.TenAdamWStepsTrackTheCPU\"")) << init;
}

TEST(GpuCheckParsers, KernelLadder) {
    REQUIRE_PYTHON3();
    std::string j = parse("ladder", LOGS + "kernel_ladder.log");
    EXPECT_EQ(count(j, "\"program\": "), 6u) << j;
    EXPECT_TRUE(has(j, "\"speedups\": {\"unfused/fused\": 2.72}")) << j;
    EXPECT_TRUE(has(j, "\"speedups\": {\"naive/fused forward speedup\": 3.87}")) << j;
    EXPECT_TRUE(has(j, "\"gbps\": 3056.5, \"ms\": 1.1403, \"name\": \"adamw_update (fused)\", \"pct_bf16\": null, "
                       "\"pct_dram\": 91.2"))
        << j;
    EXPECT_TRUE(has(j, "\"ms\": 0.5123, \"name\": \"fused forward\", \"pct_bf16\": 5.1")) << j;
    EXPECT_TRUE(has(j, "\"checks_failed\": [\"gelu_backward_inplace\"], \"checks_ok\": 1, \"device\": \"NVIDIA H100 "
                       "80GB HBM3\", \"exit\": 1, \"program\": \"gelu\""))
        << j;
    // The command lines gpu_check.sh heads the log with ("=== $b missing" among them) are not program output.
    EXPECT_FALSE(has(j, "\"missing\"")) << j;
}

TEST(GpuCheckParsers, TrainStepAndValLines) {
    REQUIRE_PYTHON3();
    std::string j = parse("train", LOGS + "train.log");
    EXPECT_TRUE(has(j, "\"steps\": 60")) << j;
    EXPECT_TRUE(has(j, "\"parameters\": 124475904")) << j;
    EXPECT_TRUE(has(j, "\"val_losses\": [10.998871, 7.912342, 6.774519, 6.317722]")) << j;
    EXPECT_TRUE(has(j, "\"train_falls\": true")) << j;
    EXPECT_TRUE(has(j, "\"val_falls\": true")) << j;
    EXPECT_TRUE(has(j, "\"mem_gib\": 7.12")) << j;
    EXPECT_TRUE(has(j, "\"sample\": \"ROMEO:")) << j;

    // Lines as llmc/train/loop.cpp prints them, with a val loss that rises: the stage fails on it.
    TempDir dir;
    write(dir / "train.log", "step    0/2 | val loss 10.900000\n"
                             "step    1/2 | loss 10.950000 | norm 5.1000 | lr 3.00e-04 | 40.10 ms | 102145 tok/s | "
                             "0.1 s elapsed, ETA 0.1 s\n"
                             "step    2/2 | loss 10.100000 | norm 4.2000 | lr 3.00e-04 | 39.90 ms | 102657 tok/s | "
                             "0.2 s elapsed, ETA 0.0 s\n"
                             "step    2/2 | val loss 11.200000\n");
    std::string rise = parse("train", dir / "train.log");
    EXPECT_TRUE(has(rise, "\"steps\": 2")) << rise;
    EXPECT_TRUE(has(rise, "\"train_falls\": true")) << rise;
    EXPECT_TRUE(has(rise, "\"val_falls\": false")) << rise;
    EXPECT_TRUE(has(rise, "\"val_losses\": [10.9, 11.2]")) << rise;
    EXPECT_TRUE(has(rise, "\"mfu\": null")) << rise; // no MFU without a datasheet entry
    EXPECT_TRUE(has(rise, "\"sample\": null")) << rise;
}

TEST(GpuCheckParsers, BenchmarkRows) {
    REQUIRE_PYTHON3();
    std::string j = parse("benchmark", LOGS + "benchmark.log");
    EXPECT_TRUE(has(j, "\"profiled\": true")) << j;
    EXPECT_TRUE(has(j, "{\"B\": 16, \"T\": 1024, \"error\": null, \"mem_gib\": 19.84, \"mfu\": 33.8, \"model\": \"d12\", "
                       "\"ms\": 42.1, \"overhead_pct\": 1.94, \"tok_s\": 389169, \"tok_s_profiled\": 381619}"))
        << j;
    EXPECT_TRUE(has(j, "\"overhead_pct\": 2.73")) << j;
    EXPECT_TRUE(has(j, "{\"B\": 64, \"T\": 1024, \"error\": \"error: out of memory")) << j;
}

TEST(GpuCheckParsers, ProfileSummaryAndCounters) {
    REQUIRE_PYTHON3();
    std::string j = parse("profile", LOGS + "profile.log");
    EXPECT_TRUE(has(j, "\"tok_s\": 305939.0")) << j;
    EXPECT_TRUE(has(j, "\"ms_per_step\": 13.388")) << j;
    EXPECT_TRUE(has(j, "\"gpu_ms_per_step\": 13.037")) << j;
    EXPECT_TRUE(has(j, "\"mfu\": 36.5")) << j;
    EXPECT_TRUE(has(j, "\"kernels\": 572")) << j;
    EXPECT_TRUE(has(j, "\"dropped\": 0")) << j;
    EXPECT_TRUE(has(j, "\"top_kernel\": \"adamw_kernel\"")) << j;
    EXPECT_TRUE(has(j, "\"findings\": [\"roofline\"]")) << j;
    EXPECT_TRUE(has(j, "\"counters\": null")) << j;
    EXPECT_TRUE(has(j, "\"written_to\": \"/home/user/llmc/gpu_report/profile_default\"")) << j;

    std::string c = parse("profile", LOGS + "profile_counters.log");
    EXPECT_TRUE(has(c, "\"counters\": 572")) << c;
    // The total row (no phase): 3378.078 counted tensor GFLOP against 3385.042 analytic.
    EXPECT_TRUE(has(c, "\"gemm_an\": 3385.042")) << c;
    EXPECT_TRUE(has(c, "\"tensor_hw\": 3378.078")) << c;
    EXPECT_TRUE(has(c, "\"gemm_hw_over_analytic\": 0.9979,")) << c;
    EXPECT_TRUE(has(c, "\"worst_gemm_row\": {\"ratio\": 0.98, \"row\": \"attention fwd\"}")) << c;
    EXPECT_EQ(count(c, "\"subblock\": "), 23u) << c; // 22 sub-block rows and the total

    // Counters refused (profile_gpt2cu's line when the range profiler cannot start).
    TempDir dir;
    write(dir / "p.log", "counters: no permission to read GPU performance counters (run as root or set "
                         "NVreg_RestrictProfilingToAdminUsers=0); the rest of the profile is written\n");
    std::string refused = parse("profile", dir / "p.log");
    EXPECT_TRUE(has(refused, "\"counters\": null")) << refused;
    EXPECT_TRUE(has(refused, "\"counters_note\": \"no permission to read GPU performance counters")) << refused;
}

TEST(GpuCheckParsers, NcuJoinedWithTheProfilersKernelsCsv) {
    REQUIRE_PYTHON3();
    std::string j = parse("ncu", LOGS + "ncu.log", "--kernels " + SAMPLES + "/profile_1layer/kernels.csv");
    EXPECT_TRUE(has(j, "\"launches\": 25")) << j;
    EXPECT_TRUE(has(j, "\"joined\": 10")) << j;
    EXPECT_TRUE(has(j, "\"error\": null")) << j;
    // cxxabi's "f(__nv_bfloat16*, ...)" and ncu's "void f(__nv_bfloat16 *, ...)" are one kernel; the GEMM that
    // runs in three places is averaged over all its launches on both sides.
    EXPECT_TRUE(has(j, "{\"kernel\": \"llmc::adamw_kernel\", \"ncu_avg_us\": 450.372, \"ncu_launches\": 2, "
                       "\"profiler_avg_us\": 421.7, \"profiler_calls\": 1, \"ratio\": 1.068}"))
        << j;
    EXPECT_TRUE(has(j, "{\"kernel\": \"nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT\", \"ncu_avg_us\": 77.418, "
                       "\"ncu_launches\": 6, \"profiler_avg_us\": 75.627, \"profiler_calls\": 3, \"ratio\": 1.0237}"))
        << j;
    EXPECT_TRUE(has(j, "\"kernel\": \"llmc::attention_detail::attention_forward_kernel<64,64>\"")) << j;
    EXPECT_TRUE(has(j, "\"ncu_only\": [\"void llmc::copy_float_to_bf16_kernel(__nv_bfloat16 *, const float *, "
                       "unsigned long)\"]"))
        << j;
    EXPECT_TRUE(has(j, "\"profiler_only\": []")) << j;
    EXPECT_TRUE(has(j, "\"ratio_min\": 1.0093")) << j;

    // The other layout (--page raw: one row per launch, a units row), in microseconds, and a permission error.
    TempDir dir;
    write(dir / "raw.log", "==PROF== Connected to process 7 (./profile_gpt2cu)\n"
                           "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
                           "\"gpu__time_duration.sum\"\n"
                           "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"usecond\"\n"
                           "\"0\",\"7\",\"p\",\"h\",\"void llmc::adamw_kernel(__nv_bfloat16 *, float *)\",\"1\",\"7\","
                           "\"1,200.50\"\n");
    write(dir / "kernels.csv", "kernel,subblock,phase,category,calls,total_us,avg_us,pct\n"
                               "\"void llmc::adamw_kernel(__nv_bfloat16*, float*)\",optimizer,opt,optimizer,2,2000.0,"
                               "1000.0,100\n");
    std::string raw = parse("ncu", dir / "raw.log", "--kernels " + dir / "kernels.csv");
    EXPECT_TRUE(has(raw, "\"ncu_avg_us\": 1200.5")) << raw;
    EXPECT_TRUE(has(raw, "\"ratio\": 1.2005")) << raw;
    write(dir / "perm.log", "==PROF== Connected to process 7 (./profile_gpt2cu)\n"
                            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                            "Performance Counters on the target device 0.\n");
    std::string perm = parse("ncu", dir / "perm.log");
    EXPECT_TRUE(has(perm, "\"error\": \"no permission to read GPU performance counters (ERR_NVGPUCTRPERM)\"")) << perm;
    EXPECT_TRUE(has(perm, "\"launches\": 0")) << perm;
}

TEST(GpuCheckParsers, InventoryBuildDataNsys) {
    REQUIRE_PYTHON3();
    std::string inv = parse("inventory", LOGS + "inventory.log");
    EXPECT_TRUE(has(inv, "\"gpu\": \"NVIDIA H100 80GB HBM3\"")) << inv;
    EXPECT_TRUE(has(inv, "\"driver\": \"550.54.15\"")) << inv;
    EXPECT_TRUE(has(inv, "\"driver_cuda\": \"12.4\"")) << inv;
    EXPECT_TRUE(has(inv, "\"nvcc\": \"12.4.131\"")) << inv;
    EXPECT_TRUE(has(inv, "\"cublaslt\": \"12.4.5\"")) << inv;
    EXPECT_TRUE(has(inv, "\"cupti\": \"api-20\"")) << inv;
    EXPECT_TRUE(has(inv, "\"nsys\": null")) << inv;
    EXPECT_TRUE(has(inv, "\"ncu\": \"/usr/local/cuda/bin/ncu (")) << inv;
    std::string build = parse("build", LOGS + "build.log");
    EXPECT_TRUE(has(build, "\"compiled\": 2")) << build;
    std::string data = parse("data", LOGS + "data.log");
    EXPECT_TRUE(has(data, "\"train_tokens\": 305257")) << data;
    EXPECT_TRUE(has(data, "\"val_tokens\": 32768")) << data;
    EXPECT_TRUE(has(data, "\"already_prepared\": false")) << data;
    std::string nsys = parse("nsys", "test/data/gpu_check/nsys.log");
    EXPECT_TRUE(has(nsys, "\"report_bytes\": 18734112")) << nsys;
    EXPECT_TRUE(has(nsys, "\"steps\": 5")) << nsys;
    EXPECT_TRUE(has(nsys, "\"nvtx_llmc\": true")) << nsys;
}

TEST(GpuCheckReport, SampleRunGivesOneTableAndASummary) {
    REQUIRE_PYTHON3();
    TempDir dir;
    RunResult r = run("python3 scripts/gpu_report.py report " + SAMPLES + " -o " + (dir / "report.md"));
    EXPECT_EQ(r.exit_code, 1) << r.output; // stages failed
    EXPECT_TRUE(has(r.output, "GPU check: 9 passed, 5 failed, 1 skipped")) << r.output;
    EXPECT_EQ(count(r.output, "\n"), 16u) << r.output; // one screen: the count line and a line per stage
    std::string md = testutil::slurp(dir / "report.md");
    EXPECT_EQ(count(md, "| stage | result | seconds | key numbers |"), 1u) << md;
    EXPECT_EQ(count(md, "\n| "), 16u) << md; // header and 15 stages
    for (const char* row :
         {"| inventory (", "| build (", "| memcheck (", "| synccheck (", "| data (", "| train (", "| profile (",
          "| profile_counters (", "| ncu ("})
    {
        size_t at = md.find(row);
        ASSERT_NE(at, std::string::npos) << row;
        EXPECT_TRUE(has(md.substr(at, md.find('\n', at) - at), ") | pass | ")) << row;
    }
    EXPECT_TRUE(has(md, "| gpu_tests (GPU suites of make test) | fail | 61 | 35 passed, 1 skipped, 1 failed "
                        "(failed: TrainGpu.OutOfMemoryBatchGetsAMessage) (skipped: 1 NVML not available"))
        << md;
    EXPECT_TRUE(has(md, "| initcheck (compute-sanitizer initcheck, kernel and model tests) | fail | 150 | timed out "
                        "after 150 s"))
        << md;
    EXPECT_TRUE(has(md, "| nsys (nsys profile of profile_gpt2cu) | skipped | 0 | nsys not found |")) << md;
    EXPECT_TRUE(has(md, "overhead target <= 2%: missed")) << md;
    EXPECT_TRUE(has(md, "tensor/analytic GEMM FLOPs 0.9979")) << md;
    EXPECT_TRUE(has(md, "median 1.060")) << md;
    // With -o the sample directory is left as it is.
    EXPECT_FALSE(exists(SAMPLES + "/ncu_vs_profiler.csv"));
    EXPECT_FALSE(exists(SAMPLES + "/report.md"));
}

TEST(GpuCheckScript, DryRunListsEveryStageAndItsCommand) {
    TempDir dir;
    RunResult r = run("scripts/gpu_check.sh --dry-run --out " + (dir / "report"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int i = 0;
    for (const char* stage : {"inventory", "build", "gpu_tests", "memcheck", "racecheck", "synccheck", "initcheck",
                              "kernel_ladder", "data", "train", "benchmark", "profile", "profile_counters", "ncu",
                              "nsys"})
        EXPECT_TRUE(has(r.output, "\nstage " + std::to_string(++i) + "/15: " + stage + " (limit ")) << stage;
    for (const char* cmd :
         {"nvidia-smi --query-gpu=name,driver_version", "python3 scripts/gpu_report.py versions", "make -j",
          "./build/run_tests --gtest_filter='GPT2GPU.*:",
          "--tool memcheck --error-exitcode 1 ./build/run_tests --gtest_filter='Kernels*:GpuAttention.*:GPT2GPU.*"
          "-GpuAttention.Gpt2Shape'",
          "--tool racecheck", "--tool synccheck", "--tool initcheck", "build/dev/cuda/$(basename \"$src\" .cu)",
          "dev/data/tinyshakespeare.sh", "./train_gpt2cu -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x 60 -v 20 -s 60",
          "scripts/benchmark_gpu.sh -e d12 -t 1024 -B '16 32 64' -p", "./profile_gpt2cu -o ",
          "./profile_gpt2cu --counters -o ", "--metrics gpu__time_duration.sum",
          "./profile_gpt2cu --layers 1 --warmup 1 --steps 1 -o ", "profile --trace=cuda,nvtx",
          "then: python3 scripts/gpu_report.py report "})
        EXPECT_TRUE(has(r.output, cmd)) << cmd << "\n" << r.output;
    // The GPU stage's filter is every suite of test/gpu, so a new GPU suite cannot be left out of it.
    size_t at = r.output.find("./build/run_tests --gtest_filter='GPT2GPU.*:");
    ASSERT_NE(at, std::string::npos) << r.output;
    std::string gpu_tests = r.output.substr(at, r.output.find('\n', at) - at);
    for (const char* suite : {"GpuAttention.*", "GpuAttentionDecode.*", "GpuGPT2Decoder.*", "GpuPrograms.*",
                              "GpuSampleTokens.*", "InferGpuProgram.*", "KernelsMatmul.*", "ProfilerGpu.*",
                              "TrainGpu.*", "TrainGpuProfile.*"})
        EXPECT_TRUE(has(gpu_tests, std::string(":") + suite)) << suite << "\n" << gpu_tests;
    EXPECT_FALSE(has(r.output, "Emu")) << "the emulated tier is not a GPU stage";
    EXPECT_FALSE(exists(dir / "report")) << "a dry run writes nothing";

    RunResult some = run("scripts/gpu_check.sh --dry-run --only sanitizer,ncu --out " + (dir / "report"));
    ASSERT_EQ(some.exit_code, 0) << some.output;
    EXPECT_TRUE(has(some.output, "stage 1/6: build (limit")) << some.output; // it makes what they need
    EXPECT_TRUE(has(some.output, "make -j")) << some.output;
    EXPECT_TRUE(has(some.output, " build/run_tests profile_gpt2cu\n")) << some.output;
    EXPECT_TRUE(has(some.output, "stage 6/6: ncu (limit")) << some.output;
    EXPECT_FALSE(has(some.output, ": train (")) << some.output;
}

TEST(GpuCheckScript, WithoutAGpuOneLineAndNonZero) {
    TempDir dir;
    RunResult none = run("NVIDIA_SMI=/nonexistent/nvidia-smi scripts/gpu_check.sh --out " + (dir / "report"));
    EXPECT_EQ(none.exit_code, 1) << none.output;
    EXPECT_EQ(count(none.output, "\n"), 1u) << none.output;
    EXPECT_TRUE(has(none.output, "gpu_check: no NVIDIA GPU here (/nonexistent/nvidia-smi not found)")) << none.output;
    // nvidia-smi present but no device (its message and exit status when the driver finds none).
    write(dir / "nvidia-smi", "#!/bin/sh\necho 'No devices were found'\nexit 6\n");
    ASSERT_EQ(run("chmod +x " + (dir / "nvidia-smi")).exit_code, 0);
    RunResult nodev = run("NVIDIA_SMI=" + (dir / "nvidia-smi") + " scripts/gpu_check.sh --out " + (dir / "report"));
    EXPECT_EQ(nodev.exit_code, 1) << nodev.output;
    EXPECT_EQ(count(nodev.output, "\n"), 1u) << nodev.output;
    EXPECT_TRUE(has(nodev.output, "lists no device")) << nodev.output;
    EXPECT_FALSE(exists(dir / "report"));
}

TEST(GpuCheckScript, BadFlagsGetOneLineAndExitTwo) {
    for (const char* args : {"--bogus", "--only nope", "--budget 0", "--out", "--only memcheck,frobnicate", "--only memcheck,,ncu"}) {
        RunResult r = run(std::string("scripts/gpu_check.sh ") + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_EQ(count(r.output, "\n"), 1u) << args << ": " << r.output;
        EXPECT_TRUE(has(r.output, "gpu_check: ")) << args << ": " << r.output;
    }
    RunResult help = run("scripts/gpu_check.sh --help");
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_TRUE(has(help.output, "--dry-run")) << help.output;
    RunResult py = run("python3 scripts/gpu_report.py parse nosuchkind x");
    EXPECT_EQ(py.exit_code, 2) << py.output;
}
