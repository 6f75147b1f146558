/*
 * GPT-2 inference on the GPU in bf16 with a KV cache: the model of infer_gpt2cu. The CPU reference is
 * llmc/cpu/gpt2_decoder.h (same rows, same cache layout); tests: test/gpu/test_gpt2_decoder.cu.
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
 * Memory: the bf16 parameters, and ONE allocation for everything else (layout_decoder below): the row
 * activations (sized for the prefill's rows), the logits, the decode attention's scratch, the small id
 * arrays and the KV cache, per layer K and V of (B, maxT, C) bf16. plan_decoder_memory checks it against
 * free device memory before anything is allocated.
 */
#pragma once
#include <algorithm>
#include <vector>

#include "llmc/attention.cuh"
#include "llmc/attention_decode.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/gpt2.cuh"
#include "llmc/gpt2_config.h"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/nvtx.h"
#include "llmc/sample.cuh"

namespace llmc {

/*
 * x (R, C) = wte[tok[at(r)]] + wpe[pos[r]] for every row r: the encoder for rows that carry their own position
 * (the training encoder derives it from the row index). at(r) = tok_at[r], or r when tok_at is null: decode's
 * rows read their token from the sampler's ids, which are indexed by sequence. x may not alias the tables.
 */
static __global__ void embed_rows_kernel(floatX* __restrict__ x, const int* __restrict__ tok,
                                         const int* __restrict__ tok_at, const int* __restrict__ pos,
                                         const floatX* __restrict__ wte, const floatX* __restrict__ wpe, int R, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C) return;
    const int r = (int)(i / C), c = (int)(i % C);
    const int id = tok[tok_at ? tok_at[r] : r];
    x[i] = __float2bfloat16(__bfloat162float(wte[(size_t)id * C + c]) + __bfloat162float(wpe[(size_t)pos[r] * C + c]));
}

/*
 * The keys and values of R rows into the cache: k, v (B, maxT, C) at (seq[r], pos[r]) from qkv (R, 3C)
 * ([q | k | v] per row). Distinct rows name distinct (sequence, position) pairs, so no two threads write one
 * element.
 */
static __global__ void kv_cache_write_kernel(floatX* __restrict__ k, floatX* __restrict__ v, const floatX* __restrict__ qkv,
                                             const int* __restrict__ seq, const int* __restrict__ pos, int R, int maxT,
                                             int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C) return;
    const int r = (int)(i / C), c = (int)(i % C);
    const size_t at = ((size_t)seq[r] * maxT + pos[r]) * C + c;
    k[at] = qkv[(size_t)r * 3 * C + C + c];
    v[at] = qkv[(size_t)r * 3 * C + 2 * C + c];
}

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
inline DecoderLayout layout_decoder(char* base, const GPT2Config& c, int B, int max_len, int rows,
                                    MemoryPlan* plan = nullptr) {
    const size_t C = c.channels, NH = c.num_heads, R = rows, Vp = c.padded_vocab_size, b = B, L = c.num_layers;
    DecoderLayout out;
    BufferCarver carve = plan ? begin_allocation(*plan, base, "decoder") : BufferCarver{base};
    DecoderTensors& a = out.t;
    using K = MemoryKind;
    using S = SubBlock;
    auto act = [](const char* name, std::vector<size_t> shape, S s) {
        return TensorInfo{name, K::activations, std::move(shape), 0, (int)s};
    };
    carve(a.x, R * C, act("x", {R, C}, S::residual2));
    carve(a.x1, R * C, act("x1", {R, C}, S::residual1));
    carve(a.ln, R * C, act("ln", {R, C}, S::ln1));
    carve(a.atty, R * C, act("atty", {R, C}, S::attention));
    carve(a.proj, R * C, act("proj", {R, C}, S::attn_proj));
    carve(a.qkv, R * 3 * C, act("qkv", {R, 3 * C}, S::qkv));
    carve(a.fch, R * 4 * C, act("fch", {R, 4 * C}, S::fc));
    carve(a.fch_gelu, R * 4 * C, act("fch_gelu", {R, 4 * C}, S::gelu));
    carve(a.mean, R, act("mean", {R}, S::ln1));
    carve(a.rstd, R, act("rstd", {R}, S::ln1));
    carve(a.lse, NH * R, act("lse", {NH, R}, S::attention));
    carve(a.last, b * C, act("last", {b, C}, S::lnf));
    carve(a.logits, b * Vp, act("logits", {b, Vp}, S::classifier));
    const size_t partial = attention_decode_scratch_floats(B, (int)NH, (int)(C / NH), max_len);
    carve(a.partial, partial, {"attention_partial", K::scratch, {partial}});
    carve(a.tok, R, {"tok", K::inputs, {R}});
    carve(a.seq, R, {"seq", K::inputs, {R}});
    carve(a.pos, R, {"pos", K::inputs, {R}});
    carve(a.len, B, {"len", K::inputs, {b}});
    carve(a.order, B, {"order", K::inputs, {b}});
    carve(a.ids, B, {"ids", K::inputs, {b}});
    carve(a.coins, B, {"coins", K::inputs, {b}});
    const size_t cache_off = carve.bytes();
    // (L, 2, B, maxT, C): a plan entry per layer, its K and V together
    carve(a.cache, 2 * L * b * max_len * C, {"kv_cache", K::kv_cache, {2, b, (size_t)max_len, C}, (int)L});
    out.cache_bytes = carve.off - cache_off;
    out.bytes = carve.bytes();
    if (plan) finish_allocation(*plan, carve);
    return out;
}

