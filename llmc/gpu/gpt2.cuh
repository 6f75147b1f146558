/*
 * The GPU GPT-2: bf16 parameters, activations and gradients, fp32 master weights and AdamW moments.
 *
 * Memory is four allocations, each carved by a table: parameters (bf16), parameter gradients (bf16),
 * optimizer state (fp32 master weights, m, v: of the whole model, or with ZeRO-1 of this rank's shard) and
 * activations (every forward tensor, the backward's gradient buffers and scratch, and the device-side inputs).
 * The activation table is sized for the largest (B, T) the model was built for; smaller shapes (sampling, short
 * val batches) reuse it with the same per-layer strides.
 *
 * Fusions, and what they mean for the sub-block names of llmc/model/subblocks.h: the residual adds run inside the
 * layernorm kernel that follows them (residual1 inside ln2, residual2 inside the next layer's ln1 or lnf),
 * and their backward is the accumulation into dresidual; GELU runs as cuBLASLt epilogues (forward inside fc,
 * backward inside fc_proj). Those sub-blocks have no kernels of their own on the GPU.
 */
#pragma once
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "llmc/adamw.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/gpu/step_graphs.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/memory_plan.h"
#include "llmc/model/optimizer.h"
#include "llmc/profiler/session.h"
#include "llmc/train/dist.h"

namespace llmc {

class EncoderBackwardScratch;

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
    AdamWStep* adamw_step; // the update's learning rate and bias corrections, copied in before each update
};

struct ActivationLayout {
    ActivationTensors t{};
    size_t bytes = 0;
};

// Carves the activation buffer (base may be null to only measure); with a plan, records every tensor in it as
// the plan's allocation "activations".
ActivationLayout layout_activations(char* base, const GPT2Config& c, int B, int T, MemoryPlan* plan = nullptr);

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
 * multiples of 8, so every slice is 16-byte aligned. step: the step's AdamWStep in device memory;
 * grad_norm_squared: device scalar (the global norm, squared).
 */
void adamw_update_shard(const GPT2Config& c, Shard s, floatX* params, float* master, const floatX* grads, float* m,
                        float* v, const AdamWStep* step, float beta1, float beta2, float eps, float weight_decay,
                        const float* grad_norm_squared, float grad_clip, cudaStream_t stream);

// 5% of free memory stays spare for the CUDA context, cuBLASLt's own allocations and fragmentation.
inline size_t memory_budget(size_t free_bytes) { return (size_t)(free_bytes * 0.95); }

/*
 * Every device allocation GPT2GPU makes for micro-batch (B, T), and every tensor in each (llmc/model/memory_plan.h):
 * the bf16 parameters and gradients (padded for ZeRO-1's shards), the optimizer state of this rank's shard
 * (fp32 master weights, AdamW m and v), the activation buffer (layout_activations), the encoder backward's sort
 * scratch with CUB's temporary storage, the process's cuBLASLt workspace, and the first step's transient autotune
 * scratch (the largest matmul that accumulates, timed on a D of its own). GPT2GPU allocates exactly these.
 */
MemoryPlan plan_gpu_training(const GPT2Config& c, int B, int T, int shards = 1);

// The largest micro-batch at sequence length T whose plan fits in `budget` bytes (0: not even B = 1).
int largest_training_batch(const GPT2Config& c, int T, int shards, size_t budget);

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
GPUMemoryPlan plan_gpu_memory(const GPT2Config& c, int B, int T, int shards = 1, size_t free_bytes = SIZE_MAX);

/*
 * --memory-plan's answer for a GPU program (no GPU needed): `title`, the plan's report (llmc/profiler/memory.h),
 * then the device memory it is checked against (`device_memory`, --device-memory, else the present GPU's free
 * memory), whether it fits, and the largest batch that fits (`largest_what`; largest_within(budget)). Returns 0.
 */
int print_memory_answer(const std::string& title, const MemoryPlan& plan, size_t device_memory,
                        const std::string& largest_what, const std::function<int(size_t budget)>& largest_within);

/*
 * What a training step hands the gradients to when it is one of several data-parallel ranks (llmc/train/
 * dist_nccl.cuh drives NCCL with it): each bucket of finished gradients as backward finishes it (layer_done: L-1
 * down to 0, then -1 for wte, wpe and lnf, layer_parameter_ranges), the step's loss and gradients before the
 * update (finish), and with ZeRO-1 the shard's squared norm (sum_norm) and the updated parameters (gather_params).
 */
