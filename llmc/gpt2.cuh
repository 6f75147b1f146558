/*
 * The GPU GPT-2: bf16 parameters, activations and gradients, fp32 master weights and AdamW moments.
 *
 * Memory is four allocations, each carved by a table: parameters (bf16), parameter gradients (bf16),
 * optimizer state (fp32 master weights, m, v: of the whole model, or with ZeRO-1 of this rank's shard) and
 * activations (every forward tensor, the backward's gradient buffers and scratch, and the device-side inputs).
 * The activation table is sized for the largest (B, T) the model was built for; smaller shapes (sampling, short
 * val batches) reuse it with the same per-layer strides.
 *
 * Fusions, and what they mean for the sub-block names of llmc/subblocks.h: the residual adds run inside the
 * layernorm kernel that follows them (residual1 inside ln2, residual2 inside the next layer's ln1 or lnf),
 * and their backward is the accumulation into dresidual; GELU runs as cuBLASLt epilogues (forward inside fc,
 * backward inside fc_proj). Those sub-blocks have no kernels of their own on the GPU.
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "llmc/adamw.cuh"
#include "llmc/attention.cuh"
#include "llmc/classifier.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gpt2_config.h"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/memory_plan.h"
#include "llmc/nvtx.h"
#include "llmc/optimizer.h"
#include "llmc/train/dist.h"

namespace llmc {

// Adds scale * sum(losses[0..n)) to *acc in a fixed order (one block): the mean loss stays on the device.
static __global__ void accumulate_loss_kernel(float* acc, const float* losses, int n, float scale) {
    using Reduce = cub::BlockReduce<float, 1024>;
    __shared__ typename Reduce::TempStorage tmp;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    float total = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) *acc += total * scale;
}

// Every activation tensor (shapes for the model's maximum B, T; L-prefixed ones hold one slab per layer).
struct ActivationTensors {
    int* inputs;        // (B, T)
    int* targets;       // (B, T)
    floatX* encoded;    // (B, T, C)
    floatX* ln1;        // (L, B, T, C)
    float* ln1_mean;    // (L, B, T)
    float* ln1_rstd;    // (L, B, T)
    floatX* qkv;        // (L, B, T, 3C)
    floatX* atty;       // (L, B, T, C)
    float* att_lse;     // (L, B, NH, T)
    floatX* residual1;  // (L, B, T, C) sub-block residual1: the residual stream + attn_proj out
    floatX* ln2;        // (L, B, T, C)
    float* ln2_mean;    // (L, B, T)
    float* ln2_rstd;    // (L, B, T)
    floatX* fch;        // (L, B, T, 4C) pre-GELU
    floatX* fch_gelu;   // (L, B, T, 4C)
    floatX* residual2;  // (L, B, T, C) sub-block residual2: residual1 + fc_proj out (the next layer's input)
    floatX* lnf;        // (B, T, C)
    float* lnf_mean;    // (B, T)
    float* lnf_rstd;    // (B, T)
    floatX* logits;     // (B, T, Vp); the classifier overwrites it with dlogits
    float* losses;      // (B, T)
    floatX* proj_out;   // (B, T, C) attn_proj / fc_proj output, consumed at once by the next residual+LN
    floatX* dresidual;  // (B, T, C) gradient of the residual stream, accumulated layer by layer
    floatX* dbtc;       // (B, T, C) backward scratch
    floatX* dbt4c;      // (B, T, 4C) backward scratch
    floatX* dqkv;       // (B, T, 3C)
    float* scratch;     // reductions: layernorm, attention, bias gradients, global norm
    float* scalars;     // [0] loss accumulated over the step's micro-batches, [1] squared grad norm
};

struct ActivationLayout {
    ActivationTensors t{};
    size_t bytes = 0;
};

// Carves the activation buffer (base may be null to only measure); with a plan, records every tensor in it as
// the plan's allocation "activations".
inline ActivationLayout layout_activations(char* base, const GPT2Config& c, int B, int T, MemoryPlan* plan = nullptr) {
    size_t L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size, BT = (size_t)B * T;
    size_t scratch = std::max<size_t>({layernorm_backward_scratch_floats((int)BT, (int)C),
                                       attention_backward_scratch_floats(B, T, (int)NH),
                                       bias_backward_scratch_floats(4 * (int)C), global_norm_scratch_floats()});
    ActivationLayout out;
    BufferCarver carve = plan ? begin_allocation(*plan, base, "activations") : BufferCarver{base};
    ActivationTensors& a = out.t;
    using K = MemoryKind;
    using S = SubBlock;
    const size_t b = B, t = T;
    const int nl = (int)L;
    auto act = [&](const char* name, std::vector<size_t> shape, int layers, S s) {
        return TensorInfo{name, K::activations, std::move(shape), layers, (int)s};
    };
    auto grad = [&](const char* name, std::vector<size_t> shape, S s) {
        return TensorInfo{name, K::activation_gradients, std::move(shape), 0, (int)s};
    };
    carve(a.inputs, BT, {"inputs", K::inputs, {b, t}});
    carve(a.targets, BT, {"targets", K::inputs, {b, t}});
    carve(a.encoded, BT * C, act("encoded", {b, t, C}, 0, S::encoder));
    carve(a.ln1, L * BT * C, act("ln1", {b, t, C}, nl, S::ln1));
    carve(a.ln1_mean, L * BT, act("ln1_mean", {b, t}, nl, S::ln1));
    carve(a.ln1_rstd, L * BT, act("ln1_rstd", {b, t}, nl, S::ln1));
    carve(a.qkv, L * BT * 3 * C, act("qkv", {b, t, 3 * C}, nl, S::qkv));
    carve(a.atty, L * BT * C, act("atty", {b, t, C}, nl, S::attention));
    carve(a.att_lse, L * BT * NH, act("att_lse", {b, NH, t}, nl, S::attention));
    carve(a.residual1, L * BT * C, act("residual1", {b, t, C}, nl, S::residual1));
    carve(a.ln2, L * BT * C, act("ln2", {b, t, C}, nl, S::ln2));
    carve(a.ln2_mean, L * BT, act("ln2_mean", {b, t}, nl, S::ln2));
    carve(a.ln2_rstd, L * BT, act("ln2_rstd", {b, t}, nl, S::ln2));
    carve(a.fch, L * BT * 4 * C, act("fch", {b, t, 4 * C}, nl, S::fc));
    carve(a.fch_gelu, L * BT * 4 * C, act("fch_gelu", {b, t, 4 * C}, nl, S::gelu));
    carve(a.residual2, L * BT * C, act("residual2", {b, t, C}, nl, S::residual2));
    carve(a.lnf, BT * C, act("lnf", {b, t, C}, 0, S::lnf));
    carve(a.lnf_mean, BT, act("lnf_mean", {b, t}, 0, S::lnf));
    carve(a.lnf_rstd, BT, act("lnf_rstd", {b, t}, 0, S::lnf));
    carve(a.logits, BT * Vp, act("logits", {b, t, Vp}, 0, S::classifier));
    carve(a.losses, BT, act("losses", {b, t}, 0, S::classifier));
    carve(a.proj_out, BT * C, act("proj_out", {b, t, C}, 0, S::attn_proj));
    carve(a.dresidual, BT * C, grad("dresidual", {b, t, C}, S::classifier));
    carve(a.dbtc, BT * C, grad("dbtc", {b, t, C}, S::classifier));
    carve(a.dbt4c, BT * 4 * C, grad("dbt4c", {b, t, 4 * C}, S::fc_proj));
    carve(a.dqkv, BT * 3 * C, grad("dqkv", {b, t, 3 * C}, S::attention));
    carve(a.scratch, scratch, {"scratch", K::scratch, {scratch}});
    carve(a.scalars, 2, {"scalars", K::scratch, {2}});
    out.bytes = carve.bytes();
    if (plan) finish_allocation(*plan, carve);
    return out;
}

/*
 * ZeRO-1 on the GPU (-z 1, doc/distributed.md): NCCL's reduce-scatter and all-gather take equal shards, so the
 * parameter and gradient buffers are padded to a multiple of 8 * shards values (each shard then starts 16-byte
 * aligned, for the x128 kernels); the padding stays zero. With one shard nothing is padded: every tensor size
 * is a multiple of C, itself a multiple of 8.
 */