/*
 * Every device allocation GPT2DecoderGPU makes for B sequences of prompts up to `longest` tokens and max_len tokens
 * in all (llmc/memory_plan.h): the bf16 parameters, the one buffer of row activations, ids, scratch and KV cache,
 * and the process's cuBLASLt workspace. Every tensor lives for the whole run (no liveness).
 */
inline MemoryPlan plan_gpu_inference(const GPT2Config& c, int B, int longest, int max_len) {
    MemoryPlan plan;
    plan.program = "GPU inference";
    plan.B = B, plan.T = longest, plan.max_len = max_len;
    {
        BufferCarver carve = begin_allocation(plan, nullptr, "parameters");
        carve_parameter_tensors<floatX>(carve, c, MemoryKind::parameters, num_parameters(c));
        finish_allocation(plan, carve);
    }
    layout_decoder(nullptr, c, B, max_len, prefill_rows(B, longest), &plan);
    {
        BufferCarver carve = begin_allocation(plan, nullptr, "cublaslt_workspace", true);
        carve.raw(CublasLt::WORKSPACE_BYTES,
                  {"cublaslt_workspace", MemoryKind::cublaslt_workspace, {CublasLt::WORKSPACE_BYTES}});
        finish_allocation(plan, carve);
    }
    return plan;
}

struct DecoderMemoryPlan {
    MemoryPlan plan; // every allocation and tensor
    size_t params, activations, cache, other, free_before;
    int max_batch; // largest B at these lengths that fits in free_before
    size_t total() const { return plan.total_bytes(); }
    size_t budget() const { return (size_t)(free_before * 0.95); } // as the trainer's plan: 5% for the context
};