class GradientReduce {
public:
    virtual ~GradientReduce() = default;
    virtual void layer_done(int /*layer*/) {}
    virtual void finish(float* loss) = 0; // loss: the device scalar
    virtual void sum_norm(float* /*norm_squared*/) {}
    virtual void gather_params() {}
};

// The token ids of a step's next micro-batch: {inputs, targets}, host pointers of B*T ids each.
using NextBatch = std::function<std::pair<const int*, const int*>()>;

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

    /*
     * Allocates the plan (plan_gpu_memory) for micro-batches up to (B_, T_), or throws an Error naming -b with the
     * largest that fits. shard_rank of shards: ZeRO-1, this device keeps the master weights and moments of
     * shard_of(padded_params) only; the default is the whole optimizer. cuda_graphs: train_step's micro-steps and
     * updates as CUDA graph launches (one process only: a step that hands gradients to a GradientReduce runs
     * eagerly).
     */
    GPT2GPU(const GPT2Config& c, int B_, int T_, int shard_rank = 0, int shards = 1, bool cuda_graphs = false);
    ~GPT2GPU();
    GPT2GPU(const GPT2GPU&) = delete;
    GPT2GPU& operator=(const GPT2GPU&) = delete;

    /*
     * The setters take the whole model's fp32 arrays (num_params values, llm.c order) and keep the shard's part;
     * the getters give the shard's (shard.size() values, its padding included). With ZeRO-1 the bf16 parameters
     * outside the shard are the other devices' to fill (an all-gather, as after an update).
     */
    // The fp32 master weights and the bf16 parameters [shard) from them.
    void set_parameters(const float* host_params);
    std::vector<float> get_master_weights() const { return download(master, shard.size()); }
    std::vector<float> get_moments_m() const { return download(m, shard.size()); }
    std::vector<float> get_moments_v() const { return download(v, shard.size()); }
    void set_moments(const std::vector<float>& mh, const std::vector<float>& vh);

    /*
     * Forward pass for a (b, t) batch of host token ids. With targets, per-position losses are computed and
     * loss_scale * sum(losses) is added to the step's loss accumulator; with dloss > 0 the classifier also
     * leaves dlogits = dloss * (probs - onehot) in place of the logits for backward(). Any shape with
     * b*t <= B*T fits: the per-layer slabs and every scratch are sized by B*T alone.
     */
    void forward(const int* inputs, const int* targets, int b, int t, float loss_scale, float dloss);

    /*
     * Backward of the last forward (which must have run with dloss > 0); parameter gradients accumulate. With
     * `reduce`, reduce->layer_done(l) is called, on the host, once the kernels that finish layer l's parameter
     * gradients are queued (GradientReduce), so a data-parallel trainer can start reducing them while backward
     * goes on.
     */
    void backward(GradientReduce* reduce = nullptr);

    void zero_grad();
    void zero_loss();

    /*
     * Global grad norm and AdamW on the shard's tensors; the clip factor never leaves the device, and the step's
     * learning rate and bias corrections are copied into acts.adamw_step first. With ZeRO-1 the norm is over the
     * shard's reduced gradients, summed over the ranks by reduce->sum_norm, and the updated parameters are gathered
     * by reduce->gather_params. Without a reduce it is one graph launch with cuda_graphs.
     */
    void update(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_clip, int t,
                GradientReduce* reduce = nullptr);

    /*
     * One optimizer step, as every program trains: grad_accum micro-batches of (b, t) from next_batch(); forward
     * and backward each, then the global norm and AdamW. Returns {mean loss, grad norm}; reading them is the
     * step's one synchronisation.
     *
     * Data parallelism (llmc/train/dist.h): this is one of `ranks` processes, each with grad_accum micro-batches;
     * every micro-batch weighs 1/(all of them). The last micro-batch's backward hands each finished bucket of
     * gradients to reduce->layer_done, which starts summing it over the ranks; reduce->finish(loss) sums the fp32
     * loss and makes this stream wait for every reduction, before the norm and the update. With ZeRO-1 (a model
     * of several shards) finish reduce-scatters the gradients instead, and update() calls sum_norm and
     * gather_params.
     *
     * With cuda_graphs and no reduce, each micro-batch's forward and backward is one graph launch (its tokens are
     * copied into acts.inputs and acts.targets first), and the update another: the same kernels in the same order as
     * the eager step, so the losses and the model are the same bit for bit.
     */
    std::pair<float, float> train_step(const NextBatch& next_batch, int b, int t, int grad_accum, float lr,
                                       const AdamWConfig& adam, int step, int ranks = 1,
                                       GradientReduce* reduce = nullptr);

    // Queues a copy of {loss, squared grad norm} to pinned memory; read_scalars() waits for it.
    void fetch_scalars();
    // {loss, grad norm} of the last fetch_scalars(); blocks until the GPU has got there (the step's one sync).
    std::pair<float, float> read_scalars();

    // Logits of position (0, t) from the last forward, as fp32 on the host (tests).
    std::vector<float> logits_row(int t);

    /*
     * --energy (llmc/profiler/energy.h): the last train_step's work queued again on the same buffers, eagerly: its
     * grad_accum micro-steps (all on the last micro-batch's tokens, which the device still holds), then the norm and
     * the update, each sub-block inside its Range, so SubBlockGraphs and capture_graph can split or capture it. It
     * changes the weights and moments as a step does (the caller restores them). Error before any train_step, or
     * after one with a GradientReduce (collectives are not replayed).
     */
    void queue_last_step();

    // Micro-steps and updates run as a graph launch, and graphs captured.
    long graph_launches() const { return micro_graphs_.launches() + update_graphs_.launches(); }
    long graph_captures() const { return micro_graphs_.captures() + update_graphs_.captures(); }