inline size_t padded_parameter_count(size_t num_params, int shards) {
    const size_t unit = 8 * (size_t)shards;
    return ceil_div(num_params, unit) * unit;
}

/*
 * AdamW over the parameters [s.begin, s.end) of the llm.c-order buffers (a ZeRO-1 rank's shard; with one shard
 * the whole model): each parameter tensor's intersection with the shard, with that tensor's weight decay.
 * params and grads are the whole (padded) buffers; master, m and v hold the shard only (index 0 is parameter
 * s.begin). Padding past the last tensor is left as it is. The shard's ends and every tensor's offset are
 * multiples of 8, so every slice is 16-byte aligned. grad_norm_squared: device scalar (the global norm, squared).
 */
inline void adamw_update_shard(const GPT2Config& c, Shard s, floatX* params, float* master, const floatX* grads,
                               float* m, float* v, float lr, float beta1, float beta2, float eps, float weight_decay,
                               int t, const float* grad_norm_squared, float grad_clip, cudaStream_t stream) {
    auto sizes = parameter_sizes(c);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const size_t begin = std::max(off, s.begin), end = std::min(off + sizes[i], s.end);
        if (begin < end) {
            const size_t k = begin - s.begin; // index in the shard's arrays
            adamw_update(params + begin, master + k, grads + begin, m + k, v + k, end - begin, lr, beta1, beta2, t,
                         eps, parameter_decays(i) ? weight_decay : 0.0f, grad_norm_squared, grad_clip, stream);
        }
        off += sizes[i];
    }
}

// 5% of free memory stays spare for the CUDA context, cuBLASLt's own allocations and fragmentation.
inline size_t memory_budget(size_t free_bytes) { return (size_t)(free_bytes * 0.95); }

