// The checks infer_gpt2 --profile and infer_gpt2cu --profile share (test/test_infer_cpu.cpp,
// test/gpu/test_infer_gpu.cu): one profile directory, one shape of run.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "test/test_util.h"

namespace testutil {

// A run whose sequences all have `prompt_len` tokens and all generate `new_tokens` (no early stop).
struct InferRunShape {
    int sequences, prompt_len, new_tokens;
};

/*
 * The directory of such a run: the summary's inference section, the prefill and decode rows of phases.csv
 * (steps and tokens), sub-block rows in those two phases only, the decode buckets' context range, the decode
 * counts in profile.json with a phase column per step, and a trace range per step. Returns profile.json.
 */
inline nlohmann::json check_inference_profile(const std::string& dir, const InferRunShape& run) {
    const int decode_steps = run.new_tokens - 1, first = run.prompt_len + 1, last = run.prompt_len + decode_steps;
    const std::string summary = slurp(dir + "/summary.txt");
    EXPECT_TRUE(has(summary, "== Inference: prefill and decode ==")) << summary;
    const auto phases = read_csv(dir + "/phases.csv");
    EXPECT_EQ(phases.size(), 2u);
    if (phases.size() == 2) {
        EXPECT_EQ(phases[0].at("phase"), "prefill");
        EXPECT_EQ(phases[0].at("steps"), "1");
        EXPECT_EQ(phases[0].at("tokens"), std::to_string(run.sequences * run.prompt_len));
        EXPECT_EQ(phases[1].at("phase"), "decode");
        EXPECT_EQ(phases[1].at("steps"), std::to_string(decode_steps));
        EXPECT_EQ(phases[1].at("tokens"), std::to_string(run.sequences * decode_steps));
        EXPECT_GT(std::stod(phases[1].at("time_us")), 0.0);
    }
    std::set<std::string> sub_phases;
    for (auto& row : read_csv(dir + "/subblocks.csv")) sub_phases.insert(row.at("phase"));
    EXPECT_EQ(sub_phases, (std::set<std::string>{"prefill", "decode"}));
    const auto buckets = read_csv(dir + "/decode_buckets.csv");
    EXPECT_FALSE(buckets.empty());
    if (!buckets.empty()) {
        EXPECT_EQ(buckets.front().at("first_pos"), std::to_string(first));
        EXPECT_EQ(buckets.back().at("last_pos"), std::to_string(last));
    }

    const nlohmann::json pj = nlohmann::json::parse(slurp(dir + "/profile.json"));
    EXPECT_EQ(pj["inference"]["decode_steps"], decode_steps);
    EXPECT_EQ(pj["inference"]["decode_tokens"], run.sequences * decode_steps);
    EXPECT_EQ(pj["inference"]["decode_context"], run.sequences * (first + last) * decode_steps / 2);
    EXPECT_GT(pj["inference"]["kv_cache_bytes"].get<double>(), 0);
    EXPECT_EQ(pj["steps"].size(), (size_t)run.new_tokens);
    if (pj["steps"].size() == (size_t)run.new_tokens) {
        EXPECT_GT(pj["steps"][0]["prefill_ms"].get<double>(), 0);
        EXPECT_EQ(pj["steps"][0]["decode_ms"].get<double>(), 0);
        EXPECT_GT(pj["steps"][decode_steps]["decode_ms"].get<double>(), 0);
        EXPECT_EQ(pj["steps"][decode_steps]["prefill_ms"].get<double>(), 0);
    }

    const nlohmann::json trace = nlohmann::json::parse(slurp(dir + "/trace.json"));
    int prefill = 0, decode = 0;
    for (auto& e : trace["traceEvents"]) {
        if (e.value("name", "") == "prefill") prefill++;
        if (e.value("name", "") == "decode") decode++;
    }
    EXPECT_EQ(prefill, 1);
    EXPECT_EQ(decode, decode_steps);
    return pj;
}

} // namespace testutil
