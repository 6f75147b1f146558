/*
 * GPT-2 inference on the GPU in bf16 with a KV cache: the model of infer_gpt2cu. The CPU reference is
 * llmc/cpu/gpt2_decoder.h (same rows; its cache per layer is (B, NH, maxT, hs), this one's (B, maxT, C): see
 * llmc/attention_decode.cuh); tests: test/gpu/test_gpt2_decoder.cu.
 *
 * Rows: each row is one token appended to one sequence at that sequence's next position (its own sequence
 * and position ids on the device), so a batch of prompts of different lengths needs no padding:
 *   prefill  every prompt token of every sequence, sequences one after the other (sum of prompt lengths rows),
 *            from an empty cache;
 *   decode   one row per sequence still generating, the token the sampler chose last for it (it never leaves
 *            the device); a sequence that stopped costs nothing more, its cache stays as it was.
 * Every op but attention is per row and is the training forward's kernel (llmc/layernorm.cuh, matmul.cuh with
 * GELU as cuBLASLt's epilogue, the residual adds fused into the layernorm that follows). Attention: each row's
 * key and value are first written into the cache at (its sequence, its position); then prefill runs the
 * training attention (llmc/attention.cuh) over each prompt's contiguous rows, and decode runs
 * llmc/attention_decode.cuh over each sequence's cached positions. Only each sequence's last row goes through
 * the classifier: logits (one row per sequence of the call, Vp) stay on the device for sample_tokens
 * (llmc/sample.cuh), which writes each chosen id at its sequence's index.
 *
 * Profiling: every kernel and copy sits in an NVTX sub-block range (llmc/nvtx.h) of Phase::prefill or
 * Phase::decode, laid out as the training forward's (a "layer N" range around each layer's sub-blocks), so the
 * CUPTI profiler attributes it to its sub-block and phase. The fusions put the residual adds under ln1, ln2 and
 * lnf and GELU under fc, as in training; the KV-cache write is attention's, the step's id and position uploads
 * the encoder's, and the last-row gather and the sampler the classifier's (the head of the step).
 *
 * CUDA graphs (infer_gpt2cu --cuda-graph 1, the default): a decode step, every layer, the classifier and the token
 * choice, is one graph per (running rows, temperature, top-k), captured at the second step of its kind and replayed
 * for every later one (llmc/gpu/step_graphs.cuh). What changes from step to step (each row's sequence, position and
 * attended length, the coins) is copied by the graph from a pinned staging buffer the step fills first; the ids it
 * appends are the sampler's, already on the device. Prefill stays eager (its shapes change with the prompts). The
 * kernels and their order are the same either way, so the ids are identical with and without graphs.
 *
 * Its host code is compiled once (llmc/gpu/gpt2_decoder.cu), beside the GPU InferBackend over it (infer_gpt2cu).
 *
 * Memory: the bf16 parameters, and ONE allocation for everything else (layout_decoder below): the row
 * activations (sized for the prefill's rows), the logits, the decode attention's scratch, the small id
 * arrays and the KV cache, per layer K and V of (B, maxT, C) bf16. plan_decoder_memory checks it against
 * free device memory before anything is allocated.
 */
#pragma once
#include <cstdint>
#include <functional>
#include <tuple>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/gpu/gpt2.cuh"
#include "llmc/gpu/step_graphs.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/memory_plan.h"
#include "llmc/model/subblocks.h"

namespace llmc {

// Everything but the parameters, carved from one allocation (R: row capacity, the prefill's rows).
struct DecoderTensors {
    floatX *x, *x1, *ln, *qkv, *atty, *proj, *fch, *fch_gelu; // (R, C), 3C or 4C per row; x: residual stream
    float *mean, *rstd, *lse;                                  // (R), (R), (NH, R)
    floatX* last;                                              // (B, C) prefill: each prompt's last row after lnf
    floatX* logits;                                            // (B, Vp): a row per sequence of the last call
    float* partial;                                            // attention_decode's scratch
    int *tok, *seq, *pos;                                      // (R) per row
    int *len, *order;                                          // (B) decode: positions attended; 0..B-1
    int* ids;                                                  // (B) chosen ids, by sequence
    float* coins;                                              // (B) the sampler's uniforms, by sequence
    floatX* cache;                                             // (L, 2, B, maxT, C): K then V per layer
};

struct DecoderLayout {
    DecoderTensors t{};
    size_t bytes = 0, cache_bytes = 0;
};

// The prefill's rows at most (B prompts of up to `longest` tokens): the row capacity, checked to fit the kernels'
// int row counts (a model file's maxT may pass 32768, and B * longest then an int).
inline int prefill_rows(int B, int longest) {
    const long long rows = (long long)B * longest;
    if (rows > INT32_MAX)
        throw Error(strprintf("-b %d: %d sequences of prompts up to %d tokens are %lld rows, too many for one prefill",
                              B, B, longest, rows));
    return (int)rows;
}

// base may be null to only measure; with a plan, records every tensor in it as the plan's allocation "decoder".
DecoderLayout layout_decoder(char* base, const GPT2Config& c, int B, int max_len, int rows, MemoryPlan* plan = nullptr);

/*
 * Every device allocation GPT2DecoderGPU makes for B sequences of prompts up to `longest` tokens and max_len tokens
 * in all (llmc/model/memory_plan.h): the bf16 parameters, the one buffer of row activations, ids, scratch and KV cache,
 * and the process's cuBLASLt workspace. Every tensor lives for the whole run (no liveness).
 */
MemoryPlan plan_gpu_inference(const GPT2Config& c, int B, int longest, int max_len);

struct DecoderMemoryPlan {
    MemoryPlan plan; // every allocation and tensor
    size_t params, activations, cache, other, free_before;
    int max_batch; // largest B at these lengths that fits in free_before
    size_t total() const { return plan.total_bytes(); }
    size_t budget() const { return memory_budget(free_before); } // as the trainer's plan
};

// The largest B (at most kMaxDecodeRows) whose plan at these lengths fits in `budget` bytes; 0: not even one.
int largest_decode_batch(const GPT2Config& c, int longest, int max_len, size_t budget);

/*
 * Memory for B sequences of prompts up to `longest` tokens and max_len tokens in all, given free_bytes of
 * free device memory: the plan, and the largest B whose plan fits.
 */
DecoderMemoryPlan plan_decoder_memory(const GPT2Config& c, int B, int longest, int max_len, size_t free_bytes);

class GPT2DecoderGPU {
public:
    GPT2Config config;
    cudaStream_t stream;
    DecoderMemoryPlan memory;

