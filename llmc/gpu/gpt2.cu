// The GPU GPT-2's host code, compiled once (llmc/gpu/gpt2.cuh): its memory plan and allocations, forward, backward
// and AdamW steps; and the GPU TrainBackend over it with train_gpt2cu's program (llmc/gpu/programs.h), which
// train_gpt2cu and profile_gpt2cu train through.
#include "llmc/gpu/gpt2.cuh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "llmc/adamw.cuh"
#include "llmc/attention.cuh"
#include "llmc/bias_backward.cuh"
#include "llmc/classifier.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gpu/programs.h"
#include "llmc/gpu/step_graphs.cuh"
#include "llmc/io/checkpoint.h"
#include "llmc/io/dataloader.h"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/nvtx.h"
#include "llmc/profiler/device_specs.h"
#include "llmc/profiler/gpu_session.h"
#include "llmc/profiler/memory.h"
#include "llmc/profiler/nvml_sampler.h"
#include "llmc/profiler/session.h"
#include "llmc/train/plan.h"
#include "llmc/util/progress.h"
#ifdef LLMC_HAVE_NCCL
#include "llmc/train/dist_nccl.cuh"
#endif

namespace llmc {

namespace {

// Adds scale * sum(losses[0..n)) to *acc in a fixed order (one block): the mean loss stays on the device.
__global__ void accumulate_loss_kernel(float* acc, const float* losses, int n, float scale) {
    using Reduce = cub::BlockReduce<float, 1024>;
    __shared__ typename Reduce::TempStorage tmp;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    float total = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) *acc += total * scale;
}

/*
 * The autotune's scratch output (llmc/matmul.cuh, time_matmul_candidates): a new matmul plan that accumulates
 * (every weight gradient in GPT2GPU::backward) is timed on a D of its own, allocated for the timing and freed
 * after it, in the first step. The largest is the classifier's (Vp, C) or, when Vp < 4C, fc_proj's (C, 4C).
 */
void plan_autotune_scratch(MemoryPlan& plan, const GPT2Config& c) {
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

} // namespace

// ------------------------------------------------------------------------------------------ memory plan

ActivationLayout layout_activations(char* base, const GPT2Config& c, int B, int T, MemoryPlan* plan) {
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
    carve(a.adamw_step, 1, {"adamw_step", K::scratch, {1}});
    out.bytes = carve.bytes();
    if (plan) finish_allocation(*plan, carve);
    return out;
}

void adamw_update_shard(const GPT2Config& c, Shard s, floatX* params, float* master, const floatX* grads, float* m,
                        float* v, const AdamWStep* step, float beta1, float beta2, float eps, float weight_decay,
                        const float* grad_norm_squared, float grad_clip, cudaStream_t stream) {
    auto sizes = parameter_sizes(c);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const size_t begin = std::max(off, s.begin), end = std::min(off + sizes[i], s.end);
        if (begin < end) {
            const size_t k = begin - s.begin; // index in the shard's arrays
            adamw_update(params + begin, master + k, grads + begin, m + k, v + k, end - begin, step, beta1, beta2, eps,
                         parameter_decays(i) ? weight_decay : 0.0f, grad_norm_squared, grad_clip, stream);
        }
        off += sizes[i];
    }
}