/*
 * The autotune's scratch output (llmc/matmul.cuh, time_matmul_candidates): a new matmul plan that accumulates
 * (every weight gradient in GPT2GPU::backward) is timed on a D of its own, allocated for the timing and freed
 * after it, in the first step. The largest is the classifier's (Vp, C) or, when Vp < 4C, fc_proj's (C, 4C).
 */
inline void plan_autotune_scratch(MemoryPlan& plan, const GPT2Config& c) {
    const size_t C = c.channels, Vp = c.padded_vocab_size, rows = std::max(Vp, 4 * C);
    BufferCarver carve = begin_allocation(plan, nullptr, "autotune_scratch");
    plan.allocations.back().transient = true;
    floatX* p = nullptr;
    TensorInfo info{"autotune_scratch", MemoryKind::scratch, {rows, C}};
    info.subblock = (int)(Vp >= 4 * C ? SubBlock::classifier : SubBlock::fc_proj);
    carve(p, rows * C, info);
    if (Vp < 4 * C) plan.tensors.back().layer = c.num_layers - 1;
    finish_allocation(plan, carve);
    plan.notes.push_back("autotune_scratch: made and freed by the cuBLASLt autotune in the first step (not when "
                         "LLMC_GEMM_AUTOTUNE=0 or every algorithm is recorded)");
}

/*
 * Every device allocation GPT2GPU makes for micro-batch (B, T), and every tensor in each (llmc/memory_plan.h):
 * the bf16 parameters and gradients (padded for ZeRO-1's shards), the optimizer state of this rank's shard
 * (fp32 master weights, AdamW m and v), the activation buffer (layout_activations), the encoder backward's sort
 * scratch with CUB's temporary storage, and the process's cuBLASLt workspace. GPT2GPU allocates exactly these.
 */
inline MemoryPlan plan_gpu_training(const GPT2Config& c, int B, int T, int shards = 1) {
    using K = MemoryKind;
    MemoryPlan plan;
    plan.program = "GPU training";
    plan.B = B, plan.T = T, plan.shards = shards;
    const size_t n = padded_parameter_count(num_parameters(c), shards), shard = n / shards;
    for (auto [name, kind] : {std::make_pair("parameters", K::parameters), std::make_pair("gradients", K::gradients)}) {
        BufferCarver carve = begin_allocation(plan, nullptr, name);
        carve_parameter_tensors<floatX>(carve, c, kind, n);
        finish_allocation(plan, carve);
    }
    {
        BufferCarver carve = begin_allocation(plan, nullptr, "optimizer");
        float* p = nullptr;
        carve(p, shard, {"master_weights", K::master_weights, {shard}});
        carve(p, shard, {"adam_m", K::adam_moments, {shard}});
        carve(p, shard, {"adam_v", K::adam_moments, {shard}});
        finish_allocation(plan, carve);
    }
    layout_activations(nullptr, c, B, T, &plan);
    {
        // EncoderBackwardScratch's layout: six int arrays of B*T, the run count, then CUB's temporary storage.
        const int cap = B * T, key_bits = EncoderBackwardScratch::sort_key_bits(c.padded_vocab_size);
        size_t temp = 0;
        bool estimated = false;
        const size_t total = EncoderBackwardScratch::bytes(cap, key_bits, &temp, &estimated);
        BufferCarver carve = begin_allocation(plan, nullptr, "encoder_backward_scratch");
        int* p = nullptr;
        for (const char* name : {"positions", "sorted_tok", "sorted_pos", "unique_tok", "run_count", "run_offset"})
            carve(p, (size_t)cap, {name, K::scratch, {(size_t)cap}});
        carve(p, 1, {"num_runs", K::scratch, {1}});
        carve.raw(temp, {"cub_temp", K::cub_temp, {temp}});
        finish_allocation(plan, carve);
        if (plan.allocations.back().bytes != total)
            throw Error("memory plan: the encoder scratch's layout differs from EncoderBackwardScratch::bytes");
        if (estimated)
            plan.notes.push_back("CUB temporary storage is an upper bound: there is no device to ask for its size");
    }
    {
        BufferCarver carve = begin_allocation(plan, nullptr, "cublaslt_workspace", true);
        carve.raw(CublasLt::WORKSPACE_BYTES, {"cublaslt_workspace", K::cublaslt_workspace, {CublasLt::WORKSPACE_BYTES}});
        finish_allocation(plan, carve);
    }
    if (gemm_autotune_enabled()) plan_autotune_scratch(plan, c);
    set_training_liveness(plan, c.num_layers);
    return plan;
}