// The largest B (at most kMaxDecodeRows) whose plan at these lengths fits in `budget` bytes; 0: not even one.
inline int largest_decode_batch(const GPT2Config& c, int longest, int max_len, size_t budget) {
    auto fits = [&](int b) { return plan_gpu_inference(c, b, longest, max_len).total_bytes() <= budget; };
    const int cap = std::min<long long>(kMaxDecodeRows, INT32_MAX / std::max(longest, 1));
    if (!fits(1)) return 0;
    int lo = 1, hi = cap + 1; // fits(lo), !fits(hi) or past the cap
    if (fits(cap)) return cap;
    hi = cap;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

/*
 * Memory for B sequences of prompts up to `longest` tokens and max_len tokens in all, given free_bytes of
 * free device memory: the plan, and the largest B whose plan fits.
 */
inline DecoderMemoryPlan plan_decoder_memory(const GPT2Config& c, int B, int longest, int max_len, size_t free_bytes) {
    DecoderMemoryPlan p{};
    p.plan = plan_gpu_inference(c, B, longest, max_len);
    p.params = p.plan.allocation("parameters").bytes;
    p.activations = p.plan.allocation("decoder").bytes;
    p.cache = p.plan.kind_bytes(MemoryKind::kv_cache);
    p.other = p.plan.allocation("cublaslt_workspace").bytes;
    p.free_before = free_bytes;
    p.max_batch = largest_decode_batch(c, longest, max_len, p.budget());
    return p;
}

class GPT2DecoderGPU {
public:
    GPT2Config config;
    cudaStream_t stream;
    DecoderMemoryPlan memory;

    /*
     * B sequences of prompts up to `longest` tokens and max_len tokens in all (max_len <= maxT); host_params:
     * the fp32 weights in llm.c order, rounded to bf16 here. Throws llmc::Error naming -b, with the largest B
     * that fits, when the plan exceeds free device memory; nothing is allocated then.
     */
    GPT2DecoderGPU(const GPT2Config& c, const float* host_params, int B, int longest, int max_len)
        : config(c), B_(B), longest_(longest), maxT_(max_len), len_(B, 0) {
        if (c.channels % c.num_heads != 0 || c.channels / c.num_heads != 64)
            throw Error(strprintf("the GPU attention kernel needs head size 64 (this model: C=%d / NH=%d)", c.channels,
                                  c.num_heads));
        if (c.channels % 8 != 0 || c.padded_vocab_size % 8 != 0)
            throw Error("the GPU kernels need C and Vp to be multiples of 8");
        if (B < 1 || longest < 1 || max_len < longest || max_len > c.max_seq_len)
            throw Error(strprintf("decoder: bad shape B=%d longest=%d max_len=%d (maxT=%d)", B, longest, max_len,
                                  c.max_seq_len));
        if (B > kMaxDecodeRows) // llmc/infer_options.h's kMaxInferBatch is the same limit
            throw Error(strprintf("-b %d: the GPU decoder runs at most %d sequences", B, kMaxDecodeRows));
        size_t free_bytes = 0, total = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
        memory = plan_decoder_memory(c, B, longest, max_len, free_bytes);
        if (memory.total() > memory.budget())
            throw Error(strprintf("-b %d: needs %.0f MiB of GPU memory (KV cache %.0f MiB), %.0f MiB are free (%.0f MiB "
                                  "usable); the largest -b that fits with %d tokens per sequence is %d",
                                  B, memory.total() / 1048576.0, memory.cache / 1048576.0,
                                  memory.free_before / 1048576.0, memory.budget() / 1048576.0, max_len,
                                  memory.max_batch));
        CublasLt::get();
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        // The plan's allocations (the cuBLASLt workspace is CublasLt's).
        CUDA_CHECK(cudaMalloc(&params_memory_, memory.params));
        CUDA_CHECK(cudaMalloc(&acts_memory_, memory.activations));
        a_ = layout_decoder(acts_memory_, c, B, max_len, prefill_rows(B, longest)).t;
        params_.point_into(params_memory_, c);
        const size_t n = num_parameters(c);
        std::vector<floatX> bf(n);
        for (size_t i = 0; i < n; i++) bf[i] = __float2bfloat16(host_params[i]);
        CUDA_CHECK(cudaMemcpyAsync(params_memory_, bf.data(), n * sizeof(floatX), cudaMemcpyHostToDevice, stream));
        std::vector<int> order(B);
        for (int b = 0; b < B; b++) order[b] = b;
        upload(a_.order, order);
        CUDA_CHECK(cudaMallocHost(&pinned_ids_, B * sizeof(int)));
        CUDA_CHECK(cudaStreamSynchronize(stream)); // bf and order go out of scope
    }
    ~GPT2DecoderGPU() {
        cudaFreeHost(pinned_ids_);
        cudaFree(acts_memory_);
        cudaFree(params_memory_);
        cudaStreamDestroy(stream);
    }
    GPT2DecoderGPU(const GPT2DecoderGPU&) = delete;
    GPT2DecoderGPU& operator=(const GPT2DecoderGPU&) = delete;

    int batch() const { return B_; }
    int length(int b) const { return len_.at(b); }
    size_t cache_bytes() const { return memory.cache; }
    // The sequence of each logits row of the last prefill() (every sequence, in order) or decode() (the
    // running ones, in order).
    const std::vector<int>& logits_rows() const { return rows_; }

    // Every sequence's prompt (B non-empty lists of at most `longest` ids) from an empty cache.
    void prefill(const std::vector<std::vector<int>>& prompts) {
        const GPT2Config& c = config;
        if ((int)prompts.size() != B_) throw Error(strprintf("decoder: %zu prompts for %d sequences", prompts.size(), B_));
        std::vector<int> tok, seq, pos;
        for (int b = 0; b < B_; b++) {
            if (prompts[b].empty() || prompts[b].size() > (size_t)longest_)
                throw Error(strprintf("decoder: prompt %d has %zu tokens (1 to %d)", b, prompts[b].size(), longest_));
            check_token_ids(c, prompts[b].data(), (int)prompts[b].size(), "prompt");
            for (size_t j = 0; j < prompts[b].size(); j++) tok.push_back(prompts[b][j]), seq.push_back(b), pos.push_back((int)j);
        }
        const int R = (int)tok.size();
        phase_ = Phase::prefill;
        {
            Range r(SubBlock::encoder, phase_);
            upload(a_.tok, tok), upload(a_.seq, seq), upload(a_.pos, pos);
        }
        forward_rows(R, a_.tok, nullptr, [&](const floatX* qkv, floatX*, floatX*) {
            // Each prompt's rows are contiguous and start at position 0: the training attention's (1, T) case.
            for (int b = 0, r0 = 0; b < B_; r0 += (int)prompts[b].size(), b++)
                attention_forward(a_.atty + (size_t)r0 * c.channels, a_.lse, qkv + (size_t)r0 * 3 * c.channels, 1,
                                  (int)prompts[b].size(), c.num_heads, c.channels / c.num_heads, stream);
        });
        {
            Range r(SubBlock::classifier, phase_);
            // Each sequence's last row, for the classifier.
            for (int b = 0, r0 = 0; b < B_; b++) {
                r0 += (int)prompts[b].size();
                CUDA_CHECK(cudaMemcpyAsync(a_.last + (size_t)b * c.channels, a_.ln + (size_t)(r0 - 1) * c.channels,
                                           c.channels * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
            }
            matmul_forward(a_.logits, a_.last, params_.wte, nullptr, B_, c.channels, c.padded_vocab_size, nullptr,
                           stream);
        }
        for (int b = 0; b < B_; b++) len_[b] = (int)prompts[b].size();
        rows_.resize(B_);
        for (int b = 0; b < B_; b++) rows_[b] = b;
        sampled_ = false;
        // tok/seq/pos are pageable copies: they must have landed before the vectors go.
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    /*
     * One row for each running sequence (running[b]: sequence b still generates; at least one), the id sample()
     * chose last for it, at the sequence's next position. The others' caches and lengths stay as they are, and
     * nothing is computed for them: a batch whose sequences stop at different lengths costs the rows it runs.
     */
    void decode(const std::vector<bool>& running) {
        const GPT2Config& c = config;
        if ((int)running.size() != B_)
            throw Error(strprintf("decoder: %zu running flags for %d sequences", running.size(), B_));
        std::vector<int> seq, pos, len;
        for (int b = 0; b < B_; b++) {
            if (!running[b]) continue;
            if (len_[b] >= maxT_) throw Error(strprintf("decoder: sequence %d is full (%d tokens)", b, maxT_));
            if (!std::binary_search(rows_.begin(), rows_.end(), b)) // rows_ ascends
                throw Error(strprintf("decoder: sequence %d stopped before the last step: no token to append", b));
            seq.push_back(b), pos.push_back(len_[b]), len.push_back(len_[b] + 1);
        }
        if (seq.empty()) throw Error("decoder: decode with no running sequence");
        // Each row's token is the id sample() chose from the last call's logits: without it, ids would be
        // stale (or never written: uninitialised memory as embedding rows).
        if (!sampled_) throw Error("decoder: decode before sample() chose the tokens it appends");
        const int R = (int)seq.size();
        phase_ = Phase::decode;
        {
            Range r(SubBlock::encoder, phase_);
            upload(a_.seq, seq), upload(a_.pos, pos), upload(a_.len, len);
        }
        forward_rows(R, a_.ids, a_.seq, [&](const floatX* qkv, floatX* kc, floatX* vc) {
            attention_decode(a_.atty, a_.partial, qkv, 3 * c.channels, kc, vc, a_.seq, a_.len, R, maxT_, c.num_heads,
                             c.channels / c.num_heads, stream);
        });
        {
            Range r(SubBlock::classifier, phase_);
            matmul_forward(a_.logits, a_.ln, params_.wte, nullptr, R, c.channels, c.padded_vocab_size, nullptr,
                           stream);
        }
        for (int b : seq) len_[b]++;
        rows_ = seq;
        sampled_ = false;
        CUDA_CHECK(cudaStreamSynchronize(stream)); // the pageable uploads above
    }

    // Chooses the next id of each sequence of the last call's logits rows (llmc/sample.cuh) with coins[b] in
    // [0, 1) for sequence b; returns the B ids by sequence, the only data that crosses to the host (entries of
    // sequences outside logits_rows() are stale).
    // Attributed to the classifier of the phase that computed the logits.
    const int* sample(float temperature, int top_k, const std::vector<float>& coins) {
        if ((int)coins.size() != B_) throw Error(strprintf("decoder: %zu coins for %d sequences", coins.size(), B_));
        if (rows_.empty()) throw Error("decoder: sample before prefill");
        Range r(SubBlock::classifier, phase_);
        upload(a_.coins, coins);
        sample_tokens(a_.ids, a_.logits, phase_ == Phase::prefill ? a_.order : a_.seq, a_.coins, (int)rows_.size(), config.vocab_size,
                      config.padded_vocab_size, temperature, top_k, stream);
        CUDA_CHECK(cudaMemcpyAsync(pinned_ids_, a_.ids, B_ * sizeof(int), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        sampled_ = true;
        return pinned_ids_;
    }

    // The logits as fp32 on the host, row i for sequence logits_rows()[i] (tests).
    std::vector<float> logits_host() const {
        std::vector<floatX> raw(rows_.size() * config.padded_vocab_size);
        CUDA_CHECK(cudaMemcpyAsync(raw.data(), a_.logits, raw.size() * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<float> out(raw.size());
        for (size_t i = 0; i < raw.size(); i++) out[i] = __bfloat162float(raw[i]);
        return out;
    }

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
    int* pinned_ids_ = nullptr;
    Phase phase_ = Phase::prefill; // of the last prefill() or decode(): the profile's phase of their kernels

    template <typename T> void upload(T* d, const std::vector<T>& h) {
        CUDA_CHECK(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    }

    /*
     * The layers over R rows whose ids are tok[tok_at[r]] (tok_at null: tok[r]; device arrays) and whose
     * sequence/position ids are a_.seq/a_.pos,
     * ending with lnf over every row in a_.ln. attend(qkv, k cache, v cache) writes a_.atty (R, C), called per layer
     * once the rows' keys and values are in that layer's cache. The ranges carry phase_.
     */
    template <typename Attend> void forward_rows(int R, const int* tok, const int* tok_at, Attend&& attend) {
        const GPT2Config& c = config;
        const int C = c.channels, L = c.num_layers, threads = 256;
        const unsigned grid = (unsigned)ceil_div((size_t)R * C, (size_t)threads);
        const Phase ph = phase_;
        {
            Range r(SubBlock::encoder, ph);
            embed_rows_kernel<<<grid, threads, 0, stream>>>(a_.x, tok, tok_at, a_.pos, params_.wte, params_.wpe, R, C);
            CUDA_LAUNCH_CHECK();
        }
        for (int l = 0; l < L; l++) {
            Range layer("layer", l, ph);
            floatX* kc = a_.cache + (size_t)l * 2 * B_ * maxT_ * C;
            floatX* vc = kc + (size_t)B_ * maxT_ * C;
            {
                Range r(SubBlock::ln1, ph, l);
                if (l == 0)
                    layernorm_forward(a_.ln, a_.mean, a_.rstd, a_.x, params_.ln1w, params_.ln1b, R, C, stream);
                else // the previous layer's residual2: x = x1 + fc_proj out
                    fused_residual_layernorm_forward(a_.x, a_.ln, a_.mean, a_.rstd, a_.x1, a_.proj,
                                                     params_.ln1w + l * C, params_.ln1b + l * C, R, C, stream);
            }
            {
                Range r(SubBlock::qkv, ph, l);
                matmul_forward(a_.qkv, a_.ln, params_.qkvw + (size_t)l * 3 * C * C, params_.qkvb + l * 3 * C, R, C,
                               3 * C, nullptr, stream);
            }
            {
                Range r(SubBlock::attention, ph, l);
                kv_cache_write_kernel<<<grid, threads, 0, stream>>>(kc, vc, a_.qkv, a_.seq, a_.pos, R, maxT_, C);
                CUDA_LAUNCH_CHECK();
                attend(a_.qkv, kc, vc);
            }
            {
                Range r(SubBlock::attn_proj, ph, l);
                matmul_forward(a_.proj, a_.atty, params_.attprojw + (size_t)l * C * C, params_.attprojb + l * C, R, C,
                               C, nullptr, stream);
            }
            {
                Range r(SubBlock::ln2, ph, l); // residual1 fused: x1 = x + attn_proj out
                fused_residual_layernorm_forward(a_.x1, a_.ln, a_.mean, a_.rstd, a_.x, a_.proj, params_.ln2w + l * C,
                                                 params_.ln2b + l * C, R, C, stream);
            }
            {
                Range r(SubBlock::fc, ph, l); // GELU fused as the epilogue
                matmul_forward(a_.fch_gelu, a_.ln, params_.fcw + (size_t)l * 4 * C * C, params_.fcb + l * 4 * C, R, C,
                               4 * C, a_.fch, stream);
            }
            {
                Range r(SubBlock::fc_proj, ph, l);
                matmul_forward(a_.proj, a_.fch_gelu, params_.fcprojw + (size_t)l * C * 4 * C, params_.fcprojb + l * C,
                               R, 4 * C, C, nullptr, stream);
            }
        }
        Range r(SubBlock::lnf, ph); // residual2 of the last layer fused
        fused_residual_layernorm_forward(a_.x, a_.ln, a_.mean, a_.rstd, a_.x1, a_.proj, params_.lnfw, params_.lnfb, R,
                                         C, stream);
    }
};

} // namespace llmc