MemoryPlan plan_gpu_training(const GPT2Config& c, int B, int T, int shards) {
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

int largest_training_batch(const GPT2Config& c, int T, int shards, size_t budget) {
    return largest_that_fits(2147483647L / T, // B * T stays an int
                             [&](long b) { return plan_gpu_training(c, (int)b, T, shards).total_bytes() <= budget; });
}

GPUMemoryPlan plan_gpu_memory(const GPT2Config& c, int B, int T, int shards, size_t free_bytes) {
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

int print_memory_answer(const std::string& title, const MemoryPlan& plan, size_t device_memory,
                        const std::string& largest_what, const std::function<int(size_t budget)>& largest_within) {
    printf("%s\n%s", title.c_str(), prof::format_memory_report(plan, prof::analyze_memory(plan)).c_str());
    prof::FitAnswer fit;
    fit.largest_what = largest_what;
    fit.device_bytes = device_memory_to_plan(device_memory, &fit.source);
    if (fit.device_bytes) {
        fit.budget = memory_budget(fit.device_bytes);
        fit.largest = largest_within(fit.budget);
    }
    printf("%s", prof::format_fit(plan, fit).c_str());
    return 0;
}

// ------------------------------------------------------------------------------------------ GPT2GPU

GPT2GPU::GPT2GPU(const GPT2Config& c, int B_, int T_, int shard_rank, int shards, bool cuda_graphs)
    : config(c), B(B_), T(T_), num_params(num_parameters(c)), padded_params(padded_parameter_count(num_params, shards)),
      shard(shard_of(padded_params, shard_rank, shards)), micro_graphs_("the training micro-step", cuda_graphs),
      update_graphs_("the optimizer update", cuda_graphs) {
    check_gpu_shape(c);
    check_seq_len(c, T);
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
    CUDA_CHECK(cudaMallocHost(&pinned_adamw_, sizeof(AdamWStep)));
    CUDA_CHECK(cudaEventCreateWithFlags(&scalars_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&adamw_copied_, cudaEventDisableTiming));
    for (cudaEvent_t& e : slot_events_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    encoder_scratch_ = std::make_unique<EncoderBackwardScratch>(B, T, c.padded_vocab_size); // the sort keys need only 16 bits
}

GPT2GPU::~GPT2GPU() {
    cudaFreeHost(pinned_tokens_);
    cudaFreeHost(pinned_scalars_);
    cudaFreeHost(pinned_adamw_);
    cudaEventDestroy(scalars_ready_);
    cudaEventDestroy(adamw_copied_);
    for (cudaEvent_t e : slot_events_) cudaEventDestroy(e);
    cudaFree(acts_memory_);
    cudaFree(master);
    cudaFree(grads_memory);
    cudaFree(params_memory);
    cudaStreamDestroy(stream);
}

void GPT2GPU::set_parameters(const float* host_params) {
    upload_shard(master, host_params);
    copy_float_to_bf16(params_memory + shard.begin, master, shard.size(), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GPT2GPU::set_moments(const std::vector<float>& mh, const std::vector<float>& vh) {
    upload_shard(m, mh.data());
    upload_shard(v, vh.data());
}

void GPT2GPU::check_shape(int b, int t, const char* what) const {
    if (b <= 0 || t <= 0 || t > config.max_seq_len || (size_t)b * t > (size_t)B * T)
        throw Error(strprintf("%s shape (%d, %d) does not fit the allocated (%d, %d) with maxT %d", what, b, t, B, T,
                              config.max_seq_len));
}

void GPT2GPU::forward(const int* inputs, const int* targets, int b, int t, float loss_scale, float dloss) {
    check_shape(b, t, "forward");
    cur_B_ = b, cur_T_ = t;
    backward_ready_ = false; // until this forward's tokens are checked and its kernels launched
    upload_tokens(inputs, targets, b * t);
    forward_kernels(targets != nullptr, loss_scale, dloss);
    backward_ready_ = targets && dloss > 0;
}

void GPT2GPU::forward_kernels(bool targets, float loss_scale, float dloss) {
    const int L = config.num_layers, C = config.channels, Vp = config.padded_vocab_size, b = cur_B_, t = cur_T_;
    const int BT = b * t;
    const size_t slab = (size_t)B * T; // per-layer stride: fixed by the allocation, not by this call
    const ActivationTensors& a = acts;
    Range fwd("forward", -1, Phase::fwd);
    {
        Range r(SubBlock::encoder, Phase::fwd);
        encoder_forward(a.encoded, a.inputs, params.wte, params.wpe, b, t, C, stream);
    }
    for (int l = 0; l < L; l++) forward_layer(l);
    {
        Range r(SubBlock::lnf, Phase::fwd); // residual2 of the last layer fused
        fused_residual_layernorm_forward(a.residual2 + (L - 1) * slab * C, a.lnf, a.lnf_mean, a.lnf_rstd,
                                         a.residual1 + (L - 1) * slab * C, a.proj_out, params.lnfw, params.lnfb, BT, C,
                                         stream);
    }
    {
        Range r(SubBlock::classifier, Phase::fwd);
        matmul_forward(a.logits, a.lnf, params.wte, nullptr, BT, C, Vp, nullptr, stream);
        if (targets) {
            fused_classifier(a.logits, a.losses, a.targets, dloss, BT, config.vocab_size, Vp, dloss > 0, stream);
            accumulate_loss_kernel<<<1, 1024, 0, stream>>>(a.scalars, a.losses, BT, loss_scale);
            CUDA_LAUNCH_CHECK();
        }
    }
}

void GPT2GPU::forward_layer(int l) {
    const int C = config.channels, NH = config.num_heads, b = cur_B_, t = cur_T_, BT = b * t;
    const size_t slab = (size_t)B * T;
    const ActivationTensors& a = acts;
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
                                             a.residual1 + (l - 1) * slab * C, a.proj_out, params.ln1w + l * C,
                                             params.ln1b + l * C, BT, C, stream);
    }
    {
        Range r(SubBlock::qkv, Phase::fwd, l);
        matmul_forward(qkv, ln1, params.qkvw + (size_t)l * 3 * C * C, params.qkvb + l * 3 * C, BT, C, 3 * C, nullptr,
                       stream);
    }
    {
        Range r(SubBlock::attention, Phase::fwd, l);
        attention_forward(atty, lse, qkv, b, t, NH, C / NH, stream);
    }
    {
        Range r(SubBlock::attn_proj, Phase::fwd, l);
        matmul_forward(a.proj_out, atty, params.attprojw + (size_t)l * C * C, params.attprojb + l * C, BT, C, C,
                       nullptr, stream);
    }
    {
        Range r(SubBlock::ln2, Phase::fwd, l); // residual1 fused: residual1 = residual + attn_proj out
        const floatX* residual = l == 0 ? a.encoded : a.residual2 + (l - 1) * slab * C;
        fused_residual_layernorm_forward(residual1, ln2, a.ln2_mean + l * slab, a.ln2_rstd + l * slab, residual,
                                         a.proj_out, params.ln2w + l * C, params.ln2b + l * C, BT, C, stream);
    }
    {
        Range r(SubBlock::fc, Phase::fwd, l); // GELU fused as the epilogue
        matmul_forward(fch_gelu, ln2, params.fcw + (size_t)l * 4 * C * C, params.fcb + l * 4 * C, BT, C, 4 * C, fch,
                       stream);
    }
    {
        Range r(SubBlock::fc_proj, Phase::fwd, l);
        matmul_forward(a.proj_out, fch_gelu, params.fcprojw + (size_t)l * C * 4 * C, params.fcprojb + l * C, BT, 4 * C,
                       C, nullptr, stream);
    }
}

void GPT2GPU::backward(GradientReduce* reduce) {
    if (!backward_ready_) throw Error("backward() without a forward() with targets and dloss > 0 before it");
    backward_ready_ = false; // dlogits are consumed: a second backward would read them as logits
    backward_kernels(reduce);
}

void GPT2GPU::backward_kernels(GradientReduce* reduce) {
    // A profile sees the collectives' launches under the comm sub-block; one process adds no range at all.
    auto bucket_done = [reduce](int layer) {
        if (!reduce) return;
        Range r(SubBlock::comm, Phase::bwd, layer);
        reduce->layer_done(layer);
    };
    const int L = config.num_layers, C = config.channels, Vp = config.padded_vocab_size;
    const int b = cur_B_, t = cur_T_, BT = b * t;
    const size_t slab = (size_t)B * T;
    const ActivationTensors& a = acts;
    Range bwd("backward", -1, Phase::bwd);
    CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
    {
        Range r(SubBlock::classifier, Phase::bwd);
        matmul_backward(a.dbtc, grads.wte, nullptr, a.scratch, a.logits, a.lnf, params.wte, BT, C, Vp, nullptr, stream);
    }
    {
        Range r(SubBlock::lnf, Phase::bwd);
        layernorm_backward(a.dresidual, grads.lnfw, grads.lnfb, a.scratch, a.dbtc, a.residual2 + (L - 1) * slab * C,
                           params.lnfw, a.lnf_mean, a.lnf_rstd, BT, C, stream);
    }
    for (int l = L - 1; l >= 0; l--) {
        backward_layer(l);
        bucket_done(l);
    }
    {
        Range r(SubBlock::encoder, Phase::bwd);
        encoder_backward(grads.wte, grads.wpe, *encoder_scratch_, a.dresidual, a.inputs, b, t, C, stream);
    }
    bucket_done(-1);
}

void GPT2GPU::backward_layer(int l) {
    const int C = config.channels, NH = config.num_heads, b = cur_B_, t = cur_T_, BT = b * t;
    const size_t slab = (size_t)B * T;
    const ActivationTensors& a = acts;
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
        matmul_backward(a.dbt4c, grads.fcprojw + (size_t)l * C * 4 * C, grads.fcprojb + l * C, a.scratch, a.dresidual,
                        fch_gelu, params.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C, fch, stream);
    }
    {
        Range r(SubBlock::fc, Phase::bwd, l);
        matmul_backward(a.dbtc, grads.fcw + (size_t)l * 4 * C * C, grads.fcb + l * 4 * C, a.scratch, a.dbt4c,
                        a.ln2 + l * slab * C, params.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, nullptr, stream);
    }
    {
        Range r(SubBlock::ln2, Phase::bwd, l);
        layernorm_backward(a.dresidual, grads.ln2w + l * C, grads.ln2b + l * C, a.scratch, a.dbtc,
                           a.residual1 + l * slab * C, params.ln2w + l * C, a.ln2_mean + l * slab, a.ln2_rstd + l * slab,
                           BT, C, stream);
    }
    {
        Range r(SubBlock::attn_proj, Phase::bwd, l);
        matmul_backward(a.dbtc, grads.attprojw + (size_t)l * C * C, grads.attprojb + l * C, a.scratch, a.dresidual,
                        atty, params.attprojw + (size_t)l * C * C, BT, C, C, nullptr, stream);
    }
    {
        Range r(SubBlock::attention, Phase::bwd, l);
        attention_backward(a.dqkv, a.scratch, a.dbtc, atty, a.att_lse + l * slab * NH, qkv, b, t, NH, C / NH, stream);
    }
    {
        Range r(SubBlock::qkv, Phase::bwd, l);
        matmul_backward(a.dbtc, grads.qkvw + (size_t)l * 3 * C * C, grads.qkvb + l * 3 * C, a.scratch, a.dqkv, ln1,
                        params.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, nullptr, stream);
    }
    {
        Range r(SubBlock::ln1, Phase::bwd, l);
        layernorm_backward(a.dresidual, grads.ln1w + l * C, grads.ln1b + l * C, a.scratch, a.dbtc, residual,
                           params.ln1w + l * C, a.ln1_mean + l * slab, a.ln1_rstd + l * slab, BT, C, stream);
    }
}

void GPT2GPU::zero_grad() { CUDA_CHECK(cudaMemsetAsync(grads_memory, 0, memory.grads, stream)); }
void GPT2GPU::zero_loss() { CUDA_CHECK(cudaMemsetAsync(acts.scalars, 0, 2 * sizeof(float), stream)); }

void GPT2GPU::update(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_clip, int t,
                     GradientReduce* reduce) {
    // The last update's copy has read the staging buffer before it is written again.
    CUDA_CHECK(cudaEventSynchronize(adamw_copied_));
    *pinned_adamw_ = adamw_step(lr, beta1, beta2, t);
    CUDA_CHECK(cudaMemcpyAsync(acts.adamw_step, pinned_adamw_, sizeof(AdamWStep), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(adamw_copied_, stream));
    auto body = [&] { update_kernels(beta1, beta2, eps, weight_decay, grad_clip, reduce); };
    if (reduce) return body(); // collectives: eager
    update_graphs_.run(stream, {beta1, beta2, eps, weight_decay, grad_clip}, body);
}

void GPT2GPU::update_kernels(float beta1, float beta2, float eps, float weight_decay, float grad_clip,
                             GradientReduce* reduce) {
    {
        Range r(SubBlock::grad_norm, Phase::opt);
        global_norm_squared(acts.scalars + 1, acts.scratch, grads_memory + shard.begin, shard.size(), stream);
    }
    if (sharded() && reduce) {
        Range r(SubBlock::comm, Phase::opt);
        reduce->sum_norm(acts.scalars + 1);
    }
    {
        Range r(SubBlock::optimizer, Phase::opt);
        adamw_update_shard(config, shard, params_memory, master, grads_memory, m, v, acts.adamw_step, beta1, beta2,
                           eps, weight_decay, acts.scalars + 1, grad_clip, stream);
    }
    if (sharded() && reduce) {
        Range r(SubBlock::comm, Phase::opt);
        reduce->gather_params();
    }
}

std::pair<float, float> GPT2GPU::train_step(const NextBatch& next_batch, int b, int t, int grad_accum, float lr,
                                            const AdamWConfig& adam, int step, int ranks, GradientReduce* reduce) {
    if (ranks > 1 && !reduce) throw Error("train_step: several ranks need a GradientReduce");
    check_shape(b, t, "train_step");
    Range r("step");
    zero_grad();
    zero_loss();
    float scale = 1.0f / ((float)b * t * grad_accum * ranks); // mean over every position of every micro-batch
    for (int micro = 0; micro < grad_accum; micro++) {
        auto [inputs, targets] = next_batch();
        cur_B_ = b, cur_T_ = t;
        backward_ready_ = false;
        upload_tokens(inputs, targets, b * t);
        GradientReduce* last = ranks > 1 && micro == grad_accum - 1 ? reduce : nullptr;
        auto body = [&] {
            forward_kernels(true, scale, scale);
            backward_kernels(last);
        };
        if (last) body(); // collectives: eager
        else micro_graphs_.run(stream, {b, t, scale}, body);
    }
    if (ranks > 1) {
        Range comm(SubBlock::comm, Phase::bwd);
        reduce->finish(acts.scalars);
    }
    {
        Range opt("optimizer", -1, Phase::opt);
        update(lr, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.grad_clip, step, reduce);
    }
    fetch_scalars();
    last_ = {ranks > 1 ? 0 : grad_accum, scale, adam};
    return read_scalars();
}

void GPT2GPU::queue_last_step() {
    if (last_.grad_accum == 0) throw Error("queue_last_step: no single-process train_step before it");
    zero_grad();
    zero_loss();
    for (int micro = 0; micro < last_.grad_accum; micro++) {
        forward_kernels(true, last_.scale, last_.scale);
        backward_kernels(nullptr);
    }
    const AdamWConfig& a = last_.adam;
    update_kernels(a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip, nullptr);
}

void GPT2GPU::fetch_scalars() {
    CUDA_CHECK(cudaMemcpyAsync(pinned_scalars_, acts.scalars, 2 * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaEventRecord(scalars_ready_, stream));
}

std::pair<float, float> GPT2GPU::read_scalars() {
    CUDA_CHECK(cudaEventSynchronize(scalars_ready_));
    return {pinned_scalars_[0], std::sqrt(pinned_scalars_[1])};
}

std::vector<float> GPT2GPU::logits_row(int t) {
    std::vector<floatX> row(config.padded_vocab_size);
    CUDA_CHECK(cudaMemcpyAsync(row.data(), acts.logits + (size_t)t * config.padded_vocab_size,
                               row.size() * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> out(row.size());
    for (size_t i = 0; i < row.size(); i++) out[i] = __bfloat162float(row[i]);
    return out;
}

/*
 * Token ids go through one of two pinned buffers: the copy is asynchronous, so the buffer a pending copy reads must
 * not be rewritten; alternating lets the CPU fill the next batch while the last copy runs, and it only waits for
 * the copy issued two batches ago.
 */
void GPT2GPU::upload_tokens(const int* inputs, const int* targets, int n) {
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
void GPT2GPU::upload_shard(float* d, const float* h) const {
    const size_t n = shard.begin < num_params ? std::min(shard.end, num_params) - shard.begin : 0;
    CUDA_CHECK(cudaMemsetAsync(d, 0, shard.size() * sizeof(float), stream));
    if (n > 0) CUDA_CHECK(cudaMemcpyAsync(d, h + shard.begin, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}
std::vector<float> GPT2GPU::download(const float* d, size_t n) const {
    std::vector<float> h(n);
    CUDA_CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
}

prof::EnergyWork gpu_energy_work(GPT2GPU& g) {
    // The state the replays change, put back afterwards: one process's optimizer holds the whole model.
    auto master = std::make_shared<std::vector<float>>(g.get_master_weights());
    auto m = std::make_shared<std::vector<float>>(g.get_moments_m());
    auto v = std::make_shared<std::vector<float>>(g.get_moments_v());
    auto parts = std::make_shared<SubBlockGraphs>(g.stream, [&g] { g.queue_last_step(); });
    std::string why;
    cudaGraphExec_t exec = capture_graph(g.stream, [&g] { g.queue_last_step(); }, &why);
    if (!exec) throw Error("the step could not be captured as a graph (" + why + ")");
    using Exec = std::remove_pointer_t<cudaGraphExec_t>;
    std::shared_ptr<Exec> step(exec, [](cudaGraphExec_t e) { cudaGraphExecDestroy(e); });
    const cudaStream_t stream = g.stream;
    prof::EnergyWork w;
    for (size_t i = 0; i < parts->parts().size(); i++) {
        const SubBlockGraphs::Part& p = parts->parts()[i];
        const std::string layers = p.first_layer < 0 ? "-" : strprintf("%d-%d", p.first_layer, p.last_layer);
        w.targets.push_back({subblock_name((SubBlock)p.subblock), phase_name((Phase)p.phase), layers,
                             prof::EnergyKind::part, [parts, i](long n) { parts->replay(i, n); }});
    }
    w.targets.push_back({"step", "all", "-", prof::EnergyKind::step, [step, stream](long n) {
                             for (long i = 0; i < n; i++) CUDA_CHECK(cudaGraphLaunch(step.get(), stream));
                         }});
    w.clock.now_s = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    w.clock.sync = [stream] { CUDA_CHECK(cudaStreamSynchronize(stream)); };
    w.clock.idle = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
    w.restore = [&g, master, m, v, parts, step] {
        CUDA_CHECK(cudaStreamSynchronize(g.stream));
        g.set_parameters(master->data());
        g.set_moments(*m, *v);
    };
    return w;
}

// ------------------------------------------------------------------------------------------ the TrainBackend

namespace {

class GPUBackend : public TrainBackend {
public:
    // With -z 1 over several ranks the model keeps the optimizer state of this rank's shard only.
    GPUBackend(const GPT2Config& c, const TrainShape& shape, Communicator& comm)
        : cfg_(c), shape_(shape), comm_(comm), shards_(shape.zero ? comm.world() : 1) {
        int device;
        CUDA_CHECK(cudaGetDevice(&device));
#ifdef LLMC_HAVE_NCCL
        if (comm.world() > 1) {
            CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
            nccl_ = std::make_unique<NcclCommunicator>(comm, comm_stream_);
            // NVLink or PCIe within a node; across nodes the ring crosses the network, whose peak NVML does not
            // know: unknown then.
            if (comm.single_node()) {
                char bus_id[32];
                CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
                link_ = prof::nvml_link(bus_id);
            }
        }
#endif
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, device));
        name_ = strprintf("GPU bf16, %s", p.name);
        spec_ = lookup_device_spec(p.name);
    }
#ifdef LLMC_HAVE_NCCL
    ~GPUBackend() override {
        nccl_.reset();
        if (comm_stream_) cudaStreamDestroy(comm_stream_);
    }
#endif
    const char* name() const override { return name_.c_str(); }
    // CUPTI over the window, the ceilings measured (or their cache read) now: the model is not allocated yet.
    std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                          prof::ProfileContext ctx) override {
        ctx.memory = plan_gpu_training(cfg_, shape_.B, shape_.T, shards_);
        ctx.memory.grad_accum = ctx.grad_accum;
        std::unique_ptr<prof::ProfileSession> session = prof::make_gpu_profile_session(so, std::move(ctx));
        if (so.energy) {
            if (comm_.world() > 1) throw Error("--energy: measured on one process; this run has several");
            session->energy_work([this] { return gpu_energy_work(model()); });
        }
        return session;
    }
    void load_weights(const std::vector<float>& w) override {
        if (!model_) {
            if (shape_.cuda_graph && comm_.world() > 1 && comm_.rank() == 0)
                printf("--cuda-graph 1: the last micro-step of a data-parallel step and its update hand gradients to "
                       "the collectives and run eagerly\n");
            model_.emplace(cfg_, shape_.B, shape_.T, shards_ > 1 ? comm_.rank() : 0, shards_, shape_.cuda_graph);
        }
        model().set_parameters(w.data());
        if (model().sharded()) gather_params();
    }
    // The loop's contract (llmc/train/loop.h): the whole fp32 arrays on every rank, whatever -z is.
    std::vector<float> weights() override { return whole(model().get_master_weights()); }
    int model_file_version() const override { return MODEL_VERSION_BF16; }
    void get_moments(std::vector<float>& m, std::vector<float>& v) override {
        m = whole(model().get_moments_m());
        v = whole(model().get_moments_v());
    }
    void set_moments(const std::vector<float>& m, const std::vector<float>& v) override { model().set_moments(m, v); }
    // The cuBLASLt algorithm of every matmul problem (timed when it was first met; llmc/matmul.cuh): a resumed
    // run takes the same ones, so it continues bitwise as the interrupted run would have.
    void save_run_choices(const std::string& path) const override {
        const std::string text = gemm_choices_text();
        AtomicFile f(path);
        f.write(text.data(), text.size());
        f.commit();
    }
    void load_run_choices(const std::string& path) override {
        if (!file_exists(path)) {
            printf("resume: no %s; cuBLASLt algorithms are chosen again (the run may differ in its last bits from "
                   "the uninterrupted one)\n", path.c_str());
            return;
        }
        File f(path, "rb");
        const size_t n = f.size();
        if (n > (1u << 20)) throw Error(strprintf("%s: %zu bytes, more than a list of matmul algorithms", path.c_str(), n));
        std::string text(n, '\0');
        f.read(&text[0], n, "matmul algorithms");
        set_gemm_choices(text, path);
    }
    // MFU against the datasheet bf16 peak, and device memory in use (everything is allocated up front, so
    // this is the run's peak).
    std::string step_extras(double ms, long tokens) const override {
        std::string s;
        if (spec_) {
            const GPT2Config& c = model().config;
            double flops = gpt2_flops_per_token(model().num_params, c.num_layers, c.channels, shape_.T) * tokens;
            s += strprintf(" | MFU %.1f%%", 100.0 * flops / (ms * 1e-3) / (spec_->bf16_tflops * 1e12));
        }
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            s += strprintf(" | mem %.2f GiB", (total_b - free_b) / 1073741824.0);
        // --cuda-graph 1: of the step's micro-steps and update, those that were one graph launch each.
        if (shape_.cuda_graph) s += strprintf(" | graphs %ld/%d", step_graphs_.first, step_graphs_.second);
        return s;
    }
    void print_memory() const override {
        const GPUMemoryPlan& p = model().memory;
        auto mib = [](size_t b) { return b / 1048576.0; };
        std::string shard = model().sharded() ? strprintf(", this rank's 1/%d shard", comm_.world()) : "";
        printf("GPU memory: params %.0f MiB, grads %.0f MiB, optimizer (master, m, v%s) %.0f MiB, activations %.0f MiB "
               "(of %.0f MiB free); largest micro-batch at T=%d: %d\n",
               mib(p.params), mib(p.grads), shard.c_str(), mib(p.optimizer), mib(p.activations), mib(p.free_before), shape_.T,
               p.max_batch);
    }

    StepStats train_step(TokenBatches& train, int grad_accum, float lr, int t) override {
        check_batch_shape(train, shape_);
        const NextBatch next = [&train] {
            train.next_batch();
            return std::make_pair(train.inputs(), train.targets());
        };
        const int B = shape_.B, T = shape_.T;
        const long launched = model().graph_launches();
        step_graphs_ = {0, grad_accum + 1};
#ifdef LLMC_HAVE_NCCL
        if (nccl_) {
            // The step ends synchronised (its loss and norm are read): its collectives' timings are ready.
            std::pair<float, float> r;
            if (model().sharded()) {
                ShardedReduce reduce = sharded_reduce();
                r = model().train_step(next, B, T, grad_accum, lr, shape_.adam, t, nccl_->world(), &reduce);
            } else {
                BucketedAllReduce buckets(*nccl_, model().stream, model().config, model().grads_memory);
                r = model().train_step(next, B, T, grad_accum, lr, shape_.adam, t, nccl_->world(), &buckets);
            }
            nccl_->collect();
            step_graphs_.first = model().graph_launches() - launched;
            return {r.first, r.second};
        }
#endif
        auto [loss, norm] = model().train_step(next, B, T, grad_accum, lr, shape_.adam, t);
        step_graphs_.first = model().graph_launches() - launched;
        return {loss, norm};
    }

    float val_loss(DataLoader& val, int batches, Progress& progress) override {
        val.restore(DataPosition{}); // the same batches every time
        model().zero_loss();
        for (int i = 0; i < batches; i++) {
            val.next_batch();
            model().forward(val.inputs(), val.targets(), shape_.B, shape_.T, 1.0f / ((float)shape_.B * shape_.T * batches),
                            0.0f);
            progress.tick(i + 1, batches); // as the batches are queued
        }
        model().fetch_scalars();
        return model().read_scalars().first;
    }

    // The MPI communicator's own collectives (checkpoints' gathers, the profile's) and, over NCCL, the device's,
    // timed on the communication stream.
    CommStats comm_stats(const Communicator& comm) const override {
        CommStats s = comm.stats();
#ifdef LLMC_HAVE_NCCL
        if (nccl_) s += nccl_->device_stats();
#endif
        return s;
    }
    Link link() const override { return link_; }

private:
    // The model, from load_weights() on.
    GPT2GPU& model() {
        if (!model_) throw Error("GPU backend: the model is used before load_weights() allocated it");
        return *model_;
    }
    const GPT2GPU& model() const { return const_cast<GPUBackend*>(this)->model(); }
    // A -z 1 rank's shard (padding included) as the whole array (num_params) every rank gets. Through the MPI
    // communicator on the host, not NCCL: device memory is planned up front for training (print_memory is the
    // run's peak) and has no room for a whole fp32 copy, and the loop wants the arrays on the host anyway.
    std::vector<float> whole(const std::vector<float>& shard) {
        if (!model().sharded()) return shard;
        std::vector<float> full(model().padded_params);
        std::copy(shard.begin(), shard.end(), full.begin() + model().shard.begin);
        comm_.all_gather(full.data(), full.size()); // shard_of(padded_params): the model's shards
        full.resize(model().num_params);
        return full;
    }
    // -z 1: the bf16 parameters of every shard to every rank, after the model has set its own.
    void gather_params() {
#ifdef LLMC_HAVE_NCCL
        sharded_reduce().gather_params();
        CUDA_CHECK(cudaStreamSynchronize(model().stream));
        nccl_->collect();
#endif
    }
#ifdef LLMC_HAVE_NCCL
    ShardedReduce sharded_reduce() {
        return ShardedReduce(*nccl_, model().stream, model().params_memory, model().grads_memory, model().padded_params);
    }
#endif

    const GPT2Config cfg_;
    const TrainShape shape_;
    Communicator& comm_;
    const int shards_;              // ZeRO-1's optimizer shards: the ranks with -z 1, else 1
    std::optional<GPT2GPU> model_; // from load_weights() on: reached through model()
    Link link_; // what the collectives cross (data-parallel runs): NVLink or PCIe from NVML
#ifdef LLMC_HAVE_NCCL
    // Data-parallel runs only: the collectives run on comm_stream_ beside model().stream.
    cudaStream_t comm_stream_ = nullptr;
    std::unique_ptr<NcclCommunicator> nccl_;
#endif
    std::string name_;
    const DeviceSpec* spec_ = nullptr;
    std::pair<long, int> step_graphs_{0, 0}; // the last step's graph launches, of its micro-steps and update
};

/*
 * Data parallelism over NCCL (doc/distributed.md): one GPU per rank, chosen by local rank; each layer's gradients
 * are all-reduced on a stream of their own as soon as backward has finished them, or with -z 1 (ZeRO-1)
 * reduce-scattered after backward, each rank updating its shard and all-gathering the parameters.
 */
std::unique_ptr<TrainBackend> make_backend(const GPT2Config& c, const TrainShape& shape, Communicator& comm) {
    if (comm.world() > 1) {
#ifdef LLMC_HAVE_NCCL
        select_device(comm);
#else
        throw UsageError(strprintf("started as %d ranks, but train_gpt2cu was built without NCCL (or MPI): rebuild "
                                   "where both are found (doc/distributed.md)", comm.world()));
#endif
    }
    return std::make_unique<GPUBackend>(c, shape, comm);
}

// --memory-plan: every allocation of the model at -b and -t with the optimizer state in `shards`, and the largest
// micro-batch at this T that fits.
int print_training_memory_plan(const RunPlan& model, int shards) {
    const TrainOptions& opt = model.opt;
    if ((long)opt.B * opt.T > 2147483647L) throw UsageError("-b: B*T is more than the GPU trainer's int row count");
    MemoryPlan plan = plan_gpu_training(model.cfg, opt.B, opt.T, shards);
    plan.grad_accum = opt.grad_accum;
    const std::string title =
        strprintf("memory plan: train_gpt2cu -e %s -b %d -t %d%s (grad accumulation %d: no memory of its own)",
                  model.source.c_str(), opt.B, opt.T,
                  shards > 1 ? strprintf(", optimizer state in %d shards", shards).c_str() : "", opt.grad_accum);
    return print_memory_answer(title, plan, opt.device_memory, strprintf("micro-batch at T=%d", opt.T),
                               [&](size_t budget) { return largest_training_batch(model.cfg, opt.T, shards, budget); });
}

void require_training_gpu() { require_gpu("train_gpt2cu", "./train_gpt2 is the CPU trainer with the same flags"); }

} // namespace

TrainProgram gpu_train_program() {
    return TrainProgram{"train_gpt2cu",        TrainOptions{}, make_backend, print_training_memory_plan,
                        require_training_gpu, gpu_infer_program().make_backend, true};
}

} // namespace llmc