// The largest micro-batch at sequence length T whose plan fits in `budget` bytes (0: not even B = 1).
inline int largest_training_batch(const GPT2Config& c, int T, int shards, size_t budget) {
    auto fits = [&](long b) { return plan_gpu_training(c, (int)b, T, shards).total_bytes() <= budget; };
    const long cap = 2147483647L / T; // B * T stays an int
    if (!fits(1)) return 0;
    long lo = 1, hi = 2; // fits(lo); hi: not known yet
    while (hi <= cap && fits(hi)) lo = hi, hi *= 2;
    hi = std::min(hi, cap + 1); // !fits(hi) or past the cap
    while (hi - lo > 1) {
        long mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return (int)lo;
}

struct GPUMemoryPlan {
    MemoryPlan plan; // every allocation and tensor
    size_t params, grads, optimizer, activations, free_before;
    size_t other; // the rest: cuBLASLt workspace, the encoder backward's sort scratch, the autotune's scratch
    int max_batch; // largest micro-batch at this T that fits in free_before
    size_t total() const { return plan.total_bytes(); }
    size_t budget() const { return memory_budget(free_before); }
};

// shards: ZeRO-1's optimizer shards (1: the whole optimizer state on this device). free_bytes: the device memory
// to plan for (the present device's free memory when SIZE_MAX).
inline GPUMemoryPlan plan_gpu_memory(const GPT2Config& c, int B, int T, int shards = 1, size_t free_bytes = SIZE_MAX) {
    GPUMemoryPlan p{};
    p.plan = plan_gpu_training(c, B, T, shards);
    p.params = p.plan.allocation("parameters").bytes;
    p.grads = p.plan.allocation("gradients").bytes;
    p.optimizer = p.plan.allocation("optimizer").bytes;
    p.activations = p.plan.allocation("activations").bytes;
    p.other = p.plan.total_bytes() - p.params - p.grads - p.optimizer - p.activations;
    if (free_bytes == SIZE_MAX) {
        size_t total = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    }
    p.free_before = free_bytes;
    p.max_batch = largest_training_batch(c, T, shards, p.budget());
    return p;
}

class GPT2GPU {
public:
    GPT2Config config;
    int B, T; // the largest shape the activations hold
    size_t num_params;
    size_t padded_params; // the parameter and gradient buffers' length (padded_parameter_count)
    Shard shard;          // the parameters this device's optimizer updates: all, or its ZeRO-1 shard
    bool sharded() const { return shard.size() != padded_params; } // ZeRO-1 over several devices
    ParameterTensors<floatX> params, grads;
    floatX* params_memory = nullptr; // (padded_params); the padding is zero
    floatX* grads_memory = nullptr;  // (padded_params); the padding is zero
    float* master = nullptr;         // (shard.size()) fp32 master weights of the shard
    float* m = nullptr;              // AdamW moments of the shard, (shard.size()) each
    float* v = nullptr;
    ActivationTensors acts;
    GPUMemoryPlan memory;
    cudaStream_t stream;

    // shard_rank of shards: ZeRO-1, this device keeps the master weights and moments of shard_of(padded_params)
    // only; the default is the whole optimizer.
    GPT2GPU(const GPT2Config& c, int B_, int T_, int shard_rank = 0, int shards = 1)
        : config(c), B(B_), T(T_), num_params(num_parameters(c)),
          padded_params(padded_parameter_count(num_params, shards)),
          shard(shard_of(padded_params, shard_rank, shards)) {
        if (c.channels % c.num_heads != 0 || c.channels / c.num_heads != 64)
            throw Error(strprintf("the GPU attention kernel needs head size 64 (this model: C=%d / NH=%d)", c.channels,
                                  c.num_heads));
        if (c.channels % 8 != 0 || c.padded_vocab_size % 8 != 0)
            throw Error("the GPU kernels need C and Vp to be multiples of 8");
        if (T > c.max_seq_len)
            throw Error(strprintf("-t %d: exceeds the model's maximum sequence length %d", T, c.max_seq_len));
        memory = plan_gpu_memory(c, B, T, shards);
        if (memory.total() > memory.budget())
            throw Error(strprintf("-b %d: needs %.0f MiB of GPU memory, %.0f MiB are free (%.0f MiB usable); the "
                                  "largest micro-batch that fits at T=%d is %d",
                                  B, memory.total() / 1048576.0, memory.free_before / 1048576.0,
                                  memory.budget() / 1048576.0, T, memory.max_batch));
        CublasLt::get(); // its workspace is part of the plan: allocate it now, not inside the first matmul
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        // The plan's allocations (the cuBLASLt workspace is CublasLt's, the sort scratch EncoderBackwardScratch's).
        CUDA_CHECK(cudaMalloc(&params_memory, memory.params));
        CUDA_CHECK(cudaMalloc(&grads_memory, memory.grads));
        CUDA_CHECK(cudaMalloc(&master, memory.optimizer));
        m = master + memory.plan.tensor("adam_m").offset / sizeof(float);
        v = master + memory.plan.tensor("adam_v").offset / sizeof(float);
        CUDA_CHECK(cudaMalloc(&acts_memory_, memory.activations));
        acts = layout_activations(acts_memory_, c, B, T).t;
        params.point_into(params_memory, c);
        grads.point_into(grads_memory, c);
        // Everything is ordered on `stream`: plain cudaMemset/cudaMemcpy run on the legacy default stream,
        // which a non-blocking stream does not wait for.
        CUDA_CHECK(cudaMemsetAsync(params_memory, 0, memory.params, stream)); // the padding stays zero
        CUDA_CHECK(cudaMemsetAsync(grads_memory, 0, memory.grads, stream));
        CUDA_CHECK(cudaMemsetAsync(master, 0, memory.optimizer, stream));
        CUDA_CHECK(cudaMemsetAsync(acts.scalars, 0, 2 * sizeof(float), stream));
        CUDA_CHECK(cudaMallocHost(&pinned_tokens_, 4 * (size_t)B * T * sizeof(int)));
        CUDA_CHECK(cudaMallocHost(&pinned_scalars_, 2 * sizeof(float)));
        CUDA_CHECK(cudaEventCreateWithFlags(&scalars_ready_, cudaEventDisableTiming));
        for (cudaEvent_t& e : slot_events_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        encoder_scratch_ = std::make_unique<EncoderBackwardScratch>(B, T, c.padded_vocab_size); // the sort keys need only 16 bits
    }
    ~GPT2GPU() {
        cudaFreeHost(pinned_tokens_);
        cudaFreeHost(pinned_scalars_);
        cudaEventDestroy(scalars_ready_);
        for (cudaEvent_t e : slot_events_) cudaEventDestroy(e);
        cudaFree(acts_memory_);
        cudaFree(master);
        cudaFree(grads_memory);
        cudaFree(params_memory);
        cudaStreamDestroy(stream);
    }
    GPT2GPU(const GPT2GPU&) = delete;
    GPT2GPU& operator=(const GPT2GPU&) = delete;

    /*
     * The setters take the whole model's fp32 arrays (num_params values, llm.c order) and keep the shard's part;
     * the getters give the shard's (shard.size() values, its padding included). With ZeRO-1 the bf16 parameters
     * outside the shard are the other devices' to fill (an all-gather, as after an update).
     */
    // The fp32 master weights and the bf16 parameters [shard) from them.
    void set_parameters(const float* host_params) {
        upload_shard(master, host_params);
        copy_float_to_bf16(params_memory + shard.begin, master, shard.size(), stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<float> get_master_weights() const { return download(master, shard.size()); }
    std::vector<float> get_moments_m() const { return download(m, shard.size()); }
    std::vector<float> get_moments_v() const { return download(v, shard.size()); }
    void set_moments(const std::vector<float>& mh, const std::vector<float>& vh) {
        upload_shard(m, mh.data());
        upload_shard(v, vh.data());
    }

    /*
     * Forward pass for a (B, T) batch of host token ids. With targets, per-position losses are computed and
     * loss_scale * sum(losses) is added to the step's loss accumulator; with dloss > 0 the classifier also
     * leaves dlogits = dloss * (probs - onehot) in place of the logits for backward().
     */
    void forward(const int* inputs, const int* targets, int b, int t, float loss_scale, float dloss) {
        // Any shape with b*t <= B*T fits: the per-layer slabs and every scratch are sized by B*T alone, so
        // sampling can run (1, t) with t up to maxT on a model allocated for a shorter T.
        if (b <= 0 || t <= 0 || t > config.max_seq_len || (size_t)b * t > (size_t)B * T)
            throw Error(strprintf("forward shape (%d, %d) does not fit the allocated (%d, %d) with maxT %d", b, t, B, T,
                                  config.max_seq_len));
        cur_B_ = b, cur_T_ = t;
        backward_ready_ = false;
        upload_tokens(inputs, targets, b * t);
        const int L = config.num_layers, C = config.channels, NH = config.num_heads, Vp = config.padded_vocab_size;
        const int BT = b * t;
        const size_t slab = (size_t)B * T; // per-layer stride: fixed by the allocation, not by this call
        const ActivationTensors& a = acts;
        Range fwd("forward", -1, Phase::fwd);
        {
            Range r(SubBlock::encoder, Phase::fwd);
            encoder_forward(a.encoded, a.inputs, params.wte, params.wpe, b, t, C, stream);
        }
        for (int l = 0; l < L; l++) {
            Range layer("layer", l, Phase::fwd);
            floatX* ln1 = a.ln1 + l * slab * C;
            float *ln1_mean = a.ln1_mean + l * slab, *ln1_rstd = a.ln1_rstd + l * slab;
            floatX* qkv = a.qkv + l * slab * 3 * C;
            floatX* atty = a.atty + l * slab * C;
            float* lse = a.att_lse + l * slab * NH;
            floatX* residual1 = a.residual1 + l * slab * C;
            floatX* ln2 = a.ln2 + l * slab * C;
            floatX* fch = a.fch + l * slab * 4 * C;
            floatX* fch_gelu = a.fch_gelu + l * slab * 4 * C;
            {
                Range r(SubBlock::ln1, Phase::fwd, l);
                if (l == 0)
                    layernorm_forward(ln1, ln1_mean, ln1_rstd, a.encoded, params.ln1w, params.ln1b, BT, C, stream);
                else // residual2 of the previous layer, fused: residual2[l-1] = residual1[l-1] + fc_proj out
                    fused_residual_layernorm_forward(a.residual2 + (l - 1) * slab * C, ln1, ln1_mean, ln1_rstd,
                                                     a.residual1 + (l - 1) * slab * C, a.proj_out,
                                                     params.ln1w + l * C, params.ln1b + l * C, BT, C, stream);
            }
            {
                Range r(SubBlock::qkv, Phase::fwd, l);
                matmul_forward(qkv, ln1, params.qkvw + (size_t)l * 3 * C * C, params.qkvb + l * 3 * C, BT, C, 3 * C,
                               nullptr, stream);
            }
            {
                Range r(SubBlock::attention, Phase::fwd, l);
                attention_forward(atty, lse, qkv, b, t, NH, C / NH, stream);
            }
            {
                Range r(SubBlock::attn_proj, Phase::fwd, l);
                matmul_forward(a.proj_out, atty, params.attprojw + (size_t)l * C * C, params.attprojb + l * C, BT, C,
                               C, nullptr, stream);
            }
            {
                Range r(SubBlock::ln2, Phase::fwd, l); // residual1 fused: residual1 = residual + attn_proj out
                const floatX* residual = l == 0 ? a.encoded : a.residual2 + (l - 1) * slab * C;
                fused_residual_layernorm_forward(residual1, ln2, a.ln2_mean + l * slab, a.ln2_rstd + l * slab,
                                                 residual, a.proj_out, params.ln2w + l * C, params.ln2b + l * C, BT,
                                                 C, stream);
            }
            {
                Range r(SubBlock::fc, Phase::fwd, l); // GELU fused as the epilogue
                matmul_forward(fch_gelu, ln2, params.fcw + (size_t)l * 4 * C * C, params.fcb + l * 4 * C, BT, C,
                               4 * C, fch, stream);
            }
            {
                Range r(SubBlock::fc_proj, Phase::fwd, l);
                matmul_forward(a.proj_out, fch_gelu, params.fcprojw + (size_t)l * C * 4 * C, params.fcprojb + l * C,
                               BT, 4 * C, C, nullptr, stream);
            }
        }
        {
            Range r(SubBlock::lnf, Phase::fwd); // residual2 of the last layer fused
            fused_residual_layernorm_forward(a.residual2 + (L - 1) * slab * C, a.lnf, a.lnf_mean, a.lnf_rstd,
                                             a.residual1 + (L - 1) * slab * C, a.proj_out, params.lnfw, params.lnfb,
                                             BT, C, stream);
        }
        {
            Range r(SubBlock::classifier, Phase::fwd);
            matmul_forward(a.logits, a.lnf, params.wte, nullptr, BT, C, Vp, nullptr, stream);
            if (targets) {
                fused_classifier(a.logits, a.losses, a.targets, dloss, BT, config.vocab_size, Vp, dloss > 0, stream);
                accumulate_loss_kernel<<<1, 1024, 0, stream>>>(a.scalars, a.losses, BT, loss_scale);
                CUDA_LAUNCH_CHECK();
                backward_ready_ = dloss > 0;
            }
        }
    }

    // What train_step calls, for data parallelism: nothing, on one process. sum_norm(sq) sums the ranks' squared
    // norms of their shards (ZeRO-1) in the device scalar; gather_params() fills the parameters outside the shard.
    struct NoReduce {
        void layer_done(int) {}
        void finish(float*) {}
        void sum_norm(float*) {}
        void gather_params() {}
    };

    /*
     * Backward of the last forward (which must have run with dloss > 0); parameter gradients accumulate.
     * buckets.layer_done(l) is called, on the host, once the kernels that finish layer l's parameter gradients
     * are queued (layers L-1 down to 0, then -1 for wte, wpe and lnf: layer_parameter_ranges), so a data-parallel
     * trainer can start reducing them while backward goes on.
     */
    template <typename Buckets = NoReduce> void backward(Buckets&& buckets = Buckets{}) {
        // A profile sees the collectives' launches under the comm sub-block; one process adds no range at all.
        auto bucket_done = [](auto& bk, int layer) {
            if constexpr (!std::is_same_v<std::decay_t<Buckets>, NoReduce>) {
                Range r(SubBlock::comm, Phase::bwd, layer);
                bk.layer_done(layer);
            } else {
                (void)bk, (void)layer;
            }
        };
        if (!backward_ready_) throw Error("backward() without a forward() with targets and dloss > 0 before it");
        backward_ready_ = false; // dlogits are consumed: a second backward would read them as logits
        const int L = config.num_layers, C = config.channels, NH = config.num_heads, Vp = config.padded_vocab_size;
        const int b = cur_B_, t = cur_T_, BT = b * t;
        const size_t slab = (size_t)B * T;
        const ActivationTensors& a = acts;
        Range bwd("backward", -1, Phase::bwd);
        CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
        {
            Range r(SubBlock::classifier, Phase::bwd);
            matmul_backward(a.dbtc, grads.wte, nullptr, a.scratch, a.logits, a.lnf, params.wte, BT, C, Vp, nullptr,
                            stream);
        }
        {
            Range r(SubBlock::lnf, Phase::bwd);
            layernorm_backward(a.dresidual, grads.lnfw, grads.lnfb, a.scratch, a.dbtc, a.residual2 + (L - 1) * slab * C,
                               params.lnfw, a.lnf_mean, a.lnf_rstd, BT, C, stream);
        }
        for (int l = L - 1; l >= 0; l--) {
            Range layer("layer", l, Phase::bwd);
            const floatX* residual = l == 0 ? a.encoded : a.residual2 + (l - 1) * slab * C;
            floatX* ln1 = a.ln1 + l * slab * C;
            floatX* qkv = a.qkv + l * slab * 3 * C;
            floatX* atty = a.atty + l * slab * C;
            floatX* fch = a.fch + l * slab * 4 * C;
            floatX* fch_gelu = a.fch_gelu + l * slab * 4 * C;
            {
                // dresidual is d(residual2) = d(fc_proj out); the GELU backward of fc is the DGELU epilogue here.
                Range r(SubBlock::fc_proj, Phase::bwd, l);
                matmul_backward(a.dbt4c, grads.fcprojw + (size_t)l * C * 4 * C, grads.fcprojb + l * C, a.scratch,
                                a.dresidual, fch_gelu, params.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C, fch,
                                stream);
            }
            {
                Range r(SubBlock::fc, Phase::bwd, l);
                matmul_backward(a.dbtc, grads.fcw + (size_t)l * 4 * C * C, grads.fcb + l * 4 * C, a.scratch, a.dbt4c,
                                a.ln2 + l * slab * C, params.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, nullptr, stream);
            }
            {
                Range r(SubBlock::ln2, Phase::bwd, l);
                layernorm_backward(a.dresidual, grads.ln2w + l * C, grads.ln2b + l * C, a.scratch, a.dbtc,
                                   a.residual1 + l * slab * C, params.ln2w + l * C, a.ln2_mean + l * slab,
                                   a.ln2_rstd + l * slab, BT, C, stream);
            }
            {
                Range r(SubBlock::attn_proj, Phase::bwd, l);
                matmul_backward(a.dbtc, grads.attprojw + (size_t)l * C * C, grads.attprojb + l * C, a.scratch,
                                a.dresidual, atty, params.attprojw + (size_t)l * C * C, BT, C, C, nullptr, stream);
            }
            {
                Range r(SubBlock::attention, Phase::bwd, l);
                attention_backward(a.dqkv, a.scratch, a.dbtc, atty, a.att_lse + l * slab * NH, qkv, b, t, NH, C / NH,
                                   stream);
            }
            {
                Range r(SubBlock::qkv, Phase::bwd, l);
                matmul_backward(a.dbtc, grads.qkvw + (size_t)l * 3 * C * C, grads.qkvb + l * 3 * C, a.scratch, a.dqkv,
                                ln1, params.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, nullptr, stream);
            }
            {
                Range r(SubBlock::ln1, Phase::bwd, l);
                layernorm_backward(a.dresidual, grads.ln1w + l * C, grads.ln1b + l * C, a.scratch, a.dbtc, residual,
                                   params.ln1w + l * C, a.ln1_mean + l * slab, a.ln1_rstd + l * slab, BT, C, stream);
            }
            bucket_done(buckets, l);
        }
        {
            Range r(SubBlock::encoder, Phase::bwd);
            encoder_backward(grads.wte, grads.wpe, *encoder_scratch_, a.dresidual, a.inputs, b, t, C, stream);
        }
        bucket_done(buckets, -1);
    }

    void zero_grad() { CUDA_CHECK(cudaMemsetAsync(grads_memory, 0, memory.grads, stream)); }
    void zero_loss() { CUDA_CHECK(cudaMemsetAsync(acts.scalars, 0, 2 * sizeof(float), stream)); }

    /*
     * Global grad norm and AdamW on the shard's tensors; the clip factor never leaves the device. With ZeRO-1 the
     * norm is over the shard's reduced gradients, summed over the ranks by reduce.sum_norm, and the updated
     * parameters are gathered by reduce.gather_params.
     */
    template <typename Reduce = NoReduce>
    void update(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_clip, int t,
                Reduce&& reduce = Reduce{}) {
        {
            Range r(SubBlock::grad_norm, Phase::opt);
            global_norm_squared(acts.scalars + 1, acts.scratch, grads_memory + shard.begin, shard.size(), stream);
        }
        if (sharded()) {
            Range r(SubBlock::comm, Phase::opt);
            reduce.sum_norm(acts.scalars + 1);
        }
        {
            Range r(SubBlock::optimizer, Phase::opt);
            adamw_update_shard(config, shard, params_memory, master, grads_memory, m, v, lr, beta1, beta2, eps,
                               weight_decay, t, acts.scalars + 1, grad_clip, stream);
        }
        if (sharded()) {
            Range r(SubBlock::comm, Phase::opt);
            reduce.gather_params();
        }
    }

    /*
     * One optimizer step, as every program trains: grad_accum micro-batches of (B, T) from next_batch(), which
     * returns {inputs, targets} host pointers; forward and backward each, then the global norm and AdamW.
     * Returns {mean loss, grad norm}; reading them is the step's one synchronisation.
     *
     * Data parallelism (llmc/train/dist.h): this is one of `ranks` processes, each with grad_accum micro-batches;
     * every micro-batch weighs 1/(all of them). The last micro-batch's backward hands each finished bucket of
     * gradients to reduce.layer_done (see backward), which starts summing it over the ranks; reduce.finish(loss)
     * sums the fp32 loss (a device pointer) and makes this stream wait for every reduction, before the norm and
     * the update. With ZeRO-1 (a model of several shards) finish reduce-scatters the gradients instead, and
     * update() calls reduce.sum_norm and reduce.gather_params.
     */
    template <typename NextBatch, typename Reduce = NoReduce>
    std::pair<float, float> train_step(NextBatch&& next_batch, int b, int t, int grad_accum, float lr,
                                       const AdamWConfig& adam, int step, int ranks = 1, Reduce&& reduce = Reduce{}) {
        Range r("step");
        zero_grad();
        zero_loss();
        float scale = 1.0f / ((float)b * t * grad_accum * ranks); // mean over every position of every micro-batch
        for (int micro = 0; micro < grad_accum; micro++) {
            auto [inputs, targets] = next_batch();
            forward(inputs, targets, b, t, scale, scale);
            if (ranks > 1 && micro == grad_accum - 1) backward(reduce);
            else backward();
        }
        if (ranks > 1) {
            Range comm(SubBlock::comm, Phase::bwd);
            reduce.finish(acts.scalars);
        }
        {
            Range opt("optimizer", -1, Phase::opt);
            update(lr, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.grad_clip, step, reduce);
        }
        fetch_scalars();
        return read_scalars();
    }

    // Queues a copy of {loss, squared grad norm} to pinned memory; read_scalars() waits for it.
    void fetch_scalars() {
        CUDA_CHECK(cudaMemcpyAsync(pinned_scalars_, acts.scalars, 2 * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaEventRecord(scalars_ready_, stream));
    }
    // {loss, grad norm} of the last fetch_scalars(); blocks until the GPU has got there (the step's one sync).
    std::pair<float, float> read_scalars() {
        CUDA_CHECK(cudaEventSynchronize(scalars_ready_));
        return {pinned_scalars_[0], std::sqrt(pinned_scalars_[1])};
    }

    // Logits of position (0, t) from the last forward, as fp32 on the host (sampling).
    std::vector<float> logits_row(int t) {
        std::vector<floatX> row(config.padded_vocab_size);
        CUDA_CHECK(cudaMemcpyAsync(row.data(), acts.logits + (size_t)t * config.padded_vocab_size,
                                   row.size() * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<float> out(row.size());
        for (size_t i = 0; i < row.size(); i++) out[i] = __bfloat162float(row[i]);
        return out;
    }

private:
    /*
     * Token ids go through one of two pinned buffers: the copy is asynchronous, so the buffer a pending copy
     * reads must not be rewritten; alternating lets the CPU fill the next batch while the last copy runs,
     * and it only waits for the copy issued two batches ago.
     */
    void upload_tokens(const int* inputs, const int* targets, int n) {
        slot_ ^= 1;
        if (slot_pending_[slot_]) CUDA_CHECK(cudaEventSynchronize(slot_events_[slot_]));
        int* in = pinned_tokens_ + (size_t)slot_ * 2 * B * T; // a slot: B*T inputs, then B*T targets
        int* tg = in + (size_t)B * T;
        // An id outside [0, V) would also be mis-sorted by the encoder backward's bounded-key sort.
        check_token_ids(config, inputs, n, "input");
        if (targets) check_token_ids(config, targets, n, "target");
        memcpy(in, inputs, n * sizeof(int));
        CUDA_CHECK(cudaMemcpyAsync(acts.inputs, in, n * sizeof(int), cudaMemcpyHostToDevice, stream));
        if (targets) {
            memcpy(tg, targets, n * sizeof(int));
            CUDA_CHECK(cudaMemcpyAsync(acts.targets, tg, n * sizeof(int), cudaMemcpyHostToDevice, stream));
        }
        CUDA_CHECK(cudaEventRecord(slot_events_[slot_], stream));
        slot_pending_[slot_] = true;
    }
    // Copies between pageable host memory and fp32 device arrays, in order on `stream` and complete on return.
    // upload_shard: the shard's part of a whole host array (num_params values), padding zeroed.
    void upload_shard(float* d, const float* h) const {
        const size_t n = shard.begin < num_params ? std::min(shard.end, num_params) - shard.begin : 0;
        CUDA_CHECK(cudaMemsetAsync(d, 0, shard.size() * sizeof(float), stream));
        if (n > 0) CUDA_CHECK(cudaMemcpyAsync(d, h + shard.begin, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<float> download(const float* d, size_t n) const {
        std::vector<float> h(n);
        CUDA_CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return h;
    }

    char* acts_memory_ = nullptr;
    std::unique_ptr<EncoderBackwardScratch> encoder_scratch_;
    int* pinned_tokens_ = nullptr;
    float* pinned_scalars_ = nullptr;
    cudaEvent_t scalars_ready_ = nullptr;
    cudaEvent_t slot_events_[2] = {nullptr, nullptr};
    bool slot_pending_[2] = {false, false};
    int slot_ = 0;
    int cur_B_ = 0, cur_T_ = 0;
    bool backward_ready_ = false;
};

} // namespace llmc
