// The GPU decoder's host code, compiled once (llmc/gpu/gpt2_decoder.cuh): its memory plan, prefill, decode and
// sampling; and the GPU InferBackend over it with infer_gpt2cu's program (llmc/gpu/programs.h).
#include "llmc/gpu/gpt2_decoder.cuh"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "llmc/attention.cuh"
#include "llmc/attention_decode.cuh"
#include "llmc/gpu/programs.h"
#include "llmc/io/checkpoint.h"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/nvtx.h"
#include "llmc/profiler/gpu_session.h"
#include "llmc/sample.cuh"

namespace llmc {

namespace {

/*
 * x (R, C) = wte[tok[at(r)]] + wpe[pos[r]] for every row r: the encoder for rows that carry their own position
 * (the training encoder derives it from the row index). at(r) = tok_at[r], or r when tok_at is null: decode's
 * rows read their token from the sampler's ids, which are indexed by sequence. x may not alias the tables.
 */
__global__ void embed_rows_kernel(floatX* __restrict__ x, const int* __restrict__ tok,
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
__global__ void kv_cache_write_kernel(floatX* __restrict__ k, floatX* __restrict__ v, const floatX* __restrict__ qkv,
                                      const int* __restrict__ seq, const int* __restrict__ pos, int R, int maxT, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C) return;
    const int r = (int)(i / C), c = (int)(i % C);
    const size_t at = ((size_t)seq[r] * maxT + pos[r]) * C + c;
    k[at] = qkv[(size_t)r * 3 * C + C + c];
    v[at] = qkv[(size_t)r * 3 * C + 2 * C + c];
}

} // namespace

// ------------------------------------------------------------------------------------------ memory plan

DecoderLayout layout_decoder(char* base, const GPT2Config& c, int B, int max_len, int rows, MemoryPlan* plan) {
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

MemoryPlan plan_gpu_inference(const GPT2Config& c, int B, int longest, int max_len) {
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

int largest_decode_batch(const GPT2Config& c, int longest, int max_len, size_t budget) {
    return (int)largest_that_fits(std::min<long long>(kMaxDecodeRows, INT32_MAX / std::max(longest, 1)), [&](long b) {
        return plan_gpu_inference(c, (int)b, longest, max_len).total_bytes() <= budget;
    });
}

DecoderMemoryPlan plan_decoder_memory(const GPT2Config& c, int B, int longest, int max_len, size_t free_bytes) {
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

// ------------------------------------------------------------------------------------------ GPT2DecoderGPU

GPT2DecoderGPU::GPT2DecoderGPU(const GPT2Config& c, const float* host_params, int B, int longest, int max_len,
                               bool cuda_graphs)
    : config(c), B_(B), longest_(longest), maxT_(max_len), len_(B, 0), graphs_("the decode step", cuda_graphs) {
    check_gpu_shape(c);
    if (B < 1 || longest < 1 || max_len < longest || max_len > c.max_seq_len)
        throw Error(strprintf("decoder: bad shape B=%d longest=%d max_len=%d (maxT=%d)", B, longest, max_len,
                              c.max_seq_len));
    if (B > kMaxDecodeRows) // llmc/infer/options.h's kMaxInferBatch is the same limit
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
    void* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, 5 * (size_t)B * sizeof(int)));
    int* p = static_cast<int*>(pinned);
    host_ = Staging{p, p + B, p + 2 * (size_t)B, p + 3 * (size_t)B, reinterpret_cast<float*>(p + 4 * (size_t)B)};
    CUDA_CHECK(cudaStreamSynchronize(stream)); // bf and order go out of scope
}

GPT2DecoderGPU::~GPT2DecoderGPU() {
    cudaFreeHost(host_.ids);
    cudaFree(acts_memory_);
    cudaFree(params_memory_);
    cudaStreamDestroy(stream);
}

void GPT2DecoderGPU::prefill(const std::vector<std::vector<int>>& prompts) {
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
    staged_rows_ = 0;
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

void GPT2DecoderGPU::decode(const std::vector<bool>& running) {
    if ((int)running.size() != B_)
        throw Error(strprintf("decoder: %zu running flags for %d sequences", running.size(), B_));
    std::vector<int> seq;
    for (int b = 0; b < B_; b++) {
        if (!running[b]) continue;
        if (len_[b] >= maxT_) throw Error(strprintf("decoder: sequence %d is full (%d tokens)", b, maxT_));
        if (!std::binary_search(rows_.begin(), rows_.end(), b)) // rows_ ascends
            throw Error(strprintf("decoder: sequence %d stopped before the last step: no token to append", b));
        seq.push_back(b);
    }
    if (seq.empty()) throw Error("decoder: decode with no running sequence");
    // Each row's token is the id sample() chose from the last call's logits: without it, ids would be
    // stale (or never written: uninitialised memory as embedding rows).
    if (!sampled_) throw Error("decoder: decode before sample() chose the tokens it appends");
    // The stream is idle (every call ends with a synchronisation): the staging buffer is free to fill.
    const int R = (int)seq.size();
    for (int r = 0; r < R; r++) {
        const int b = seq[r];
        host_.seq[r] = b, host_.pos[r] = len_[b], host_.len[r] = len_[b] + 1;
        len_[b]++;
    }
    phase_ = Phase::decode;
    staged_rows_ = R;
    rows_ = seq;
    sampled_ = false;
}

void GPT2DecoderGPU::decode_rows(int R) {
    const GPT2Config& c = config;
    {
        Range r(SubBlock::encoder, Phase::decode);
        auto copy_in = [&](int* to, const int* from) {
            CUDA_CHECK(cudaMemcpyAsync(to, from, R * sizeof(int), cudaMemcpyHostToDevice, stream));
        };
        copy_in(a_.seq, host_.seq), copy_in(a_.pos, host_.pos), copy_in(a_.len, host_.len);
    }
    forward_rows(R, a_.ids, a_.seq, [&](const floatX* qkv, floatX* kc, floatX* vc) {
        attention_decode(a_.atty, a_.partial, qkv, 3 * c.channels, kc, vc, a_.seq, a_.len, R, maxT_, c.num_heads,
                         c.channels / c.num_heads, stream);
    });
    Range r(SubBlock::classifier, Phase::decode);
    matmul_forward(a_.logits, a_.ln, params_.wte, nullptr, R, c.channels, c.padded_vocab_size, nullptr, stream);
}

void GPT2DecoderGPU::choose_tokens(int R, const int* order, float temperature, int top_k) {
    Range r(SubBlock::classifier, phase_);
    CUDA_CHECK(cudaMemcpyAsync(a_.coins, host_.coins, B_ * sizeof(float), cudaMemcpyHostToDevice, stream));
    sample_tokens(a_.ids, a_.logits, order, a_.coins, R, config.vocab_size, config.padded_vocab_size, temperature,
                  top_k, stream);
    CUDA_CHECK(cudaMemcpyAsync(host_.ids, a_.ids, B_ * sizeof(int), cudaMemcpyDeviceToHost, stream));
}

const int* GPT2DecoderGPU::sample(float temperature, int top_k, const std::vector<float>& coins) {
    if ((int)coins.size() != B_) throw Error(strprintf("decoder: %zu coins for %d sequences", coins.size(), B_));
    if (rows_.empty()) throw Error("decoder: sample before prefill");
    std::copy(coins.begin(), coins.end(), host_.coins);
    const int R = (int)rows_.size();
    if (staged_rows_) { // the decode step and its token choice: one graph
        graphs_.run(stream, {R, temperature, top_k}, [&] {
            decode_rows(R);
            choose_tokens(R, a_.seq, temperature, top_k);
        });
        staged_rows_ = 0;
    } else {
        choose_tokens(R, phase_ == Phase::prefill ? a_.order : a_.seq, temperature, top_k);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    sampled_ = true;
    return host_.ids;
}

std::vector<float> GPT2DecoderGPU::logits_host() {
    if (staged_rows_) decode_rows(staged_rows_), staged_rows_ = 0;
    std::vector<floatX> raw(rows_.size() * config.padded_vocab_size);
    CUDA_CHECK(cudaMemcpyAsync(raw.data(), a_.logits, raw.size() * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> out(raw.size());
    for (size_t i = 0; i < raw.size(); i++) out[i] = __bfloat162float(raw[i]);
    return out;
}

void GPT2DecoderGPU::forward_rows(int R, const int* tok, const int* tok_at, const Attend& attend) {
    const GPT2Config& c = config;
    const int C = c.channels, L = c.num_layers, threads = 256;
    const unsigned grid = (unsigned)ceil_div((size_t)R * C, (size_t)threads);
    const Phase ph = phase_;
    {
        Range r(SubBlock::encoder, ph);
        embed_rows_kernel<<<grid, threads, 0, stream>>>(a_.x, tok, tok_at, a_.pos, params_.wte, params_.wpe, R, C);
        CUDA_LAUNCH_CHECK();
    }
    for (int l = 0; l < L; l++) layer_rows(l, R, attend);
    Range r(SubBlock::lnf, ph); // residual2 of the last layer fused
    fused_residual_layernorm_forward(a_.x, a_.ln, a_.mean, a_.rstd, a_.x1, a_.proj, params_.lnfw, params_.lnfb, R,
                                     C, stream);
}
void GPT2DecoderGPU::layer_rows(int l, int R, const Attend& attend) {
    const GPT2Config& c = config;
    const int C = c.channels, threads = 256;
    const unsigned grid = (unsigned)ceil_div((size_t)R * C, (size_t)threads);
    const Phase ph = phase_;
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

// ------------------------------------------------------------------------------------------ the InferBackend

namespace {

/*
 * Each step is one NVTX range of its phase, "prefill" or "decode", from prefill() or decode() to the end of the
 * sample() that follows: the step in the trace, as the CPU profile's phase range. The decoder's own sub-block
 * ranges put its kernels in Phase::prefill and Phase::decode.
 */
class GpuInferBackend : public InferBackend {
public:
    GpuInferBackend(const GPT2Config& c, const InferShape& s)
        : cfg_(c), B_(s.B), longest_(s.longest), max_len_(s.max_len), cuda_graph_(s.cuda_graph) {}

    int elem_bytes() const override { return sizeof(floatX); }

    std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                          const prof::InferenceShape& shape) override {
        prof::ProfileContext ctx = prof::profile_context("infer_gpt2cu", cfg_, B_, longest_, 1);
        ctx.inference = shape;
        ctx.memory = plan_gpu_inference(cfg_, B_, longest_, max_len_);
        return prof::make_gpu_profile_session(so, std::move(ctx));
    }

    void load(std::vector<float> params) override {
        dec_ = std::make_unique<GPT2DecoderGPU>(cfg_, params.data(), B_, longest_, max_len_, cuda_graph_);
    }
    size_t kv_cache_bytes() const override { return dec_->cache_bytes(); }
    int length(int b) const override { return dec_->length(b); }

    void prefill(const std::vector<std::vector<int>>& prompts) override {
        step_.emplace("prefill", -1, Phase::prefill);
        dec_->prefill(prompts);
    }
    // Only the running sequences step: the decoder computes a row for each of them and none for the others.
    void decode(const std::vector<bool>& running) override {
        step_.emplace("decode", -1, Phase::decode);
        dec_->decode(running);
    }
    const int* sample(float temperature, int top_k, const std::vector<float>& coins) override {
        const int* ids = dec_->sample(temperature, top_k, coins);
        step_.reset();
        return ids;
    }

    // Device memory: the weights, the one allocation, cuBLASLt's workspace.
    double peak_memory_mib() const override { return dec_->memory.total() / 1048576.0; }
    long graph_steps() const override { return dec_->graph_launches(); }

private:
    const GPT2Config cfg_;
    const int B_, longest_, max_len_;
    const bool cuda_graph_;
    std::unique_ptr<GPT2DecoderGPU> dec_;
    std::optional<Range> step_; // the open step's range
};

std::unique_ptr<InferBackend> make_backend(const GPT2Config& c, const InferShape& shape) {
    return std::make_unique<GpuInferBackend>(c, shape);
}

// --memory-plan: the decoder's allocations for -e, -b, the prompt length and -n, and the largest -b that fits.
int print_inference_memory_plan(const InferOptions& opt) {
    const GPT2Config cfg = load_model_source(opt.model, opt.seed, false).cfg;
    const int longest = opt.prompt_len > 0 ? opt.prompt_len : opt.prompt_ids.empty() ? 1 : (int)opt.prompt_ids.size();
    const int B = std::max(opt.B, 1);
    if ((long)longest + opt.new_tokens > cfg.max_seq_len)
        throw UsageError(strprintf("-n: prompts of %d tokens and %d new tokens exceed the model's maximum length %d",
                                   longest, opt.new_tokens, cfg.max_seq_len));
    const int max_len = longest + opt.new_tokens;
    return print_memory_answer(strprintf("memory plan: infer_gpt2cu -e %s -b %d, prompts of %d tokens, %d new tokens",
                                         opt.model.c_str(), B, longest, opt.new_tokens),
                               plan_gpu_inference(cfg, B, longest, max_len), opt.device_memory,
                               strprintf("number of sequences at %d tokens each", max_len),
                               [&](size_t budget) { return largest_decode_batch(cfg, longest, max_len, budget); });
}
void require_inference_gpu() { require_gpu("infer_gpt2cu", "./infer_gpt2 generates on the CPU with the same flags"); }

} // namespace

InferProgram gpu_infer_program() {
    InferOptions defaults;
    defaults.cuda_graph = true;
    return InferProgram{"infer_gpt2cu", defaults, make_backend, print_inference_memory_plan, require_inference_gpu,
                        true};
}

} // namespace llmc