    /*
     * B sequences of prompts up to `longest` tokens and max_len tokens in all (max_len <= maxT); host_params:
     * the fp32 weights in llm.c order, rounded to bf16 here. Throws llmc::Error naming -b, with the largest B
     * that fits, when the plan exceeds free device memory; nothing is allocated then. cuda_graphs: decode steps as
     * graph replays.
     */
    GPT2DecoderGPU(const GPT2Config& c, const float* host_params, int B, int longest, int max_len,
                   bool cuda_graphs = false);
    ~GPT2DecoderGPU();
    GPT2DecoderGPU(const GPT2DecoderGPU&) = delete;
    GPT2DecoderGPU& operator=(const GPT2DecoderGPU&) = delete;

    int batch() const { return B_; }
    int length(int b) const { return len_.at(b); }
    size_t cache_bytes() const { return memory.cache; }
    // The sequence of each logits row of the last prefill() (every sequence, in order) or decode() (the
    // running ones, in order).
    const std::vector<int>& logits_rows() const { return rows_; }

    // Every sequence's prompt (B non-empty lists of at most `longest` ids) from an empty cache.
    void prefill(const std::vector<std::vector<int>>& prompts);

    /*
     * One row for each running sequence (running[b]: sequence b still generates; at least one), the id sample()
     * chose last for it, at the sequence's next position. The others' caches and lengths stay as they are, and
     * nothing is computed for them: a batch whose sequences stop at different lengths costs the rows it runs.
     * The step is staged here and runs in the sample() that follows, with the token choice (one graph launch with
     * graphs), or in logits_host().
     */
    void decode(const std::vector<bool>& running);

    // Chooses the next id of each sequence of the last call's logits rows (llmc/sample.cuh) with coins[b] in
    // [0, 1) for sequence b; returns the B ids by sequence, the only data that crosses to the host (entries of
    // sequences outside logits_rows() are stale).
    // Attributed to the classifier of the phase that computed the logits.
    const int* sample(float temperature, int top_k, const std::vector<float>& coins);

    // The logits as fp32 on the host, row i for sequence logits_rows()[i] (tests).
    std::vector<float> logits_host();

    // Decode steps run as a graph launch, and graphs captured (one per key).
    long graph_launches() const { return graphs_.launches(); }
    long graph_captures() const { return graphs_.captures(); }

private:
    int B_, longest_, maxT_;
    std::vector<int> len_;         // tokens cached per sequence
    // The sequence of each logits row; on the device a_.order after prefill (phase_), a_.seq after decode.
    std::vector<int> rows_;
    bool sampled_ = false; // sample() ran since the last prefill() or decode()
    floatX* params_memory_ = nullptr;
    char* acts_memory_ = nullptr;
    ParameterTensors<floatX> params_;
    DecoderTensors a_{};
    // Pinned host memory, B entries each: the chosen ids (device to host), and what a decode step copies in.
    struct Staging {
        int *ids, *seq, *pos, *len;
        float* coins;
    };
    Staging host_{};
    int staged_rows_ = 0;          // rows of a decode() not yet run (by sample() or logits_host())
    Phase phase_ = Phase::prefill; // of the last prefill() or decode(): the profile's phase of their kernels
    StepGraphs<std::tuple<int, float, int>> graphs_; // decode steps by (rows, temperature, top-k)

    template <typename T> void upload(T* d, const std::vector<T>& h) {
        CUDA_CHECK(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    }

    // attend(qkv, k cache, v cache): writes a_.atty (R, C) for one layer (forward_rows).
    using Attend = std::function<void(const floatX* qkv, floatX* k_cache, floatX* v_cache)>;
    /*
     * The layers over R rows whose ids are tok[tok_at[r]] (tok_at null: tok[r]; device arrays) and whose
     * sequence/position ids are a_.seq/a_.pos, ending with lnf over every row in a_.ln. attend is called per layer
     * once the rows' keys and values are in that layer's cache. The ranges carry phase_.
     */
    void forward_rows(int R, const int* tok, const int* tok_at, const Attend& attend);
    void layer_rows(int l, int R, const Attend& attend);
    // A staged decode step of R rows up to its logits (only queues work: the body of its graph).
    void decode_rows(int R);
    // The token choice of R logits rows whose sequences are order[r] (device), with the staged coins, and the ids'
    // copy to host_.ids (only queues work).
    void choose_tokens(int R, const int* order, float temperature, int top_k);
};

} // namespace llmc
