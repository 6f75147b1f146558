/*
 * The inference driver shared by infer_gpt2 (CPU) and infer_gpt2cu (GPU): flags, model source, prompts, the
 * prefill, the decode loop and its stopping, the sampling coins, timing, the output lines (text or --json) and
 * the profile session's step brackets (--profile). Compiled once (driver.cpp); what runs where is the
 * InferBackend's business. doc/flags.md has the flags and the output.
 */
#pragma once
#include <memory>
#include <vector>

#include "llmc/infer/profile.h"
#include "llmc/infer/results.h"
#include "llmc/infer/options.h"

namespace llmc {

struct GPT2Config;

/*
 * Where the model runs: a KV-cache decoder of an InferShape. Constructed by the program's InferBackendFactory
 * without allocating; the
 * driver then asks for the profile session (--profile only), then load()s the weights. Each step is prefill()
 * or decode(), then sample(), which ends the step.
 */
class InferBackend {
public:
    virtual ~InferBackend() = default;
    virtual int elem_bytes() const = 0; // bytes per weight, activation and cache element
    // --profile: the session, before load() (the GPU measures its ceilings before the decoder takes the memory).
    // shape: the sequences and prompt tokens (the decode counts reach the session when it writes).
    virtual std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                                  const prof::InferenceShape& shape) = 0;
    // The weights (fp32, llm.c order), which the backend may free once it holds its own copy: allocates the decoder.
    virtual void load(std::vector<float> params) = 0;
    virtual size_t kv_cache_bytes() const = 0;               // as allocated
    virtual int length(int b) const = 0;                     // tokens cached for sequence b
    // Every sequence's prompt (B non-empty lists) into an empty cache: a logits row per sequence.
    virtual void prefill(const std::vector<std::vector<int>>& prompts) = 0;
    // One row for each running sequence (running[b]), the id sample() chose last for it: a logits row each.
    virtual void decode(const std::vector<bool>& running) = 0;
    // The next id of each sequence that the last prefill() or decode() computed a row for, drawn with coins[b]
    // in [0, 1) for sequence b (llmc/infer/pick_token.h; kNotFinite for a row that is not all finite). Returns
    // the B ids by sequence; those of the other sequences are stale.
    virtual const int* sample(float temperature, int top_k, const std::vector<float>& coins) = 0;
    virtual double peak_memory_mib() const = 0; // the summary's peak memory
    // Decode steps run as a CUDA graph launch so far; -1: the backend has no graphs (the summary leaves it out).
    virtual long graph_steps() const { return -1; }
};

// What a backend is built for: B sequences whose prompts hold at most `longest` tokens and which grow to at most
// max_len; cuda_graph: decode steps as CUDA graph launches (--cuda-graph; a GPU backend's).
struct InferShape {
    int B = 0, longest = 0, max_len = 0;
    bool cuda_graph = false;
};
using InferBackendFactory = std::unique_ptr<InferBackend> (*)(const GPT2Config& c, const InferShape& shape);

// One inference program: its name (--help), its defaults and backend, and what only some programs do.
struct InferProgram {
    const char* name;
    InferOptions defaults;
    InferBackendFactory make_backend;
    // --memory-plan: prints the plan and returns the exit code; null: the program refuses the flag.
    int (*memory_plan)(const InferOptions& opt) = nullptr;
    // Before anything loads: throws when the program cannot run here (no GPU); null: it always can.
    void (*check_device)() = nullptr;
    // --cuda-graph 1 is the program's (a GPU program); false: refused.
    bool cuda_graphs = false;
};

// What generate() produced: the sequences (prompt, ids, timings) and the run's summary without its shape.
struct Generated {
    std::vector<SequenceResult> seqs;
    InferSummary sum;
};

/*
 * The prefill of `prompts`, then one decode step per new token while any sequence runs: a sequence stops after
 * -n tokens, or at `eot` with --stop-eot. Sampling's coins come from Rng(--seed), one per running sequence per
 * step in sequence order, whatever the backend. A token drawn from logits that are not all finite stops the run
 * (Error). `be` is loaded; `profile` brackets each step.
 */
Generated generate(InferBackend& be, const InferOptions& opt, const std::vector<std::vector<int>>& prompts, int eot,
                   InferProfile& profile);

// The whole run of an inference program: returns the exit code (errors are thrown, for main_guard).
int run_inference(const InferProgram& program, int argc, char** argv);

} // namespace llmc