private:
    // The work of forward(), backward() and update() once their inputs are on the device, for the (cur_B_, cur_T_)
    // batch: they only queue work (the bodies of the graphs).
    void forward_kernels(bool targets, float loss_scale, float dloss);
    // An Error naming `what` when a (b, t) batch does not fit the allocation.
    void check_shape(int b, int t, const char* what) const;
    void backward_kernels(GradientReduce* reduce);
    void update_kernels(float beta1, float beta2, float eps, float weight_decay, float grad_clip,
                        GradientReduce* reduce);
    // One layer's sub-blocks of forward() and backward().
    void forward_layer(int l);
    void backward_layer(int l);
    void upload_tokens(const int* inputs, const int* targets, int n);
    // Copies between pageable host memory and fp32 device arrays, in order on `stream` and complete on return.
    // upload_shard: the shard's part of a whole host array (num_params values), padding zeroed.
    void upload_shard(float* d, const float* h) const;
    std::vector<float> download(const float* d, size_t n) const;

    // The last train_step's settings, for queue_last_step (grad_accum 0: none yet, or one with collectives).
    struct LastStep {
        int grad_accum = 0;
        float scale = 0;
        AdamWConfig adam;
    } last_;
    char* acts_memory_ = nullptr;
    std::unique_ptr<EncoderBackwardScratch> encoder_scratch_;
    int* pinned_tokens_ = nullptr;
    float* pinned_scalars_ = nullptr;
    AdamWStep* pinned_adamw_ = nullptr;
    cudaEvent_t scalars_ready_ = nullptr, adamw_copied_ = nullptr;
    cudaEvent_t slot_events_[2] = {nullptr, nullptr};
    bool slot_pending_[2] = {false, false};
    int slot_ = 0;
    int cur_B_ = 0, cur_T_ = 0;
    bool backward_ready_ = false;
    StepGraphs<std::tuple<int, int, float>> micro_graphs_;                   // by (b, t, loss scale)
    StepGraphs<std::tuple<float, float, float, float, float>> update_graphs_; // by the AdamW constants
};

/*
 * --energy's replays of a trained model's last step (llmc/profiler/session.h EnergyWork): each (sub-block, phase) of
 * queue_last_step() as its graphs (SubBlockGraphs), then the whole step as one graph; the clock is the host's, its
 * waits the model's stream; restore() puts back the weights and moments the replays changed. One process only.
 */
prof::EnergyWork gpu_energy_work(GPT2GPU& model);

} // namespace llmc
