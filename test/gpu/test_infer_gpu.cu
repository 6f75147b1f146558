// infer_gpt2cu as a user runs it: flags refused before the device is touched (runs anywhere), and on a real
// GPU the JSON output, determinism, the prompts shared with infer_gpt2, the refusal of a batch whose KV
// cache cannot fit, and the --profile directory (prefill and decode from CUPTI). Child processes; not part of the emulated tier (the decoder itself is, test_gpt2_decoder.cu).
#include <algorithm>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/model/gpt2_init.h"
#include "test/gpu/gpu_test_util.cuh"
#include "test/infer_profile_check.h"
#include "test/test_util.h"

using namespace llmc;
using namespace testutil;

namespace {

// The JSON lines of a --json run: one object per sequence, then the summary object.
std::vector<nlohmann::json> json_lines(const std::string& out) {
    std::vector<nlohmann::json> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
        if (!line.empty() && line[0] == '{') v.push_back(nlohmann::json::parse(line));
    return v;
}

// A tiny model file (head size 64, as the GPU attention needs) with room for long sequences.
std::string tiny_model(const TempDir& dir) {
    GPT2Config c = gputest::tiny_gpt2_config();
    c.max_seq_len = 1024;
    std::vector<float> w(num_parameters(c));
    init_gpt2_parameters(w.data(), c, 11);
    save_model(dir / "tiny.bin", c, w.data());
    return dir / "tiny.bin";
}

} // namespace

TEST(InferGpuProgram, BadFlagsOneLineBeforeTheDevice) {
    for (const char* args : {"--profile", "-b 0", "--temperature -1", "-n", "--bogus"}) {
        const RunResult r = run(std::string("./infer_gpt2cu ") + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
        EXPECT_TRUE(has(r.output, "error: ")) << args << ": " << r.output;
    }
}

// Without a GPU, each GPU program says so in one line before any profiler or model output (also with --profile):
// their shared first check, require_gpu.
TEST(GpuPrograms, NoDeviceOneLine) {
    if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
    TempDir dir;
    const std::pair<std::string, std::string> runs[] = {{"infer_gpt2cu", " -e d2 -n 4 --profile " + (dir / "infer")},
                                                        {"train_gpt2cu", " -e d2 -x 1 --profile " + (dir / "train")},
                                                        {"profile_gpt2cu", " -o " + (dir / "profile")}};
    for (const auto& [program, args] : runs) {
        const RunResult r = run("./" + program + args);
        EXPECT_EQ(r.exit_code, 1) << program << ": " << r.output;
        EXPECT_EQ(r.output.rfind("error: no CUDA device found: " + program + " needs an NVIDIA GPU", 0), 0u) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << program << ": " << r.output;
    }
}

TEST(InferGpuProgram, JsonDeterministicAndSamePromptsAsCpu) {
    REQUIRE_GPU_FOR_CHILD_PROCESS();
    TempDir dir;
    const std::string model = tiny_model(dir), flags = " -e " + model + " --prompt-len 9 -b 3 -n 12 --temperature 0 --json";
    const RunResult a = run("./infer_gpt2cu" + flags), b = run("./infer_gpt2cu" + flags), cpu = run("./infer_gpt2" + flags);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
    const auto ja = json_lines(a.output), jb = json_lines(b.output), jc = json_lines(cpu.output);
    ASSERT_EQ(ja.size(), 4u) << a.output;
    ASSERT_EQ(jc.size(), 4u) << cpu.output;
    for (int s = 0; s < 3; s++) {
        EXPECT_EQ(ja[s]["prompt_ids"], jc[s]["prompt_ids"]) << "sequence " << s;
        EXPECT_EQ(ja[s]["ids"], jb[s]["ids"]) << "sequence " << s << ": two runs differ";
        ASSERT_EQ(ja[s]["ids"].size(), 12u);
        for (int id : ja[s]["ids"]) EXPECT_TRUE(id >= 0 && id < 500) << id;
    }
    EXPECT_GT(ja[3]["summary"]["decode_tok_s"].get<double>(), 0.0);
    EXPECT_GT(ja[3]["summary"]["peak_mem_mib"].get<double>(), 0.0);
}

TEST(InferGpuProgram, TooLargeBatchRefusedWithTheLargestThatFits) {
    REQUIRE_GPU_FOR_CHILD_PROCESS();
    TempDir dir;
    const RunResult r = run("./infer_gpt2cu -e " + tiny_model(dir) + " --prompt-len 1000 -n 24 -b 65535");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "error: -b 65535: needs")) << r.output;
    EXPECT_TRUE(has(r.output, "the largest -b that fits")) << r.output;
}

// --profile on the GPU: the profile directory infer_gpt2 writes, from CUPTI: three sequences of 9 prompt tokens
// and 6 new ones (prefill, then 5 decode steps), the decode counts and contexts, every sub-block row in prefill
// or decode, and one trace range per step.
TEST(InferGpuProgram, ProfileWritesPrefillAndDecode) {
    REQUIRE_GPU_FOR_CHILD_PROCESS();
    TempDir dir;
    const std::string prof_dir = dir / "profile";
    const RunResult r = run("./infer_gpt2cu -e " + tiny_model(dir) + " --prompt-len 9 -b 3 -n 6 --temperature 0 --json " +
                            "--profile " + prof_dir + " 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(json_lines(r.output).size(), 4u) << r.output; // stdout: the JSON lines only

    const nlohmann::json pj = check_inference_profile(prof_dir, {3, 9, 6});
    EXPECT_EQ(pj["context"]["program"], "infer_gpt2cu");
    EXPECT_EQ(pj["inference"]["elem_bytes"], 2);
}
