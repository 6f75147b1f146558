/*
 * What an inference run produced and how the programs print it (llmc/infer/driver.h): per sequence its text
 * (ids without a tokenizer) or with --json its object, then the summary line (object). doc/flags.md has the
 * fields.
 */
#pragma once
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llmc/infer/inputs.h"
#include "llmc/infer/options.h"

namespace llmc {

// What one sequence produced, and when.
struct SequenceResult {
    std::vector<int> prompt_ids, ids; // ids: generated tokens, EOT included when --stop-eot stopped there
    std::string text;                 // the generated tokens decoded ("" without a tokenizer)
    double ttft_ms = 0;               // from the start of prefill to this sequence's first token
    double decode_ms = 0;             // the decode steps this sequence took part in
};

// A whole run: the per-step latencies of decode and the totals the summary reports.
struct InferSummary {
    double prefill_ms = 0, ttft_ms = 0;
    std::vector<double> step_ms; // each decode step (one token for every active sequence)
    long prefill_tokens = 0, decode_tokens = 0;
    double peak_mem_mib = 0;
    int B = 0, prompt_len = 0, gen_len = 0;
    size_t params = 0;
    double avg_power_w = NAN, j_per_token = NAN; // --profile's power over the run; NaN: not measured (null)
    long graph_steps = -1; // decode steps run as a CUDA graph launch; -1: a backend without graphs (left out)
    // --profile's decode DRAM floor over the decode time (InferProfile::decode_floor_share) and the bandwidth it
    // is at; NaN: not measured (null)
    double decode_floor_share = NAN, dram_gbps = NAN;

    double decode_ms() const; // the decode steps' time: the sum of step_ms
};

// The q-quantile (0..1) of xs by linear interpolation between order statistics; 0 for an empty list.
double quantile(std::vector<double> xs, double q);

nlohmann::json sequence_json(const SequenceResult& s);
nlohmann::json summary_json(const InferSummary& m);
// The human summary line: "summary: B=... | prefill ... tok/s, ttft ... ms | decode ... tok/s, ... | ...".
std::string summary_line(const InferSummary& m);

// The program's output: per sequence its text (ids without a tokenizer) or with --json its object; then the
// summary line (object), its shape (B, prompt and generated lengths, parameters) taken from `in` here.
void print_results(const InferOptions& opt, const InferInputs& in, std::vector<SequenceResult>& seqs, InferSummary sum);

} // namespace llmc
